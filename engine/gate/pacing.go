package gate

import (
	"math"
	"time"
)

// Spacing grants. The pacer spreads the budget over the window, so a queue is
// not released as one cohort when the window drains; and while a raised budget
// is being tried, the calls above the level that held go one at a time, so a
// step the provider refuses costs one call, not a cohort.

// paceParams are the pacer's rate (tokens a second) and burst for budget.
func (b *bucket) paceParams(budget int64) (rate, burst float64) {
	cfg := b.l.conf()
	if cfg.Pace <= 0 || budget <= 0 {
		return 0, 0
	}
	return cfg.Pace * float64(budget) / cfg.Window.Seconds(), math.Max(1, cfg.PaceBurst*float64(budget))
}

// refillPaceLocked brings the pacer up to now.
func (b *bucket) refillPaceLocked(now time.Time, rate, burst float64) {
	at := now.UnixNano()
	if b.paceAt == 0 {
		b.paceTokens, b.paceAt = burst, at
		return
	}
	if at < b.paceAt { // the clock stepped back: refill from here on, never wait for it to catch up
		b.paceAt = at
		return
	}
	if at > b.paceAt {
		b.paceTokens = math.Min(burst, b.paceTokens+rate*float64(at-b.paceAt)/1e9)
		b.paceAt = at
	}
}

// paceWaitLocked is how long the pacer holds a reservation of res: until it
// holds res tokens (a full burst, for a call larger than the burst).
func (b *bucket) paceWaitLocked(now time.Time, res, budget int64) time.Duration {
	rate, burst := b.paceParams(budget)
	if rate <= 0 {
		return 0
	}
	b.refillPaceLocked(now, rate, burst)
	need := math.Min(float64(res), burst)
	if b.paceTokens >= need {
		return 0
	}
	return time.Duration(math.Ceil((need - b.paceTokens) / rate * 1e9))
}

// aboveHeldLocked reports whether a reservation of res (variance v) goes above
// the level that held before the budget's last raise, while that step is
// being tried: a call the old budget would have held back.
func (b *bucket) aboveHeldLocked(now time.Time, res int64, v float64) bool {
	if b.stepHeld <= 0 || !now.Before(b.stepUntil) {
		return false
	}
	if b.atCompletion {
		return b.done.tokens+b.sharedOthers+res+b.marginOf(v) > b.stepHeld
	}
	return b.win.tokens+b.sharedOthers+res+b.margin(v) > b.stepHeld
}

// stepGapLocked is how long a call above the level that held goes alone: 1.5 ×
// the longest recent admission→429 delay, so that if the provider refuses it,
// the 429 is back before the next such call goes — the step risks one call,
// never a cohort. stepGapMin before any delay was measured; at most 2% of the
// window, like the count guard the same delays set (one slow 429 must not
// spread a step over the whole window, whose end would release the rest at once).
func (b *bucket) stepGapLocked() time.Duration {
	var longest time.Duration
	for _, d := range b.delays[:min(b.nDelay, len(b.delays))] {
		longest = max(longest, d)
	}
	return min(max(longest*3/2, stepGapMin), b.l.conf().Window/50)
}

// raisedLocked starts the spacing of a step: the budget rose from held.
func (b *bucket) raisedLocked(now time.Time, held int64) {
	b.stepHeld, b.stepUntil, b.stepNext = held, now.Add(b.l.conf().Window), time.Time{}
}

// stepGapMin spaces the calls of a step before any 429 told how late the
// provider answers: a round trip to a distant provider and its check.
const stepGapMin = 100 * time.Millisecond
