package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// rpmGate is the learning test gate with a request limit of rpm a window and
// a token limit that never binds.
func rpmGate(rpm int) Config {
	c := learnGate()
	c.Defaults = ModelLimits{TPM: 1_000_000, RPM: rpm}
	return c
}

// holdWindow fills the window at at to the request budget and has one more
// call held back: a window the request budget bound.
func holdWindow(t *testing.T, l *Ledger, at time.Time) int {
	t.Helper()
	fillRequests(t, l, at, l.BucketStatus(at, "p", "m").RPMBudget)
	heldBack(l, at, req(1))
	return l.BucketStatus(at, "p", "m").RPMBudget
}

// The configured RPM is where learning starts, as the configured TPM is: a
// request budget that holds calls back for a window without an RPM 429 is
// stepped up, in a slow start (× 1.05, × 1.1025, … of the limit). From half the
// truth a sliding window is found in five windows; without the probe the gate
// held 0.49 of the requests for the hour. A stated limit is never probed above.
func TestRequestLimitIsProbedAboveTheConfigured(t *testing.T) {
	l, _, ev := newTestLedger(t, rpmGate(40))
	l.BucketStatus(t0, "p", "m") // born at t0: a window passes by t0 + 61 s
	at := t0
	var budgets []int
	for range 5 {
		at = at.Add(61 * time.Second)
		budgets = append(budgets, holdWindow(t, l, at))
	}
	// 40 × 1.05 = 42, 42 × 1.1025 = 46.3, 46 × 1.157625 = 53.3, 53 × 1.2155 = 64.4, 64 × 1.2763 = 81.7
	want := []int{42, 46, 53, 64, 81}
	for i := range want {
		if budgets[i] != want[i] {
			t.Fatalf("rpm budgets %v over five held windows, want %v", budgets, want)
		}
	}
	probes := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "rpm-probe" {
			probes++
		}
	}
	if probes != 5 {
		t.Fatalf("%d rpm-probe events, want one a window", probes)
	}

	t.Run("NotAboveAStatedLimit", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(40))
		l.Calibrate(t0, "p", "m", -1, -1, 40, 40) // an answer's headers: 40 a minute
		if got := holdWindow(t, l, t0.Add(61*time.Second)); got != 40 {
			t.Fatalf("rpm budget %d, want the stated 40", got)
		}
	})
	t.Run("NotWithLearningOff", func(t *testing.T) {
		c := rpmGate(40)
		c.Learn = false
		l, _, _ := newTestLedger(t, c)
		if got := holdWindow(t, l, t0.Add(61*time.Second)); got != 40 {
			t.Fatalf("rpm budget %d, want the configured 40", got)
		}
	})
	t.Run("NotWithinAWindowOfTheBucketsBirth", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(40))
		if got := holdWindow(t, l, t0.Add(30*time.Second)); got != 40 {
			t.Fatalf("rpm budget %d, want 40: the level has not held a window yet", got)
		}
	})
}

// A step is tried one call at a time: for a window after it, a call that takes
// the count above the budget that held waits until the one before it had time
// to be refused. The 429 that answers the step sets the learned limit to the
// count less the refused call (between the level that held and the step), so
// the slow start ends at the limit, not at the level before the last step.
func TestRefusedRequestStepSetsTheLimit(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(40))
	l.BucketStatus(t0, "p", "m")
	at := climbRequests(t, l, 4) // 40 → 42 → 46 → 53 → 64
	at = at.Add(61 * time.Second)
	fillRequests(t, l, at, 64)
	heldBack(l, at, req(1)) // the step 64 → 81, taken now
	if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 81 {
		t.Fatalf("rpm budget %d after the fifth window, want 81", got)
	}
	// The step let the held-back call through at once (Submit granted it, the
	// 65th): the first call above the level that held. The next goes a gap
	// later, and the one after it waits a gap more.
	if got := l.BucketStatus(at, "p", "m").WindowRequests; got != 65 {
		t.Fatalf("window holds %d requests after the step, want 65", got)
	}
	at = at.Add(stepGapMin)
	mustAdmit(t, l, at, req(1)) // the 66th
	w := mustWait(t, l, at, req(1), "pace", at.Sub(t0)+stepGapMin)
	w.Cancel(at)
	// The provider's limit is 70: the calls go a gap apart, and the 71st is refused.
	for l.BucketStatus(at, "p", "m").WindowRequests < 71 {
		at = at.Add(stepGapMin)
		mustAdmit(t, l, at, req(1))
	}
	l.RateLimited(at, "p", "m", time.Second) // unnamed: the count is above the level that held
	st := l.BucketStatus(at, "p", "m")
	if st.RPMBudget != 70 || st.Trigger != 0 {
		t.Fatalf("rpm budget %d, token trigger %v after the step was refused at 71: want 70, no token trigger", st.RPMBudget, st.Trigger)
	}
}

// climbRequests holds the request budget for windows windows, a window apart
// from t0, and returns the time of the last.
func climbRequests(t *testing.T, l *Ledger, windows int) time.Time {
	t.Helper()
	at := t0
	for range windows {
		at = at.Add(61 * time.Second)
		holdWindow(t, l, at)
	}
	return at
}

// While the request budget binds, an unnamed 429 with few tokens in the window
// is about requests, though the count is well under the request budget: here a
// step larger than 1/suspectRatio of the level that held, refused just above
// that level (a token bucket's reserve likewise runs out below a count it
// served).
func TestUnnamed429WhileRequestsBindIsAboutRequests(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(40))
	l.BucketStatus(t0, "p", "m")
	at := climbRequests(t, l, 5) // … → 64 → 81
	at = at.Add(61 * time.Second)
	if got := holdWindow(t, l, at); got != 108 { // 81 × 1.05^6 = 108.5
		t.Fatalf("rpm budget %d after the sixth window, want 108", got)
	}
	for l.BucketStatus(at, "p", "m").WindowRequests < 84 { // under 0.8 × 108
		at = at.Add(stepGapMin)
		mustAdmit(t, l, at, req(1))
	}
	l.RateLimited(at, "p", "m", time.Second)
	if st := l.BucketStatus(at, "p", "m"); st.RPMBudget != 83 || st.Trigger != 0 {
		t.Fatalf("rpm budget %d, token trigger %v: want the count less the refused call, 83, no token trigger", st.RPMBudget, st.Trigger)
	}
}

// Small calls bound by requests are paced by the request budget, as large ones
// are by the token budget: at most paceBurst of it at once, then pace × the
// budget a window. The token pacer alone let a queue of them go at once when
// the request window drained. Only while requests bind: a burst under a request
// limit nobody reached is not held (once the first window, which is paced, is
// over: see TestRequestPacerSpacesTheFirstWindow).
func TestRequestPacerSpacesSmallCallsWhileRequestsBind(t *testing.T) {
	c := rpmGate(100)
	c.Pace, c.PaceBurst = 3, 0.07 // 5 requests a second after a burst of 7
	c.Learn = false               // no request probe step when the budget holds a call back
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0.Add(-2*time.Minute), req(1)) // the model seen two windows before
	fillRequests(t, l, t0, 100)                     // requests have not bound: the 100 go at once
	mustWait(t, l, t0, req(1), "rpm", 60*time.Second)
	at := t0.Add(60 * time.Second) // the window drained; the queue above went
	for range 6 {
		mustAdmit(t, l, at, req(1))
	}
	mustWait(t, l, at, req(1), "pace", 60*time.Second+200*time.Millisecond)

	t.Run("NotInTheCompletionView", func(t *testing.T) {
		// The gate counts requests as such a provider does, when calls
		// complete: the window's drain spreads them, and pacing only delayed
		// the queue after a cooldown.
		c := rpmGate(100)
		c.Pace, c.PaceBurst = 3, 0.07
		c.Learn = false
		c.Defaults.CountsAt = CountsAtCompletion
		l, _, _ := newTestLedger(t, c)
		mustAdmit(t, l, t0.Add(-2*time.Minute), req(1))
		var tks []Ticket
		for range 100 {
			tks = append(tks, mustAdmit(t, l, t0, req(1)))
		}
		for _, tk := range tks {
			if err := l.Settle(t0, tk, Usage{InputTokens: 1, OutputTokens: 1}); err != nil {
				t.Fatal(err)
			}
		}
		mustWait(t, l, t0, req(1), "rpm", 60*time.Second)
		at := t0.Add(60 * time.Second)
		for range 8 {
			mustAdmit(t, l, at, req(1))
		}
	})
}

// For a window after the request axis starts from nothing — the model first
// seen, or reset, or a reload that changes rpm — requests past half the
// request budget are paced whether or not they bind: sessions that start
// together send in step, and from a start above the truth the round that
// crossed the limit was refused whole before the first 429 came back. The
// first half goes at once, and a window on, a burst under the budget goes at
// once again.
func TestRequestPacerSpacesTheFirstWindow(t *testing.T) {
	c := rpmGate(100)
	c.Pace, c.PaceBurst = 3, 0.07 // 5 requests a second after a burst of 7
	firstHalf := func(t *testing.T, l *Ledger, at time.Time, half int) {
		t.Helper()
		for range half - 1 { // at once; from the one that fills half the budget, a burst, then the pace
			mustAdmit(t, l, at, req(1))
		}
		for range 7 {
			mustAdmit(t, l, at, req(1))
		}
		mustWait(t, l, at, req(1), "pace", at.Sub(t0)+200*time.Millisecond).Cancel(at)
	}
	l, _, _ := newTestLedger(t, c)
	firstHalf(t, l, t0, 50)
	at := t0.Add(2 * time.Minute) // a window on: the 57 left, none bound
	fillRequests(t, l, at, 80)
	at = at.Add(time.Minute) // the 80 left
	if _, ok := l.Reset(at, "p", "m"); !ok {
		t.Fatal("no model to reset")
	}
	firstHalf(t, l, at, 50)

	t.Run("InTheCompletionView", func(t *testing.T) {
		c := c
		c.Defaults.CountsAt = CountsAtCompletion
		l, _, _ := newTestLedger(t, c)
		firstHalf(t, l, t0, 50) // in flight: not in the completion window, let go all the same
	})
	t.Run("AReloadThatChangesRPM", func(t *testing.T) {
		l, _, _ := newTestLedger(t, c)
		mustAdmit(t, l, t0, req(1))
		at := t0.Add(2 * time.Minute)
		same := c
		same.Learn = false // a reload that forgets what the request axis learned, same rpm
		if err := l.Reconfigure(at, same); err != nil {
			t.Fatal(err)
		}
		fillRequests(t, l, at, 80) // not paced: the limit is the one the gate had
		at = at.Add(time.Minute)
		moved := c
		moved.Defaults.RPM = 200 // paced past 100, at 10 a second after a burst of 14
		if err := l.Reconfigure(at, moved); err != nil {
			t.Fatal(err)
		}
		fillRequests(t, l, at, 99)
		for range 14 {
			mustAdmit(t, l, at, req(1))
		}
		mustWait(t, l, at, req(1), "pace", at.Sub(t0)+100*time.Millisecond).Cancel(at)
	})
}

// An unnamed 429 with few tokens in the window is about requests when the
// window's count is near the request budget (suspectRatio of it: another
// client on the key takes the rest), or near the count an RPM 429 was refused
// at within refusedAgainWindows — a trigger relaxing back toward a configured
// RPM above the truth, or a token bucket's reserve running out. Read as
// tokens, such 429s set a token trigger at a seventh of the token limit.
func TestUnnamed429NearARequestLimitIsAboutRequests(t *testing.T) {
	t.Run("NearTheBudget", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(100))
		fillRequests(t, l, t0, 80)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 80 || st.Trigger != 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want the request count 80, no token trigger", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("FarBelowTheBudget", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(100))
		fillRequests(t, l, t0, 70)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 100 || st.Trigger == 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want tokens read", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("NearTheCountRefused", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(200))
		fillRequests(t, l, t0, 100)
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests})
		at := t0
		for range 6 { // the trigger relaxes 100 → 105 → 110 → 115 → 120 → 126 → 132
			at = at.Add(61 * time.Second)
			holdWindow(t, l, at)
		}
		at = at.Add(61 * time.Second)
		fillRequests(t, l, at, 100) // under 0.8 × 132
		l.RateLimited(at, "p", "m", time.Second)
		if st := l.BucketStatus(at, "p", "m"); st.RPMBudget != 100 || st.Trigger != 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want the request ceiling 100, no token trigger", st.RPMBudget, st.Trigger)
		}
	})
}

// A stated or configured request limit is a figure, and the derived 1% margin
// is kept of it in whole requests only: rounded down, it took a whole request
// from every limit under a hundred (2 of a stated 3). A count the gate read at
// a 429 (with the refused call still in the window) keeps the 1% rounded down;
// a safety factor the user set is a share, rounded down.
func TestRequestBudgetKeepsWholeRequests(t *testing.T) {
	derived := func(rpm int) Config {
		c := rpmGate(rpm)
		c.SafetyFactor = 0 // 1% and the pooled margin
		return c
	}
	t.Run("Configured", func(t *testing.T) {
		for _, tc := range []struct{ rpm, want int }{{3, 3}, {20, 20}, {100, 99}, {600, 594}} {
			l, _, _ := newTestLedger(t, derived(tc.rpm))
			if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != tc.want {
				t.Errorf("rpm %d: budget %d, want %d", tc.rpm, got, tc.want)
			}
		}
	})
	t.Run("Stated", func(t *testing.T) {
		l, _, _ := newTestLedger(t, derived(60))
		l.Calibrate(t0, "p", "m", -1, -1, 3, 3) // the provider states 3 a minute
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 3 {
			t.Fatalf("budget %d under a stated 3 a minute, want 3", got)
		}
	})
	t.Run("ReadAtA429", func(t *testing.T) {
		l, _, _ := newTestLedger(t, derived(60))
		fillRequests(t, l, t0, 20)
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 19 {
			t.Fatalf("budget %d after a 429 at a count of 20 (the refused call among them), want 19", got)
		}
	})
	t.Run("SafetyFactor", func(t *testing.T) {
		c := rpmGate(21)
		c.SafetyFactor = 0.5
		l, _, _ := newTestLedger(t, c)
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 10 {
			t.Fatalf("budget %d at a safety factor of 0.5 of 21, want 10", got)
		}
	})
}

// What the request axis learned goes with the figure it started from: a reset
// forgets it, a reload that changes the configured RPM starts again from the
// new figure (the way to lower a limit probed above the old one), and a reload
// that leaves it keeps it.
func TestRequestLearningStartsAgainFromANewFigure(t *testing.T) {
	climbed := func(t *testing.T) (*Ledger, time.Time) {
		l, _, _ := newTestLedger(t, rpmGate(40))
		l.BucketStatus(t0, "p", "m")
		at := climbRequests(t, l, 5) // 40 → … → 81
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 81 {
			t.Fatalf("setup: rpm budget %d, want 81", got)
		}
		return l, at
	}
	t.Run("Reset", func(t *testing.T) {
		l, at := climbed(t)
		l.Reset(at, "p", "m")
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 40 {
			t.Fatalf("rpm budget %d after a reset, want the configured 40", got)
		}
	})
	t.Run("ReloadWithANewRPM", func(t *testing.T) {
		l, at := climbed(t)
		if err := l.Reconfigure(at, rpmGate(30)); err != nil {
			t.Fatal(err)
		}
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 30 {
			t.Fatalf("rpm budget %d after a reload to rpm 30, want 30", got)
		}
	})
	t.Run("ReloadWithTheSameRPM", func(t *testing.T) {
		l, at := climbed(t)
		c := rpmGate(40)
		c.MaxWait = 3 * time.Minute // anything else
		if err := l.Reconfigure(at, c); err != nil {
			t.Fatal(err)
		}
		if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 81 {
			t.Fatalf("rpm budget %d after a reload that left rpm as it was, want 81 kept", got)
		}
	})
}

// An RPM 429 with less than a few calls in the window (a cooldown drained it,
// another client filled the key) is not the gate's count: a cooldown only. Set
// as a trigger it held the request budget at one or two requests, relaxing a
// request a window.
func TestRPM429InANearlyEmptyWindowOnlyCools(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(60))
	fillRequests(t, l, t0, 2)
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
	st := l.BucketStatus(t0, "p", "m")
	if st.RPMBudget != 60 || st.CooldownMs != 1000 {
		t.Fatalf("rpm budget %d, cooldown %dms: want 60 kept and the cooldown", st.RPMBudget, st.CooldownMs)
	}
	t.Run("ATinyLimitStillLearns", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(3))
		fillRequests(t, l, t0, 3) // the third refused: the provider allows 2
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 3 {
			t.Fatalf("rpm budget %d, want the count 3 as the trigger", got)
		}
	})
}

// A stated request limit above the configured RPM that goes unrestated is
// forgotten, but the provider carried it: the request limit stays there rather
// than falling back to the configured start, which took about 45 windows of
// probe steps to climb back from.
func TestForgottenStatedRequestLimitAboveTheStartStays(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(60))
	fillRequests(t, l, t0, 2) // too few calls to read: the 429 states its figure only
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests, StatedRequests: 500})
	if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 500 {
		t.Fatalf("setup: rpm budget %d, want the stated 500", got)
	}
	// triggerReprobeWindows on, the request budget binding: the 429's figure
	// goes unrestated and is forgotten (and the limit is probed, × 1.05).
	at := t0.Add(triggerReprobeWindows * time.Minute)
	if got := holdWindow(t, l, at); got < 500 {
		t.Fatalf("rpm budget %d once the stated 500 was forgotten, want 500 or a step above it, not the configured 60", got)
	}
}

// An unnamed 429 whose window holds 0.4 of the request budget or more and a
// four times smaller share of the token budget is about requests — when the
// token figure is one someone gave, not the default tpm (a placeholder far
// above most keys, under which a token 429 has just such shares). Configured at
// twice the truth on both axes, a workload bound by requests meets its first
// 429 at half the request budget; read as tokens it held 0.54–0.74 of the
// requests for the hour.
func TestUnnamed429FarNearerTheRequestBudget(t *testing.T) {
	configured := func() Config {
		c := rpmGate(200)
		c.Defaults.TPM = 400_000
		return c
	}
	t.Run("ConfiguredFigures", func(t *testing.T) {
		l, _, _ := newTestLedger(t, configured())
		fillRequests(t, l, t0, 100) // ~10k tokens: 0.5 of the request budget, 0.025 of the token one
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 100 || st.Trigger != 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want the request count 100, no token trigger", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("UnderTheShare", func(t *testing.T) {
		l, _, _ := newTestLedger(t, configured())
		fillRequests(t, l, t0, 70)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 200 || st.Trigger == 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want tokens read", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("TokensNotFarEnoughBehind", func(t *testing.T) {
		c := configured()
		c.Defaults.TPM = 40_000 // 100 calls of 101 tokens: 0.25 of it, against 0.5 of the requests'
		l, _, _ := newTestLedger(t, c)
		fillRequests(t, l, t0, 100)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 200 || st.Trigger == 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want tokens read", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("ACapIsNoTokenFigure", func(t *testing.T) {
		c := rpmGate(200) // the default tpm
		c.Defaults.MaxTPM = 800_000
		l, _, _ := newTestLedger(t, c)
		fillRequests(t, l, t0, 100)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 200 || st.Trigger == 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want tokens read (a cap says nothing of the provider)", st.RPMBudget, st.Trigger)
		}
	})
	t.Run("UnderTheDefaultTPM", func(t *testing.T) {
		l, _, _ := newTestLedger(t, rpmGate(200))
		fillRequests(t, l, t0, 100)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.RPMBudget != 200 || st.Trigger == 0 {
			t.Fatalf("rpm budget %d, token trigger %v: want tokens read", st.RPMBudget, st.Trigger)
		}
	})
}

// A request limit refuses at its count whatever the calls' sizes; a token limit
// at its tokens, at fewer calls when they are larger. An unnamed 429 read as
// requests is undone by the next unnamed one within 10 windows when that comes
// at a count 10% or more lower while the window's tokens fell by at most half
// as much: read as requests, each such 429 set the request ceiling lower (a
// workload bound by tokens under the default config: 0.69–0.72 of the limit
// for the hour, 0.84–0.88 with this).
func TestUnnamed429AtAFallenCountIsAboutTokens(t *testing.T) {
	first := func(t *testing.T) *Ledger {
		c := rpmGate(200)
		c.Defaults.TPM = 400_000
		l, _, _ := newTestLedger(t, c)
		fillRequests(t, l, t0, 100) // 100 calls of 101 tokens
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.Trigger != 0 {
			t.Fatalf("the first 429 was read as tokens (trigger %v)", st.Trigger)
		}
		return l
	}
	at := t0.Add(61 * time.Second)
	t.Run("TokensHeld", func(t *testing.T) {
		l := first(t)
		for range 80 { // 80 calls of 120 tokens: the count fell 20%, the tokens 5%
			mustAdmit(t, l, at, req(20))
		}
		l.RateLimited(at, "p", "m", time.Second)
		if st := l.BucketStatus(at, "p", "m"); st.Trigger == 0 {
			t.Fatal("no token trigger: the 429 at a fallen count with as many tokens was read as requests")
		}
	})
	t.Run("TokensFellWithTheCount", func(t *testing.T) {
		l := first(t)
		fillRequests(t, l, at, 80) // the same calls: the tokens fell 20% too
		l.RateLimited(at, "p", "m", time.Second)
		if st := l.BucketStatus(at, "p", "m"); st.Trigger != 0 {
			t.Fatalf("token trigger %v: the 429 at a count and tokens that fell alike was read as tokens", st.Trigger)
		}
	})
}

// An RPM 429 reads the count when the refused call was admitted: the calls
// admitted after it, before its 429 came back, were not in the window the
// provider refused it at. A cohort released at once over real sockets took
// 429s at counts 22 and 23 of a limit of 20, and the ceiling then stepped 0.93
// below the next burst's count.
func TestRPM429ReadsTheCountAtTheRefusedCallsAdmission(t *testing.T) {
	l, _, _ := newTestLedger(t, rpmGate(40))
	fillRequests(t, l, t0, 20) // the 20th is the call the provider refuses
	at := t0.Add(10 * time.Millisecond)
	for range 3 { // admitted while its 429 is on the way back
		mustAdmit(t, l, at, req(1))
	}
	l.RateLimitedBy(at.Add(5*time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests, Admitted: t0})
	if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 20 {
		t.Fatalf("rpm budget %d, want the count 20 at the refused call's admission (23 with the calls after it)", got)
	}
}
