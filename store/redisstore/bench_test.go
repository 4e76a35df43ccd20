package redisstore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/redistest"
)

// benchLedger is a ledger on a shared Redis store with a budget no benchmark
// reaches, so every call is admitted: what is measured is the decision's cost.
func benchLedger(b *testing.B) *gate.Ledger { return benchLedgerOTPM(b, 0) }

// benchLedgerOTPM is benchLedger with an output limit of otpm (0: none).
func benchLedgerOTPM(b *testing.B, otpm int) *gate.Ledger {
	srv := redistest.Start(b)
	s, err := Open(Options{URL: srv.URL(), KeyPrefix: "bench:", Timeout: time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 1 << 40, RPM: 1 << 30, OTPM: otpm}
	cfg.Pace = 0
	l, err := gate.NewLedger(cfg, engine.SystemClock{}, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
	if err != nil {
		b.Fatal(err)
	}
	s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned})
	return l
}

// BenchmarkRedisAdmitSettle is one call's admission and settlement through
// Redis (two round trips), one at a time: its latency, p50 and p99.
func BenchmarkRedisAdmitSettle(b *testing.B) { benchAdmitSettle(b, benchLedger(b)) }

// BenchmarkRedisAdmitSettleOutput is the same with an output limit: the
// output window is checked and kept in the same scripts.
func BenchmarkRedisAdmitSettleOutput(b *testing.B) { benchAdmitSettle(b, benchLedgerOTPM(b, 1<<30)) }

func benchAdmitSettle(b *testing.B, l *gate.Ledger) {
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 500, MaxTokens: 200}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		t, w := l.Submit(t0, req)
		if w != nil || t.Shared == "" {
			b.Fatal("not admitted through the shared window")
		}
		if err := l.Settle(time.Now(), t, gate.Usage{InputTokens: 500, OutputTokens: 100}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportPercentiles(b, lat)
}

// BenchmarkRedisAdmitSettleParallel is the throughput of one instance: many
// sessions on several models admitting and settling at once.
func BenchmarkRedisAdmitSettleParallel(b *testing.B) {
	l := benchLedger(b)
	var mu sync.Mutex
	var all []time.Duration
	var next int
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		model := []string{"m1", "m2", "m3", "m4"}[next%4]
		next++
		mu.Unlock()
		req := gate.Request{Provider: "p", Model: model, Session: "s", InputTokens: 500, MaxTokens: 200}
		var lat []time.Duration
		for pb.Next() {
			t0 := time.Now()
			t, w := l.Submit(t0, req)
			if w != nil {
				b.Error("waited")
				return
			}
			_ = l.Settle(time.Now(), t, gate.Usage{InputTokens: 500, OutputTokens: 100})
			lat = append(lat, time.Since(t0))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	b.StopTimer()
	reportPercentiles(b, all)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkRedisSpendRound is one retry round spent on a shared budget (one
// Lua script, then the local copy), one at a time: what a retry adds when
// budgets are shared.
func BenchmarkRedisSpendRound(b *testing.B) {
	srv := redistest.Start(b)
	s, err := Open(Options{URL: srv.URL(), KeyPrefix: "bench:", Timeout: time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	bud := s.Budgets(retry.NewMemoryBudgetStore())
	k := retry.BudgetKey{Session: "s", Provider: "p"}
	sp := retry.BudgetSpend{Turn: "t", Counter: "longTerm", Limit: -1, KindLimit: -1}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		sp.Now = t0
		if _, ok, err := bud.Spend(k, sp); !ok || err != nil {
			b.Fatal("not spent", err)
		}
		lat = append(lat, time.Since(t0))
	}
	if s.Errors() != 0 {
		b.Fatalf("%d store errors", s.Errors())
	}
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
