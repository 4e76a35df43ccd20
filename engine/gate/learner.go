package gate

import (
	"math"
	"time"
)

// Learner constants (seed 000: AIMD on the token budget).
const (
	learnCutFactor   = 0.5  // on a 429: quota × 0.5, at most once per window
	learnProbeFactor = 1.05 // a window without 429 in which tokens held a call back: × 1.05
	// learnFloorDivisor bounds the quota from below at start ÷ 16 (at least
	// learnFloorMin tokens), so a storm of cuts cannot collapse it to nothing.
	learnFloorDivisor = 16
	learnFloorMin     = 100
	// triggerReprobeWindows: seed 000's gap 2. The tightest trigger only ever fell,
	// so one abnormally low reading tightened a model forever. Two rules lift it:
	// a trigger below a clean window (the leak signal: traffic outside the ledger
	// made that 429) is relaxed like a probe, × 1.05 a loaded window, up to that
	// clean reading; and any trigger that has been the binding cap is re-probed
	// × 1.05 once per triggerReprobeWindows windows without a 429, so a raised
	// provider limit is found again. The interval is a cost budget: a correct
	// trigger needs about four such steps (1.05⁴ > 1 ÷ 0.85) before the gate
	// crosses the truth, and each crossing costs one 429, a halved quota and about
	// six windows of capacity — so 180 windows keeps re-probing under 1% of
	// capacity.
	triggerReprobeWindows = 180
)

// learner holds one model's learned token quota. Its methods require the bucket's
// mutex.
//
// Invariants: floor ≤ quota; trigger is 0 (unobserved) or the lowest window reading
// seen at a 429 (raised only by the relax rule); lastCut, lastProbe and last429 are
// zero until the event first happens.
type learner struct {
	enabled bool
	start   float64 // the configured TPM: a starting point, not the truth
	quota   float64
	trigger float64
	floor   float64

	lastCut   time.Time // last halving
	lastProbe time.Time // last probe step (or the learner's birth)
	last429   time.Time
	lastRelax time.Time // last slow re-probe of the trigger

	// Leak detection: the highest window reading admitted in a window that then
	// passed without a 429. A later trigger below it is impossible for one client.
	cleanMax       float64
	curWindowStart time.Time
	curWindowMax   float64
	leakWarned     bool
}

func newLearner(start int, enabled bool, now time.Time) learner {
	s := float64(start)
	return learner{
		enabled:        enabled,
		start:          s,
		quota:          s,
		floor:          math.Max(s/learnFloorDivisor, math.Min(learnFloorMin, s)),
		lastProbe:      now,
		curWindowStart: now,
	}
}

// budget is the token budget before the safety factor: min(quota, trigger).
func (l *learner) budget() float64 {
	if l.trigger > 0 && l.trigger < l.quota {
		return l.trigger
	}
	return l.quota
}

// observeAdmit records the window reading at an admission for leak detection.
func (l *learner) observeAdmit(now time.Time, reading float64, span time.Duration) {
	if now.Sub(l.curWindowStart) >= span {
		if l.last429.Before(l.curWindowStart) && l.curWindowMax > l.cleanMax {
			l.cleanMax = l.curWindowMax
		}
		l.curWindowStart, l.curWindowMax = now, 0
	}
	if reading > l.curWindowMax {
		l.curWindowMax = reading
	}
}

// learnStep describes one change of the learned state, for the log.
type learnStep struct {
	Kind          string // "cut", "probe", "relax", "trigger", "leak"
	From, To      float64
	Trigger       float64
	Reading       float64
	CleanMaxSeen  float64
	SkippedRepeat bool // a 429 in a window that was already cut
}

// on429 applies a 429 observed with the window reading at that moment.
func (l *learner) on429(now time.Time, reading float64, span time.Duration) (steps []learnStep) {
	l.observeAdmit(now, 0, span) // close the clean window, if one ended
	l.last429 = now
	l.curWindowMax = 0 // this window saw a 429: it is not clean
	if !l.enabled {
		return nil
	}
	if reading > 0 && (l.trigger == 0 || reading < l.trigger) {
		steps = append(steps, learnStep{Kind: "trigger", From: l.trigger, To: reading, Reading: reading})
		l.trigger = reading
		if !l.leakWarned && l.cleanMax > 0 && reading < l.cleanMax {
			// Impossible for a lone client: a whole window above this reading passed
			// without a 429. Someone else spends the same key; the bound is untrustworthy.
			l.leakWarned = true
			steps = append(steps, learnStep{Kind: "leak", Trigger: reading, CleanMaxSeen: l.cleanMax})
		}
	}
	if !l.lastCut.IsZero() && now.Sub(l.lastCut) < span {
		return append(steps, learnStep{Kind: "cut", From: l.quota, To: l.quota, SkippedRepeat: true, Trigger: l.trigger})
	}
	from := l.quota
	l.quota = math.Max(l.floor, l.quota*learnCutFactor)
	l.lastCut = now
	l.lastProbe = now // the next probe needs a full window without a 429
	return append(steps, learnStep{Kind: "cut", From: from, To: l.quota, Trigger: l.trigger})
}

// onTokenBlocked is called when the token budget — not RPM, not a cooldown — held a
// call back at now. It probes upward when a full window passed since the last
// probe, cut or 429: so there is no probing while idle, and a model bound only by
// RPM never inflates its token budget.
func (l *learner) onTokenBlocked(now time.Time, span time.Duration) (step learnStep, moved bool) {
	if !l.enabled {
		return step, false
	}
	since := l.lastProbe
	if l.last429.After(since) {
		since = l.last429
	}
	if now.Sub(since) < span {
		return step, false
	}
	l.lastProbe = now
	if l.trigger > 0 && l.quota >= l.trigger {
		// The trigger, not the quota, is the binding cap (gap 2 of seed 000).
		from := l.trigger
		switch {
		case l.trigger < l.cleanMax:
			l.trigger = math.Min(l.trigger*learnProbeFactor, l.cleanMax)
		case now.Sub(maxTime(l.last429, l.lastRelax)) >= triggerReprobeWindows*span:
			l.trigger *= learnProbeFactor
			l.lastRelax = now
		default:
			return step, false
		}
		return learnStep{Kind: "relax", From: from, To: l.trigger, Trigger: l.trigger}, true
	}
	from := l.quota
	l.quota *= learnProbeFactor
	if l.trigger > 0 && l.quota > l.trigger {
		l.quota = l.trigger // never above the tightest trigger
	}
	return learnStep{Kind: "probe", From: from, To: l.quota, Trigger: l.trigger}, true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
