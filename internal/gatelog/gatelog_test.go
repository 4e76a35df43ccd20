package gatelog

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/hashicorp/go-hclog"
)

func TestLogLines(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info, DisableTime: true})
	clk := engine.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 1000, RPM: 10}
	cfg.OutputReserveTokens = 100
	l, err := gate.NewLedger(cfg, clk, gate.WithEventHook(Hook(logger)))
	if err != nil {
		t.Fatal(err)
	}
	r := gate.Request{Provider: "deepseek", Model: "chat", Session: "s1", InputTokens: 500}
	if _, err := l.Admit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a call that did not wait logged: %q", buf.String())
	}
	l.RateLimited(clk.Now(), "deepseek", "chat", 0)
	_, w := l.Submit(clk.Now(), r)
	w.Cancel(clk.Now())
	out := buf.String()
	for _, want := range []string{
		"rate limited: cooling down", "cooldown=1m0s", "cooldown_from=fallback",
		"learned quota moved", "step=cut", "from=1000", "to=600",
		"holding call", "reason=cooldown", "window_tokens=600", "reservation=600", "trigger=600", "rpm_budget=10",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// A 429 the learner does not take as the limit (read far below a stated one)
// and a reset move nothing worth a from/to: each says what it was instead.
func TestLogLinesSuspectAndReset(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info, DisableTime: true})
	clk := engine.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 1000, RPM: 10, SafetyFactor: 1}
	cfg.OutputReserveTokens = 20
	cfg.Pace, cfg.MarginSigmas = 0, 0
	l, err := gate.NewLedger(cfg, clk, gate.WithEventHook(Hook(logger)))
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	for range 5 {
		tk, w := l.Submit(now, gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 80, MaxTokens: 20})
		if w != nil {
			t.Fatal("a call waited in an empty window")
		}
		if err := l.Settle(now, tk, gate.Usage{InputTokens: 80, OutputTokens: 20}); err != nil {
			t.Fatal(err)
		}
	}
	// 500 in the window, the provider stating 700: not this gate's excess.
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens, StatedTokens: 700})
	l.Reset(now, "p", "m")
	out := buf.String()
	for _, want := range []string{"429 not taken as the limit", "learned quota forgotten (reset)"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "learned quota moved") && (strings.Contains(line, "step=suspect") || strings.Contains(line, "step=reset")) {
			t.Errorf("a suspect 429 or a reset logged as a move: %s", line)
		}
	}
}
