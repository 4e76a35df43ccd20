package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
// A 2 s window, so fifteen windows fit in 30 s: the network's milliseconds
// weigh more against it than against a minute's. CI runs it in the real-timing
// step, without the race detector.
func TestGateRequestProbeE2E(t *testing.T) {
	testenv.RealTiming(t)
	const (
		window    = 2 * time.Second
		limit     = 20 // the provider's hidden requests per window
		start     = limit / 2
		sessions  = 10
		duration  = 30 * time.Second
		windows   = int(duration / window)
		converged = 10 // the bound, in windows
	)
	prov := fakeprovider.New(fakeprovider.Config{
		Tokens: 100_000_000, Window: window, Requests: limit, RetryAfter: window, Unstated: true,
		Latency: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, PerOutputToken: 100 * time.Microsecond,
		OutputMedian: timingOutputMedian, OutputSigma: timingOutputSigma, Seed: 1,
	})
	up := httptest.NewServer(prov)
	t.Cleanup(up.Close)
	f := newPxFixtureWith(t, fmt.Sprintf(`
providers:
  fake: {kind: openai, baseURL: %s/v1}
gate:
  window: %s
  defaults: {tpm: 100000000, rpm: %d}
`, up.URL, window, start), nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * sessions}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	begin := time.Now()
	prov.SetEpoch(begin)
	stopAt := begin.Add(duration)
	ctx, cancel := context.WithDeadline(context.Background(), stopAt.Add(timingDrain))
	defer cancel()
	const maxCallsPerSession = 2000 // a bound on each loop, far above what 30 s allows
	var (
		mu            sync.Mutex
		ok, lost, cut int
		harness       []string
		wg            sync.WaitGroup
	)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			session := fmt.Sprintf("r%02d", s)
			for i := 0; i < maxCallsPerSession && time.Now().Before(stopAt); i++ {
				out, detail := timingCall(ctx, client, f.url, session, i, timingBody(session, i, rng, true))
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

	st := prov.Stats()
	var series []string
	first := -1 // the first window served at ≥ 90% of the limit
	var after, afterWindows int64
	for i, w := range st.Windows {
		if i >= windows {
			break
		}
		series = append(series, fmt.Sprintf("%d/%d", w.Requests, w.Refused))
		if first < 0 && w.Requests >= limit*9/10 {
			first = i
		}
		if i > converged {
			after += w.Requests
			afterWindows++
		}
	}
	util := float64(after) / float64(limit*max(afterWindows, 1))
	t.Logf("request probe over real HTTP: %d sessions, %s windows, hidden limit %d requests a window, configured %d: %d ok, %d lost, %d cut; 429s %d (at %v); first window at ≥ 90%% of the limit: %d; after window %d: %.3f of the limit; rpm budget at the end %d",
		sessions, window, limit, start, ok, lost, cut, st.Refused, st.Refusals, first, converged, util, f.status("fake", "gpt-fake").RPMBudget)
	t.Logf("requests served / 429s per window: %s", strings.Join(series, " "))
	if len(harness) > 0 || st.BadRequests > 0 {
		t.Fatalf("%d harness errors, %d unreadable requests at the provider: %s", len(harness), st.BadRequests, strings.Join(harness[:min(len(harness), 5)], "; "))
	}
	if lost > 0 {
		t.Errorf("%d calls lost, want none", lost)
	}
	if st.Refused > 2 {
		t.Errorf("%d 429s, want at most 2: the refused step, and one that sets the ceiling", st.Refused)
	}
	if first < 0 || first > converged {
		t.Errorf("first window at ≥ 90%% of the limit: %d, want within %d (-1: never)", first, converged)
	}
	if util < 0.90 {
		t.Errorf("%.3f of the limit served after window %d, want ≥ 0.90", util, converged)
	}
}
