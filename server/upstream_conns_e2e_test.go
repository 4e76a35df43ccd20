package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// A flood of 500 concurrent sessions, ten calls each, reuses its upstream
// connections: the transport keeps as many idle per host as the server takes
// client connections, so a call that ends does not close a connection the next
// one must open again (at 256 idle per host, 870 were opened for 500 sessions).
func TestUpstreamConnectionsReusedUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 connections")
	}
	var inFlight, peak atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond) // an upstream that takes a moment: the calls overlap
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	}))
	cl := &countingListener{Listener: up.Listener}
	up.Listener = cl
	up.Start()
	defer up.Close()

	f := newPxFixture(t, fmt.Sprintf(`
providers:
  up: {kind: openai, baseURL: %q}
gate:
  pace: 0
  defaults: {tpm: 100000000, rpm: 1000000}
`, up.URL+"/v1"), false)

	const sessions, rounds = 500, 10
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions, MaxConnsPerHost: sessions}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions",
					strings.NewReader(`{"model":"up/m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Gate-Session", fmt.Sprintf("s%d", s))
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	conns := cl.n.Load()
	t.Logf("%d sessions × %d calls in %v: %d upstream connections (peak %d calls at once)", sessions, rounds, time.Since(start), conns, peak.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	if conns > sessions+sessions/10 {
		t.Fatalf("%d upstream connections for %d sessions (peak %d calls at once)", conns, sessions, peak.Load())
	}
}
