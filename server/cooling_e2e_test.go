package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
)

// TestLongPauseOverRealSockets: a provider with a hidden limit answers its
// 429s with Retry-After: 250 — a pause longer than gate.maxWait (120 s) — and
// eight sessions keep calling for 3 s through gatectl, each backing off 100
// ms after a 429 as an SDK would. The calls that met the first 429 (those in
// flight with it) are the provider's last: every later call is answered by
// gatectl with the pause's end, and the provider sees nothing more. Before,
// each later call failed open at once into the pause: a 429 at the provider
// for every call of every session.
func TestLongPauseOverRealSockets(t *testing.T) {
	const (
		sessions = 8
		run      = 3 * time.Second
	)
	// Configured at twice the truth: the gate lets more in than the provider
	// takes, and a 429 comes within the first second.
	prov, f := pausingProvider(t, 4000, 10*time.Second, 250*time.Second, `
gate:
  window: 10s
  defaults: {tpm: 8000, rpm: 100000}
`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions}}
	start := time.Now()
	prov.SetEpoch(start)
	var mu sync.Mutex
	var ok, refusedHere, other int
	var afters []string
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			session := fmt.Sprintf("s%d", s)
			for i := 0; i < 200 && time.Since(start) < run; i++ {
				body := timingBody(session, i, rng, false)
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Gate-Session", session)
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					other++
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch {
				case resp.StatusCode == http.StatusOK:
					ok++
				case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(b), "nothing was sent"):
					refusedHere++
					afters = append(afters, resp.Header.Get("Retry-After"))
				default:
					other++
				}
				mu.Unlock()
				if resp.StatusCode != http.StatusOK {
					time.Sleep(100 * time.Millisecond) // the client's own backoff
				}
			}
		}()
	}
	wg.Wait()
	st := prov.Stats()
	t.Logf("over %s: %d answered, %d refused by gatectl (never sent), %d others (the calls that met a 429 at the provider); the provider served %d and refused %d, at %v",
		run, ok, refusedHere, other, st.Served, st.Refused, st.Refusals)
	if st.Refused == 0 || refusedHere < 10*sessions {
		t.Fatalf("the provider refused %d and gatectl %d: the run did not reach the pause", st.Refused, refusedHere)
	}
	// Only the calls in flight with the first 429 can meet one.
	if last, first := st.Refusals[len(st.Refusals)-1], st.Refusals[0]; st.Refused > sessions || last-first > time.Second {
		t.Fatalf("the provider refused %d calls over %s (at %v): calls were sent into its pause", st.Refused, last-first, st.Refusals)
	}
	for _, a := range afters {
		if n, _ := strconv.Atoi(a); n < 245 || n > 251 { // 250 s from a later 429 of the same cohort, rounded up
			t.Fatalf("Retry-After %q on a call gatectl answered, want the pause's end (≤ 251 s)", a)
		}
	}
}

// pausingProvider starts a fake provider with a hidden limit of tokens a
// window, whose 429s ask for retryAfter (short answers, a few milliseconds
// away), and gatectl in front of it as provider "fake", with config's other
// sections.
func pausingProvider(t *testing.T, tokens int64, window, retryAfter time.Duration, config string) (*fakeprovider.Provider, *pxFixture) {
	t.Helper()
	return fakeProviderFixture(t, fakeprovider.Config{Tokens: tokens, Window: window, RetryAfter: retryAfter,
		Latency: 2 * time.Millisecond, Jitter: 2 * time.Millisecond, PerOutputToken: 100 * time.Microsecond,
		OutputMedian: 100, OutputSigma: 0.5, Seed: 1}, config)
}

// fakeProviderFixture starts a fake provider of pc on 127.0.0.1 and gatectl in
// front of it as provider "fake", with config's other sections.
func fakeProviderFixture(t *testing.T, pc fakeprovider.Config, config string) (*fakeprovider.Provider, *pxFixture) {
	t.Helper()
	prov := fakeprovider.New(pc)
	up := httptest.NewServer(prov)
	t.Cleanup(up.Close)
	return prov, newPxFixtureWith(t, fmt.Sprintf("providers:\n  fake: {kind: openai, baseURL: %s/v1}\n", up.URL)+config, nil)
}

// TestQueuedCallsAnsweredWhenALongPauseStartsOverRealSockets: twenty sessions
// send one call each at once through a gate configured at twice the truth, so
// that most of them queue in the gate; the calls it lets through meet a 429
// asking for 250 s. The queued calls would be let through at gate.maxWait
// (120 s) with more than maxWait of the pause left, which gatectl never sends
// into: each is answered as the 429 comes back, with the pause's end, not two
// minutes later. (Before, they hung until maxWait's last tenth; the clients
// here give up after 10 s.)
func TestQueuedCallsAnsweredWhenALongPauseStartsOverRealSockets(t *testing.T) {
	const sessions = 20
	// Answers take 300 ms: every call reaches the gate, and the queue forms,
	// before the first 429 comes back.
	prov, f := fakeProviderFixture(t, fakeprovider.Config{Tokens: 4000, Window: 10 * time.Second, RetryAfter: 250 * time.Second,
		Latency: 300 * time.Millisecond, OutputMedian: 100, OutputSigma: 0.5, Seed: 1}, `
gate:
  window: 10s
  defaults: {tpm: 8000, rpm: 100000}
`)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: sessions}}
	start := time.Now()
	prov.SetEpoch(start)
	type answer struct {
		status   int
		at       time.Duration
		notSent  bool
		after    string
		waitedMs string
		err      error
	}
	answers := make([]answer, sessions)
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprintf("s%d", s)
			body := timingBody(session, 0, rand.New(rand.NewPCG(uint64(s), 7)), true) // max_tokens: six fit the gate's budget
			req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", session)
			resp, err := client.Do(req)
			if err != nil {
				answers[s] = answer{err: err, at: time.Since(start)}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers[s] = answer{status: resp.StatusCode, at: time.Since(start), notSent: strings.Contains(string(b), "nothing was sent"),
				after: resp.Header.Get("Retry-After"), waitedMs: resp.Header.Get("X-Gate-Waited-Ms")}
		}()
	}
	wg.Wait()
	st := prov.Stats()
	if st.Refused == 0 {
		t.Fatalf("the provider refused nothing (served %d): the run did not reach the pause", st.Served)
	}
	first := st.Refusals[0]
	var notSent, queued int
	var latest time.Duration
	afters := map[string]bool{}
	for s, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("session %d: no answer after %s: %v", s, a.at.Round(time.Millisecond), a.err)
		case a.notSent:
			notSent++
			if w, _ := strconv.Atoi(a.waitedMs); w > 0 {
				queued++
			}
			latest = max(latest, a.at-first)
			afters[a.after] = true
			if n, _ := strconv.Atoi(a.after); n < 245 || n > 251 {
				t.Errorf("session %d: Retry-After %q, want the pause's end (≤ 251 s)", s, a.after)
			}
		}
	}
	t.Logf("%d calls: the provider served %d and refused %d (first at %s); gatectl answered %d without sending them (%d had queued, Retry-After %v), the last %s after the first 429",
		sessions, st.Served, st.Refused, first.Round(time.Millisecond), notSent, queued, slices.Sorted(maps.Keys(afters)), latest.Round(time.Millisecond))
	if queued < sessions/2 {
		t.Fatalf("%d queued calls answered by gatectl: the run did not queue calls behind the pause", queued)
	}
	if latest > 5*time.Second { // the queue waited until 108–120 s before; 2–3 ms now
		t.Errorf("the last queued call was answered %s after the first 429, want at once", latest)
	}
}
