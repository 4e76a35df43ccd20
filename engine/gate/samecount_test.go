package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// A request limit refuses at its count whatever the calls' sizes. Configured
// at twice the truth on both axes, a workload bound by requests meets the
// limit at half the request budget and a quarter of the token one: the shares
// read its unnamed 429 as tokens. A second one within sameCountWindows at
// the same count, with tokens that moved, is read again as requests: the token
// learner is as it was before the first, and the count is the request ceiling.
func TestUnnamed429AtTheSameCountIsAboutRequests(t *testing.T) {
	newLedger := func(t *testing.T, tpm int) (*Ledger, *eventLog) {
		c := rpmGate(200)
		c.Defaults.TPM = tpm
		l, _, ev := newTestLedger(t, c)
		return l, ev
	}
	first := func(t *testing.T, tpm int) (*Ledger, *eventLog) {
		l, ev := newLedger(t, tpm)
		admitAll(t, l, t0, 100, 1000)
		l.RateLimited(t0, "p", "m", time.Second)
		st := l.BucketStatus(t0, "p", "m")
		if st.Trigger == 0 || st.RPMBudget != 200 {
			t.Fatalf("first 429: token trigger %v, rpm budget %d: want it read as tokens", st.Trigger, st.RPMBudget)
		}
		return l, ev
	}
	at := t0.Add(3 * time.Minute) // two windows on: not the first one's burst
	t.Run("CountHeldTokensMoved", func(t *testing.T) {
		l, ev := first(t, 400_000)
		admitAll(t, l, at, 100, 900) // the same count, 10% fewer tokens
		l.RateLimited(at, "p", "m", time.Second)
		st := l.BucketStatus(at, "p", "m")
		if st.Trigger != 0 || st.Quota != 400_000 {
			t.Errorf("token trigger %v, quota %v: want what the token learner took from the first 429 taken back", st.Trigger, st.Quota)
		}
		if st.RPMBudget != 100 {
			t.Errorf("rpm budget %d: want the count, 100, as the request ceiling", st.RPMBudget)
		}
		reread := false
		for _, e := range ev.kinds(EventLearn) {
			reread = reread || e.Step == "reread-requests"
		}
		if !reread {
			t.Error("no reread-requests event")
		}
	})
	t.Run("CountMoved", func(t *testing.T) {
		l, _ := first(t, 400_000)
		admitAll(t, l, at, 90, 1000) // a token limit: fewer calls, as many tokens each
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 200)
	})
	t.Run("TokensHeld", func(t *testing.T) {
		l, _ := first(t, 400_000)
		admitAll(t, l, at, 100, 995) // calls of one size: nothing tells the axes apart
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 200)
	})
	t.Run("FirstNearTheTokenBudget", func(t *testing.T) {
		l, _ := first(t, 115_000) // the first 429 came near the token budget: a token limit's
		admitAll(t, l, at, 100, 900)
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 200)
	})
	t.Run("AWindowServedMore", func(t *testing.T) {
		l, _ := first(t, 400_000)
		served := t0.Add(2 * time.Minute)
		// a window served 110 calls: 100 is no limit
		tickets := admitAll(t, l, served, 110, 400)
		settleAll(t, l, served, tickets, Usage{InputTokens: 400, OutputTokens: 100})
		admitAll(t, l, at, 100, 900)
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 200)
	})
	t.Run("NearTheRequestBudget", func(t *testing.T) {
		// Near the request budget the shares decide (axisLocked): such a
		// window read as tokens had its tokens near the token budget too.
		l, _ := first(t, 400_000)
		between := t0.Add(90 * time.Second)
		admitAll(t, l, between, 110, 100)
		l.RateLimitedBy(between, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests})
		if st := l.BucketStatus(between, "p", "m"); st.RPMBudget != 110 {
			t.Fatalf("rpm budget %d after a named RPM 429 at 110, want 110", st.RPMBudget)
		}
		admitAll(t, l, at, 100, 900) // 0.92 of the request budget now
		l.RateLimited(at, "p", "m", time.Second)
		if st := l.BucketStatus(at, "p", "m"); st.Trigger == 0 {
			t.Errorf("token trigger %v, rpm budget %d: want tokens read", st.Trigger, st.RPMBudget)
		}
	})
	t.Run("FarUnderTheRequestBudget", func(t *testing.T) {
		// 30 large calls: a sixth of the request budget, as a workload bound
		// by tokens holds (the same count twice is chance there).
		l, _ := newLedger(t, 400_000)
		admitAll(t, l, t0, 30, 3000)
		l.RateLimited(t0, "p", "m", time.Second)
		admitAll(t, l, at, 30, 2700)
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 200)
	})
	t.Run("TwentyWindowsApart", func(t *testing.T) {
		// The token trigger the first set holds the requests near the limit:
		// the next 429 can be long in coming, and it still sets the ceiling.
		l, ev := first(t, 400_000)
		later := t0.Add(21 * time.Minute)
		admitAll(t, l, later, 100, 900)
		l.RateLimited(later, "p", "m", time.Second)
		wantRequestsRead(t, l, later, 100)
		ceiling := false // a ceiling, not a trigger that relaxes 5% a window
		for _, e := range ev.kinds(EventLearn) {
			ceiling = ceiling || e.Step == "rpm-ceiling" && e.To == 100
		}
		if !ceiling {
			t.Error("no request ceiling at 100")
		}
	})
	t.Run("TwoCountsSetTheCeilingAsTwoRPM429sDo", func(t *testing.T) {
		// Within 3%: the same count for the axis; not within a hundredth, so
		// the ceiling is rpmStepDown below the lower, as after two RPM 429s.
		l, _ := first(t, 400_000)
		admitAll(t, l, at, 98, 900)
		l.RateLimited(at, "p", "m", time.Second)
		wantRequestsRead(t, l, at, 91)
	})
	t.Run("InTheFirstsBurst", func(t *testing.T) {
		// The burst's later 429s read a window its refusals changed.
		l, _ := newLedger(t, 400_000)
		tickets := admitAll(t, l, t0, 100, 1000)
		l.RateLimited(t0, "p", "m", time.Second)
		// answers that read less than expected: the tokens moved 2.7%
		settleAll(t, l, t0, tickets[:30], Usage{InputTokens: 900, OutputTokens: 100})
		soon := t0.Add(10 * time.Millisecond)
		l.RateLimited(soon, "p", "m", time.Second)
		wantTokensRead(t, l, soon, 200)
	})
	t.Run("TheBurstsFirstIsTheRecord", func(t *testing.T) {
		l, _ := newLedger(t, 400_000)
		tickets := admitAll(t, l, t0, 100, 1000)
		l.RateLimited(t0, "p", "m", time.Second)
		settleAll(t, l, t0, tickets[:30], Usage{InputTokens: 900, OutputTokens: 100})
		l.RateLimited(t0.Add(10*time.Millisecond), "p", "m", time.Second) // read 107,000: 2.7% lower
		admitAll(t, l, at, 100, 970)                                      // 107,000 again: the first moved, not the second
		l.RateLimited(at, "p", "m", time.Second)
		wantRequestsRead(t, l, at, 100)
	})
	t.Run("AReloadBetween", func(t *testing.T) {
		l, _ := first(t, 400_000)
		c := rpmGate(200)
		c.Defaults.TPM = 400_000
		if err := l.Reconfigure(at, c); err != nil {
			t.Fatal(err)
		}
		admitAll(t, l, at, 100, 900)
		l.RateLimited(at, "p", "m", time.Second)
		// the learner the snapshot held was reloaded
		wantTokensRead(t, l, at, 200)
	})
	t.Run("ANamedTokenLimitBetween", func(t *testing.T) {
		l, _ := first(t, 400_000)
		l.RateLimitedBy(t0.Add(90*time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
		admitAll(t, l, at, 100, 900)
		l.RateLimited(at, "p", "m", time.Second)
		// the provider named tokens
		wantTokensRead(t, l, at, 200)
	})
	t.Run("AFewCalls", func(t *testing.T) {
		// Three calls set no request ceiling (rpmLimitedLocked): nothing to
		// hand the run to.
		c := rpmGate(6)
		c.Defaults.TPM = 12_000
		l, _, _ := newTestLedger(t, c)
		admitAll(t, l, t0, 3, 1000)
		l.RateLimited(t0, "p", "m", time.Second)
		admitAll(t, l, at, 3, 900)
		l.RateLimited(at, "p", "m", time.Second)
		wantTokensRead(t, l, at, 6)
	})
	t.Run("AWindowServedTheCount", func(t *testing.T) {
		// A window that served the count itself is no window above it.
		c := rpmGate(24)
		c.Defaults.TPM = 40_000
		l, _, _ := newTestLedger(t, c)
		admitAll(t, l, t0, 10, 1000)
		l.RateLimited(t0, "p", "m", time.Second)
		if st := l.BucketStatus(t0, "p", "m"); st.Trigger == 0 {
			t.Fatal("the first 429 was read as requests")
		}
		served := t0.Add(2 * time.Minute)
		tickets := admitAll(t, l, served, 10, 500)
		settleAll(t, l, served, tickets, Usage{InputTokens: 500, OutputTokens: 100})
		admitAll(t, l, at, 10, 900)
		l.RateLimited(at, "p", "m", time.Second)
		wantRequestsRead(t, l, at, 10)
	})
	t.Run("AfterSixtyWindows", func(t *testing.T) {
		l, _ := first(t, 400_000)
		late := t0.Add(61 * time.Minute)
		admitAll(t, l, late, 100, 900)
		l.RateLimited(late, "p", "m", time.Second)
		wantTokensRead(t, l, late, 200)
	})
}

// wantTokensRead fails unless the 429s were read as tokens: a token trigger
// set, the request budget still rpm.
func wantTokensRead(t *testing.T, l *Ledger, at time.Time, rpm int) {
	t.Helper()
	if st := l.BucketStatus(at, "p", "m"); st.Trigger == 0 || st.RPMBudget != rpm {
		t.Errorf("token trigger %v, rpm budget %d: want tokens read (a trigger, the request budget %d)", st.Trigger, st.RPMBudget, rpm)
	}
}

// wantRequestsRead fails unless the last 429 was read again as requests: no
// token trigger, the request budget at the ceiling.
func wantRequestsRead(t *testing.T, l *Ledger, at time.Time, ceiling int) {
	t.Helper()
	if st := l.BucketStatus(at, "p", "m"); st.Trigger != 0 || st.RPMBudget != ceiling {
		t.Errorf("token trigger %v, rpm budget %d: want requests read, the ceiling at %d", st.Trigger, st.RPMBudget, ceiling)
	}
	b := l.bucketFor("p", "m", at)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rateCap.rate != 0 { // the run's 429s, read as tokens, had bounded a bucket's rate
		t.Errorf("a bucket's rate bound %.0f: want none, as before the run", b.rateCap.rate)
	}
}

// admitAll admits n calls of size input tokens at at, each at once.
func admitAll(t *testing.T, l *Ledger, at time.Time, n, size int) []Ticket {
	t.Helper()
	tickets := make([]Ticket, 0, n)
	for range n {
		tickets = append(tickets, mustAdmit(t, l, at, req(size)))
	}
	return tickets
}

// settleAll settles the tickets at at, each with u.
func settleAll(t *testing.T, l *Ledger, at time.Time, tickets []Ticket, u Usage) {
	t.Helper()
	for _, tk := range tickets {
		if err := l.Settle(at, tk, u); err != nil {
			t.Fatal(err)
		}
	}
}
