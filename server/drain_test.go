package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/snapshot"
)

// A shutdown answers every client: the requests held in the gate at once, 503
// (they were not sent: send again); at the end of the grace the calls still
// upstream, 503, or an error event in a stream that had begun — never a cut
// connection, nor a stream that ends as if it were whole. Nothing stays
// reserved.
func TestShutdownAnswersEveryClient(t *testing.T) {
	block := make(chan struct{})
	var upstreamCalls atomicCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls.add()
		if strings.Contains(readAll(r.Body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok1\"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(block)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(`providers:
  up: {kind: openai, baseURL: "`+up.URL+`/v1"}
gate:
  window: 60s
  maxWait: 120s
  pace: 0
  models:
    up/m: {tpm: 3000, rpm: 600, safetyFactor: 1}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.NewManager(context.Background(), cfg, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every draw reads 0.6: the shutdown's Retry-After is then 3 (spreadRetryAfter), not a fixed 1.
	srv, err := New(Options{Manager: m, StateDir: t.TempDir(), ShutdownGrace: 2 * time.Second, Rand: fixedRand(0.6)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, shutDown := serveLoopback(t, srv)

	type answer struct {
		status int
		header http.Header
		body   string
		err    error
	}
	send := func(stream bool, session string) <-chan answer {
		out := make(chan answer, 1)
		body := `{"model":"up/m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"up/m","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", session)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, err = io.Copy(&b, bufio.NewReader(resp.Body))
			out <- answer{resp.StatusCode, resp.Header, b.String(), err}
		}()
		return out
	}
	status := func() (inFlight, waiting int) {
		st := srv.Ledger().BucketStatus(srv.clock.Now(), "up", "m")
		return st.InFlight, st.Waiting
	}
	upstreamCall := send(false, "a") // admitted; its upstream never answers
	upstreamStream := send(true, "b")
	waitUntil(t, "two calls upstream", func() bool { return upstreamCalls.load() == 2 })
	// 3,030 > 3,000: these wait in the gate, and so does a harness's admission
	// through the decision API.
	heldCall, heldStream := send(false, "c"), send(true, "d")
	heldAdmit := make(chan answer, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/gate/v1/admit", "application/json",
			strings.NewReader(`{"provider":"up","model":"m","session":"e","inputTokens":10,"maxTokens":1000}`))
		if err != nil {
			heldAdmit <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		heldAdmit <- answer{resp.StatusCode, resp.Header, readAll(resp.Body), nil}
	}()
	waitUntil(t, "three calls held", func() bool { _, w := status(); return w == 3 })

	served := make(chan error, 1)
	go func() { served <- shutDown() }()
	for name, ch := range map[string]<-chan answer{"a held call": heldCall, "a held stream": heldStream} {
		a := <-ch
		if a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "3" ||
			a.header.Get("X-Should-Retry") != "true" || !strings.Contains(a.body, "was not sent") {
			t.Errorf("%s: %d %v %q (%v), want 503 Retry-After 3 (drawn), should-retry, 'was not sent'", name, a.status, a.header, a.body, a.err)
		}
	}
	if a := <-heldAdmit; a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "3" || !strings.Contains(a.body, "shutting down") {
		t.Errorf("a decision-API admission waiting: %d %v %q (%v), want 503 Retry-After 3 (drawn)", a.status, a.header, a.body, a.err)
	}
	if a := <-upstreamCall; a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "3" || !strings.Contains(a.body, "before the upstream answered") {
		t.Errorf("a call upstream at the grace's end: %d %v %q (%v), want 503, Retry-After 3 (drawn), saying it shut down before the answer", a.status, a.header, a.body, a.err)
	}
	if a := <-upstreamStream; a.err != nil || a.status != http.StatusOK || !strings.Contains(a.body, "tok1") ||
		!strings.Contains(a.body, `"error"`) || !strings.Contains(a.body, "incomplete") {
		t.Errorf("a stream cut at the grace's end: %d %q (%v), want its first event then an error event", a.status, a.body, a.err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if inFlight, waiting := status(); inFlight != 0 || waiting != 0 {
		t.Fatalf("after the shutdown: %d in flight, %d waiting, want nothing held", inFlight, waiting)
	}
	if n := upstreamCalls.load(); n != 2 {
		t.Fatalf("%d calls reached the upstream, want 2: a held call was sent during the shutdown", n)
	}
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add()        { c.n.Add(1) }
func (c *atomicCounter) load() int64 { return c.n.Load() }

// serveLoopback serves srv on a loopback port; shutDown starts its shutdown
// and returns what Serve returned.
func serveLoopback(t *testing.T, srv *Server) (ln net.Listener, shutDown func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	return ln, func() error { cancel(); return <-served }
}
