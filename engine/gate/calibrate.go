package gate

import (
	"time"

	"github.com/gatectl/gatectl/engine"
)

// rateLimitPeriod is the period providers state their limits over: OpenAI's
// x-ratelimit-limit-tokens and Anthropic's anthropic-ratelimit-tokens-limit are
// per minute.
const rateLimitPeriod = time.Minute

// Calibrate adopts the limits a provider states in its response headers
// (x-ratelimit-limit-tokens/-requests, anthropic-ratelimit-*-limit) for
// provider/model at now. A stated limit is the truth the learner otherwise has
// to find with 429s, so it replaces the guess directly:
//
//   - limitTokens > 0: the learned quota and its starting point become the
//     stated limit, scaled from per minute to the gate's window; a tightest
//     trigger learned from 429s is dropped (the stated limit supersedes it).
//     Later 429s still cut the quota as usual, and what they teach stays while
//     answers restate the same figure: a 429 below a stated limit is another
//     client's spend on the key (or timing), and the trigger it sets is what is
//     left to the gate. Only a new figure is adopted again.
//   - limitRequests > 0: the model's RPM budget becomes the stated limit (scaled
//     likewise), times the safety factor as for a configured RPM.
//
// remainingTokens and remainingRequests are what the provider says is left in its
// own window; negative means not sent. A remaining above its limit marks the
// header set as inconsistent and the call is ignored whole. The ledger's window
// already holds what gatectl sent; the remaining tokens say what the provider
// counted of the calls in flight, and so, while the user has not said, what it
// decides a call on (decides.go).
//
// A limit ≤ 0 leaves that part as it is. Calibrate emits a learn event with Step
// "calibrate" when the stated limit moved the learned budget (the room the
// others leave moves the budget without one: the status shows it as
// othersSpend). It is safe for concurrent use.
func (l *Ledger) Calibrate(now time.Time, provider, model string, limitTokens, remainingTokens, limitRequests, remainingRequests int64) {
	l.CalibrateAnswer(now, time.Time{}, provider, model, limitTokens, remainingTokens, limitRequests, remainingRequests)
}

// CalibrateAnswer is Calibrate for an answer to a call sent at sent (as Sent
// returned it, or admitted then; zero: unknown). A provider may state what is
// left as of the call's arrival rather than as it answers, and the window is
// read as of both (decides.go).
func (l *Ledger) CalibrateAnswer(now, sent time.Time, provider, model string, limitTokens, remainingTokens, limitRequests, remainingRequests int64) {
	if provider == "" || model == "" {
		return
	}
	if (limitTokens > 0 && remainingTokens > limitTokens) || (limitRequests > 0 && remainingRequests > limitRequests) {
		return
	}
	if limitTokens <= 0 && limitRequests <= 0 {
		return
	}
	b := l.lockedBucketFor(provider, model, now)
	defer b.mu.Unlock()
	if b.model != model { // folded into OtherModel: one model's stated limits are not the others'
		return
	}
	b.adoptStatedLocked(now, limitTokens, limitRequests)
	if limitTokens > 0 && remainingTokens >= 0 {
		b.observeDecidesLocked(now, sent, limitTokens, remainingTokens)
		b.observeOutsideLocked(now, sent, limitTokens, remainingTokens)
	}
	// An answer's headers: every answer restates them.
	if limitTokens > 0 {
		b.tokensStatedAt, b.tokensBy429 = now, false
	}
	if limitRequests > 0 {
		b.requestsStatedAt, b.requestsBy429 = now, false
	}
	b.dispatchLocked(now) // a larger budget may let waiters through
}

// ObserveTokensReset weighs the token reset an answer for provider/model
// states (engine.ReadTokenReset): for a call sent at sent — or admitted then:
// no later than the provider can have seen it — and answered at now, the
// instant its count restarts or is whole again. In fixed windows it is
// always the next edge, which is how the gate learns them from answers, before
// any 429 (fixedwindow.go). It is safe for concurrent use.
func (l *Ledger) ObserveTokensReset(now time.Time, provider, model string, sent time.Time, r engine.TokenReset) {
	if provider == "" || model == "" {
		return
	}
	b := l.lockedBucketFor(provider, model, now)
	defer b.mu.Unlock()
	if b.model != model { // folded into OtherModel: one model's windows are not the others'
		return
	}
	earliest, latest := r.Between(sent, now)
	if b.observeResetLocked(now, earliest, latest, r.Coarse) {
		b.dispatchLocked(now) // counted in the new windows, a waiter may fit
	}
}

// adoptStatedLocked adopts stated per-minute limits (≤ 0: not stated) for the
// bucket; see Calibrate. The caller dispatches.
func (b *bucket) adoptStatedLocked(now time.Time, limitTokens, limitRequests int64) {
	span := b.l.conf().Window
	if limitRequests > 0 {
		b.statedRequests = limitRequests
		rpm := scaleLimit(limitRequests, span)
		b.limits.RPM = int(rpm)
		b.rpmLearned, b.rpmLearnedRead, b.rpmRefused = 0, false, 0 // the provider said: what was learned goes
		b.rpmRefusedAt, b.rpmRefusedTokens = time.Time{}, 0
		b.rpmPreStep, b.rpmStepHeld = 0, 0
		b.rpmRelaxHeld, b.rpmRelaxUntil = 0, time.Time{}
		b.setRPMLocked()
	}
	if limitTokens <= 0 {
		return
	}
	// Restated: the same figure, in the units of the window it was adopted in
	// (a reload that changes the window converts the learner and says so in
	// statedSpan; one the bucket has not seen yet is adopted again here).
	restated := b.statedTokens == limitTokens && b.statedSpan == span
	b.statedTokens, b.statedSpan = limitTokens, span
	q := float64(scaleLimit(limitTokens, span))
	from := b.learn.budget()
	if b.learn.start == q && b.learn.quota == q && b.learn.trigger == 0 {
		b.learn.stated, b.learn.preProbe = q, 0 // the start was right: it is now a stated cap
		return
	}
	if restated && b.learn.stated == q {
		// The figure the gate holds, stated again (every answer restates it):
		// what 429s taught since it was adopted stays. A 429 near a stated
		// limit is the gate's own excess or another client's spend on the
		// key; dropping its trigger at the next answer would refill the
		// window to the limit and take the same 429 at every cooldown's end.
		return
	}
	fresh := newLearner(int(q), b.learn.enabled, now)
	b.learn.start, b.learn.quota, b.learn.floor, b.learn.trigger = fresh.start, fresh.quota, fresh.floor, 0
	b.learn.preProbe = 0 // a probe step from before the stated limit is not one to revert to
	b.learn.stated = q
	b.limits.TPM = int(q)
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	e := b.newEvent(EventLearn, now, "", "calibrate", 0, 0)
	e.Step, e.From, e.To = "calibrate", from, q
	b.l.emit(e)
}

// statedIn429Locked adopts the limits a 429 stated (sig.StatedTokens,
// sig.StatedRequests: its headers or its words) before the 429 itself is read —
// so it is read against them, as a 429 far below a stated limit is timing or
// another client. Only a figure the bucket does not hold already moves
// anything: re-adopting the same one at every 429 would drop the trigger the
// last 429 taught. Nothing is dispatched: the 429's cooldown comes next.
func (b *bucket) statedIn429Locked(now time.Time, sig engine.RateLimit) {
	tokens, requests := sig.StatedTokens, sig.StatedRequests
	if tokens > 0 {
		b.tokensStatedAt = now // restated, if nothing else
		if tokens == b.statedTokens {
			tokens = 0
		}
	}
	if requests > 0 {
		b.requestsStatedAt = now
		if requests == b.statedRequests {
			requests = 0
		}
	}
	if tokens > 0 || requests > 0 {
		b.adoptStatedLocked(now, max(0, tokens), max(0, requests))
		b.tokensBy429 = b.tokensBy429 || tokens > 0
		b.requestsBy429 = b.requestsBy429 || requests > 0
	}
}

// forgetStaleStatedLocked forgets a limit a 429 stated (of tokens, or of
// requests) that no 429 has restated for triggerReprobeWindows windows, when
// that axis's budget holds a call back. An answer's headers restate their
// figures all the time; a 429's words only at the next 429. And the gate never
// probes past a stated limit, so after the provider raised it (a tier upgrade)
// no 429 would ever come to say so. Forgotten, the figure stops capping the
// budget, which climbs from it at the pace of any other trigger (a token
// trigger one step per triggerReprobeWindows windows, a request trigger 5% a
// window); a wrong step costs one 429, which states the limit again.
func (b *bucket) forgetStaleStatedLocked(now time.Time, tokens bool) {
	stale := func(at time.Time) bool { return now.Sub(at) >= triggerReprobeWindows*b.l.conf().Window }
	switch {
	case tokens && b.tokensBy429 && stale(b.tokensStatedAt):
		b.forgetStatedTokensLocked(now)
	case !tokens && b.requestsBy429 && stale(b.requestsStatedAt):
		b.forgetStatedRequestsLocked(now)
	}
}

// forgetStatedTokensLocked drops the stated token limit: the configured TPM is
// the learner's start and floor again, the cap goes, what was learned stays
// (with learning off, the configured TPM is the quota again).
func (b *bucket) forgetStatedTokensLocked(now time.Time) {
	if b.statedTokens == 0 {
		return
	}
	b.forgetTokenReadLocked() // the learner's figures move (while stated, no run is read again)
	from := b.learn.stated
	lim := b.l.conf().Limits(b.provider + "/" + b.model)
	b.statedTokens, b.tokensBy429 = 0, false
	b.limits.TPM = lim.TPM
	fresh := newLearner(lim.TPM, b.learn.enabled, now)
	b.learn.stated = 0
	b.learn.start, b.learn.floor = fresh.start, fresh.floor
	if !b.learn.enabled {
		b.learn.quota = fresh.quota
	}
	b.learn.quota = max(b.learn.quota, b.learn.floor)
	e := b.newEvent(EventLearn, now, "", "unstated", 0, 0)
	e.Step, e.From, e.To = "unstated", from, b.learn.budget()
	b.l.emit(e)
}

// forgetStatedRequestsLocked drops the stated request limit. The configured RPM
// applies again, but from the stated figure up: it becomes the request
// trigger, which relaxes 5% a window while the request budget binds.
func (b *bucket) forgetStatedRequestsLocked(now time.Time) {
	if b.statedRequests == 0 {
		return
	}
	held := b.limits.RPM
	lim := b.l.conf().Limits(b.provider + "/" + b.model)
	b.statedRequests, b.requestsBy429 = 0, false
	b.limits.RPM = lim.RPM
	switch {
	case held < lim.RPM && (b.rpmTrigger == 0 || b.rpmTrigger > held):
		b.rpmTrigger, b.lastRPMRelax = held, now
	case held > lim.RPM && b.learn.enabled:
		// The configured RPM is a start, and the provider carried the figure:
		// the request limit stays there, probed above it as any learned level.
		b.rpmLearned, b.rpmLearnedRead = held, false
	}
	b.setRPMLocked()
	e := b.newEvent(EventLearn, now, "", "unstated-rpm", 0, 0)
	e.Step, e.From, e.To = "unstated-rpm", float64(held), float64(lim.RPM)
	b.l.emit(e)
}

// scaleLimit converts a per-minute limit to one per span, at least 1 and at
// most maxScaledLimit (a limit past it would overflow the gate's arithmetic;
// engine.MaxStatedLimit keeps what providers state far below it).
func scaleLimit(perMinute int64, span time.Duration) int64 {
	v := float64(perMinute) * float64(span) / float64(rateLimitPeriod)
	return int64(min(max(1, v), maxScaledLimit))
}

const maxScaledLimit = 1 << 50
