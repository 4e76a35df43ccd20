package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMetricsExposition(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	// One call straight through, one that waits a minute (the first leaves the
	// window as it is let in), a 429 (its window reading of 6000 becomes the
	// trigger, and the quota is cut), a 500, a QUOTA failover, a reload, a
	// balance reading.
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"session":"s2"}`)
	apiEventually(t, "the second call to sleep", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(60300 * time.Millisecond) // the window plus its count guard (0.5%)
	apiRecv(t, ch)
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","status":429,"headers":{"Retry-After":"30"}}`, http.StatusOK)
	e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s1","status":500}`, http.StatusOK)
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"q","status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"}`, http.StatusOK)
	e.post("/gate/v1/success", `{"provider":"beta","model":"m1","session":"q"}`, http.StatusOK)
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.get("/gate/v1/routes?refresh=true", http.StatusOK) // after the reload, whose snapshot has balance sources of its own

	status, body, h := e.do(http.MethodGet, "/metrics", "")
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %v", status, h)
	}
	text := string(body)
	for _, want := range []string{
		`gatectl_gate_admissions_total{model="small",provider="alpha",reason="none"} 1`,
		`gatectl_gate_admissions_total{model="small",provider="alpha",reason="tpm"} 1`,
		`gatectl_gate_wait_seconds_bucket{model="small",provider="alpha",le="120"} 1`,
		`gatectl_gate_wait_seconds_sum{model="small",provider="alpha"} 60.3`,
		`gatectl_upstream_responses_total{provider="alpha",status="429"} 2`,
		`gatectl_upstream_responses_total{provider="beta",status="500"} 1`,
		`gatectl_upstream_responses_total{provider="beta",status="200"} 1`,
		`gatectl_failures_total{class="RATE_LIMIT"} 1`,
		`gatectl_failures_total{class="SERVER"} 1`,
		`gatectl_failures_total{class="QUOTA"} 1`,
		`gatectl_retry_actions_total{action="retry"} 2`,
		`gatectl_retry_actions_total{action="failover"} 1`,
		`gatectl_pool_events_total{kind="failover"} 1`,
		`gatectl_config_reloads_total{result="ok"} 1`,
		`gatectl_proxy_overhead_seconds_count 0`,
		`gatectl_gate_window_tokens{model="small",provider="alpha"} 6000`,
		`gatectl_gate_in_flight_requests{model="small",provider="alpha"} 2`,
		`gatectl_gate_waiting_requests{model="small",provider="alpha"} 0`,
		`gatectl_gate_learned_quota_tokens{model="small",provider="alpha"} 6000`,
		`gatectl_gate_trigger_tokens{model="small",provider="alpha"} 6000`,
		`gatectl_gate_cooldown_seconds{model="small",provider="alpha"} 30`,
		`gatectl_gate_rate_limited_total{model="small",provider="alpha"} 1`,
		`gatectl_balance_remaining{provider="beta"} 5`,
		`gatectl_balance_reading_age_seconds{provider="beta"} 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the exposition", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", grepLines(text, "gatectl_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMetricsHealthAndReady(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	if h := e.get("/healthz", http.StatusOK); h["ok"] != true {
		t.Fatalf("healthz: %v", h)
	}
	r := e.get("/readyz", http.StatusOK)
	if r["ready"] != true || r["configVersion"] != 0.0 || r["reloads"] != 0.0 {
		t.Fatalf("readyz: %v", r)
	}
	e.srv.ready.Store(false) // what Serve does when a shutdown begins
	if r := e.get("/readyz", http.StatusServiceUnavailable); r["ready"] != false {
		t.Fatalf("readyz while shutting down: %v", r)
	}
}

// The counters whose labels are known ahead are on /metrics at 0 from the
// start: one that appears at 1 hides its first step from rate() and increase().
func TestMetricsKnownSeriesStartAtZero(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	_, body, _ := e.do(http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`gatectl_config_reloads_total{result="ok"} 0`, `gatectl_config_reloads_total{result="failed"} 0`,
		`gatectl_failures_total{class="QUOTA"} 0`, `gatectl_retry_actions_total{action="give_up"} 0`,
		`gatectl_pool_events_total{kind="entered"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("a fresh /metrics lacks %s", want)
		}
	}
}
