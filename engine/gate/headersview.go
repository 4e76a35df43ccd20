package gate

import (
	"math"
	"time"
)

// The count view, read from the rate-limit headers.
//
// What a provider states is left of its limit says what it counted: the limit
// less the remainder. Each answer's count is compared with the gate's two
// views of the window — the calls settled within it (completion) and the
// calls sent within it, those in flight at their expected cost (arrival) —
// as shares of the budget. In the steady state the two views hold about the
// same (the calls that left the arrival window but completed within the
// window make up for the calls in flight), so what tells providers apart is
// where the stated count sits:
//
//   - a sliding window counted on arrival counts about what either view holds
//     (in the simulator, 0.02 under the completion view, 0.01 under the
//     arrival view), another client's spend on top of that;
//   - one that counts a call once it completes counts what the completion view
//     holds, and the arrival view holds several percent more (0.02 and 0.08
//     under them);
//   - a token bucket, which refills as it goes, counts far less than either:
//     at the gate's pace it is nearly full (0.7 under both).
//
// When a hundred or so answers read as one of the last two — against the
// views both as the answer came and as its call was sent, since a provider
// may state its figures as of either moment — the model counts at
// completion. So it does when they state the completion view to the token as
// they come (viewEvidence.exact): a provider that counts at completion and
// states as it answers, the call counted. The first window's answers are
// read on their own, and twenty may move it (firstWindowSaysCompletion). The
// arrival view's margin for the calls in flight is room such a provider never
// needed: 0.93 of a bucket's limit against 0.96 at completion in the
// simulator. No 429 votes the arrival view back while the answers read so
// (countVotesLocked).
//
// Not when the user set countsAt, nor when the provider decides on what it
// knows (arrival books that exactly: rate.go), nor at fixed windows, with a
// shared window or with learning off. Only answers that name their call's
// send (CalibrateAnswer), while its reading is still kept, are read.

// viewEvidence is the recent answers' stated count less the completion view
// (c) and less the arrival view (a), each a share of the budget, as decayed
// sums.
type viewEvidence struct {
	w, c, a float64
	cc      float64 // c², decayed alike: how far single answers lie from the completion view
	n       int
}

func (v *viewEvidence) add(c, a float64) {
	k := decidesDecay
	v.w, v.c, v.a, v.cc = k*v.w+1, k*v.c+c, k*v.a+a, k*v.cc+c*c
	v.n++
}

// exact reports whether the answers, one by one, state what the completion
// view holds: their root mean square distance from it is within
// headersExactNear of the budget, and the arrival view holds more (calls in
// flight the provider did not count). A provider that counts at completion
// and states its figures as it answers does so to the token; nothing else
// does — a window counted on arrival states the calls in flight, which the
// answers landing since make up for only on average (0.07–0.13 of the
// budget from it, root mean square, in the simulator's first window), a bucket
// states its refill, another client's spend sits on top.
func (v *viewEvidence) exact() bool {
	return v.w > 0 && math.Sqrt(v.cc/v.w) <= headersExactNear && v.countsAt()
}

func (v *viewEvidence) enough() bool { return v.n >= decidesMinAnswers && v.w > 0 }

// counts reports whether the answers read as a count of completions.
func (v *viewEvidence) counts() bool { return v.enough() && v.countsAt() }

// countsAt reports whether the means read as a count of completions, however
// many answers they hold (at least one).
func (v *viewEvidence) countsAt() bool {
	c, a := v.c/v.w, v.a/v.w
	return v.w > 0 && c <= headersCompletionOver && a <= c-headersArrivalOver
}

// refills reports whether the answers read as a refill.
func (v *viewEvidence) refills() bool {
	return v.enough() && v.c/v.w <= -headersRefillUnder
}

const (
	// headersCompletionOver: the stated count may exceed the completion view
	// by this share of the budget on average (the answers' timing) and still
	// read as a count of completions.
	headersCompletionOver = 0.01
	// headersArrivalOver: for a count of completions, the arrival view must
	// hold at least this share of the budget more than the completion view
	// does — calls in flight the provider did not count.
	headersArrivalOver = 0.02
	// headersRefillUnder: a stated count this share of the budget or more
	// under the completion view is no window's: the provider refills.
	headersRefillUnder = 0.2
	// headersFirstAnswers: answers of the first window read before it
	// decides (firstWindowSaysCompletion); headersFirstNear: how far the
	// stated count's mean may lie from the completion view, at whichever of
	// the two moments is nearer, as a share of the budget.
	headersFirstAnswers = 20
	headersFirstNear    = 0.01
	// headersExactNear: how far single answers may lie from the completion
	// view (root mean square, a share of the budget) to read as stated
	// exactly from it (viewEvidence.exact).
	headersExactNear = 0.01
)

// viewsReadLocked reports whether the headers may move the view: the user
// did not set it, the provider is not taken to decide on what it knows, the
// windows slide, and the gate learns on its own window.
func (b *bucket) viewsReadLocked() bool {
	_, set := b.limits.countView()
	return !set && !b.decidesKnown() && !b.fixedWindowsLocked() && b.l.shared == nil && b.learn.enabled
}

// observeViewsLocked weighs one answer's stated count (in the window's units)
// against both views, now and as its call was sent (sent), and moves the view
// to completion when the answers read so both ways. The views are read as the
// provider's own window holds them: without what the count guard keeps past
// it. first: the answer came in the first window the headers were read
// (firstWindowSaysCompletion).
func (b *bucket) observeViewsLocked(now time.Time, counted float64, sent sendReading, first bool) {
	if !b.viewsReadLocked() {
		return
	}
	budget := float64(b.learnedTokenBudget())
	if budget <= 0 {
		return
	}
	v, s := &b.byViews, &b.byViewsAtSend
	if first {
		v, s = &b.firstViews, &b.firstViewsAtSend
	}
	done, arrival := b.viewsLocked()
	v.add((counted-done)/budget, (counted-arrival)/budget)
	s.add((counted-sent.done)/budget, (counted-sent.arrival)/budget)
	if !b.refillRead && b.byViews.refills() && b.byViewsAtSend.refills() {
		// The others' spend is read from the reserve's slope from now
		// (refillspend.go); what was read as a window's count goes.
		b.refillRead, b.outside.others = true, othersSpend{}
	}
	says := b.headersSayCompletionLocked()
	if first {
		says = firstWindowSaysCompletion(v, s)
	}
	if !b.atCompletion && says && !b.headersSayArrivalLocked(now) {
		b.completionByHeadersLocked(now)
	}
}

// firstWindowSaysCompletion reports whether the answers of the first window
// (now: v, at the send: s) read as a count of completions — the first window
// since the answers were last forgotten (the first answer, a reset, a change
// of the window's length). There the views are far apart (calls sent, few
// completed) and the completion view is exact: a provider that counts at
// completion states what it holds, at the moment it states it. So the mean at
// the nearer moment must lie within headersFirstNear of it, and both moments
// read as a count of completions. A sliding window counted on arrival states
// the calls in flight, far over the completion view then; fixed windows, not
// learned yet, restart at an edge, far under it. (One that decides on what
// it knows counts a call without max_tokens at its input alone, and with long
// outputs might read so; the decides fit takes the arrival view back once it
// reads that window plainly. Six hours of such a provider in the simulator,
// either moment, moved nothing.) A bucket may read so too — another client's
// spend can offset its refill — and completion suits a bucket. A provider
// that counts at completion and states as it answers reads, at the send,
// the completions since over the completion view, as a window counted on
// arrival and stating then reads the calls in flight; what tells them apart
// is the answers as they come, to the token (viewEvidence.exact) or several
// percent off it one by one. It is one window's reading: it holds no vote
// off.
func firstWindowSaysCompletion(v, s *viewEvidence) bool {
	if v.n < headersFirstAnswers || s.n < headersFirstAnswers {
		return false
	}
	near := math.Min(math.Abs(v.c/v.w), math.Abs(s.c/s.w)) <= headersFirstNear
	return (near && v.countsAt() && s.countsAt()) || v.exact()
}

// viewsLocked is the completion and the arrival view without the count
// guard's tail, as observeViewsLocked and readAtSendLocked compare them.
func (b *bucket) viewsLocked() (done, arrival float64) {
	return float64(b.done.tokens - b.done.tail()), b.arrivalViewLocked() - float64(b.win.tail())
}

// headersSayCompletionLocked reports whether the answers read, both ways, as a
// count of completions or as a refill (see above).
func (b *bucket) headersSayCompletionLocked() bool {
	if !b.viewsReadLocked() {
		return false
	}
	v, s := &b.byViews, &b.byViewsAtSend
	return (v.counts() && s.counts()) || (v.refills() && s.refills()) || (v.enough() && v.exact())
}

// forgetViewsLocked drops the answers read for the view: they were read
// against views that no longer describe the provider (another window, fixed
// windows, another way to decide), or the headers read the other way.
func (b *bucket) forgetViewsLocked() {
	b.byViews, b.byViewsAtSend = viewEvidence{}, viewEvidence{}
	b.firstViews, b.firstViewsAtSend = viewEvidence{}, viewEvidence{}
	if b.refillRead {
		b.refillRead, b.outside.others = false, othersSpend{} // read from the reserve: not a window's
	}
}

// completionByHeadersLocked adopts the completion view the headers read as.
// The readings of the arrival view go, as at any switch.
func (b *bucket) completionByHeadersLocked(now time.Time) {
	b.atCompletion = true
	b.clearVotesLocked()
	b.forgetReadingsLocked()
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.Reason = "count-mode", "at-completion"
	b.l.emit(e)
}
