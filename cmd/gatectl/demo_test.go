package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The demo, shortened (a 2 s window, 5 s phases): straight at the provider the
// sessions see a 429 storm; through the real gatectl server they see far fewer,
// the gate learns a limit near the hidden one, and the provider serves at a
// sane share of it. Real HTTP on 127.0.0.1, bounded by the phases and drains.
func TestDemoGateBeatsDirect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two 5 s load phases over real HTTP")
	}
	s := defaultDemoSetup()
	s.Sessions, s.Phase, s.Drain = 12, 5*time.Second, 4*time.Second
	s.Limit, s.Window, s.StartTPM = 8_000, 2*time.Second, 24_000
	var out, logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := runDemo(ctx, s, &out, &logs)
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out.String(), logs.String())
	}
	t.Logf("demo output:\n%s", out.String())
	d, g := r.Direct, r.Gate
	if d.Client429 < 10 {
		t.Errorf("direct: %d 429s; the burst should overrun the hidden limit", d.Client429)
	}
	if g.Client429*5 > d.Client429 {
		t.Errorf("through the gate the clients saw %d 429s, direct %d: want at most a fifth", g.Client429, d.Client429)
	}
	if g.OK == 0 || g.Failed > 0 {
		t.Errorf("through the gate: %d ok, %d failed", g.OK, g.Failed)
	}
	if u := g.TokensPerSec() / s.LimitPerSec(); u < 0.4 || u > 1.6 {
		t.Errorf("through the gate the provider served %.0f tokens/s, %.2f of the limit: want 0.4–1.6", g.TokensPerSec(), u)
	}
	if g.Quota < 0.5*float64(s.Limit) || g.Quota > 1.5*float64(s.Limit) {
		t.Errorf("the gate learned %.0f tokens per window; the hidden limit is %d", g.Quota, s.Limit)
	}
	for _, want := range []string{"1. straight to the provider", "2. through gatectl", "verdict", "429s seen by clients", "latency to a 200, p50 / p95"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

func TestDemoFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{{"demo", "--sessions", "0"}, {"demo", "--duration", "10ms"}} {
		_, _, err := runGatectl(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[1])
		}
	}
}

// The verdict tells what happened: a load that never met the limit is not
// told the story of the retries it never made.
func TestDemoVerdictFollowsTheRun(t *testing.T) {
	setup := demoSetup{Sessions: 1, Phase: 3 * time.Second, Limit: 20000, Window: 5 * time.Second}
	var quiet, met bytes.Buffer
	printDemoVerdict(&quiet, demoResult{Setup: setup, Direct: demoPhase{OK: 4, Elapsed: 3 * time.Second}, Gate: demoPhase{OK: 4, Elapsed: 3 * time.Second, Quota: 60000}})
	if out := quiet.String(); !strings.Contains(out, "never reached the hidden limit") || strings.Contains(out, "most retries landed") || !strings.Contains(out, "(1 session,") {
		t.Errorf("a load under the limit:\n%s", out)
	}
	printDemoVerdict(&met, demoResult{Setup: setup, Direct: demoPhase{OK: 4, Failed: 2, Client429: 9, Provider429: 9, Elapsed: 3 * time.Second},
		Gate: demoPhase{OK: 6, Provider429: 1, Elapsed: 3 * time.Second, Quota: 19000}})
	if out := met.String(); !strings.Contains(out, "most retries landed") {
		t.Errorf("a load over the limit:\n%s", out)
	}
}
