package sim

import (
	"testing"
	"time"
)

// A sweep row is its matrix summed: the same runs, 429s and misses.
func TestSweepSumsTheMatrix(t *testing.T) {
	base := DefaultScenario()
	base.Duration = Duration(10 * time.Minute)
	base.Seed = 3
	rows, err := Matrix(base)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := Sweep(base, []uint64{3}, Nudges[:1])
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) != 1 {
		t.Fatalf("%d sweep rows, want 1", len(sw))
	}
	got, tally := sw[0], Tally(rows)
	limited := 0
	for _, r := range rows {
		limited += r.RateLimited
	}
	if got.Runs != tally.Runs || got.Met != tally.Met || got.RateLimited != limited {
		t.Fatalf("sweep row %+v, want runs %d met %d 429s %d", got, tally.Runs, tally.Met, limited)
	}
	for _, m := range tally.Misses {
		if got.Misses[m.Target] != m.Runs {
			t.Fatalf("sweep misses %v, want %v", got.Misses, tally.Misses)
		}
	}
}

// Each nudge moves its setting by 1.4% or less from the scenario's value (or
// the gate's default), and never the base scenario itself.
func TestNudgesMoveOneSettingByAHair(t *testing.T) {
	burst := 0.2
	base := GateSpec{PaceBurst: &burst}
	for _, n := range Nudges[1:] {
		g := base
		n.Apply(&g)
		switch {
		case g.Pace != nil && g.PaceBurst == &burst:
			if d := *g.Pace/3 - 1; d == 0 || d < -0.014 || d > 0.014 {
				t.Errorf("%s: pace %g, want within 1.4%% of the default 3", n.Name, *g.Pace)
			}
		case g.Pace == nil && g.PaceBurst != &burst:
			if d := *g.PaceBurst/burst - 1; d == 0 || d < -0.015 || d > 0.015 {
				t.Errorf("%s: paceBurst %g, want within 1.4%% of the scenario's 0.2", n.Name, *g.PaceBurst)
			}
		default:
			t.Errorf("%s: pace %v, paceBurst %v: want exactly one of them moved", n.Name, g.Pace, g.PaceBurst)
		}
	}
	if burst != 0.2 || base.Pace != nil {
		t.Fatalf("the base scenario changed: paceBurst %g, pace %v", burst, base.Pace)
	}
	if _, err := Sweep(DefaultScenario(), nil, Nudges); err == nil {
		t.Fatal("a sweep of no seeds ran")
	}
}
