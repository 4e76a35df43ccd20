package gate

import "time"

// The count view, read from the rate-limit headers.
//
// What a provider states is left of its limit says what it counted: the limit
// less the remainder. A provider that counts a call only once it completes
// never counted more than the completion view holds (the calls settled within
// the window); one that counts the calls in flight counted more, by about what
// they hold. A token bucket, which refills as it goes, counts less than
// either. So when the answers say, over a hundred of them, that the provider
// counted no more than the completion view holds, and clearly less than the
// arrival view, the completion view is the one that holds it — and the
// arrival view's margin for the calls in flight is room the gate leaves
// unused (0.93 of the limit against 0.96–0.97 told each view, in the
// simulator, at both of these providers).
//
// Another client on the key adds its spend to what the provider counted, so
// the evidence then leans to the arrival view, the safe one. A provider that
// decides on what it knows counts the calls in flight at their input, so it
// never reads as completion. The user's countsAt is never overridden.

// viewEvidence is the recent answers' stated count less the completion view
// and less the arrival view, each a share of the budget, as decayed sums.
type viewEvidence struct {
	w, c, a float64
	n       int
}

func (v *viewEvidence) add(c, a float64) {
	k := decidesDecay
	v.w, v.c, v.a = k*v.w+1, k*v.c+c, k*v.a+a
	v.n++
}

const (
	// headersCompletionOver: the stated count may exceed the completion view
	// by this share of the budget on average (the answers' timing) and still
	// read as a count of completions.
	headersCompletionOver = 0.01
	// headersArrivalOver: the arrival view must hold at least this share of the
	// budget more than the completion view does, past the stated count: calls
	// in flight the provider did not count.
	headersArrivalOver = 0.02
	// headersRefillUnder: a stated count this share of the budget or more
	// below the completion view is no window's: the provider refills (a token
	// bucket).
	headersRefillUnder = 0.2
)

// observeViewsLocked weighs one answer's stated count (in the window's units)
// against both views, now and as its call was sent (sent), and moves the view
// to completion when the answers say so read either way.
func (b *bucket) observeViewsLocked(now time.Time, counted float64, sent sendReading) {
	if _, set := b.limits.countView(); set || b.decidesKnown() {
		return
	}
	budget := float64(b.learnedTokenBudget())
	if budget <= 0 {
		return
	}
	b.byViews.add((counted-float64(b.done.tokens))/budget, (counted-b.arrivalViewLocked())/budget)
	b.byViewsAtSend.add((counted-sent.done)/budget, (counted-sent.arrival)/budget)
	if !b.atCompletion && b.headersSayCompletionLocked() {
		b.completionByHeadersLocked(now)
	}
}

// headersSayCompletionLocked reports whether the answers read as a provider
// that counts the calls as they complete (see above), against the views both
// now and as the calls were sent: a provider may state its figures as of
// either moment.
func (b *bucket) headersSayCompletionLocked() bool {
	return b.byViews.sayCompletion() && b.byViewsAtSend.sayCompletion()
}

func (v *viewEvidence) sayCompletion() bool {
	if v.n < decidesMinAnswers || v.w <= 0 {
		return false
	}
	c, a := v.c/v.w, v.a/v.w
	return c <= -headersRefillUnder || (c <= headersCompletionOver && a <= c-headersArrivalOver)
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
