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
