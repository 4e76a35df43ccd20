// Package faultupstream is an OpenAI-compatible upstream that fails on purpose,
// for the fault suite: each request's model names the fault it gets.
//
//	ok        a chat completion (a stream when asked), with usage
//	reset     the connection is closed with no answer
//	hang      no answer at all until the client goes away
//	stall     a stream that sends one event, then nothing
//	trickle   a stream whose events arrive one by one, TrickleGap apart
//	oversized a 200 whose body is OversizedBytes long
//	echo      a 401 quoting the request's Authorization header in its body and
//	          in an X-Echo-Authorization header
//	storm     a 503 with Retry-After: 0 (a 5xx storm, answered at once)
//	slow      a chat completion after SlowDelay (requests that stay in flight)
//
// A model not listed is answered like ok. The handler counts the requests per
// fault; it is safe for concurrent use.
package faultupstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Faults are the models the handler knows, in the order above.
var Faults = []string{"ok", "reset", "hang", "stall", "trickle", "oversized", "echo", "storm", "slow"}

// Handler serves the faults. Zero fields take the defaults.
type Handler struct {
	// OversizedBytes is the length of an oversized answer (default 65 MiB: past
	// gatectl's 64 MiB limit on a non-streaming answer).
	OversizedBytes int64
	// TrickleGap is the pause between two events of a trickle (default 50 ms).
	TrickleGap time.Duration
	// TrickleEvents is how many content events a trickle sends (default 10).
	TrickleEvents int
	// SlowDelay is how long slow waits before it answers (default 1 s).
	SlowDelay time.Duration

	mu     sync.Mutex
	counts map[string]int
}

// Count is how many requests fault got.
func (h *Handler) Count(fault string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[fault]
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	// The body is read whole (and dropped) so a big request costs the upstream
	// nothing but the copy.
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
	_ = dec.Decode(&req)
	_, _ = io.Copy(io.Discard, r.Body)
	fault := req.Model
	h.mu.Lock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[fault]++
	h.mu.Unlock()

	switch fault {
	case "reset":
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case "hang":
		<-r.Context().Done()
	case "stall":
		startStream(w)
		event(w, chunk("a"))
		<-r.Context().Done()
	case "trickle":
		startStream(w)
		for i := range orDefault(h.TrickleEvents, 10) {
			event(w, chunk(fmt.Sprint(i)))
			select {
			case <-time.After(orDefault(h.TrickleGap, 50*time.Millisecond)):
			case <-r.Context().Done():
				return
			}
		}
		event(w, usageChunk())
		event(w, "data: [DONE]\n\n")
	case "oversized":
		n := orDefault(h.OversizedBytes, 65<<20)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		block := []byte(strings.Repeat(" ", 1<<20))
		for sent := int64(0); sent < n; {
			b := block[:min(int64(len(block)), n-sent)]
			if _, err := w.Write(b); err != nil {
				return
			}
			sent += int64(len(b))
		}
	case "echo":
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo-Authorization", auth)
		msg, _ := json.Marshal("Incorrect API key provided: " + auth)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","code":"invalid_api_key"}}`, msg)
	case "storm":
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"The server is overloaded","type":"server_error"}}`)
	case "slow":
		select {
		case <-time.After(orDefault(h.SlowDelay, time.Second)):
		case <-r.Context().Done():
			return
		}
		complete(w, req.Stream)
	default:
		complete(w, req.Stream)
	}
}

func complete(w http.ResponseWriter, stream bool) {
	if stream {
		startStream(w)
		event(w, chunk("hi"))
		event(w, usageChunk())
		event(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

func event(w http.ResponseWriter, ev string) {
	_, _ = io.WriteString(w, ev)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func chunk(content string) string {
	b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}}})
	return "data: " + string(b) + "\n\n"
}

func usageChunk() string {
	return `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n"
}

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
