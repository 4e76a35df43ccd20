package gate

import (
	"math"
	"testing"
	"time"
)

// spendAt drives a bucket's spend record: res tokens granted every step from
// start for n steps, settled at once at what they reserved.
func spendAt(b *bucket, start time.Time, step time.Duration, n int, res float64) time.Time {
	now := start
	for i := 0; i < n; i++ {
		b.noteSpentLocked(now, res)
		now = now.Add(step)
	}
	return now
}

func TestRateSpentIsTheDrainedReservesRate(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate()) // 60 s window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.rateSpentLocked(t0.Add(30 * time.Second)); ok {
		t.Fatal("a rate before a window of spend")
	}
	// A bucket of 1,000 a window refilled at 1,000 a window, full at t0, spent at
	// 1,500 a window: empty after two windows, when 3,000 were spent.
	now := spendAt(b, t0, time.Second, 120, 25)
	rate, ok := b.rateSpentLocked(now)
	if !ok || math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f (ok %v), want 1,000 a window", rate, ok)
	}
}

func TestRateSpentTakesTheLastFullReserve(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	// Five windows at 600 a window: a bucket refilling 1,000 a window stays full
	// (what it refills past full is lost). Then 1,500 a window for two windows
	// empties it: only the spend since it was last full tells the rate.
	now := spendAt(b, t0, time.Second, 300, 10)
	now = spendAt(b, now, time.Second, 120, 25)
	rate, _ := b.rateSpentLocked(now)
	if math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f, want 1,000: the spend before the reserve was last full counts for nothing", rate)
	}
	// For a sliding window of 1,000 spent at its limit it never reads above it.
	l2, _, _ := newTestLedger(t, testGate())
	b2 := l2.bucketFor("p", "m", t0)
	b2.mu.Lock()
	defer b2.mu.Unlock()
	now = spendAt(b2, t0, time.Second, 600, 1000.0/60)
	if rate, _ := b2.rateSpentLocked(now); rate > 1000 {
		t.Fatalf("rate %.0f above a sliding limit of 1,000 that was never exceeded", rate)
	}
}

func TestRateSpentNeedsTwoWindowsAfterA429(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate()) // 60 s window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	// A window and a half of spend: enough at the first 429, where the start is
	// where any reserve was last full.
	now := spendAt(b, t0, time.Second, 90, 25)
	if _, ok := b.rateSpentLocked(now); !ok {
		t.Fatal("no rate from a window and a half of spend at the first 429")
	}
	// After a 429 — even one whose trigger a view switch has since forgotten —
	// a window spent at its limit reads about half of it over so short a span:
	// no figure until two windows of spend.
	b.learn.last429 = now.Add(-30 * time.Second)
	b.learn.trigger = 0
	if rate, ok := b.rateSpentLocked(now); ok {
		t.Fatalf("rate %.0f from a window and a half of spend after a 429", rate)
	}
	now = spendAt(b, now, time.Second, 30, 25)
	if rate, ok := b.rateSpentLocked(now); !ok || math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f (ok %v) after two windows, want 1,000", rate, ok)
	}
}
