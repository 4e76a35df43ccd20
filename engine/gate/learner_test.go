package gate

import (
	"math"

	"github.com/gatectl/gatectl/engine"
	"testing"
	"time"
)

// learnGate starts the quota at 1000 tokens/min with no safety margin.
func learnGate() Config { return testGate() }

func quota(l *Ledger, now time.Time) (q, trig float64) {
	st := l.BucketStatus(now, "p", "m")
	return st.Quota, st.Trigger
}

func TestLearnerStartIsOnlyAStart(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	mustAdmit(t, l, t0, req(600)) // window 700
	l.RateLimited(t0, "p", "m", time.Second)
	if q, trig := quota(l, t0); q != 700 || trig != 700 {
		t.Fatalf("quota %g trigger %g, want both at the reading 700", q, trig)
	}
}

func TestLearnerCutsAtMostOncePerWindow(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	mustAdmit(t, l, t0, req(600))
	for i := 0; i < 6; i++ { // a retry storm reports six 429s in the same second
		l.RateLimited(t0.Add(time.Duration(i)*100*time.Millisecond), "p", "m", time.Second)
	}
	if q, _ := quota(l, t0.Add(time.Second)); q != 700 {
		t.Fatalf("quota %g, want one move to 700", q)
	}
	cuts := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "cut" {
			cuts++
		}
	}
	if cuts != 1 {
		t.Fatalf("%d cut events, want 1", cuts)
	}
	// next window, nothing in it to read: a 429 the gate's own calls cannot
	// have caused is suspect — a cooldown, no cut — until it repeats
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second)
	if q, _ := quota(l, t0.Add(61*time.Second)); q != 700 {
		t.Fatalf("quota %g, want 700", q)
	}
	l.RateLimited(t0.Add(75*time.Second), "p", "m", time.Second) // it goes on: believed, nothing to read, AIMD halves
	if q, _ := quota(l, t0.Add(75*time.Second)); q != 350 {
		t.Fatalf("quota %g, want 350", q)
	}
}

// Within a burst the readings fall (each refused call frees its reservation), so
// the burst's highest reading stands; a later burst's reading replaces it.
func TestLearnerTriggerFollowsTheLatestBurst(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	tk := mustAdmit(t, l, t0, req(600)) // 700
	mustAdmit(t, l, t0, req(100))       // 900
	l.RateLimited(t0, "p", "m", time.Second)
	l.Release(t0, tk)                                         // the refused call frees its reservation: the window reads 200
	l.RateLimited(t0.Add(time.Second), "p", "m", time.Second) // same burst, reading 200
	if _, trig := quota(l, t0.Add(time.Second)); trig != 900 {
		t.Fatalf("trigger %g, want the burst's highest reading 900", trig)
	}
	mustAdmit(t, l, t0.Add(61*time.Second), req(200)) // window now 300 (the 200 left)
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second)
	if _, trig := quota(l, t0.Add(61*time.Second)); trig != 300 {
		t.Fatalf("trigger %g, want 300", trig)
	}
	mustAdmit(t, l, t0.Add(125*time.Second), req(800)) // over budget, then refused higher up
	l.RateLimited(t0.Add(125*time.Second), "p", "m", time.Second)
	if _, trig := quota(l, t0.Add(125*time.Second)); trig != 900 {
		t.Fatalf("trigger %g, want the newer reading 900", trig)
	}
}

func TestLearnerFloor(t *testing.T) {
	c := learnGate()
	c.Defaults.TPM = 160_000
	l, _, _ := newTestLedger(t, c)
	withOutputHistory(t, l)       // a call costs about 101 tokens
	mustAdmit(t, l, t0, req(900)) // a window of 1000: a provider far below the start
	l.RateLimited(t0, "p", "m", time.Second)
	if q, trig := quota(l, t0); q != 10_000 || trig != 1000 {
		t.Fatalf("quota %g trigger %g, want the floor 10000 (start ÷ 16) and the reading 1000", q, trig)
	}
}

// withOutputHistory teaches the model, long before t0, that it writes as much as
// the reserve (100): readings then count calls in flight at their reserve, as the
// tests' arithmetic assumes.
func withOutputHistory(t *testing.T, l *Ledger) {
	t.Helper()
	early := t0.Add(-time.Hour)
	for i := 0; i < reserveMinSamples; i++ {
		tk := mustAdmit(t, l, early, Request{Provider: "p", Model: "m", InputTokens: 1})
		l.Settle(early, tk, Usage{OutputTokens: 100})
	}
}

// heldBack submits r and withdraws it if it had to wait: it only asks the gate.
func heldBack(l *Ledger, at time.Time, r Request) {
	if _, w := l.Submit(at, r); w != nil {
		w.Cancel(at)
	}
}

func TestLearnerProbesOnlyWhenTokensHeldACallBack(t *testing.T) {
	t.Run("TokenBlockedAfterAQuietWindow", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		l.BucketStatus(t0, "p", "m") // the model is known from t0: a full quiet window passes
		mustAdmit(t, l, t0.Add(61*time.Second), req(800))
		mustWait(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 500}, "tpm", 121*time.Second)
		if q, _ := quota(l, t0.Add(61*time.Second)); q != 1050 {
			t.Fatalf("quota %g, want 1050", q)
		}
	})
	t.Run("AtMostOncePerWindow", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		l.BucketStatus(t0, "p", "m")
		mustAdmit(t, l, t0.Add(61*time.Second), req(800))
		for i := 0; i < 5; i++ {
			heldBack(l, t0.Add(61*time.Second+time.Duration(i)*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 900})
		}
		if q, _ := quota(l, t0.Add(70*time.Second)); q != 1050 {
			t.Fatalf("quota %g, want a single probe to 1050", q)
		}
	})
	t.Run("PureRPMWaitDoesNotProbe", func(t *testing.T) {
		c := learnGate()
		c.Defaults.RPM = 2
		l, _, _ := newTestLedger(t, c)
		l.BucketStatus(t0, "p", "m") // known from t0: a window has passed by 61s
		mustAdmit(t, l, t0.Add(61*time.Second), req(1))
		mustAdmit(t, l, t0.Add(61*time.Second), req(1))
		// The request limit is probed instead (2 → 3): one more call, then the
		// stepped request budget holds.
		mustAdmit(t, l, t0.Add(62*time.Second), req(1))
		mustWait(t, l, t0.Add(62*time.Second), req(1), "rpm", 121*time.Second)
		if q, _ := quota(l, t0.Add(62*time.Second)); q != 1000 {
			t.Fatalf("quota %g: an RPM wait must not probe the token budget", q)
		}
	})
	t.Run("NoProbeWhileIdle", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		for i := 1; i <= 30; i++ { // light load for half an hour: never blocked
			mustAdmit(t, l, t0.Add(time.Duration(i)*time.Minute), req(10))
		}
		if q, _ := quota(l, t0.Add(31*time.Minute)); q != 1000 {
			t.Fatalf("quota %g, want 1000: no probing while nothing is held back", q)
		}
	})
	t.Run("NoProbeWithinAWindowOfA429", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		l.RateLimited(t0.Add(100*time.Second), "p", "m", time.Second) // an empty window: suspect, quota stays 1000
		mustAdmit(t, l, t0.Add(130*time.Second), req(800))
		heldBack(l, t0.Add(130*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 300})
		if q, _ := quota(l, t0.Add(130*time.Second)); q != 1000 {
			t.Fatalf("quota %g, want 1000: no probe within a window of a 429", q)
		}
		heldBack(l, t0.Add(161*time.Second), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 300})
		if q, _ := quota(l, t0.Add(161*time.Second)); q != 1050 {
			t.Fatalf("quota %g, want 1050 a window after the 429", q)
		}
	})
}

func TestLearnerNeverProbesAboveTrigger(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	mustAdmit(t, l, t0, req(500)) // 600
	l.RateLimited(t0, "p", "m", time.Second)
	// quota 500, trigger 600. Probe: 525, 551.25, 578.8, then capped at 600.
	at := t0
	for i := 0; i < 6; i++ {
		at = at.Add(61 * time.Second)
		st := l.BucketStatus(at, "p", "m")
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: int(st.TokenBudget) - 2, MaxTokens: 1}) // fills the budget
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 1, MaxTokens: 1})                           // held by tpm
	}
	if q, trig := quota(l, at); q != 600 || trig != 600 {
		t.Fatalf("quota %g trigger %g, want both 600", q, trig)
	}
}

// The outside-traffic gap: a trigger set by traffic from outside the ledger must not
// tighten a model forever.
// A trigger set by a reading below what the provider carried cleanly before
// (outside traffic, a late count) must not tighten a model forever.
func TestLearnerTriggerRelaxes(t *testing.T) {
	// loadedWindow admits up to the budget and holds one more call back, a
	// window after the previous one.
	loadedWindow := func(l *Ledger, at time.Time, in int) {
		t.Helper()
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: in, MaxTokens: 1})
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, MaxTokens: 1})
	}
	relaxSteps := func(ev *eventLog) (n int) {
		for _, e := range ev.kinds(EventLearn) {
			if e.Step == "relax" {
				n++
			}
		}
		return n
	}
	t.Run("LowTriggerRelaxesUpToTheCleanWindowInAFewWindows", func(t *testing.T) {
		l, _, ev := newTestLedger(t, learnGate())
		withOutputHistory(t, l)
		mustAdmit(t, l, t0, req(799)) // a clean window reading 899
		mustAdmit(t, l, t0.Add(61*time.Second), req(699))
		l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second) // trigger 799: believable, but below the clean 899
		at := t0.Add(61 * time.Second)
		for i := 0; i < 4; i++ {
			at = at.Add(61 * time.Second)
			st := l.BucketStatus(at, "p", "m")
			loadedWindow(l, at, int(st.TokenBudget)-1)
		}
		if _, trig := quota(l, at); math.Abs(trig-0.97*899) > 0.01 {
			t.Fatalf("trigger %g, want relaxed up to 97%% of the clean reading 899", trig)
		}
		if n := relaxSteps(ev); n < 1 || n > 3 {
			t.Fatalf("%d relax steps, want 1–3", n)
		}
	})
	t.Run("ConsistentTriggerReprobedRarely", func(t *testing.T) {
		l, _, ev := newTestLedger(t, learnGate())
		mustAdmit(t, l, t0, req(500)) // 600, no clean window above it
		l.RateLimited(t0, "p", "m", time.Second)
		at := t0
		for i := 0; i < triggerReprobeWindows-1; i++ {
			at = at.Add(time.Minute)
			loadedWindow(l, at, 590)
		}
		if n := relaxSteps(ev); n != 0 {
			t.Fatalf("%d relax steps before %d windows", n, triggerReprobeWindows)
		}
		at = t0.Add(triggerReprobeWindows*time.Minute + time.Second)
		loadedWindow(l, at, 590)
		if _, trig := quota(l, at); trig != 630 || relaxSteps(ev) != 1 {
			t.Fatalf("trigger %g after %d steps, want one re-probe to 630", trig, relaxSteps(ev))
		}
	})
	t.Run("NewRateLimitSetsItAgain", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		mustAdmit(t, l, t0, req(500))
		l.RateLimited(t0, "p", "m", time.Second)
		mustAdmit(t, l, t0.Add(61*time.Second), req(200))
		l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second)
		if _, trig := quota(l, t0.Add(61*time.Second)); trig != 300 {
			t.Fatalf("trigger %g, want 300", trig)
		}
	})
}

// The 429 reading counts calls in flight at the output the model usually writes,
// not at their reserve (which would inflate the trigger).
func TestLearnerReadingUsesExpectedOutput(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, _ := newTestLedger(t, c)
	for i := 0; i < reserveMinSamples; i++ { // the model writes 20 tokens
		tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1, MaxTokens: 1})
		l.Release(t0, tk)
		tk = mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1})
		l.Settle(t0, tk, Usage{OutputTokens: 20})
	}
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, Request{Provider: "p", Model: "m", InputTokens: 300, MaxTokens: 600}) // in flight
	l.RateLimited(at, "p", "m", time.Second)
	if _, trig := quota(l, at); trig != 320 {
		t.Fatalf("trigger %g, want 320 (300 input + 20 expected output, not the 600 reserved)", trig)
	}
}

func TestLearnerLeakWarning(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	withOutputHistory(t, l)
	mustAdmit(t, l, t0, req(800)) // a clean window reading 900
	mustAdmit(t, l, t0.Add(61*time.Second), req(200))
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second) // 429 at 300 < 900: impossible alone
	leaks := ev.kinds(EventLeak)
	if len(leaks) != 1 || leaks[0].From != 900 || leaks[0].To != 300 {
		t.Fatalf("leak events %+v", leaks)
	}
	if _, trig := quota(l, t0.Add(61*time.Second)); trig != 0 {
		t.Fatalf("trigger %g: a reading far below a clean window is suspect, not a limit", trig)
	}
	mustAdmit(t, l, t0.Add(200*time.Second), req(100))
	l.RateLimited(t0.Add(200*time.Second), "p", "m", time.Second)
	if n := len(ev.kinds(EventLeak)); n != 1 {
		t.Fatalf("%d leak warnings, want exactly one", n)
	}
}

func TestLearnerNoLeakWhenWindowHadA429(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	withOutputHistory(t, l)
	mustAdmit(t, l, t0, req(800))
	l.RateLimited(t0.Add(time.Second), "p", "m", time.Second) // the 900 window was not clean
	mustAdmit(t, l, t0.Add(61*time.Second), req(200))
	l.RateLimited(t0.Add(125*time.Second), "p", "m", time.Second)
	if n := len(ev.kinds(EventLeak)); n != 0 {
		t.Fatalf("%d leak warnings, want none", n)
	}
}

func TestLearningOff(t *testing.T) {
	c := learnGate()
	c.Learn = false
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(600))
	l.RateLimited(t0, "p", "m", time.Second)
	if q, trig := quota(l, t0); q != 1000 || trig != 0 {
		t.Fatalf("quota %g trigger %g: learning is off", q, trig)
	}
	mustWait(t, l, t0, req(1), "cooldown", time.Second) // the cooldown still applies
}

func TestLearnedQuotaSharedThroughStore(t *testing.T) {
	store := &MemoryLearnedStore{}
	clk := engine.NewFakeClock(t0)
	a, _ := NewLedger(learnGate(), clk, WithLearnedStore(store))
	mustAdmit(t, a, t0, req(600))
	a.RateLimited(t0, "p", "m", time.Second)
	b, _ := NewLedger(learnGate(), clk, WithLearnedStore(store)) // another process, same store
	if q, trig := quota(b, t0); q != 700 || trig != 700 {
		t.Fatalf("second ledger: quota %g trigger %g, want the first one's 700 and 700", q, trig)
	}
	// the cut-once-per-window rule holds across them: b's 429 in the same window is the same sample
	b.RateLimited(t0.Add(time.Second), "p", "m", time.Second)
	if q, _ := quota(b, t0.Add(time.Second)); q != 700 {
		t.Fatalf("quota %g, want 700", q)
	}
	c, _ := NewLedger(learnGate(), clk) // no store: learns from scratch
	if q, _ := quota(c, t0); q != 1000 {
		t.Fatalf("quota %g", q)
	}
}

// A trigger below every reservation (outside traffic at the 429) makes every call
// over budget; that pressure must still reach the relax rules, or the gate would
// stop pacing the model for good (the outside-traffic gap, worst case).
// A 429 read when the window holds little (an RPM limit, another client, a
// reported failure) must not become the model's limit: below the floor it never
// does; below a clean window it does only when it repeats in the next window.
func TestLearnerLowReadingCannotPoison(t *testing.T) {
	t.Run("BelowOneCall", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		withOutputHistory(t, l) // a call costs about 101 tokens
		for i := 0; i < 5; i++ {
			at := t0.Add(time.Duration(i) * 61 * time.Second)
			mustAdmit(t, l, at, Request{Provider: "p", Model: "m", InputTokens: 20, MaxTokens: 10})
			l.RateLimited(at, "p", "m", time.Second)
		}
		if q, trig := quota(l, t0.Add(5*time.Minute)); trig != 0 || q != 1000 {
			t.Fatalf("quota %g trigger %g, want 1000 and none: a 30-token reading is no limit", q, trig)
		}
	})
	t.Run("BelowACleanWindowOnce", func(t *testing.T) {
		l, _, ev := newTestLedger(t, learnGate())
		withOutputHistory(t, l)
		mustAdmit(t, l, t0, req(799)) // a clean window reading 899
		at := t0.Add(61 * time.Second)
		mustAdmit(t, l, at, req(200))
		l.RateLimited(at, "p", "m", time.Second) // 300 < 0.8 × 899: suspect
		if _, trig := quota(l, at); trig != 0 {
			t.Fatalf("trigger %g after one suspect 429", trig)
		}
		suspects := 0
		for _, e := range ev.kinds(EventLearn) {
			if e.Step == "suspect" {
				suspects++
			}
		}
		if suspects != 1 {
			t.Fatalf("%d suspect events", suspects)
		}
		// it repeats a window later: the limit really is lower now
		at = at.Add(61 * time.Second)
		mustAdmit(t, l, at, req(200))
		l.RateLimited(at, "p", "m", time.Second)
		if _, trig := quota(l, at); trig != 300 {
			t.Fatalf("trigger %g, want the repeated reading 300", trig)
		}
	})
}

// The clean-window record and the 429 reading both count calls in flight at
// their expected output, so a reserve far above what the model writes raises no
// false leak warning.
func TestLearnerNoFalseLeakFromReserves(t *testing.T) {
	c := learnGate()
	c.Defaults = ModelLimits{TPM: 10000, RPM: 100}
	c.OutputReserveTokens = 2000
	l, _, ev := newTestLedger(t, c)
	for i := 0; i < reserveMinSamples; i++ { // the model writes 50 tokens; the reserve stays large (max_tokens asked)
		tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 10})
		l.Settle(t0, tk, Usage{InputTokens: 10, OutputTokens: 50})
	}
	// a window with three calls in flight, each reserving 2000 output (the model
	// writes 50): clean
	w := t0.Add(61 * time.Second)
	for i := 0; i < 3; i++ {
		mustAdmit(t, l, w, Request{Provider: "p", Model: "m", InputTokens: 100, MaxTokens: 2000})
	}
	// the next window: one call more in flight, and a 429 — more load than any clean
	// window carried, so no leak; counted at their reserves, the clean window would
	// have read 6,300 and the 429 600
	w2 := w.Add(61 * time.Second)
	for i := 0; i < 4; i++ {
		mustAdmit(t, l, w2, Request{Provider: "p", Model: "m", InputTokens: 100, MaxTokens: 2000})
	}
	l.RateLimited(w2.Add(time.Second), "p", "m", time.Second)
	if n := len(ev.kinds(EventLeak)); n != 0 {
		t.Fatalf("%d leak warnings for the same load read two ways", n)
	}
}

// A window in which the trigger holds calls back without a step is not a raise:
// the rate rule asks whether the level was held for a window, and a trigger
// that binds for good holds it.
func TestLearnerBindingTriggerIsNotARaise(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	l.trigger, l.cleanMax = 900, 900 // bound by the trigger; nothing to relax toward
	l.lastRelax, l.last429 = t0, t0
	for i := 1; i <= 5; i++ {
		if st, moved := l.onTokenBlocked(t0.Add(time.Duration(i)*span), span, true); moved {
			t.Fatalf("window %d: step %+v, want none", i, st)
		}
	}
	if !l.lastRaise.Equal(t0) {
		t.Fatalf("lastRaise %v after windows without a step, want the birth %v", l.lastRaise, t0)
	}
	if !l.lastProbe.After(t0) {
		t.Fatal("lastProbe did not move: the test no longer shows the difference")
	}
	// A probe step is a raise.
	l2 := newLearner(1000, true, t0)
	if _, moved := l2.onTokenBlocked(t0.Add(span), span, true); !moved || !l2.lastRaise.Equal(t0.Add(span)) {
		t.Fatalf("probe moved %v, lastRaise %v", moved, l2.lastRaise)
	}
}

// A 429 a window and a half after the last probe step, with the trigger binding
// in between, is a 429 at a held level: not the probe's overshoot, which would take
// the quota back to where it was before the step.
func TestLearnerHeldTriggerIsNotAProbe(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	l.trigger, l.cleanMax = 1040, 1040
	l.lastRelax, l.last429 = t0, t0
	now := t0.Add(span)
	if st, moved := l.onTokenBlocked(now, span, true); !moved || st.Kind != "probe" || l.quota != 1040 {
		t.Fatalf("step %+v moved %v quota %g, want a probe capped at the trigger 1040", st, moved, l.quota)
	}
	now = now.Add(span)
	if _, moved := l.onTokenBlocked(now, span, true); moved { // the trigger binds
		t.Fatal("a step with the trigger binding")
	}
	steps := l.on429(now.Add(span/2), 1030, 0, false, false, span)
	for _, st := range steps {
		if st.Kind == "revert" {
			t.Fatalf("steps %+v: a 429 at the held level reverted the probe of two windows ago", steps)
		}
	}
	if l.trigger != 1030 || l.quota != 1030 {
		t.Fatalf("trigger %g quota %g, want the reading 1030 to set both", l.trigger, l.quota)
	}
}

// A later 429 of a burst can only raise the trigger (its window was emptied by
// the burst's refusals), but a rate read from what was spent is not such a
// reading: it lowers trigger and quota even within the burst.
func TestLearnerRateInBurstLowers(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	l.on429(t0.Add(10*time.Second), 950, 0, false, false, span) // the burst's first 429
	if l.trigger != 950 {
		t.Fatalf("trigger %g, want 950", l.trigger)
	}
	l.on429(t0.Add(10*time.Second+20*time.Millisecond), 800, 0, false, false, span)
	if l.trigger != 950 {
		t.Fatalf("trigger %g: a later 429 of the burst lowered it", l.trigger)
	}
	steps := l.rateInBurst(800)
	if l.trigger != 800 || l.quota != 800 || len(steps) != 1 {
		t.Fatalf("trigger %g quota %g steps %+v, want both at the rate 800", l.trigger, l.quota, steps)
	}
	if steps := l.rateInBurst(900); steps != nil || l.trigger != 800 {
		t.Fatalf("a rate above the trigger moved it: %+v, trigger %g", steps, l.trigger)
	}
}

// A burst whose first 429 was read by the rate keeps the rate: a later 429 of
// the burst, read in the sliding view the rate replaced, does not raise it.
func TestLearnerRateBurstNotUndone(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	at := t0.Add(10 * time.Second)
	l.rateAt = at // as the bucket marks a rate reading
	l.on429(at, 700, 0, false, false, span)
	l.on429(at.Add(20*time.Millisecond), 950, 0, false, false, span)
	if l.trigger != 700 {
		t.Fatalf("trigger %g, want the rate 700 kept through the burst", l.trigger)
	}
	// Without a rate reading the burst's later, higher reading raises it (the
	// rule the rate is an exception to).
	l2 := newLearner(1000, true, t0)
	l2.on429(at, 700, 0, false, false, span)
	l2.on429(at.Add(20*time.Millisecond), 950, 0, false, false, span)
	if l2.trigger != 950 {
		t.Fatalf("trigger %g, want the burst's higher reading 950", l2.trigger)
	}
}

// A 429 read in a view the votes lean away from does not pull the clean record
// down to its reading: the record is what lets the trigger relax back once the
// view switches (or the reading proves a timing artefact).
func TestLearnerViewInDoubtKeepsTheCleanRecord(t *testing.T) {
	span := time.Minute
	for _, doubt := range []bool{false, true} {
		l := newLearner(1000, true, t0)
		l.trigger, l.cleanMax, l.relaxed = 950, 950, true // relaxed toward the record
		l.on429(t0.Add(10*time.Second), 800, 0, false, doubt, span)
		switch {
		case doubt && l.cleanMax != 950:
			t.Fatalf("in doubt: clean record %g, want 950 kept", l.cleanMax)
		case !doubt && l.cleanMax != 800:
			t.Fatalf("not in doubt: clean record %g, want lowered to the trigger 800", l.cleanMax)
		}
		if l.trigger != 800 {
			t.Fatalf("doubt %v: trigger %g, want the reading 800 either way", doubt, l.trigger)
		}
	}
}

// A probe step above the start refused before any trigger: when the start lies
// within what the reading allows (reading + slack), the start — which held a
// whole window — is the trigger, not the reading, which counts the calls in
// flight at their estimates. A reading too far below it (another client, noise)
// is the trigger as before; so is any reading once the probes have moved the
// level (a slow start's larger steps, or a step after a lull from a level they
// reached: a token bucket's reserve lets such levels hold) or once a trigger
// exists.
func TestLearnerRefusedProbeKeepsTheLevelThatHeld(t *testing.T) {
	span := time.Minute
	for _, c := range []struct {
		name                 string
		steps                []int   // windows between the probe steps before the 429
		trigger              float64 // set before the probes (0: none)
		reading, slack, want float64
	}{
		{"within reach", []int{1}, 0, 990, 30, 1000},
		{"out of reach", []int{1}, 0, 900, 30, 900},
		{"above the start", []int{1}, 0, 1020, 30, 1020},
		{"slow start", []int{1, 1}, 0, 1040, 30, 1040},      // the level before the ×1.1025 step was 1050
		{"after a lull", []int{1, 1, 4}, 0, 1150, 30, 1150}, // one ×1.05 step from the 1157.6 a slow start reached
		{"had a trigger", []int{1}, 2000, 990, 30, 990},     // not the first trigger
	} {
		l := newLearner(1000, true, t0)
		l.trigger = c.trigger
		now := t0
		for i, gap := range c.steps {
			now = now.Add(time.Duration(gap) * span)
			if st, moved := l.onTokenBlocked(now, span, true); !moved || st.Kind != "probe" {
				t.Fatalf("%s: step %d %+v moved %v, want a probe", c.name, i+1, st, moved)
			}
		}
		pre := l.preProbe
		steps := l.on429(now.Add(20*time.Second), c.reading, c.slack, false, false, span)
		if l.trigger != c.want || l.quota != pre {
			t.Fatalf("%s: reading %g slack %g: trigger %g quota %g (steps %+v), want trigger %g and the quota back at %g",
				c.name, c.reading, c.slack, l.trigger, l.quota, steps, c.want, pre)
		}
	}
}

// A trigger is never set above a limit the provider stated, not even from a
// clean window read before the limit was stated.
func TestLearnerTriggerNeverAboveTheStatedLimit(t *testing.T) {
	span := time.Minute
	l := newLearner(950, true, t0)
	l.stated, l.cleanMax = 950, 1000 // the record of a window that passed before the provider stated 950
	l.on429(t0.Add(10*time.Second), 940, 100, false, false, span)
	if l.trigger != 950 {
		t.Fatalf("trigger %g, want the stated 950 (the clean record 1000 lies within the reading's reach)", l.trigger)
	}
}

// Refused again within two windows at the level the gate held, the trigger goes
// at least stepDown below that level; a reading already further below it stands
// (it was stepped down once more before).
func TestLearnerStepDownIsBelowTheLevel(t *testing.T) {
	span := time.Minute
	for _, c := range []struct{ reading, want float64 }{
		{990, 970}, // refused at the level: 3% below it
		{930, 930}, // refused 7% below it: the reading
	} {
		l := newLearner(1000, true, t0)
		l.trigger, l.quota, l.cleanMax = 1000, 1000, 1000
		l.prevCut, l.burstStart, l.last429 = t0, t0, t0 // the previous burst, a window and a half ago
		l.on429(t0.Add(span+span/2), c.reading, 0, false, false, span)
		if math.Abs(l.trigger-c.want) > 1e-9 {
			t.Fatalf("reading %g: trigger %g, want %g", c.reading, l.trigger, c.want)
		}
	}
}

// A clean window's reading within the bracket of a 429 stands for the limit —
// but not when the level refused is the trigger the previous 429 set and
// nothing moved since: refused there twice within refusedAgainWindows, the
// clean windows above describe a level the provider no longer carries. A token
// bucket refuses a level above its rate each time its reserve runs dry again,
// minutes apart; lifted back to the clean record each time, the trigger never
// moved (token-bucket-1x.yaml, seed 12: a 429 every six minutes at the same
// level for half an hour).
func TestLearnerRefusedAgainAtTheSameTrigger(t *testing.T) {
	span := time.Minute
	for _, c := range []struct {
		name          string
		since         time.Duration // from the previous 429
		trigger, want float64
	}{
		{"first at this level", 6 * time.Minute, 950, 1000},   // the previous 429 set another trigger: lifted to the clean record
		{"again, six windows on", 6 * time.Minute, 1000, 940}, // refused at the trigger it set: the reading
		{"again, an hour on", time.Hour, 1000, 1000},          // noise at a right trigger: lifted as before
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLearner(1200, true, t0)
			l.trigger, l.quota, l.cleanMax = c.trigger, c.trigger, 1000
			l.prevCut, l.burstStart, l.last429, l.lastRaise = t0, t0, t0, t0
			l.refusedLevel = 1000 // what the previous 429 set
			l.on429(t0.Add(c.since), 940, 80, false, false, span)
			if math.Abs(l.trigger-c.want) > 1e-9 {
				t.Fatalf("trigger %g, want %g", l.trigger, c.want)
			}
		})
	}
}

// raisedByRelax says the last raise was a relax toward the clean record (the
// rate rule does not count it as the gate's own step): a quota probe step or a
// view switch after it clears it.
func TestOnlyARelaxIsARaiseByRelax(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	l.trigger, l.cleanMax = 800, 1000 // under 0.97 of the clean record: relaxes
	if st, moved := l.onTokenBlocked(t0.Add(span), span, true); !moved || st.Kind != "relax" || !l.raisedByRelax {
		t.Fatalf("step %+v (moved %v), raisedByRelax %v; want a relax that sets it", st, moved, l.raisedByRelax)
	}
	l.forgetReadings()
	if l.raisedByRelax {
		t.Fatal("a view switch kept raisedByRelax: the relax was of the old view's trigger")
	}
	l.raisedByRelax = true
	l.trigger, l.quota = 2000, 900 // the quota binds: the next raise is a probe step
	if st, moved := l.onTokenBlocked(t0.Add(3*span), span, true); !moved || st.Kind != "probe" || l.raisedByRelax {
		t.Fatalf("step %+v (moved %v), raisedByRelax %v; want a probe step that clears it", st, moved, l.raisedByRelax)
	}
}

// Refused again at the trigger the previous 429 set, the clean record is set
// aside (above) — but not a level the provider served inside the bracket in the
// completion view (servedInView, set by the bucket only in that view and only at
// a 429 that does not refute it). Within the last windows the provider carried
// it, so the limit is at least that; read at the bottom of a wide bracket (a
// large refused call), the trigger sat at 0.87 of a completion-counting
// provider's limit for the rest of the hour, with the clean record pulled down
// to it and nothing to relax toward (sliding-completion at 2×, seed 5: 0.813 →
// 0.897 of the limit).
func TestServedLevelLiftsATriggerRefusedAgain(t *testing.T) {
	span := time.Minute
	for _, c := range []struct {
		name         string
		served, want float64
	}{
		{"served in the bracket", 990, 990},
		{"none served", 0, 940},
		{"served above the bracket", 1030, 940},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLearner(1200, true, t0)
			l.trigger, l.quota, l.cleanMax = 1000, 1000, 1000
			l.prevCut, l.burstStart, l.last429, l.lastRaise = t0, t0, t0, t0
			l.refusedLevel = 1000 // what the previous 429 set
			l.servedInView = c.served
			l.on429(t0.Add(6*time.Minute), 940, 80, false, false, span)
			if math.Abs(l.trigger-c.want) > 1e-9 {
				t.Fatalf("trigger %g, want %g", l.trigger, c.want)
			}
		})
	}
}

// A slow start's first two steps each wait a window at the level before them
// (a start near the limit has its first step refused, at the cost of one call);
// after them, the run's later steps come a sixth of a window apart. A 429
// with nothing to read (no trigger) starts the run over; once a trigger is set,
// every step waits a window.
func TestSlowStartSpeedsUpOnceTwoStepsHeld(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	step := func(at time.Duration) bool {
		_, moved := l.onTokenBlocked(t0.Add(at), span, true)
		return moved
	}
	if step(span/fastProbeDivisor) || !step(span) {
		t.Fatal("the first step did not wait a window")
	}
	if step(span+span/fastProbeDivisor) || !step(2*span) {
		t.Fatal("the second step did not wait a window")
	}
	at := 2 * span
	want := 1000 * learnProbeFactor * learnProbeFactor * learnProbeFactor
	for i := 3; i <= 5; i++ {
		at += span / fastProbeDivisor
		if !step(at) {
			t.Fatalf("step %d not taken a sixth of a window after the one before", i)
		}
		want *= math.Pow(learnProbeFactor, float64(i))
		if math.Abs(l.quota-want) > 0.01 {
			t.Fatalf("step %d: quota %v, want %v", i, l.quota, want)
		}
	}
	if l.quota < 2000 {
		t.Fatalf("after five steps %v, want past twice the start", l.quota)
	}

	// A window on, a 429 with nothing to read: the cut, no trigger, and the
	// run starts over.
	at += span + 5*time.Second
	l.on429(t0.Add(at), 0, 0, false, false, span)
	if l.trigger != 0 {
		t.Fatalf("trigger %v after a 429 with nothing to read", l.trigger)
	}
	if step(at+span/fastProbeDivisor) || !step(at+span) || step(at+span+span/fastProbeDivisor) || !step(at+2*span) {
		t.Fatal("after the cut the run's first two steps did not each wait a window")
	}
	if !step(at + 2*span + span/fastProbeDivisor) {
		t.Fatal("the third step of the new run was not fast")
	}

	// A trigger far above: the steps toward it wait a window each, however
	// many there were.
	at += span + 2*span + span/fastProbeDivisor + 5*time.Second
	l.on429(t0.Add(at), 3*l.quota, 0, false, false, span)
	if l.trigger == 0 || l.quota >= l.trigger {
		t.Fatalf("trigger %v quota %v: want a trigger above the quota", l.trigger, l.quota)
	}
	if step(at+span/fastProbeDivisor) || !step(at+span) || !step(at+2*span) || step(at+2*span+span/fastProbeDivisor) {
		t.Fatal("a step toward the trigger came sooner than a window after the last")
	}

	// A shared window (fast false): every step of a slow start waits a window.
	l = newLearner(1000, true, t0)
	for w := 1; w <= 2; w++ {
		if _, moved := l.onTokenBlocked(t0.Add(time.Duration(w)*span), span, false); !moved {
			t.Fatalf("step %d not taken", w)
		}
	}
	if _, moved := l.onTokenBlocked(t0.Add(2*span+span/fastProbeDivisor), span, false); moved {
		t.Fatal("a fast step with a shared window")
	}
}

// A probe or relax step by less than smallRaise (one the trigger clipped) from
// a level held for a window is marked, so that level counts as held; a whole
// step, a small step within a window of the last raise, or the outside rise
// are not.
func TestClippedStepIsARaiseByLittle(t *testing.T) {
	span := time.Minute
	l := newLearner(1000, true, t0)
	l.trigger = 1010
	if st, moved := l.onTokenBlocked(t0.Add(span), span, true); !moved || st.To != 1010 || !l.raisedLittle {
		t.Fatalf("step %+v moved %v little %v: want the clipped step to 1,010, by little", st, moved, l.raisedLittle)
	}
	l = newLearner(1000, true, t0)
	l.trigger = 2000
	if st, moved := l.onTokenBlocked(t0.Add(span), span, true); !moved || st.To != 1050 || l.raisedLittle {
		t.Fatalf("step %+v moved %v little %v: want a whole step to 1,050", st, moved, l.raisedLittle)
	}
	// The step before this one was 10 s ago: 1,050 has not held.
	l.trigger = 1060
	l.lastProbe = t0 // let the next step come at once
	if st, moved := l.onTokenBlocked(t0.Add(span+10*time.Second), span, true); !moved || st.To != 1060 || l.raisedLittle {
		t.Fatalf("step %+v moved %v little %v: a small step from a level held 10 s", st, moved, l.raisedLittle)
	}
	// A relax by little, from a trigger held a window.
	l = newLearner(1000, true, t0)
	l.trigger, l.cleanMax = 1000, 1040 // relaxTo × 1,040 = 1,008.8
	if st, moved := l.onTokenBlocked(t0.Add(span), span, true); !moved || st.Kind != "relax" || !l.raisedLittle {
		t.Fatalf("step %+v moved %v little %v: want a relax by little", st, moved, l.raisedLittle)
	}
}
