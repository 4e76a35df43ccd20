package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/gatectl/gatectl/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// sharedWindow is the hidden limit's window (and the gate's): short, so a
// phase of a few windows takes seconds.
const sharedWindow = 4 * time.Second

// phaseResult is what the provider saw of one load phase.
type phaseResult struct {
	instances          int
	served, refused    int64
	utilization        float64 // tokens served per full window ÷ the hidden limit, over the steady windows
	clientOK, clientKO int64
	perBase            []int64 // calls served through each instance
	peak               int     // the most calls that reached the provider within peakSpan, after the first window
}

// peakSpan is the span the busiest moment of a phase is counted over: a
// tenth of the pace's third of a window.
const peakSpan = sharedWindow / 30

// arrivalLog records when each call reached the provider.
type arrivalLog struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivalLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		if len(a.at) < 100000 { // bounded: the load is
			a.at = append(a.at, time.Now())
		}
		a.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// peak is the most arrivals within any span, from skip after the first on.
func (a *arrivalLog) peak(skip, span time.Duration) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.at) == 0 {
		return 0
	}
	from := a.at[0].Add(skip)
	most, lo := 0, 0
	for hi, t := range a.at {
		for a.at[lo].Before(t.Add(-span)) {
			lo++
		}
		if !t.Before(from) {
			most = max(most, hi-lo+1)
		}
	}
	return most
}

// fairness is the largest share of the calls one instance got over its fair
// share (1 / instances), as a ratio: 1 is perfectly even.
func (r phaseResult) fairness() float64 {
	if r.clientOK == 0 {
		return 0
	}
	var most int64
	for _, n := range r.perBase {
		most = max(most, n)
	}
	return float64(most) / (float64(r.clientOK) / float64(len(r.perBase)))
}

func (r phaseResult) share429() float64 {
	if r.served+r.refused == 0 {
		return 0
	}
	return float64(r.refused) / float64(r.served+r.refused)
}

// startGatectl runs `gatectl serve` on cfg and returns its base URL; the process
// is killed when the test ends, if not before.
func startGatectl(t *testing.T, bin, cfg string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if os.Getenv("GATECTL_TEST_LOGS") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "gatectl listening on ") {
		t.Fatalf("first line %q: %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.TrimSpace(strings.TrimPrefix(line, "gatectl listening on ")), cmd
}

// writeSharedConfig writes a config for instances sharing redisURL under prefix.
func writeSharedConfig(t *testing.T, dir, name, upstream, redisURL, prefix string, shared bool) string {
	t.Helper()
	p := filepath.Join(dir, name)
	text := fmt.Sprintf(`stateDir: %s
providers:
  local: {kind: openai, baseURL: "%s/v1"}
gate:
  window: %s
  maxWait: 30s
  learn: false
  countGuard: 0.02
  defaults: {tpm: 20000, rpm: 1000}
`, filepath.Join(dir, "state-"+name), upstream, sharedWindow)
	if shared {
		text += fmt.Sprintf("store:\n  redis: {url: %q, keyPrefix: %q, timeout: 200ms, onError: failOpen}\n", redisURL, prefix)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runLoad sends calls from clients goroutines, round-robin across bases, until
// d has passed; during runs alongside (the Redis kill).
// Each client stays on one instance (c mod the instances), as behind a load
// balancer with session affinity, so perBase shows how the instances shared
// the quota.
func runLoad(t *testing.T, bases []string, clients int, d time.Duration, during func()) (ok, ko int64, perBase []int64) {
	t.Helper()
	prompt := strings.Repeat("tokens for the shared gate ", 60) // ≈ 400 prompt tokens
	body := `{"model":"local/echo-1","max_tokens":200,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	hc := &http.Client{Timeout: 60 * time.Second}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	var okN, koN atomic.Int64
	per := make([]atomic.Int64, len(bases))
	var firstErr atomic.Value
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop) && i < 10000; i++ {
				base := bases[c%len(bases)]
				resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					koN.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					koN.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				okN.Add(1)
				per[c%len(bases)].Add(1)
			}
		}()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		t.Logf("first failed call: %v", e)
	}
	for i := range per {
		perBase = append(perBase, per[i].Load())
	}
	return okN.Load(), koN.Load(), perBase
}

// phase runs the load through n fresh instances sharing one Redis (under their
// own key prefix) in front of a fresh provider with a hidden limit.
// hooks are optional extras of a phase: during runs alongside the load, after
// once it is over, before the instances stop.
type hooks struct {
	during func(bases []string)
	after  func(bases []string)
}

// shared false runs the instances without store.redis: the control that shows
// what the test would catch.
func phase(t *testing.T, bin, dir string, rs *redistest.Server, n int, shared bool, h hooks) phaseResult {
	t.Helper()
	fake := fakeprovider.New(fakeprovider.Config{Tokens: 20000, Window: sharedWindow, RetryAfter: time.Second,
		Latency: 20 * time.Millisecond, OutputMedian: 140, Seed: uint64(n)})
	arrivals := &arrivalLog{}
	up := httptest.NewServer(arrivals.wrap(fake))
	defer up.Close()
	prefix := fmt.Sprintf("e2e%d-%d:", n, time.Now().UnixNano())
	var bases []string
	var procs []*exec.Cmd
	for i := range n {
		cfg := writeSharedConfig(t, dir, fmt.Sprintf("%s-i%d.yaml", strings.TrimSuffix(prefix, ":"), i), up.URL, rs.URL(), prefix, shared)
		base, cmd := startGatectl(t, bin, cfg)
		bases, procs = append(bases, base), append(procs, cmd)
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()
	fake.SetEpoch(time.Now())
	var hook func()
	if h.during != nil {
		hook = func() { h.during(bases) }
	}
	const windows = 3
	ok, ko, perBase := runLoad(t, bases, 12, windows*sharedWindow, hook)
	st := fake.Stats()
	r := phaseResult{instances: n, served: st.Served, refused: st.Refused, clientOK: ok, clientKO: ko, perBase: perBase,
		peak: arrivals.peak(sharedWindow, peakSpan)}
	// Utilization over the full windows after the first (the learner's first window).
	var tokens int64
	steady := 0
	for i, w := range st.Windows {
		if idx := st.FirstWindow + i; idx >= 1 && idx < windows {
			tokens += w.Tokens
			steady++
		}
	}
	if steady > 0 {
		r.utilization = float64(tokens) / float64(steady) / float64(st.Limit)
	}
	var storeErrors []string
	for _, b := range bases {
		storeErrors = append(storeErrors, metricLine(t, b, "gatectl_store_errors_total"))
	}
	var late []string
	for _, off := range st.Refusals {
		late = append(late, (off % sharedWindow).Round(time.Millisecond).String())
	}
	t.Logf("store errors per instance: %v; calls per instance %v (most/fair %.2f); 429s at window offsets %v", storeErrors, perBase, r.fairness(), late)
	if h.after != nil {
		h.after(bases)
	}
	t.Logf("shared=%v %d instance(s): %d calls ok, %d failed; provider served %d, refused %d (429 share %.3f); utilization %.3f; at most %d calls within %v",
		shared, n, ok, ko, r.served, r.refused, r.share429(), r.utilization, r.peak, peakSpan)
	return r
}

// Two and three `gatectl serve` processes sharing one Redis behave as one gate:
// against one provider with a hidden limit, the load split across them gets
// the 429s, the utilization and the pace one instance gets on the same load,
// and no call is lost. Then Redis dies mid-load: with failOpen no call fails, and when it
// returns the instances share again without a restart.
func TestSharedGateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	testenv.RealTiming(t)
	rs := redistest.Start(t)
	dir := t.TempDir()
	bin := buildBinary(t, dir, "./cmd/gatectl", "gatectl")

	one := phase(t, bin, dir, rs, 1, true, hooks{})
	if one.clientKO != 0 || one.clientOK == 0 {
		t.Fatalf("one instance: %d calls failed, %d succeeded", one.clientKO, one.clientOK)
	}
	for _, n := range []int{2, 3} {
		r := phase(t, bin, dir, rs, n, true, hooks{after: crossSettle(t)})
		if r.clientKO != 0 {
			t.Errorf("%d instances: %d calls lost", n, r.clientKO)
		}
		if d := r.share429() - one.share429(); d > 0.10 || d < -0.10 {
			t.Errorf("%d instances: 429 share %.3f, one instance %.3f: more than 10 points apart", n, r.share429(), one.share429())
		}
		if ratio := r.utilization / one.utilization; ratio < 0.9 || ratio > 1.1 {
			t.Errorf("%d instances: utilization %.3f is %.2f× one instance's %.3f (want within 10%%)", n, r.utilization, ratio, one.utilization)
		}
		// The instances pace the key as one does: each at its share of the
		// pace. (Each at the whole pace, two let 9–10 calls reach the provider
		// within 133 ms and three 14, where one lets 5 — in each of six runs,
		// the figure the bound takes when one instance measured less.)
		if most := max(one.peak, 5)*3/2 + 1; r.peak > most {
			t.Errorf("%d instances: %d calls reached the provider within %v (one instance: %d), want at most %d: they do not pace as one", n, r.peak, peakSpan, one.peak, most)
		}
		// Fairness across instances is approximate; an instance starved or
		// hogging the quota is not.
		if f := r.fairness(); f > 1.5 {
			t.Errorf("%d instances with equal load: calls per instance %v, one got %.2f× its fair share", n, r.perBase, f)
		}
	}

	// The control: the same two instances without the shared store overspend.
	if alone := phase(t, bin, dir, rs, 2, false, hooks{}); alone.share429() < one.share429()+0.15 {
		t.Errorf("two unshared instances: 429 share %.3f, barely above one instance's %.3f: the comparison cannot tell", alone.share429(), one.share429())
	}

	// Redis dies a window into the load and returns two windows later.
	r := phase(t, bin, dir, rs, 2, true, hooks{
		during: func(bases []string) {
			time.Sleep(sharedWindow)
			rs.Kill()
			time.Sleep(sharedWindow)
			for _, b := range bases {
				if st := readyStore(t, b); st != "degraded" {
					t.Errorf("%s /readyz store state %q with Redis down, want degraded", b, st)
				}
			}
			rs.Restart()
		},
		after: func(bases []string) {
			// The shared view resumed without a restart: both instances report
			// ok and reserve in Redis again.
			deadline := time.Now().Add(10 * time.Second)
			for _, b := range bases {
				for readyStore(t, b) != "ok" {
					if time.Now().After(deadline) {
						t.Fatalf("%s did not recover from the Redis restart within 10s", b)
					}
					time.Sleep(50 * time.Millisecond) // polling real processes
				}
			}
			ok, ko, perBase := runLoad(t, bases, 2, time.Second, nil)
			// The shared view first, while the load's calls are all still in the
			// window (a status command started under a loaded CI machine took long
			// enough for the oldest to leave it).
			var st struct {
				Store struct {
					Shared []struct {
						Requests int64 `json:"requests"`
					} `json:"shared"`
				} `json:"store"`
			}
			resp, err := http.Get(bases[0] + "/gate/v1/status")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			err = json.NewDecoder(resp.Body).Decode(&st)
			// Both instances' calls: more than the busier instance made alone.
			busiest := slices.Max(perBase)
			if err != nil || len(st.Store.Shared) != 1 || st.Store.Shared[0].Requests <= busiest {
				t.Fatalf("/gate/v1/status store.shared %+v (%v): want more than one instance's requests since the restart (> %d of %d)", st.Store, err, busiest, ok)
			}
			c := redis.NewClient(&redis.Options{Addr: rs.Addr})
			defer c.Close()
			keys, _ := c.Keys(context.Background(), "*{local/echo-1}:w").Result()
			if ko != 0 || ok == 0 || len(keys) == 0 {
				t.Fatalf("after the restart: %d ok, %d failed, window keys %v: the shared view did not resume", ok, ko, keys)
			}
			// gatectl status shows the shared view.
			out, err := exec.Command(bin, "status", "--addr", bases[0]).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "shared store: redis ok") || !strings.Contains(string(out), "MODEL (ALL INSTANCES)") {
				t.Fatalf("gatectl status: %v\n%s", err, out)
			}
		},
	})
	if r.clientKO != 0 {
		t.Errorf("Redis killed mid-load with failOpen: %d calls failed", r.clientKO)
	}
}

// crossSettle admits a call through the decision API on the first instance,
// reports its send and settles it on the last: the send is recorded on the
// shared entry, the entry is settled once, the issuing instance lets go of it,
// and a second settle or a send report anywhere is refused. A second call,
// abandoned on the last, keeps its reservation.
func crossSettle(t *testing.T) func(bases []string) {
	return func(bases []string) {
		t.Helper()
		a, b := bases[0], bases[len(bases)-1]
		var adm struct {
			Ticket   string `json:"ticket"`
			Admitted bool   `json:"admitted"`
		}
		code := postJSONTo(t, a+"/gate/v1/admit", `{"provider":"local","model":"echo-1","session":"cross","inputTokens":100,"maxTokens":100,"maxWaitMs":20000}`, &adm)
		if code != 200 || !adm.Admitted || !strings.HasPrefix(adm.Ticket, "gts_") {
			t.Fatalf("admit on %s: %d %+v, want a shared ticket", a, code, adm)
		}
		var sent struct {
			Ticket   string `json:"ticket"`
			Provider string `json:"provider"`
			Model    string `json:"model"`
		}
		sentBody := `{"ticket":"` + adm.Ticket + `"}`
		if code := postJSONTo(t, b+"/gate/v1/sent", sentBody, &sent); code != 200 || sent.Ticket != adm.Ticket || sent.Provider != "local" || sent.Model != "echo-1" {
			t.Fatalf("sent on %s of a ticket %s issued: %d %+v", b, a, code, sent)
		}
		var st struct {
			Settled        bool  `json:"settled"`
			ReservedTokens int64 `json:"reservedTokens"`
		}
		body := `{"ticket":"` + adm.Ticket + `","usage":{"inputTokens":90,"outputTokens":10}}`
		if code := postJSONTo(t, b+"/gate/v1/settle", body, &st); code != 200 || !st.Settled || st.ReservedTokens != 200 {
			t.Fatalf("settle on %s of a ticket %s issued: %d %+v", b, a, code, st)
		}
		deadline := time.Now().Add(5 * time.Second)
		for inFlight(t, a) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds the ticket %s settled", a, b)
			}
			time.Sleep(20 * time.Millisecond) // polling a real process
		}
		for _, base := range []string{a, b} {
			if code := postJSONTo(t, base+"/gate/v1/settle", body, nil); code != 404 {
				t.Fatalf("second settle on %s: %d, want 404", base, code)
			}
			if code := postJSONTo(t, base+"/gate/v1/sent", sentBody, nil); code != 404 {
				t.Fatalf("sent on %s after the settle: %d, want 404", base, code)
			}
		}
		// A call sent and abandoned (its harness cancelled it) on another
		// instance keeps its reservation: the provider had it. The issuing
		// instance lets go of its record.
		code = postJSONTo(t, a+"/gate/v1/admit", `{"provider":"local","model":"echo-1","session":"cross","inputTokens":100,"maxTokens":100,"maxWaitMs":20000}`, &adm)
		if code != 200 || !adm.Admitted {
			t.Fatalf("second admit on %s: %d %+v", a, code, adm)
		}
		var ab struct {
			Abandoned      bool  `json:"abandoned"`
			ReservedTokens int64 `json:"reservedTokens"`
			UsedTokens     int64 `json:"usedTokens"`
		}
		if code := postJSONTo(t, b+"/gate/v1/settle", `{"ticket":"`+adm.Ticket+`","abandon":true}`, &ab); code != 200 || !ab.Abandoned || ab.UsedTokens != 200 || ab.ReservedTokens != 200 {
			t.Fatalf("abandon on %s of a ticket %s issued: %d %+v, want the 200 reserved kept", b, a, code, ab)
		}
		deadline = time.Now().Add(5 * time.Second)
		for inFlight(t, a) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds the ticket %s abandoned", a, b)
			}
			time.Sleep(20 * time.Millisecond) // polling a real process
		}
	}
}

func postJSONTo(t *testing.T, url, body string, out any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// inFlight is what the instance at base holds in flight on local/echo-1.
func inFlight(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/gate/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Models []struct {
			Model    string `json:"model"`
			InFlight int    `json:"inFlight"`
		} `json:"models"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	for _, m := range st.Models {
		if m.Model == "echo-1" {
			return m.InFlight
		}
	}
	return -1
}

// metricLine is the value of an unlabelled metric at base/metrics.
func metricLine(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return "?"
}

// readyStore is the store state /readyz reports.
func readyStore(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Store struct {
			State string `json:"state"`
		} `json:"store"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r.Store.State
}
