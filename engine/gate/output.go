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
	// statedPerMinute is the provider's stated output limit, per minute as
	// stated (converted to the bucket's window where it is read, so a reload
	// that changes the window converts it); 0: none.
	statedPerMinute int64
	// trigger is the output window's reading at the first 429 of the last
	// burst about the output, or a relax step up from it; 0: none.
	trigger float64
	// last429 is the last 429 about the output, burstAt the first of its
	// burst (429s within a window of it), relaxedAt the last relax step.
	last429, burstAt, relaxedAt time.Time
	// refutedOTPM: the configured limit (none stated) the trigger was read
	// under at a 429 that answered a relax step toward it, the output window
	// filled to the level the gate held: the provider refused the gate's own
	// step, and that figure is wrong (see outputHeldLocked); 0: none. A
	// reload to another figure leaves it behind.
	refutedOTPM int
}

// Output axis constants.
const (
	// outputRelaxWindows: a trigger below the configured or stated output
	// limit steps back up × learnProbeFactor once a window, while it holds
	// calls back, from this many windows after the 429 that set it: what
	// another client spent, or a burst of long answers, passes. Without a
	// limit to step toward, or below a configured one the provider refused
	// at a step toward it (outputAxis.refutedOTPM), it is re-probed as the
	// token trigger is (triggerReprobeWindows): stepping back up toward such
	// a figure each outputRelaxWindows met the limit again each time (a
	// configured otpm twice the truth, in the simulator: 11–13 429s an hour).
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
	if st := b.outputStatedLocked(); st > 0 {
		return st
	}
	return float64(b.limits.OTPM)
}

// outputStatedLocked is the stated output limit for one of the bucket's
// windows; 0: none.
func (b *bucket) outputStatedLocked() float64 {
	return float64(b.out.statedPerMinute) * float64(b.window) / float64(rateLimitPeriod)
}

// outputBudgetLocked is the output budget: the limit times the safety factor;
// 0 when the axis does not bind.
func (b *bucket) outputBudgetLocked() int64 {
	return int64(b.outputLimitLocked() * b.factor())
}

// outputDrainLocked is how long a call reserving out output tokens (an
// output of variance outVar: 0 when it reserved its max_tokens) waits for the
// output window. One that could never fit goes at once (the over-budget rule:
// failing open beats waiting forever).
//
// A call without max_tokens reserves the output it is expected to write, and
// the provider counts what it writes: the window keeps room for the spread of
// the calls in flight, one margin for all of them as the token window keeps
// (bucket.margin), or their outputs above the expected take the window over
// the limit. (In the simulator, 32 sessions under an output limit without
// max_tokens: the oracle, told the limit, took 36 429s an hour without it.)
func (b *bucket) outputDrainLocked(now time.Time, out int64, outVar float64) time.Duration {
	budget := b.outputBudgetLocked()
	if budget <= 0 || out <= 0 || out > budget {
		return 0
	}
	wait, _ := b.out.win.tokenDrain(now, b.outputNeedLocked(out, outVar, budget), budget)
	if wait > 0 {
		b.outputHeldLocked(now)
	}
	return wait
}

// outputNeedLocked is what a call reserving out output tokens (of variance
// outVar) needs of an output window with budget: its output and the margin
// for the outputs in flight, within the budget (a call larger than the
// budget needs its output alone: the over-budget rule lets it go).
func (b *bucket) outputNeedLocked(out int64, outVar float64, budget int64) int64 {
	return min(out+b.marginOf(b.openOutputVarLocked()+outVar), max(budget, out))
}

// openOutputVarLocked is the variance of the outputs of the calls in flight
// that reserved an expected output: their cost variance less their input's.
func (b *bucket) openOutputVarLocked() float64 { return max(0, b.openVar-b.openInputVar) }

// outputHeldLocked notes that the output budget held a call back at now, and
// relaxes a trigger that has stood long enough (see outputRelaxWindows).
func (b *bucket) outputHeldLocked(now time.Time) {
	span := b.l.conf().Window
	if b.out.trigger <= 0 || !b.learn.enabled || b.cooldownLeft(now) > 0 {
		return
	}
	base := b.outputBaseLocked()
	if base > 0 && b.out.trigger >= base {
		return
	}
	since := maxTime(b.out.last429, b.out.relaxedAt)
	wait := outputRelaxWindows * span
	if base <= 0 || (b.out.refutedOTPM > 0 && b.out.refutedOTPM == b.limits.OTPM && b.outputStatedLocked() == 0) {
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
// left to the gate of it when another client spends the key too. It is read as
// the refused call met it, admitted at admitted (zero: unknown, read now): the
// 429 comes back a round trip later, and the calls admitted meanwhile were not
// in the provider's count.
//
// The trigger goes stepDown below the reading: the window counts the calls in
// flight at their max_tokens until their answers are read, while the provider
// corrected those it finished a moment before, and over real HTTP the first
// reading lay up to 4% above the limit (a second 429 a window later).
//
// The first 429 of a burst reads it; the later ones of the same burst (within
// a window) read a window their refused calls emptied, and teach nothing. The
// next burst reads it again, up or down: what the provider held then is the
// latest word on the limit. (Kept from an earlier burst, a trigger read over a
// nearly empty window — after a restart, or while another client spent the
// key — stayed at the floor for good: every call larger than its budget went
// at once, none waited to step it back up, and a 429 came each cooldown.)
//
// A 429 whose words name the limit (inWords, per minute: Anthropic's "of 8,000
// output tokens per minute") is read at no more than that figure: the gate's
// count holds the calls whose answers it has not read yet at their max_tokens,
// which the provider corrected already, and over real sockets a first reading
// lay 8% above the limit, its trigger refused again a window later.
func (b *bucket) outputRateLimitedLocked(now, admitted time.Time, inWords int64) {
	span := b.l.conf().Window
	prev429 := b.out.last429
	b.out.last429 = now
	if !b.learn.enabled || (!b.out.burstAt.IsZero() && now.Sub(b.out.burstAt) < span) {
		return
	}
	b.out.burstAt = now
	// The provider's window as the refused call met it: without what only
	// the count guard keeps (unless it was still in that window then), and
	// without the calls admitted after it.
	reading := float64(b.out.win.tokens - b.out.win.tail())
	if !admitted.IsZero() && admitted.Before(now) {
		reading += float64(b.out.win.tailAfter(admitted.Add(-span).UnixNano()))
		reading -= float64(b.out.win.tokensAfter(admitted.UnixNano()))
	}
	// With a shared window the limit is the key's: what the other instances
	// held at the last answer counts too (shared.go), unless that answer is
	// older than a tenth of the window (their calls may have left it since).
	if now.Sub(b.sharedOthersOutputAt) <= span/10 {
		reading += float64(b.sharedOthersOutput)
	}
	base, floor := b.outputBaseLocked(), float64(outputFloorMin)
	if base > 0 {
		floor = math.Max(floor, base*outputFloorShare)
	} else if b.out.trigger > 0 {
		floor = math.Max(floor, b.out.trigger*outputFloorShare)
	}
	from := b.out.trigger
	// Refused within a window of a relax step toward a figure only
	// configured, a call admitted after the step, the window filled to the
	// level the gate held (its budget less the margin it keeps for the
	// outputs in flight): the step is refuted, and so is the figure. A first
	// 429 may be another client's spend, which passes: its trigger steps back
	// up (outputHeldLocked). A later 429 that answers no step leaves the
	// figure refuted (a reset forgets it; a reload to another figure leaves
	// it behind).
	held := float64(b.outputBudgetLocked() - b.marginOf(b.openOutputVarLocked()))
	if b.limits.OTPM > 0 && b.outputStatedLocked() == 0 && b.out.relaxedAt.After(prev429) && now.Sub(b.out.relaxedAt) < span &&
		(admitted.IsZero() || !admitted.Before(b.out.relaxedAt)) && reading >= suspectRatio*held {
		b.out.refutedOTPM = b.limits.OTPM
	}
	t := math.Max(stepDown*reading, floor)
	if inWords > 0 {
		// The figure caps the reading; a reading below it is what the key
		// leaves this instance (another client's spend) and stands.
		t = math.Min(t, float64(inWords)*float64(b.window)/float64(rateLimitPeriod))
	}
	if base > 0 && t > base {
		t = base // the limit said is not refuted by a 429 above it: that was another client's spend
	}
	b.out.trigger = t
	b.emitOutputLearnLocked(now, "output-trigger", from, b.out.trigger)
}

// adoptStatedOutputLocked adopts an output limit the provider stated, per
// minute: it replaces the configured one, and a trigger above it.
func (b *bucket) adoptStatedOutputLocked(now time.Time, perMinute int64) {
	if perMinute <= 0 || perMinute == b.out.statedPerMinute {
		return
	}
	from := b.outputLimitLocked()
	b.out.statedPerMinute = perMinute
	if b.out.trigger > b.outputStatedLocked() {
		b.out.trigger = 0 // the provider's word below what a 429 read: the limit it states now is the tighter
	}
	b.emitOutputLearnLocked(now, "output-stated", from, b.outputLimitLocked())
}

// forgetOutputLocked forgets what 429s taught of the output limit (a reset):
// the configured or stated limit stands again.
func (b *bucket) forgetOutputLocked() {
	b.out.trigger, b.out.last429, b.out.burstAt, b.out.relaxedAt = 0, time.Time{}, time.Time{}, time.Time{}
	b.out.refutedOTPM = 0
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
