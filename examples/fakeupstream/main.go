// Command fakeupstream is a stand-in LLM provider for trying gatectl without
// keys or network: an OpenAI-compatible /v1/chat/completions and an
// Anthropic-compatible /v1/messages that echo the last message back, stream
// when asked, report usage, and enforce a tokens-per-minute limit (which its 429s
// state, in OpenAI's words) with
// 429 + Retry-After — so the gate has something real to pace.
//
//	go run ./examples/fakeupstream -listen 127.0.0.1:9999 -tpm 20000
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9999", "address to listen on (loopback)")
	tpm := flag.Int("tpm", 20000, "tokens-per-minute limit; over it the answer is 429 with Retry-After, stating the limit")
	flag.Parse()
	u := &upstream{tpm: *tpm}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", u.chat)
	mux.HandleFunc("POST /v1/messages", u.messages)
	log.Printf("fake upstream on http://%s (limit %d tokens/min)", *listen, *tpm)
	log.Fatal(http.ListenAndServe(*listen, mux))
}

type upstream struct {
	tpm int
	mu  sync.Mutex
	log []spent
}

type spent struct {
	at     time.Time
	tokens int
}

// take counts tokens against the sliding minute, or reports how long until they fit.
func (u *upstream) take(tokens int) (ok bool, retryAfter int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	for len(u.log) > 0 && now.Sub(u.log[0].at) >= time.Minute {
		u.log = u.log[1:]
	}
	sum := 0
	for _, s := range u.log {
		sum += s.tokens
	}
	if sum+tokens > u.tpm && len(u.log) > 0 {
		return false, int(time.Minute-now.Sub(u.log[0].at))/int(time.Second) + 1
	}
	u.log = append(u.log, spent{now, tokens})
	return true, 0
}

type request struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Content any `json:"content"`
	} `json:"messages"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (r request) lastText() string {
	if len(r.Messages) == 0 {
		return ""
	}
	switch c := r.Messages[len(r.Messages)-1].Content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

func (u *upstream) read(w http.ResponseWriter, r *http.Request) (request, []string, int, bool) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad JSON"}}`, http.StatusBadRequest)
		return req, nil, 0, false
	}
	words := strings.Fields("you said: " + req.lastText())
	in := len(strings.Fields(req.lastText())) + 8
	if ok, after := u.take(in + len(words)); !ok {
		w.Header().Set("Retry-After", fmt.Sprint(after))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"type":"rate_limit_error","message":"Rate limit reached for tokens per min (TPM): Limit %d. Please try again in %ds."}}`, u.tpm, after)
		return req, nil, 0, false
	}
	return req, words, in, true
}

func (u *upstream) chat(w http.ResponseWriter, r *http.Request) {
	req, words, in, ok := u.read(w, r)
	if !ok {
		return
	}
	usage := map[string]int{"prompt_tokens": in, "completion_tokens": len(words), "total_tokens": in + len(words)}
	if !req.Stream {
		writeJSON(w, map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": strings.Join(words, " ")}}},
			"usage":   usage})
		return
	}
	sse(w)
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		event(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": word}}}})
	}
	event(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		event(w, "", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model, "choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (u *upstream) messages(w http.ResponseWriter, r *http.Request) {
	req, words, in, ok := u.read(w, r)
	if !ok {
		return
	}
	text := strings.Join(words, " ")
	if !req.Stream {
		writeJSON(w, map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{map[string]any{"type": "text", "text": text}}, "stop_reason": "end_turn",
			"usage": map[string]int{"input_tokens": in, "output_tokens": len(words)}})
		return
	}
	sse(w)
	event(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
		"model": req.Model, "content": []any{}, "usage": map[string]int{"input_tokens": in, "output_tokens": 1}}})
	event(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		event(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": word}})
	}
	event(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	event(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]int{"output_tokens": len(words)}})
	event(w, "message_stop", map[string]any{"type": "message_stop"})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func sse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
}

// event writes one server-sent event and flushes it, with a small pause so a
// stream is visibly a stream.
func event(w http.ResponseWriter, name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	time.Sleep(30 * time.Millisecond)
}
