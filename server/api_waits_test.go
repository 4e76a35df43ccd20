package server

import (
	"context"
	"net/http"
	"testing"
)

// GET /gate/v1/waits lists a call the gate holds, with its reason and expected
// admission, and no longer lists it once it is admitted.
func TestWaitsListsHeldCalls(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	if w := e.get("/gate/v1/waits", http.StatusOK); len(w["held"].([]any)) != 0 || len(w["longTerm"].([]any)) != 0 {
		t.Fatalf("waits on an idle server: %v", w)
	}
	first := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s0","inputTokens":6000,"maxTokens":1}`, http.StatusOK)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := e.async(ctx, http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","priority":"batch","inputTokens":6000,"maxTokens":1}`)
	var h map[string]any
	apiEventually(t, "the second call held", func() bool {
		w := e.get("/gate/v1/waits", http.StatusOK)
		if l := w["held"].([]any); len(l) == 1 {
			h = l[0].(map[string]any)
			return true
		}
		return false
	})
	if h["provider"] != "alpha" || h["model"] != "small" || h["session"] != "s1" || h["priority"] != "batch" || h["reason"] != "tpm" || h["position"] != 1.0 {
		t.Fatalf("held call %v, want alpha/small s1 batch, held for tpm, first in line", h)
	}
	// The window drains a minute after the first call (plus the count guard, at
	// most 2% of it): that is the expected admission. The clock is fake: nothing moved.
	if in := apiNum(t, h, "expectedInMs"); in < 60000 || in > 61200 {
		t.Fatalf("expected in %v ms, want when the 60 s window drains", in)
	}
	if tok := apiNum(t, h, "tokens"); tok < 6000 {
		t.Fatalf("held call reserves %v tokens, want at least its 6000 input", tok)
	}
	e.post("/gate/v1/settle", `{"ticket":"`+first["ticket"].(string)+`","usage":{"inputTokens":10,"outputTokens":1}}`, http.StatusOK)
	if a := apiRecv(t, held); a.status != http.StatusOK || a.body["admitted"] != true {
		t.Fatalf("held admit after the settle: %d %s", a.status, a.raw)
	}
	if w := e.get("/gate/v1/waits", http.StatusOK); len(w["held"].([]any)) != 0 {
		t.Fatalf("waits after the admission: %v", w)
	}
	status, body, _ := e.do(http.MethodGet, "/gate/v1/waits?session=s1", "")
	if field, msg := apiErrorOf(t, body); status != http.StatusBadRequest || field != "session" || msg == "" {
		t.Fatalf("unknown parameter: %d %s", status, body)
	}
}
