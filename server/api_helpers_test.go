package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/snapshot"
)

// apiTestConfig: alpha/small has a 10,000-token budget (safety factor 1), so two
// calls of 6,000 cannot share a window; pool medium has two routes.
const apiTestConfig = `
providers:
  alpha: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
  beta: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
gate:
  window: 60s
  maxWait: 120s
  pace: 0
  defaults: {tpm: 1000000, rpm: 600}
  models:
    alpha/small: {tpm: 10000, rpm: 600, safetyFactor: 1}
retry:
  rounds: 3
  initialDelay: 2s
  jitter: 0
pools:
  medium:
    routes:
      - {provider: alpha, model: m1}
      - {provider: beta, model: m1}
balances:
  - provider: beta
    script: [sh, -c, 'echo ''{"remaining": 5}''']
quota:
  longTermDelay: 1h
`

var apiT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// apiEnv is a server on a temp config, a fake clock and a state dir of its own,
// served over real HTTP on loopback.
type apiEnv struct {
	t      *testing.T
	srv    *Server
	http   *httptest.Server
	clock  *engine.FakeClock
	mgr    *snapshot.Manager
	config string
}

func newAPIEnv(t *testing.T, config string) *apiEnv {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := engine.NewFakeClock(apiT0)
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, Clock: clock, StateDir: t.TempDir(),
		Rand: &lockedRand{r: rand.New(rand.NewPCG(1, 2))}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return &apiEnv{t: t, srv: srv, http: hs, clock: clock, mgr: m, config: path}
}

// do sends a request and returns the status and the body.
func (e *apiEnv) do(method, path, body string) (int, []byte, http.Header) {
	e.t.Helper()
	return e.doCtx(context.Background(), method, path, body)
}

func (e *apiEnv) doCtx(ctx context.Context, method, path, body string) (int, []byte, http.Header) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// post sends body to the API endpoint and decodes the answer into a map; it fails
// the test unless the status is want.
func (e *apiEnv) post(path, body string, want int) map[string]any {
	e.t.Helper()
	return e.call(http.MethodPost, path, body, want)
}

func (e *apiEnv) get(path string, want int) map[string]any {
	e.t.Helper()
	return e.call(http.MethodGet, path, "", want)
}

func (e *apiEnv) call(method, path, body string, want int) map[string]any {
	e.t.Helper()
	status, b, _ := e.do(method, path, body)
	if status != want {
		e.t.Fatalf("%s %s %s: status %d, want %d: %s", method, path, body, status, want, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		e.t.Fatalf("%s %s: not JSON: %v: %s", method, path, err, b)
	}
	return m
}

// apiErrorOf returns the error body's field and message.
func apiErrorOf(t *testing.T, b []byte) (field, msg string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an API error: %s", b)
	}
	return e.Error.Field, e.Error.Message
}

// bucket returns the ledger's view of provider/model.
func (e *apiEnv) bucket(provider, model string) gate.BucketStatus {
	return e.srv.Ledger().BucketStatus(e.clock.Now(), provider, model)
}

// eventually polls cond (goroutine progress, not the passing of time) until it
// holds or five seconds of real time have gone.
func apiEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// async runs a request in the background; the answer arrives on the channel.
type apiAnswer struct {
	status int
	body   map[string]any
	raw    []byte
}

func (e *apiEnv) async(ctx context.Context, method, path, body string) <-chan apiAnswer {
	ch := make(chan apiAnswer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, method, e.http.URL+path, bytes.NewBufferString(body))
		resp, err := e.http.Client().Do(req)
		if err != nil {
			ch <- apiAnswer{raw: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		ch <- apiAnswer{status: resp.StatusCode, body: m, raw: b}
	}()
	return ch
}

func apiRecv(t *testing.T, ch <-chan apiAnswer) apiAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5 s")
	}
	return apiAnswer{}
}

func apiNum(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("%s: not a number in %v", key, m)
	}
	return v
}
