package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hang is an upstream that never answers: it holds the request until gatectl
// gives up on it.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// deadlineConfig: short deadlines and a short backoff, so the bounds are
// measurable in a test; retry.transport.timeout is the default (1).
func deadlineConfig(url string) string {
	return fmt.Sprintf(`
providers:
  p: {kind: openai, baseURL: %s/v1}
upstream: {firstByteTimeout: 300ms, responseTimeout: 300ms, streamIdleTimeout: 300ms}
retry: {initialDelay: 100ms, jitter: 0}
`, url)
}

// TestProxyUpstreamDeadlines: an upstream that never answers gets a 504 back to
// the client after firstByteTimeout (a stream) or responseTimeout (a whole
// answer) × (retry.transport.timeout + 1) plus the backoff, not after the
// transport's quarter of an hour × 9 attempts; a stream that falls silent after
// it started ends with the protocol's error event after streamIdleTimeout.
func TestProxyUpstreamDeadlines(t *testing.T) {
	// The bound: 2 attempts × 300 ms + 100 ms backoff, with room for a loaded
	// 2-core machine; far below what any attempt without a deadline takes.
	const bound = 5 * time.Second
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("no answer, stream=%v", stream), func(t *testing.T) {
			up := newFakeUpstream(t, hang)
			f := newPxFixture(t, deadlineConfig(up.URL), false)
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			t0 := time.Now()
			resp := f.post(ctx, "/v1/chat/completions", chatReq("p/m", "stream", stream))
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(t0)
			if err != nil {
				t.Fatalf("no answer within %s: %v", bound, err)
			}
			if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Gate-Class") != "TIMEOUT" {
				t.Fatalf("status %d class %q: %s", resp.StatusCode, resp.Header.Get("X-Gate-Class"), b)
			}
			key := "upstream.responseTimeout"
			if stream {
				key = "upstream.firstByteTimeout"
			}
			if !strings.Contains(string(b), key) {
				t.Fatalf("the error does not name %s: %s", key, b)
			}
			if up.n() != 2 {
				t.Fatalf("the upstream got %d attempts, want 2 (retry.transport.timeout 1)", up.n())
			}
			if took < 600*time.Millisecond {
				t.Fatalf("answered after %s: before two deadlines passed", took)
			}
		})
	}
	t.Run("a stream that falls silent", func(t *testing.T) {
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, chatChunk("hel"))
			<-r.Context().Done()
		})
		f := newPxFixture(t, deadlineConfig(up.URL), false)
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		resp := f.post(ctx, "/v1/chat/completions", chatReq("p/m", "stream", true))
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("the stream did not end within %s: %v", bound, err)
		}
		evs := readEvents(t, string(b))
		if resp.StatusCode != 200 || len(evs) != 2 || !strings.Contains(evs[1], "upstream.streamIdleTimeout") {
			t.Fatalf("status %d events %q", resp.StatusCode, evs)
		}
		if up.n() != 1 {
			t.Fatalf("a stream that started was retried: %d attempts", up.n())
		}
	})
}

// TestProxyStreamSilentAnthropicErrorEvent: on the Anthropic face, a stream that
// falls silent after it started ends with one `event: error` whose type is
// Anthropic's for a timeout, naming the deadline.
func TestProxyStreamSilentAnthropicErrorEvent(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  a: {kind: anthropic, baseURL: %s}
upstream: {streamIdleTimeout: 300ms}
`, up.URL), false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp := f.post(ctx, "/v1/messages", map[string]any{"model": "a/claude", "max_tokens": 5, "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the stream did not end: %v", err)
	}
	body := string(b)
	if strings.Count(body, "event: error\n") != 1 {
		t.Fatalf("want exactly one error event: %q", body)
	}
	_, last, _ := strings.Cut(body, "event: error\ndata: ")
	var ev struct {
		Type  string                         `json:"type"`
		Error struct{ Type, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(last)), &ev); err != nil || ev.Type != "error" ||
		ev.Error.Type != "timeout_error" || !strings.Contains(ev.Error.Message, "upstream.streamIdleTimeout") {
		t.Fatalf("error event %q (%v)", last, err)
	}
}
