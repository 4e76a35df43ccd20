package main

import (
	"bytes"
	"fmt"
	"regexp"
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
		{Model: sim.LimitSlidingCompletion, Start: 1, Utilization: 0.9, ConvergedAfterWindows: &one, RateLimitedPerHourAfterConvergence: &zero, OracleMisses: []string{"util≥.93"}},
	}
	for i := range rows {
		rows[i].Misses = sim.Targets(rows[i])
	}
	var b bytes.Buffer
	writeMatrixText(&b, sim.DefaultScenario(), rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := "1 of 4 runs meet every target, 1 more miss only targets the oracle missed too; runs missing each (of them, the oracle too): util≥.93 1 (1), 429s≤3 1 (0), conv≤10 1"
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("last line %q, want %q\n%s", last, want, b.String())
	}
}

func TestParseSeeds(t *testing.T) {
	for list, want := range map[string]string{
		"3": "[3]", "1-3,7": "[1 2 3 7]", " 5 , 2 - 2": "[5 2]", "0-999": fmt.Sprint(seq(0, 999)),
		"18446744073709551615": "[18446744073709551615]", "18446744073709551614-18446744073709551615": "[18446744073709551614 18446744073709551615]",
	} {
		got, err := parseSeeds(list)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("parseSeeds(%q) = %v, %v; want %s", list, got, err, want)
		}
	}
	for bad, says := range map[string]string{
		"": "1-6,9", "a": "1-6,9", "1-": "1-6,9", "-2": "1-6,9", "1,,2": "1-6,9",
		"3-1": "runs upward", "0-1000": "at most 1000", "1-600,601-1001": "at most 1000", "1-6,3": "seed 3 is listed twice",
	} {
		if got, err := parseSeeds(bad); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("parseSeeds(%q) = %v, %v; want an error saying %q", bad, got, err, says)
		}
	}
}

func seq(a, b uint64) []uint64 {
	var s []uint64
	for n := a; n <= b; n++ {
		s = append(s, n)
	}
	return s
}

// Over nudges, the sweep prints one line per setting summed over the seeds,
// then the mean and range of the runs that meet every target and of the 429s.
func TestWriteSweepTextBand(t *testing.T) {
	rows := []sim.SweepRow{
		{Seed: 1, Nudge: "as set", Runs: 48, Met: 20, OracleToo: 3, RateLimited: 100, Utilization: 0.90, Misses: map[string]int{"util≥.93": 5}, OracleMisses: map[string]int{"util≥.93": 4}},
		{Seed: 1, Nudge: "pace ×0.99", Runs: 48, Met: 18, OracleToo: 1, RateLimited: 110, Utilization: 0.91},
		{Seed: 2, Nudge: "as set", Runs: 48, Met: 22, OracleToo: 2, RateLimited: 90, Utilization: 0.92, Misses: map[string]int{"util≥.93": 2}, OracleMisses: map[string]int{"util≥.93": 2}},
		{Seed: 2, Nudge: "pace ×0.99", Runs: 48, Met: 19, RateLimited: 120, Utilization: 0.93},
	}
	var b bytes.Buffer
	writeSweepText(&b, sim.DefaultScenario(), []uint64{1, 2}, sim.Nudges[:2], rows)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := "over the 2 settings: 39.5 runs meet every target (37–42), 3.0 more miss only targets the oracle missed too (1–5), 210 429s (190–230)"
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("last line %q, want %q\n%s", last, want, out)
	}
	// as set: 42 met of 96, 5 more as the oracle, 190 429s, utilization 0.91,
	// util≥.93 missed 7 times, 6 of them by the oracle too
	if !regexp.MustCompile(`(?m)^as set +42 +5 +96 +190 +0\.9100 +7 \(6\) `).MatchString(out) || strings.Contains(out, "seed 1") {
		t.Fatalf("want one line per setting summed over the seeds:\n%s", out)
	}
}

// Without nudges, the sweep prints one line per seed and the total.
func TestWriteSweepTextSeeds(t *testing.T) {
	rows := []sim.SweepRow{
		{Seed: 4, Nudge: "as set", Runs: 48, Met: 20, RateLimited: 100, Utilization: 0.90, Misses: map[string]int{"conv≤3": 3}},
		{Seed: 9, Nudge: "as set", Runs: 48, Met: 25, RateLimited: 80, Utilization: 0.92},
	}
	var b bytes.Buffer
	writeSweepText(&b, sim.DefaultScenario(), []uint64{4, 9}, sim.Nudges[:1:1], rows)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if want := "all seeds: 45 of 96 runs meet every target, 0 more miss only targets the oracle missed too; 180 429s"; lines[len(lines)-1] != want {
		t.Fatalf("last line %q, want %q\n%s", lines[len(lines)-1], want, out)
	}
	// conv≤3 has no oracle figure: a count alone after util≥.93, ≤1/h and lost=0
	if !regexp.MustCompile(`(?m)^seed 4 +20 +0 +48 +100 +0\.9000( +\d+ \(\d+\)){3} +3 `).MatchString(out) || !strings.Contains(out, "seed 9") {
		t.Fatalf("want one line per seed:\n%s", out)
	}
}

// With the pacer off the nudges are skipped, and the sweep says so.
func TestWriteSweepTextNothingNudged(t *testing.T) {
	rows := []sim.SweepRow{{Seed: 1, Nudge: "as set", Runs: 48, Met: 9, RateLimited: 85}}
	var b bytes.Buffer
	writeSweepText(&b, sim.DefaultScenario(), []uint64{1}, sim.Nudges, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if want := "the nudges changed nothing (the pacer is off): 9 of 48 runs meet every target; 85 429s"; lines[len(lines)-1] != want {
		t.Fatalf("last line %q, want %q\n%s", lines[len(lines)-1], want, b.String())
	}
	if !strings.HasPrefix(lines[0], "sweep: the matrix for 1 seeds × 1 settings") {
		t.Fatalf("first line %q, want it to count the settings run", lines[0])
	}
}

// With an output limit the report gains an output column and splits the 429s
// three ways (tokens/requests/output); without one it is as it was.
func TestWriteSimTextOutputColumn(t *testing.T) {
	s := sim.DefaultScenario()
	rep := sim.Report{Scenario: s, Modes: map[string]sim.Metrics{
		sim.ModeGate: {Utilization: 0.5, OutputUtilization: 0.75, RateLimited: 3, RateLimitedByTokens: 1, RateLimitedByRequests: 0, RateLimitedByOutput: 2},
	}}
	var b bytes.Buffer
	writeSimText(&b, rep)
	if strings.Contains(b.String(), "OTPM") || strings.Contains(b.String(), "utilization  output") || !strings.Contains(b.String(), "(tok/req) ") {
		t.Fatalf("without an output limit the report speaks of one:\n%s", b.String())
	}
	rep.Scenario.Provider.OTPM, rep.Scenario.Gate.OTPM = 80000, 60000
	b.Reset()
	writeSimText(&b, rep)
	for _, want := range []string{", 80000 OTPM per 1m0s window", "told OTPM 60000", "utilization  output", "(tok/req/out)", "gate  0.500        0.750", " 1/0/2 "} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, b.String())
		}
	}
}
