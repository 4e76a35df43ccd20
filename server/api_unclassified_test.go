package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

func TestAPIUnclassified(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	list := func() APIUnclassified {
		t.Helper()
		code, b, _ := e.do(http.MethodGet, "/gate/v1/failures/unclassified", "")
		if code != http.StatusOK {
			t.Fatalf("GET: %d %s", code, b)
		}
		var out APIUnclassified
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if l := list(); len(l.Failures) != 0 || l.Total != 0 || l.Capacity != unclassifiedKeep {
		t.Fatalf("empty list: %+v", l)
	}

	// A failure the rules understand is not kept.
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","status":429,"body":"Rate limit reached for requests per minute. Please try again in 2s."}`, http.StatusOK)
	// A bare 429 and a 500 rest on the status alone; the key in the header and
	// in the body must not be kept.
	key := "sk-proj-" + strings.Repeat("A1b2", 10)
	f := e.post("/gate/v1/failure", fmt.Sprintf(`{"provider":"alpha","model":"small","status":429,"headers":{"Authorization":"Bearer %s","x-api-key":"%s","x-request-id":"r1"},"body":"upstream said no (key %s)"}`, key, key, key), http.StatusOK)
	if f["by"] != "builtin/status-429" {
		t.Fatalf("a bare 429 is decided by the status: %v", f)
	}
	e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","status":500,"body":"`+strings.Repeat("x", 3000)+`"}`, http.StatusOK)
	// The proxy classifies through the same snapshot chain.
	e.srv.Snapshot().Chain.Classify(context.Background(), &engine.Failure{Status: 418, Provider: "alpha", Model: "m1", Body: "teapot"})

	l := list()
	if len(l.Failures) != 3 || l.Total != 3 {
		t.Fatalf("want 3 kept: %+v", l)
	}
	newest, second, oldest := l.Failures[0], l.Failures[1], l.Failures[2]
	if newest.Status != 418 || newest.By != "builtin/status-4xx" || newest.Class != engine.ClassInvalidRequest {
		t.Errorf("newest first: %+v", newest)
	}
	if second.Status != 500 || !second.Truncated || len(second.Excerpt) != unclassifiedExcerpt || second.Provider != "beta" {
		t.Errorf("a long body is cut to 1 KiB: status %d truncated %v len %d", second.Status, second.Truncated, len(second.Excerpt))
	}
	if oldest.By != "builtin/status-429" || oldest.Model != "small" || oldest.Time.IsZero() {
		t.Errorf("the bare 429: %+v", oldest)
	}
	raw, _ := json.Marshal(l)
	if strings.Contains(string(raw), "A1b2A1b2") {
		t.Errorf("a key leaked: %s", raw)
	}
	if oldest.Headers["Authorization"] != redacted || oldest.Headers["x-api-key"] != redacted || oldest.Headers["x-request-id"] != "r1" {
		t.Errorf("headers: %v", oldest.Headers)
	}
	if !strings.Contains(oldest.Excerpt, "upstream said no") || !strings.Contains(oldest.Excerpt, "sk-"+redacted) {
		t.Errorf("excerpt: %q", oldest.Excerpt)
	}

	// A reload keeps recording (the hook is on the manager, not one snapshot).
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","status":0,"errorKind":"reset"}`, http.StatusOK) // TRANSPORT by a rule: not kept
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","status":502}`, http.StatusOK)
	if l := list(); l.Total != 4 || l.Failures[0].Status != 502 {
		t.Errorf("after a reload: %+v", l)
	}
}

func TestUnclassifiedRingIsBounded(t *testing.T) {
	l := newUnclassifiedLog(engine.NewFakeClock(apiT0), 3)
	for i := range 7 {
		l.observe(&engine.Failure{Status: 500 + i}, engine.Verdict{Class: engine.ClassServer, By: "builtin/status-5xx"})
	}
	l.observe(&engine.Failure{Status: 429}, engine.Verdict{Class: engine.ClassRateLimit, By: "builtin/rate-limit"})
	l.observe(&engine.Failure{Status: 400}, engine.Verdict{Class: engine.ClassUnknown, By: "my-plugin/odd"}) // UNKNOWN is kept
	got := l.list()
	var statuses []int
	for _, f := range got.Failures {
		statuses = append(statuses, f.Status)
	}
	if fmt.Sprint(statuses) != "[400 506 505]" || got.Total != 8 {
		t.Errorf("kept %v of %d, want [400 506 505] of 8", statuses, got.Total)
	}
}

func TestRedactBody(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"error":"Incorrect API key provided: sk-abc123def456ghi"}`, `{"error":"Incorrect API key provided: sk-[redacted]"}`},
		{`Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig`, `Authorization: Bearer [redacted]`},
		{`key=AIzaSyA1234567890abcdefghijklmnop`, `key=[redacted]`},
		{`{"api_key": "abcdef123456"}`, `{"api_key": "[redacted]"}`},
		{`please retry after 20 seconds`, `please retry after 20 seconds`},
	} {
		if got, _ := redactBody(tc.in, 1024); got != tc.want {
			t.Errorf("redactBody(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, cut := redactBody(strings.Repeat("é", 600), 1023); !cut || len(got) != 1022 {
		t.Errorf("cut mid-character: len %d cut %v", len(got), cut)
	}
}
