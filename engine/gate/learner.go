package gate

import (
	"math"
	"time"
)

// Learner constants. Why each rule exists: docs/RATIONALE.md, "Why does the
// learner trust a 429's reading but not every 429?".
const (
	learnCutFactor = 0.5 // a believed 429 with nothing in the window to read: quota × 0.5, at most once per window
	// learnProbeFactor is the first upward step of a probe run; each further
	// step of the same run multiplies the step by it again (1.05, 1.1025, …),
	// so a quota started at half the truth passes it in five steps (two and a
	// half windows: see fastProbeAfter).
	learnProbeFactor = 1.05
	learnProbeMaxRun = 6 // the step stops growing after this many steps (×1.34)
	// learnFloorDivisor bounds the quota from below at start ÷ 16 (at least
	// learnFloorMin tokens), so a storm of cuts cannot collapse it to nothing.
	learnFloorDivisor = 16
	learnFloorMin     = 100
	// suspectRatio: a 429 reading below this share of what the provider is known
	// to carry (a stated limit, or a window that passed cleanly) cannot be this
	// gate's own excess. It is timing (the provider still counted an earlier call)
	// or traffic from outside the ledger: the model cools down, the trigger stays.
	suspectRatio  = 0.8
	lowCallsAlone = 4
	// relaxGapShare: a trigger below relaxTo of a clean window's reading closes
	// this share of the gap to it each loaded window, so a poisoned trigger
	// recovers in two or three windows. A clean window's reading is the highest
	// of many noisy estimates, so it overstates what passed; the trigger does
	// not chase it all the way.
	relaxGapShare = 0.75
	relaxTo       = 0.97
	// nearCleanShare: a believed 429 read at this share of the clean record or
	// above ends the relaxing toward it (see on429).
	nearCleanShare = 0.9
	// A trusted 429 read at atLevelShare or more of the gate's own level says
	// the level itself is too high: the trigger goes stepDown below it, so the
	// gate does not sit exactly where it was refused.
	atLevelShare = 0.9
	stepDown     = 0.97
	// triggerReprobeWindows: a trigger that has been the binding cap is re-probed
	// × learnProbeFactor once per this many windows without a 429, so a raised
	// provider limit is found again. A wrong re-probe costs one 429 (the trigger
	// is the reading again), so 180 windows keeps it well under one 429 an hour at
	// a 60 s window. The
	// count is of windows since the last 429 or relax, loaded or not.
	triggerReprobeWindows = 180
	// refusedAgainWindows: a second 429 at the trigger the previous one set,
	// within this many windows, is read as it is — not lifted to the clean
	// record (see on429). Noise at a right trigger comes about once an hour.
	refusedAgainWindows = 10
)

// A slow start speeds up after its first steps. Its first fastProbeAfter steps
// each wait a whole window at the level before them, as every probe does: a
// start near the limit (the configured limit, mostly right) has its first step
// refused, and that costs one call. When the second step is due, the start held
// a window and the first step another: the limit is at least 1.05 times the
// start, and the run's later steps come a fastProbeDivisor-th of a window
// apart. From half the limit the climb takes two and a half windows instead of
// five. A sliding window's reading follows the level within seconds at a demand
// above it, so a step that held that long held. A token bucket lends its
// reserve to a fast climb as to a slow one; the rate rule reads it back
// (bucket.go), which a shared window turns off: there every step waits a
// window.
const (
	fastProbeAfter   = 2
	fastProbeDivisor = 6
)

// smallRaise: a probe or relax step by less than this factor (one the trigger
// clipped) moves the budget by less than a reading's own spread, so when the
// level before it had held a window, it still counts as held for the rate rule
// (bucket.go, steady).
const smallRaise = 1.02

// The first trigger's one probe step (learner.firstProbe). It waits
// firstProbeWait windows without a 429: a provider whose window is not the
// gate's view (one that counts at completion) refuses again sooner, and probing
// a trigger read in the wrong view only adds 429s.
const firstProbeWait = 2

// againProbeWindows: a trigger that a second 429 within two windows set lower
// than the first gets the first trigger's one probe step too, at most once per
// this many windows (see on429). A refused step costs one 429: at a 60 s window
// that is at most one 429 an hour on top of a right trigger's noise.
const againProbeWindows = 60

// revertProbeBracket: a first trigger set by a refused probe step gets the one
// probe step only when its bracket (the refused call and the reading's spread)
// is this share of the reading or more. The level below the step passed, so a
// narrow bracket is the limit; but a refused call of a tenth of the window says
// little about where in [reading, reading + call] the limit lies, and a slow
// start from half the limit that met one sat at 0.76–0.86 of it for the hour.
const revertProbeBracket = 0.1

const (
	firstProbeDone = iota
	firstProbeArmed
	firstProbeInFlight
)

// learner holds one model's learned token quota. Its methods require the bucket's
// mutex.
//
// Invariants: floor ≤ quota; trigger is 0 (unobserved) or > 0 (a reading, or a
// relax or step from one); budget() =
// min(quota, trigger) when a trigger is set; stated, when > 0, bounds quota from
// above. lastCut, last429 and burstStart are zero until the event first
// happens; lastProbe and lastRaise start at the learner's birth.
type learner struct {
	enabled bool
	start   float64 // the configured (or stated) TPM: a starting point, not the truth
	quota   float64
	trigger float64
	floor   float64
	stated  float64 // the provider's stated limit for one window; 0 when none
	cap     float64 // the user's cap (maxTpm) for one window; 0 when none

	lastCut   time.Time // last cut (a trusted 429 burst's first 429)
	lastProbe time.Time // last probe step, trusted 429, or window the trigger held calls back (or the learner's birth)
	last429   time.Time // last 429 of any kind
	lastRelax time.Time // last slow re-probe of the trigger
	lastRaise time.Time // last probe or relax step that raised the budget (or the learner's birth)
	rateAt    time.Time // last 429 read by the rate a drained reserve implies (see rate.go)

	probeRun int     // steps in the current run of probes (slow start)
	preProbe float64 // quota before the last probe step; a 429 within a window of it reverts to it
	// refusedLevel is the trigger the last trusted 429 set (see on429).
	refusedLevel float64
	prevCut      time.Time // the previous trusted burst's first 429

	relaxed bool // the trigger was relaxed toward the clean record since the last trusted 429
	// raisedByRelax: the last raise (set with lastRaise) was such a relax, not a
	// probe step or re-probe — not the gate's own step above a level it held.
	raisedByRelax bool
	// raisedLittle: the last raise was a step by less than smallRaise from a
	// level held for a window (or reached by such steps).
	raisedLittle bool
	// The first trigger is one reading, and it reads low: the limit lies
	// somewhere between it and it plus the refused call. It gets one probe
	// step (firstProbe: armed, then in flight from firstFrom) once it has bound
	// the budget for firstProbeWait windows without a 429; a 429 answering the
	// step within two windows takes it back, a later one is read as usual. A
	// trigger a second 429 lowered gets the same step (againProbeWindows).
	firstProbe int
	firstFrom  float64
	firstUsed  bool // the one probe was armed already, or the readings were forgotten (but see stepAtSwitch)
	// againProbeAt: when a trigger lowered by a second 429 last got that step
	// (see againProbeWindows).
	againProbeAt time.Time
	burstStart   time.Time // first trusted 429 of the current burst
	lastSuspect  time.Time // first 429 of the current suspect series
	suspects     int       // 429s in the current suspect series

	// Leak detection and the suspect rule: the highest window reading admitted in
	// a window that then passed without a 429. A later trigger below it is
	// impossible for one client.
	cleanMax       float64
	curWindowStart time.Time
	curWindowMax   float64
	leakWarned     bool

	// servedInView is set by the bucket for one on429 call: the highest level the
	// provider served within two windows, counted in the view the reading is
	// in, when that view counts exactly (the completion view: settled calls,
	// their real cost); else 0. A 429's reading is the bracket's low end, and a
	// large refused call leaves it far below the limit; a served level inside
	// the bracket is a lower bound on the limit, and the better trigger.
	servedInView float64
	// unseen is set by the bucket for one on429 call: how much more the
	// provider may have counted than the reading, past the bracket's slack —
	// at completion, a call that completed while the gate could not see it
	// (landing.go). It widens only the bracket the clean record and the served
	// level are looked for in, not the bracket that arms a probe step.
	unseen float64

	// toCompletion is set by the bucket for one on429 call: this 429 switched
	// the view to counting at completion (voteLocked), and the readings of the
	// arrival view were forgotten. The level a probe step started from was held
	// in the arrival view, which reads such a provider low; the completion
	// view's first reading, with the refused call, brackets the limit in the
	// view that explains the 429.
	toCompletion bool
	// stepAtSwitch is set with toCompletion, for the same on429 call: the
	// trigger it reads may take the first trigger's one step although the
	// arrival view used it — from a level served in the completion view, and
	// not while another client is read spending the key (the bucket decides).
	stepAtSwitch bool
	// onArrival is set by the bucket for one on429 call: the reading counts
	// the calls on arrival (the arrival view; not a rate, nor a count of
	// completions). Such a reading, taken again within two windows and lower,
	// gets its one step however narrow its bracket (see on429).
	onArrival bool
}

func newLearner(start int, enabled bool, now time.Time) learner {
	s := float64(start)
	return learner{
		enabled:        enabled,
		start:          s,
		quota:          s,
		floor:          math.Max(s/learnFloorDivisor, math.Min(learnFloorMin, s)),
		lastProbe:      now,
		lastRaise:      now,
		curWindowStart: now,
	}
}

// budget is the token budget before any margin: min(quota, trigger), never
// above the user's cap.
func (l *learner) budget() float64 {
	if l.cap > 0 {
		return math.Min(l.learnedLevel(), l.cap)
	}
	return l.learnedLevel()
}

// learnedLevel is min(quota, trigger): what was learned of the provider, which
// a cap may hold the budget under.
func (l *learner) learnedLevel() float64 {
	if l.trigger > 0 && l.trigger < l.quota {
		return l.trigger
	}
	return l.quota
}

// ceiling is what no probe or relax may go above: the lower of the
// provider's stated limit and the user's cap (0: neither). Unlike a stated
// limit, a cap says nothing of the provider, so it is no reference for which
// 429s are suspect.
func (l *learner) ceiling() float64 {
	switch {
	case l.stated > 0 && l.cap > 0:
		return math.Min(l.stated, l.cap)
	case l.stated > 0:
		return l.stated
	}
	return l.cap
}

// observeAdmit records the window reading at an admission for the clean-window
// record.
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
	Kind          string // "cut", "revert", "probe", "relax", "trigger", "leak", "suspect", "outside" (outside.go)
	From, To      float64
	Trigger       float64
	Reading       float64
	CleanMaxSeen  float64
	SkippedRepeat bool // a 429 in a burst whose first 429 already moved the quota
}

// suspect reports whether a token 429 read at reading is too low to be this
// gate's own excess (see suspectRatio). A suspect series is believed — the limit
// fell, or someone else spends the key for good — when it goes on a sixth of a
// window after its first 429, or reaches three 429s spread over a sixtieth of a
// window (not one burst at one instant, which is timing), within two windows.
//
// A reading below one typical call (its input and expected output), or an empty
// window, is never a token limit: the provider refused while holding less than
// one call of ours.
func (l *learner) suspect(now time.Time, reading, typical float64, span time.Duration) bool {
	l.observeAdmit(now, 0, span) // close the clean window, if one ended
	// Without a stated limit or a clean window there is no reference but the
	// calls themselves: a reading of fewer than lowCallsAlone ordinary calls is
	// believed only once it repeats (a start may be far from the truth, so it is
	// no reference).
	ref := math.Max(l.stated, l.cleanMax)
	lowCalls := 1.0
	if ref == 0 {
		lowCalls = lowCallsAlone
	}
	one := math.Max(typical, 1)
	low := reading < lowCalls*one // an empty window (reading 0) is low too: nothing of ours caused it
	if !low && (ref == 0 || reading >= suspectRatio*ref) {
		return false
	}
	if l.lastSuspect.IsZero() || now.Sub(l.lastSuspect) >= 2*span {
		l.lastSuspect, l.suspects = now, 0 // a new series
	}
	l.suspects++
	since := now.Sub(l.lastSuspect)
	// A reading of less than one call is never a limit (a trigger of a few dozen
	// tokens would make every call over budget); an empty window that goes on
	// refusing falls to the quota's ×0.5 instead.
	belowOne := reading > 0 && reading < one
	if !belowOne && (since >= span/6 || (reading >= one && l.suspects >= 3 && since >= span/60)) {
		l.lastSuspect, l.suspects = time.Time{}, 0
		l.cleanMax = reading // the old clean windows describe a limit that is gone
		return false
	}
	return true
}

// noteOther429 records a 429 about another limit (requests): the window is not
// clean and the next probe waits a window; nothing else moves.
func (l *learner) noteOther429(now time.Time, span time.Duration) {
	l.observeAdmit(now, 0, span)
	l.last429 = now
	l.curWindowMax = 0
}

// onSuspect records a 429 that teaches nothing: the window is not clean and the
// next probe waits a window, but quota and trigger stay.
func (l *learner) onSuspect(now time.Time, reading float64, span time.Duration) (steps []learnStep) {
	l.observeAdmit(now, 0, span)
	l.last429 = now
	l.curWindowMax = 0
	if !l.enabled {
		return nil
	}
	steps = append(steps, learnStep{Kind: "suspect", From: l.trigger, To: l.trigger, Reading: reading, Trigger: l.trigger})
	if !l.leakWarned && l.cleanMax > 0 && reading > 0 && reading < l.cleanMax {
		// Impossible for a lone client: a whole window above this reading passed
		// without a 429. Someone else spends the same key, or the provider counted late.
		l.leakWarned = true
		steps = append(steps, learnStep{Kind: "leak", Trigger: reading, CleanMaxSeen: l.cleanMax})
	}
	return steps
}

// on429 applies a believed token 429 observed with the window reading at that
// moment (0 when the window held nothing to read).
//
// The first 429 of a burst moves the quota, at most once per window; later ones
// of the same burst can only raise the trigger to their reading, since each
// refused call frees its reservation and the readings fall through a burst.
//
// slack is how far above the reading the limit may lie: the refused call's
// reservation and its output's spread, and the reading's own uncertainty. When
// a clean window's reading falls in [reading, reading + slack] too, it is the
// better estimate of the limit.
// refuted says the provider refused below a level it served within two windows
// (see bucket.voteLocked): the clean windows above the reading then describe a
// reserve it has spent, not a level it carries. viewInDoubt says the votes lean
// to the other view of the window: the reading may be of the wrong thing, so it
// does not pull the clean record down to it (which would keep a trigger read low
// there from ever relaxing back).
func (l *learner) on429(now time.Time, reading, slack float64, refuted, viewInDoubt bool, span time.Duration) (steps []learnStep) {
	l.observeAdmit(now, 0, span) // close the clean window, if one ended
	l.last429 = now
	l.curWindowMax = 0 // this window saw a 429: it is not clean
	if !l.enabled {
		return nil
	}
	inBurst := l.inBurst(now, span)
	level := l.budget()
	// Refused where the gate itself had held the level for a while (not a
	// probe's first window, not over-budget calls far above it).
	probing := l.preProbe > 0 && now.Sub(l.lastRaise) < span
	repeated := !l.prevCut.IsZero() && now.Sub(l.prevCut) < 2*span
	atLevel := !probing && reading >= atLevelShare*level && reading <= level*1.05
	hadTrigger := l.trigger > 0
	prevTrigger := l.trigger
	if reading > 0 {
		t := reading
		// Not when the level refused is the trigger an earlier 429 set, within
		// refusedAgainWindows, and nothing moved since: refused there twice,
		// the clean windows above the reading describe a level the provider
		// no longer carries (a token bucket refuses at a level above its rate
		// each time its reserve runs dry again, minutes apart).
		again := hadTrigger && l.trigger == l.refusedLevel && level == l.trigger && now.Sub(l.prevCut) < refusedAgainWindows*span
		if slack > 0 && l.cleanMax >= reading && l.cleanMax <= reading+slack+l.unseen && !again {
			t = l.cleanMax
		}
		if h := l.servedInView; slack > 0 && h > t && h <= reading+slack+l.unseen {
			// The provider served a level inside the bracket in the view read:
			// the limit is at least that (see servedInView). Refused again or
			// not: unlike the clean record, it is of the last window or two.
			t = h
		}
		if probing && !hadTrigger && l.preProbe == l.start && l.preProbe > t && reading+slack >= l.preProbe {
			// The first trigger, from a refused step above the start (the
			// configured or stated limit): when the start — which held a whole
			// window without a 429 — lies within what this reading allows, it
			// is the better estimate. The reading counts the calls in flight at
			// their estimates and reads a few percent low; taken as the
			// trigger, it would leave the gate below a level that held for the
			// hours until the trigger is re-probed. Not for a level the probes
			// reached, nor for a later trigger: a token bucket's reserve lets a
			// level hold for a while that the bucket does not sustain (a start
			// at its rate climbs to 1.34× it on the reserve), and there the
			// readings are the better evidence.
			t = l.preProbe
		}
		if l.stated > 0 {
			t = math.Min(t, l.stated) // never above what the provider says it allows
		}
		if !inBurst && repeated && atLevel {
			// At least stepDown below the level refused; a reading already
			// further below it stands.
			t = math.Min(t, level*stepDown)
		}
		// A burst whose trigger came from the rate keeps it: a later 429's
		// sliding reading is what the rate rule replaced.
		rateBurst := inBurst && !l.rateAt.Before(l.burstStart)
		if !inBurst || (t > l.trigger && !rateBurst) {
			steps = append(steps, learnStep{Kind: "trigger", From: l.trigger, To: t, Reading: reading})
			l.trigger = t
		}
		if !l.leakWarned && l.cleanMax > 0 && reading < l.cleanMax {
			l.leakWarned = true
			steps = append(steps, learnStep{Kind: "leak", Trigger: reading, CleanMaxSeen: l.cleanMax})
		}
	}
	if inBurst {
		return append(steps, learnStep{Kind: "cut", From: l.quota, To: l.quota, SkippedRepeat: true, Trigger: l.trigger})
	}
	l.burstStart = now
	from := l.quota
	kind := "cut"
	switch {
	case l.firstProbe == firstProbeInFlight && reading > 0 && now.Sub(l.lastRelax) < 2*span:
		// The step above the first trigger was refused (within the two windows
		// that try it): back to it.
		l.firstProbe = firstProbeDone
		steps = append(steps, learnStep{Kind: "trigger", From: l.trigger, To: l.firstFrom, Reading: reading})
		l.trigger = l.firstFrom
	case !hadTrigger && l.firstStepArms(reading, slack, from, probing, refuted):
		l.firstProbe, l.firstUsed = firstProbeArmed, true
	case hadTrigger && repeated && !probing && l.trigger*learnProbeFactor < stepDown*prevTrigger && (l.onArrival || slack >= (learnProbeFactor-1)*reading) &&
		(l.againProbeAt.IsZero() || now.Sub(l.againProbeAt) >= againProbeWindows*span):
		// Refused again within two windows, and read lower: the second 429
		// comes while the gate refills the window its cooldown drained, with
		// the calls in flight at their estimates and any other client's
		// backlog landing at the same edge. Its reading is the bottom of a
		// wide bracket, and the repeat keeps the clean record from lifting
		// it: without a step it would stand until the slow re-probe, hours
		// on. Even when it refutes the view (the other client's calls do),
		// one step as the first trigger gets, when it stays clearly under the
		// trigger refused before (not a 429 at the level, which steps down
		// only stepDown); a 429 answering it takes it back.
		//
		// Counted on arrival, the bracket the refill edge leaves is not the
		// refused call and the spread: another client refused all through
		// the cooldown sends its backlog as the gate refills, and the room it
		// leaves then is less than it leaves on average. So the step needs no
		// slack there. A count of completions or a rate has no such edge: a
		// narrow bracket is narrow (docs/RATIONALE.md, "A trigger lowered
		// again at the refill edge").
		l.firstProbe, l.againProbeAt = firstProbeArmed, now
	default:
		l.firstProbe = firstProbeDone
	}
	switch {
	case probing:
		// The last probe step went too far: step back to where the quota was
		// before it, not to half — the level below it had passed cleanly.
		kind = "revert"
		l.quota = math.Max(l.floor, l.preProbe)
		if l.toCompletion && l.trigger > 0 {
			// The level before the step was held in the arrival view, whose
			// readings of a provider that counts at completion run low: going
			// back to it would throw away the completion view's first reading.
			// Back to stepDown below the trigger read at this 429 (the reading,
			// or the clean record kept from the arrival view when it lies in
			// the bracket), when that is higher — which may be above the quota
			// refused, a level counted in the other view.
			l.quota = math.Max(l.quota, stepDown*l.trigger)
		}
	case reading <= 0:
		l.quota = math.Max(l.floor, l.quota*learnCutFactor) // nothing to read: AIMD's cut
	default:
		// The reading is the limit; refused at the gate's own level, the level is
		// a little too high, and the trigger steps below it.
		l.quota = math.Max(l.floor, math.Min(l.quota, l.trigger))
	}
	nearClean := reading > 0 && reading >= nearCleanShare*l.cleanMax
	if (repeated || l.relaxed || refuted || nearClean) && l.trigger > 0 && !viewInDoubt {
		// Refused twice within two windows, after relaxing toward the clean
		// record, below a level served within two windows, or within a tenth
		// of the clean record: the clean windows above this reading describe
		// bursts the provider no longer allows (a token bucket that had refilled
		// during a cooldown, a limit that fell), or the record overstates (it is
		// the highest of many noisy readings). The trigger may not relax back up
		// to them; a reading further below is a poisoned trigger the clean
		// record still lifts.
		l.cleanMax = math.Min(l.cleanMax, l.trigger)
	}
	l.relaxed = false
	l.refusedLevel = l.trigger
	l.prevCut = now
	l.preProbe, l.probeRun = 0, 0
	l.lastCut = now
	l.lastProbe = now // the next probe needs a full window without a 429
	return append(steps, learnStep{Kind: kind, From: from, To: l.quota, Trigger: l.trigger})
}

// firstStepArms reports whether the trigger a 429 just set, the first, arms its
// one probe step: one the provider did not refute, while the step is unused (or
// this 429 switched the view to completion: stepAtSwitch), with a bracket at
// least a step wide and the step inside it. When the refused call and the
// reading's spread reach less than one step above the reading, the step would
// overshoot, as it does from a trigger lifted near the bracket's top. After a
// refused probe step, see revertMayStep. At the switch to completion, only
// from a level the provider served there: its window may hold more than its
// limit once the calls it let through complete, so a reading above that is no
// floor.
func (l *learner) firstStepArms(reading, slack, from float64, probing, refuted bool) bool {
	switch {
	case l.trigger <= 0 || refuted || (l.firstUsed && !l.stepAtSwitch):
		return false
	case probing && !l.revertMayStep(reading, slack, from):
		return false
	case slack < (learnProbeFactor-1)*reading || l.trigger*learnProbeFactor > reading+slack:
		return false
	case l.toCompletion && l.trigger > l.servedInView:
		return false
	}
	return true
}

// revertMayStep reports whether a first trigger set by a refused probe step of
// the quota (from, the refused level) gets the one probe step: only when its
// bracket is revertProbeBracket of the reading or wider, and the step stays
// inside the bracket and clearly under the refused level (stepDown of it) — the
// trigger may sit above the reading already (the clean record, a served level),
// and a gate started at the truth keeps the start, one step under the refusal.
func (l *learner) revertMayStep(reading, slack, from float64) bool {
	step := l.trigger * learnProbeFactor
	return slack >= revertProbeBracket*reading && step <= reading+slack && step < stepDown*from
}

// inBurst reports whether a 429 at now belongs to the burst of the last trusted
// 429 (within a window of its first).
func (l *learner) inBurst(now time.Time, span time.Duration) bool {
	return !l.burstStart.IsZero() && now.Sub(l.burstStart) < span
}

// rateInBurst lets a rate reading (see rate.go) that came after the first 429
// of a burst lower the trigger and the quota, which on429 skips for a later 429
// of a burst: those read a window the burst's refusals emptied, but the rate is
// read from what was spent, which a refusal does not change.
func (l *learner) rateInBurst(rate float64) []learnStep {
	if !l.enabled || rate <= 0 || l.trigger <= 0 || rate >= l.trigger {
		return nil
	}
	st := learnStep{Kind: "trigger", From: l.trigger, To: rate, Reading: rate}
	l.trigger = rate
	l.quota = math.Max(l.floor, math.Min(l.quota, l.trigger))
	l.cleanMax = math.Min(l.cleanMax, l.trigger)
	return []learnStep{st}
}

// onTokenBlocked is called when the token budget — not RPM, not a cooldown — held a
// call back at now. It probes upward when a full window passed since the last
// probe, cut or 429 (a sixth of one within a slow start: see fastProbeAfter;
// fast says the bucket allows that): so there is no probing while idle, and a
// model bound only by RPM never inflates its token budget.
func (l *learner) onTokenBlocked(now time.Time, span time.Duration, fast bool) (step learnStep, moved bool) {
	if !l.enabled {
		return step, false
	}
	since := l.lastProbe
	if l.last429.After(since) {
		since = l.last429
	}
	gap := span
	if fast && l.fastStep(now, span) {
		gap = span / fastProbeDivisor
	}
	if now.Sub(since) < gap {
		return step, false
	}
	// A run of probes continues while each follows the last within two windows;
	// once a 429 has taught a trigger, probes no longer accelerate (the level is
	// known to be near, and overshooting it costs a 429).
	if now.Sub(l.lastProbe) < 2*span && l.trigger == 0 {
		l.probeRun = min(l.probeRun+1, learnProbeMaxRun)
	} else {
		l.probeRun = 1
	}
	l.lastProbe = now
	factor := math.Pow(learnProbeFactor, float64(l.probeRun))
	if l.trigger > 0 && l.quota >= l.trigger {
		// The trigger, not the quota, is the binding cap.
		from, relaxing := l.trigger, false
		switch {
		case l.ceiling() > 0 && l.trigger >= l.ceiling():
			return step, false // never probe above what the provider says it allows, or the user's cap
		case l.trigger < relaxTo*l.cleanMax:
			l.relaxed, relaxing = true, true
			l.firstProbe = firstProbeDone // the clean record, not one reading, sets it now
			target := relaxTo * l.cleanMax
			l.trigger = math.Min(target, math.Max(l.trigger*learnProbeFactor, l.trigger+relaxGapShare*(target-l.trigger)))
		case l.firstProbe == firstProbeArmed && now.Sub(maxTime(l.last429, l.lastRelax)) >= firstProbeWait*span:
			l.firstProbe, l.firstFrom = firstProbeInFlight, l.trigger
			l.trigger *= learnProbeFactor
			l.lastRelax = now
		case now.Sub(maxTime(l.last429, l.lastRelax)) >= triggerReprobeWindows*span:
			l.trigger *= learnProbeFactor
			l.lastRelax = now
		default:
			return step, false
		}
		if c := l.ceiling(); c > 0 {
			l.trigger = math.Min(l.trigger, c)
		}
		l.quota = math.Max(l.quota, l.trigger)
		l.preProbe = 0
		l.raised(now, span, from, l.trigger, relaxing)
		return learnStep{Kind: "relax", From: from, To: l.trigger, Trigger: l.trigger}, true
	}
	from := l.quota
	if c := l.ceiling(); c > 0 && from >= c {
		return step, false
	}
	l.preProbe = from
	l.quota *= factor
	if l.trigger > 0 && l.quota > l.trigger {
		l.quota = l.trigger // never above the tightest trigger
	}
	if c := l.ceiling(); c > 0 && l.quota > c {
		l.quota = c
	}
	l.raised(now, span, from, l.quota, false)
	return learnStep{Kind: "probe", From: from, To: l.quota, Trigger: l.trigger}, true
}

// fastStep reports whether the next step of a slow start may come
// 1/fastProbeDivisor of a window after the last: no trigger is known yet, the
// run has taken fastProbeAfter steps, and no 429 of any kind came since its
// last one.
func (l *learner) fastStep(now time.Time, span time.Duration) bool {
	return l.trigger == 0 && l.probeRun >= fastProbeAfter && !l.last429.After(l.lastProbe) && now.Sub(l.lastProbe) < 2*span
}

// raised records a probe or relax step that raised the budget from from to
// to: byRelax when it was a relax toward the clean record.
func (l *learner) raised(now time.Time, span time.Duration, from, to float64, byRelax bool) {
	held := now.Sub(l.lastRaise) >= span || l.raisedLittle
	l.lastRaise, l.raisedByRelax = now, byRelax
	l.raisedLittle = to < smallRaise*from && held
}

// forgetReadings drops the trigger and the clean-window record, which were read
// in a view of the provider that proved wrong; the quota stays, and 90% of the
// level that passed stands as the clean record.
func (l *learner) forgetReadings() {
	level := l.learnedLevel() // not the cap's: the cap is the user's, not a reading
	l.trigger, l.curWindowMax = 0, 0
	l.cleanMax = 0.9 * level // what passed in the old view still happened
	l.firstProbe, l.firstUsed = firstProbeDone, true
	l.burstStart, l.lastSuspect, l.suspects, l.prevCut = time.Time{}, time.Time{}, 0, time.Time{}
	l.refusedLevel, l.raisedByRelax, l.raisedLittle = 0, false, false
	l.quota = math.Max(l.floor, level) // the level that held stays; only the readings go
}

// rescale converts what was learned of the tokens to a window r times as
// long: the same rate. The start, the floor, a stated limit and the user's cap
// are the configuration's, in its units already — and so is a quota still at
// the start with no trigger: nothing was learned of it. The figures a learned
// record carries are converted the same way by LearnedQuota.inWindow: a field
// added to one belongs in the other.
func (l *learner) rescale(r float64) {
	if r <= 0 || r == 1 {
		return
	}
	if l.quota != l.start || l.trigger != 0 {
		l.quota = l.quota * r
	}
	l.trigger *= r
	l.cleanMax, l.curWindowMax = l.cleanMax*r, l.curWindowMax*r
	l.preProbe, l.firstFrom, l.refusedLevel = l.preProbe*r, l.firstFrom*r, l.refusedLevel*r
	l.quota = max(l.quota, l.floor)
}

// reset forgets everything learned: the quota starts again from start.
func (l *learner) reset(now time.Time) {
	fresh := newLearner(int(l.start), l.enabled, now)
	fresh.stated, fresh.cap = l.stated, l.cap
	*l = fresh
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
