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
//     Later 429s still cut the quota as usual, and the next calibration
//     restores it: learning from 429s remains for providers that send none.
//   - limitRequests > 0: the model's RPM budget becomes the stated limit (scaled
//     likewise), times the safety factor as for a configured RPM.
//
// remainingTokens and remainingRequests are what the provider says is left in its
// own window; negative means not sent. A remaining above its limit marks the
// header set as inconsistent and the call is ignored whole. They are otherwise
// not used: the ledger's window already holds what gatectl sent, and a provider's
// remaining counts the max_tokens it expects rather than what was written.
//
// A limit ≤ 0 leaves that part as it is. Calibrate emits a learn event with Step
// "calibrate" when the token budget moved. It is safe for concurrent use.
func (l *Ledger) Calibrate(now time.Time, provider, model string, limitTokens, remainingTokens, limitRequests, remainingRequests int64) {
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
	b.statedAt, b.statedBy429 = now, false // an answer's headers: every answer restates them
	b.dispatchLocked(now)                  // a larger budget may let waiters through
}

// adoptStatedLocked adopts stated per-minute limits (≤ 0: not stated) for the
// bucket; see Calibrate. The caller dispatches.
func (b *bucket) adoptStatedLocked(now time.Time, limitTokens, limitRequests int64) {
	span := b.l.conf().Window
	if limitRequests > 0 {
		b.statedRequests = limitRequests
		rpm := scaleLimit(limitRequests, span)
		b.limits.RPM = int(rpm)
		b.setRPMLocked()
	}
	if limitTokens <= 0 {
		return
	}
	b.statedTokens = limitTokens
	q := float64(scaleLimit(limitTokens, span))
	from := b.learn.budget()
	if b.learn.start == q && b.learn.quota == q && b.learn.trigger == 0 {
		b.learn.stated, b.learn.preProbe = q, 0 // the start was right: it is now a stated cap
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

// statedIn429Locked adopts the limits a 429's wording stated (sig.StatedTokens,
// sig.StatedRequests) before the 429 itself is read — so it is read against
// them, as a 429 far below a stated limit is timing or another client. Only a
// figure the bucket does not hold already moves anything: re-adopting the same
// one at every 429 would drop the trigger the last 429 taught. Nothing is
// dispatched: the 429's cooldown comes next.
func (b *bucket) statedIn429Locked(now time.Time, sig engine.RateLimit) {
	tokens, requests := sig.StatedTokens, sig.StatedRequests
	if tokens <= 0 && requests <= 0 {
		return
	}
	b.statedAt = now // restated, if nothing else
	if tokens == b.statedTokens {
		tokens = 0
	}
	if requests == b.statedRequests {
		requests = 0
	}
	if tokens > 0 || requests > 0 {
		b.adoptStatedLocked(now, tokens, requests)
		b.statedBy429 = true
	}
}

// forgetStaleStatedLocked forgets limits a 429 stated that no 429 has
// restated for triggerReprobeWindows windows. An answer's headers restate
// their figures all the time; a 429's words only at the next 429. And the gate
// never probes past a stated limit, so after the provider raised it (a tier
// upgrade) no 429 would ever come to say so. Forgotten, the figure stops
// capping the learner, which re-probes its trigger at the same pace as any
// other (one step per triggerReprobeWindows windows; a wrong step costs one
// 429, which states the limit again).
func (b *bucket) forgetStaleStatedLocked(now time.Time) {
	if b.statedBy429 && now.Sub(b.statedAt) >= triggerReprobeWindows*b.l.conf().Window {
		b.forgetStatedLocked()
	}
}

// forgetStatedLocked drops the stated limits: the configured ones apply again
// and the learner's cap goes; what it learned stays.
func (b *bucket) forgetStatedLocked() {
	if b.statedTokens == 0 && b.statedRequests == 0 {
		return
	}
	lim := b.l.conf().Limits(b.provider + "/" + b.model)
	b.statedTokens, b.statedRequests, b.statedBy429 = 0, 0, false
	b.limits.TPM, b.limits.RPM = lim.TPM, lim.RPM
	b.learn.stated = 0
	b.learn.start = float64(lim.TPM)
	b.setRPMLocked()
}

// scaleLimit converts a per-minute limit to one per span, at least 1 and at
// most maxScaledLimit (a limit past it would overflow the gate's arithmetic;
// engine.MaxStatedLimit keeps what providers state far below it).
func scaleLimit(perMinute int64, span time.Duration) int64 {
	v := float64(perMinute) * float64(span) / float64(rateLimitPeriod)
	return int64(min(max(1, v), maxScaledLimit))
}

const maxScaledLimit = 1 << 50
