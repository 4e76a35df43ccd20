package gate

import (
	"math/bits"
	"time"
)

// Fixed windows. Many providers and gateways count in clock-aligned windows
// that restart at each multiple of the window since the Unix epoch (a minute's
// count restarts at the top of each minute) rather than in a sliding window.
// Told so (ModelLimits.Windows), the gate counts as such a provider does: in
// the current aligned window, a call admitted within the count guard before
// an edge counting in the windows on both sides of it (the provider may count
// it a few milliseconds later, after the edge). A call that does not fit
// waits for the next edge, not for the calls of the last minute to age out:
// a sliding window holds a minute that straddles an edge to one budget where
// such a provider allows up to two, and a sliding view of its 429s reads
// anywhere between the two (so where a reading falls does not tell them from
// another client's traffic: not told, the gate learns fixed windows from what
// the provider states — its 429s' waits and its answers' token resets — and
// from what it served above a level it refused, below).
//
// Requests are counted in the fixed window as tokens are. What stays
// approximate: the reading subtracts every call not yet sent, also one
// admitted before the part began (a send later than the count guard past an
// edge: the reading is low by that call, the safe side); and the edges are the
// local clock's, so a provider's clock off by more than the count guard costs
// a 429 at an edge now and then.

// fixedPart is the part of a window's entries that the provider's current
// fixed window holds: the entries from sequence seq on (admitted at or after
// edge less guard), with the same sums the whole window keeps. It is kept as
// the entries change, so reading it is O(1); it is rebuilt once per edge (one
// walk over the entries since the edge before).
type fixedPart struct {
	on            bool
	window, guard int64 // the provider's window and the count guard (ns)
	edge          int64 // the current window's start, unix nanos
	seq           uint64
	tokens        int64
	requests      int // entries that are requests: not holes, not an output alone
	openCount     int
	openOutput    int64
	askedCount    int
	askedOutput   int64
}

// setFixed turns the fixed part on (window and guard: the provider's window
// and the count guard), counted for the window current at now, or off.
func (w *slidingWindow) setFixed(on bool, window, guard time.Duration, now time.Time) {
	if !on {
		w.fixed = fixedPart{}
		return
	}
	if w.fixed.on && w.fixed.window == int64(window) && w.fixed.guard == int64(guard) {
		return
	}
	w.fixed = fixedPart{on: true, window: int64(window), guard: int64(guard), seq: w.headSeq}
	w.fixed.rebuild(w, now.UnixNano())
}

// inFixed says whether entry seq is in the fixed part.
func (w *slidingWindow) inFixed(seq uint64) bool { return w.fixed.on && seq >= w.fixed.seq }

// advanceFixed moves the fixed part to the window current at now.
func (w *slidingWindow) advanceFixed(now time.Time) {
	f := &w.fixed
	if !f.on {
		return
	}
	at := now.UnixNano()
	if at >= f.edge && at < f.edge+f.window {
		return
	}
	if at < f.edge {
		f.seq = w.headSeq // the clock stepped back: recount from the oldest entry
	}
	f.rebuild(w, at)
}

// rebuild recounts the part for the window current at at: from the first
// entry admitted at or after its edge less the guard.
func (f *fixedPart) rebuild(w *slidingWindow, at int64) {
	f.edge = at - at%f.window
	cutoff := f.edge - f.guard
	f.seq = max(f.seq, w.headSeq)
	if f.seq > w.headSeq+uint64(w.n) {
		f.seq = w.headSeq + uint64(w.n)
	}
	end := w.headSeq + uint64(w.n)
	// Entries are in time order (holes aside): skip those before the cutoff.
	for ; f.seq < end; f.seq++ {
		e := w.entries[(w.head+int(f.seq-w.headSeq))%len(w.entries)]
		if e.at != holeAt && e.at >= cutoff {
			break
		}
	}
	f.tokens, f.requests, f.openCount, f.openOutput, f.askedCount, f.askedOutput = 0, 0, 0, 0, 0, 0
	for seq := f.seq; seq < end; seq++ {
		f.addEntry(w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)])
	}
}

// addEntry counts e in the part; removeEntry takes it out.
func (f *fixedPart) addEntry(e windowEntry) { f.count(e, 1) }

func (f *fixedPart) removeEntry(e windowEntry) { f.count(e, -1) }

func (f *fixedPart) count(e windowEntry, sign int64) {
	if e.at == holeAt {
		return
	}
	f.tokens += sign * e.tokens
	if e.open != outputOnly {
		f.requests += int(sign)
	}
	if e.open == 0 || e.open == outputOnly {
		return
	}
	out := max(e.open, -e.open) - 1
	f.openCount += int(sign)
	f.openOutput += sign * out
	if e.open < 0 {
		f.askedCount += int(sign)
		f.askedOutput += sign * out
	}
}

// fixedDrain is how long from now until a reservation of need fits under
// budget in the fixed window: 0, or until the next edge. It assumes expire(now)
// ran.
func (w *slidingWindow) fixedDrain(now time.Time, need, budget int64) time.Duration {
	if w.fixed.tokens+need <= budget {
		return 0
	}
	return w.fixed.untilEdge(now)
}

// fixedRequestDrain is requestDrain in the fixed window: 0 while one more
// request fits under budget, else until the next edge.
func (w *slidingWindow) fixedRequestDrain(now time.Time, budget int) time.Duration {
	if w.fixed.requests+1 <= budget {
		return 0
	}
	return w.fixed.untilEdge(now)
}

func (f *fixedPart) untilEdge(now time.Time) time.Duration {
	return time.Duration(f.edge + f.window - now.UnixNano())
}

// fixedWindowsLocked says the bucket counts in fixed windows: the user said
// the provider does (ModelLimits.Windows), or, while the user has not said,
// its 429s' stated waits or its answers' stated resets end at the edges
// (observeStatedWaitLocked, observeResetLocked), or its readings said so
// (fixedReadLocked). Not with
// a shared window: its entries are every instance's, counted in the store's
// sliding window.
func (b *bucket) fixedWindowsLocked() bool {
	if b.l.shared != nil {
		return false
	}
	return b.limits.Windows == WindowsFixed || (b.limits.Windows == "" && b.fixedLearned)
}

// fixedViewLocked is providerViewLocked in fixed windows: the current window's
// settled usage, and its calls in flight (on arrival) at their input and the
// output the model usually writes, as arrivalViewLocked counts them.
func (b *bucket) fixedViewLocked() float64 {
	if b.atCompletion {
		return float64(b.done.fixed.tokens)
	}
	return b.fixedArrivalViewLocked()
}

// fixedArrivalViewLocked is the arrival view of the current fixed window.
func (b *bucket) fixedArrivalViewLocked() float64 {
	f := &b.win.fixed
	view := f.tokens - b.unsent // the calls not yet sent are the newest: all in it
	switch {
	case b.decidesKnown():
	case b.agingLocked():
		view -= max(0, f.askedOutput-int64(f.askedCount)*b.est.meanOutput())
	default:
		if expected := b.est.meanOutput(); expected >= 0 {
			view -= max(0, f.openOutput-int64(f.openCount)*expected)
		}
	}
	return float64(max(view, 0))
}

// admitCountLocked is what the budget holds a call against: the window's
// reservations on arrival, its completed calls at completion — in fixed
// windows, those of the current one.
func (b *bucket) admitCountLocked() int64 {
	w := b.countedLocked()
	if b.fixedWindowsLocked() {
		return w.fixed.tokens
	}
	return w.tokens
}

// requestCountLocked is the requests the request budget holds a call against,
// in the same window.
func (b *bucket) requestCountLocked() int { return b.requestCountIn(b.atCompletion) }

// requestCountIn is requestCountLocked in the completion view or the arrival
// view.
func (b *bucket) requestCountIn(atCompletion bool) int {
	w := b.viewWindow(atCompletion)
	if b.fixedWindowsLocked() {
		return w.fixed.requests
	}
	return w.requests()
}

// requestDrainLocked is how long until one more request fits under the
// request budget: in fixed windows, 0 or the next edge. At completion the
// budget keeps room for the calls that may complete unseen (landing.go), as
// the token budget does — never below one request.
func (b *bucket) requestDrainLocked(now time.Time) time.Duration {
	budget := b.rpm
	if b.atCompletion {
		budget = max(1, budget-b.land.requestReserve(b.landingTripLocked(), budget))
	}
	if b.fixedWindowsLocked() {
		return b.countedLocked().fixedRequestDrain(now, budget)
	}
	return b.countedLocked().requestDrain(now, budget)
}

// Learned from the provider's own word. A fixed-window provider that computes
// its Retry-After (the time until its count, keyed by the window's index,
// restarts) names the instant its window restarts: the 429's time plus
// the wait is an edge, to the whole second the header carries, later by the
// 429's trip back. A sliding window's or a bucket's computed wait ends wherever
// the calls it holds leave or refill, and a constant wait (the window itself,
// as many providers and the simulator state) ends at the 429's own phase:
// neither points at an edge more than by chance (2.2 s in the window, 4% of a
// minute's). A short wait says little: the gate's own steps come a window
// apart, so its 429s can fall just before edges, and a wait of a second or two
// then ends at one (the simulator's token bucket did so twice in one burst).
// So a vote for fixed windows is a wait of at least a tenth of the window (one
// against them may be any wait shorter than the window), at most one vote each
// half window (a burst's 429s state one edge). fixedEdgeVotes such 429s in a row
// switch a model the user said nothing about to fixed windows, and as many
// waits in a row that end away from an edge switch it back (one could be a
// slow trip). A wrong switch costs the 429s a fixed count takes on a sliding
// window, until such waits undo it.
const (
	fixedEdgeVotes = 2
	// fixedEdgeSlack: how far from an edge a stated wait may end — the header's
	// whole seconds, rounded up or down. A wait may end later by the 429's
	// trip too: the admission→429 delay, up to a tenth of the window.
	fixedEdgeSlack = 1100 * time.Millisecond
	// fixedEdgeMinWindow: below it, a whole second is too coarse against the
	// window for the wait's end to say anything.
	fixedEdgeMinWindow = 10 * time.Second
	// fixedEdgeMinWait: a vote's wait, as a share of the window.
	fixedEdgeMinWait = 0.1
)

// observeStatedWaitLocked weighs a 429's stated wait as evidence of fixed
// windows (see fixedEdgeVotes); admitted is when the refused call was
// admitted (zero: unknown). It reports whether the model's windows changed.
func (b *bucket) observeStatedWaitLocked(now, admitted time.Time, wait time.Duration, fallback bool) bool {
	window := b.l.conf().Window
	if b.limits.Windows != "" || b.l.shared != nil || !b.learn.enabled || fallback ||
		wait <= 0 || wait >= window || window < fixedEdgeMinWindow {
		return false // the user said, or the wait says nothing of an edge
	}
	late := fixedEdgeSlack
	if !admitted.IsZero() && now.After(admitted) {
		late += min(now.Sub(admitted), window/10)
	}
	off := time.Duration(now.Add(wait).UnixNano() % int64(window))
	atEdge := off <= late || off >= window-fixedEdgeSlack
	ev := &b.fixedEv
	if atEdge == b.fixedLearned {
		ev.confirmed() // as it is
		return false
	}
	if (atEdge && float64(wait) < fixedEdgeMinWait*float64(window)) || (!ev.waitVoteAt.IsZero() && now.Sub(ev.waitVoteAt) < window/2) {
		return false // too short to tell (a fixed window's wait, short or long, ends at an edge), or the same burst
	}
	ev.waitVoteAt = now
	if ev.waitVotes++; ev.waitVotes < fixedEdgeVotes {
		return false
	}
	b.switchWindowsLocked(now, atEdge, false)
	return true
}

// switchWindowsLocked adopts fixed windows (or sliding ones) as learned;
// byReadings: fixed windows the readings voted for (fixedReadLocked).
func (b *bucket) switchWindowsLocked(now time.Time, fixed, byReadings bool) {
	b.fixedLearned, b.fixedEv, b.fixedByReadings = fixed, fixedEvidence{}, fixed && byReadings
	b.setSpanLocked(now, b.l.conf())
	b.forgetReadingsLocked() // read in the other window
	b.clearVotesLocked()
	b.forgetViewsLocked() // read against a sliding window
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.Reason = "windows", map[bool]string{true: WindowsFixed, false: WindowsSliding}[fixed]
	b.l.emit(e)
}

// fixedEvidence is what was gathered toward a switch of the windows: the
// stated waits in a row that voted for it, and the stated resets (and the
// eighths of the window their answers came in).
type fixedEvidence struct {
	readVotes   int // token 429s whose readings voted for fixed windows (fixedReadLocked)
	readVoteAt  time.Time
	waitVotes   int
	waitVoteAt  time.Time
	resetVotes  int
	resetVoteAt time.Time
	resetPhases uint8
}

// confirmed starts both counts again: evidence of either kind said the
// windows move as the bucket takes them to. (Each kind alone would let the
// other count across an hour of confirmations: two waits an hour apart are
// not two in a row.)
func (ev *fixedEvidence) confirmed() {
	ev.waitVotes, ev.resetVotes, ev.resetPhases, ev.readVotes = 0, 0, 0, 0
}

// From the answers' stated resets. A provider that states when its token count
// restarts (x-ratelimit-reset-tokens, anthropic-ratelimit-tokens-reset) names,
// in fixed windows, the next edge — on every answer, with no 429 needed. A
// sliding window's reset is when its newest call leaves, a bucket's when it
// is full again: they end wherever the calls put them. A duration counts from
// when the provider stated it, some moment between the call's admission (or
// send) and its answer (a provider may state the window as the call found it,
// and answer seconds later), so the reset names an instant within that span;
// an answer whose span is wider than a sixteenth of the window says too
// little and is not read — a non-streamed answer's headers come when the
// whole answer is written, so at a 60 s window only calls answered within
// 3.75 s (and streamed answers, whose headers come first) are read.
//
// A vote for fixed windows is an answer whose span, widened by the figure's
// rounding, reaches an edge; a vote for sliding windows one whose span misses
// every edge by more than a wait's slack too (fixedEdgeSlack: a provider
// whose clock is a second off, which the waits' slack allows, is no evidence
// against it); in between, no vote. At most one vote each eighth of a window,
// and fixedResetVotes in a row switch once their answers came in
// fixedResetPhases of the window's eighths or more: traffic locked to the
// clock (a burst at the top of each minute) makes a sliding window's resets
// end at the edges too, always from the same phase, and a fixed window's
// answers point at the edge from any. One answer the other way starts the
// count again.
//
// By chance, with phases that do not follow the clock, a sliding window's
// answer reaches an edge at most a sixteenth of the window plus twice the
// rounding of the time: at a 60 s window 6.6% for a figure to the
// millisecond (six in a row about once in ten million tries) and 9.9% for
// whole seconds ("59s", an RFC 3339 instant without a fraction: about once in
// a million); at a 10 s window, to the millisecond, 8.3% (once in three
// million). Whole seconds blur the edge to a second and are read only at
// windows of a minute or more.
const (
	fixedResetVotes = 6
	// fixedResetPhases: the eighths of the window the votes' answers must
	// have come in. Not more: a gate that counts a sliding window against a
	// fixed-window provider admits in the same third of each window (the
	// pacer spreads a window's budget over a third of it, and the calls
	// leave the window a window later), so its answers come in three
	// eighths; at four, two `.ci/run`s in four never took the windows.
	fixedResetPhases = 3
	// fixedResetSlack: how far an instant stated to the millisecond may miss
	// an edge either way (the provider's rounding and its clock's offset).
	fixedResetSlack = 100 * time.Millisecond
	// fixedResetCoarseWindow: the shortest window a reset in whole seconds
	// says anything of.
	fixedResetCoarseWindow = time.Minute
)

// observeResetLocked weighs an answer's stated token reset — an instant in
// [earliest, latest], read at now; coarse: stated in whole seconds — as
// evidence of fixed windows. It reports whether the model's windows changed.
func (b *bucket) observeResetLocked(now, earliest, latest time.Time, coarse bool) bool {
	window := b.l.conf().Window
	if b.limits.Windows != "" || b.l.shared != nil || !b.learn.enabled || window < fixedEdgeMinWindow ||
		(coarse && window < fixedResetCoarseWindow) || latest.Before(earliest) || latest.Sub(earliest) > window/16 ||
		!latest.After(now) || earliest.Sub(now) > window {
		return false // the user said, or the reset says nothing of an edge (an empty window's is now)
	}
	near := fixedResetSlack
	if coarse {
		near = fixedEdgeSlack
	}
	var atEdge bool
	switch {
	case reachesEdge(earliest, latest, near, window):
		atEdge = true
	case reachesEdge(earliest, latest, near+fixedEdgeSlack, window):
		return false // near an edge, not at it: a provider's clock may be that far off
	}
	ev := &b.fixedEv
	if atEdge == b.fixedLearned {
		ev.confirmed() // as it is
		return false
	}
	if !ev.resetVoteAt.IsZero() && now.Sub(ev.resetVoteAt) < window/8 {
		return false // too close to the last vote to be another answer's evidence (or the clock stepped back)
	}
	ev.resetVoteAt = now
	ev.resetPhases |= 1 << (8 * (now.UnixNano() % int64(window)) / int64(window))
	if ev.resetVotes++; ev.resetVotes < fixedResetVotes || bits.OnesCount8(ev.resetPhases) < fixedResetPhases {
		return false
	}
	b.switchWindowsLocked(now, atEdge, false)
	return true
}

// reachesEdge says whether [earliest − slack, latest + slack] holds an edge of
// the window's multiples since the Unix epoch.
func reachesEdge(earliest, latest time.Time, slack, window time.Duration) bool {
	from := earliest.Add(-slack).UnixNano()
	edge := from + (int64(window)-from%int64(window))%int64(window) // the first edge at or after from
	return edge <= latest.Add(slack).UnixNano()
}

// From the readings. A provider that states neither waits nor resets still
// tells fixed windows by what it serves: a sliding window never serves a
// level above one it refuses a moment later (another client's calls only
// lower what it serves), a fixed window does once its edge has passed. So a
// token 429 that refutes both sliding views (the provider served, within two
// windows, above the level it refused there, beyond each view's error: a
// provider that counts at completion refutes the arrival view alone) while
// the current fixed window explains it — that window served no more than it
// refused, and the refused level is the gate's own excess — is a vote, and
// fixedReadVotes of them switch a model the user said nothing about. The arrival view is the one read: a provider
// that counts in fixed windows counts a call when it arrives. A token bucket,
// or another client's calls, refutes each view in turn: a 429 that refutes
// the fixed view keeps the readings from voting for refuteMemory windows, and
// takes fixed windows learned this way back at once. docs/RATIONALE.md, "Why
// are fixed windows a setting, learned from what the provider states or
// serves?"

// fixedReadVotes: 429s a half window or more apart, with none that refuted
// the fixed view between them, that switch the windows. One is not enough:
// over real sockets, another client's backlog landing with the gate's own
// after a cooldown (AtTruthOutside) refuted both sliding views at a level its
// fixed window explained, and the switch cost a third 429 (0.776 of what the
// other client left, once learned, against 0.918 in the CI run before); in
// the simulator's matrix the second vote cost ten of the eighteen runs one
// vote gained.
const fixedReadVotes = 2

// fixedReadTolerance: how far, as a share of the level, a fixed window may
// have served above what it refused before that refutes it.
const fixedReadTolerance = 0.01

// fixedReadableLocked says whether the windows may be learned from the
// readings: the user has not said, no shared window, learning on, and a window
// long enough for its edges to say anything (fixedEdgeMinWindow).
func (b *bucket) fixedReadableLocked(cfg *Config) bool {
	return b.limits.Windows == "" && b.l.shared == nil && cfg.Learn && cfg.Window >= fixedEdgeMinWindow
}

// completionHeldLocked says the completion view is the user's, or a rate's
// or the headers' reading (a lone bucket's, not a fixed window's): no vote
// moves it.
func (b *bucket) completionHeldLocked(now time.Time) bool {
	if !b.atCompletion {
		return false
	}
	_, set := b.limits.countView()
	return set || b.rateViewHoldsLocked(now) || b.headersSayCompletionLocked()
}

// fixedReadLocked weighs a token 429's readings as evidence of fixed windows
// (admitted: when the refused call was admitted, zero if unknown; refused:
// what it reserved).
func (b *bucket) fixedReadLocked(now, admitted time.Time, refused int64) {
	cfg := b.l.conf()
	if !b.fixedReadableLocked(cfg) || !b.learn.enabled || !b.win.fixed.on || b.est.meanOutput() < 0 {
		return
	}
	if !admitted.IsZero() && admitted.UnixNano() < b.win.fixed.edge-b.win.fixed.guard {
		return // admitted in the window before: the current one does not hold what it met
	}
	span := cfg.Window
	v := b.refusedViewsLocked(now, admitted)
	r := float64(refused)
	fixed := b.fixedArrivalViewLocked()
	// The refused level is the gate's own excess, not a fraction of what it
	// held: as the views' vote asks, but of no more than the start, as a
	// sliding view's probes that passed over an edge raise the budget past a
	// fixed window's limit.
	level := suspectRatio * b.learn.budget()
	if b.learn.start > 0 {
		level = min(level, suspectRatio*b.learn.start)
	}
	arrivalRefuted := float64(b.servedArrival.max(now, span)) > v.arrival+r+v.arrivalSlack
	doneRefuted := float64(b.servedDone.max(now, span)) > v.completion+r+v.doneSlack
	// The fixed view's own error: besides the calls in flight, a call admitted
	// within the count guard before an edge counts on both sides of it.
	servedFixed := float64(b.servedFixed.max(now, span))
	fixedRefuted := servedFixed > fixed+r+max(v.arrivalSlack, fixedReadTolerance*servedFixed)
	if fixedRefuted {
		b.fixedRefutedAt = now
		b.fixedEv.readVotes = 0
	}
	switch {
	case b.fixedLearned && b.fixedByReadings && fixedRefuted:
		b.switchWindowsLocked(now, false, false)
		return
	case b.fixedLearned:
		return
	}
	// (A 429 that refutes the fixed view cannot vote: fixedRefutedAt is now.)
	if !arrivalRefuted || !doneRefuted || fixed+r+v.arrivalSlack < level || b.othersSpendingLocked(now) ||
		(!b.fixedRefutedAt.IsZero() && now.Sub(b.fixedRefutedAt) < refuteMemory*span) || b.completionHeldLocked(now) {
		return
	}
	ev := &b.fixedEv
	if !ev.readVoteAt.IsZero() && now.Sub(ev.readVoteAt) < span/2 {
		return // the same burst
	}
	ev.readVoteAt = now
	if ev.readVotes++; ev.readVotes < fixedReadVotes {
		return
	}
	if b.atCompletion {
		b.switchViewLocked(now, false) // fixed windows count a call on arrival
	}
	b.switchWindowsLocked(now, true, true)
	// What passed cleanly in the fixed windows is at most their served level,
	// not the sliding window's.
	if servedFixed > 0 {
		b.learn.cleanMax = min(b.learn.cleanMax, servedFixed)
	}
}
