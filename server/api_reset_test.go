package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestAPIModelReset(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	// A 429 at 6,000 tokens in the window: the trigger and the quota drop to 6,000.
	e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":5000,"maxTokens":1000}`, http.StatusOK)
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","status":429,"headers":{"retry-after":"20"}}`, http.StatusOK)
	if b := e.bucket("alpha", "small"); b.Trigger != 6000 || b.Quota != 6000 || b.Start != 10000 {
		t.Fatalf("after the 429: %+v", b)
	}
	events, stop := e.srv.bus.Subscribe(64)
	defer stop()

	t.Run("ClearsWhatWasLearned", func(t *testing.T) {
		r := e.post("/gate/v1/models/alpha/small/reset", "", http.StatusOK)
		st, _ := r["status"].(map[string]any)
		before, _ := r["before"].(map[string]any)
		if r["provider"] != "alpha" || r["model"] != "small" || r["reset"] != true || st == nil || before == nil {
			t.Fatalf("answer: %v", r)
		}
		// What was forgotten: the quota and trigger the 429 set.
		if apiNum(t, before, "trigger") != 6000 || apiNum(t, before, "quota") != 6000 {
			t.Fatalf("status before the reset: %v", before)
		}
		// The cooldown is the provider's instruction: it stays.
		if apiNum(t, st, "trigger") != 0 || apiNum(t, st, "quota") != 10000 || apiNum(t, st, "start") != 10000 ||
			apiNum(t, st, "tokenBudget") != 10000 || apiNum(t, st, "cooldownMs") != 20000 || st["model"] != "small" {
			t.Fatalf("status after reset: %v", st)
		}
		// GET /gate/v1/status shows the same.
		m := e.get("/gate/v1/status", http.StatusOK)["models"].([]any)[0].(map[string]any)
		if apiNum(t, m, "trigger") != 0 || apiNum(t, m, "quota") != 10000 {
			t.Fatalf("GET status: %v", m)
		}
	})
	t.Run("LearnEventOnTheBus", func(t *testing.T) {
		for {
			select {
			case ev := <-events:
				d, _ := ev.Data.(map[string]any)
				if ev.Type == "learn" && d["step"] == "reset" {
					if d["provider"] != "alpha" || d["model"] != "small" || d["from"] != int64(6000) || d["to"] != int64(10000) {
						t.Fatalf("event: %+v", d)
					}
					return
				}
			default:
				t.Fatal("no learn event with step reset")
			}
		}
	})
	t.Run("ModelWithSlashes", func(t *testing.T) {
		e.post("/gate/v1/admit", `{"provider":"beta","model":"deepseek/deepseek-chat","inputTokens":5000,"maxTokens":1000}`, http.StatusOK)
		// 6000 of a 1,000,000 start is suspect on its own; three 429s spread over
		// two seconds are believed.
		for i := 0; i < 3; i++ {
			e.post("/gate/v1/failure", `{"provider":"beta","model":"deepseek/deepseek-chat","status":429}`, http.StatusOK)
			e.clock.Advance(time.Second)
		}
		if b := e.bucket("beta", "deepseek/deepseek-chat"); b.Trigger == 0 {
			t.Fatalf("no trigger: %+v", b)
		}
		for _, path := range []string{"deepseek/deepseek-chat", "deepseek%2Fdeepseek-chat"} {
			r := e.post("/gate/v1/models/beta/"+path+"/reset", "", http.StatusOK)
			if st := r["status"].(map[string]any); r["model"] != "deepseek/deepseek-chat" || apiNum(t, st, "trigger") != 0 || apiNum(t, st, "quota") != 1000000 {
				t.Fatalf("%s: %v", path, r)
			}
		}
		// A model named "reset" is a model like any other.
		status, body, _ := e.do(http.MethodPost, "/gate/v1/models/alpha/reset/reset", "")
		if field, msg := apiErrorOf(t, body); status != 404 || field != "model" || !strings.Contains(msg, "alpha/reset") {
			t.Fatalf("model reset: %d %s", status, body)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		cases := []struct {
			name, method, path string
			status             int
			field, msg         string
		}{
			{"UnknownModel", http.MethodPost, "/gate/v1/models/alpha/never/reset", 404, "model",
				"the gate has no ledger for alpha/never: it was not called since the server started (models: alpha/small, beta/deepseek/deepseek-chat)"},
			{"UnknownProvider", http.MethodPost, "/gate/v1/models/zeta/small/reset", 404, "provider", `no provider "zeta" in the config, and the gate has no ledger for zeta/small`},
			{"EmptyModel", http.MethodPost, "/gate/v1/models/alpha/reset", 400, "model", "the model is empty"},
			{"NoSuffix", http.MethodPost, "/gate/v1/models/alpha/small", 404, "", "did you mean /gate/v1/models/alpha/small/reset?"},
			{"TrailingSlash", http.MethodPost, "/gate/v1/models/alpha/small/reset/", 404, "", "did you mean /gate/v1/models/alpha/small/reset?"},
			{"ControlCharacter", http.MethodPost, "/gate/v1/models/alpha/sm%07all/reset", 400, "model", "must not contain control characters"},
			{"TooLong", http.MethodPost, "/gate/v1/models/" + strings.Repeat("p", 300) + "/small/reset", 400, "provider", "too long"},
			{"Get", http.MethodGet, "/gate/v1/models/alpha/small/reset", 405, "", "allowed: POST"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				status, body, _ := e.do(c.method, c.path, "")
				field, msg := apiErrorOf(t, body)
				if status != c.status || field != c.field || !strings.Contains(msg, c.msg) {
					t.Fatalf("%d field %q message %q", status, field, msg)
				}
			})
		}
	})
}

// POST /gate/v1/providers/{provider}/unmark lifts an exhaustion mark.
func TestAPIUnmark(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.srv.quota.Mark("alpha", e.srv.clock.Now())
	r := e.post("/gate/v1/providers/alpha/unmark", "", http.StatusOK)
	if r["provider"] != "alpha" || r["unmarked"] != true || r["markedAt"] == nil {
		t.Fatalf("answer: %v", r)
	}
	if _, ok := e.srv.quota.Marked("alpha"); ok {
		t.Fatal("alpha is still marked")
	}
	if r := e.post("/gate/v1/providers/alpha/unmark", "", http.StatusOK); r["unmarked"] != false {
		t.Fatalf("unmarking an unmarked provider: %v", r)
	}
	e.post("/gate/v1/providers/nosuch/unmark", "", http.StatusNotFound)
}
