package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gatectl/gatectl/report"
)

// The report counts a call that waited (with its reason, wait and the budget),
// a 429 and a learner step (a reset), and ?since= narrows it to a recent period.
func TestReportFromServer(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"session":"s2"}`)
	apiEventually(t, "the second call to sleep", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(60300 * time.Millisecond)
	if a := apiRecv(t, ch); a.body["admitted"] != true {
		t.Fatalf("second: %s", a.raw)
	}
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","turn":"t1","status":429,"body":"Rate limit reached for requests per minute. Please try again in 2s."}`, http.StatusOK)

	// a reset is a learner step of its own
	e.post("/gate/v1/models/alpha/small/reset", "", http.StatusOK)

	get := func(q string) report.Report {
		t.Helper()
		code, b, _ := e.do(http.MethodGet, "/gate/v1/report"+q, "")
		if code != http.StatusOK {
			t.Fatalf("GET report%s: %d %s", q, code, b)
		}
		var r report.Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := get("")
	if len(r.Models) != 1 {
		t.Fatalf("models: %+v", r.Models)
	}
	m := r.Models[0]
	if m.Model != "alpha/small" || m.Waited != 1 || m.WaitTotalMs != 60300 || m.WaitMaxMs != 60300 || m.Reasons["tpm"] != 1 ||
		m.Budget == nil || m.Budget.Max != 10000 || m.RateLimited != 1 {
		t.Fatalf("report: %+v", m)
	}
	if len(m.Steps) == 0 || m.Steps[len(m.Steps)-1].Step != "reset" || !m.Steps[len(m.Steps)-1].At.Equal(e.clock.Now()) {
		t.Fatalf("learner steps: %+v", m.Steps)
	}
	// two minutes on, the last minute holds nothing
	e.clock.Advance(2 * time.Minute)
	if r := get("?since=1m"); len(r.Models) != 0 {
		t.Fatalf("since=1m: %+v", r.Models)
	}
	if r := get("?since=10m"); len(r.Models) != 1 || r.Models[0].Waited != 1 {
		t.Fatalf("since=10m: %+v", r.Models)
	}
	for _, bad := range []string{"?since=soon", "?since=-1m", "?from=1m"} {
		if code, b, _ := e.do(http.MethodGet, "/gate/v1/report"+bad, ""); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
}
