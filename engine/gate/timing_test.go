package gate

import (
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Entries stay counted a little past the window: a provider counts a call a few
// milliseconds after the gate admits it, and frees it that much later too.
// (No send is reported here: a start's longer guard is
// TestTrafficStartingColdKeepsALongerGuard's.)
func TestCountGuardKeepsEntriesPastTheWindow(t *testing.T) {
	c := testGate()
	c.CountGuard = 0.005 // 300 ms of a 60 s window
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(800)) // 900 of 1000
	mustWait(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100}, "tpm", 60*time.Second+300*time.Millisecond)

	// A 429 that came 400 ms after its call was admitted: the provider counts
	// late, and the guard grows to 1.5 × that.
	l.RateLimitedBy(t0.Add(2*time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Admitted: t0.Add(1600 * time.Millisecond), Axis: engine.AxisRequests})
	mustWait(t, l, t0.Add(3*time.Second), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 100}, "tpm", 60*time.Second+600*time.Millisecond)

	// never more than 2% of the window, whatever was measured
	l.RateLimitedBy(t0.Add(4*time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Admitted: t0.Add(-10 * time.Second), Axis: engine.AxisRequests})
	mustWait(t, l, t0.Add(5*time.Second), Request{Provider: "p", Model: "m", Session: "d", InputTokens: 100}, "tpm", 60*time.Second+1200*time.Millisecond)
}

// warmUp sends a call of 10 tokens every 20 s from t0 until the start of
// traffic no longer keeps the longer guard (two windows and 2% on), and
// returns that time: the window then holds three of them.
func warmUp(t *testing.T, l *Ledger) time.Time {
	t.Helper()
	at := t0
	for ; at.Before(t0.Add(130 * time.Second)); at = at.Add(20 * time.Second) {
		l.Sent(at, mustAdmit(t, l, at, stepCall("warm")))
	}
	return at
}

// Traffic that starts into empty windows keeps four times the count guard
// (at most 2% of the window) from its first reported send until the first
// window's calls have left: the provider counts those latest against their
// send — every session starts at once, on a new connection — and the default
// guard let them leave the gate's window while the provider still held them
// (a 429 at the first edge over real sockets). Once they have left, the guard
// is the measured one; an idle window makes the next start a cold one again.
// A caller that reports no sends (the simulator) keeps the guard as it is.
func TestTrafficStartingColdKeepsALongerGuard(t *testing.T) {
	c := testGate()
	c.CountGuard = 0.005 // 300 ms of a 60 s window; 1.2 s from a cold start
	c.Learn = false      // no probe above the full budget

	l, _, _ := newTestLedger(t, c)
	l.Sent(t0, mustAdmit(t, l, t0, req(800))) // 900 of 1000, into empty windows
	mustWait(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100}, "tpm", 61200*time.Millisecond)

	// No send reported: the guard as configured.
	l, _, _ = newTestLedger(t, c)
	mustAdmit(t, l, t0, req(800))
	mustWait(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100}, "tpm", 60300*time.Millisecond)

	// Sent without a break for two windows: the guard is back to 300 ms.
	l, _, _ = newTestLedger(t, c)
	at := warmUp(t, l) // 140 s; the window holds the calls of 80, 100 and 120 s
	l.Sent(at, mustAdmit(t, l, at, req(870)))
	mustWait(t, l, at, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 0, MaxTokens: 10}, "tpm", 140300*time.Millisecond)

	// A reload that changes the window ends a start's period (counted in the
	// old window's length): the guard is the configured one of the new.
	l, _, _ = newTestLedger(t, c)
	l.Sent(t0, mustAdmit(t, l, t0, req(800)))
	c2 := c
	c2.Window = 30 * time.Second // a guard of 150 ms
	c2.MaxWait = 60 * time.Second
	if err := l.Reconfigure(t0, c2); err != nil {
		t.Fatal(err)
	}
	mustWait(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100}, "tpm", 30150*time.Millisecond)

	// Idle for a window: what starts then is cold again — after the first
	// start's period, and within it (which it then extends: a call that
	// warmed the model up does not shorten the burst's guard).
	for _, restart := range []time.Duration{200 * time.Second, 70 * time.Second} {
		l, _, _ = newTestLedger(t, c)
		l.Sent(t0, mustAdmit(t, l, t0, stepCall("a"))) // left at 61.2 s; cold until 121.2 s
		idle := t0.Add(restart)
		l.Sent(idle, mustAdmit(t, l, idle, req(800)))
		// Read after the first start's period ended, past the warm guard:
		// the burst's call is still counted.
		mustWait(t, l, idle.Add(60500*time.Millisecond), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100}, "tpm", restart+61200*time.Millisecond)
	}
}

// A drained window must not release the whole queue in one instant: grants are
// paced at Pace × the budget per window, after a burst of PaceBurst × it.
func TestPacingSpreadsTheQueue(t *testing.T) {
	c := testGate()
	c.Pace, c.PaceBurst = 2, 0.1 // 2000 tokens a minute (33.3/s), 100 at once
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(0)) // 100: the whole burst
	w := mustWait(t, l, t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 0}, "pace", 3*time.Second)
	if _, ok := w.Poll(t0.Add(3 * time.Second)); !ok {
		t.Fatal("not granted once the pacer refilled")
	}
	// Without pacing the same call goes at once.
	c.Pace = 0
	l2, _, _ := newTestLedger(t, c)
	mustAdmit(t, l2, t0, req(0))
	mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m", Session: "b"})
}

// A call whose cache reads the provider does not count (Anthropic) gives them
// back to the pacer when it settles: charged the whole input its size stood
// for, an agent whose turns are mostly cache reads was paced as if the
// provider counted them.
func TestPacingRefundsUncountedCacheReads(t *testing.T) {
	c := testGate()
	c.Pace, c.PaceBurst = 2, 0.1 // 2000 tokens a minute (33.3/s), 100 at once
	for _, uncounted := range []bool{false, true} {
		l, _, _ := newTestLedger(t, c)
		tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 90, MaxTokens: 10}) // the whole burst
		if err := l.Settle(t0, tk, Usage{InputTokens: 5, CacheReadTokens: 85, OutputTokens: 10, CacheReadsUncounted: uncounted}); err != nil {
			t.Fatal(err)
		}
		next := Request{Provider: "p", Model: "m", Session: "b", InputTokens: 50, MaxTokens: 10}
		if uncounted {
			mustAdmit(t, l, t0, next) // 85 back: room for 60 at once
		} else {
			mustWait(t, l, t0, next, "pace", 1800*time.Millisecond) // counted: the pacer refills 60 at 33.3/s
		}
	}
}

// The margin covers the summed spread of the calls in flight: z·√(Σ variance),
// which grows with √N, not N.
func TestPooledMarginGrowsWithTheRootOfN(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 1000}
	c.MarginSigmas = 3
	c.Learn = false // no probe: the budget stays 100000
	l, _, _ := newTestLedger(t, c)
	early := t0.Add(-time.Hour)
	for i := 0; i < reserveSamples; i++ { // outputs 0 and 200, equally long in flight: mean 100, σ 100
		tk := mustAdmit(t, l, early, Request{Provider: "p", Model: "m", InputTokens: 1})
		l.Settle(early.Add(time.Second), tk, Usage{InputTokens: 1, OutputTokens: int64(200 * (i % 2))})
	}
	b := l.bucketFor("p", "m", t0)
	margin := func() int64 { b.mu.Lock(); defer b.mu.Unlock(); return b.margin(0) }
	tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 10})
	if tk.ReservedOutput != 100 {
		t.Fatalf("reserve %d, want the expected output 100", tk.ReservedOutput)
	}
	if m := margin(); m != 300 {
		t.Fatalf("margin with one call in flight %d, want 3 × 100", m)
	}
	for i := 0; i < 3; i++ {
		mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 10})
	}
	if m := margin(); m != 600 {
		t.Fatalf("margin with four calls in flight %d, want 3 × 100 × √4 = 600 (not 4 × 300)", m)
	}
	// A call whose reservation fits but whose margin does not waits.
	st := l.BucketStatus(t0, "p", "m")
	fill := int(st.TokenBudget-st.WindowTokens) - 1 - 600 // the filler's own margin is 600: 599 stay free, room for the call (101), not its margin (671)
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: fill, MaxTokens: 1})
	if tk, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 1}); w == nil {
		t.Fatalf("admitted into the margin: %+v %+v margin %d", tk, l.BucketStatus(t0, "p", "m"), margin())
	}
}

// An RPM 429 teaches the request budget, never the token quota; an unnamed 429
// with the window at its request budget and well under its token budget is an
// RPM 429 too.
func TestRateLimitAxes(t *testing.T) {
	t.Run("NamedRequests", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		for i := 0; i < 6; i++ {
			mustAdmit(t, l, t0, req(50))
		}
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
		st := l.BucketStatus(t0, "p", "m")
		if st.Quota != 1000 || st.Trigger != 0 || st.RPMBudget != 6 {
			t.Fatalf("quota %v trigger %v rpm %d, want 1000, none and the 6 requests in the window", st.Quota, st.Trigger, st.RPMBudget)
		}
	})
	t.Run("JudgedFromTheWindow", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate()) // 10 requests, 1000 tokens
		withOutputHistory(t, l)                  // long before: the model writes 100
		at := t0.Add(2 * time.Hour)
		for i := 0; i < 9; i++ {
			mustAdmit(t, l, at, Request{Provider: "p", Model: "m", InputTokens: 1, MaxTokens: 1}) // 9 requests, 18 tokens
		}
		l.RateLimited(at, "p", "m", time.Second)
		if st := l.BucketStatus(at, "p", "m"); st.Trigger != 0 || st.Quota != 1000 || st.RPMBudget != 9 {
			t.Fatalf("quota %v trigger %v rpm %d: a request-bound 429 moved the token quota", st.Quota, st.Trigger, st.RPMBudget)
		}
	})
	t.Run("TokensWhenTheWindowIsFullOfThem", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		mustAdmit(t, l, t0, req(800))
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.Trigger != 900 {
			t.Fatalf("trigger %v, want the token reading 900", st.Trigger)
		}
	})
	t.Run("RPMTriggerRelaxes", func(t *testing.T) {
		c := learnGate()
		c.Defaults = ModelLimits{TPM: 1_000_000, RPM: 100}
		l, _, _ := newTestLedger(t, c)
		for i := 0; i < 40; i++ {
			mustAdmit(t, l, t0, req(1))
		}
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 40 {
			t.Fatalf("rpm budget %d, want 40", st.RPMBudget)
		}
		at := t0
		for i := 0; i < 3; i++ { // windows in which the request budget held calls back, no 429
			at = at.Add(61 * time.Second)
			for l.BucketStatus(at, "p", "m").WindowRequests < l.BucketStatus(at, "p", "m").RPMBudget {
				mustAdmit(t, l, at, req(1))
			}
			heldBack(l, at, req(1))
		}
		if st := l.BucketStatus(at, "p", "m"); st.RPMBudget != 46 {
			t.Fatalf("rpm budget %d, want 40 → 42 → 44 → 46", st.RPMBudget)
		}
	})
}

// Counted at completion, the window's request count at an RPM 429 is the
// completions the gate saw within a window, and the provider refused because
// the completions in its window had reached its limit: what the key leaves
// this instance is at most about the count. The first such 429 sets the
// ceiling at once (not far below a count served lately);
// on arrival (the count may miss calls the provider still holds) it is a
// trigger that relaxes. Taken as a trigger at completion, the step above the
// count was refused a few windows later: over real sockets a second 429 at
// 35 s, whose cooldown took a fifth of the windows after learning.
func TestFirstRPM429CountedAtCompletionIsTheCeiling(t *testing.T) {
	told := func(c *Config) { c.Defaults.CountsAt = CountsAtCompletion }
	_, refused, served := requestRun{rpm: 40, prov: atCompletion(), config: told, d: 30 * time.Minute}.run(t)
	t.Logf("429s at %v; served a window %v", refused, served)
	if len(refused) != 1 || servedFrom5(served) < 18*25 {
		t.Fatalf("429s at %v, %d served in windows 5–29: want the first only, and at least 90%% of 20 a window", refused, servedFrom5(served))
	}

	t.Run("NotFarBelowALevelServed", func(t *testing.T) {
		// The provider served 60 requests counted at completion a window ago;
		// refused now at 30, the key held another client's burst: a trigger,
		// which relaxes, not a ceiling for the next 180 windows.
		c := rpmGate(100)
		c.Defaults.CountsAt = CountsAtCompletion
		l, _, _ := newTestLedger(t, c)
		fillDone := func(at time.Time, n int) { // calls admitted and answered at at
			for l.BucketStatus(at, "p", "m").WindowRequests < n {
				if err := l.Settle(at, mustAdmit(t, l, at, req(1)), Usage{InputTokens: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
		fillDone(t0, 60)
		at := t0.Add(61 * time.Second) // the 60 have left the window
		fillDone(at, 30)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests})
		first := l.BucketStatus(at, "p", "m").RPMBudget
		last := first
		for range 4 { // windows that hold calls back
			at = at.Add(61 * time.Second)
			fillDone(at, last)
			heldBack(l, at, req(1))
			last = l.BucketStatus(at, "p", "m").RPMBudget
		}
		if first > 30 || last <= first {
			t.Fatalf("rpm budget %d at the 429, %d four windows on: want the count 30 relaxing", first, last)
		}
	})
}

// A relaxed RPM trigger raises the request budget above the level that held,
// as a probe step does, and its calls above that level go one at a time for a
// window: a gap apart, so that a refused step costs one call. Unspaced, over
// real sockets the window's drain let two calls past the count refused before
// in the same millisecond, and both were refused.
func TestRelaxedRequestStepGoesOneCallAtATime(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(100))
	fillRequests(t, l, t0, 50)
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests})
	at := t0.Add(61 * time.Second)
	held := l.BucketStatus(at, "p", "m").RPMBudget
	fillRequests(t, l, at, held)
	heldBack(l, at, req(1)) // relaxes the trigger; the held-back call goes at once, the first above
	st := l.BucketStatus(at, "p", "m")
	if st.RPMBudget < held+2 || st.WindowRequests != held+1 {
		t.Fatalf("rpm budget %d, window %d after the relaxation from %d: want two or more above it, one call let through", st.RPMBudget, st.WindowRequests, held)
	}
	w := mustWait(t, l, at, req(1), "pace", at.Sub(t0)+stepGapMin)
	w.Cancel(at)
	at = at.Add(stepGapMin)
	mustAdmit(t, l, at, req(1))
	// a window after the relaxation the calls are no longer spaced
	at = t0.Add(122*time.Second + time.Millisecond)
	fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget-1)

	t.Run("AnsweredByA429", func(t *testing.T) {
		// A request 429 answers the step: the calls are not spaced after it,
		// though the window the step was tried in has not passed.
		l, _, _ := newTestLedger(t, rpmGate(100))
		named := engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests}
		fillRequests(t, l, t0, 50)
		l.RateLimitedBy(t0, "p", "m", named)
		fillRequests(t, l, t0.Add(61*time.Second), 25)
		at := t0.Add(100 * time.Second)
		fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget)
		heldBack(l, at, req(1)) // relaxed: spaced until 160 s
		l.RateLimitedBy(at.Add(500*time.Millisecond), "p", "m", named)
		at = t0.Add(122 * time.Second) // the calls of 61 s have left the window
		for range 3 {
			mustAdmit(t, l, at, req(1))
		}
	})
}

// fillRequests admits one-token calls at at until the window holds n requests.
func fillRequests(t *testing.T, l *Ledger, at time.Time, n int) {
	t.Helper()
	for l.BucketStatus(at, "p", "m").WindowRequests < n {
		mustAdmit(t, l, at, req(1))
	}
}

// A relaxed RPM trigger refused again within refusedAgainWindows: the count
// becomes the ceiling the trigger relaxes to, so the trigger stops climbing
// into the limit after each 429 (with the RPM configured at twice the truth it
// took one every one to two windows). At the same count the count is the
// ceiling; at a lower one (a bucket's lent reserve running out), rpmStepDown
// below it. A 429 outside refusedAgainWindows only sets a trigger.
func TestRPMRefusedAgainSetsTheCeiling(t *testing.T) {
	newLedger := func() *Ledger {
		c := learnGate()
		c.Defaults = ModelLimits{TPM: 1_000_000, RPM: 100}
		l, _, _ := newTestLedger(t, c)
		return l
	}
	named := engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests}
	// refused at 50; relaxed to 52 after a window that held calls back; refused
	// at count second in the next window; then windows that hold calls back.
	run := func(l *Ledger, second int, gap time.Duration) (after, later int) {
		fillRequests(t, l, t0, 50)
		l.RateLimitedBy(t0, "p", "m", named)
		at := t0.Add(gap)
		fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget)
		heldBack(l, at, req(1))
		if st := l.BucketStatus(at, "p", "m"); st.RPMBudget != 52 {
			t.Fatalf("rpm budget %d after a window held back, want 50 relaxed to 52", st.RPMBudget)
		}
		at = at.Add(61 * time.Second) // a window on: only the 429's own window counts
		fillRequests(t, l, at, second)
		l.RateLimitedBy(at, "p", "m", named)
		after = l.BucketStatus(at, "p", "m").RPMBudget
		for i := 0; i < 3; i++ {
			at = at.Add(61 * time.Second)
			fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget)
			heldBack(l, at, req(1))
		}
		return after, l.BucketStatus(at, "p", "m").RPMBudget
	}
	t.Run("SameCount", func(t *testing.T) {
		if after, later := run(newLedger(), 51, 61*time.Second); after != 51 || later != 51 {
			t.Fatalf("rpm budget %d at the 429, %d three windows on: want the count 51 to hold", after, later)
		}
	})
	t.Run("LowerCount", func(t *testing.T) {
		// 0.93 × min(45, 50) = 41.85
		if after, later := run(newLedger(), 45, 61*time.Second); after != 41 || later != 41 {
			t.Fatalf("rpm budget %d at the 429, %d three windows on: want 41, below the lower count", after, later)
		}
	})
	t.Run("TwoLower", func(t *testing.T) {
		// a count two below the one refused is not the same count: a token
		// bucket's or fixed windows' count falls a little at each burst, and
		// taken as the ceiling each time it took a 429 every two or three
		// minutes. 0.93 × 48 = 44.6
		if after, later := run(newLedger(), 48, 61*time.Second); after != 44 || later != 44 {
			t.Fatalf("rpm budget %d at the 429, %d three windows on: want 44, below the lower count", after, later)
		}
	})
	t.Run("RefusedAtTheCeilingLongAfter", func(t *testing.T) {
		// refused again at the ceiling's budget beyond refusedAgainWindows: a
		// token bucket draining its reserve a few requests a window above its
		// rate. Without the step, a trigger at the count relaxed back to the
		// ceiling, refused every quarter hour. 0.93 × 51 = 47.4
		l := newLedger()
		run(l, 51, 61*time.Second) // ceiling 51 at t0 + 122 s, then three windows
		at := t0.Add(122*time.Second + 11*61*time.Second)
		fillRequests(t, l, at, 51)
		l.RateLimitedBy(at, "p", "m", named)
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 47 {
			t.Fatalf("rpm budget %d, want 47: the ceiling stepped below the count refused at it", got)
		}
	})
	t.Run("AnotherClientsDip", func(t *testing.T) {
		// below suspectRatio of the count refused before: a trigger, not a ceiling
		after, later := run(newLedger(), 30, 61*time.Second)
		if after != 30 || later <= 30 {
			t.Fatalf("rpm budget %d at the 429, %d three windows on: want 30 relaxing", after, later)
		}
	})
	t.Run("ReprobedAndForgottenForAStatedLimit", func(t *testing.T) {
		l := newLedger()
		run(l, 51, 61*time.Second) // ceiling 51 at t0 + 122 s
		at := t0.Add(122 * time.Second)
		// Held for triggerReprobeWindows windows of 60 s after the 429, then
		// stepped × 1.05 a window while nothing refuses it.
		var budgets []int
		for i := 0; i < triggerReprobeWindows+1; i++ {
			at = at.Add(61 * time.Second)
			fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget)
			heldBack(l, at, req(1))
			budgets = append(budgets, l.BucketStatus(at, "p", "m").RPMBudget)
		}
		// 177 windows of 61 s are under 180 of 60 s; the 178th is past them
		if budgets[176] != 51 || budgets[177] != 53 || budgets[178] != 55 || budgets[180] != 59 {
			t.Fatalf("rpm budgets %v in the last windows, want 51 held, then 53, 55, 57, 59", budgets[175:])
		}
		l.Calibrate(at, "p", "m", -1, -1, 90, 40) // an answer's headers: 90 a minute
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 90 {
			t.Fatalf("rpm budget %d after the provider stated 90 a minute, want the stated limit, not the ceiling", got)
		}
	})
	t.Run("NotAgain", func(t *testing.T) {
		// eleven windows after the first: a trigger at the count, which relaxes
		after, later := run(newLedger(), 51, 10*61*time.Second)
		if after != 51 || later <= 51 {
			t.Fatalf("rpm budget %d at the 429, %d three windows on: want 51 relaxing", after, later)
		}
	})
}

// Started low, the quota climbs in a slow start: each step is 5% larger than the
// last, so half the truth is made up in five steps, not fifteen. (Here each
// step comes a window after the last; TestSlowStartSpeedsUpOnceTwoStepsHeld has
// the faster ones.)
func TestSlowStartProbes(t *testing.T) {
	c := learnGate()
	c.Defaults.TPM = 500
	l, _, _ := newTestLedger(t, c)
	l.BucketStatus(t0, "p", "m")
	at := t0
	var quotas []float64
	for i := 0; i < 5; i++ {
		at = at.Add(61 * time.Second)
		st := l.BucketStatus(at, "p", "m")
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: int(st.TokenBudget) - 1, MaxTokens: 1})
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, MaxTokens: 1})
		q, _ := quota(l, at)
		quotas = append(quotas, q)
	}
	want := 500.0
	for i, q := range quotas {
		want *= math.Pow(learnProbeFactor, float64(i+1))
		if math.Abs(q-want) > 0.01 {
			t.Fatalf("window %d: quota %v, want %v (all: %v)", i+1, q, want, quotas)
		}
	}
	if quotas[4] < 1000 {
		t.Fatalf("after five windows %v, want past the 1000 it started half of", quotas[4])
	}
}

// A 429 within a window of a probe step reverts the step instead of halving.
func TestProbe429Reverts(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	l.BucketStatus(t0, "p", "m")
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 998, MaxTokens: 1})
	heldBack(l, at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, MaxTokens: 1}) // probe to 1050
	if q, _ := quota(l, at); q != 1050 {
		t.Fatalf("quota %v, want the probe 1050", q)
	}
	at = at.Add(10 * time.Second)
	mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 30, MaxTokens: 1})
	l.RateLimited(at, "p", "m", time.Second)
	if q, _ := quota(l, at); q != 1000 {
		t.Fatalf("quota %v, want the step reverted to 1000", q)
	}
	reverts := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "revert" {
			reverts++
		}
	}
	if reverts != 1 {
		t.Fatalf("%d revert events", reverts)
	}
}

// The refused call bounds the limit from above: a clean window's reading that
// lies between the 429's reading and the reading plus that call is the better
// estimate, and stays the trigger.
func TestRefusedCallBoundsTheTrigger(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	withOutputHistory(t, l)
	mustAdmit(t, l, t0, req(799)) // a clean window reading 899
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, req(700)) // reading 800 when the next call (reserving 150) is refused
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Tokens: 150})
	if _, trig := quota(l, at); trig != 899 {
		t.Fatalf("trigger %v, want the clean reading 899 (within 800 + 150)", trig)
	}
	// Without the refused call's size the reading alone is the trigger.
	l2, _, _ := newTestLedger(t, learnGate())
	withOutputHistory(t, l2)
	mustAdmit(t, l2, t0, req(799))
	mustAdmit(t, l2, at, req(700))
	l2.RateLimited(at, "p", "m", time.Second)
	if _, trig := quota(l2, at); trig != 800 {
		t.Fatalf("trigger %v, want the reading 800", trig)
	}
}

// Refused twice within two windows at the level the gate itself held: the level
// steps down below it, and the clean windows above it no longer pull the
// trigger back up (a token bucket that had refilled, a limit that fell).
func TestRepeatedRefusalAtTheLevelStepsDown(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	withOutputHistory(t, l)
	mustAdmit(t, l, t0, req(899)) // clean window: 999
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, req(849)) // 949
	l.RateLimited(at, "p", "m", time.Second)
	_, first := quota(l, at)
	at = at.Add(61 * time.Second)
	st := l.BucketStatus(at, "p", "m")
	mustAdmit(t, l, at, req(int(st.TokenBudget)-101))
	l.RateLimited(at, "p", "m", time.Second)
	_, second := quota(l, at)
	if second >= first*0.98 {
		t.Fatalf("trigger %v after %v: want a step below the level", second, first)
	}
	// loaded windows without a 429: no relax back toward the old clean 999
	for i := 0; i < 5; i++ {
		at = at.Add(61 * time.Second)
		st := l.BucketStatus(at, "p", "m")
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: int(st.TokenBudget) - 1, MaxTokens: 1})
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, MaxTokens: 1})
	}
	if _, trig := quota(l, at); trig > second*1.001 {
		t.Fatalf("trigger %v relaxed above %v toward stale clean windows", trig, second)
	}
}

// A provider that counts a call when it completes refuses as the gate's arrival
// window drains while the calls that completed since still fill its own. One
// such 429 switches the bucket to the completion view; there, calls in flight do
// not count, settled ones count from when they settled.
func TestCompletionCountingIsLearned(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	// A window's worth admitted at t0, settling 50 s later.
	var tks []Ticket
	for i := 0; i < 8; i++ {
		tks = append(tks, mustAdmit(t, l, t0, req(10)))
	}
	for _, tk := range tks {
		l.Settle(t0.Add(50*time.Second), tk, Usage{InputTokens: 10, OutputTokens: 100})
	}
	// At 61 s the arrival window holds one call of 2 tokens, the completion
	// window 880: a 429 there is the completion view's. It refutes the arrival
	// view (which served 880) and the completion view reads it far above the
	// arrival view (strongVoteRatio): either switches at once.
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "z", InputTokens: 1, MaxTokens: 1})
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens})
	switched := false
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "count-mode" && e.Reason == "at-completion" {
			switched = true
		}
	}
	if !switched {
		t.Fatal("the bucket did not learn that the provider counts at completion")
	}
	// The 429 in the new view taught its reading: 880 settled when it came.
	if _, trig := quota(l, t0.Add(65*time.Second)); trig != 880 {
		t.Fatalf("trigger %v, want the completion reading 880", trig)
	}
	// In that view calls in flight cost nothing yet: once the settled calls have
	// left it (a window after they settled), nine calls of 110 go at once,
	// though together they are over the 880 budget.
	at = t0.Add(115 * time.Second)
	tks = tks[:0]
	for i := 0; i < 9; i++ {
		tks = append(tks, mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "q", InputTokens: 10}))
	}
	// Settled, they count from when they settled, for a window.
	for _, tk := range tks {
		l.Settle(at.Add(5*time.Second), tk, Usage{InputTokens: 10, OutputTokens: 50})
	}
	mustWait(t, l, at.Add(6*time.Second), Request{Provider: "p", Model: "m", Session: "r", InputTokens: 400}, "tpm", 180*time.Second)
}

func TestResetForgetsWhatWasLearned(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	for range 4 {
		mustAdmit(t, l, t0, req(100)) // 200 tokens each with the output reserve
	}
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests}) // request budget 4
	if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 4 {
		t.Fatalf("setup: rpm %d", st.RPMBudget)
	}
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: 30 * time.Second, Axis: engine.AxisTokens})
	if q, trig := quota(l, t0); q != 800 || trig != 800 {
		t.Fatalf("setup: quota %v trigger %v", q, trig)
	}
	before, ok := l.Reset(t0.Add(time.Second), "p", "m")
	if !ok {
		t.Fatal("Reset of a known model reported false")
	}
	if before.Quota != 800 || before.Trigger != 800 || before.RPMBudget != 4 {
		t.Fatalf("status before the reset: quota %v trigger %v rpm %d, want what was learned (800, 800, 4)", before.Quota, before.Trigger, before.RPMBudget)
	}
	st := l.BucketStatus(t0.Add(time.Second), "p", "m")
	if st.Quota != 1000 || st.Trigger != 0 || st.CooldownMs != 29000 || st.RPMBudget != 10 || st.CountsAt != "arrival" {
		t.Fatalf("after reset: quota %v trigger %v cooldown %dms, want 1000, none, and the cooldown kept", st.Quota, st.Trigger, st.CooldownMs)
	}
	learned := ev.kinds(EventLearn)
	if len(learned) == 0 || learned[len(learned)-1].Step != "reset" {
		t.Fatal("no reset event")
	}
	if e := learned[len(learned)-1]; e.From != 800 || e.To != 1000 {
		t.Fatalf("reset event from %v to %v, want the budget learned (800) to the start (1000)", e.From, e.To)
	}
	if _, ok := l.Reset(t0, "p", "never-seen"); ok {
		t.Fatal("Reset of an unknown model reported true")
	}
}

// Calls that failed open (maxWait) or went over budget do not spend the pacer:
// otherwise a stretch of fail-open grants would leave it so far in debt that the
// next ordinary call waits the whole maxWait too.
func TestFailOpenDoesNotDrainThePacer(t *testing.T) {
	c := testGate()
	c.Pace, c.PaceBurst = 2, 0.1
	l, _, _ := newTestLedger(t, c)
	l.RateLimited(t0, "p", "m", 130*time.Second) // a cooldown longer than maxWait (120 s)
	for i := 0; i < 50; i++ {
		if tk, w := l.Submit(t0, req(50)); w != nil || !tk.FailOpen {
			t.Fatalf("call %d: want a fail-open grant past maxWait", i)
		}
	}
	at := t0.Add(200 * time.Second) // the cooldown is over, the window empty
	if tk, w := l.Submit(at, Request{Provider: "p", Model: "m", Session: "z", InputTokens: 10}); w != nil || tk.FailOpen {
		t.Fatalf("an ordinary call after the fail-open stretch: waiter %v, ticket %+v", w != nil, tk)
	}
}

// A wall clock that steps back must not leave the pacer waiting for it.
func TestPacerSurvivesAClockStepBack(t *testing.T) {
	c := testGate()
	c.Pace, c.PaceBurst = 2, 0.1
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0.Add(10*time.Minute), req(0))
	back := t0.Add(5 * time.Second)
	w := mustWait(t, l, back, Request{Provider: "p", Model: "m", Session: "b"}, "pace", 5*time.Second+3*time.Second)
	if _, ok := w.Poll(back.Add(3 * time.Second)); !ok {
		t.Fatal("the pacer waited for the clock to come back")
	}
}

// With learning off the gate learns nothing about timing either: no count
// delay, no count view.
func TestLearningOffLearnsNoTiming(t *testing.T) {
	c := learnGate()
	c.Learn = false
	l, _, _ := newTestLedger(t, c)
	var tks []Ticket
	for i := 0; i < 8; i++ {
		tks = append(tks, mustAdmit(t, l, t0, req(10)))
	}
	for _, tk := range tks {
		l.Settle(t0.Add(50*time.Second), tk, Usage{InputTokens: 10, OutputTokens: 100})
	}
	for i := 0; i < 4; i++ {
		at := t0.Add(time.Duration(61+i*2) * time.Second)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at.Add(-time.Second)})
	}
	if st := l.BucketStatus(t0.Add(70*time.Second), "p", "m"); st.CountsAt != "arrival" {
		t.Fatalf("counts at %s with learning off", st.CountsAt)
	}
}

// maxWait equal to the window stays legal: the count guard never makes a drain
// wait exceed it.
func TestGuardNeverPushesPastMaxWait(t *testing.T) {
	c := testGate()
	c.CountGuard = 0.02
	c.MaxWait = c.Window
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(800))
	w := mustWait(t, l, t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 200}, "tpm", 60*time.Second)
	if _, ok := w.Ticket(); ok {
		t.Fatal("failed open at once")
	}
}

// stepCall is a call of 10 tokens (9 in, max_tokens 1) to the test model.
func stepCall(session string) Request {
	return Request{Provider: "p", Model: "m", Session: session, InputTokens: 9, MaxTokens: 1}
}

// stepLedger is a model whose budget has just stepped from a held 1000 to 1050:
// a window full at t0, another full at t1 = t0 + 61 s (a window without a 429),
// and the call that the full budget held back, which stepped it up and went —
// the step's first call. The window holds 1010. delay, when set, is an earlier
// 429's admission→429 delay.
func stepLedger(t *testing.T, delay time.Duration) (l *Ledger, c Config, t1 time.Time, b *bucket) {
	t.Helper()
	c = testGate()
	c.Defaults.RPM = 100_000
	l, _, _ = newTestLedger(t, c)
	b = l.bucketFor("p", "m", t0)
	if delay > 0 {
		b.mu.Lock()
		b.delays[0], b.nDelay = delay, 1
		b.mu.Unlock()
	}
	t1 = t0.Add(61 * time.Second)
	for _, at := range []time.Time{t0, t1} {
		for i := 0; i < 100; i++ {
			mustAdmit(t, l, at, stepCall("a"))
		}
	}
	mustAdmit(t, l, t1, stepCall("b"))
	if st := l.BucketStatus(t1, "p", "m"); st.TokenBudget != 1050 {
		t.Fatalf("budget %d after the probe, want 1050", st.TokenBudget)
	}
	return l, c, t1, b
}

// A probe step above the level that held risks one call, never a cohort: for a
// window after the raise, a call the old budget would have held back goes only
// once the one before it had time to be refused — 1.5 × the longest measured
// admission→429 delay, stepGapMin before any was measured. Over real HTTP a
// backlog filled a 5% step with two calls in the same millisecond, and both were
// refused.
func TestProbeStepGoesOneCallAtATime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // an earlier 429's admission→429 delay (0: none)
		gap   time.Duration
	}{
		{"no delay measured", 0, stepGapMin},
		{"measured 400ms", 400 * time.Millisecond, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, t1, _ := stepLedger(t, tc.delay)
			// the next call above 1000 waits until the first had time to be refused
			w2 := mustWait(t, l, t1, stepCall("c"), "pace", t1.Add(tc.gap).Sub(t0))
			if _, ok := w2.Poll(t1.Add(tc.gap - time.Millisecond)); ok {
				t.Fatal("granted before the gap")
			}
			if _, ok := w2.Poll(t1.Add(tc.gap)); !ok {
				t.Fatal("not granted after the gap")
			}
			mustWait(t, l, t1.Add(tc.gap), stepCall("d"), "pace", t1.Add(2*tc.gap).Sub(t0))
		})
	}
}

// The spacing of a step ends with its window, or with the 429 that answers it
// (the cooldown holds the calls then) or a cut another instance made; and a step
// adopted from another instance through the shared learner is spaced here too.
func TestProbeStepSpacingEnds(t *testing.T) {
	t.Run("at the window's end", func(t *testing.T) {
		l, _, t1, b := stepLedger(t, 0)
		b.mu.Lock()
		if b.stepUntil != t1.Add(time.Minute) {
			t.Errorf("step tried until %s, want a window after the raise", b.stepUntil.Sub(t0))
		}
		// A step window cut to one second, and a next call due long after it: the
		// step's end, not the gap, lets the window's last 40 tokens go.
		b.stepUntil, b.stepNext = t1.Add(time.Second), t1.Add(30*time.Second)
		b.mu.Unlock()
		mustWait(t, l, t1.Add(500*time.Millisecond), stepCall("c"), "pace", t1.Add(30*time.Second).Sub(t0))
		mustAdmit(t, l, t1.Add(time.Second), stepCall("d"))
	})
	for _, tc := range []struct {
		name   string
		answer func(l *Ledger, t1 time.Time)
	}{
		{"at a 429", func(l *Ledger, t1 time.Time) {
			l.RateLimitedBy(t1.Add(10*time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests})
		}},
		{"at a cut adopted from another instance", func(l *Ledger, _ time.Time) {
			l.AdoptLearned("p", "m", LearnedQuota{Quota: 900, Trigger: 900, LastProbe: t0, LastRaise: t0})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, t1, b := stepLedger(t, 0)
			tc.answer(l, t1)
			b.mu.Lock()
			held := b.stepHeld
			b.mu.Unlock()
			if held != 0 {
				t.Fatalf("step still tried (held %d)", held)
			}
		})
	}
	t.Run("adopted from another instance", func(t *testing.T) {
		c := testGate()
		c.Defaults.RPM = 100_000
		l, _, _ := newTestLedger(t, c)
		for i := 0; i < 100; i++ {
			mustAdmit(t, l, t0, stepCall("a"))
		}
		l.AdoptLearned("p", "m", LearnedQuota{Quota: 1050, LastProbe: t0, LastRaise: t0})
		mustAdmit(t, l, t0, stepCall("b"))
		mustWait(t, l, t0, stepCall("c"), "pace", stepGapMin)
	})
}

// The step's edges: the gap is at most 2% of the window however slow a 429 was
// measured; the other instances' calls in a shared window count toward the
// level that held; an over-budget call is not spaced and does not space
// others; a reload that keeps the window keeps the step.
func TestProbeStepEdges(t *testing.T) {
	t.Run("gap capped", func(t *testing.T) {
		_, _, _, b := stepLedger(t, 20*time.Second) // one slow 429
		b.mu.Lock()
		gap := b.stepGapLocked()
		b.mu.Unlock()
		if gap != time.Minute/50 {
			t.Fatalf("gap %s, want 2%% of the window (1.2s), not 1.5 × 20s", gap)
		}
	})
	t.Run("shared window", func(t *testing.T) {
		c := testGate()
		c.Defaults.RPM = 100_000
		l, _, _ := newTestLedger(t, c)
		b := l.bucketFor("p", "m", t0)
		b.mu.Lock()
		b.raisedLocked(t0, 1000) // a step from 1000 to 1050
		b.learn.quota = 1050
		b.sharedOthers = 985 // the other instances' calls
		b.mu.Unlock()
		// 985 + 10 ≤ 1000: within the held level, not spaced
		mustAdmit(t, l, t0, stepCall("a"))
		// 985 + 10 + 10 > 1000: the step's first call; the next waits the gap
		mustAdmit(t, l, t0, stepCall("b"))
		mustWait(t, l, t0, stepCall("c"), "pace", stepGapMin)
	})
	t.Run("over budget", func(t *testing.T) {
		l, _, t1, b := stepLedger(t, 0)
		next := func() time.Time { b.mu.Lock(); defer b.mu.Unlock(); return b.stepNext }
		before := next()
		// far over the budget of 1050: goes at once, and leaves the gap alone
		mustAdmit(t, l, t1.Add(time.Millisecond), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 5000, MaxTokens: 1})
		if after := next(); !after.Equal(before) {
			t.Fatalf("the over-budget call moved the next step call from %s to %s", before.Sub(t0), after.Sub(t0))
		}
	})
	t.Run("reload", func(t *testing.T) {
		l, c, t1, _ := stepLedger(t, 0)
		c.Pace = 0 // any change that keeps the window
		if err := l.Reconfigure(t1, c); err != nil {
			t.Fatal(err)
		}
		mustWait(t, l, t1, stepCall("c"), "pace", t1.Add(stepGapMin).Sub(t0))
	})
}
