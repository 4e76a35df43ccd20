package pool

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// spentPools: a scores against a capacity, b's source gives no reading.
func spentPools() PoolsConfig {
	return PoolsConfig{
		Pools:    []PoolSpec{{Name: "p", MidSessionSwitch: true, Routes: []engine.Route{rA, rB}}},
		Balances: []BalanceSpec{{Provider: "a", Refresh: time.Minute, Capacity: pf(100)}},
	}
}

// A reading of 0 is spent: it never wins the draw over a route whose balance
// source fails; nor does a scored route that weighs nothing.
func TestSpentReadingDoesNotWinTheDraw(t *testing.T) {
	f := newPoolFixture(t, spentPools(), DefaultSettings())
	f.read("a", 0, 0)
	for _, r := range []float64{0, 0.5, 0.99} {
		if got := f.pick(t, "p", r); got != rB {
			t.Fatalf("remaining 0: drew %v at %v, want %v", got, r, rB)
		}
	}
	if rep, _ := f.q.Report(t.Context(), false, "p"); rep.Pools[0].Routes[0].Usable {
		t.Errorf("report: %+v, want a spent and unusable", rep.Pools[0].Routes[0])
	}
	// Allowance left but a window at 0: a scores 0, so the unscored route goes.
	f.read("a", 50, 0, engine.WindowReading{Name: "daily", Remaining: 0, Capacity: pf(10)})
	if got := f.pick(t, "p", 0); got != rB {
		t.Errorf("score 0: drew %v, want %v", got, rB)
	}
	// With no unscored route to take, a route that weighs nothing still answers.
	f.readings.Set("b", engine.Reading{Remaining: pf(-1), TakenAt: f.clock.Now()})
	if got := f.pick(t, "p", 0); got != rA {
		t.Errorf("nothing else usable: drew %v, want %v", got, rA)
	}
}

// A reading of windows alone lifts a mark; a remaining above 0 does not while a
// weighed window is spent.
func TestWindowsDecideTheMarkWithdrawal(t *testing.T) {
	f := newPoolFixture(t, spentPools(), DefaultSettings())
	f.q.Mark("a", f.clock.Now())
	f.clock.Advance(2 * time.Minute)
	f.readings.Set("a", engine.Reading{TakenAt: f.clock.Now(), Windows: []engine.WindowReading{{Name: "weekly", Remaining: 0, Capacity: pf(35)}}})
	if _, held := f.q.Marked("a"); !held {
		t.Fatal("a spent window lifted the mark")
	}
	f.read("a", 50, 0, engine.WindowReading{Name: "weekly", Remaining: 0, Capacity: pf(35)})
	if _, held := f.q.Marked("a"); !held {
		t.Fatal("a remaining of 50 lifted the mark while the weekly window is spent")
	}
	f.readings.Set("a", engine.Reading{TakenAt: f.clock.Now(), Windows: []engine.WindowReading{{Name: "weekly", Remaining: 12, Capacity: pf(35)}}})
	if _, held := f.q.Marked("a"); held {
		t.Fatal("a window with allowance did not lift the mark")
	}
}
