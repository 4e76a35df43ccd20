package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/sim"
)

// The matrix's text ends with its tally against the targets.
func TestWriteMatrixTextTally(t *testing.T) {
	one, zero := 1, 0.0
	rows := []sim.MatrixRow{
		{Model: sim.LimitSlidingArrival, Start: 1, Utilization: 0.95, ConvergedAfterWindows: &one, RateLimitedPerHourAfterConvergence: &zero},
		{Model: sim.LimitTokenBucket, Start: 2, ConvergedAfterWindows: &one, RateLimitedPerHourAfterConvergence: &zero, RateLimited: 5},
		{Model: sim.LimitFixedWindow, Start: 0.5},
	}
	for i := range rows {
		rows[i].Misses = sim.Targets(rows[i])
	}
	var b bytes.Buffer
	writeMatrixText(&b, sim.DefaultScenario(), rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := "1 of 3 runs meet every target; runs missing each: 429s≤3 1, conv≤10 1"
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("last line %q, want %q\n%s", last, want, b.String())
	}
}

func TestParseSeeds(t *testing.T) {
	for list, want := range map[string]string{"3": "[3]", "1-3,7": "[1 2 3 7]", " 5 , 2-2": "[5 2]"} {
		got, err := parseSeeds(list)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("parseSeeds(%q) = %v, %v; want %s", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1-", "-2", "1-100000", "1,,2"} {
		if got, err := parseSeeds(bad); err == nil || !strings.Contains(err.Error(), "1-6,9") && !strings.Contains(err.Error(), "at most") {
			t.Errorf("parseSeeds(%q) = %v, %v; want an error showing the form", bad, got, err)
		}
	}
}

// Over nudges, the sweep's text ends with the mean and range of the runs that
// meet every target and of the 429s.
func TestWriteSweepTextBand(t *testing.T) {
	rows := []sim.SweepRow{
		{Seed: 1, Nudge: "as set", Runs: 48, Met: 20, RateLimited: 100, Misses: map[string]int{"util≥.93": 5}},
		{Seed: 1, Nudge: "pace ×0.99", Runs: 48, Met: 18, RateLimited: 110},
		{Seed: 2, Nudge: "as set", Runs: 48, Met: 22, RateLimited: 90},
		{Seed: 2, Nudge: "pace ×0.99", Runs: 48, Met: 19, RateLimited: 120},
	}
	var b bytes.Buffer
	writeSweepText(&b, sim.DefaultScenario(), []uint64{1, 2}, sim.Nudges[:2], rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := "over the 2 settings: 39.5 runs meet every target (37–42), 210 429s (190–230)"
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("last line %q, want %q\n%s", last, want, b.String())
	}
	if !strings.Contains(b.String(), "as set") || strings.Contains(b.String(), "seed 1") {
		t.Fatalf("want one line per setting over all seeds:\n%s", b.String())
	}
}
