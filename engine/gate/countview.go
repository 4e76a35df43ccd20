package gate

import "time"

// When the provider counts a call: on arrival (the default, and the safe view
// for fixed windows, and for token buckets until a rate is read — rate.go — or
// the remaining tokens read as a refill: headersview.go) or at completion. The
// bucket reads its window in one view, and each token 429 votes on which view
// explains it.

// providerViewLocked estimates what the provider counted in the window: settled
// usage as is, and for calls still in flight their input plus the output the model
// usually writes — not the output reserve, which may be a max_tokens far above what
// is written and would inflate the learner's readings. (A provider that decides
// on what it knows counts them at their input and max_tokens: that is what they
// reserve then, and what the view reads.) Both the
// 429 reading and the clean-window record use it, so the leak signal compares like
// with like. O(1): it is on the admission path.
func (b *bucket) providerViewLocked() float64 {
	if b.fixedWindowsLocked() {
		return b.fixedViewLocked() // (no sharedOthers: fixed windows are off with a shared window)
	}
	if b.atCompletion {
		return float64(b.done.tokens + b.sharedOthers)
	}
	return b.arrivalViewLocked() + float64(b.sharedOthers)
}

// arrivalViewLocked is providerViewLocked for a provider that counts on arrival:
// the calls sent within the window (the calls admitted and not yet sent have
// not reached it). An unsent call's share is fixed at its admission while the
// expected output moves on; over the milliseconds before a send the difference
// is a few tokens, and the view never reads below zero for it.
func (b *bucket) arrivalViewLocked() float64 {
	view := b.win.tokens - b.unsent
	switch {
	case b.decidesKnown():
		// the calls in flight hold what the provider counts of them already
	case b.agingLocked():
		// calls without max_tokens hold their expected output already
		view -= max(0, b.win.askedOutput-int64(b.win.askedCount)*b.est.meanOutput())
	default:
		if expected := b.est.meanOutput(); expected >= 0 {
			view -= max(0, b.win.openOutput-int64(b.win.openCount)*expected)
		}
	}
	return float64(max(view, 0))
}

// providerRequestsLocked is the requests the provider's window holds in the
// view the gate counts in: in the arrival view, less the calls not yet sent.
func (b *bucket) providerRequestsLocked() int { return b.providerRequestsIn(b.atCompletion) }

// providerRequestsIn is the requests the provider's window holds in the
// completion view, or in the arrival view less the calls not yet sent.
func (b *bucket) providerRequestsIn(atCompletion bool) int {
	n := b.requestCountIn(atCompletion)
	if !atCompletion {
		n -= b.unsentCount
	}
	return n
}

// servedRequestsLocked is the served request level of the view counted in.
func (b *bucket) servedRequestsLocked() *servedLevel {
	if b.atCompletion {
		return &b.servedReqDone
	}
	return &b.servedReqArrival
}

// clearVotesLocked forgets the evidence gathered toward a view switch, when the
// view was switched or set.
func (b *bucket) clearVotesLocked() {
	b.modeVotes, b.arrivalAlone, b.arrivalAloneAt = 0, 0, time.Time{}
}

// voteLocked weighs a token 429 as evidence of when the provider counts a
// call, refused is what the refused call reserved (0: unknown).
//
// The strong evidence is a refutation. A call the provider served tells, for
// each view, a level it accepted: the view when the call was admitted plus the
// call's real cost (servedLevel). A 429 tells a level it refused: the view now
// plus the refused call. A view in which the provider refused, within two
// windows, a level well below one it accepted cannot be how the provider
// counts. When the current view is refuted and the other is not, the view
// switches at once; when both are (outside traffic, a token bucket, fixed
// windows) the 429 says nothing about the view.
//
// When neither is refuted, a reading one view explains at least weakVoteRatio
// better is a weak vote; switchVotes net weak votes switch the view. On a
// switch the readings of the old view are forgotten (they measured the wrong
// thing) — but not the level it held: a reading far below that is still
// suspect.
//
// It reports whether the 429 refuted the view the bucket uses after the vote:
// the provider refused below a level it served in that view within two windows;
// and whether it refuted both.
func (b *bucket) voteLocked(now, admitted time.Time, refused int64) (refutedInUse, bothRefuted bool) {
	span := b.l.conf().Window
	v := b.refusedViewsLocked(now, admitted)
	arrival, completion, arrivalSlack, doneSlack := v.arrival, v.completion, v.arrivalSlack, v.doneSlack
	r := float64(refused)
	arrivalRefuted := float64(b.servedArrival.max(now, span)) > arrival+r+arrivalSlack
	doneRefuted := float64(b.servedDone.max(now, span)) > completion+r+doneSlack
	arrivalRaw, doneRaw := arrivalRefuted, doneRefuted
	defer func() {
		bothRefuted = arrivalRaw && doneRaw
		refutedInUse = arrivalRaw
		if b.atCompletion {
			refutedInUse = doneRaw
		}
	}()
	// A view the 429 switches to must explain it as the gate's own excess: read
	// there, the refused level is not far below the level the gate held. Outside
	// traffic refutes the arrival view too (the provider refused below what it
	// served), but the completion view, which leaves the calls in flight out, then
	// reads lower still.
	level := suspectRatio * b.learn.budget()
	arrivalRefuted = arrivalRefuted && completion+r+doneSlack >= level
	doneRefuted = doneRefuted && arrival+r+arrivalSlack >= level
	switch {
	case doneRefuted:
		b.doneRefutedAt = now
		b.arrivalAlone = 0 // counted since the completion view was last refuted
	case arrivalRaw && !doneRaw && (b.arrivalAloneAt.IsZero() || now.Sub(b.arrivalAloneAt) >= span):
		b.arrivalAlone++ // see arrivalAloneSwitch
		b.arrivalAloneAt = now
	}
	if _, set := b.limits.countView(); set {
		return // the user said how the provider counts
	}
	// A provider that a sliding window does not describe (a token bucket, fixed
	// windows) refutes each view in turn. Arrival, the default, counts the calls in
	// flight and is the safe one there: completion is adopted only if no 429 of
	// the last refuteMemory windows refuted it — or if, since one did, the arrival
	// view alone was refuted arrivalAloneSwitch times, a window or more apart.
	// (A 429 read by the rate, a lone bucket's, moves the view to completion
	// itself, and no vote moves it back for a while: rate.go, rateViewLocked.)
	doneRecentlyRefuted := !b.doneRefutedAt.IsZero() && now.Sub(b.doneRefutedAt) < refuteMemory*span
	switch {
	case arrivalRefuted && doneRecentlyRefuted && b.arrivalAlone < arrivalAloneSwitch:
		return
	case arrivalRefuted:
		b.modeVotes = switchVotes
	case doneRefuted:
		b.modeVotes = -switchVotes
	case completion > strongVoteRatio*arrival && completion+r+doneSlack >= level && !doneRaw && !doneRecentlyRefuted:
		b.modeVotes = switchVotes
	case completion > weakVoteRatio*arrival:
		b.modeVotes = max(b.modeVotes, 0) + 1
	case arrival > weakVoteRatio*completion:
		b.modeVotes = min(b.modeVotes, 0) - 1
	default:
		return
	}
	b.countVotesLocked(now)
	return
}

// countVotesLocked switches the view when the votes reached switchVotes for
// the other one.
func (b *bucket) countVotesLocked(now time.Time) {
	if b.rateViewHoldsLocked(now) {
		b.modeVotes = 0 // a lone bucket's rate moved the view: rate.go
		return
	}
	if b.modeVotes >= switchVotes && !b.atCompletion && b.headersSayArrivalLocked(now) {
		// The remaining tokens read as a window that counts the calls in
		// flight (decides.go): another client's calls vote as the gate's own.
		b.modeVotes = 0
		return
	}
	if b.modeVotes <= -switchVotes && b.atCompletion && b.headersSayCompletionLocked() {
		// The remaining tokens read as a count of completions, or a refill
		// (headersview.go): a 429 there is the limit's, not the view's.
		b.modeVotes = 0
		return
	}
	if (b.modeVotes >= switchVotes) != b.atCompletion && (b.modeVotes >= switchVotes || b.modeVotes <= -switchVotes) {
		b.switchViewLocked(now, b.modeVotes >= switchVotes)
	}
}

// switchViewLocked adopts the view a 429 voted for. The readings were taken
// in the other view (the run of 429s read as tokens stays: samecount.go).
func (b *bucket) switchViewLocked(now time.Time, atCompletion bool) {
	b.atCompletion = atCompletion
	if !atCompletion {
		b.rateViewAt = time.Time{}
	}
	b.clearVotesLocked()
	// The others' windows of readings: outside429Locked started them over.
	// Their moving mean was read in the other view: it starts over too.
	others := b.othersSpendingLocked(now)
	b.learn.forgetReadings()
	b.outside.others = othersSpend{}
	b.learn.toCompletion = b.atCompletion // for this 429's on429 only: rateLimitedLocked clears it
	// The trigger a switching token 429 reads is the bottom of a bracket in
	// the new view: it may take the first trigger's one step (learner.on429),
	// unless another client's calls land in that bracket too (docs/RATIONALE.md,
	// "Why does the switch to completion get the step again?").
	b.learn.stepAtSwitch = b.atCompletion && !others
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.Reason = "count-mode", map[bool]string{true: "at-completion", false: "on-arrival"}[b.atCompletion]
	b.l.emit(e)
}

// Request 429s vote too. A workload bound by requests may never meet a token
// 429, and on arrival the gate cannot count a provider that counts requests
// at completion: the arrival window drains a window after a cohort was
// admitted, while the provider holds the cohort until a window after it
// completed, so the queue the gate releases then is refused — a 429 every
// cooldown and a window, half the requests used (in the simulator, 20
// requests a 10 s window, configured at the truth, the view not told: up to 90
// 429s in 30 minutes); configured above it, each 429 met another count of
// calls in flight and set the request ceiling lower (down to 16 within two and
// a half minutes). The provider refuses at its own count, in its own view. So
// a request 429 is read as the token 429s are, against the served levels (the
// count a served call met, plus itself): requests are counted exactly, so a
// view in which the provider refused a count it served within two windows
// contradicts it (requestVote). A request 429 that contradicts one view and
// not the other is a vote for the other, as the token 429s' weak votes are;
// one whose served level reaches requestSlack past the refused count switches
// at once — to completion unless a token 429 refuted that view in the last
// refuteMemory windows. The way back matters for a token bucket of requests:
// with long calls, a probe step above its rate can be refused at the arrival
// count it served while the reserve lent it, twice, and the completions lag
// under theirs; switched, the next 429 comes at a completion count far under
// one served, and takes it back. Not when the user said how the provider
// counts, nor with a shared window (the counts are this instance's, the
// provider's everyone's), nor while learning is off.
func (b *bucket) voteRequestsLocked(now, admitted time.Time) {
	if !b.learn.enabled || b.l.shared != nil {
		return
	}
	if _, set := b.limits.countView(); set {
		return
	}
	span := b.l.conf().Window
	refusedA := b.requestsMetIn(now, admitted, false) // the refused call in it
	refusedD := b.requestsMetIn(now, admitted, true) + 1
	servedA, servedD := int(b.servedReqArrival.max(now, span)), int(b.servedReqDone.max(now, span))
	doneRecentlyRefuted := !b.doneRefutedAt.IsZero() && now.Sub(b.doneRefutedAt) < refuteMemory*span
	switch v := requestVote(refusedA, servedA, refusedD, servedD, doneRecentlyRefuted); {
	case v == 0:
		return
	case v == switchVotes || v == -switchVotes:
		b.modeVotes = v
	case v > 0:
		b.modeVotes = max(b.modeVotes, 0) + 1
	default:
		b.modeVotes = min(b.modeVotes, 0) - 1
	}
	b.countVotesLocked(now)
}

// requestVote is the vote a request 429 casts, from the counts it was refused
// at in each view (with the refused call) and the levels each served within
// two windows: for completion 1, or switchVotes; for arrival −1, or
// −switchVotes; 0 for neither. A view is contradicted when its served level
// reaches the refused count.
func requestVote(refusedA, servedA, refusedD, servedD int, doneRecentlyRefuted bool) int {
	arrivalContradicted, doneContradicted := servedA >= refusedA, servedD >= refusedD
	switch {
	case arrivalContradicted == doneContradicted:
		return 0
	case arrivalContradicted && servedA-refusedA >= requestSlack(servedA) && !doneRecentlyRefuted:
		return switchVotes
	case arrivalContradicted:
		return 1
	case servedD-refusedD >= requestSlack(servedD):
		return -switchVotes
	}
	return -1
}

// requestSlack is how far past a refused request count a served one must
// reach to refute the view at once: a request, or a twentieth of the count
// (the completion view sees a call complete a one-way trip after the provider
// counted it, and leave the window as much later; the arrival view keeps calls
// for the count guard).
func requestSlack(served int) int { return max(1, served/20) }

// The weak vote. At the 429s of the matrix's arrival-counting, fixed-window and
// bucket providers the completion view reads a median 0.86–1.00 of the arrival
// view; at a completion-counting provider's, 1.03–1.11, and the first 429 (a
// probe's) reads only 1.01–1.10 of it. With three votes at 10% the switch took
// five to thirty minutes of the arrival view's low readings; two at 5% take it
// at the second or third 429 (sliding-completion at the truth 0.890 → 0.899 of
// the true TPM over six seeds, 429s of the whole matrix 694 → 675).
const (
	weakVoteRatio = 1.05
	switchVotes   = 2
)

// strongVoteRatio: a 429 that the completion view reads this much above the
// arrival view switches at once (unless this 429, or one in the last
// refuteMemory windows, refuted the completion view). Over ten seeds of the
// matrix's 429s read on arrival, 30 of 308 on the completion-counting provider
// read 1.25 or more; on the arrival-counting and fixed-window providers none of
// 417 did, on the bucket 3 of 311 (at most 1.37).
// Such a 429 is the calls of an earlier window completing: read on arrival it
// set a trigger at 0.67–0.81 of the limit, and with no further 429 in the
// hour the second weak vote never came. Like a refutation, it switches only to
// a view that explains the 429 as the gate's own excess.
const strongVoteRatio = 1.25

// refuteMemory is how many windows a refutation of the completion view keeps the
// bucket from adopting it (unless arrivalAloneSwitch lifts it).
const refuteMemory = 10

// arrivalAloneSwitch: this many 429s, a window or more apart, that refute the
// arrival view alone lift the memory above. A bucket or fixed windows refute
// the views in turn; a provider that counts at completion, with another client
// on the key, refutes both once (the outside calls) and then the arrival view
// again and again — kept on arrival by the memory, it took a 429 every two
// windows for ten windows (the matrix's completion rows with outside traffic).
const arrivalAloneSwitch = 2

// servedLevel is the highest level a view held (plus the call's real cost) when
// it admitted a call the provider then served, over the last one to two
// windows: two maxima, the current one's and the one before.
type servedLevel struct {
	cur, prev int64
	curStart  time.Time
}

func (s *servedLevel) roll(now time.Time, span time.Duration) {
	switch d := now.Sub(s.curStart); {
	case d >= 2*span:
		s.cur, s.prev, s.curStart = 0, 0, now
	case d >= span:
		s.prev, s.cur, s.curStart = s.cur, 0, now
	}
}

// note records a served call's level.
func (s *servedLevel) note(now time.Time, level int64, span time.Duration) {
	s.roll(now, span)
	s.cur = max(s.cur, level)
}

// max is the highest level served in the last one to two windows.
func (s *servedLevel) max(now time.Time, span time.Duration) int64 {
	s.roll(now, span)
	return max(s.cur, s.prev)
}

// refusedViews is what a token 429 is read against: the arrival and completion
// views as the provider's own window held them when the refused call was
// admitted, and how far a refused level may honestly lie below a served one
// in each.
type refusedViews struct {
	arrival, completion     float64
	arrivalSlack, doneSlack float64
}

func (b *bucket) refusedViewsLocked(now, admitted time.Time) refusedViews {
	span := b.l.conf().Window
	// The views as the provider's own window holds them: without what the
	// gate's count guard keeps past the window — but with what it held when the
	// refused call was admitted. A 429 comes back a round trip later; when a
	// cohort admitted together leaves the window in between, the arrival view
	// read now has lost what the provider counted, and reads as refuted (the
	// completion view likewise, for calls that completed together). Entries
	// the count guard no longer keeps either cannot be read back.
	tail, doneTail := b.win.tail(), b.done.tail()
	if !admitted.IsZero() && admitted.Before(now) {
		cutoff := admitted.Add(-span).UnixNano()
		tail -= b.win.tailAfter(cutoff)
		doneTail -= b.done.tailAfter(cutoff)
	}
	arrival := b.arrivalViewLocked() - float64(tail)
	completion := float64(b.done.tokens - doneTail)
	// How far a refused level may honestly lie below a served one: the refused
	// call's own spread (its real output may exceed what it reserved), and the
	// view's error — the calls in flight counted at their expected output in the
	// arrival view; the settled calls are exact, only the network delay and
	// rounding blur the completion view.
	callVar := b.est.outputVariance(false, b.agingLocked())
	if b.decidesKnown() {
		callVar = 0 // the provider decided on the refused call's input and max_tokens, no output
	}
	callSlack := float64(b.marginOf(callVar))
	arrivalSlack := float64(b.marginOf(callVar + b.openVar))
	doneSlack := callSlack + baseMargin*b.learn.budget()
	return refusedViews{arrival: arrival, completion: completion, arrivalSlack: arrivalSlack, doneSlack: doneSlack}
}
