package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

func streamConfig(openaiURL, anthURL string) string {
	return fmt.Sprintf(`
providers:
  po:   {kind: openai, baseURL: %s/v1}
  anth: {kind: anthropic, baseURL: %s}
`, openaiURL, anthURL)
}

// TestProxyStreamsChunkByChunk: the client reads the first chunk before the
// upstream sends the second (the upstream waits for it: without a flush per
// event the test would time out); include_usage is asked for upstream, its chunk
// settles the ticket, and it is stripped unless the client asked for it.
func TestProxyStreamsChunkByChunk(t *testing.T) {
	for _, clientAsked := range []bool{false, true} {
		t.Run(fmt.Sprintf("clientAskedUsage=%v", clientAsked), func(t *testing.T) {
			firstSeen := make(chan struct{})
			up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sse(w, chatChunk("first"))
				select {
				case <-firstSeen:
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second): // a bound, not a wait: the test fails first
					return
				}
				sse(w, chatChunk("second"), usageChunk(7, 2), "data: [DONE]\n\n")
			})
			f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
			req := chatReq("po/stream-model", "stream", true, "max_tokens", 100)
			if clientAsked {
				req["stream_options"] = map[string]any{"include_usage": true}
			}
			resp := f.post(context.Background(), "/v1/chat/completions", req, "Authorization", "Bearer sk-client")
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if resp.Header.Get("X-Gate-Route") != "po/stream-model" || resp.Header.Get("X-Gate-Waited-Ms") == "" {
				t.Fatalf("gate headers: %v", resp.Header)
			}
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			if err != nil || !strings.Contains(line, `"first"`) {
				t.Fatalf("first line %q, %v", line, err)
			}
			close(firstSeen)
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			events := readEvents(t, line+string(rest))
			var sawUsage bool
			for _, e := range events {
				sawUsage = sawUsage || strings.Contains(e, `"usage"`)
			}
			if sawUsage != clientAsked {
				t.Fatalf("usage chunk passed on: %v, want %v (%v)", sawUsage, clientAsked, events)
			}
			if events[len(events)-1] != "[DONE]" || !strings.Contains(strings.Join(events, ""), `"second"`) {
				t.Fatalf("events %v", events)
			}
			opts, _ := up.call(0).Body["stream_options"].(map[string]any)
			if opts["include_usage"] != true {
				t.Fatalf("upstream stream_options %v", up.call(0).Body["stream_options"])
			}
			waitFor(t, "the settle", func() bool { return f.status("po", "stream-model").InFlight == 0 })
			if st := f.status("po", "stream-model"); st.WindowTokens != 9 || st.Reserved != 0 {
				t.Fatalf("window %d reserved %d; want 9 0", st.WindowTokens, st.Reserved)
			}
		})
	}
}

func anthropicEvent(name string, data any) string {
	b, _ := json.Marshal(data)
	return "event: " + name + "\ndata: " + string(b) + "\n\n"
}

// TestProxyAnthropicStreamUsage: message_start's usage (cache reads and writes
// included) and message_delta's output settle the ticket.
func TestProxyAnthropicStreamUsage(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w,
			anthropicEvent("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "m1",
				"usage": map[string]any{"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3, "output_tokens": 1}}}),
			anthropicEvent("content_block_delta", map[string]any{"type": "content_block_delta", "delta": map[string]any{"type": "text_delta", "text": "hi"}}),
			anthropicEvent("message_delta", map[string]any{"type": "message_delta", "usage": map[string]any{"output_tokens": 7}}),
			anthropicEvent("message_stop", map[string]any{"type": "message_stop"}))
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	resp, body := f.call("/v1/messages", chatReq("anth/claude-s", "stream", true, "max_tokens", 500), "X-Api-Key", "sk-ant-client")
	if resp.StatusCode != 200 || strings.Count(body, "event: ") != 4 {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if up.call(0).Body["stream_options"] != nil {
		t.Fatal("stream_options sent to an anthropic provider")
	}
	if up.call(0).Header.Get("X-Api-Key") != "sk-ant-client" || up.call(0).Header.Get("Anthropic-Version") == "" {
		t.Fatalf("upstream headers %v", up.call(0).Header)
	}
	waitFor(t, "the settle", func() bool { return f.status("anth", "claude-s").InFlight == 0 })
	if st := f.status("anth", "claude-s"); st.WindowTokens != 20 {
		t.Fatalf("window %d, want 20 (10 input + 3 cache write + 7 output; Anthropic's limit counts no cache reads)", st.WindowTokens)
	}
}

// TestProxyResponsesStreamUsage: the responses API reports usage in
// response.completed; cached tokens are within input_tokens.
func TestProxyResponsesStreamUsage(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w,
			anthropicEvent("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "delta": "hi"}),
			anthropicEvent("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{
				"usage": map[string]any{"input_tokens": 20, "input_tokens_details": map[string]any{"cached_tokens": 5}, "output_tokens": 4}}}))
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	resp, body := f.call("/v1/responses", map[string]any{"model": "po/resp", "input": "hi", "stream": true})
	if resp.StatusCode != 200 || !strings.Contains(body, "response.completed") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if up.call(0).Path != "/v1/responses" || up.call(0).Body["stream_options"] != nil {
		t.Fatalf("upstream call %+v", up.call(0))
	}
	waitFor(t, "the settle", func() bool { return f.status("po", "resp").InFlight == 0 })
	if st := f.status("po", "resp"); st.WindowTokens != 24 {
		t.Fatalf("window %d, want 24", st.WindowTokens)
	}
}

// TestProxyStreamUsageOff: a provider that refuses stream_options (Azure
// OpenAI before api-version 2024-09-01-preview answers every stream 400 for
// it) is told so with streamUsage: false — its streams go without the field,
// and settle on their input and a token per chunk, the output unseen.
func TestProxyStreamUsageOff(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, chatChunk("hi"), `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n", "data: [DONE]\n\n")
	})
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  po:  {kind: openai, baseURL: %s/v1}
  old: {kind: openai, baseURL: %s/v1, streamUsage: false}
`, up.URL, up.URL), true)
	for i, c := range []struct {
		model string
		asked bool
	}{{"po/m", true}, {"old/m", false}} {
		resp, body := f.call("/v1/chat/completions", chatReq(c.model, "stream", true, "max_tokens", 100))
		if resp.StatusCode != 200 || strings.Contains(body, `{"error":{`) {
			t.Fatalf("%s: %d %s", c.model, resp.StatusCode, body)
		}
		if got := up.call(i).Body["stream_options"] != nil; got != c.asked {
			t.Fatalf("%s: stream_options sent %v, want %v (%+v)", c.model, got, c.asked, up.call(i).Body)
		}
	}
}

// TestProxyStreamEnds: a stream is whole when its own last word came, however
// it is spelled — or cut when the body ended before it (the client then gets
// the protocol's error event).
func TestProxyStreamEnds(t *testing.T) {
	named := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	finish := func(reason string) string {
		return `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":` + reason + `}]}`
	}
	for _, c := range []struct {
		name   string
		path   string
		events []string
		cut    bool
	}{
		// The SSE default name is as good as none: a chat stream that names
		// its events "message" ends as any other.
		{"event message, finished", "/v1/chat/completions", []string{named("message", finish(`null`)), named("message", finish(`"stop"`))}, false},
		{"event message, cut", "/v1/chat/completions", []string{named("message", finish(`null`))}, true},
		{"[DONE] with a space", "/v1/chat/completions", []string{"data: " + finish(`null`) + "\n\n", "data: [DONE] \n\n"}, false},
		// Some servers send "" before the last chunk: not a finish.
		{"empty finish_reason, cut", "/v1/chat/completions", []string{"data: " + finish(`""`) + "\n\n"}, true},
		// The second choice's finish, the first's null.
		{"a later choice's finish", "/v1/chat/completions", []string{`data: {"choices":[{"index":0,"delta":{},"finish_reason":null},{"index":1,"delta":{},"finish_reason":"stop"}]}` + "\n\n"}, false},
		// A Responses stream whose events carry their type in the data alone.
		{"responses, data only", "/v1/responses", []string{`data: {"type":"response.output_text.delta","delta":"x"}` + "\n\n", `data: {"type":"response.completed","response":{"status":"completed"}}` + "\n\n"}, false},
		{"responses, data only, cut", "/v1/responses", []string{`data: {"type":"response.output_text.delta","delta":"x"}` + "\n\n"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sse(w, c.events...)
			})
			f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
			req := chatReq("po/m", "stream", true, "max_tokens", 100)
			if c.path == "/v1/responses" {
				req = map[string]any{"model": "po/m", "input": "hi", "stream": true}
			}
			resp, body := f.call(c.path, req)
			if cut := strings.Contains(body, "the stream ended before its last event"); resp.StatusCode != 200 || cut != c.cut {
				t.Fatalf("status %d, cut %v, want %v: %q", resp.StatusCode, cut, c.cut, body)
			}
		})
	}
}

// TestProxyStreamUsageOffDropsTheClientsOwn: the client's own stream_options
// would meet the same 400 at such an upstream: it does not go either.
func TestProxyStreamUsageOffDropsTheClientsOwn(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, chatChunk("hi"), "data: [DONE]\n\n")
	})
	f := newPxFixture(t, fmt.Sprintf("providers:\n  old: {kind: openai, baseURL: %s/v1, streamUsage: false}\n", up.URL), true)
	resp, body := f.call("/v1/chat/completions", chatReq("old/m", "stream", true, "stream_options", map[string]any{"include_usage": true}))
	if resp.StatusCode != 200 || up.call(0).Body["stream_options"] != nil {
		t.Fatalf("%d %s: upstream body %+v, want no stream_options", resp.StatusCode, body, up.call(0).Body)
	}
}

// cutAfter writes events, then drops the connection without ending the chunked
// body: a transport failure after the first byte.
func cutAfter(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, events...)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
}

// TestProxyMidStreamError: a failure after the first byte ends the stream with
// the protocol's error event, and what was used is settled.
func TestProxyMidStreamError(t *testing.T) {
	t.Run("openai transport cut", func(t *testing.T) {
		up := newFakeUpstream(t, cutAfter(chatChunk("partial")))
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/chat/completions", chatReq("po/cut", "stream", true, "max_tokens", 100))
		events := readEvents(t, body)
		if resp.StatusCode != 200 || len(events) != 2 || !strings.Contains(events[0], "partial") || !strings.HasPrefix(events[1], `{"error":{`) {
			t.Fatalf("status %d events %q", resp.StatusCode, events)
		}
		if up.n() != 1 {
			t.Fatalf("%d upstream calls: a started stream was retried", up.n())
		}
		waitFor(t, "the settle", func() bool { return f.status("po", "cut").InFlight == 0 })
		if st := f.status("po", "cut"); st.Reserved != 0 || st.WindowTokens == 0 || st.WindowTokens >= 100 {
			t.Fatalf("window %d reserved %d: want the input estimate plus one chunk settled", st.WindowTokens, st.Reserved)
		}
	})
	t.Run("openai stream ended before its last event", func(t *testing.T) {
		// The body ends cleanly (a gateway that closed the stream early):
		// no finish_reason, no usage, no [DONE]. The answer is cut, and the
		// client is told so — not a 200 that reads as complete.
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, chatChunk("partial"))
		})
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/chat/completions", chatReq("po/cut", "stream", true, "max_tokens", 100))
		events := readEvents(t, body)
		if resp.StatusCode != 200 || len(events) != 2 || !strings.Contains(events[0], "partial") || !strings.HasPrefix(events[1], `{"error":{`) {
			t.Fatalf("status %d events %q: want the chunk, then an error event", resp.StatusCode, events)
		}
		if up.n() != 1 {
			t.Fatalf("%d upstream calls: a started stream was retried", up.n())
		}
	})
	t.Run("openai finish_reason without [DONE] is complete", func(t *testing.T) {
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, chatChunk("whole"), `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason": "stop"}]}`+"\n\n")
		})
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/chat/completions", chatReq("po/whole", "stream", true, "max_tokens", 100))
		if events := readEvents(t, body); resp.StatusCode != 200 || len(events) != 2 || strings.Contains(body, `{"error":{`) {
			t.Fatalf("status %d events %q: want the two chunks and no error", resp.StatusCode, events)
		}
	})
	t.Run("anthropic stream ended before message_delta", func(t *testing.T) {
		start := anthropicEvent("message_start", map[string]any{"type": "message_start",
			"message": map[string]any{"usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
		delta := anthropicEvent("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "partial"}})
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, start, delta)
		})
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/messages", chatReq("anth/cut", "stream", true, "max_tokens", 100))
		if resp.StatusCode != 200 || !strings.Contains(body, "partial") || !strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"error\":{") {
			t.Fatalf("status %d body %q: want the events, then Anthropic's error event", resp.StatusCode, body)
		}
		// Ended after message_delta, without message_stop: the answer is whole.
		up2 := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, start, delta, anthropicEvent("message_delta", map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": 3}}))
		})
		f2 := newPxFixture(t, streamConfig(up2.URL, up2.URL), true)
		resp, body = f2.call("/v1/messages", chatReq("anth/whole", "stream", true, "max_tokens", 100))
		if resp.StatusCode != 200 || strings.Contains(body, "event: error") {
			t.Fatalf("status %d body %q: a stream that ended after message_delta is whole", resp.StatusCode, body)
		}
	})
	t.Run("anthropic transport cut", func(t *testing.T) {
		up := newFakeUpstream(t, cutAfter(anthropicEvent("message_start", map[string]any{"type": "message_start",
			"message": map[string]any{"usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})))
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/messages", chatReq("anth/cut", "stream", true, "max_tokens", 100))
		if resp.StatusCode != 200 || !strings.Contains(body, "event: message_start") || !strings.HasSuffix(body, "\n\n") ||
			!strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"error\":{") {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		waitFor(t, "the settle", func() bool { return f.status("anth", "cut").InFlight == 0 })
		if st := f.status("anth", "cut"); st.WindowTokens != 13 {
			t.Fatalf("window %d, want 13 (message_start's usage)", st.WindowTokens)
		}
	})
	t.Run("anthropic error event mid-stream", func(t *testing.T) {
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, anthropicEvent("message_start", map[string]any{"type": "message_start",
				"message": map[string]any{"usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}}),
				anthropicEvent("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}}),
				anthropicEvent("ping", map[string]any{"type": "ping"}))
		})
		f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
		resp, body := f.call("/v1/messages", chatReq("anth/err", "stream", true, "max_tokens", 100))
		if resp.StatusCode != 200 || strings.Count(body, "event: error") != 1 || strings.Contains(body, "ping") {
			t.Fatalf("status %d body %q: want the upstream's error event, then the end", resp.StatusCode, body)
		}
		if up.n() != 1 {
			t.Fatalf("%d upstream calls", up.n())
		}
	})
}

// TestProxyStreamFirstEventError: a stream whose first event is an error has sent
// nothing to the client yet: it is retried like any failure. Comment blocks
// before it (a keep-alive) dispatch no event and do not change that; before a
// first event that is not an error, they go out ahead of it.
func TestProxyStreamFirstEventError(t *testing.T) {
	for _, lead := range []string{"", ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n"} {
		t.Run(fmt.Sprintf("lead=%q", lead), func(t *testing.T) {
			up := newFakeUpstream(t,
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sse(w, lead+anthropicEvent("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}}))
				},
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sse(w, lead+anthropicEvent("message_start", map[string]any{"type": "message_start",
						"message": map[string]any{"usage": map[string]any{"input_tokens": 4, "output_tokens": 1}}}),
						anthropicEvent("message_stop", map[string]any{"type": "message_stop"}))
				})
			f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
			type result struct {
				status int
				body   string
			}
			done := make(chan result, 1)
			go func() {
				resp, body := f.call("/v1/messages", chatReq("anth/first", "stream", true, "max_tokens", 10))
				done <- result{resp.StatusCode, body}
			}()
			// The retry's delay, and (when the jittered delay is longer than
			// proxy.holdNotice) the notice of a held stream: advance until the answer.
			waitFor(t, "the retry delay", func() bool { return up.n() == 1 && f.clock.Timers() > 0 })
			var r result
			waitFor(t, "the answer", func() bool {
				select {
				case r = <-done:
					return true
				default:
					if f.clock.Timers() > 0 {
						f.clock.Advance(time.Minute)
					}
					return false
				}
			})
			if r.status != 200 || strings.Contains(r.body, "event: error") || !strings.Contains(r.body, "message_stop") || up.n() != 2 {
				t.Fatalf("status %d calls %d body %q", r.status, up.n(), r.body)
			}
			if i := strings.Index(r.body, lead); lead != "" && (i < 0 || i > strings.Index(r.body, "message_start")) {
				t.Fatalf("the comments before the first event did not go out ahead of it: %q", r.body)
			}
		})
	}
}

// TestProxyStreamEventBounded: an upstream that never ends an event is cut at
// maxStreamEvent like a transport failure (the client gets the error event, the
// ticket is settled), instead of gatectl buffering it without limit.
func TestProxyStreamEventBounded(t *testing.T) {
	defer func(n int) { maxStreamEvent = n }(maxStreamEvent)
	maxStreamEvent = 1 << 20
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, chatChunk("first"), "data: ")
		chunk := strings.Repeat("x", 32<<10)
		for range 8 * (1 << 20) / len(chunk) { // 8 MiB of one line
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		w.(http.Flusher).Flush()
		select { // then silence: only a reader that stops on its own ends the call
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := f.post(ctx, "/v1/chat/completions", chatReq("po/endless", "stream", true, "max_tokens", 100))
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v (%d bytes)", err, len(b))
	}
	events := readEvents(t, string(b))
	if resp.StatusCode != 200 || len(events) != 2 || !strings.Contains(events[0], "first") ||
		!strings.HasPrefix(events[1], `{"error":{`) || !strings.Contains(events[1], "too large") {
		t.Fatalf("status %d events %.300q", resp.StatusCode, events)
	}
	waitFor(t, "the settle", func() bool { return f.status("po", "endless").InFlight == 0 })
	if st := f.status("po", "endless"); st.Reserved != 0 {
		t.Fatalf("reserved %d after the cut", st.Reserved)
	}
}

// TestProxyStreamCutSettlesWhatWasWritten: an Anthropic stream cut after
// message_start and some content (a client that hung up, an error mid-way)
// stated its input and one output token, not what it wrote since: it settles
// at one token per content event at least, as the provider counted what was
// written; settled at message_start's one token, the window read lighter than
// the provider's and let the next calls into a 429.
func TestProxyStreamCutSettlesWhatWasWritten(t *testing.T) {
	events := []string{anthropicEvent("message_start", map[string]any{"type": "message_start",
		"message": map[string]any{"usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})}
	for range 5 {
		events = append(events, anthropicEvent("content_block_delta", map[string]any{"type": "content_block_delta",
			"delta": map[string]any{"type": "text_delta", "text": "word"}}))
	}
	up := newFakeUpstream(t, cutAfter(events...))
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	if resp, body := f.call("/v1/messages", chatReq("anth/cut", "stream", true, "max_tokens", 100)); resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	waitFor(t, "the settle", func() bool { return f.status("anth", "cut").InFlight == 0 })
	if st := f.status("anth", "cut"); st.WindowTokens != 12+5 {
		t.Fatalf("window %d, want 17: the input and one token per content event", st.WindowTokens)
	}
}

// TestProxyResponsesFailedIsAFailure: a Responses stream that ends in
// response.failed failed, whatever came before: its error is classified (a
// rate limit starts the model's cooldown) and the call is no success.
func TestProxyResponsesFailedIsAFailure(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w,
			anthropicEvent("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "delta": "hi"}),
			anthropicEvent("response.failed", map[string]any{"type": "response.failed", "response": map[string]any{
				"status": "failed",
				"error":  map[string]any{"code": "rate_limit_exceeded", "message": "Rate limit reached for requests. Please try again in 20s."},
				"usage":  map[string]any{"input_tokens": 20, "output_tokens": 1}}}))
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	resp, body := f.call("/v1/responses", map[string]any{"model": "po/resp", "input": "hi", "stream": true})
	if resp.StatusCode != 200 || !strings.Contains(body, "response.failed") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	waitFor(t, "the settle", func() bool { return f.status("po", "resp").InFlight == 0 })
	if st := f.status("po", "resp"); st.CooldownMs <= 0 || st.RateLimited != 1 {
		t.Fatalf("cooldown %dms, 429s %d: want the rate limit in response.failed to cool the model down", st.CooldownMs, st.RateLimited)
	}

	// Its error is what is classified, not the response it repeats: the
	// caller's instructions and the output so far are not the provider's words.
	up = newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w,
			anthropicEvent("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "delta": "the API returns 429 Too Many Requests"}),
			anthropicEvent("response.failed", map[string]any{"type": "response.failed", "response": map[string]any{
				"status":       "failed",
				"instructions": "When you hit a rate limit, wait and retry.",
				"output":       []any{map[string]any{"type": "message", "content": []any{map[string]any{"type": "output_text", "text": "the API returns 429 Too Many Requests"}}}},
				"error":        map[string]any{"code": "server_error", "message": "The server had an error while processing your request."}}}))
	})
	f = newPxFixture(t, streamConfig(up.URL, up.URL), true)
	if resp, body := f.call("/v1/responses", map[string]any{"model": "po/resp", "input": "hi", "stream": true}); resp.StatusCode != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	waitFor(t, "the settle", func() bool { return f.status("po", "resp").InFlight == 0 })
	if st := f.status("po", "resp"); st.CooldownMs != 0 || st.RateLimited != 0 {
		t.Fatalf("cooldown %dms, 429s %d: a server error whose response mentions rate limits cooled the model down", st.CooldownMs, st.RateLimited)
	}
}

// A field the client sends as null is as good as absent: stream_options null
// still gets include_usage, reasoning null still gets the route's effort (a
// nil map from the null once took the handler down with a panic).
func TestUpstreamBodyNullFields(t *testing.T) {
	epFor := func(path string) *endpoint {
		for i := range endpoints {
			if endpoints[i].path == path {
				return &endpoints[i]
			}
		}
		t.Fatalf("no endpoint %s", path)
		return nil
	}
	cases := []struct {
		path, body string
		route      engine.Route
		field, key string
		want       string
	}{
		{"/v1/chat/completions", `{"model":"x","stream":true,"stream_options":null,"messages":[]}`, engine.Route{Provider: "p", Model: "m"}, "stream_options", "include_usage", "true"},
		{"/v1/completions", `{"model":"x","stream":true,"stream_options":null,"prompt":"hi"}`, engine.Route{Provider: "p", Model: "m"}, "stream_options", "include_usage", "true"},
		{"/v1/responses", `{"model":"x","stream":true,"input":"x","reasoning":null}`, engine.Route{Provider: "p", Model: "m", ReasoningEffort: "high"}, "reasoning", "effort", `"high"`},
		{"/v1/responses", `{"model":"x","input":"x","reasoning":"odd"}`, engine.Route{Provider: "p", Model: "m", ReasoningEffort: "low"}, "reasoning", "effort", `"low"`},
	}
	for _, c := range cases {
		pr, _, err := parseProxyRequest(epFor(c.path), []byte(c.body), http.Header{})
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		b, err := upstreamBody(pr, c.route, true)
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		var top, inner map[string]json.RawMessage
		_ = json.Unmarshal(b, &top)
		_ = json.Unmarshal(top[c.field], &inner)
		if got := string(inner[c.key]); got != c.want {
			t.Errorf("%s → %s: %s.%s = %q, want %q", c.body, b, c.field, c.key, got, c.want)
		}
	}
}

// Headers a message's Connection header names are hop-by-hop for that
// message (RFC 9110 §7.6.1): the proxy forwards them neither way.
func TestProxyDropsConnectionNamedHeaders(t *testing.T) {
	ok := chatOK(3, 1, 0)
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Secret-Hop")
		w.Header().Set("X-Secret-Hop", "1")
		w.Header().Set("X-Kept", "1")
		ok(w, r)
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	resp, _ := f.call("/v1/chat/completions", chatReq("po/m", "max_tokens", 10), "Connection", "X-Hop-Req", "X-Hop-Req", "secret", "X-Req-Kept", "1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.Header.Get("X-Secret-Hop") != "" || resp.Header.Get("X-Kept") != "1" {
		t.Errorf("client got %v: want X-Secret-Hop dropped, X-Kept kept", resp.Header)
	}
	if h := up.call(0).Header; h.Get("X-Hop-Req") != "" || h.Get("X-Req-Kept") != "1" {
		t.Errorf("upstream got %v: want X-Hop-Req dropped, X-Req-Kept kept", h)
	}
}

// Keep-alive comments that go on past proxy.holdNotice (a reasoning model's
// long first token) start the answer — its own headers, then the comments as
// they come — so the client's idle timeouts do not fire in silence.
func TestProxyStreamLongLeadStartsTheAnswer(t *testing.T) {
	first, second, rest := make(chan struct{}), make(chan struct{}), make(chan struct{})
	wait := func(r *http.Request, c chan struct{}) bool {
		select {
		case <-c:
			return true
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // a bound: the test fails first
		}
		return false
	}
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "req-1")
		sse(w, ": OPENROUTER PROCESSING\n\n")
		close(first)
		if !wait(r, second) {
			return
		}
		sse(w, ": OPENROUTER PROCESSING\n\n") // read past holdNotice: the answer starts
		if !wait(r, rest) {
			return
		}
		sse(w, chatChunk("hi"), usageChunk(3, 1), "data: [DONE]\n\n")
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	done := make(chan *http.Response, 1)
	go func() {
		done <- f.post(context.Background(), "/v1/chat/completions", chatReq("po/m", "stream", true, "max_tokens", 10))
	}()
	<-first
	f.clock.Advance(3 * time.Second) // past proxy.holdNotice (2 s)
	close(second)
	var resp *http.Response
	select {
	case resp = <-done: // the headers came before the answer's first event
	case <-time.After(10 * time.Second):
		t.Fatal("no headers while the upstream sent only comments past holdNotice")
	}
	defer resp.Body.Close()
	close(rest)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "req-1" || resp.Header.Get("X-Gate-Route") != "po/m" {
		t.Fatalf("status %d, headers %v: want the answer's own headers", resp.StatusCode, resp.Header)
	}
	if strings.Count(string(body), ": OPENROUTER PROCESSING") != 2 || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("body %q: want both comments, then the answer", body)
	}
}
