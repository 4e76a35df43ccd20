package gate

import (
	"math"
	"time"
)

// Learning what the provider decides a call on, from its rate-limit headers.
//
// A provider that states what is left of its limit on each answer
// (x-ratelimit-remaining-tokens) says what it counted then: the limit less
// the remainder. The two ways a provider can decide (ModelLimits.Decides)
// count the calls in flight differently. Deciding on what it knows, it counts
// a call in flight at its input and max_tokens (none: its input alone);
// deciding on the whole cost, at what the call will write. Both count a
// settled call at its cost, as the gate does. So r, what the provider counted
// past the known count (the gate's window with each call in flight at its
// input and max_tokens), follows
//
//	D = each call in flight's expected output at its age (without max_tokens)
//	    − what a call in flight with max_tokens reserves past that
//
// A provider that decides on the whole cost counts about D more (r ≈ c + D);
// one that decides on what it knows does not (r ≈ c), where c is what the gate
// does not see (another client on the key, timing). The slope of r over D,
// fitted over the recent answers, says which: near 1, the whole cost; near 0,
// what it knows. Over an hour of the simulator's sliding window it reads
// 0.74–1.32 and −0.01–0.29 per hundred answers.
//
// The fit has a second term, I (what the known count holds of the calls in
// flight), and decides only when I's slope is near 0 and the fit leaves
// little: a provider that counts at completion holds no call in flight (I's
// slope near −0.5), and fixed windows (the count restarts at each edge) or a
// bucket (its refill) leave 4–30% of the budget unexplained, where a sliding
// window counted on arrival leaves 1–3%. There the mode stays as it is: the
// whole cost, the safe default. Only calls still in the provider's window
// count (a call in flight longer than the window is in neither count), and the
// first window and the one after a 429 are not read: a queue released at once
// fills the window with calls of one age, whose expected output the age model
// overstates. The user's `decides` is never overridden.
//
// When does a provider state what is left? OpenAI reserves a call's tokens
// when it creates the response and states the limits "reflecting that
// reservation": as of the call's arrival, though the answer carries them back
// a whole call later (a streamed one, at its first byte). A provider may as
// well state them as it answers. Read against the window as the answer
// arrives, figures stated at the arrival miss the calls admitted and settled
// in between: over real sockets (10 s windows, calls of one to two seconds)
// the fit left 3.5–5% of the budget unexplained and I's slope read +0.5, so it
// never decided — where read against the window as each call was sent it
// leaves under 0.5%. So each answer is read both ways — against the window
// now, and against the window as its call was sent (readAtSendLocked keeps a
// few hundred such readings a window) — and the fit that explains the
// answers better, the smaller residual, is the one that decides.

// decidesEvidence is the recent answers' D, I and r, as decayed sums.
type decidesEvidence struct {
	w, d, i, r, dd, ii, di, dr, ir, rr float64
	n                                  int       // answers since the last switch (or the bucket's birth)
	withSent                           int       // of them, answers that named their call's send
	since                              time.Time // the first answer read
	last                               time.Time // the last answer read
}

const (
	// decidesDecay weighs the answers: the last ~1/(1-decay) count.
	decidesDecay = 0.99
	// decidesMinAnswers: answers read before the slope decides, and after a
	// switch before it may switch back.
	decidesMinAnswers = 100
	// The slope below which the provider decides on what it knows, and above
	// which on the whole cost; between them the mode stays.
	decidesKnownBelow = 0.35
	decidesWholeAbove = 0.65
	// decidesMinSpread: D must have varied by at least this share of the
	// budget (its standard deviation) for its slope to mean anything.
	decidesMinSpread = 0.005
	// decidesMaxResidual: what the fit may leave unexplained (a standard
	// deviation), as a share of the budget, for its slopes to decide.
	decidesMaxResidual = 0.035
	// decidesSettle: windows after the first answer, and after a 429, whose
	// answers are not read (see observeDecidesLocked).
	decidesSettle = 1
	// decidesPerWindow: at most this many answers a window are read.
	decidesPerWindow = 300
	// decidesMaxSlopeI: how far from 0 I's slope may lie for D's to decide.
	decidesMaxSlopeI = 0.35
)

// observeDecidesLocked reads one answer's remaining tokens (per minute, as the
// headers state them, with the stated limit) as evidence of what the provider
// decides on, and switches the bucket's mode when the evidence is clear.
func (b *bucket) observeDecidesLocked(now, sent time.Time, limitTokens, remainingTokens int64) {
	if b.l.shared != nil || !b.learn.enabled || b.fixedWindowsLocked() {
		return // the entries are another's to size, or the fit (a sliding window) cannot describe fixed windows
	}
	if b.sends == nil {
		// The calls sent from now are read as they leave (near and
		// readAtSendLocked take nil): for the fit, the view and the others'
		// spend (outside.go), whatever the user set.
		b.sends = &sendReadings{}
	}
	mean := b.est.meanOutput()
	if mean < 0 {
		return // nothing settled yet: no expected output to weigh
	}
	span := b.l.conf().Window
	e := &b.decides
	if !e.last.IsZero() && now.Sub(e.last) < span/decidesPerWindow && !now.Before(e.last) {
		return // each reading walks the calls in flight: a few hundred a window are plenty
	}
	e.last = now
	if e.since.IsZero() {
		e.since = now
	}
	first := now.Sub(e.since) < decidesSettle*span
	if first || (!b.last429.IsZero() && now.Sub(b.last429) < decidesSettle*span) {
		// The first window, and a 429's cooldown and the queue its end
		// releases at once, fill the window with calls of one age: the
		// expected output of a young call (a mean over the calls in flight,
		// where long ones are many) overstates what such a cohort writes.
		// Read the steady state only — but for the view, the first window
		// (headersview.go: a count of completions reads plainly there).
		if first {
			if r, ok := b.answerAtSendLocked(now, sent, limitTokens, remainingTokens); ok {
				b.observeViewsLocked(now, r.counted, r.sendReading, true)
			}
		}
		return
	}
	r, found := b.answerAtSendLocked(now, sent, limitTokens, remainingTokens)
	counted, atSend := r.counted, r.sendReading
	if found {
		b.observeViewsLocked(now, counted, atSend, false) // which view holds what it counted (headersview.go)
	}
	if b.limits.Decides != "" {
		return // the user said what it decides on
	}
	known, d, in := b.knownCountLocked(now, mean)
	e.add(d, in, counted-known)
	if !sent.IsZero() {
		e.withSent++
		if found {
			b.decidesAtSend.add(atSend.d, atSend.in, counted-atSend.known)
		}
	}
	if e.n < decidesMinAnswers {
		return
	}
	slopeD, slopeI, resid, ok := b.decidesFitLocked()
	if !ok {
		return
	}
	// Only a window the headers describe as the gate counts it — a sliding
	// window counted on arrival — gives a reading this plain: what the fit
	// leaves is a percent or two of the budget there; at fixed windows (their
	// count restarts at each edge), a bucket (its refill) or a provider that
	// counts at completion (it holds no call in flight: I's slope reads −0.5 on
	// average, anywhere from 0 to −1.4) it is several times that, and the
	// slopes say nothing.
	fits := resid < decidesMaxResidual*float64(b.learnedTokenBudget()) && math.Abs(slopeI) < decidesMaxSlopeI
	// And for the view, a D slope of one of the two ways to decide, not a fit
	// whose D took what I's slope left.
	if fits && slopeD > -decidesKnownBelow && slopeD < 1+decidesKnownBelow {
		b.headersFitAt = now
		if _, set := b.limits.countView(); b.atCompletion && !set && !b.headersSayCompletionLocked() {
			b.arrivalByHeadersLocked(now)
			return
		}
	}
	switch {
	case fits && slopeD < decidesKnownBelow && !b.decidesLearnedKnown && !b.headersSayCompletionLocked():
		// (Not while the answers read as a count of completions or a refill:
		// no window that counts the calls in flight at their input.)
		b.switchDecidesLocked(now, true, slopeD)
	case b.decidesLearnedKnown && (!fits || slopeD > decidesWholeAbove):
		b.switchDecidesLocked(now, false, slopeD) // no longer clear: the safe default
	}
}

// statedAnswer is an answer's stated count (in the window's units) with the
// reading taken as its call was sent.
type statedAnswer struct {
	counted float64
	sendReading
}

// answerAtSendLocked reads an answer's stated count, the window brought up
// to now, and finds the reading taken as its call was sent (ok: one was kept
// within the gap). The count is set either way.
func (b *bucket) answerAtSendLocked(now, sent time.Time, limitTokens, remainingTokens int64) (statedAnswer, bool) {
	span := b.l.conf().Window
	a := statedAnswer{counted: float64(scaleLimit(limitTokens-remainingTokens, span))}
	if limitTokens == remainingTokens {
		a.counted = 0
	}
	b.expireLocked(now)
	var ok bool
	a.sendReading, ok = b.sendReadingLocked(sent)
	return a, ok
}

// sendReadingLocked is the reading kept as a call sent at sent left (ok: one
// was kept near enough; never for a send not named, sent zero).
func (b *bucket) sendReadingLocked(sent time.Time) (sendReading, bool) {
	if sent.IsZero() {
		return sendReading{}, false
	}
	return b.sends.near(sent.UnixNano(), int64(2*b.l.conf().Window/decidesPerWindow))
}

// decidesFitLocked fits the answers read as they arrived and, once as many
// were read against the window as their calls were sent, those too; the fit
// that leaves less unexplained is the moment the provider states its figures.
func (b *bucket) decidesFitLocked() (slopeD, slopeI, resid float64, ok bool) {
	minSpread := decidesMinSpread * float64(b.learnedTokenBudget())
	if b.decidesAtSend.n < decidesMinAnswers && 2*b.decides.withSent > b.decides.n {
		// Most answers named their send, and too few of them found its
		// reading yet (calls longer than the ring reaches): not the fit as
		// they arrive alone, which swings if the figures are stated at the
		// arrival.
		return 0, 0, 0, false
	}
	slopeD, slopeI, resid, ok = b.decides.slopes(minSpread)
	if b.decidesAtSend.n < decidesMinAnswers {
		return slopeD, slopeI, resid, ok
	}
	if sd, si, r, sok := b.decidesAtSend.slopes(minSpread); sok && (!ok || r < resid) {
		return sd, si, r, true
	}
	return slopeD, slopeI, resid, ok
}

// forgetDecidesEvidenceLocked drops the answers read so far and the readings
// taken as calls were sent: the mode they were read in, or the window's
// length, changed.
func (b *bucket) forgetDecidesEvidenceLocked() {
	b.decides, b.decidesAtSend, b.sends = decidesEvidence{}, decidesEvidence{}, nil
	b.forgetViewsLocked()
}

// readAtSendLocked keeps, as a call leaves for the provider at now, what the
// window holds then — the known count, D and I — so that the remaining
// tokens its answer states as of its arrival are read against it
// (observeDecidesLocked). A few hundred a window, only once the headers have
// stated what is left.
func (b *bucket) readAtSendLocked(now time.Time) {
	r := b.sends
	if r == nil || b.fixedWindowsLocked() {
		return // (at fixed windows the answers are not read: observeDecidesLocked)
	}
	mean := b.est.meanOutput()
	if mean < 0 {
		return
	}
	at := now.UnixNano()
	if last, ok := r.newest(); ok && at >= last.at && at-last.at < int64(b.l.conf().Window/decidesPerWindow) {
		return
	}
	known, d, in := b.knownCountLocked(now, mean)
	done, arrival := b.viewsLocked()
	r.add(sendReading{at: at, known: known, d: d, in: in, arrival: arrival, done: done, own: b.ownSpentLocked()})
}

// knownCountLocked is the gate's window at now as a provider deciding on what
// it knows counts it — each call in flight at its input and max_tokens — with
// D and I of the calls in flight (inFlightCountsLocked). The calls in flight
// without max_tokens hold their reserved output in the whole mode and none in
// the known one: it comes off either way.
func (b *bucket) knownCountLocked(now time.Time, mean int64) (known, d, in float64) {
	d, in, unaskedOutput := b.inFlightCountsLocked(now, mean)
	return float64(b.win.tokens-b.unsent-b.win.tail()) - unaskedOutput, d, in
}

// sendReadings is a ring of the window's known count, D and I as calls were
// sent, newest last. Its stamps are wall-clock nanoseconds as the callers name
// the sends (Sent's answer) and, unlike the window's, are not moved on a clock
// step (followClockLocked): an answer names its send in the frame it was
// taken in. After a step back, a call in flight across it may miss its reading
// (near stops at the first older one) and is read as it arrives only. 256 readings, at most decidesPerWindow a window, reach
// back most of a window when calls are many, further when they are fewer:
// an answer whose call's reading has gone is read as it arrives only.
type sendReadings struct {
	r    [256]sendReading
	next int // where the next reading goes
	n    int // readings held, up to len(r)
}

type sendReading struct {
	at            int64 // unix nanos of the send
	known, d, in  float64
	arrival, done float64 // the two views then (headersview.go)
	own           float64 // the gate's spend so far then (refillspend.go)
}

func (s *sendReadings) add(x sendReading) {
	s.r[s.next] = x
	s.next = (s.next + 1) % len(s.r)
	s.n = min(s.n+1, len(s.r))
}

func (s *sendReadings) newest() (sendReading, bool) {
	if s == nil || s.n == 0 {
		return sendReading{}, false
	}
	return s.r[(s.next-1+len(s.r))%len(s.r)], true
}

// near returns the reading taken nearest to at, if one was within gap of it.
func (s *sendReadings) near(at, gap int64) (sendReading, bool) {
	if s == nil {
		return sendReading{}, false
	}
	var best sendReading
	found := false
	for k := 1; k <= s.n; k++ {
		x := s.r[(s.next-k+len(s.r))%len(s.r)]
		if diff := abs(x.at - at); diff <= gap && (!found || diff < abs(best.at-at)) {
			best, found = x, true
		}
		if x.at < at-gap {
			break // older ones are further still
		}
	}
	return best, found
}

// arrivalByHeadersLocked takes the arrival view back when the headers read as a
// sliding window that counts the calls in flight: the 429s had voted the
// completion view in (another client's calls on the key refute the arrival
// view as the gate's own would), and the trigger read there held the gate to
// half the limit for hours. The readings of the completion view go. No vote
// takes the completion view again while the fit keeps reading so, and for
// refuteMemory windows after (headersSayArrivalLocked). The fit needs its
// hundred answers again before it decides anything more.
func (b *bucket) arrivalByHeadersLocked(now time.Time) {
	b.atCompletion, b.rateViewAt = false, time.Time{}
	b.clearVotesLocked()
	b.forgetReadingsLocked()
	b.decides.n, b.decides.withSent, b.decidesAtSend.n = 0, 0, 0
	b.forgetViewsLocked() // they read the other way: a hundred answers again before they move it back
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.Reason = "count-mode", "on-arrival"
	b.l.emit(e)
}

// headersSayArrivalLocked reports whether the remaining tokens read, within
// refuteMemory windows, as a sliding window that counts the calls in flight.
func (b *bucket) headersSayArrivalLocked(now time.Time) bool {
	return !b.headersFitAt.IsZero() && now.Sub(b.headersFitAt) < refuteMemory*b.l.conf().Window
}

// switchDecidesLocked adopts what the headers say the provider decides on, as
// a reload that changes `decides` does: the readings in the old units go (the
// level that held stays), and the waiters are sized again; calls in flight
// keep what they reserved.
func (b *bucket) switchDecidesLocked(now time.Time, known bool, slope float64) {
	b.decidesLearnedKnown = known
	b.decides.n, b.decides.withSent, b.decidesAtSend.n = 0, 0, 0
	b.forgetViewsLocked() // read in the other units
	b.forgetReadingsLocked()
	b.resizeWaitersLocked()
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.Reason = "decides", map[bool]string{true: DecidesKnown, false: DecidesWhole}[known]
	e.To = slope // the slope of what the provider counted past the known count over D
	b.l.emit(e)
}

// add weighs in one answer's D, I and r, the older ones decayed.
func (e *decidesEvidence) add(d, i, r float64) {
	k := decidesDecay
	e.w, e.d, e.i, e.r = k*e.w+1, k*e.d+d, k*e.i+i, k*e.r+r
	e.dd, e.ii, e.di = k*e.dd+d*d, k*e.ii+i*i, k*e.di+d*i
	e.dr, e.ir, e.rr = k*e.dr+d*r, k*e.ir+i*r, k*e.rr+r*r
	e.n++
}

// slopes fits r = c + slopeD·D + slopeI·I over the decayed answers; ok is
// false while D or I has not varied by minSpread (a standard deviation) or
// the two move together too closely to be told apart.
func (e *decidesEvidence) slopes(minSpread float64) (slopeD, slopeI, resid float64, ok bool) {
	md, mi, mr := e.d/e.w, e.i/e.w, e.r/e.w
	vd, vi := e.dd/e.w-md*md, e.ii/e.w-mi*mi
	cdi := e.di/e.w - md*mi
	cdr, cir := e.dr/e.w-md*mr, e.ir/e.w-mi*mr
	det := vd*vi - cdi*cdi
	if vd <= minSpread*minSpread || vi <= minSpread*minSpread || det <= 0.01*vd*vi {
		return 0, 0, 0, false
	}
	slopeD, slopeI = (cdr*vi-cir*cdi)/det, (cir*vd-cdr*cdi)/det
	vr := e.rr/e.w - mr*mr
	return slopeD, slopeI, math.Sqrt(max(0, vr-slopeD*cdr-slopeI*cir)), true
}

// inFlightCountsLocked is, over the calls in flight at the provider, D (what
// a provider deciding on the whole cost counts of them past what one
// deciding on what it knows does: each call's expected output at its age —
// mean, the recent mean, without a model of ages — less the max_tokens a call
// reserved past that) and I (what the known count holds of them: their input
// and max_tokens).
func (b *bucket) inFlightCountsLocked(now time.Time, mean int64) (d, in, unaskedOutput float64) {
	ages := b.est.model.agesOK
	inner := b.win.inner
	if inner <= 0 {
		inner = b.win.span
	}
	from := now.UnixNano() - int64(inner)
	for i := range b.slots {
		s := &b.slots[i]
		if !s.open || s.sendPending || s.admitted <= from {
			continue // not at the provider yet, or out of its window: in neither count
		}
		expected := float64(mean)
		if ages {
			expected, _ = b.est.model.moments(b.est.model.floorAt(float64(now.UnixNano()-s.admitted) / 1e9))
		}
		in += float64(s.input)
		if s.asked {
			in += float64(s.output)
			d -= max(0, float64(s.output)-expected)
		} else {
			d += expected
			unaskedOutput += float64(s.output)
		}
	}
	return d, in, unaskedOutput
}
