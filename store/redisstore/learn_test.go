package redisstore

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/redistest"
)

// The learner's per-window flags are shared: a probe one instance made counts
// for the other, so two instances held back by the token budget in the same
// window raise the quota once (×1.05), not once each (×1.1025).
func TestLedgersShareLearnerFlags(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	ledger := func() *gate.Ledger {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned})
		return l
	}
	a, b := ledger(), ledger()
	waitSubscribed(t, srv)
	big := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 4000, MaxTokens: 4000} // 8000
	small := gate.Request{Provider: "p", Model: "m", Session: "s2", InputTokens: 2000, MaxTokens: 2000}
	quota := func(l *gate.Ledger) float64 { return l.BucketStatus(clock.Now(), "p", "m").Quota }
	// blocked fills l's own window and has one more call held back by the token
	// budget; then it lets everything go, so the shared window is empty again.
	blocked := func(l *gate.Ledger) {
		t.Helper()
		tk, w := l.Submit(clock.Now(), big)
		if w != nil {
			t.Fatal("8000 tokens waited in an empty window")
		}
		if _, w := l.Submit(clock.Now(), small); w == nil {
			t.Fatal("12000 tokens admitted past a budget of about 10000")
		} else {
			w.Cancel(clock.Now())
		}
		_ = l.Release(clock.Now(), tk)
	}
	blocked(a) // both buckets exist, and their birth is their last probe
	blocked(b)
	clock.Advance(61 * time.Second)
	blocked(a) // a window since the last probe: A probes up
	want := quota(a)
	if want <= 10000 {
		t.Fatalf("A did not probe: quota %v", want)
	}
	waitFor(t, "B to adopt A's probe", func() bool { return quota(b) == want })
	blocked(b) // the same window: B must not probe again
	if got := quota(b); got != want {
		t.Fatalf("B probed again in the window A probed in: quota %v → %v", want, got)
	}
	clock.Advance(61 * time.Second)
	blocked(b) // a window later, B may probe
	if got := quota(b); got <= want {
		t.Fatalf("B did not probe a window after A's probe: quota %v", got)
	}
}

// A model reset by hand on one instance (POST /gate/v1/models/{p}/{m}/reset)
// is reset on the others: what was learned goes, on every instance.
func TestResetShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100000, RPM: 1000}
	cfg.Pace = 0
	var ls []*gate.Ledger
	for range 2 {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned})
		ls = append(ls, l)
	}
	waitSubscribed(t, srv)
	a, b := ls[0], ls[1]
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000, MaxTokens: 1000}
	for range 10 {
		for _, l := range ls {
			tk, _ := l.Submit(clock.Now(), req)
			_ = l.Settle(clock.Now(), tk, gate.Usage{InputTokens: 1000, OutputTokens: 1000})
		}
	}
	a.RateLimited(clock.Now(), "p", "m", time.Second)
	trig := a.BucketStatus(clock.Now(), "p", "m").Trigger
	if trig == 0 {
		t.Fatal("A learned no trigger from its 429")
	}
	waitFor(t, "B to adopt A's trigger", func() bool { return b.BucketStatus(clock.Now(), "p", "m").Trigger == trig })
	if _, ok := b.Reset(clock.Now(), "p", "m"); !ok {
		t.Fatal("B does not know the model")
	}
	waitFor(t, "A to follow B's reset", func() bool {
		st := a.BucketStatus(clock.Now(), "p", "m")
		return st.Trigger == 0 && st.Quota == 100000
	})
}

// With a shared window the request counts are everyone's: the request limit is
// not probed above the configured RPM (each instance would step it on its own),
// and an unnamed 429 is not read as requests from the shares of this
// instance's count against a token reading that holds the others' calls.
func TestSharedWindowKeepsTheRequestAxisPut(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 400_000, RPM: 10, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	s := open(t, srv, FailOpen)
	l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
	if err != nil {
		t.Fatal(err)
	}
	small := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10, MaxTokens: 10}
	// fill admits calls until the request budget holds one back, and releases
	// them (their requests still count in the window).
	fill := func() {
		t.Helper()
		for i := 0; ; i++ {
			tk, w := l.Submit(clock.Now(), small)
			if w != nil {
				w.Cancel(clock.Now())
				return
			}
			if i > 100 {
				t.Fatal("100 calls admitted past a request budget of 10")
			}
			_ = l.Release(clock.Now(), tk)
		}
	}
	t.Run("NoRequestProbe", func(t *testing.T) {
		for range 4 {
			clock.Advance(61 * time.Second)
			fill()
		}
		if got := l.BucketStatus(clock.Now(), "p", "m").RPMBudget; got != 10 {
			t.Fatalf("rpm budget %d after four windows the request budget held calls back, want the configured 10", got)
		}
	})
	t.Run("UnnamedNotReadByShares", func(t *testing.T) {
		clock.Advance(61 * time.Second)
		for range 6 { // 0.6 of the request budget, a sliver of the token one
			tk, w := l.Submit(clock.Now(), small)
			if w != nil {
				t.Fatal("held back under the request budget")
			}
			_ = l.Settle(clock.Now(), tk, gate.Usage{InputTokens: 10, OutputTokens: 10})
		}
		l.RateLimited(clock.Now(), "p", "m", time.Second)
		if st := l.BucketStatus(clock.Now(), "p", "m"); st.Trigger == 0 || st.RPMBudget != 10 {
			t.Fatalf("token trigger %v, rpm budget %d: want the 429 read as tokens", st.Trigger, st.RPMBudget)
		}
	})
}
