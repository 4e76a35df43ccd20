package gate

import (
	"math"
	"time"
)

// The output axis: a limit on output tokens alone, beside the token window.
//
// Anthropic states two token limits a minute, input (ITPM) and output (OTPM),
// and the output one is several times smaller (8,000 against 40,000 at its
// first tier); Groq, Databricks and Bedrock have output limits too. The token
// window counts input and output together against the input limit, so an
// agent writing long answers meets the output limit with most of that window
// free: each such 429 read there set a trigger far below the input limit, or,
// below a stated input limit, was taken for another client's spend and taught
// nothing, and the gate refilled into the next one at every cooldown's end.
//
// So a model keeps a second window: each call's output, at its reserve while
// it is in flight — its max_tokens when it asked one, which is what Anthropic
// counts against OTPM when a call starts, corrected when it ends — and at what
// it wrote once it settled. The axis binds only when a limit is known: one
// configured (otpm), one the provider states (anthropic-ratelimit-output-
// tokens-limit), or one a 429 about the output taught. Such a 429 cools the
// model down as any 429 does and moves nothing of what the token window
// learned.
type outputAxis struct {
	win slidingWindow
	// stated is the provider's stated output limit for one window; 0: none.
	stated float64
	// trigger is the output window's reading at the last 429 about the
	// output, or a relax step up from it; 0: none.
	trigger float64
	// last429 is the last 429 about the output; heldAt the last window the
	// output budget held a call back (the relax steps only then, as probes
	// do: never while the output is not what binds).
	last429, relaxedAt, heldAt time.Time
}

// Output axis constants.
const (
	// outputRelaxWindows: a trigger below the configured or stated output
	// limit steps back up × learnProbeFactor once a window, while it holds
	// calls back, from this many windows after the 429 that set it: what
	// another client spent, or a burst of long answers, passes. Without a
	// limit to step toward it is re-probed as the token trigger is
	// (triggerReprobeWindows).
	outputRelaxWindows = 10
	// outputFloorShare: a trigger is never below this share of the limit it
	// was read under, nor below outputFloorMin tokens, so a 429 read while
	// the window held little cannot stop the model.
	outputFloorShare = 1.0 / 16
	outputFloorMin   = 100
)

// outputLimitLocked is the output limit the axis holds calls to, per window
// (before the safety factor): the stated limit, else the configured one, under
// the trigger a 429 set; 0 when none is known.
func (b *bucket) outputLimitLocked() float64 {
	base := b.outputBaseLocked()
	switch {
	case base > 0 && b.out.trigger > 0:
		return math.Min(base, b.out.trigger)
	case base > 0:
		return base
	}
	return b.out.trigger
}

// outputBaseLocked is the stated output limit, else the configured one; 0:
// neither.
func (b *bucket) outputBaseLocked() float64 {
	if b.out.stated > 0 {
		return b.out.stated
	}
	return float64(b.limits.OTPM)
}

// outputBudgetLocked is the output budget: the limit times the safety factor;
// 0 when the axis does not bind.
func (b *bucket) outputBudgetLocked() int64 {
	return int64(b.outputLimitLocked() * b.factor())
}

// outputDrainLocked is how long a call reserving out output tokens waits for
// the output window. One that could never fit goes at once (the over-budget
// rule: failing open beats waiting forever).
func (b *bucket) outputDrainLocked(now time.Time, out int64) time.Duration {
	budget := b.outputBudgetLocked()
	if budget <= 0 || out <= 0 {
		return 0
	}
	wait, ok := b.out.win.tokenDrain(now, out, budget)
	if !ok {
		return 0
	}
	if wait > 0 {
		b.outputHeldLocked(now)
	}
	return wait
}

// outputHeldLocked notes that the output budget held a call back at now, and
// relaxes a trigger that has stood long enough (see outputRelaxWindows).
func (b *bucket) outputHeldLocked(now time.Time) {
	span := b.l.conf().Window
	b.out.heldAt = now
	if b.out.trigger <= 0 || !b.learn.enabled {
		return
	}
	base := b.outputBaseLocked()
	if base > 0 && b.out.trigger >= base {
		return
	}
	since := maxTime(b.out.last429, b.out.relaxedAt)
	wait := outputRelaxWindows * span
	if base <= 0 {
		wait = triggerReprobeWindows * span
	}
	if now.Sub(b.out.last429) < wait || now.Sub(since) < span {
		return
	}
	from := b.out.trigger
	b.out.trigger *= learnProbeFactor
	if base > 0 {
		b.out.trigger = math.Min(b.out.trigger, base)
	}
	b.out.relaxedAt = now
	b.saveLearnedLocked()
	b.emitOutputLearnLocked(now, "output-relax", from, b.out.trigger)
}

// outputRateLimitedLocked learns from a 429 about the output (the cooldown is
// the caller's): the output window's reading is the limit's level, what is
// left to the gate of it when another client spends the key too.
func (b *bucket) outputRateLimitedLocked(now time.Time) {
	b.out.last429 = now
	if !b.learn.enabled {
		return
	}
	reading := float64(b.out.win.tokens)
	floor := float64(outputFloorMin)
	if base := b.outputBaseLocked(); base > 0 {
		floor = math.Max(floor, base*outputFloorShare)
	} else if b.out.trigger > 0 {
		floor = math.Max(floor, b.out.trigger*outputFloorShare)
	}
	from := b.out.trigger
	b.out.trigger = math.Max(reading, floor)
	if base := b.outputBaseLocked(); base > 0 && b.out.trigger > base {
		b.out.trigger = base // the limit said is not refuted by a 429 above it: that was another client's spend
	}
	b.emitOutputLearnLocked(now, "output-trigger", from, b.out.trigger)
}

// adoptStatedOutputLocked adopts an output limit the provider stated, per
// minute: it replaces the configured one, and a trigger above it.
func (b *bucket) adoptStatedOutputLocked(now time.Time, perMinute int64) {
	if perMinute <= 0 {
		return
	}
	stated := float64(perMinute) * float64(b.l.conf().Window) / float64(rateLimitPeriod)
	if stated == b.out.stated {
		return
	}
	from := b.outputLimitLocked()
	b.out.stated = stated
	if b.out.trigger > stated {
		b.out.trigger = 0 // the provider's word above what a 429 read: it raised the limit
	}
	b.emitOutputLearnLocked(now, "output-stated", from, b.outputLimitLocked())
}

// forgetOutputLocked forgets what 429s taught of the output limit (a reset):
// the configured or stated limit stands again.
func (b *bucket) forgetOutputLocked() {
	b.out.trigger, b.out.last429, b.out.relaxedAt = 0, time.Time{}, time.Time{}
}

func (b *bucket) emitOutputLearnLocked(now time.Time, step string, from, to float64) {
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.From, e.To = step, from, to
	b.l.emit(e)
}

// StateOutputLimit adopts the output-token limit a provider states per minute
// (Anthropic's anthropic-ratelimit-output-tokens-limit) for provider/model. It
// is safe for concurrent use.
func (l *Ledger) StateOutputLimit(now time.Time, provider, model string, perMinute int64) {
	if provider == "" || model == "" || perMinute <= 0 {
		return
	}
	b := l.lockedBucketFor(provider, model, now)
	defer b.mu.Unlock()
	if b.model != model { // folded into OtherModel: one model's stated limits are not the others'
		return
	}
	b.adoptStatedOutputLocked(now, perMinute)
	b.dispatchLocked(now) // a larger budget may let waiters through
}

// saveLearnedLocked saves the model's learned state to the learned store, if
// there is one.
func (b *bucket) saveLearnedLocked() {
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
}
