package gate

import (
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
	if q, trig := quota(l, t0); q != 500 || trig != 700 {
		t.Fatalf("quota %g trigger %g, want 500 (halved) and 700 (the reading)", q, trig)
	}
}

func TestLearnerCutsAtMostOncePerWindow(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	mustAdmit(t, l, t0, req(600))
	for i := 0; i < 6; i++ { // a retry storm reports six 429s in the same second
		l.RateLimited(t0.Add(time.Duration(i)*100*time.Millisecond), "p", "m", time.Second)
	}
	if q, _ := quota(l, t0.Add(time.Second)); q != 500 {
		t.Fatalf("quota %g, want one cut to 500", q)
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
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second) // next window: cut again
	if q, _ := quota(l, t0.Add(61*time.Second)); q != 250 {
		t.Fatalf("quota %g, want 250", q)
	}
}

func TestLearnerTightestTrigger(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	mustAdmit(t, l, t0, req(600)) // 700
	l.RateLimited(t0, "p", "m", time.Second)
	mustAdmit(t, l, t0.Add(61*time.Second), req(200)) // window now 300 (the 700 left)
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second)
	if _, trig := quota(l, t0.Add(61*time.Second)); trig != 300 {
		t.Fatalf("trigger %g, want 300", trig)
	}
	mustAdmit(t, l, t0.Add(125*time.Second), req(800)) // a higher reading does not raise it
	l.RateLimited(t0.Add(125*time.Second), "p", "m", time.Second)
	if _, trig := quota(l, t0.Add(125*time.Second)); trig != 300 {
		t.Fatalf("trigger %g, want 300 still", trig)
	}
}

func TestLearnerFloor(t *testing.T) {
	c := learnGate()
	c.Defaults.TPM = 160_000
	l, _, _ := newTestLedger(t, c)
	for i := 0; i < 20; i++ {
		l.RateLimited(t0.Add(time.Duration(i)*61*time.Second), "p", "m", time.Second)
	}
	if q, _ := quota(l, t0.Add(30*time.Minute)); q != 10_000 {
		t.Fatalf("quota %g, want the floor 10000 (start ÷ 16)", q)
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
		l.RateLimited(t0.Add(100*time.Second), "p", "m", time.Second) // quota 500, trigger unobserved (window empty)
		mustAdmit(t, l, t0.Add(130*time.Second), req(300))
		heldBack(l, t0.Add(130*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 300})
		if q, _ := quota(l, t0.Add(130*time.Second)); q != 500 {
			t.Fatalf("quota %g, want 500", q)
		}
		heldBack(l, t0.Add(161*time.Second), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 300})
		if q, _ := quota(l, t0.Add(161*time.Second)); q != 525 {
			t.Fatalf("quota %g, want 525 a window after the 429", q)
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

// Seed 000's gap 2: a trigger set by traffic from outside the ledger must not
// tighten a model forever.
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
	t.Run("LeakedTriggerRelaxesUpToTheCleanWindow", func(t *testing.T) {
		l, _, ev := newTestLedger(t, learnGate())
		withOutputHistory(t, l)
		mustAdmit(t, l, t0, req(799)) // a clean window reading 899
		mustAdmit(t, l, t0.Add(61*time.Second), req(99))
		l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second) // trigger 200: outside traffic
		at := t0.Add(61 * time.Second)
		for i := 0; i < 60; i++ {
			at = at.Add(61 * time.Second)
			st := l.BucketStatus(at, "p", "m")
			loadedWindow(l, at, int(st.TokenBudget)-1)
		}
		if _, trig := quota(l, at); trig != 899 {
			t.Fatalf("trigger %g, want relaxed up to the clean reading 899", trig)
		}
		if n := relaxSteps(ev); n < 10 {
			t.Fatalf("%d relax steps", n)
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
		mustAdmit(t, l, t0.Add(61*time.Second), req(50))
		l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second)
		if _, trig := quota(l, t0.Add(61*time.Second)); trig != 150 {
			t.Fatalf("trigger %g, want 150", trig)
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
	mustAdmit(t, l, at, Request{Provider: "p", Model: "m", InputTokens: 100, MaxTokens: 300}) // in flight
	l.RateLimited(at, "p", "m", time.Second)
	if _, trig := quota(l, at); trig != 120 {
		t.Fatalf("trigger %g, want 120 (100 input + 20 expected output, not the 300 reserved)", trig)
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
	if q, trig := quota(b, t0); q != 500 || trig != 700 {
		t.Fatalf("second ledger: quota %g trigger %g, want the first one's 500 and 700", q, trig)
	}
	// the cut-once-per-window rule holds across them: b's 429 in the same window is the same sample
	b.RateLimited(t0.Add(time.Second), "p", "m", time.Second)
	if q, _ := quota(b, t0.Add(time.Second)); q != 500 {
		t.Fatalf("quota %g, want 500", q)
	}
	c, _ := NewLedger(learnGate(), clk) // no store: learns from scratch
	if q, _ := quota(c, t0); q != 1000 {
		t.Fatalf("quota %g", q)
	}
}

// A trigger below every reservation (outside traffic at the 429) makes every call
// over budget; that pressure must still reach the relax rules, or the gate would
// stop pacing the model for good (seed 000's gap 2, worst case).
func TestLearnerOverBudgetPressureRelaxesTrigger(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	withOutputHistory(t, l)
	mustAdmit(t, l, t0, req(799)) // a clean window reading 899
	mustAdmit(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", InputTokens: 20, MaxTokens: 10})
	l.RateLimited(t0.Add(61*time.Second), "p", "m", time.Second) // trigger 30: below any call of 100+
	at := t0.Add(61 * time.Second)
	for i := 0; i < 40; i++ {
		at = at.Add(61 * time.Second)
		tk := mustAdmit(t, l, at, req(50)) // 150 > the budget: admitted over budget
		l.Settle(at, tk, Usage{InputTokens: 50, OutputTokens: 100})
	}
	_, trig := quota(l, at)
	if trig < 150 {
		t.Fatalf("trigger %g: over-budget pressure never relaxed it", trig)
	}
	if len(ev.kinds(EventLeak)) != 1 {
		t.Fatal("the leak was not reported")
	}
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
