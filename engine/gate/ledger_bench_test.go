package gate

import (
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"sync/atomic"
	"testing"
	"time"
)

func benchGate() Config {
	c := DefaultConfig()
	c.Defaults = ModelLimits{TPM: 1 << 50, RPM: 1 << 40} // never waits: the steady-state fast path
	return c
}

// BenchmarkAdmitSettle: admit + settle that does not wait, one bucket.
// Target ≤ 1 µs and 0 allocs/op.
func BenchmarkAdmitSettle(b *testing.B) { benchAdmitSettle(b, benchGate()) }

// BenchmarkAdmitSettleFixedWindows: admit + settle told the provider counts in
// fixed windows, whose part of the window is kept as the entries change and
// recounted once per edge. Target: as admit + settle.
func BenchmarkAdmitSettleFixedWindows(b *testing.B) {
	c := benchGate()
	c.Defaults.Windows = WindowsFixed
	benchAdmitSettle(b, c)
}

// BenchmarkAdmitSettleAtCompletion: admit + settle in the completion view,
// 32 calls in flight and a round trip measured, so each admission keeps room
// for the calls that may complete unseen (landing.go). Target: as admit +
// settle.
func BenchmarkAdmitSettleAtCompletion(b *testing.B) {
	c := benchGate()
	c.Defaults.CountsAt = CountsAtCompletion
	l, _ := NewLedger(c, engine.NewFakeClock(t0))
	r := Request{Provider: "deepseek", Model: "deepseek-chat", Session: "s", InputTokens: 1000}
	u := Usage{InputTokens: 900, OutputTokens: 200}
	bk := l.bucketFor(r.Provider, r.Model, t0)
	bk.mu.Lock()
	bk.delays[0], bk.nDelay = 20*time.Millisecond, 1
	bk.mu.Unlock()
	var open [32]Ticket
	now := t0
	for i := range open {
		now = now.Add(time.Millisecond)
		open[i], _ = l.Submit(now, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		j := i % len(open)
		l.Settle(now, open[j], u)
		open[j], _ = l.Submit(now, r)
	}
}

func benchAdmitSettle(b *testing.B, c Config) {
	l, _ := NewLedger(c, engine.NewFakeClock(t0))
	r := Request{Provider: "deepseek", Model: "deepseek-chat", Session: "s", InputTokens: 1000}
	u := Usage{InputTokens: 900, OutputTokens: 200}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond) // entries leave the window as they would in steady state
		tk, _ := l.Submit(now, r)
		l.Settle(now, tk, u)
	}
}

// BenchmarkAdmitSentSettle: admit + send + settle, one bucket, 32 calls in
// flight, each sent 16 admissions after its own (Request.Sends, as the proxy
// admits): every send moves its entry to the window's end and reads its level.
// Target: as admit + settle.
func BenchmarkAdmitSentSettle(b *testing.B) {
	l, _ := NewLedger(benchGate(), engine.NewFakeClock(t0))
	r := Request{Provider: "deepseek", Model: "deepseek-chat", Session: "s", InputTokens: 1000, Sends: true}
	u := Usage{InputTokens: 900, OutputTokens: 200}
	var open [32]Ticket
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		k := i % len(open)
		if i >= len(open) {
			l.Settle(now, open[k], u)
		}
		open[k], _ = l.Submit(now, r)
		if i >= 16 {
			l.Sent(now, open[(i-16)%len(open)])
		}
	}
}

// BenchmarkAdmitSettle10kBuckets: the same across 10,000 models. Target ≤ 2 µs.
func BenchmarkAdmitSettle10kBuckets(b *testing.B) {
	l, _ := NewLedger(benchGate(), engine.NewFakeClock(t0))
	reqs := make([]Request, 10_000)
	for i := range reqs {
		reqs[i] = Request{Provider: fmt.Sprint("p", i%50), Model: fmt.Sprint("m", i), Session: "s", InputTokens: 1000}
		tk, _ := l.Submit(t0, reqs[i])
		l.Settle(t0, tk, Usage{InputTokens: 1})
	}
	u := Usage{InputTokens: 900, OutputTokens: 200}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		tk, _ := l.Submit(now, reqs[(i*7919)%len(reqs)])
		l.Settle(now, tk, u)
	}
}

// BenchmarkAdmitSettleParallel: each goroutine on its own bucket; should scale
// with cores (compare -cpu 1,2).
func BenchmarkAdmitSettleParallel(b *testing.B) {
	l, _ := NewLedger(benchGate(), engine.NewFakeClock(t0))
	var id atomic.Int64
	u := Usage{InputTokens: 900, OutputTokens: 200}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := Request{Provider: "p", Model: fmt.Sprint("m", id.Add(1)), Session: "s", InputTokens: 1000}
		now := t0
		for pb.Next() {
			now = now.Add(time.Millisecond)
			tk, _ := l.Submit(now, r)
			l.Settle(now, tk, u)
		}
	})
}

// BenchmarkAdmitSettleAging: admit + settle with 32 calls in flight whose
// reservations follow their age (outputs written at 100 µs a token), one
// bucket, 1–3 ms between admissions: an aging pass every 50 admissions. Each
// call writes what its time in flight allows at the pace it was taught, so ages
// stay in use throughout (checked at the end).
func BenchmarkAdmitSettleAging(b *testing.B) {
	l, _ := NewLedger(benchGate(), engine.NewFakeClock(t0))
	r := Request{Provider: "deepseek", Model: "deepseek-chat", Session: "s", InputTokens: 1000}
	const open = 32
	var ring [open]Ticket
	now := t0
	for i := range 200 { // teach the pace: 100 µs a token
		tk, _ := l.Submit(now, r)
		out := int64(100 + 50*(i%20))
		now = now.Add(time.Duration(out) * 100 * time.Microsecond)
		l.Settle(now, tk, Usage{InputTokens: 900, OutputTokens: out})
	}
	var admitted [open]time.Time
	for i := range ring {
		ring[i], _ = l.Submit(now, r)
		admitted[i] = now
		now = now.Add(time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Duration(1+i%3) * time.Millisecond)
		j := i % open
		out := int64(now.Sub(admitted[j]) / (100 * time.Microsecond)) // on the pace it was taught
		l.Settle(now, ring[j], Usage{InputTokens: 900, OutputTokens: out})
		ring[j], _ = l.Submit(now, r)
		admitted[j] = now
	}
	b.StopTimer()
	bk := l.bucketFor("deepseek", "deepseek-chat", now)
	bk.mu.Lock()
	aging := bk.agingLocked()
	bk.mu.Unlock()
	if !aging {
		b.Fatal("ages were not in use: the benchmark measured the path without them")
	}
}

// BenchmarkAdmitSettleCalibrate: admit + settle + the answer's headers read
// (CalibrateAnswer with the same figures each time, as every answer restates
// them, and the call's send), one bucket, 32 calls in flight: the headers'
// reading of what the provider decides on walks the calls in flight once per
// answer, and once per admission (the window as the call leaves) — at most a
// few hundred times a window each, here every time.
func BenchmarkAdmitSettleCalibrate(b *testing.B) {
	l, _ := NewLedger(benchGate(), engine.NewFakeClock(t0))
	r := Request{Provider: "deepseek", Model: "deepseek-chat", Session: "s", InputTokens: 1000}
	u := Usage{InputTokens: 900, OutputTokens: 200}
	now := t0
	var open [32]Ticket
	var sent [32]time.Time
	for i := range open {
		open[i], _ = l.Submit(now, r)
		sent[i] = now
	}
	cycle := func(i int) {
		now = now.Add(time.Millisecond)
		k := i % len(open)
		l.Settle(now, open[k], u)
		l.CalibrateAnswer(now, sent[k], "deepseek", "deepseek-chat", 1<<40, 1<<40-50000, -1, -1)
		open[k], _ = l.Submit(now, r)
		sent[k] = now
	}
	for i := range 64 {
		cycle(i)
	}
	now = now.Add(2 * l.Config().Window) // past the first window, which is not read
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second) // one answer read each (at most a few hundred a window are)
		cycle(i)
	}
	b.StopTimer()
	bk := l.lockedBucketFor("deepseek", "deepseek-chat", now)
	read, atSend := bk.decides.n, bk.decidesAtSend.n
	bk.mu.Unlock()
	if read == 0 || atSend == 0 {
		b.Fatalf("answers read %d, against the window as sent %d: the benchmark measured an early return", read, atSend)
	}
}
