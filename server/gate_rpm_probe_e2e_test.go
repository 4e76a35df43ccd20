package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/internal/testenv"
)

// The request probe over real sockets: a workload bound by requests, the
// request limit configured at half the truth, a fake provider on 127.0.0.1 that
// refuses past its hidden request limit (a sliding window on arrival; its 429s
// name the request limit, no figure). The configured RPM used to be the
// ceiling: the gate served half the limit for as long as it ran. The issue's
// targets for a start at half the truth: converged within 10 windows; here also
// nothing lost, at most two 429s (the refused step, and one that sets the
// ceiling), and ≥ 90% of the limit in the windows after the tenth.
//
// Capped, the same load with maxRpm below the truth: the probe stops at the
// cap, no window the provider counts holds more, and nothing is refused.
//
// Unnamed, both limits configured at twice the truth and 429s that name
// neither ("Rate limit exceeded", as a bare gateway says): the targets
// for a start at 2× without headers — at most 3 429s, none after the first 3
// windows, ≥ 90% of the limit once learned. The ten sessions start at one
// instant against a budget of twice the limit, and the calls admitted before
// the first 429 comes back are refused with it: two of the three 429s measured
// (2–3 in five runs) fall in the first 40 ms. The first 429 comes at half the
// request budget and a sliver of the token one; read as tokens, it set a token
// trigger that held the requests far under the limit. One call in ten asks
// max_tokens 4096 (as in the simulator's workloads), whose reservation a token
// budget of twenty small calls cannot hold beside the others: read as tokens,
// 0.917 of the limit once learned; read as requests, 1.000 — hence a floor
// of 0.95 here, above the 0.90.
//
// A 2 s window, so fifteen windows fit in 30 s: the network's milliseconds
// weigh more against it than against a minute's. At the request limit exactly,
// the count guard is 10–40 ms there (300 ms at a minute), and a loaded machine
// that counts a window's first call later than that takes a 429 after the
// limit was learned (`.ci/run` of 3c177f7 and of 71d7f00). So, as in
// TestGateTimingE2E, a target missed is logged ("target missed: …") and a
// result beyond the regression floor fails: three 429s over the target,
// convergence two windows late, ten points of utilization under the target
// (less a window for each late 429), three 429s after the quiet window, any
// call lost, a window above maxRpm. CI runs it in the real-timing step,
// without the race detector.
func TestGateRequestProbeE2E(t *testing.T) {
	testenv.RealTiming(t)
	const (
		window = 2 * time.Second
		limit  = 20          // the provider's hidden requests per window
		tokens = 100_000_000 // its hidden tokens per window: never the binding limit
	)
	type probeCase struct {
		name       string
		start, tpm int  // the configured rpm and tpm
		maxRPM     int  // 0: no cap
		unnamed    bool // its 429s name no limit
		bigEvery   int  // every so many calls of a session asks max_tokens 4096; 0: none
		duration   time.Duration
		converged  int // windows: the bound, or the climb to the cap
		max429s    int64
		quietAfter int // no 429 after this window; -1: not checked
		minUtil    float64
	}
	// Each case gets its own provider and server, and their loads run side by
	// side, as TestGateTimingE2E's do: ten sessions of small calls each, a
	// light load beside that one's (it took 70 s one after another).
	type probeRun struct {
		c             probeCase
		prov          *fakeprovider.Provider
		f             *pxFixture
		target        int
		caps          string
		ok, lost, cut int
		harness       []string
	}
	var runs []*probeRun
	for _, c := range []probeCase{
		{name: "HalfTheTruth", start: limit / 2, tpm: tokens, duration: 30 * time.Second, converged: 10, max429s: 2, quietAfter: -1, minUtil: 0.90},
		{name: "CappedBelowTheTruth", start: limit / 2, tpm: tokens, maxRPM: 14, duration: 20 * time.Second, converged: 6, max429s: 0, quietAfter: -1, minUtil: 0.90},
		{name: "UnnamedTwiceTheTruth", start: 2 * limit, tpm: 2 * tokens, unnamed: true, bigEvery: 10, duration: 20 * time.Second, converged: 3, max429s: 3, quietAfter: 3, minUtil: 0.95},
	} {
		{
			target := limit
			caps, guard := "", ""
			if c.maxRPM > 0 {
				// The provider counts each call 5–10 ms after the gate admits it,
				// and the proxy's own delay varies under load: a count guard of
				// 2% of the window (the most it allows) keeps a call counted
				// 40 ms past it, so no window the provider counts holds more
				// than the gate's.
				target, caps = c.maxRPM, fmt.Sprintf(", maxRpm: %d", c.maxRPM)
				guard = "\n  countGuard: 0.02"
			}
			prov, f := fakeProviderFixture(t, fakeprovider.Config{
				Tokens: tokens, Window: window, Requests: limit, RetryAfter: window, Unstated: true, Unnamed: c.unnamed,
				Latency: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, PerOutputToken: 100 * time.Microsecond,
				OutputMedian: timingOutputMedian, OutputSigma: timingOutputSigma, Seed: 1,
			}, fmt.Sprintf(`
gate:
  window: %s%s
  defaults: {tpm: %d, rpm: %d%s}
`, window, guard, c.tpm, c.start, caps))
			runs = append(runs, &probeRun{c: c, prov: prov, f: f, target: target, caps: caps})
		}
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.ok, r.lost, r.cut, r.harness = runRequestLoad(t, r.f, r.prov, 10, r.c.duration, r.c.bigEvery)
		}()
	}
	wg.Wait()
	for _, r := range runs {
		c, prov, f, target, caps, ok, lost, cut := r.c, r.prov, r.f, r.target, r.caps, r.ok, r.lost, r.cut
		t.Run(c.name, func(t *testing.T) {
			if len(r.harness) > 0 {
				t.Fatalf("%d harness errors: %s", len(r.harness), strings.Join(r.harness[:min(len(r.harness), 5)], "; "))
			}
			st := prov.Stats()
			var series []string
			first := -1 // the first window served at ≥ 90% of the target
			var after, afterWindows, most, late int64
			for i, w := range st.Windows {
				if i >= int(c.duration/window) {
					break
				}
				series = append(series, fmt.Sprintf("%d/%d", w.Requests, w.Refused))
				most = max(most, w.Requests)
				if first < 0 && 10*w.Requests >= 9*int64(target) {
					first = i
				}
				if i > c.converged {
					after += w.Requests
					afterWindows++
				}
				if c.quietAfter >= 0 && i >= c.quietAfter {
					late += w.Refused
				}
			}
			util := float64(after) / float64(int64(target)*max(afterWindows, 1))
			t.Logf("request probe over real HTTP: %s windows, hidden limit %d requests a window, configured %d%s: %d ok, %d lost, %d cut; 429s %d (at %v); first window at ≥ 90%% of %d: %d; after window %d: %.3f of it; most in a window %d; rpm budget at the end %d",
				window, limit, c.start, caps, ok, lost, cut, st.Refused, st.Refusals, target, first, c.converged, util, most, f.status("fake", "gpt-fake").RPMBudget)
			t.Logf("requests served / 429s per window: %s", strings.Join(series, " "))
			if st.BadRequests > 0 {
				t.Fatalf("%d unreadable requests at the provider", st.BadRequests)
			}
			if lost > 0 {
				t.Errorf("%d calls lost, want none", lost)
			}
			if c.maxRPM > 0 && most > int64(c.maxRPM) {
				t.Errorf("a window the provider counted held %d requests, above maxRpm %d", most, c.maxRPM)
			}
			// As in TestGateTimingE2E: a target missed is logged, a result
			// beyond the regression floor fails.
			var missed []string
			if st.Refused > c.max429s {
				missed = append(missed, fmt.Sprintf("%d 429s, want at most %d", st.Refused, c.max429s))
			}
			if first < 0 || first > c.converged {
				missed = append(missed, fmt.Sprintf("first window at ≥ 90%% of %d: %d, want within %d (-1: never)", target, first, c.converged))
			}
			if util < c.minUtil {
				missed = append(missed, fmt.Sprintf("%.3f of %d served after window %d, want ≥ %.2f", util, target, c.converged, c.minUtil))
			}
			if late > 0 {
				missed = append(missed, fmt.Sprintf("%d 429s from window %d on, want none", late, c.quietAfter))
			}
			reportMisses(t, c.name, missed)
			if st.Refused > c.max429s+3 {
				t.Errorf("%d 429s, far over the target %d: the gate lets cohorts through again", st.Refused, c.max429s)
			}
			if first < 0 || first > c.converged+2 {
				t.Errorf("first window at ≥ 90%% of %d: %d, want within %d, the target's %d and two more (-1: never)", target, first, c.converged+2, c.converged)
			}
			// Each 429 after the quiet window (at most two, below) costs its
			// cooldown, a window here (Retry-After is the window).
			floor := c.minUtil - 0.1 - float64(late)/float64(max(afterWindows, 1))
			if util < floor {
				t.Errorf("%.3f of %d served after window %d, under the floor %.2f", util, target, c.converged, floor)
			}
			if late > 2 {
				t.Errorf("%d 429s from window %d on: the gate did not learn the limit", late, c.quietAfter)
			}
		})
	}
}

// runRequestLoad runs closed-loop sessions of small calls through f for
// duration (every bigEvery-th asking max_tokens 4096, when bigEvery > 0) and
// counts how they ended, with the harness's own errors (the caller fails on
// them: it may run on another goroutine than the test's).
func runRequestLoad(t *testing.T, f *pxFixture, prov *fakeprovider.Provider, sessions int, duration time.Duration, bigEvery int) (ok, lost, cut int, harness []string) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * sessions}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	begin := time.Now()
	prov.SetEpoch(begin)
	stopAt := begin.Add(duration)
	ctx, cancel := context.WithDeadline(context.Background(), stopAt.Add(timingDrain))
	defer cancel()
	const maxCallsPerSession = 2000 // a bound on each loop, far above what the run allows
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			session := fmt.Sprintf("r%02d", s)
			for i := 0; i < maxCallsPerSession && time.Now().Before(stopAt); i++ {
				body := timingBody(session, i, rng, true)
				if bigEvery > 0 && i%bigEvery == bigEvery-1 {
					asked := []byte(fmt.Sprintf(`"max_tokens":%d`, timingMaxTokens))
					if !bytes.Contains(body, asked) {
						mu.Lock()
						harness = append(harness, "the body does not ask max_tokens as expected: "+string(body[:min(len(body), 80)]))
						mu.Unlock()
						return
					}
					body = bytes.Replace(body, asked, []byte(`"max_tokens":4096`), 1)
				}
				out, detail := timingCall(ctx, client, f.url, session, i, body)
				mu.Lock()
				switch out {
				case callOK:
					ok++
				case callLost:
					lost++
				case callCut:
					cut++
				case callHarness:
					harness = append(harness, detail)
				}
				mu.Unlock()
				if out == callCut {
					return
				}
			}
		}()
	}
	wg.Wait()
	return ok, lost, cut, harness
}
