package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestAPIErrorShapes(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	cases := []struct {
		name, method, path, body string
		status                   int
		field, msg               string
	}{
		{"UnknownEndpoint", http.MethodGet, "/gate/v1/nothing", "", 404, "", "no endpoint /gate/v1/nothing"},
		{"MethodNotAllowed", http.MethodGet, "/gate/v1/admit", "", 405, "", "method GET is not allowed on /gate/v1/admit (allowed: POST)"},
		{"MethodNotAllowedSession", http.MethodDelete, "/gate/v1/sessions/s1", "", 405, "", "allowed: GET, PUT"},
		{"EmptyBody", http.MethodPost, "/gate/v1/admit", "", 400, "", "body is empty"},
		{"Malformed", http.MethodPost, "/gate/v1/admit", `{"provider":`, 400, "", "malformed JSON"},
		{"Syntax", http.MethodPost, "/gate/v1/admit", `{"provider" "x"}`, 400, "", "malformed JSON at byte"},
		{"NotAnObject", http.MethodPost, "/gate/v1/failure", `[1,2]`, 400, "", "expected a JSON object (got array)"},
		{"Trailing", http.MethodPost, "/gate/v1/success", `{"provider":"alpha"} {}`, 400, "", "unexpected data after the JSON object"},
		{"TooLarge", http.MethodPost, "/gate/v1/failure", `{"provider":"alpha","status":500,"body":"` + strings.Repeat("x", apiMaxBody) + `"}`, 413, "", "exceeds"},
		{"NotUTF8", http.MethodPost, "/gate/v1/admit", "{\"provider\":\"alpha\",\"model\":\"m\xff1\"}", 400, "", "not valid UTF-8 (at byte 30)"},
		{"HeaderType", http.MethodPost, "/gate/v1/failure", `{"provider":"alpha","status":500,"headers":{"Retry-After":20}}`, 400, "headers.Retry-After", "headers.Retry-After must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, h := e.do(c.method, c.path, c.body)
			field, msg := apiErrorOf(t, body)
			if status != c.status || field != c.field || !strings.Contains(msg, c.msg) {
				t.Fatalf("%d field %q message %q", status, field, msg)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			if status == 405 && h.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
}

func TestAPIFailure(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	// The 429's hint makes its retry spend retry.hintRounds (5), not rounds (3).
	t.Run("RateLimitGoesThroughTheGate", func(t *testing.T) {
		f := e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","turn":"t1","step":1,"status":429,"headers":{"retry-after":"20"},"body":"slow down"}`, http.StatusOK)
		if f["class"] != "RATE_LIMIT" || f["action"] != "retry" || apiNum(t, f, "delayMs") != 0 || f["viaGate"] != true ||
			apiNum(t, f, "retryAfterMs") != 20000 || apiNum(t, f, "attempt") != 1 || apiNum(t, f, "budgetLeft") != 4 ||
			f["budget"] != "hint" || !strings.HasPrefix(f["by"].(string), "builtin/") || f["reason"] == "" {
			t.Fatalf("429: %v", f)
		}
		if r := f["route"].(map[string]any); r["provider"] != "alpha" || r["model"] != "small" {
			t.Fatalf("route: %v", f)
		}
		if b := e.bucket("alpha", "small"); b.CooldownMs != 20000 || b.RateLimited != 1 {
			t.Fatalf("the gate did not cool down: %+v", b)
		}
	})
	// A harness reports a 429 without the provider's headers; the wording states
	// the limits, and the gate adopts them as it does the headers' (which a
	// report may carry as well).
	t.Run("LimitsStatedInTheWording", func(t *testing.T) {
		if b := e.bucket("alpha", "m2"); b.Stated != 0 || b.Start != 1_000_000 || b.RPMBudget < 500 {
			t.Fatalf("before: %+v", b)
		}
		tpm := `Rate limit reached for m2 in organization org-x on tokens per min (TPM): Limit 30000, Used 29800, Requested 900. Please try again in 2s.`
		e.post("/gate/v1/failure", `{"provider":"alpha","model":"m2","session":"s5","turn":"t1","status":429,"body":`+strconv.Quote(tpm)+`}`, http.StatusOK)
		if b := e.bucket("alpha", "m2"); b.Stated != 30000 || b.Start != 30000 || b.Quota != 30000 || b.TokenBudget > 30000 || b.RateLimited != 1 {
			t.Fatalf("after a 429 stating 30000 tokens per minute: %+v", b)
		}
		rpm := `Rate limit reached for m2 in organization org-x on requests per min (RPM): Limit 120, Used 120, Requested 1. Please try again in 1s.`
		e.post("/gate/v1/failure", `{"provider":"alpha","model":"m2","session":"s5","turn":"t1","status":429,"body":`+strconv.Quote(rpm)+`}`, http.StatusOK)
		if b := e.bucket("alpha", "m2"); b.RPMBudget <= 0 || b.RPMBudget > 120 || b.Stated != 30000 || b.RateLimited != 2 {
			t.Fatalf("after a 429 stating 120 requests per minute: %+v", b)
		}
		// The headers a harness passes along state it too.
		e.post("/gate/v1/failure", `{"provider":"alpha","model":"m3","session":"s5","turn":"t1","status":429,"headers":{"x-ratelimit-limit-tokens":"24000","retry-after":"1"}}`, http.StatusOK)
		if b := e.bucket("alpha", "m3"); b.Stated != 24000 || b.Start != 24000 {
			t.Fatalf("after a 429 whose headers state 24000 tokens per minute: %+v", b)
		}
	})
	t.Run("ServerErrorOnTheCurve", func(t *testing.T) {
		f := e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s2","turn":"t1","status":500,"body":"oops"}`, http.StatusOK)
		if f["class"] != "SERVER" || f["action"] != "retry" || apiNum(t, f, "delayMs") != 2000 || apiNum(t, f, "attempt") != 1 ||
			apiNum(t, f, "budgetLeft") != 2 || f["retryAfterMs"] != nil {
			t.Fatalf("500: %v", f)
		}
		e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s2","turn":"t1","status":502}`, http.StatusOK)
		f = e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s2","turn":"t1","status":503}`, http.StatusOK)
		if f["action"] != "retry" || apiNum(t, f, "budgetLeft") != 0 || apiNum(t, f, "attempt") != 3 {
			t.Fatalf("third: %v", f)
		}
		f = e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s2","turn":"t1","status":500}`, http.StatusOK)
		if f["action"] != "giveup" || f["exhausted"] != true || apiNum(t, f, "budgetLeft") != 0 {
			t.Fatalf("spent: %v", f)
		}
		// A new turn starts afresh.
		f = e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"s2","turn":"t2","status":500}`, http.StatusOK)
		if f["action"] != "retry" || apiNum(t, f, "attempt") != 1 {
			t.Fatalf("new turn: %v", f)
		}
	})
	t.Run("AuthGivesUp", func(t *testing.T) {
		f := e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"s3","turn":"t1","status":401,"body":"{\"error\":{\"message\":\"invalid api key\"}}"}`, http.StatusOK)
		if f["class"] != "AUTH" || f["action"] != "giveup" || apiNum(t, f, "delayMs") != 0 || apiNum(t, f, "budgetLeft") != 3 {
			t.Fatalf("401: %v", f)
		}
	})
	t.Run("Transport", func(t *testing.T) {
		f := e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"s4","turn":"t1","status":0,"errorKind":"timeout"}`, http.StatusOK)
		if f["class"] != "TIMEOUT" || f["action"] != "retry" {
			t.Fatalf("timeout: %v", f)
		}
	})
	t.Run("QuotaFailsOverThenWaits", func(t *testing.T) {
		quota := `"status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"`
		a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"m1","session":"q1"}`, http.StatusOK)
		from := a["route"].(map[string]any)["provider"].(string)
		f := e.post("/gate/v1/failure", `{"provider":"`+from+`","model":"m1","session":"q1","turn":"t1",`+quota+`,"ticket":"`+a["ticket"].(string)+`"}`, http.StatusOK)
		to := map[string]string{"alpha": "beta", "beta": "alpha"}[from]
		if f["class"] != "QUOTA" || f["action"] != "failover" || f["route"].(map[string]any)["provider"] != to || f["ticketReleased"] != true {
			t.Fatalf("quota: %v", f)
		}
		// The session now runs on the other route, and its next admission goes there.
		if a := e.post("/gate/v1/admit", `{"pool":"medium","session":"q1"}`, http.StatusOK); a["route"].(map[string]any)["provider"] != to {
			t.Fatalf("after failover: %v", a)
		}
		f = e.post("/gate/v1/failure", `{"provider":"`+to+`","model":"m1","session":"q1","turn":"t1",`+quota+`}`, http.StatusOK)
		if f["action"] != "wait" || apiNum(t, f, "delayMs") != 3600000 || f["budgetLeft"] != nil || f["budget"] != "long-term" || apiNum(t, f, "attempt") != 1 {
			t.Fatalf("no route left: %v", f)
		}
		s := e.get("/gate/v1/sessions/q1", http.StatusOK)
		if lt, _ := s["longTerm"].(map[string]any); lt == nil || lt["pending"] != true || apiNum(t, lt, "attempts") != 1 {
			t.Fatalf("session: %v", s)
		}
		if r := e.post("/gate/v1/success", `{"provider":"`+to+`","model":"m1","session":"q1"}`, http.StatusOK); r["recovered"] != true {
			t.Fatalf("success: %v", r)
		}
		if s := e.get("/gate/v1/sessions/q1", http.StatusOK); s["longTerm"] != nil {
			t.Fatalf("still waiting: %v", s)
		}
		if r := e.post("/gate/v1/success", `{"provider":"`+to+`","model":"m1","session":"q1"}`, http.StatusOK); r["recovered"] != false {
			t.Fatalf("second success: %v", r)
		}
	})
	t.Run("Validation", func(t *testing.T) {
		cases := []struct{ body, field, msg string }{
			{`{"status":500}`, "provider", "provider is required"},
			{`{"provider":"alpha","status":700}`, "status", "must be an HTTP status"},
			{`{"provider":"alpha"}`, "status", "give the HTTP status, or errorKind"},
			{`{"provider":"alpha","status":0,"errorKind":"boom"}`, "errorKind", "choices are timeout, reset, refused, dns"},
			{`{"provider":"alpha","status":500,"step":-1}`, "step", "must not be negative"},
			{`{"provider":"alpha","status":500,"verdict":"x"}`, "verdict", `unknown field "verdict"`},
		}
		for _, c := range cases {
			status, body, _ := e.do(http.MethodPost, "/gate/v1/failure", c.body)
			field, msg := apiErrorOf(t, body)
			if status != 400 || field != c.field || !strings.Contains(msg, c.msg) {
				t.Fatalf("%s: %d field %q message %q", c.body, status, field, msg)
			}
		}
		status, body, _ := e.do(http.MethodPost, "/gate/v1/failure", `{"provider":"alpha","status":500,"ticket":"gt_gone"}`)
		if field, _ := apiErrorOf(t, body); status != 404 || field != "ticket" {
			t.Fatalf("unknown ticket: %d %s", status, body)
		}
		for _, c := range []struct{ body, field string }{{`{"model":"m"}`, "provider"}, {`{"provider":"alpha","status":500}`, "status"}} {
			status, body, _ := e.do(http.MethodPost, "/gate/v1/success", c.body)
			if field, _ := apiErrorOf(t, body); status != 400 || field != c.field {
				t.Fatalf("success %s: %d %s", c.body, status, body)
			}
		}
	})
}

func TestAPIStatus(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	st := e.get("/gate/v1/status", http.StatusOK)
	if apiNum(t, st, "openTickets") != 1 || apiNum(t, st, "windowMs") != 60000 || apiNum(t, st, "maxWaitMs") != 120000 || apiNum(t, st, "configVersion") != 0 {
		t.Fatalf("status: %v", st)
	}
	models := st["models"].([]any)
	m := models[0].(map[string]any)
	if len(models) != 1 || m["provider"] != "alpha" || m["model"] != "small" || apiNum(t, m, "windowTokens") != 6000 ||
		apiNum(t, m, "reserved") != 6000 || apiNum(t, m, "inFlight") != 1 || apiNum(t, m, "tokenBudget") != 10000 || apiNum(t, m, "quota") != 10000 {
		t.Fatalf("models: %v", models)
	}
	// A reload shows in the version.
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.get("/gate/v1/status", http.StatusOK); apiNum(t, st, "configVersion") != 1 || apiNum(t, st, "reloads") != 1 {
		t.Fatalf("after reload: %v", st)
	}
}

func TestAPIRoutes(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	rep := e.get("/gate/v1/routes?refresh=true&draw=200", http.StatusOK)
	pools := rep["pools"].([]any)
	p := pools[0].(map[string]any)
	routes := p["routes"].([]any)
	alpha, beta := routes[0].(map[string]any), routes[1].(map[string]any)
	if len(pools) != 1 || p["name"] != "medium" || len(routes) != 2 || alpha["provider"] != "alpha" || beta["provider"] != "beta" {
		t.Fatalf("routes: %v", rep)
	}
	if beta["reading"].(map[string]any)["remaining"] != 5.0 || apiNum(t, beta, "readingAgeMs") != 0 || beta["usable"] != true || alpha["reading"] != nil {
		t.Fatalf("readings: %v %v", alpha, beta)
	}
	draws := rep["draws"].(map[string]any)["medium"].([]any)
	if draws[0].(float64)+draws[1].(float64) != 200 || rep["scoring"].(map[string]any)["medium"] != "default" {
		t.Fatalf("draws %v scoring %v", draws, rep["scoring"])
	}
	// A mark shows after a QUOTA failure.
	e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"}`, http.StatusOK)
	rep = e.get("/gate/v1/routes?pool=medium", http.StatusOK)
	beta = rep["pools"].([]any)[0].(map[string]any)["routes"].([]any)[1].(map[string]any)
	if beta["marked"] != true || beta["usable"] != false || !strings.Contains(beta["why"].(string), "exhausted") {
		t.Fatalf("mark: %v", beta)
	}
	for _, c := range []struct {
		q      string
		status int
		field  string
	}{{"?pool=large", 404, "pool"}, {"?refresh=maybe", 400, "refresh"}, {"?draw=-1", 400, "draw"}, {"?draws=5", 400, "draws"}} {
		status, body, _ := e.do(http.MethodGet, "/gate/v1/routes"+c.q, "")
		if field, _ := apiErrorOf(t, body); status != c.status || field != c.field {
			t.Fatalf("%s: %d %s", c.q, status, body)
		}
	}
}

func TestAPIPick(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	p := e.get("/gate/v1/pools/medium/pick", http.StatusOK)
	if p["pool"] != "medium" || p["drawn"] != true || p["session"] != nil {
		t.Fatalf("pick: %v", p)
	}
	first := e.get("/gate/v1/pools/medium/pick?session=s9", http.StatusOK)["route"]
	for range 5 {
		if got := e.get("/gate/v1/pools/medium/pick?session=s9", http.StatusOK)["route"]; got.(map[string]any)["provider"] != first.(map[string]any)["provider"] {
			t.Fatalf("session moved: %v then %v", first, got)
		}
	}
	status, body, _ := e.do(http.MethodGet, "/gate/v1/pools/large/pick", "")
	if field, msg := apiErrorOf(t, body); status != 404 || field != "pool" || !strings.Contains(msg, "pools: medium") {
		t.Fatalf("unknown pool: %d %s", status, body)
	}
	status, body, _ = e.do(http.MethodGet, "/gate/v1/pools/medium/pick?sesion=x", "")
	if field, _ := apiErrorOf(t, body); status != 400 || field != "sesion" {
		t.Fatalf("unknown parameter: %d %s", status, body)
	}
}

func TestAPISessions(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	s := e.get("/gate/v1/sessions/root", http.StatusOK)
	if s["session"] != "root" || s["enabled"] != true || s["source"] != "default" || s["pool"] != nil || s["poolSource"] != "default" {
		t.Fatalf("fresh: %v", s)
	}
	s = e.call(http.MethodPut, "/gate/v1/sessions/root", `{"switch":"off","pool":"medium"}`, http.StatusOK)
	if s["enabled"] != false || s["source"] != "session" || s["switch"] != "off" || s["pool"] != "medium" || s["poolSource"] != "session" || s["poolSetting"] != "medium" {
		t.Fatalf("set: %v", s)
	}
	// A fork inherits; its own explicit setting wins over the inherited one.
	s = e.call(http.MethodPut, "/gate/v1/sessions/child", `{"parent":"root","switch":"on"}`, http.StatusOK)
	if s["parent"] != "root" || s["enabled"] != true || s["source"] != "session" || s["pool"] != "medium" || s["poolSource"] != "inherited" {
		t.Fatalf("fork: %v", s)
	}
	s = e.call(http.MethodPut, "/gate/v1/sessions/child", `{"pool":"off"}`, http.StatusOK)
	if s["pool"] != nil || s["poolSource"] != "off" {
		t.Fatalf("pool off: %v", s)
	}
	s = e.call(http.MethodPut, "/gate/v1/sessions/root", `{"switch":"default","pool":"default"}`, http.StatusOK)
	if s["enabled"] != true || s["source"] != "default" || s["switch"] != nil {
		t.Fatalf("default: %v", s)
	}
	// The settings are durable: a second server on the same state dir would see
	// them; here the same server reads them back.
	if s := e.get("/gate/v1/sessions/child", http.StatusOK); s["poolSource"] != "off" || s["parent"] != "root" {
		t.Fatalf("read back: %v", s)
	}
	for _, c := range []struct{ body, field, msg string }{
		{`{}`, "switch", "give switch, pool or parent"},
		{`{"switch":"maybe"}`, "switch", "choices: on, off, default"},
		{`{"pool":"large"}`, "pool", `no such pool: "large"`},
		{`{"pool":"Bad Name"}`, "pool", "choices: a pool name, off, default"},
		{`{"parent":"child"}`, "parent", "cannot be forked from itself"},
		{`{"switch":"on","color":"red"}`, "color", `unknown field "color"`},
		{`{"switch":true}`, "switch", "must be a string"},
	} {
		status, body, _ := e.do(http.MethodPut, "/gate/v1/sessions/child", c.body)
		field, msg := apiErrorOf(t, body)
		if status != 400 || field != c.field || !strings.Contains(msg, c.msg) {
			t.Fatalf("%s: %d field %q message %q", c.body, status, field, msg)
		}
	}
	// A refused change changes nothing, even in part.
	status, _, _ := e.do(http.MethodPut, "/gate/v1/sessions/child", `{"switch":"off","pool":"large"}`)
	if s := e.get("/gate/v1/sessions/child", http.StatusOK); status != 400 || s["enabled"] != true {
		t.Fatalf("partial change: %d %v", status, s)
	}
}

// TestAPIOpenAPIDocCoversEndpoints keeps docs/openapi.yaml in step with the mux.
func TestAPIOpenAPIDocCoversEndpoints(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"/gate/v1/admit": {"post"}, "/gate/v1/settle": {"post"}, "/gate/v1/sent": {"post"}, "/gate/v1/failure": {"post"}, "/gate/v1/success": {"post"},
		"/gate/v1/status": {"get"}, "/gate/v1/routes": {"get"}, "/gate/v1/pools/{pool}/pick": {"get"},
		"/gate/v1/sessions/{id}": {"get", "put"}, "/gate/v1/events": {"get"}, "/gate/v1/models/{provider}/{model}/reset": {"post"},
		"/gate/v1/providers/{provider}/unmark": {"post"},
		"/gate/v1/settings":                    {"get"}, "/gate/v1/settings/{section}": {"get", "put"}, "/gate/v1/settings/{section}/reset": {"post"},
		"/gate/v1/stats": {"get"}, "/gate/v1/report": {"get"},
		"/metrics": {"get"}, "/healthz": {"get"}, "/readyz": {"get"},
		"/v1/chat/completions": {"post"}, "/v1/completions": {"post"}, "/v1/embeddings": {"post"}, "/v1/responses": {"post"},
		"/v1/models": {"get"}, "/v1/messages": {"post"}, "/v1/messages/count_tokens": {"post"},
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	for path, methods := range want {
		for _, m := range methods {
			if doc.Paths[path][m] == nil {
				t.Errorf("docs/openapi.yaml lacks %s %s", strings.ToUpper(m), path)
			}
		}
	}
}

// The failure answer's budget is one docs/openapi.yaml names, for each budget
// a failure can spend: a 429 with a wait hint (hint), a 500 (retry), a timeout
// (transport).
func TestAPIFailureBudgetInOpenAPIEnum(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `yaml:"enum"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas["FailureResponse"].Properties["budget"].Enum
	e := newAPIEnv(t, apiTestConfig)
	for _, body := range []string{
		`{"provider":"alpha","model":"m1","session":"s1","turn":"t1","status":429,"headers":{"retry-after":"20"}}`,
		`{"provider":"alpha","model":"m1","session":"s1","turn":"t2","status":500}`,
		`{"provider":"alpha","model":"m1","session":"s1","turn":"t3","status":0,"errorKind":"timeout"}`,
	} {
		a := e.post("/gate/v1/failure", body, http.StatusOK)
		if got, _ := a["budget"].(string); !slices.Contains(enum, got) {
			t.Errorf("%s: budget %q is not in docs/openapi.yaml's enum %v", body, got, enum)
		}
	}
}
