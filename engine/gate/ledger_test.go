package gate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testGate is a small, exact configuration: 1000 tokens and 10 requests a minute,
// no safety margin, no jitter, a 100-token output reserve.
func testGate() Config {
	c := DefaultConfig()
	c.SafetyFactor = 1
	c.Defaults = ModelLimits{TPM: 1000, RPM: 10}
	c.OutputReserveTokens = 100
	c.Jitter = 0
	c.CountGuard = 0
	c.MarginSigmas = 0
	c.Pace = 0
	return c
}

type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (e *eventLog) add(ev Event) { e.mu.Lock(); e.ev = append(e.ev, ev); e.mu.Unlock() }

func (e *eventLog) kinds(k EventKind) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, x := range e.ev {
		if x.Kind == k {
			out = append(out, x)
		}
	}
	return out
}

func newTestLedger(t *testing.T, cfg Config) (*Ledger, *engine.FakeClock, *eventLog) {
	t.Helper()
	clk := engine.NewFakeClock(t0)
	ev := &eventLog{}
	l, err := NewLedger(cfg, clk, WithEventHook(ev.add))
	if err != nil {
		t.Fatal(err)
	}
	return l, clk, ev
}

func req(in int) Request { return Request{Provider: "p", Model: "m", Session: "s", InputTokens: in} }

// mustAdmit submits and fails unless the call goes through without waiting.
func mustAdmit(t *testing.T, l *Ledger, now time.Time, r Request) Ticket {
	t.Helper()
	tk, w := l.Submit(now, r)
	if w != nil {
		t.Fatalf("at %s: %+v waits (%s until %s), want admitted", now.Sub(t0), r, w.reason, w.Next().Sub(t0))
	}
	return tk
}

// mustWait submits and fails unless the call waits until want.
func mustWait(t *testing.T, l *Ledger, now time.Time, r Request, reason string, until time.Duration) *Waiter {
	t.Helper()
	tk, w := l.Submit(now, r)
	if w == nil {
		t.Fatalf("at %s: %+v admitted (%+v), want a %s wait", now.Sub(t0), r, tk, reason)
	}
	if w.reason != reason || w.Next().Sub(t0) != until {
		t.Fatalf("wait = %s until %s, want %s until %s", w.reason, w.Next().Sub(t0), reason, until)
	}
	return w
}

func TestConfigRefusesMaxWaitBelowWindow(t *testing.T) {
	c := testGate()
	c.MaxWait = 30 * time.Second
	if _, err := NewLedger(c, engine.NewFakeClock(t0)); !errors.Is(err, ErrMaxWaitBelowWindow) {
		t.Fatalf("err = %v, want ErrMaxWaitBelowWindow", err)
	}
	c.MaxWait = 60 * time.Second
	if _, err := NewLedger(c, engine.NewFakeClock(t0)); err != nil {
		t.Fatalf("maxWait == window must be accepted: %v", err)
	}
}

func TestTPMDrainTime(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	// reservation = 300 input + 100 reserve = 400
	mustAdmit(t, l, t0, req(300))                     // window 400
	mustAdmit(t, l, t0.Add(10*time.Second), req(300)) // window 800
	// 800 + 400 > 1000: the first entry (400 at t0) must leave → t0+60s.
	mustWait(t, l, t0.Add(20*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 300}, "tpm", 60*time.Second)
}

func TestTPMDrainNeedsSeveralEntries(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	for i := 0; i < 5; i++ { // five entries of 200 (100 + 100 reserve) at t0, t0+1s, …
		mustAdmit(t, l, t0.Add(time.Duration(i)*time.Second), req(100))
	}
	// window 1000; a reservation of 500 needs 500 out: the first three entries (600).
	mustWait(t, l, t0.Add(5*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 400}, "tpm", 62*time.Second)
}

func TestRPMGatesIndependently(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	for i := 0; i < 10; i++ {
		tk := mustAdmit(t, l, t0.Add(time.Duration(i)*time.Second), req(1))
		if err := l.Settle(t0.Add(time.Duration(i)*time.Second), tk, Usage{InputTokens: 1, OutputTokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// tokens are nearly empty (20), but 10 requests sit in the window: RPM waits
	// until the first leaves at t0+60s.
	mustWait(t, l, t0.Add(10*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 1}, "rpm", 60*time.Second)
}

func TestSafetyFactorShrinksBudgets(t *testing.T) {
	c := testGate()
	c.SafetyFactor = 0.5
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(300)) // 400 ≤ 500
	mustWait(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 1}, "tpm", 60*time.Second)
	st := l.BucketStatus(t0, "p", "m")
	if st.TokenBudget != 500 || st.RPMBudget != 5 {
		t.Fatalf("budgets = %d tokens, %d requests; want 500, 5", st.TokenBudget, st.RPMBudget)
	}
}

func TestReservationUsesMaxTokensOrReserve(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 50})
	if tk.Reserved != 150 || tk.ReservedOutput != 100 {
		t.Fatalf("reserved %d (output %d), want 150 (100)", tk.Reserved, tk.ReservedOutput)
	}
	tk = mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 50, MaxTokens: 20})
	if tk.Reserved != 70 {
		t.Fatalf("reserved %d, want 70 (max_tokens replaces the reserve)", tk.Reserved)
	}
}

func TestSettleRefundsAndReleaseFrees(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, req(300)) // 400
	b := mustAdmit(t, l, t0, req(300)) // 800
	if got := l.BucketStatus(t0, "p", "m"); got.WindowTokens != 800 || got.Reserved != 800 || got.InFlight != 2 {
		t.Fatalf("status %+v", got)
	}
	// real usage 100 in + 20 cache read + 30 cache write + 50 out = 200: refund 200
	if err := l.Settle(t0, a, Usage{InputTokens: 100, CacheReadTokens: 20, CacheWriteTokens: 30, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0, "p", "m"); got.WindowTokens != 600 || got.Reserved != 400 || got.InFlight != 1 {
		t.Fatalf("after settle: %+v", got)
	}
	if err := l.Release(t0, b); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0, "p", "m"); got.WindowTokens != 200 || got.Reserved != 0 || got.InFlight != 0 || got.WindowRequests != 2 {
		t.Fatalf("after release: %+v (the request still counts for RPM)", got)
	}
	// Nothing counts twice.
	if err := l.Settle(t0, a, Usage{OutputTokens: 999}); !errors.Is(err, ErrTicketClosed) {
		t.Fatalf("second settle: %v", err)
	}
	if err := l.Release(t0, b); !errors.Is(err, ErrTicketClosed) {
		t.Fatalf("second release: %v", err)
	}
	if got := l.BucketStatus(t0, "p", "m"); got.WindowTokens != 200 {
		t.Fatalf("a double settle changed the window: %+v", got)
	}
}

// A provider whose limit does not count cache reads (Anthropic's ITPM) has
// them left out of the window, while the estimator still learns the whole
// input the body's bytes stand for.
func TestSettleLeavesUncountedCacheReadsOutOfTheWindow(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputBytes: 4000, MaxTokens: 50})
	u := Usage{InputTokens: 100, CacheReadTokens: 900, CacheWriteTokens: 30, OutputTokens: 50, CacheReadsUncounted: true}
	if err := l.Settle(t0, a, u); err != nil {
		t.Fatal(err)
	}
	got := l.BucketStatus(t0, "p", "m")
	if got.WindowTokens != 180 {
		t.Fatalf("window %d, want 180 (input 100 + cache writes 30 + output 50; the 900 cache reads not counted)", got.WindowTokens)
	}
	if got.BytesPerToken != 4000.0/1030 {
		t.Fatalf("bytes per token %g, want %g: the whole input, cache reads too", got.BytesPerToken, 4000.0/1030)
	}
}

func TestStaleTicketCannotSettleAReusedSlot(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, req(0))
	if err := l.Release(t0, a); err != nil {
		t.Fatal(err)
	}
	b := mustAdmit(t, l, t0, req(0)) // reuses a's slot
	if err := l.Release(t0, a); !errors.Is(err, ErrTicketClosed) {
		t.Fatalf("stale ticket: %v", err)
	}
	if got := l.BucketStatus(t0, "p", "m"); got.Reserved != b.Reserved {
		t.Fatalf("stale ticket released b's reservation: %+v", got)
	}
}

func TestSettleAfterEntryLeftWindow(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, req(300))
	later := t0.Add(90 * time.Second) // a long stream: the entry left the window
	if err := l.Settle(later, a, Usage{InputTokens: 900}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(later, "p", "m"); got.WindowTokens != 0 || got.InFlight != 0 {
		t.Fatalf("status %+v", got)
	}
}

func TestCooldowns(t *testing.T) {
	l, _, ev := newTestLedger(t, testGate())
	l.RateLimited(t0, "p", "m", 30*time.Second)
	mustWait(t, l, t0, req(1), "cooldown", 30*time.Second)
	// a later, shorter cooldown never shortens the longer one
	l.RateLimited(t0.Add(5*time.Second), "p", "m", 5*time.Second)
	mustWait(t, l, t0.Add(6*time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 1}, "cooldown", 30*time.Second)
	// a longer one extends it
	l.RateLimited(t0.Add(10*time.Second), "p", "m", 40*time.Second)
	mustWait(t, l, t0.Add(10*time.Second), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 1}, "cooldown", 50*time.Second)
	// no hint: the fallback (60s)
	l.RateLimited(t0, "p", "other", 0)
	mustWait(t, l, t0, Request{Provider: "p", Model: "other", InputTokens: 1}, "cooldown", 60*time.Second)
	if rl := ev.kinds(EventRateLimited); len(rl) != 4 || !rl[3].FromFallback || rl[3].RetryAfter != 60*time.Second {
		t.Fatalf("rate-limited events: %+v", rl)
	}
	// buckets are independent: another model of p is free
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "third", InputTokens: 1})
}

func TestProviderWideCooldownWhenModelUnknown(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "existing", InputTokens: 1})
	l.RateLimited(t0, "p", "", 20*time.Second)
	mustWait(t, l, t0, Request{Provider: "p", Model: "existing", InputTokens: 1}, "cooldown", 20*time.Second)
	mustWait(t, l, t0, Request{Provider: "p", Model: "new", InputTokens: 1}, "cooldown", 20*time.Second)
	mustAdmit(t, l, t0, Request{Provider: "q", Model: "existing", InputTokens: 1})
	l.RateLimited(t0, "p", "", 5*time.Second) // shorter: no change
	mustWait(t, l, t0, Request{Provider: "p", Model: "new2", InputTokens: 1}, "cooldown", 20*time.Second)
}

// TestCooldownLeft: a model's own cooldown, its provider's for a model the
// ledger holds no bucket for, and none elsewhere — without building a bucket.
func TestCooldownLeft(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	if cd := l.CooldownLeft(t0, "p", "m"); cd != 0 || l.Buckets() != 0 {
		t.Fatalf("nothing known: %s, %d buckets", cd, l.Buckets())
	}
	l.RateLimited(t0, "p", "m", 30*time.Second)
	l.RateLimited(t0, "p", "", 10*time.Second)
	for _, tc := range []struct {
		provider, model string
		at              time.Duration
		want            time.Duration
	}{
		{"p", "m", 0, 30 * time.Second},
		{"p", "m", 12 * time.Second, 18 * time.Second},
		{"p", "never-used", 4 * time.Second, 6 * time.Second}, // the provider's
		{"p", "never-used", 11 * time.Second, 0},
		{"q", "m", 0, 0},
	} {
		if got := l.CooldownLeft(t0.Add(tc.at), tc.provider, tc.model); got != tc.want {
			t.Errorf("%s/%s at %s: %s, want %s", tc.provider, tc.model, tc.at, got, tc.want)
		}
	}
	if l.Buckets() != 1 {
		t.Fatalf("%d buckets, want the one the 429 made", l.Buckets())
	}
	// Past MaxModels a new name is counted as provider/(other): its cooldown
	// is that bucket's.
	c := testGate()
	c.MaxModels = 1
	l, _, _ = newTestLedger(t, c)
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "first", InputTokens: 1})
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "folded", InputTokens: 1})
	l.RateLimited(t0, "p", "folded", 30*time.Second)
	if cd := l.CooldownLeft(t0, "p", "another"); cd != 30*time.Second {
		t.Fatalf("a name past MaxModels: %s, want provider/(other)'s 30s", cd)
	}
	if cd := l.CooldownLeft(t0, "p", "first"); cd != 0 {
		t.Fatalf("a model of its own: %s, want none", cd)
	}
}

func TestPerModelOverrides(t *testing.T) {
	c := testGate()
	c.Models = map[string]ModelLimits{"p/big": {TPM: 5000, RPM: 2, SafetyFactor: 0.5}}
	l, _, _ := newTestLedger(t, c)
	st := l.BucketStatus(t0, "p", "big")
	if st.TokenBudget != 2500 || st.RPMBudget != 1 || st.Start != 5000 {
		t.Fatalf("override not applied: %+v", st)
	}
	if st := l.BucketStatus(t0, "p", "m"); st.TokenBudget != 1000 || st.RPMBudget != 10 {
		t.Fatalf("default changed: %+v", st)
	}
}

func TestFailOpen(t *testing.T) {
	t.Run("WaitBeyondMaxWait", func(t *testing.T) {
		l, _, ev := newTestLedger(t, testGate())
		l.RateLimited(t0, "p", "m", 200*time.Second) // cooldown longer than maxWait (120s)
		tk := mustAdmit(t, l, t0, req(1))
		if !tk.FailOpen || len(ev.kinds(EventFailOpen)) != 1 {
			t.Fatalf("ticket %+v, events %+v: want a fail-open admission with a warning", tk, ev.kinds(EventFailOpen))
		}
	})
	t.Run("NoBucket", func(t *testing.T) {
		l, _, ev := newTestLedger(t, testGate())
		tk := mustAdmit(t, l, t0, Request{Provider: "p", InputTokens: 1})
		if !tk.FailOpen || tk.Reason != "no-bucket" || len(ev.kinds(EventFailOpen)) != 1 {
			t.Fatalf("ticket %+v", tk)
		}
		if err := l.Settle(t0, tk, Usage{InputTokens: 5}); err != nil {
			t.Fatalf("settling a fail-open ticket: %v", err)
		}
	})
	t.Run("InternalError", func(t *testing.T) {
		l, clk, ev := newTestLedger(t, testGate())
		hook := l.onEvent
		l.onEvent = func(e Event) {
			hook(e)
			if e.Kind == EventWait {
				panic("a broken hook")
			}
		}
		l.RateLimited(t0, "p", "m", 10*time.Second)
		tk, err := l.Admit(context.Background(), req(1))
		if err != nil || !tk.FailOpen || tk.Reason != "internal" || clk.Timers() != 0 {
			t.Fatalf("ticket %+v err %v: want an immediate fail-open admission", tk, err)
		}
		if len(ev.kinds(EventFailOpen)) != 1 {
			t.Fatal("no fail-open warning")
		}
	})
	t.Run("WaiterReachesMaxWait", func(t *testing.T) {
		c := testGate()
		c.Defaults.RPM = 1
		l, _, ev := newTestLedger(t, c)
		mustAdmit(t, l, t0, req(1))
		w := mustWait(t, l, t0.Add(time.Second), req(1), "rpm", 60*time.Second)
		// Keep the bucket under cooldown: the waiter will not fit before its deadline.
		l.RateLimited(t0.Add(2*time.Second), "p", "m", 119*time.Second+500*time.Millisecond)
		if tk, ok := w.Poll(t0.Add(60 * time.Second)); ok {
			t.Fatalf("granted during cooldown: %+v", tk)
		}
		if got := w.Next(); got != t0.Add(121*time.Second) {
			t.Fatalf("next = %s, want the maxWait deadline 121s", got.Sub(t0))
		}
		tk, ok := w.Poll(t0.Add(121 * time.Second))
		if !ok || !tk.FailOpen || tk.Waited != 120*time.Second {
			t.Fatalf("ticket %+v ok=%v, want fail-open after 120s", tk, ok)
		}
		if len(ev.kinds(EventFailOpen)) != 1 {
			t.Fatal("no fail-open warning")
		}
	})
}

// The two over-budget regression cases: a reservation larger than the whole budget is
// admitted at once (never burns maxWait), but still waits out a cooldown.
func TestOverBudgetReservation(t *testing.T) {
	t.Run("AdmittedWithoutWindowWait", func(t *testing.T) {
		l, _, ev := newTestLedger(t, testGate())
		mustAdmit(t, l, t0, req(800)) // window 900
		tk := mustAdmit(t, l, t0.Add(time.Second), req(5000))
		if tk.Reason != "over-budget" || len(ev.kinds(EventOverBudget)) != 1 {
			t.Fatalf("ticket %+v, want an over-budget admission with a warning", tk)
		}
	})
	t.Run("StillWaitsCooldown", func(t *testing.T) {
		l, _, _ := newTestLedger(t, testGate())
		l.RateLimited(t0, "p", "m", 10*time.Second)
		w := mustWait(t, l, t0, req(5000), "cooldown", 10*time.Second)
		tk, ok := w.Poll(t0.Add(10 * time.Second))
		if !ok || tk.Waited != 10*time.Second || tk.Reason != "over-budget" {
			t.Fatalf("ticket %+v ok=%v", tk, ok)
		}
	})
}

// A clock that steps back keeps the window's entries at their ages: admitted
// at t0+10s, the first call is the clock's latest when it steps back five
// seconds, to t0+5s; it leaves a minute after that, at t0+65s in the new
// clock, with the call admitted then. Half a second back (callers racing to
// the lock) is no step, and the entry is stamped at the latest time instead
// (and see TestClockSteppedBackKeepsTheWindowsAges).
func TestClockGoingBackwards(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	mustAdmit(t, l, t0.Add(10*time.Second), req(300))
	tk := mustAdmit(t, l, t0.Add(5*time.Second), req(300)) // clock stepped back
	if err := l.Settle(t0.Add(6*time.Second), tk, Usage{InputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(64*time.Second), "p", "m"); got.WindowTokens != 401 {
		t.Fatalf("window %d, want 401 (both entries still in)", got.WindowTokens)
	}
	if got := l.BucketStatus(t0.Add(65*time.Second), "p", "m"); got.WindowTokens != 0 {
		t.Fatalf("window %d, want 0", got.WindowTokens)
	}
	// Half a second back: no step; the later call is stamped at t0+10s.
	l, _, _ = newTestLedger(t, testGate())
	mustAdmit(t, l, t0.Add(10*time.Second), req(300))
	mustAdmit(t, l, t0.Add(9500*time.Millisecond), req(300))
	if got := l.BucketStatus(t0.Add(69*time.Second+900*time.Millisecond), "p", "m"); got.WindowTokens != 800 {
		t.Fatalf("window %d at t0+69.9s, want 800 (both still in)", got.WindowTokens)
	}
	if got := l.BucketStatus(t0.Add(70*time.Second), "p", "m"); got.WindowTokens != 0 {
		t.Fatalf("window %d at t0+70s, want 0 (both stamped t0+10s)", got.WindowTokens)
	}
}

func TestAdmitBlocksUntilDrainedWithoutSleeping(t *testing.T) {
	l, clk, ev := newTestLedger(t, testGate())
	first, err := l.Admit(context.Background(), req(800)) // 900
	if err != nil || first.Waited != 0 {
		t.Fatalf("%+v %v", first, err)
	}
	done := make(chan Ticket)
	go func() {
		tk, err := l.Admit(context.Background(), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100})
		if err != nil {
			t.Error(err)
		}
		done <- tk
	}()
	waitForTimers(t, clk, 1)
	if w := ev.kinds(EventWait); len(w) != 1 || w[0].Reason != "tpm" || w[0].Wait != 60*time.Second || w[0].WindowTokens != 900 {
		t.Fatalf("wait event %+v", w)
	}
	clk.Advance(59 * time.Second)
	select {
	case tk := <-done:
		t.Fatalf("admitted early: %+v", tk)
	default:
	}
	clk.Advance(time.Second)
	tk := <-done
	if tk.Waited != 60*time.Second || tk.Reason != "tpm" {
		t.Fatalf("ticket %+v", tk)
	}
	if a := ev.kinds(EventAdmitted); len(a) != 1 || a[0].Wait != 60*time.Second {
		t.Fatalf("admitted events %+v", a)
	}
}

func TestAdmitWokenEarlyBySettlement(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	first, _ := l.Admit(context.Background(), req(800))
	done := make(chan Ticket)
	go func() {
		tk, _ := l.Admit(context.Background(), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100})
		done <- tk
	}()
	waitForTimers(t, clk, 1)
	clk.Advance(3 * time.Second)
	// the first call used far less than it reserved: the refund lets the waiter in
	if err := l.Settle(clk.Now(), first, Usage{InputTokens: 100, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if tk := <-done; tk.Waited != 3*time.Second {
		t.Fatalf("ticket %+v", tk)
	}
}

func TestAdmitCancelledReleasesItsPlace(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	l.Admit(context.Background(), req(800))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := l.Admit(ctx, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 100})
		errc <- err
	}()
	waitForTimers(t, clk, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if st := l.BucketStatus(clk.Now(), "p", "m"); st.Waiting != 0 || st.InFlight != 1 {
		t.Fatalf("status %+v", st)
	}
}

func TestCancelAfterGrantReleasesReservation(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	l.RateLimited(t0, "p", "m", 10*time.Second)
	w := mustWait(t, l, t0, req(100), "cooldown", 10*time.Second)
	if _, ok := w.Poll(t0.Add(10 * time.Second)); !ok {
		t.Fatal("not granted")
	}
	w.Cancel(t0.Add(10 * time.Second)) // the client left between grant and send
	if st := l.BucketStatus(t0.Add(10*time.Second), "p", "m"); st.Reserved != 0 || st.InFlight != 0 || st.WindowTokens != 0 {
		t.Fatalf("status %+v", st)
	}
}

// waitForTimers polls (without sleeping on time) until n timers are pending, i.e.
// until the goroutines under test have reached their wait.
func waitForTimers(t *testing.T, clk *engine.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Timers() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d timers pending, want %d", clk.Timers(), n)
		}
		yield()
	}
}

func yield() { time.Sleep(0) }

func TestHammerAdmitSettle(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 1 << 40, RPM: 1 << 30}
	l, _, _ := newTestLedger(t, c)
	const P, N = 8, 2000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := 0; p < P; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			<-start
			r := Request{Provider: "p", Model: fmt.Sprint("m", p%3), Session: fmt.Sprint("s", p), InputTokens: 10}
			for i := 0; i < N; i++ {
				tk, w := l.Submit(t0, r)
				if w != nil {
					t.Error("waited")
					return
				}
				if err := l.Settle(t0, tk, Usage{InputTokens: 5, OutputTokens: 5}); err != nil {
					t.Error(err)
					return
				}
			}
		}(p)
	}
	close(start)
	wg.Wait()
	var total int64
	for _, st := range l.Status(t0) {
		total += st.WindowTokens
		if st.InFlight != 0 || st.Reserved != 0 {
			t.Fatalf("leftover %+v", st)
		}
	}
	if total != P*N*10 {
		t.Fatalf("window total %d, want %d", total, P*N*10)
	}
}

func TestReconfigureKeepsWhatWasLearned(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	mustAdmit(t, l, t0, req(600))
	l.RateLimited(t0, "p", "m", 30*time.Second) // quota and trigger 700 (the reading), cooldown to 30s
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "fresh", InputTokens: 1})
	c := testGate()
	c.Defaults = ModelLimits{TPM: 2000, RPM: 20}
	c.MaxWait = 5 * time.Minute
	if err := l.Reconfigure(t0.Add(time.Second), c); err != nil {
		t.Fatal(err)
	}
	st := l.BucketStatus(t0.Add(time.Second), "p", "m")
	if st.Quota != 700 || st.Trigger != 700 || st.Start != 2000 || st.CooldownMs != 29000 || st.WindowTokens != 700 || st.RPMBudget != 20 {
		t.Fatalf("learned state lost: %+v", st)
	}
	if st := l.BucketStatus(t0.Add(time.Second), "p", "fresh"); st.Quota != 2000 {
		t.Fatalf("an untouched model keeps its old start: %+v", st)
	}
	if l.Config().MaxWait != 5*time.Minute {
		t.Fatal("config not swapped")
	}
	bad := c
	bad.MaxWait = time.Second
	if err := l.Reconfigure(t0, bad); err == nil || l.Config().MaxWait != 5*time.Minute {
		t.Fatalf("a bad config was applied: %v", err)
	}
}

// A panicking event hook is an internal error: the call it hit fails open, and the
// bucket's books stay straight — no waiter left queued (to be granted later and
// never settled), no waiter granted twice.
func TestPanickingHookLeavesNoOrphans(t *testing.T) {
	cases := []struct {
		name    string
		panicOn EventKind
		run     func(t *testing.T, l *Ledger, clk *engine.FakeClock)
	}{
		{"wait event while queueing, through Admit", EventWait, func(t *testing.T, l *Ledger, clk *engine.FakeClock) {
			l.RateLimited(t0, "p", "m", 10*time.Second)
			tk, err := l.Admit(context.Background(), req(1))
			if err != nil || !tk.FailOpen {
				t.Fatalf("ticket %+v err %v: want fail-open", tk, err)
			}
		}},
		{"wait event while queueing behind another waiter, through Submit", EventWait, func(t *testing.T, l *Ledger, clk *engine.FakeClock) {
			l.onEvent = nil
			l.RateLimited(t0, "p", "m", 10*time.Second)
			_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 1})
			if w == nil {
				t.Fatal("admitted during a cooldown")
			}
			l.onEvent = func(e Event) {
				if e.Kind == EventWait {
					panic("a broken hook")
				}
			}
			tk, w2 := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 1})
			if w2 != nil || !tk.FailOpen {
				t.Fatalf("ticket %+v waiter %v: want fail-open", tk, w2)
			}
			w.Cancel(t0)
		}},
		{"fail-open event of a wait beyond maxWait", EventFailOpen, func(t *testing.T, l *Ledger, clk *engine.FakeClock) {
			l.RateLimited(t0, "p", "x", 200*time.Second) // longer than maxWait
			tk, w := l.Submit(t0, Request{Provider: "p", Model: "x", Session: "a", InputTokens: 1})
			if w != nil || !tk.FailOpen || tk.Reason != "internal" {
				t.Fatalf("ticket %+v waiter %v: want an internal fail-open", tk, w)
			}
			if st := l.BucketStatus(t0, "p", "x"); st.InFlight != 0 || st.Reserved != 0 {
				t.Fatalf("status %+v: the grant the panic cut short is still held", st)
			}
		}},
		{"admitted event while dispatching", EventAdmitted, func(t *testing.T, l *Ledger, clk *engine.FakeClock) {
			hook := l.onEvent
			l.onEvent = nil
			l.RateLimited(t0, "p", "m", 10*time.Second)
			_, w1 := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 1})
			_, w2 := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 1})
			l.onEvent = hook
			func() {
				defer func() { _ = recover() }()
				w1.Poll(t0.Add(10 * time.Second)) // grants w1, then the hook panics
			}()
			l.onEvent = nil
			w2.Poll(t0.Add(11 * time.Second)) // must neither grant w1 again nor panic
			for _, w := range []*Waiter{w1, w2} {
				if tk, ok := w.Ticket(); !ok {
					t.Fatal("waiter not granted")
				} else if err := l.Release(t0.Add(12*time.Second), tk); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk, _ := newTestLedger(t, testGate())
			l.onEvent = func(e Event) {
				if e.Kind == tc.panicOn {
					panic("a broken hook")
				}
			}
			tc.run(t, l, clk)
			l.onEvent = nil
			later := t0.Add(time.Minute)
			mustAdmit(t, l, later, Request{Provider: "p", Model: "m", Session: "z", InputTokens: 1}) // dispatches what is left
			st := l.BucketStatus(later, "p", "m")
			if st.Waiting != 0 || st.InFlight != 1 || st.Reserved != 101 {
				t.Fatalf("status %+v: want nothing queued and only the last call in flight", st)
			}
		})
	}
}

// A library caller's absurd input (near MaxInt64) is sized as the output's
// max_tokens is, at most maxReservation: summed into the window unbounded it
// wrapped negative, and every later call went through as if the window were
// empty.
func TestAbsurdInputDoesNotWrapTheWindow(t *testing.T) {
	for _, r := range []Request{
		{Provider: "p", Model: "m", Session: "s", InputTokens: math.MaxInt64 - 10, MaxTokens: 100},
		{Provider: "p", Model: "m", Session: "s", InputTokens: math.MaxInt, MaxTokens: math.MaxInt},
	} {
		l, _, _ := newTestLedger(t, testGate())
		_, w := l.Submit(t0, r) // over the whole budget: let go at once (the over-budget rule)
		if w != nil {
			t.Fatalf("%+v waits (%s), want the over-budget grant", r, w.reason)
		}
		if bs := l.BucketStatus(t0, "p", "m"); bs.WindowTokens <= 0 {
			t.Fatalf("window holds %d tokens after %+v, want it full", bs.WindowTokens, r)
		}
		mustWait(t, l, t0, req(10), "tpm", time.Minute) // the next call waits for it to leave
	}
}

// A reload that changes the window converts what was learned of the tokens to
// the new window's units, at the same rate; a model that learned nothing keeps
// the configured start, which is the user's figure for the new window.
func TestReloadOfTheWindowRescalesWhatWasLearned(t *testing.T) {
	learned := learned800
	for _, tc := range []struct {
		name     string
		from, to time.Duration
		want     float64
	}{
		{"shorter", time.Minute, 10 * time.Second, 800.0 / 6},
		{"longer", 10 * time.Second, time.Minute, 800 * 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := learned(t, tc.from)
			c := testGate()
			c.Window = tc.to
			if err := l.Reconfigure(t0.Add(2*time.Second), c); err != nil {
				t.Fatal(err)
			}
			if q, trig := quota(l, t0.Add(2*time.Second)); math.Abs(q-tc.want) > 1e-9 || math.Abs(trig-tc.want) > 1e-9 {
				t.Fatalf("quota %v trigger %v after the window went from %s to %s, want %v (800 a %s)", q, trig, tc.from, tc.to, tc.want, tc.from)
			}
			if bs := l.BucketStatus(t0.Add(2*time.Second), "q", "fresh"); bs.Quota != 1000 {
				t.Fatalf("a model that learned nothing: quota %v, want the configured 1000", bs.Quota)
			}
		})
	}
}

// learned800 is a ledger with a window of window whose model p/m learned a
// quota and a trigger of 800 from a 429, and whose q/fresh learned nothing.
func learned800(t *testing.T, window time.Duration) *Ledger {
	t.Helper()
	c := testGate()
	c.Window = window
	l, _, _ := newTestLedger(t, c)
	for range 4 {
		mustAdmit(t, l, t0, req(100)) // 200 tokens each with the output reserve
	}
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
	if q, trig := quota(l, t0); q != 800 || trig != 800 {
		t.Fatalf("setup: quota %v trigger %v", q, trig)
	}
	l.BucketStatus(t0, "q", "fresh") // a model that learned nothing
	return l
}

// The window the learned figures are in is the bucket's own record, not its
// span: a 429 that measures a delay sets the span from the configuration a
// reload stored already, before the reload's walk has reached the bucket; the
// walk must still convert what was learned.
func TestReloadConvertsWhenTheSpanMovedFirst(t *testing.T) {
	l := learned800(t, time.Minute)
	c := testGate()
	c.Window = 10 * time.Second
	l.cfg.Store(&c) // the reload stored it; its walk is not at p/m yet
	l.RateLimitedBy(t0.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisRequests, Admitted: t0})
	if err := l.Reconfigure(t0.Add(2*time.Second), c); err != nil {
		t.Fatal(err)
	}
	if q, trig := quota(l, t0.Add(2*time.Second)); math.Abs(q-800.0/6) > 1e-9 || math.Abs(trig-800.0/6) > 1e-9 {
		t.Fatalf("quota %v trigger %v after the reload, want %v (800 a minute)", q, trig, 800.0/6)
	}
}

// A model whose provider states its limit keeps the trigger a 429 set under
// it through a reload that changes the window (converted) and the next answer
// restating the same figure: that figure is the same limit in the new units,
// not a new one that would drop what 429s taught.
func TestReloadKeepsATriggerUnderAStatedLimit(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	l.Calibrate(t0, "p", "m", 800, 800, -1, -1) // 800 a minute
	mustAdmit(t, l, t0, req(600))
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
	_, trig := quota(l, t0)
	if trig <= 0 || trig >= 800 {
		t.Fatalf("setup: trigger %v, want one under the stated 800", trig)
	}
	c := testGate()
	c.Window = 30 * time.Second
	if err := l.Reconfigure(t0.Add(time.Second), c); err != nil {
		t.Fatal(err)
	}
	l.Calibrate(t0.Add(2*time.Second), "p", "m", 800, 800, -1, -1) // the next answer
	if q, got := quota(l, t0.Add(2*time.Second)); math.Abs(got-trig/2) > 1e-9 || q > 400 {
		t.Fatalf("after the reload and the figure restated: quota %v trigger %v, want the trigger %v (half of %v) kept", q, got, trig/2, trig)
	}
}

// A 429 of which only the status and headers were read (its body found no
// room, its client left) cools the model down and teaches nothing: unread, it
// may be spent quota or a gateway's refusal, not this model's limit.
func TestUnreadRateLimitCoolsDownOnly(t *testing.T) {
	for _, unread := range []bool{false, true} {
		l, _, _ := newTestLedger(t, learnGate())
		for range 4 {
			mustAdmit(t, l, t0, req(100)) // 800 in the window
		}
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: 5 * time.Second, Axis: engine.AxisTokens, Unread: unread})
		st := l.BucketStatus(t0, "p", "m")
		if st.CooldownMs != 5000 || st.RateLimited != 1 {
			t.Fatalf("unread %v: cooldown %dms, 429s %d; want 5 s, 1", unread, st.CooldownMs, st.RateLimited)
		}
		if learned := st.Trigger != 0 || st.Quota != 1000; learned == unread {
			t.Fatalf("unread %v: trigger %v quota %v; a read 429 teaches the window's 800, an unread one nothing", unread, st.Trigger, st.Quota)
		}
	}
}

// A call sent a window ago or more and abandoned now adds nothing: the
// provider no longer holds it (counted at completion, the window would hold it
// from now).
func TestAbandonedLongAgoIsReleased(t *testing.T) {
	for _, ago := range []time.Duration{time.Second, 61 * time.Second} {
		cfg := fairGate()
		cfg.Defaults.CountsAt = "completion"
		l, _, _ := newTestLedger(t, cfg)
		r := req(300)
		r.Sends = true
		gone := mustAdmit(t, l, t0, r)
		l.Sent(t0, gone)
		at := t0.Add(ago)
		want := int64(400) // 300 and the output expected of it (the reserve: nothing settled yet)
		if ago > time.Minute {
			want = 0
		}
		if kept, err := l.Abandon(at, gone); err != nil || kept != want {
			t.Fatalf("abandoned %s after its send: kept %d, %v; want %d", ago, kept, err, want)
		}
		if got := l.BucketStatus(at, "p", "m").WindowTokens; got != want {
			t.Fatalf("abandoned %s after its send: the completion window holds %d, want %d", ago, got, want)
		}
	}
}

// A call whose client went away after it was sent stays counted at what a
// call in flight counts: the provider had it. Released, its room let the
// waiter through into a window the provider still held. Not sent, it is
// released.
func TestAbandonedCallStaysCounted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sent      bool
		abandon   bool
		wantGrant bool
	}{
		{"sent, abandoned", true, true, false},
		{"sent, released", true, false, true},
		{"never sent, abandoned", false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTestLedger(t, fairGate())
			r := req(300)
			r.Sends = true
			gone := mustAdmit(t, l, t0, r) // 300 + 100 of output reserve
			if tc.sent {
				l.Sent(t0, gone)
			}
			mustAdmit(t, l, t0, req(300))
			_, w := l.Submit(t0, req(300)) // 1,200 > 1,000: waits
			if w == nil {
				t.Fatal("setup: the third call was admitted")
			}
			at := t0.Add(time.Second)
			var err error
			if tc.abandon {
				_, err = l.Abandon(at, gone)
			} else {
				err = l.Release(at, gone)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, granted := w.Poll(at)
			st := l.BucketStatus(at, "p", "m")
			if granted != tc.wantGrant {
				t.Fatalf("the waiter granted %v, want %v (window %d)", granted, tc.wantGrant, st.WindowTokens)
			}
			if tc.sent && tc.abandon && st.WindowTokens != 800 {
				t.Fatalf("window %d, want 800: the abandoned call at its 400, the other call's 400", st.WindowTokens)
			}
			if _, err := l.Abandon(at, gone); err != ErrTicketClosed {
				t.Fatalf("abandoned again: %v, want ErrTicketClosed", err)
			}
		})
	}
}

// Usage is bounded as a reservation is: a provider's absurd int64 counts,
// passed through, must not wrap the window's sums (which then read negative
// and admit everything) nor the input estimate that calls without a count
// reserve.
func TestSettleBoundsAbsurdUsage(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, req(100))
	if err := l.Settle(t0, a, Usage{InputTokens: 1 << 62, CacheReadTokens: 1 << 62, OutputTokens: 1 << 62}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	if st := l.BucketStatus(now, "p", "m"); st.WindowTokens < 0 {
		t.Fatalf("the window reads %d", st.WindowTokens)
	}
	if _, w := l.Submit(now, req(800)); w == nil {
		t.Error("a call admitted into a window the absurd usage filled")
	} else {
		w.Cancel(now)
	}
	for i := range 3 { // the estimate: the mean of the last three inputs
		at := t0.Add(time.Duration(i+1) * 2 * time.Minute)
		if err := l.Settle(at, mustAdmit(t, l, at, req(10)), Usage{InputTokens: 1 << 62}); err != nil {
			t.Fatal(err)
		}
	}
	tk, _ := l.Submit(t0.Add(10*time.Minute), Request{Provider: "p", Model: "m", Session: "s2"})
	if tk.Reserved < 0 {
		t.Errorf("a call without an input count reserves %d", tk.Reserved)
	}
}

// A per-session cap turned on by a reload counts the calls already in flight:
// one of them settling must not free a place a counted call holds.
func TestSessionCapAfterReloadCountsCallsInFlight(t *testing.T) {
	c := testGate()
	c.Defaults.TPM = 100000
	l, _, _ := newTestLedger(t, c)
	old := mustAdmit(t, l, t0, req(10))
	c.MaxInFlightPerSession = 1
	if err := l.Reconfigure(t0, c); err != nil {
		t.Fatal(err)
	}
	if _, w := l.Submit(t0, req(10)); w == nil {
		t.Fatal("a second call of the session admitted beside the one in flight, under a cap of 1")
	} else {
		w.Cancel(t0)
	}
	if err := l.Settle(t0, old, Usage{InputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	next := mustAdmit(t, l, t0, req(10)) // the place is free now
	if _, w := l.Submit(t0.Add(time.Second), req(10)); w == nil {
		t.Error("2 calls in flight under a cap of 1")
	} else {
		w.Cancel(t0)
	}
	_ = l.Settle(t0, next, Usage{InputTokens: 10})
}
