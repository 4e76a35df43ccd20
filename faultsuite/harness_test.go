// Package faultsuite drives a real `gatectl serve` process through faults: a
// fault-injecting upstream (internal/faultupstream), hostile clients, a reload
// storm and kill -9 cycles (faults_test.go), and every bound issue 16 asked for:
// bad config and state files, floods of names, providers, sessions and
// subscribers, huge reservations, the API token, hostile ids (limits_test.go). Every test asserts bounded time (each call answered
// within a stated bound), bounded memory (the process's peak RSS), nothing lost
// (every call gets an answer; acknowledged state survives), and /healthz answering
// within 1 s throughout. -soak runs each longer; see docs/faults.md.
package faultsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/gatectl/gatectl/internal/testlog"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/faultupstream"
)

var soak = flag.Bool("soak", false, "run each fault longer (minutes, not seconds)")

// scale is how many times longer a soak runs each loop.
func scale() int {
	if *soak {
		return 20
	}
	return 1
}

// secretKey is gatectl's configured key for the fault upstream; it must never
// come back to a client.
const secretKey = "sk-faultsuite-secret-7f3a9c"

var gatectlBin string

func TestMain(m *testing.M) {
	flag.Parse()
	// The suite asserts wall-clock bounds (/healthz within 1 s throughout).
	// Under the race detector its own clients run several times slower (the
	// gatectl it drives is built without it, so nothing is checked for races
	// there), and beside the other packages on two cores the bounds failed for
	// that alone, about two runs of `go test -race ./...` in three. Like the
	// real-timing tests, it is measured without the detector: CI runs it in a
	// step of its own.
	if raceEnabled {
		fmt.Println("faultsuite: its wall-clock bounds are checked without the race detector: go test ./faultsuite/ (CI runs it in its own step)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "faultsuite-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gatectlBin = filepath.Join(dir, "gatectl")
	build := exec.Command("go", "build", "-o", gatectlBin, "./cmd/gatectl")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/gatectl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// upstream starts the fault upstream on loopback.
func upstream(t *testing.T) (*faultupstream.Handler, string) {
	t.Helper()
	h := &faultupstream.Handler{SlowDelay: 300 * time.Millisecond}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

// suiteConfig is the process's config: short deadlines, quick retries, budgets
// no fault reaches, and short client timeouts for the hostile clients. A storm's
// Retry-After is the provider's hint, whose retries spend retry.hintRounds (5 by
// default) rather than retry.rounds: both are 2 here, so every fault's attempts
// have one bound. extra is appended (top-level keys not already set).
func suiteConfig(upURL string, extra string) string {
	return fmt.Sprintf(`stateDir: state
providers:
  f: {kind: openai, baseURL: "%s/v1", apiKeyEnv: FAULTSUITE_KEY}
server: {headerTimeout: 1s, bodyTimeout: 5s, idleTimeout: 1s}
upstream: {firstByteTimeout: 500ms, responseTimeout: 2s, streamIdleTimeout: 500ms}
retry: {rounds: 2, hintRounds: 2, initialDelay: 50ms, maxDelay: 200ms, hintClamp: {min: 100ms, max: 1s}}
gate:
  defaults: {tpm: 100000000, rpm: 1000000}
%s`, upURL, extra)
}

// gate is a running `gatectl serve`.
type gate struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	cfg  string
	dir  string
	logs *testlog.Buffer // the process's log (stderr)
	done chan struct{}
}

// startGate runs gatectl serve on cfgText in dir (a new temp dir when ""); env
// ("NAME=value") is added to the process's environment.
func startGate(t *testing.T, dir, cfgText string, env ...string) *gate {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatectlBin, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	cmd.Env = append(append(os.Environ(), "FAULTSUITE_KEY="+secretKey), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, cmd: cmd, cfg: cfg, dir: dir, logs: logs, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(g.kill)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "gatectl listening on ") {
			t.Fatalf("gatectl serve's first line: %q", line)
		}
		g.base = strings.TrimSpace(strings.TrimPrefix(line, "gatectl listening on "))
	case <-time.After(30 * time.Second):
		t.Fatal("gatectl serve did not start within 30 s")
	}
	return g
}

// kill ends the process with SIGKILL and waits for it.
func (g *gate) kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
}

// peakRSS is the process's peak resident set (VmHWM) in bytes.
func (g *gate) peakRSS() int64 {
	g.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		g.t.Fatalf("reading the process status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	g.t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// healthProbe asks /healthz every 100 ms, each with a 1 s deadline, until stop;
// stop reports the slowest answer and fails the test on any miss.
func (g *gate) healthProbe() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var misses atomic.Int64
	var slowest atomic.Int64
	var lastErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: time.Second}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			t0 := time.Now()
			resp, err := client.Get(g.base + "/healthz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if d := time.Since(t0); d > time.Duration(slowest.Load()) {
				slowest.Store(int64(d))
			}
			if err != nil {
				misses.Add(1)
				lastErr.Store(err.Error())
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		g.t.Helper()
		cancel()
		wg.Wait()
		g.t.Logf("/healthz: slowest answer %s", time.Duration(slowest.Load()).Round(time.Millisecond))
		if n := misses.Load(); n > 0 {
			g.t.Errorf("/healthz missed its 1 s deadline %d times (last: %v)", n, lastErr.Load())
		}
	}
}

// answer is one client call's outcome.
type answer struct {
	status int
	header http.Header
	body   string
	took   time.Duration
	err    error
}

// client keeps enough idle connections for the suite's concurrent callers: the
// default transport keeps two per host, and a flood of thousands of calls would
// open (and leave in TIME_WAIT) a connection for nearly every one. It drops an
// idle connection sooner than the suite's server does (idleTimeout 1s): a POST
// sent on a connection the server is closing that instant fails with EOF and is
// not retried (seen once in CI, after the oversized case's long downloads).
var client = &http.Client{Transport: &http.Transport{
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 512,
	IdleConnTimeout:     500 * time.Millisecond,
}}

// call posts body to path with a deadline of bound; an error means no answer.
func (g *gate) call(bound time.Duration, path string, body io.Reader, headers ...string) answer {
	return g.do(http.MethodPost, bound, path, body, headers...)
}

// get is call's GET.
func (g *gate) get(bound time.Duration, path string, headers ...string) answer {
	return g.do(http.MethodGet, bound, path, nil, headers...)
}

// do sends method to path with a deadline of bound; headers are name, value
// pairs. An error means no answer.
func (g *gate) do(method string, bound time.Duration, path string, body io.Reader, headers ...string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, body)
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(t0)}
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), took: time.Since(t0), err: err}
}

func chat(model string, stream bool) io.Reader {
	m, _ := json.Marshal(model) // a name with a control byte stays valid JSON
	return strings.NewReader(fmt.Sprintf(`{"model":%s,"stream":%v,"messages":[{"role":"user","content":"hello"}]}`, m, stream))
}

const mib = 1 << 20

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// runGatectl runs the gatectl binary with args, env added to its environment,
// and waits at most bound for it to exit: it returns what it wrote (stdout and
// stderr together) and its exit code. A process still running at bound is
// killed and fails the test: every command it is used for must end by itself.
func runGatectl(t *testing.T, bound time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, gatectlBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("gatectl %s still running after %s; it wrote:\n%s", strings.Join(args, " "), bound, out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gatectl %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

// readiness is what /readyz says about reloads.
type readiness struct {
	Ready          bool   `json:"ready"`
	Reloads        uint64 `json:"reloads"`
	ReloadFailures uint64 `json:"reloadFailures"`
	LastError      string `json:"lastReloadError"`
}

// ready reads /readyz.
func (g *gate) ready() readiness {
	g.t.Helper()
	a := g.get(time.Second, "/readyz")
	var r readiness
	if a.err != nil || a.status != 200 {
		g.t.Fatalf("/readyz: %v %d %s", a.err, a.status, a.body)
	}
	if err := json.Unmarshal([]byte(a.body), &r); err != nil {
		g.t.Fatalf("/readyz: %v: %s", err, a.body)
	}
	return r
}

// waitReady polls /readyz every 50 ms until cond holds, for at most bound (the
// watcher's debounce is 250 ms, its polling backstop 5 s), and returns the last
// reading.
func (g *gate) waitReady(bound time.Duration, what string, cond func(readiness) bool) readiness {
	g.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		r := g.ready()
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: not within %s; /readyz says %+v", what, bound, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// load runs clients callers of the proxy without pause until the returned stop
// is called; stop reports how many calls were made and the ones that did not
// get a 200.
func (g *gate) load(clients int, model string) (stop func() (calls int, bad []answer)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls := 0
	var bad []answer
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprintf("load-%d", i)
			for {
				select {
				case <-done:
					return
				default:
				}
				a := g.call(10*time.Second, "/v1/chat/completions", chat(model, false), "X-Gate-Session", session)
				mu.Lock()
				calls++
				if a.err != nil || a.status != 200 {
					bad = append(bad, a)
				}
				mu.Unlock()
			}
		}()
	}
	return func() (int, []answer) {
		close(done)
		wg.Wait()
		return calls, bad
	}
}
