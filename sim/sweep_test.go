package sim

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/testenv"
)

// A sweep row is its seed's matrix summed: the same runs, 429s and misses.
func TestSweepSumsTheMatrix(t *testing.T) {
	testenv.LongSimulation(t)
	base := DefaultScenario()
	base.Duration = Duration(10 * time.Minute)
	seeded := base
	seeded.Seed = 3
	rows, err := Matrix(seeded)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := Sweep(base, []uint64{3}, Nudges[:1:1]) // base.Seed is not 3: the sweep must set it
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) != 1 || sw[0].Seed != 3 {
		t.Fatalf("sweep rows %+v, want one for seed 3", sw)
	}
	got, tally := sw[0], Tally(rows)
	limited, util := 0, 0.0
	for _, r := range rows {
		limited += r.RateLimited
		util += r.Utilization / float64(len(rows))
	}
	if got.Runs != tally.Runs || got.Met != tally.Met || got.RateLimited != limited || got.Utilization != util {
		t.Fatalf("sweep row %+v, want runs %d met %d 429s %d utilization %g", got, tally.Runs, tally.Met, limited, util)
	}
	if len(got.Misses) != len(tally.Misses) {
		t.Fatalf("sweep misses %v, want %v", got.Misses, tally.Misses)
	}
	for _, m := range tally.Misses {
		if got.Misses[m.Target] != m.Runs {
			t.Fatalf("sweep misses %v, want %v", got.Misses, tally.Misses)
		}
	}
}

// Each nudge moves one setting to its exact value, from the scenario's value
// when it sets one (else the gate's default), and never writes through the
// base scenario's pointers.
func TestNudgesMoveOneSettingByAHair(t *testing.T) {
	pace, burst := 2.0, 0.2
	base := GateSpec{Pace: &pace, PaceBurst: &burst}
	// at run time, as the nudges compute them (constants would fold exactly)
	want := []struct{ pace, burst float64 }{
		{pace * 0.99, burst}, {pace * 1.01, burst}, {pace, burst * (69.0 / 70)}, {pace, burst * (70.5 / 70)}, {pace, burst * (71.0 / 70)},
	}
	if len(Nudges) != 1+len(want) || Nudges[0].Apply != nil {
		t.Fatalf("%d nudges, want the settings as set and %d nudges", len(Nudges), len(want))
	}
	for i, n := range Nudges[1:] {
		g := base
		n.Apply(&g)
		if *g.Pace != want[i].pace || *g.PaceBurst != want[i].burst {
			t.Errorf("%s: pace %g, paceBurst %g; want %g, %g", n.Name, *g.Pace, *g.PaceBurst, want[i].pace, want[i].burst)
		}
	}
	if pace != 2 || burst != 0.2 {
		t.Fatalf("the base scenario changed: pace %g, paceBurst %g", pace, burst)
	}
	var unset GateSpec // the gate's defaults, 3 and 0.07
	Nudges[1].Apply(&unset)
	Nudges[5].Apply(&unset)
	defPace, defBurst := 3.0, 0.07
	if *unset.Pace != defPace*0.99 || *unset.PaceBurst != defBurst*(71.0/70) {
		t.Fatalf("from the defaults: pace %g, paceBurst %g; want %g, %g", *unset.Pace, *unset.PaceBurst, defPace*0.99, defBurst*(71.0/70))
	}
	if _, err := Sweep(DefaultScenario(), nil, Nudges); err == nil {
		t.Fatal("a sweep of no seeds ran")
	}
}

// With the pacer off, a nudge of its rate or burst changes nothing: the sweep
// runs the settings once, not six times.
func TestSweepSkipsNudgesThatChangeNothing(t *testing.T) {
	base := DefaultScenario()
	base.Duration = Duration(2 * time.Minute)
	off := 0.0
	base.Gate.Pace = &off
	sw, err := Sweep(base, []uint64{1}, Nudges)
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) != 1 || sw[0].Nudge != Nudges[0].Name {
		t.Fatalf("%d sweep rows (%+v), want one: the settings as set", len(sw), sw)
	}
}
