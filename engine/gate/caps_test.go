package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// A configured tpm or rpm is where learning starts, and the gate probes above
// it. maxTpm and maxRpm are the user's own limits — a key other programs
// share, a spend bounded on purpose — and no probe, relax or stated limit
// takes the budget above them.

// climbTokens holds a call back by the token budget once a window for n
// windows from from (a probe step each) and returns the last window's time.
func climbTokens(t *testing.T, l *Ledger, from time.Time, n int) time.Time {
	t.Helper()
	l.BucketStatus(from, "p", "m")
	at := from
	for range n {
		at = at.Add(61 * time.Second)
		budget := l.BucketStatus(at, "p", "m").TokenBudget
		mustAdmit(t, l, at, req(int(budget)-100))
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 200})
	}
	return at
}

func TestMaxTPMHoldsTheProbe(t *testing.T) {
	capped := learnGate()
	capped.Defaults.MaxTPM = 1200
	l, _, _ := newTestLedger(t, capped)
	at := climbTokens(t, l, t0, 8)
	if st := l.BucketStatus(at, "p", "m"); st.TokenBudget != 1200 || st.Quota > 1200 || st.MaxTPM != 1200 {
		t.Fatalf("after eight held windows: budget %d, quota %g, maxTpm %d; want the budget at the cap 1200 and the quota no higher",
			st.TokenBudget, st.Quota, st.MaxTPM)
	}

	// The same load without the cap climbs past it: the cap is what held.
	free, _, _ := newTestLedger(t, learnGate())
	if got := free.BucketStatus(climbTokens(t, free, t0, 8), "p", "m").TokenBudget; got <= 1200 {
		t.Fatalf("uncapped budget %d after eight held windows, want it above 1200", got)
	}

	t.Run("AboveAStatedLimit", func(t *testing.T) {
		l, _, _ := newTestLedger(t, capped)
		l.Calibrate(t0, "p", "m", 5000, 5000, -1, -1) // the provider allows 5,000 a minute
		if got := l.BucketStatus(t0, "p", "m").TokenBudget; got != 1200 {
			t.Fatalf("budget %d under a stated 5000, want the cap 1200", got)
		}
	})
	t.Run("AStartAboveItStartsAtIt", func(t *testing.T) {
		c := learnGate()
		c.Defaults = ModelLimits{TPM: 1_000_000, RPM: 10}
		c.Models = map[string]ModelLimits{"p/m": {MaxTPM: 3000}}
		if got := c.Limits("p/m").TPM; got != 3000 {
			t.Fatalf("start %d, want the cap 3000", got)
		}
		l, _, _ := newTestLedger(t, c)
		if got := l.BucketStatus(t0, "p", "m").TokenBudget; got != 3000 {
			t.Fatalf("budget %d, want 3000", got)
		}
	})
	t.Run("AReloadSetsAndLiftsIt", func(t *testing.T) {
		l, _, _ := newTestLedger(t, learnGate())
		at := climbTokens(t, l, t0, 4) // 1000 → 1050 → 1157 → 1340 → 1629
		c := learnGate()
		c.Defaults.MaxTPM = 1100
		if err := l.Reconfigure(at, c); err != nil {
			t.Fatal(err)
		}
		if got := l.BucketStatus(at, "p", "m").TokenBudget; got != 1100 {
			t.Fatalf("budget %d after a reload set maxTpm 1100, want 1100", got)
		}
		if err := l.Reconfigure(at, learnGate()); err != nil {
			t.Fatal(err)
		}
		if got := l.BucketStatus(at, "p", "m").TokenBudget; got <= 1100 {
			t.Fatalf("budget %d after the cap was lifted, want the learned level back above 1100", got)
		}
	})
}

// A call larger than the whole budget goes at once without a cap (it could
// never fit; waiting would only hold everyone behind it). Under a cap it waits
// for an empty window: a window then holds at most one such call.
func TestACallLargerThanTheCapWaitsForAnEmptyWindow(t *testing.T) {
	c := learnGate()
	c.Defaults.MaxTPM = 1000
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(400))
	mustWait(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 1500}, "tpm", 60*time.Second)

	free, _, _ := newTestLedger(t, learnGate())
	mustAdmit(t, free, t0, req(400))
	mustAdmit(t, free, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 1500})
}

// What forgets the learned state keeps the cap: a reset, a learned store's
// record from before the cap.
func TestCapsOutliveResetAndRestore(t *testing.T) {
	c := learnGate()
	c.Defaults.MaxTPM = 1200
	t.Run("Reset", func(t *testing.T) {
		l, _, _ := newTestLedger(t, c)
		at := climbTokens(t, l, t0, 6)
		at = at.Add(61 * time.Second)
		l.Reset(at, "p", "m")
		at = climbTokens(t, l, at, 8)
		if got := l.BucketStatus(at, "p", "m").TokenBudget; got != 1200 {
			t.Fatalf("budget %d after a reset and eight held windows, want the cap 1200", got)
		}
	})
	t.Run("Restore", func(t *testing.T) {
		store := &MemoryLearnedStore{}
		store.Save("p", "m", LearnedQuota{Quota: 5000, LastProbe: t0})
		l, err := NewLedger(c, nil, WithLearnedStore(store))
		if err != nil {
			t.Fatal(err)
		}
		if got := l.BucketStatus(t0, "p", "m").TokenBudget; got != 1200 {
			t.Fatalf("budget %d from a stored quota of 5000, want the cap 1200", got)
		}
	})
}

func TestMaxRPMHoldsTheProbe(t *testing.T) {
	c := rpmGate(40)
	c.Defaults.MaxRPM = 50
	l, _, ev := newTestLedger(t, c)
	l.BucketStatus(t0, "p", "m")
	at := t0
	var budgets []int
	for range 6 {
		at = at.Add(61 * time.Second)
		budgets = append(budgets, holdWindow(t, l, at))
	}
	// 40 → 42 → 46 → 50 (53 without the cap), then no further step.
	want := []int{42, 46, 50, 50, 50, 50}
	for i := range want {
		if budgets[i] != want[i] {
			t.Fatalf("rpm budgets %v over six held windows, want %v", budgets, want)
		}
	}
	if st := l.BucketStatus(at, "p", "m"); st.MaxRPM != 50 {
		t.Fatalf("status maxRpm %d, want 50", st.MaxRPM)
	}
	probes := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "rpm-probe" {
			probes++
		}
	}
	if probes != 3 {
		t.Fatalf("%d rpm-probe events, want 3: none once at the cap", probes)
	}

	t.Run("AboveAStatedLimit", func(t *testing.T) {
		l, _, _ := newTestLedger(t, c)
		l.Calibrate(t0, "p", "m", -1, -1, 500, 500)
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 50 {
			t.Fatalf("rpm budget %d under a stated 500, want the cap 50", got)
		}
	})
	t.Run("AStartAboveItStartsAtIt", func(t *testing.T) {
		c := rpmGate(400)
		c.Defaults.MaxRPM = 30
		l, _, _ := newTestLedger(t, c)
		if got := l.BucketStatus(t0, "p", "m").RPMBudget; got != 30 {
			t.Fatalf("rpm budget %d, want the cap 30", got)
		}
	})
}

func TestCapsMustNotBeNegative(t *testing.T) {
	c := learnGate()
	c.Models = map[string]ModelLimits{"p/m": {MaxRPM: -1}}
	if err := c.Validate(); err == nil {
		t.Fatal("maxRpm -1 validated")
	}
	c = learnGate()
	c.Defaults.MaxTPM = -5
	if err := c.Validate(); err == nil {
		t.Fatal("defaults maxTpm -5 validated")
	}
}

// Above a learned budget but under the cap, a call goes at once as before: only
// a call larger than the cap waits for an empty window.
func TestACallUnderTheCapAboveTheBudgetGoesAtOnce(t *testing.T) {
	c := learnGate()
	c.Defaults.MaxTPM = 5000
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(400)) // window 500
	l.RateLimited(t0, "p", "m", time.Second)
	if st := l.BucketStatus(t0, "p", "m"); st.TokenBudget != 500 {
		t.Fatalf("budget %d after a 429 at 500, want 500", st.TokenBudget)
	}
	mustAdmit(t, l, t0.Add(2*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 900}) // 1000 > 500, < 5000
}

// A ceiling read at a 429 exactly at the cap is a level read, and keeps its
// margin (1% rounded down): taken as the cap's figure it would stay where the
// provider refuses, a 429 a window.
func TestACeilingReadAtTheCapKeepsItsMargin(t *testing.T) {
	c := rpmGate(10)
	c.SafetyFactor = 0 // 1% and the pooled margin
	c.Defaults.MaxRPM = 14
	l, _, _ := newTestLedger(t, c)
	l.BucketStatus(t0, "p", "m")
	at := climbRequests(t, l, 4) // 10 → 11 → 12 → 13 → 14, the cap
	if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 14 {
		t.Fatalf("rpm budget %d at the cap, want 14 (a figure)", got)
	}
	for range 2 { // the provider refuses at 14 twice within 10 windows: the ceiling
		at = at.Add(61 * time.Second)
		fillRequests(t, l, at, 14)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
	}
	if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 13 {
		t.Fatalf("rpm budget %d after two 429s at 14 under maxRpm 14, want 13", got)
	}
}
