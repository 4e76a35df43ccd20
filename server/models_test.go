package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// aliasConfig has an openai- and an anthropic-kind provider named as the
// embedded default names them, a pool, and (unless own is "") a models: section.
func aliasConfig(openaiURL, anthropicURL, own string) string {
	return fmt.Sprintf(`
providers:
  openai:    {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_OPENAI_KEY}
  anthropic: {kind: anthropic, baseURL: %s, apiKeyEnv: GATECTL_TEST_ANTHROPIC_KEY}
  other:     {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_OPENAI_KEY}
retry: {rounds: 0}
pools:
  cheap:
    routes: [{provider: other, model: small-model}]
%s`, openaiURL, anthropicURL, openaiURL, own)
}

func TestProxyModelNamesClientsUse(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
	oa := newFakeUpstream(t, chatOK(10, 2, 0))
	an := newFakeUpstream(t, jsonAnswer(200, `{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":1}}`))

	t.Run("InheritedFromTheDefault", func(t *testing.T) {
		// No models: section: the embedded default's gpt-* and claude-* apply,
		// because the file names providers openai and anthropic.
		f := newPxFixture(t, aliasConfig(oa.URL, an.URL, ""), true)
		for _, c := range []struct{ path, model, route string }{
			{"/v1/chat/completions", "gpt-4o", "openai/gpt-4o"},
			{"/v1/chat/completions", "o3-mini", "openai/o3-mini"},
			{"/v1/messages", "claude-3-5-sonnet-latest", "anthropic/claude-3-5-sonnet-latest"},
			{"/v1/messages", "claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"},
			{"/v1/chat/completions", "small-model", "other/small-model"}, // a configured route's bare name
		} {
			resp, body := f.call(c.path, chatReq(c.model, "max_tokens", 10))
			if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Route") != c.route {
				t.Errorf("%s: %d route %q, want 200 %s: %s", c.model, resp.StatusCode, resp.Header.Get("X-Gate-Route"), c.route, body)
			}
		}
		if got := oa.call(0).Body["model"]; got != "gpt-4o" {
			t.Errorf("upstream model %v, want the name as sent", got)
		}
		if got := an.call(0).Header.Get("X-Api-Key"); got != "sk-test-anthropic" {
			t.Errorf("anthropic key %q", got)
		}
		// An OpenAI-face request for a Claude name says where it belongs.
		resp, body := f.call("/v1/chat/completions", chatReq("claude-3-5-haiku-latest"))
		if resp.StatusCode != 400 || !strings.Contains(body, `provider \"anthropic\" is anthropic-kind: send its requests to /v1/messages`) {
			t.Errorf("claude on the OpenAI face: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("ResolutionOrder", func(t *testing.T) {
		f := newPxFixture(t, aliasConfig(oa.URL, an.URL, `models:
  gpt-*: other/*
  gpt-4o-mini*: cheap
  gpt-4o: openai/gpt-4o-2024-08-06
  small-model: openai/gpt-4.1-nano
`), true)
		for _, c := range []struct{ model, route string }{
			{"openai/gpt-4o", "openai/gpt-4o"},              // 2. provider/model
			{"gpt-4o", "openai/gpt-4o-2024-08-06"},          // 3. an exact alias before a pattern
			{"small-model", "openai/gpt-4.1-nano"},          // 3. an exact alias before a configured route's bare name
			{"gpt-4o-mini-2024-07-18", "other/small-model"}, // 5. the most specific pattern: to the pool
			{"gpt-4.1", "other/gpt-4.1"},                    // 5. provider/*: the name as sent
			{"cheap", "other/small-model"},                  // 1. a pool
		} {
			resp, body := f.call("/v1/chat/completions", chatReq(c.model))
			if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Route") != c.route {
				t.Errorf("%s: %d route %q, want %s: %s", c.model, resp.StatusCode, resp.Header.Get("X-Gate-Route"), c.route, body)
			}
		}
		// Its own models: section replaces the default's: claude-* is unknown.
		resp, body := f.call("/v1/messages", chatReq("claude-3-5-sonnet-latest", "max_tokens", 10))
		if resp.StatusCode != 400 || !strings.Contains(body, `unknown model \"claude-3-5-sonnet-latest\"`) ||
			!strings.Contains(body, "a name of models: (gpt-*, gpt-4o-mini*, gpt-4o, small-model)") {
			t.Errorf("unknown name: %d %s", resp.StatusCode, body)
		}
	})
}

func TestProxyModelsList(t *testing.T) {
	f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", "http://127.0.0.1:1", `models:
  gpt-*: openai/*
  claude-*: anthropic/*
  sonnet: anthropic/claude-sonnet-4-5
  mini: cheap
`), true)
	get := func(headers ...string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if len(headers) > 0 && strings.HasPrefix(headers[len(headers)-1], "?") {
			req.URL.RawQuery = headers[len(headers)-1][1:]
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp, b
	}

	t.Run("OpenAI", func(t *testing.T) {
		_, b := get()
		var list struct {
			Object string       `json:"object"`
			Data   []modelEntry `json:"data"`
		}
		if err := json.Unmarshal(b, &list); err != nil || list.Object != "list" {
			t.Fatalf("%v %s", err, b)
		}
		got := map[string]modelEntry{}
		var order []string
		for _, e := range list.Data {
			got[e.ID] = e
			order = append(order, e.ID)
		}
		want := []string{"cheap", "other/small-model", "sonnet", "mini", "small-model", "gpt-*", "claude-*", "anthropic/*", "openai/*", "other/*"}
		if strings.Join(order, " ") != strings.Join(want, " ") {
			t.Errorf("ids %v, want %v", order, want)
		}
		if e := got["sonnet"]; e.AliasOf != "anthropic/claude-sonnet-4-5" || e.Kind != "anthropic" || e.OwnedBy != "anthropic" || e.Pattern {
			t.Errorf("sonnet: %+v", e)
		}
		if e := got["mini"]; e.AliasOf != "cheap" || len(e.Routes) != 1 || e.Kind != "openai" {
			t.Errorf("mini: %+v", e)
		}
		if e := got["gpt-*"]; !e.Pattern || e.AliasOf != "openai/*" || e.Object != "model" {
			t.Errorf("gpt-*: %+v", e)
		}
	})

	t.Run("Anthropic", func(t *testing.T) {
		_, b := get("anthropic-version", "2023-06-01")
		var page struct {
			Data    []anthropicModel `json:"data"`
			HasMore bool             `json:"has_more"`
			FirstID *string          `json:"first_id"`
			LastID  *string          `json:"last_id"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range page.Data {
			ids = append(ids, d.ID)
			if d.Type != "model" || d.CreatedAt == "" || d.DisplayName == "" {
				t.Errorf("entry %+v", d)
			}
		}
		// Only what /v1/messages can take.
		if strings.Join(ids, " ") != "sonnet claude-* anthropic/*" || page.HasMore || *page.FirstID != "sonnet" || *page.LastID != "anthropic/*" {
			t.Errorf("anthropic list %s", b)
		}
		_, b = get("anthropic-version", "2023-06-01", "?limit=1&after_id=sonnet")
		if !strings.Contains(string(b), `"id":"claude-*"`) || !strings.Contains(string(b), `"has_more":true`) {
			t.Errorf("second page %s", b)
		}
		resp, b := get("anthropic-version", "2023-06-01", "?limit=0")
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"type":"error"`) || !strings.Contains(string(b), `invalid_request_error`) {
			t.Errorf("bad limit: %d %s", resp.StatusCode, b)
		}
	})
}

func TestProxyModelRetrieveAndNoEndpoint(t *testing.T) {
	f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", "http://127.0.0.1:1", ""), true)
	do := func(method, path string, headers ...string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, f.url+path, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, resp.Header, b.String()
	}
	av := []string{"anthropic-version", "2023-06-01"}

	status, _, body := do("GET", "/v1/models/gpt-4o")
	var e modelEntry
	if err := json.Unmarshal([]byte(body), &e); err != nil || status != 200 || e.ID != "gpt-4o" || e.OwnedBy != "openai" || e.AliasOf != "openai/*" || e.Kind != "openai" {
		t.Errorf("gpt-4o: %d %s", status, body)
	}
	status, _, body = do("GET", "/v1/models/other/small-model")
	if status != 200 || !strings.Contains(body, `"id":"other/small-model"`) {
		t.Errorf("provider/model: %d %s", status, body)
	}
	status, _, body = do("GET", "/v1/models/claude-sonnet-4-5", av...)
	var am anthropicModel
	if err := json.Unmarshal([]byte(body), &am); err != nil || status != 200 || am.Type != "model" || am.ID != "claude-sonnet-4-5" || am.DisplayName != "claude-sonnet-4-5 (alias of anthropic/*)" {
		t.Errorf("claude (anthropic): %d %s", status, body)
	}
	for _, c := range []struct {
		name, method, path string
		headers            []string
		status             int
		anthropic          bool
		has                string
	}{
		{"OpenAINameToAnthropic", "GET", "/v1/models/gpt-4o", av, 404, true, "openai-kind provider: /v1/messages cannot take it"},
		{"Unknown", "GET", "/v1/models/llama-3", nil, 404, false, `unknown model \"llama-3\"`},
		{"UnknownAnthropic", "GET", "/v1/models/llama-3", av, 404, true, `unknown model \"llama-3\"`},
		{"GetMessages", "GET", "/v1/messages", nil, 405, true, "method GET is not allowed on /v1/messages (allowed: POST)"},
		{"Batches", "POST", "/v1/messages/batches", nil, 404, true, "gatectl does not proxy POST /v1/messages/batches"},
		{"Files", "GET", "/v1/files", nil, 404, false, "POST /v1/messages/count_tokens"},
		{"PostModels", "POST", "/v1/models", nil, 405, false, "allowed: GET"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, h, body := do(c.method, c.path, c.headers...)
			if status != c.status || !strings.Contains(body, c.has) || strings.Contains(body, `"type":"error"`) != c.anthropic {
				t.Errorf("%d %s", status, body)
			}
			if status == 405 && h.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
}
