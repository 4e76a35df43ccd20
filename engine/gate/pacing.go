package gate

import (
	"math"
	"time"
)

// Spacing grants. The pacer spreads the budget over the window, so a queue is
// not released as one cohort when the window drains; and while a raised budget
// is being tried, the calls above the level that held go one at a time, so a
// step the provider refuses costs one call, not a cohort.

// pacer is a token bucket of what may be granted now: at most burst, refilled
// at rate a second; a grant may take it below zero.
type pacer struct {
	level float64
	at    int64 // unix nanos of the last refill; 0: never, full
}

// refill brings the pacer up to now.
func (p *pacer) refill(now time.Time, rate, burst float64) {
	at := now.UnixNano()
	if p.at == 0 {
		p.level, p.at = burst, at
		return
	}
	if at < p.at { // the clock stepped back: refill from here on, never wait for it to catch up
		p.at = at
	}
	if at > p.at {
		p.level += rate * float64(at-p.at) / 1e9
		p.at = at
	}
	p.level = math.Min(burst, p.level) // (a burst that shrank — a share of a shared pace — holds at once)
}

// wait is how long until the pacer holds need (a full burst, for more than
// the burst). Its debt is never more than budget past the burst (see spend):
// a budget that shrank since — a smaller share of a shared pace — shortens it.
func (p *pacer) wait(now time.Time, need, rate, burst, budget float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	p.refill(now, rate, burst)
	p.level = math.Max(p.level, burst-budget)
	need = math.Min(need, burst)
	if p.level >= need {
		return 0
	}
	return time.Duration(math.Ceil((need - p.level) / rate * 1e9))
}

// spend takes amount, never below burst − budget: the longest wait stays
// within window ÷ pace.
func (p *pacer) spend(now time.Time, amount, rate, burst, budget float64) {
	if rate <= 0 {
		return
	}
	p.refill(now, rate, burst)
	p.level = math.Max(p.level-amount, burst-budget)
}

// paceParams are the pacer's rate (a second) and burst for a budget of one
// window: the token budget's, or the request budget's, at this instance's
// share of the pace (paceShareLocked).
func (b *bucket) paceParams(budget int64) (rate, burst float64) {
	cfg := b.l.conf()
	if cfg.Pace <= 0 || budget <= 0 {
		return 0, 0
	}
	share := b.paceShareLocked()
	return share * cfg.Pace * float64(budget) / cfg.Window.Seconds(), math.Max(1, share*cfg.PaceBurst*float64(budget))
}

// paceShareLocked is the share of the pace this instance paces at: 1 alone;
// with a shared window, 1/N of it with N instances competing for the model
// (calls of theirs queued, or refused by the shared window, within its last
// window) — but never so little that it could not let a whole budget through
// in a window: with more instances than `pace`, they together pace faster
// than one would rather than hold a busy one under the limit.
//
// The budget is the key's. Each at the whole pace, N instances let N bursts
// through at once when a shared cooldown ended, and the budget went in a
// pace-th of a window ÷ N: the cohort the pacer is there to break. A share of
// each instance's own pacer, rather than one pacer in the store, keeps what
// the own pacer gave: when room comes back in the shared window, the instance
// that asks first cannot take every call of it, so the instances share the
// quota evenly (one pacer in the store, which the first to ask drew on, let
// one of three instances take 1.5–1.8× its share).
func (b *bucket) paceShareLocked() float64 {
	pace := b.l.conf().Pace
	if b.l.shared == nil || b.sharedAsking <= 1 || pace <= 1 {
		return 1
	}
	return max(1/float64(b.sharedAsking), 1/pace)
}

// paceWaitLocked is how long the pacers hold a reservation of res (within the
// budget): the token pacer until it holds res tokens (a full burst, for a call
// larger than the burst), and — while requests bind, in the arrival view
// (requestPacedLocked) — the request pacer until it holds one request. Small
// calls bound by requests are cohorts the token pacer does not see: a queue of
// them released at once when the request window drained met a provider that
// counts at completion still holding the last cohort (19 429s in 12 ms).
// Requests that never bind are not paced — a burst of calls under a request
// limit nobody reaches waits for nothing — but for the first window the gate
// knows nothing of the limit (requestPacedLocked).
func (b *bucket) paceWaitLocked(now time.Time, res, budget int64) time.Duration {
	share := b.paceShareLocked()
	rate, burst := b.paceParams(budget)
	wait := b.pace.wait(now, float64(res), rate, burst, share*float64(budget))
	if b.requestPacedLocked(now) {
		rate, burst = b.paceParams(int64(b.rpm))
		wait = max(wait, b.paceReq.wait(now, 1, rate, burst, share*float64(b.rpm)))
	}
	return wait
}

// spendPaceLocked charges a grant of res (within the budget) to the pacers.
func (b *bucket) spendPaceLocked(now time.Time, res, budget int64) {
	share := b.paceShareLocked() // (the longest wait stays a window ÷ pace at a share too)
	rate, burst := b.paceParams(budget)
	b.pace.spend(now, float64(res), rate, burst, share*float64(budget))
	if b.requestPacedLocked(now) {
		rate, burst = b.paceParams(int64(b.rpm))
		b.paceReq.spend(now, 1, rate, burst, share*float64(b.rpm))
	}
}

// refundPaceLocked gives the token pacer back amount a grant was charged and
// the provider did not count (up to its burst).
func (b *bucket) refundPaceLocked(now time.Time, amount int64) {
	rate, burst := b.paceParams(b.tokenBudget(now))
	if rate <= 0 || amount <= 0 {
		return
	}
	b.pace.refill(now, rate, burst)
	b.pace.level = math.Min(burst, b.pace.level+float64(amount))
}

// requestPacedLocked says whether the request pacer runs: while requests bind
// — the request budget held a call back, or an RPM 429 came, within the last
// two windows (a cooldown of a window after a 429 is followed by the queue it
// held) — in the arrival view. The cohort it spreads is the arrival window's
// drain releasing a queue that a provider counting at completion still holds;
// in the completion view the gate's request count drains as the provider's
// does, as the calls complete, and pacing there only delayed the queue after a
// cooldown (over real sockets, a case told the provider counts at completion
// read 0.58–0.78 of the requests once learned paced, 0.83–0.87 unpaced).
//
// And for a window after the request axis started from nothing (the bucket's
// birth, a reset, a reload that changed rpm), in either view, once the window
// holds half the request budget: sessions that start together send their
// calls in step, and from a start above the truth the round that crosses the
// limit is refused whole — every call of it sent before the first 429 comes
// back (over real sockets, ten sessions at twice a limit of 20 requests: 2–7
// 429s, up to six within 4 ms). Paced, the calls past the burst go one at a
// time at pace × the budget per window, and the first 429 stops the rest. The
// first half goes at once: a start at most twice the truth crosses the limit
// above it, and a burst of new sessions under a start below the truth (the
// default rpm is 60) waits for nothing.
func (b *bucket) requestPacedLocked(now time.Time) bool {
	window := b.l.conf().Window
	if now.Sub(b.rpmFreshAt) < window && 2*b.win.requests() >= b.rpm { // the calls let go, in flight or not
		return true
	}
	return !b.atCompletion && !b.rpmBoundAt.IsZero() && now.Sub(b.rpmBoundAt) < 2*window
}

// aboveHeldLocked reports whether a reservation of res (variance v) goes above
// the level that held before the budget's last raise, while that step is
// being tried: a call the old budget would have held back.
func (b *bucket) aboveHeldLocked(now time.Time, res int64, v float64) bool {
	if b.stepHeld <= 0 || !now.Before(b.stepUntil) {
		return false
	}
	return b.admitCountLocked()+b.sharedOthers+res+b.viewMarginLocked(v) > b.stepHeld
}

// stepGapLocked is how long a call above the level that held goes alone: 1.5 ×
// the longest recent admission→429 delay, so that if the provider refuses it,
// the 429 is back before the next such call goes — the step risks one call,
// never a cohort. stepGapMin before any delay was measured; at most 2% of the
// window, like the count guard the same delays set (one slow 429 must not
// spread a step over the whole window, whose end would release the rest at once).
func (b *bucket) stepGapLocked() time.Duration {
	return min(max(b.roundTripLocked()*3/2, stepGapMin), b.l.conf().Window/50)
}

// raisedLocked starts the spacing of a step: the budget rose from held.
func (b *bucket) raisedLocked(now time.Time, held int64) {
	b.stepHeld, b.stepUntil, b.stepNext = held, now.Add(b.l.conf().Window), time.Time{}
}

// stepGapMin spaces the calls of a step before any 429 told how late the
// provider answers: a round trip to a distant provider and its check.
const stepGapMin = 100 * time.Millisecond
