package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
)

// Retries the proxy made show in GET /gate/v1/stats, lifetime and for the
// session's turn, and in the Prometheus counters.
func TestStatsAfterProxiedRetries(t *testing.T) {
	up := newFakeUpstream(t,
		jsonAnswer(500, `{"error":{"message":"internal error"}}`),
		jsonAnswer(200, `{"error":{"message":"The server is overloaded, please try again later","type":"server_error"}}`),
		chatOK(3, 1, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3\n  initialDelay: 2s\n  jitter: 0"), true)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/se"), "X-Gate-Session", "s1", "X-Gate-Turn", "t1")
	waitFor(t, "the first retry delay", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
	f.clock.Advance(2 * time.Second)
	waitFor(t, "the second retry delay", func() bool { return up.n() == 2 && f.clock.Timers() == 1 })
	f.clock.Advance(4 * time.Second)
	if r := <-res; r.resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", r.resp.StatusCode, r.body)
	}

	get := func(path string) APIStats {
		t.Helper()
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st APIStats
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return st
	}
	st := get("/gate/v1/stats")
	lt := st.Lifetime
	if lt.ByClass["SERVER"] != 1 || lt.ByClass["OVERLOADED"] != 1 {
		t.Fatalf("by class: %v", lt.ByClass)
	}
	if lt.Retries != 2 || lt.Waited != 6*time.Second || lt.ByProvider["pa"] != 2 || lt.HintlessCapacity != 2 || lt.GaveUp != 0 ||
		lt.Last == nil || lt.Last.Action.Kind != retry.ActionRetry || lt.Last.Action.Delay != 4*time.Second {
		t.Fatalf("lifetime: %+v", lt)
	}
	if st.TurnsTotal != 1 || len(st.Turns) != 1 || st.Turns[0].Session != "s1" || st.Turns[0].Turn != "t1" || st.Turns[0].Stats.Retries != 2 {
		t.Fatalf("turns: %+v", st.Turns)
	}
	one := get("/gate/v1/stats?session=s1")
	if one.Turn == nil || one.Turn.Stats.Retries != 2 || one.Turn.Stats.Waited != 6*time.Second {
		t.Fatalf("?session=s1: %+v", one)
	}
	if none := get("/gate/v1/stats?session=nobody"); none.Turn != nil || none.Session != "nobody" {
		t.Fatalf("?session=nobody: %+v", none)
	}
	if resp, err := http.Get(f.url + "/gate/v1/stats?sesion=s1"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a misspelt parameter: %v %v", resp, err)
	}

	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gatectl_retry_retries_total{provider="pa"} 2`,
		`gatectl_retry_waited_seconds_total 6`,
		`gatectl_retry_hintless_waits_total 2`,
		`gatectl_retry_give_ups_total 0`,
		`gatectl_retry_retries_by_class_total{class="SERVER"} 1`,
		`gatectl_retry_retries_by_class_total{class="OVERLOADED"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(b), `session="s1"`) {
		t.Error("a session is a metric label")
	}
}
