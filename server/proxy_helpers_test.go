package server

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/gatectl/gatectl/internal/testlog"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
)

var pxT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// pxFixture is a gatectl server on a real loopback listener, built from a
// config text, with its logs captured.
type pxFixture struct {
	t     *testing.T
	srv   *Server
	url   string
	clock *engine.FakeClock // nil: the system clock
	logs  *testlog.Buffer
}

// newPxFixture starts gatectl on cfg. fake selects a fake clock.
func newPxFixture(t *testing.T, cfg string, fake bool) *pxFixture {
	t.Helper()
	var clock *engine.FakeClock
	if fake {
		clock = engine.NewFakeClock(pxT0)
	}
	return newPxFixtureWith(t, cfg, clock)
}

// newPxFixtureWith starts gatectl on cfg with fake (nil: the system clock).
func newPxFixtureWith(t *testing.T, cfg string, fake *engine.FakeClock, opts ...func(*Options)) *pxFixture {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &pxFixture{t: t, logs: &testlog.Buffer{}}
	var clock engine.Clock = engine.SystemClock{}
	if fake != nil {
		f.clock = fake
		clock = fake
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Trace, Output: f.logs})
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{Clock: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Manager: m, Clock: clock, Logger: logger, StateDir: filepath.Join(dir, "state")}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	f.srv, f.url = srv, hs.URL
	return f
}

// post sends a JSON body to gatectl and returns the response (body unread).
func (f *pxFixture) post(ctx context.Context, path string, body any, headers ...string) *http.Response {
	f.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+path, bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	given := map[string]bool{}
	for i := 0; i+1 < len(headers); i += 2 {
		if given[headers[i]] { // named twice: two values
			req.Header.Add(headers[i], headers[i+1])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
		given[headers[i]] = true
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// call posts and reads the whole answer.
func (f *pxFixture) call(path string, body any, headers ...string) (*http.Response, string) {
	f.t.Helper()
	resp := f.post(context.Background(), path, body, headers...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, string(b)
}

// status is the ledger's view of provider/model now.
func (f *pxFixture) status(provider, model string) gate.BucketStatus {
	return f.srv.Ledger().BucketStatus(f.srv.clock.Now(), provider, model)
}

// waitFor polls cond without sleeping for time to pass (it yields to the
// goroutines that make it true), failing after 10 real seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond) // yield the CPU to the server goroutines; not a wait for time to pass
	}
}

// upstreamCall is one request a fake upstream received.
type upstreamCall struct {
	Path   string
	Query  string
	Header http.Header
	Body   map[string]any
}

// fakeUpstream is an httptest server on 127.0.0.1 that records its calls and
// answers each with the next handler of its script (the last one repeats).
type fakeUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []upstreamCall
	script []http.HandlerFunc
}

func newFakeUpstream(t *testing.T, script ...http.HandlerFunc) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{script: script}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		u.mu.Lock()
		n := len(u.calls)
		u.calls = append(u.calls, upstreamCall{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		h := u.script[min(n, len(u.script)-1)]
		u.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) n() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

func (u *fakeUpstream) call(i int) upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[i]
}

// jsonAnswer answers status with body and extra header pairs.
func jsonAnswer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// chatOK is a non-streaming chat completion with usage.
func chatOK(prompt, completion, cached int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": "upstream-model",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "hi"}, "finish_reason": "stop"}},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
				"prompt_tokens_details": map[string]any{"cached_tokens": cached}},
		})
	}
}

// sse writes events, flushing after each.
func sse(w http.ResponseWriter, events ...string) {
	for _, e := range events {
		_, _ = io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

func chatChunk(content string) string {
	b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}}})
	return "data: " + string(b) + "\n\n"
}

func usageChunk(prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	return "data: " + string(b) + "\n\n"
}

// readEvents reads a whole SSE body into its events' data fields.
func readEvents(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, block := range strings.Split(body, "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

func chatReq(model string, extra ...any) map[string]any {
	m := map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hello"}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}
