package main

import (
	"bytes"
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
