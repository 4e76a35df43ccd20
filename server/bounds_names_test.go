package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// The decision API answers only for configured providers: a provider name is
// client input, and each new one would otherwise start a bucket, retry budgets
// and metric series of its own.
func TestAPIRefusesUnconfiguredProvider(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	cases := []struct{ path, body, field string }{
		{"/gate/v1/admit", `{"provider":"nosuch","model":"x","wait":false}`, "provider"},
		{"/gate/v1/admit", `{"route":"nosuch/x","wait":false}`, "route"},
		{"/gate/v1/failure", `{"provider":"nosuch","model":"x","status":429}`, "provider"},
		{"/gate/v1/success", `{"provider":"nosuch","model":"x"}`, "provider"},
	}
	for _, c := range cases {
		status, body, _ := e.do(http.MethodPost, c.path, c.body)
		field, msg := apiErrorOf(t, body)
		if status != http.StatusBadRequest || field != c.field || !strings.Contains(msg, `"nosuch" is not configured`) || !strings.Contains(msg, "alpha, beta") {
			t.Fatalf("%s %s: %d %q %q", c.path, c.body, status, field, msg)
		}
	}
	if n := e.srv.Ledger().Buckets(); n != 0 {
		t.Fatalf("refused calls made %d buckets", n)
	}
	if m := e.metricsText(t); strings.Contains(m, "nosuch") {
		t.Fatalf("refused calls made metric series:\n%s", grepLines(m, "nosuch"))
	}
}

func (e *apiEnv) metricsText(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// 20,000 invented model names under a configured provider: the ledger keeps at
// most gate.maxModels buckets (the rest share alpha/(other)), /metrics stays
// small, and once idle the janitor drops the buckets and their series.
func TestManyModelNamesStayBounded(t *testing.T) {
	e := newAPIEnv(t, strings.NewReplacer("  pace: 0\n", "  pace: 0\n  maxModels: 50\n",
		"defaults: {tpm: 1000000, rpm: 600}", "defaults: {tpm: 100000000, rpm: 1000000}").Replace(apiTestConfig))
	h := e.srv.Handler()
	call := func(path, body string) map[string]any {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", path, body, rec.Code, rec.Body)
		}
		return apiJSON(t, rec.Body.Bytes())
	}
	const names = 20000
	for i := range names {
		a := call("/gate/v1/admit", fmt.Sprintf(`{"provider":"alpha","model":"junk-%d","inputTokens":10,"maxTokens":10,"wait":false}`, i))
		if a["admitted"] != true {
			t.Fatalf("junk-%d: %v", i, a)
		}
		call("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","usage":{"inputTokens":10,"outputTokens":3}}`)
	}
	if n := e.srv.Ledger().Buckets(); n > 51 {
		t.Fatalf("%d names made %d buckets (maxModels 50)", names, n)
	}
	st := e.bucket("alpha", gate.OtherModel)
	if st.WindowRequests != names-50 {
		t.Fatalf("alpha/(other) counted %d calls, want %d", st.WindowRequests, names-50)
	}
	m := e.metricsText(t)
	t.Logf("/metrics after %d names: %d bytes, %d buckets", names, len(m), e.srv.Ledger().Buckets())
	if len(m) > 200<<10 || strings.Contains(m, "junk-19999") {
		t.Fatalf("/metrics is %d bytes after %d names", len(m), names)
	}

	// Idle past the janitor's bound, the buckets and their series go.
	e.clock.Advance(bucketIdle + time.Minute)
	e.srv.sweep(e.clock.Now())
	if n := e.srv.Ledger().Buckets(); n != 0 {
		t.Fatalf("%d buckets left after the sweep", n)
	}
	if m := e.metricsText(t); strings.Contains(m, "junk-") || strings.Contains(m, `model="(other)"`) {
		t.Fatalf("series left after the sweep:\n%s", grepLines(m, "junk-"))
	}
	// A name comes back as a fresh bucket of its own.
	call("/gate/v1/admit", `{"provider":"alpha","model":"junk-7","inputTokens":10,"maxTokens":10,"wait":false}`)
	if st := e.bucket("alpha", "junk-7"); st.InFlight != 1 {
		t.Fatalf("junk-7 after the sweep: %+v", st)
	}
}

func apiJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return m
}
