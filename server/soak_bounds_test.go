package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
)

// soak skips unless GATECTL_SOAK=1: these run minutes and measure, for
// docs/benchmarks.md, rather than decide anything a shorter test does not.
func soak(t *testing.T) {
	t.Helper()
	if os.Getenv("GATECTL_SOAK") != "1" {
		t.Skip("a soak: set GATECTL_SOAK=1 to run it")
	}
}

func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// TestSoakSessionsAndNames: 60,000 sessions report a failure each (a retry
// budget, turn statistics, a state-file record), and 120,000 invented model
// names are admitted and settled; the heap, /metrics and the tracked state are
// measured before and after the janitor's sweep a day later.
func TestSoakSessionsAndNames(t *testing.T) {
	soak(t)
	e := newAPIEnv(t, strings.NewReplacer("defaults: {tpm: 1000000, rpm: 600}", "defaults: {tpm: 1000000000, rpm: 10000000}").Replace(apiTestConfig))
	h := e.srv.Handler()
	do := func(path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", path, body, rec.Code, rec.Body)
		}
		return rec
	}
	start := heapMB()
	const sessions, names = 60000, 120000
	for i := range sessions {
		do("/gate/v1/failure", fmt.Sprintf(`{"provider":"alpha","model":"m1","session":"sess-%d","turn":"t","status":500,"body":"oops"}`, i))
	}
	for i := range names {
		a := apiJSON(t, do("/gate/v1/admit", fmt.Sprintf(`{"provider":"alpha","model":"name-%d","inputTokens":10,"maxTokens":10,"wait":false}`, i)).Body.Bytes())
		do("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","usage":{"inputTokens":10,"outputTokens":3}}`)
	}
	st, _ := os.Stat(e.srv.store.Path())
	loaded := heapMB()
	metrics := len(e.metricsText(t))
	t.Logf("after %d sessions and %d names: heap %.1f MB (from %.1f), %d buckets, %d turn records, /metrics %d bytes, state file %d bytes",
		sessions, names, loaded, start, e.srv.Ledger().Buckets(), len(e.srv.Planner().Stats().Turns), metrics, st.Size())
	e.clock.Advance(e.srv.Quota().SessionIdle() + janitorEvery)
	e.srv.sweep(e.clock.Now())
	swept := heapMB()
	st, _ = os.Stat(e.srv.store.Path())
	t.Logf("after the sweep a day later: heap %.1f MB, %d buckets, %d turn records, /metrics %d bytes, state file %d bytes (bbolt reuses freed pages; the file does not shrink)",
		swept, e.srv.Ledger().Buckets(), len(e.srv.Planner().Stats().Turns), len(e.metricsText(t)), st.Size())
	if e.srv.Ledger().Buckets() != 0 || len(e.srv.Planner().Stats().Turns) != 0 {
		t.Fatal("the sweep left state behind")
	}
}
