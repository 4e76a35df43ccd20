package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/gatectl/gatectl/config"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/snapshot"
)

// The proxy benchmarks: a mock upstream on loopback, gatectl in front of it on
// a real listener, an open-loop load at a fixed rate for a bounded time.
//
//	go test ./server -run '^$' -bench 'ProxyOverhead|ProxyStreamTTFB' -benchtime 1x
//
// GATECTL_BENCH_SECONDS (default 5) and GATECTL_BENCH_RPS (default 2000) tune the
// load. With testdata/bench/portkey installed (npm ci there), the same load also
// runs through Portkey's gateway on loopback, for a ratio.

const benchChat = `{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}}`

var benchBody = []byte(`{"model":"bench/m","max_tokens":16,"messages":[{"role":"user","content":"Say ok."}]}`)

func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchUpstream answers chat completions at once; streaming requests get three
// chunks, the first flushed immediately.
func benchUpstream(b *testing.B) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, chatChunk("o"), chatChunk("k"), usageChunk(20, 2), "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchChat)
	}))
	b.Cleanup(up.Close)
	return up
}

// overheadProbe measures, per request, the handler's time and the upstream's
// (from the round trip's start to the end of the upstream body), exactly.
type overheadProbe struct {
	base    http.RoundTripper
	mu      sync.Mutex
	samples []time.Duration
}

type probeKey struct{}

type probeSample struct{ upstream time.Duration }

func (p *overheadProbe) RoundTrip(r *http.Request) (*http.Response, error) {
	s, _ := r.Context().Value(probeKey{}).(*probeSample)
	t0 := time.Now()
	resp, err := p.base.RoundTrip(r)
	if err != nil || s == nil {
		return resp, err
	}
	resp.Body = &eofTimer{ReadCloser: resp.Body, t0: t0, s: s}
	return resp, nil
}

type eofTimer struct {
	io.ReadCloser
	t0   time.Time
	s    *probeSample
	done bool
}

func (e *eofTimer) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	if err != nil && !e.done {
		e.done = true
		e.s.upstream = time.Since(e.t0)
	}
	return n, err
}

func (p *overheadProbe) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &probeSample{}
		t0 := time.Now()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), probeKey{}, s)))
		total := time.Since(t0)
		p.mu.Lock()
		p.samples = append(p.samples, total-s.upstream)
		p.mu.Unlock()
	})
}

// benchGatectl starts gatectl in front of upURL with the probe in its transport.
func benchGatectl(b *testing.B, upURL string) (string, *overheadProbe, *Server) {
	dir := b.TempDir()
	cfg := fmt.Sprintf(`
log: {level: error}
providers:
  bench: {kind: openai, baseURL: %s/v1}
gate:
  defaults: {tpm: 2000000000, rpm: 100000000}
`, upURL)
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	probe := &overheadProbe{base: newTransport(config.DefaultMaxConnections)}
	srv := benchServer(b, path, dir, probe)
	hs := httptest.NewServer(probe.wrap(srv.Handler()))
	b.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL, probe, srv
}

// loadResult is one load run's client-side view.
type loadResult struct {
	lat     []time.Duration
	errors  int64
	sent    int
	elapsed time.Duration
}

// openLoop sends rps requests a second for dur (bounded: rps·dur requests),
// each on its own goroutine, at most 512 in flight.
func openLoop(client *http.Client, url string, headers map[string]string, rps int, dur time.Duration) loadResult {
	n := int(float64(rps) * dur.Seconds())
	interval := time.Second / time.Duration(rps)
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the open loop, not waiting for a result
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(benchBody))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				errs.Add(1)
				lat[i] = -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if resp.StatusCode != 200 {
				errs.Add(1)
			}
		}(i)
	}
	wg.Wait()
	return loadResult{lat: lat, errors: errs.Load(), sent: n, elapsed: time.Since(start)}
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	s = slices.DeleteFunc(s, func(d time.Duration) bool { return d < 0 })
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func benchClient() *http.Client {
	t := newTransport(config.DefaultMaxConnections)
	t.MaxIdleConnsPerHost = 512
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// BenchmarkProxyOverhead: gatectl's own time per non-streaming request (handler
// time minus the upstream round trip, measured in-process, exactly) at a fixed
// rate, and the client-side latency added compared with calling the upstream
// directly; optionally the same through Portkey's gateway.
func BenchmarkProxyOverhead(b *testing.B) {
	rps := benchEnvInt("GATECTL_BENCH_RPS", 2000)
	dur := time.Duration(benchEnvInt("GATECTL_BENCH_SECONDS", 5)) * time.Second
	up := benchUpstream(b)
	gate, probe, _ := benchGatectl(b, up.URL)
	client := benchClient()
	for i := 0; i < b.N; i++ {
		// warm the connection pools
		openLoop(client, up.URL+"/v1/chat/completions", nil, rps, 300*time.Millisecond)
		openLoop(client, gate+"/v1/chat/completions", nil, rps, 300*time.Millisecond)
		probe.mu.Lock()
		probe.samples = probe.samples[:0]
		probe.mu.Unlock()

		direct := openLoop(client, up.URL+"/v1/chat/completions", nil, rps, dur)
		via := openLoop(client, gate+"/v1/chat/completions", nil, rps, dur)
		probe.mu.Lock()
		over := slices.Clone(probe.samples)
		probe.mu.Unlock()
		rss := rssMB()

		b.ReportMetric(float64(pct(over, 0.50).Microseconds()), "overhead-p50-µs")
		b.ReportMetric(float64(pct(over, 0.99).Microseconds()), "overhead-p99-µs")
		b.ReportMetric(float64((pct(via.lat, 0.50) - pct(direct.lat, 0.50)).Microseconds()), "added-p50-µs")
		b.ReportMetric(float64((pct(via.lat, 0.99) - pct(direct.lat, 0.99)).Microseconds()), "added-p99-µs")
		b.ReportMetric(float64(via.sent)/via.elapsed.Seconds(), "gatectl-req/s")
		b.ReportMetric(rss, "rss-MB")
		b.Logf("rate %d req/s for %s (%d requests each)", rps, dur, via.sent)
		b.Logf("direct : p50 %s p99 %s errors %d", pct(direct.lat, 0.5), pct(direct.lat, 0.99), direct.errors)
		b.Logf("gatectl: p50 %s p99 %s errors %d; in-process overhead p50 %s p90 %s p99 %s (n=%d); process RSS %.1f MB (load generator and mock upstream included)",
			pct(via.lat, 0.5), pct(via.lat, 0.99), via.errors, pct(over, 0.5), pct(over, 0.9), pct(over, 0.99), len(over), rss)

		if pk := startPortkey(b); pk != "" {
			headers := map[string]string{"x-portkey-provider": "openai", "x-portkey-custom-host": up.URL + "/v1", "Authorization": "Bearer sk-bench"}
			openLoop(client, pk+"/v1/chat/completions", headers, rps, 300*time.Millisecond)
			// the same rate, then a rate Portkey sustains on this machine (both gateways measured again)
			for _, rate := range []int{rps, benchEnvInt("GATECTL_BENCH_PORTKEY_LOW_RPS", 200)} {
				d := openLoop(client, up.URL+"/v1/chat/completions", nil, rate, dur)
				g := openLoop(client, gate+"/v1/chat/completions", nil, rate, dur)
				p := openLoop(client, pk+"/v1/chat/completions", headers, rate, dur)
				gAdd50, gAdd99 := pct(g.lat, 0.50)-pct(d.lat, 0.50), pct(g.lat, 0.99)-pct(d.lat, 0.99)
				pAdd50, pAdd99 := pct(p.lat, 0.50)-pct(d.lat, 0.50), pct(p.lat, 0.99)-pct(d.lat, 0.99)
				b.Logf("at %d req/s: direct p50 %s p99 %s; gatectl p50 %s p99 %s (errors %d); portkey p50 %s p99 %s (errors %d, %.0f req/s achieved); added: gatectl %s / %s, portkey %s / %s; ratio p50 %.1f p99 %.1f",
					rate, pct(d.lat, 0.5), pct(d.lat, 0.99), pct(g.lat, 0.5), pct(g.lat, 0.99), g.errors, pct(p.lat, 0.5), pct(p.lat, 0.99), p.errors,
					float64(p.sent)/p.elapsed.Seconds(), gAdd50, gAdd99, pAdd50, pAdd99, float64(pAdd50)/float64(max(gAdd50, 1)), float64(pAdd99)/float64(max(gAdd99, 1)))
				b.ReportMetric(float64(pAdd50)/float64(max(gAdd50, 1)), fmt.Sprintf("portkey/gatectl-added-p50@%d", rate))
				b.ReportMetric(float64(pAdd99)/float64(max(gAdd99, 1)), fmt.Sprintf("portkey/gatectl-added-p99@%d", rate))
			}
		}
	}
}

// BenchmarkProxyStreamTTFB: time to the first streamed byte through gatectl
// against the upstream directly, at low concurrency.
func BenchmarkProxyStreamTTFB(b *testing.B) {
	up := benchUpstream(b)
	gate, _, _ := benchGatectl(b, up.URL)
	client := benchClient()
	body := []byte(`{"model":"bench/m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Say ok."}]}`)
	ttfb := func(url string, n int) []time.Duration {
		out := make([]time.Duration, n)
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						out[i] = -1
						continue
					}
					br := bufio.NewReader(resp.Body)
					_, _ = br.ReadByte()
					out[i] = time.Since(t0)
					_, _ = io.Copy(io.Discard, br)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		return out
	}
	n := 200 * benchEnvInt("GATECTL_BENCH_SECONDS", 5)
	for i := 0; i < b.N; i++ {
		ttfb(up.URL+"/v1/chat/completions", 100)
		ttfb(gate+"/v1/chat/completions", 100)
		direct := ttfb(up.URL+"/v1/chat/completions", n)
		via := ttfb(gate+"/v1/chat/completions", n)
		b.ReportMetric(float64((pct(via, 0.5) - pct(direct, 0.5)).Microseconds()), "ttfb-added-p50-µs")
		b.ReportMetric(float64((pct(via, 0.99) - pct(direct, 0.99)).Microseconds()), "ttfb-added-p99-µs")
		b.Logf("stream TTFB over %d requests (4 at a time): direct p50 %s p99 %s; gatectl p50 %s p99 %s",
			n, pct(direct, 0.5), pct(direct, 0.99), pct(via, 0.5), pct(via, 0.99))
	}
}

// startPortkey runs Portkey's gateway from testdata/bench/portkey on a free
// loopback port; "" when it is not installed.
func startPortkey(b *testing.B) string {
	script := filepath.Join("..", "testdata", "bench", "portkey", "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
	if _, err := os.Stat(script); err != nil {
		b.Log("portkey: not installed (npm ci in testdata/bench/portkey): skipped")
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		b.Log("portkey: node not installed: skipped")
		return ""
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", script, "--port="+strconv.Itoa(port), "--headless")
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	if err := cmd.Start(); err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url + "/"); err == nil {
			resp.Body.Close()
			return url
		}
		time.Sleep(100 * time.Millisecond) // polling a child process's start-up
	}
	b.Fatal("portkey did not start")
	return ""
}

// benchServer builds a Server for the benchmarks on the system clock.
func benchServer(b *testing.B, path, dir string, transport http.RoundTripper) *Server {
	m, err := newBenchManager(path)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Options{Manager: m, Clock: engine.SystemClock{}, StateDir: filepath.Join(dir, "state"), Transport: transport})
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

func newBenchManager(path string) (*snapshot.Manager, error) {
	return snapshot.NewManager(context.Background(), path, snapshot.Options{})
}
