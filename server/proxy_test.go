package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// routingConfig: two openai-kind providers with keys, an anthropic-kind one, a
// pool over the first two, and a model only gate.models names.
func routingConfig(a, b, anth string) string {
	return fmt.Sprintf(`
providers:
  pa:   {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PA}
  pb:   {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PB}
  anth: {kind: anthropic, baseURL: %s}
gate:
  models:
    pb/solo-model: {tpm: 500000}
pools:
  medium:
    routes:
      - {provider: pa, model: model-a, reasoningEffort: high}
      - {provider: pb, model: model-b}
`, a, b, anth)
}

func TestProxyRouting(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-test-pa")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-test-pb")
	ua := newFakeUpstream(t, chatOK(10, 2, 0))
	ub := newFakeUpstream(t, chatOK(10, 2, 0))
	uc := newFakeUpstream(t, jsonAnswer(200, `{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":1}}`))
	f := newPxFixture(t, routingConfig(ua.URL, ub.URL, uc.URL), true)

	cases := []struct {
		name, path, model string
		wantStatus        int
		wantRoute         []string // one of
		wantUpstreamModel string
		wantEffort        string
		wantInBody        []string // for a 400
		wantUpstreamPath  string
	}{
		{name: "provider/model", path: "/v1/chat/completions", model: "pa/gpt-x", wantStatus: 200, wantRoute: []string{"pa/gpt-x"}, wantUpstreamModel: "gpt-x", wantUpstreamPath: "/v1/chat/completions"},
		{name: "bare model of one route", path: "/v1/chat/completions", model: "solo-model", wantStatus: 200, wantRoute: []string{"pb/solo-model"}, wantUpstreamModel: "solo-model"},
		{name: "bare model of a pool route", path: "/v1/chat/completions", model: "model-b", wantStatus: 200, wantRoute: []string{"pb/model-b"}, wantUpstreamModel: "model-b"},
		{name: "pool draw", path: "/v1/chat/completions", model: "medium", wantStatus: 200, wantRoute: []string{"pa/model-a@high", "pb/model-b"}},
		{name: "anthropic messages", path: "/v1/messages", model: "anth/claude-x", wantStatus: 200, wantRoute: []string{"anth/claude-x"}, wantUpstreamModel: "claude-x", wantUpstreamPath: "/v1/messages"},
		{name: "unknown model lists what exists", path: "/v1/chat/completions", model: "nope", wantStatus: 400,
			wantInBody: []string{`"field":"model"`, "nope", "medium", "pa/model-a", "pb/solo-model", "anth, pa, pb"}},
		{name: "unknown provider prefix is a bare model", path: "/v1/chat/completions", model: "zz/model", wantStatus: 400, wantInBody: []string{"zz/model"}},
		{name: "anthropic provider on an openai endpoint", path: "/v1/chat/completions", model: "anth/claude-x", wantStatus: 400, wantInBody: []string{"anthropic-kind", "/v1/messages"}},
		{name: "openai provider on /v1/messages", path: "/v1/messages", model: "pa/gpt-x", wantStatus: 400, wantInBody: []string{"openai-kind", "/v1/chat/completions"}},
		{name: "openai pool on /v1/messages", path: "/v1/messages", model: "medium", wantStatus: 400, wantInBody: []string{"pool", "openai-kind"}},
		{name: "no model", path: "/v1/chat/completions", model: "", wantStatus: 400, wantInBody: []string{"no model"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			na, nb, nc := ua.n(), ub.n(), uc.n()
			resp, body := f.call(tc.path, chatReq(tc.model, "max_tokens", 50))
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			for _, s := range tc.wantInBody {
				if !strings.Contains(body, s) {
					t.Errorf("body %s lacks %q", body, s)
				}
			}
			if tc.wantStatus != 200 {
				if ua.n() != na || ub.n() != nb || uc.n() != nc {
					t.Fatal("a refused request reached an upstream")
				}
				return
			}
			route := resp.Header.Get("X-Gate-Route")
			ok := false
			for _, r := range tc.wantRoute {
				ok = ok || r == route
			}
			if !ok {
				t.Fatalf("X-Gate-Route %q, want one of %v", route, tc.wantRoute)
			}
			if resp.Header.Get("X-Gate-Waited-Ms") != "0" {
				t.Errorf("X-Gate-Waited-Ms %q", resp.Header.Get("X-Gate-Waited-Ms"))
			}
			var u *fakeUpstream
			switch {
			case ua.n() > na:
				u = ua
			case ub.n() > nb:
				u = ub
			default:
				u = uc
			}
			c := u.call(u.n() - 1)
			want := tc.wantUpstreamModel
			if want == "" {
				want = strings.TrimSuffix(route[strings.IndexByte(route, '/')+1:], "@high")
			}
			if c.Body["model"] != want {
				t.Errorf("upstream model %v, want %s", c.Body["model"], want)
			}
			if tc.wantUpstreamPath != "" && c.Path != tc.wantUpstreamPath {
				t.Errorf("upstream path %s, want %s", c.Path, tc.wantUpstreamPath)
			}
			if route == "pa/model-a@high" && c.Body["reasoning_effort"] != "high" {
				t.Errorf("reasoning_effort %v, want high", c.Body["reasoning_effort"])
			}
			if route != "pa/model-a@high" && c.Body["reasoning_effort"] != nil {
				t.Errorf("reasoning_effort %v set for a route without one", c.Body["reasoning_effort"])
			}
		})
	}
}

func TestProxyModels(t *testing.T) {
	f := newPxFixture(t, routingConfig("http://127.0.0.1:1", "http://127.0.0.1:1", "http://127.0.0.1:1"), true)
	resp, err := http.Get(f.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string   `json:"id"`
			Routes []string `json:"routes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for _, d := range list.Data {
		ids[d.ID] = d.Routes
	}
	for _, want := range []string{"medium", "pa/model-a", "model-a", "pb/model-b", "model-b", "pb/solo-model", "solo-model"} {
		if _, ok := ids[want]; !ok {
			t.Errorf("/v1/models lacks %q: %v", want, ids)
		}
	}
	if got := ids["medium"]; len(got) != 2 || got[0] != "pa/model-a@high" {
		t.Errorf("pool routes %v", got)
	}
	if list.Object != "list" {
		t.Errorf("object %q", list.Object)
	}
}

func TestProxyBadRequests(t *testing.T) {
	f := newPxFixture(t, routingConfig("http://127.0.0.1:1", "http://127.0.0.1:1", "http://127.0.0.1:1"), true)
	cases := []struct {
		name    string
		body    any
		headers []string
		field   string
	}{
		{"not an object", []int{1}, nil, ""},
		{"model not a string", map[string]any{"model": 3}, nil, "model"},
		{"bad max_tokens", map[string]any{"model": "pa/x", "max_tokens": "many"}, nil, "max_tokens"},
		{"bad priority", chatReq("pa/x"), []string{"X-Gate-Priority", "urgent"}, "X-Gate-Priority"},
		{"session too long", chatReq("pa/x"), []string{"X-Gate-Session", strings.Repeat("s", 257)}, "X-Gate-Session"},
		{"turn too long", chatReq("pa/x"), []string{"X-Gate-Turn", strings.Repeat("t", 257)}, "X-Gate-Turn"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.call("/v1/chat/completions", tc.body, tc.headers...)
			if resp.StatusCode != 400 || !strings.Contains(body, `"field":"`+tc.field+`"`) && tc.field != "" {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
		})
	}
}

// TestProxySettlesUsage: a non-streaming answer's usage replaces the
// reservation; cached prompt tokens count once (OpenAI), or not at all
// (Anthropic's cache reads).
func TestProxySettlesUsage(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-test-pa")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-test-pb")
	ua := newFakeUpstream(t, chatOK(100, 20, 40))
	uc := newFakeUpstream(t, jsonAnswer(200, `{"type":"message","content":[],"usage":{"input_tokens":30,"cache_read_input_tokens":50,"cache_creation_input_tokens":7,"output_tokens":11}}`))
	f := newPxFixture(t, routingConfig(ua.URL, ua.URL, uc.URL), true)
	if resp, body := f.call("/v1/chat/completions", chatReq("pa/usage-model", "max_tokens", 4000)); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	st := f.status("pa", "usage-model")
	if st.WindowTokens != 120 || st.InFlight != 0 || st.Reserved != 0 {
		t.Fatalf("openai: window %d in flight %d reserved %d; want 120 0 0", st.WindowTokens, st.InFlight, st.Reserved)
	}
	if resp, body := f.call("/v1/messages", chatReq("anth/claude-u", "max_tokens", 4000)); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if st := f.status("anth", "claude-u"); st.WindowTokens != 48 || st.InFlight != 0 {
		t.Fatalf("anthropic: window %d in flight %d; want 48 0 (the 50 cache reads not counted)", st.WindowTokens, st.InFlight)
	}
}

// TestProxyCalibrates: the provider's stated limits set the model's budget.
func TestProxyCalibrates(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-test-pa")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-test-pb")
	ok := chatOK(10, 1, 0)
	ua := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ratelimit-limit-tokens", "40000")
		w.Header().Set("x-ratelimit-remaining-tokens", "39000")
		w.Header().Set("x-ratelimit-limit-requests", "100")
		w.Header().Set("x-ratelimit-remaining-requests", "99")
		w.Header().Set("x-ratelimit-reset-requests", "600ms")
		ok(w, r)
	})
	uc := newFakeUpstream(t, jsonAnswer(200, `{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":1}}`,
		"anthropic-ratelimit-tokens-limit", "80000", "anthropic-ratelimit-tokens-remaining", "79000",
		"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49"))
	f := newPxFixture(t, routingConfig(ua.URL, ua.URL, uc.URL), true)
	before := f.status("pa", "cal")
	if before.Quota != 1_000_000 {
		t.Fatalf("setup: quota %v", before.Quota)
	}
	f.call("/v1/chat/completions", chatReq("pa/cal"))
	if st := f.status("pa", "cal"); st.Quota != 40000 || st.TokenBudget != 39600 || st.RPMBudget != 99 {
		t.Fatalf("openai headers: quota %v budget %d rpm %d; want 40000 39600 99 (the derived 1%% margin)", st.Quota, st.TokenBudget, st.RPMBudget)
	}
	f.call("/v1/messages", chatReq("anth/cal"))
	if st := f.status("anth", "cal"); st.Quota != 80000 || st.RPMBudget != 50 {
		t.Fatalf("anthropic headers: quota %v rpm %d; want 80000 50 (a stated request limit's 1%% is kept in whole requests: none under a hundred)", st.Quota, st.RPMBudget)
	}
}

// TestProxyReadsAWholeAnswersLimitsOnceSettled: a provider that counts a call
// as it completes and states its window as it writes the whole answer, the
// call counted, states what the gate's completion view holds to the token —
// once the proxy has settled the call before it reads the headers. Read as
// the headers come, every answer lay its own call's size over that view and
// the gate kept counting on arrival (engine/gate/headersview.go, exact).
func TestProxyReadsAWholeAnswersLimitsOnceSettled(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-test-pa")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-test-pb")
	const (
		limit     = 9000 // a minute, the gate's window: one call (120) is 1.3% of the budget
		callCost  = 120  // chatOK(100, 20, 0)
		inFlight  = 10
		answers   = 35 // the first ten's sends were before the first answer, and are not read
		perAnswer = time.Second
	)
	var (
		mu        sync.Mutex
		completed int
	)
	arrived := make(chan chan struct{}, inFlight+1)
	stop := make(chan struct{}) // the test is over: nothing waits any more
	ok := chatOK(100, 20, 0)
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		release := make(chan struct{})
		select {
		case arrived <- release:
			select {
			case <-release:
			case <-stop:
			}
		case <-stop:
		}
		mu.Lock()
		completed += callCost
		remaining := limit - completed
		mu.Unlock()
		w.Header().Set("x-ratelimit-limit-tokens", strconv.Itoa(limit))
		w.Header().Set("x-ratelimit-remaining-tokens", strconv.Itoa(remaining))
		ok(w, r)
	})
	f := newPxFixture(t, routingConfig(up.URL, up.URL, up.URL), true)
	codes := make(chan int, answers+inFlight)
	body, err := json.Marshal(chatReq("pa/exact", "max_tokens", 40, "messages", []any{map[string]any{"role": "user", "content": strings.Repeat("word ", 80)}}))
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		go func() { // no t.Fatal here: the status (0 for a failed call) goes to the test
			resp, err := http.Post(f.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	var held []chan struct{}
	t.Cleanup(func() { close(stop) }) // before the servers close
	arrive := func(i int) {
		select {
		case h := <-arrived:
			held = append(held, h)
		case <-time.After(10 * time.Second): // a hang's bound, not a wait for time to pass
			t.Fatalf("call %d never reached the provider: %+v\n%s", i, f.status("pa", "exact"), f.logs.String())
		}
	}
	for i := range inFlight {
		send()
		arrive(i)
	}
	for i := range answers {
		f.clock.Advance(perAnswer) // the gate reads a few hundred answers a window, not more
		close(held[0])
		held = held[1:]
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("answer %d: status %d", i, code)
		}
		send()
		arrive(inFlight + i)
	}
	if st := f.status("pa", "exact"); st.CountsAt != "completion" || st.Quota != limit {
		t.Fatalf("after %d answers stating the completed calls to the token: view %q, quota %v; want completion, %d", answers, st.CountsAt, st.Quota, limit)
	}
}
