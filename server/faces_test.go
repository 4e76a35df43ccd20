package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// anthropicErrorOf decodes an Anthropic-shaped error body, failing t when the
// body has any other shape.
func anthropicErrorOf(t *testing.T, body string) anthropicError {
	t.Helper()
	var e anthropicError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an Anthropic error (%v): %s", err, body)
	}
	return e
}

func TestAnthropicFaceErrors(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
	msg := func(model string) map[string]any { return chatReq(model, "max_tokens", 16) }

	t.Run("GatectlsOwn", func(t *testing.T) {
		f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", "http://127.0.0.1:1", ""), true)
		for _, c := range []struct {
			name   string
			body   any
			status int
			typ    string
			has    string
		}{
			{"NotJSON", "not an object", 400, "invalid_request_error", "the body must be a JSON object"},
			{"UnknownModel", msg("llama-3"), 400, "invalid_request_error", `unknown model "llama-3"`},
			{"OpenAIKindRoute", msg("gpt-4o"), 400, "invalid_request_error", `provider "openai" is openai-kind`},
			{"BadMaxTokens", chatReq("claude-3-5-haiku-latest", "max_tokens", -1), 400, "invalid_request_error", "max_tokens must be a number from 0 to 2147483647 (got -1)"},
		} {
			t.Run(c.name, func(t *testing.T) {
				resp, body := f.call("/v1/messages", c.body)
				e := anthropicErrorOf(t, body)
				if resp.StatusCode != c.status || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.has) {
					t.Errorf("%d %s, want %d %s containing %q", resp.StatusCode, body, c.status, c.typ, c.has)
				}
			})
		}
		// The OpenAI face keeps OpenAI's shape for the same mistake.
		_, body := f.call("/v1/chat/completions", chatReq("llama-3"))
		if strings.Contains(body, `"type":"error"`) || !strings.Contains(body, `"error":{"message":"unknown model`) {
			t.Errorf("OpenAI face: %s", body)
		}
	})

	t.Run("GiveUps", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			upstream http.HandlerFunc
			status   int
			typ      string
			has      string
			retry    string // X-Should-Retry
		}{
			{"AnthropicShapedPassesOn", jsonAnswer(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
				529, "overloaded_error", "Overloaded", "true"},
			{"RateLimitRewritten", jsonAnswer(429, `{"error":{"message":"slow down, please","type":"requests"}}`, "Retry-After", "7"),
				429, "rate_limit_error", "slow down, please", "true"},
			{"BadRequestPassesOn", jsonAnswer(400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: at least one message is required"}}`),
				400, "invalid_request_error", "at least one message is required", "false"},
			{"HTMLGateway", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(502)
				_, _ = w.Write([]byte("<html>bad gateway</html>"))
			}, 502, "api_error", "upstream anthropic/claude-3-5-haiku-latest answered 502: <html>bad gateway</html>", "true"},
			{"ErrorEventOnA200", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sse(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
			}, 529, "overloaded_error", "Overloaded", "true"},
			// api_error stands for a 500: a server error, which the client may retry.
			{"APIErrorEventOnA200", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sse(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n")
			}, 500, "api_error", "Internal server error", "true"},
		} {
			t.Run(c.name, func(t *testing.T) {
				an := newFakeUpstream(t, c.upstream)
				f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", an.URL, ""), true)
				resp, body := f.call("/v1/messages", chatReq("claude-3-5-haiku-latest", "max_tokens", 16, "stream", strings.HasSuffix(c.name, "EventOnA200")))
				e := anthropicErrorOf(t, body)
				if resp.StatusCode != c.status || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.has) {
					t.Errorf("%d %s, want %d %s containing %q", resp.StatusCode, body, c.status, c.typ, c.has)
				}
				if got := resp.Header.Get("X-Should-Retry"); got != c.retry {
					t.Errorf("X-Should-Retry %q, want %q", got, c.retry)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				if c.status == 429 && resp.Header.Get("Retry-After") != "7" {
					t.Errorf("Retry-After %q, want the upstream's 7", resp.Header.Get("Retry-After"))
				}
			})
		}
	})

	t.Run("TransportFailure", func(t *testing.T) {
		// Nothing listens on port 1: refused; retry.rounds 0 gives up at once.
		f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", "http://127.0.0.1:1", ""), true)
		resp, body := f.call("/v1/messages", msg("claude-3-5-haiku-latest"))
		e := anthropicErrorOf(t, body)
		if resp.StatusCode != 502 || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "gatectl: upstream anthropic/claude-3-5-haiku-latest failed") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Should-Retry") == "" {
			t.Error("no X-Should-Retry")
		}
	})

	t.Run("KeyNotSet", func(t *testing.T) {
		t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "")
		f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", "http://127.0.0.1:1", ""), true)
		resp, body := f.call("/v1/messages", msg("claude-3-5-haiku-latest"))
		e := anthropicErrorOf(t, body)
		if resp.StatusCode != 502 || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "GATECTL_TEST_ANTHROPIC_KEY") ||
			strings.Contains(body, "sk-test") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})
}

func TestAnthropicErrorTypes(t *testing.T) {
	for status, typ := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error",
		503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error", 422: "invalid_request_error"} {
		if got := anthropicErrorType(status); got != typ {
			t.Errorf("%d: %s, want %s", status, got, typ)
		}
		if back := anthropicErrorStatus(typ); status != 502 && status != 503 && status != 422 && back != status {
			t.Errorf("%s: back to %d, want %d", typ, back, status)
		}
	}
}

func TestCountTokens(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
	an := newFakeUpstream(t,
		jsonAnswer(200, `{"input_tokens":42}`),
		jsonAnswer(429, `{"type":"error","error":{"type":"rate_limit_error","message":"count_tokens rate limit"}}`, "Retry-After", "3"),
	)
	f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", an.URL, `log: {access: true}`), true)
	resp, body := f.call("/v1/messages/count_tokens", map[string]any{"model": "claude-sonnet-4-5",
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}}, "x-api-key", "sk-client")
	if resp.StatusCode != 200 || strings.TrimSpace(body) != `{"input_tokens":42}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	c := an.call(0)
	if c.Path != "/v1/messages/count_tokens" || c.Body["model"] != "claude-sonnet-4-5" {
		t.Errorf("upstream got %s model %v", c.Path, c.Body["model"])
	}
	if c.Header.Get("X-Api-Key") != "sk-test-anthropic" || c.Header.Get("Anthropic-Version") == "" {
		t.Errorf("upstream headers: key %q version %q", c.Header.Get("X-Api-Key"), c.Header.Get("Anthropic-Version"))
	}
	if resp.Header.Get("X-Gate-Route") != "anthropic/claude-sonnet-4-5" {
		t.Errorf("X-Gate-Route %q", resp.Header.Get("X-Gate-Route"))
	}
	// Not a generation: the gate admitted nothing and holds nothing.
	if st := f.status("anthropic", "claude-sonnet-4-5"); st.InFlight != 0 || st.WindowRequests != 0 {
		t.Errorf("the gate saw count_tokens: %+v", st)
	}
	// Its failures come back as they are, once, in Anthropic's shape.
	resp, body = f.call("/v1/messages/count_tokens", map[string]any{"model": "claude-sonnet-4-5", "messages": []any{}})
	e := anthropicErrorOf(t, body)
	if resp.StatusCode != 429 || e.Error.Type != "rate_limit_error" || resp.Header.Get("Retry-After") != "3" || an.n() != 2 {
		t.Errorf("%d %s Retry-After %q after %d calls", resp.StatusCode, body, resp.Header.Get("Retry-After"), an.n())
	}
	if st := f.status("anthropic", "claude-sonnet-4-5"); st.CooldownMs != 0 {
		t.Errorf("a count_tokens 429 cooled the model down: %+v", st)
	}
	// Route errors too.
	resp, body = f.call("/v1/messages/count_tokens", map[string]any{"model": "nope"})
	if e := anthropicErrorOf(t, body); resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(f.logs.String(), `path=/v1/messages/count_tokens face=anthropic model=claude-sonnet-4-5 route=anthropic/claude-sonnet-4-5 status=200 attempts=1`) {
		t.Errorf("no access line for count_tokens:\n%s", f.logs.String())
	}
}

// TestCountTokensAnswerInBodyBudget: count_tokens reads its answer within the
// body budget like every other answer, so concurrent calls cannot hold their
// megabyte each beyond server.maxBufferedBytes.
func TestCountTokensAnswerInBodyBudget(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
	const size = 900_000
	proceed := make(chan struct{})
	an := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"input_tokens":42,"pad":"`))
		http.NewResponseController(w).Flush()
		select { // the rest only once the test has looked at the budget
		case <-proceed:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("x", size-len(`{"input_tokens":42,"pad":"`)-2) + `"}`))
	})
	f := newPxFixture(t, aliasConfig("http://127.0.0.1:1", an.URL, ""), true)
	release := sync.OnceFunc(func() { close(proceed) })
	t.Cleanup(release) // before the servers close, should the test fail first
	res := f.callAsync("/v1/messages/count_tokens", map[string]any{"model": "claude-sonnet-4-5",
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	waitFor(t, "the answer's bytes in the body budget", func() bool { return f.srv.bodies.inUse() >= size })
	release()
	r := <-res
	if r.resp.StatusCode != 200 || !strings.HasPrefix(r.body, `{"input_tokens":42`) || len(r.body) != size {
		t.Fatalf("status %d, %d bytes", r.resp.StatusCode, len(r.body))
	}
	waitFor(t, "the budget released", func() bool { return f.srv.bodies.inUse() == 0 })
}

// A stream whose first event is a server error is retried on either face: the
// failure is classified with the status its error type or code stands for
// (Anthropic's api_error 500, the Responses API's server_error 500), not the
// 200 the stream came with, which no rule reads as retryable.
func TestProxyFirstEventServerErrorIsRetried(t *testing.T) {
	for _, c := range []struct{ path, model, errEvent, okEvent string }{
		{"/v1/messages", "anth/m", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n",
			anthropicEvent("message_start", map[string]any{"type": "message_start", "message": map[string]any{"usage": map[string]any{"input_tokens": 4, "output_tokens": 1}}}) +
				anthropicEvent("message_stop", map[string]any{"type": "message_stop"})},
		{"/v1/responses", "po/m", "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error\",\"param\":null,\"sequence_number\":0}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\n"},
	} {
		t.Run(c.path, func(t *testing.T) {
			up := newFakeUpstream(t,
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sse(w, c.errEvent)
				},
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sse(w, c.okEvent)
				})
			f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
			type result struct {
				status int
				body   string
			}
			done := make(chan result, 1)
			go func() {
				resp, body := f.call(c.path, map[string]any{"model": c.model, "stream": true, "max_tokens": 10, "input": "hi",
					"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
				done <- result{resp.StatusCode, body}
			}()
			var r result
			waitFor(t, "the answer", func() bool {
				select {
				case r = <-done:
					return true
				default:
					if f.clock.Timers() > 0 {
						f.clock.Advance(time.Minute) // the retry's delay
					}
					return false
				}
			})
			if r.status != 200 || strings.Contains(r.body, "event: error") || up.n() != 2 {
				t.Fatalf("status %d calls %d body %q: want the retry's answer", r.status, up.n(), r.body)
			}
		})
	}
}

// Giving up on a Responses stream's error event, the OpenAI face answers in
// OpenAI's {"error":{…}} shape, which the SDKs read, with the status its code
// stands for.
func TestProxyResponsesErrorEventGiveUpShape(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	oa := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error\",\"param\":null,\"sequence_number\":0}\n\n")
	})
	f := newPxFixture(t, aliasConfig(oa.URL, "http://127.0.0.1:1", ""), true) // retry.rounds 0: give up at once
	resp, body := f.call("/v1/responses", map[string]any{"model": "gpt-4o", "stream": true, "input": "hi"})
	var e struct {
		Error struct {
			Message, Type, Code string
		}
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message != "The server had an error" || e.Error.Code != "server_error" || e.Error.Type != "server_error" {
		t.Fatalf("body %s: want {\"error\":{…}} with the event's message and code", body)
	}
	if resp.StatusCode != 500 || resp.Header.Get("X-Should-Retry") != "true" || resp.Header.Get("X-Gate-Class") != "SERVER" {
		t.Fatalf("status %d X-Should-Retry %q X-Gate-Class %q, want 500 true SERVER", resp.StatusCode, resp.Header.Get("X-Should-Retry"), resp.Header.Get("X-Gate-Class"))
	}
}

func TestErrorStatus(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   int
	}{
		{200, `{"type":"error","error":{"type":"api_error","message":"x"}}`, 500},
		{200, `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`, 529},
		{200, `{"type":"error","code":"server_error","message":"x","param":null}`, 500},
		{200, `{"error":{"code":"rate_limit_exceeded","message":"Rate limit reached"}}`, 429},
		{200, `{"error":{"message":"x","type":"server_error","code":null}}`, 500},
		{200, `{"type":"error","code":"some_new_code","message":"x"}`, 200},
		{200, `not json`, 200},
		{503, `{"type":"error","error":{"type":"api_error","message":"x"}}`, 503},
	} {
		if got := errorStatus(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%d %s: %d, want %d", c.status, c.body, got, c.want)
		}
	}
}
