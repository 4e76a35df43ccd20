package server

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type pxResult struct {
	resp *http.Response
	body string
}

// callAsync posts in a goroutine; the result arrives on the channel.
func (f *pxFixture) callAsync(path string, body any, headers ...string) <-chan pxResult {
	ch := make(chan pxResult, 1)
	go func() {
		resp, b := f.call(path, body, headers...)
		ch <- pxResult{resp, b}
	}()
	return ch
}

func retryConfig(up string, retry string) string {
	return fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1}
retry:
%s
`, up, retry)
}

// TestProxyRateLimitRetriedAfterCooldown: a 429 with Retry-After is retried
// inside gatectl once the model's cooldown is over; the client sees a success,
// and the wait in X-Gate-Waited-Ms.
func TestProxyRateLimitRetriedAfterCooldown(t *testing.T) {
	up := newFakeUpstream(t,
		jsonAnswer(429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "5"),
		chatOK(10, 2, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/rl"))
	waitFor(t, "the admission wait", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
	if st := f.status("pa", "rl"); st.CooldownMs != 5000 || st.Waiting != 1 || st.InFlight != 0 {
		t.Fatalf("after the 429: cooldown %dms waiting %d in flight %d", st.CooldownMs, st.Waiting, st.InFlight)
	}
	f.clock.Advance(4 * time.Second)
	if up.n() != 1 {
		t.Fatal("retried before the cooldown ended")
	}
	f.clock.Advance(2 * time.Second) // past the cooldown and its jitter
	r := <-res
	if r.resp.StatusCode != 200 || up.n() != 2 {
		t.Fatalf("status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
	if w, _ := strconv.Atoi(r.resp.Header.Get("X-Gate-Waited-Ms")); w < 5000 {
		t.Fatalf("X-Gate-Waited-Ms %d, want ≥ 5000", w)
	}
	if st := f.status("pa", "rl"); st.RateLimited != 1 || st.InFlight != 0 || st.WindowTokens != 12 {
		t.Fatalf("ledger: rate limited %d in flight %d window %d", st.RateLimited, st.InFlight, st.WindowTokens)
	}
}

// TestProxyServerErrorRetried: a 500 is retried after the curve's delay, on the
// server's clock; a 200 whose body is an error is a failure too.
func TestProxyServerErrorRetried(t *testing.T) {
	up := newFakeUpstream(t,
		jsonAnswer(500, `{"error":{"message":"internal error"}}`),
		jsonAnswer(200, `{"error":{"message":"The server is overloaded, please try again later","type":"server_error"}}`),
		chatOK(3, 1, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3\n  initialDelay: 2s\n  jitter: 0"), true)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/se"))
	waitFor(t, "the first retry delay", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
	f.clock.Advance(2 * time.Second)
	waitFor(t, "the second retry delay", func() bool { return up.n() == 2 && f.clock.Timers() == 1 })
	f.clock.Advance(4 * time.Second)
	r := <-res
	if r.resp.StatusCode != 200 || up.n() != 3 {
		t.Fatalf("status %d after %d calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
}

// TestProxyGivesUp: what the client gets when gatectl stops trying.
func TestProxyGivesUp(t *testing.T) {
	cases := []struct {
		name        string
		retry       string
		answer      http.HandlerFunc
		priorCool   time.Duration // a cooldown another session starts while the call is upstream
		wantStatus  int
		wantRetryAt string // Retry-After; "" for none
		wantShould  string
		wantCalls   int
		wantBody    string
	}{
		{"rate limit with the budget at 0: the hint", "  rounds: 0", jsonAnswer(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "30", "retry-after-ms", "30000"),
			0, 429, "30", "true", 1, "Rate limit reached"},
		{"rate limit: the longer cooldown wins over a short hint", "  rounds: 0", jsonAnswer(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "5", "retry-after-ms", "5000"),
			90 * time.Second, 429, "90", "true", 1, "Rate limit reached"},
		// gatectl will not wait it, and an SDK told to retry would retry within
		// seconds into the cooldown: no retry, but the long wait is told as it is.
		{"a cooldown longer than gate.maxWait is handed back, not retried into", "  rounds: 5", jsonAnswer(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "600"),
			0, 429, "600", "false", 1, "Rate limit reached"},
		{"auth is never retried", "  rounds: 5", jsonAnswer(401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`),
			0, 401, "", "false", 1, "Incorrect API key"},
		// No wait to tell: none is told, and the client's SDK backs off with
		// its own jitter (a fixed second put every client in step).
		{"server error with the budget at 0", "  rounds: 0", jsonAnswer(503, `{"error":{"message":"upstream connect error"}}`),
			0, 503, "", "true", 1, "upstream connect error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f *pxFixture
			up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.priorCool > 0 { // another session's 429 started a longer cooldown meanwhile
					f.srv.Ledger().RateLimited(f.clock.Now(), "pa", "gu", tc.priorCool)
				}
				tc.answer(w, r)
			})
			f = newPxFixture(t, retryConfig(up.URL, tc.retry), true)
			res := f.callAsync("/v1/chat/completions", chatReq("pa/gu"))
			r := <-res
			if r.resp.StatusCode != tc.wantStatus || !strings.Contains(r.body, tc.wantBody) {
				t.Fatalf("status %d body %s", r.resp.StatusCode, r.body)
			}
			if got := r.resp.Header.Get("Retry-After"); got != tc.wantRetryAt {
				t.Errorf("Retry-After %q, want %q", got, tc.wantRetryAt)
			}
			if tc.wantRetryAt != "" {
				ra, _ := strconv.Atoi(tc.wantRetryAt)
				if ms, _ := strconv.Atoi(r.resp.Header.Get("Retry-After-Ms")); ms > ra*1000 || ms <= (ra-1)*1000 {
					t.Errorf("retry-after-ms %d disagrees with Retry-After %d", ms, ra)
				}
			}
			if got := r.resp.Header.Get("X-Should-Retry"); got != tc.wantShould {
				t.Errorf("x-should-retry %q, want %q", got, tc.wantShould)
			}
			if up.n() != tc.wantCalls {
				t.Errorf("%d upstream calls, want %d", up.n(), tc.wantCalls)
			}
			if st := f.status("pa", "gu"); st.InFlight != 0 || st.Reserved != 0 {
				t.Errorf("ledger holds %d in flight, %d reserved", st.InFlight, st.Reserved)
			}
		})
	}
}

// countingTransport counts the requests gatectl sends upstream.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// countDials makes f's upstream requests countable.
func countDials(f *pxFixture) *countingTransport {
	c := &countingTransport{next: f.srv.client.Transport}
	f.srv.client.Transport = c
	return c
}

// advanceUntil advances f's clock a step at a time until res has an answer.
func advanceUntil(t *testing.T, f *pxFixture, res <-chan pxResult, step time.Duration) pxResult {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a bound, not a wait
	for {
		select {
		case r := <-res:
			return r
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer")
		}
		if f.clock.Timers() > 0 {
			f.clock.Advance(step)
		} else {
			time.Sleep(time.Millisecond) // let the exchange reach its next timer
		}
	}
}

// checkNoRetryAdvice: gatectl gave up after its own retries, so the client is
// told not to retry, with no Retry-After short enough to start a storm.
func checkNoRetryAdvice(t *testing.T, r *http.Response) {
	t.Helper()
	if got := r.Header.Get("X-Should-Retry"); got != "false" {
		t.Errorf("x-should-retry %q, want false", got)
	}
	if ra := r.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err != nil || n < 60 {
			t.Errorf("Retry-After %q after gatectl gave up: want none, or a minute at least", ra)
		}
	}
	if ms := r.Header.Get("Retry-After-Ms"); ms != "" {
		if n, err := strconv.Atoi(ms); err != nil || n < 60000 {
			t.Errorf("Retry-After-Ms %q after gatectl gave up", ms)
		}
	}
}

// TestProxyUnreachableUpstreamFailsFast: with the default retry policy, a
// refused connection (a closed loopback port) is retried once, then given up
// with no retry advice, so an SDK's own retries do not multiply gatectl's. Each
// retry and the give-up leave one log line.
func TestProxyUnreachableUpstreamFailsFast(t *testing.T) {
	up := newFakeUpstream(t, chatOK(1, 1, 0))
	dead := up.URL
	up.Close() // nothing listens there any more: connection refused
	f := newPxFixture(t, retryConfig(dead, "  jitter: 0"), true)
	dials := countDials(f)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/dead"))
	r := advanceUntil(t, f, res, time.Second)
	if r.resp.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "TRANSPORT") {
		t.Fatalf("status %d body %s", r.resp.StatusCode, r.body)
	}
	checkNoRetryAdvice(t, r.resp)
	if st := f.status("pa", "dead"); st.WindowTokens != 0 || st.InFlight != 0 {
		t.Errorf("a refused connection left %d tokens (%d in flight) in the window: the provider never had the call", st.WindowTokens, st.InFlight)
	}
	if n := dials.count(); n < 1 || n > 2 { // 1 + retry.transport.refused
		t.Errorf("the upstream was dialled %d times, want at most 2", n)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, "[INFO]  gatectl.proxy: retrying:"); n != dials.count()-1 {
		t.Errorf("%d retry lines for %d dials:\n%s", n, dials.count(), logs)
	}
	if n := strings.Count(logs, "[WARN]  gatectl.proxy: giving up"); n != 1 ||
		!strings.Contains(logs, "kind=refused") || !strings.Contains(logs, "retry.transport.refused spent") {
		t.Errorf("want one give-up line naming the kind and the spent budget:\n%s", logs)
	}

	// A name that does not resolve is given up at once.
	f2 := newPxFixture(t, retryConfig("http://gatectl-test.invalid", "  jitter: 0"), true)
	dials2 := countDials(f2)
	r2 := advanceUntil(t, f2, f2.callAsync("/v1/chat/completions", chatReq("pa/nowhere")), time.Second)
	if r2.resp.StatusCode != http.StatusBadGateway || dials2.count() != 1 {
		t.Fatalf("status %d after %d dials: %s", r2.resp.StatusCode, dials2.count(), r2.body)
	}
	checkNoRetryAdvice(t, r2.resp)
}

// TestProxyNoRetryAdviceAfterBudget: whatever the class, once gatectl has spent
// its retry budget the client is told not to retry; and a retry the client
// sends anyway in the same turn is given up at once with the same advice.
func TestProxyNoRetryAdviceAfterBudget(t *testing.T) {
	cases := []struct {
		name   string
		answer http.HandlerFunc
		status int
	}{
		{"503 storm", jsonAnswer(503, `{"error":{"message":"upstream connect error"}}`), 503},
		{"429 storm with a short hint", jsonAnswer(429, `{"error":{"message":"Rate limit reached for requests","code":"rate_limit_exceeded"}}`, "Retry-After", "5"), 429},
		{"overloaded", jsonAnswer(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), 529},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t, tc.answer)
			// hintRounds 2: the hinted 429s spend a budget of the same size.
			f := newPxFixture(t, retryConfig(up.URL, "  rounds: 2\n  hintRounds: 2\n  jitter: 0"), true)
			hdr := []string{"X-Gate-Session", "s1", "X-Gate-Turn", "t1"}
			r := advanceUntil(t, f, f.callAsync("/v1/chat/completions", chatReq("pa/storm"), hdr...), time.Second)
			if r.resp.StatusCode != tc.status || up.n() != 3 {
				t.Fatalf("status %d after %d upstream calls, want %d after 3: %s", r.resp.StatusCode, up.n(), tc.status, r.body)
			}
			checkNoRetryAdvice(t, r.resp)
			// The SDK's retry, against the advice: the turn's budget is spent.
			r = advanceUntil(t, f, f.callAsync("/v1/chat/completions", chatReq("pa/storm"), hdr...), time.Second)
			if r.resp.StatusCode != tc.status || up.n() != 4 {
				t.Fatalf("again: status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
			}
			checkNoRetryAdvice(t, r.resp)
		})
	}
}

// TestProxyTransportFailure: no HTTP answer at all is a 502 the client may
// retry, with no Retry-After: there is no wait to tell, and the SDK's own
// backoff is jittered where a fixed figure would put its clients in step.
func TestProxyTransportFailure(t *testing.T) {
	up := newFakeUpstream(t, chatOK(1, 1, 0))
	dead := up.URL
	up.Close() // nothing listens there any more
	f := newPxFixture(t, retryConfig(dead, "  rounds: 0"), true)
	r, body := f.call("/v1/chat/completions", chatReq("pa/tr"))
	if r.StatusCode != http.StatusBadGateway || r.Header.Get("X-Should-Retry") != "true" || r.Header.Get("Retry-After") != "" ||
		!strings.Contains(body, "TRANSPORT") || strings.Contains(body, "/v1/chat/completions") {
		t.Fatalf("status %d headers %v body %s", r.StatusCode, r.Header, body)
	}
}

// TestProxyQuotaFailsOver: a spent allowance moves the request to another route
// of the pool at once.
func TestProxyQuotaFailsOver(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-test-pa")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-test-pb")
	ua := newFakeUpstream(t, jsonAnswer(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`))
	ub := newFakeUpstream(t, chatOK(5, 1, 0))
	f := newPxFixture(t, routingConfig(ua.URL, ub.URL, ub.URL), true)
	events, stop := f.srv.Bus().Subscribe(64)
	defer stop()
	r, body := f.call("/v1/chat/completions", chatReq("pa/model-a"))
	if r.StatusCode != 200 || r.Header.Get("X-Gate-Route") != "pb/model-b" {
		t.Fatalf("status %d route %q: %s", r.StatusCode, r.Header.Get("X-Gate-Route"), body)
	}
	if ua.n() != 1 || ub.n() != 1 || ub.call(0).Body["model"] != "model-b" {
		t.Fatalf("calls: a %d b %d", ua.n(), ub.n())
	}
	var kinds []string
	for len(events) > 0 {
		e := <-events
		kinds = append(kinds, e.Type)
	}
	if !strings.Contains(strings.Join(kinds, ","), "failover") || !strings.Contains(strings.Join(kinds, ","), "retry") {
		t.Fatalf("events %v", kinds)
	}
}

// TestProxyClientDisconnect: a client that goes away cancels its wait or its
// upstream request. A wait's reservation is released; a call the provider
// already had stays counted as a call in flight is.
func TestProxyClientDisconnect(t *testing.T) {
	t.Run("while waiting for admission", func(t *testing.T) {
		up := newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
		f.srv.Ledger().RateLimited(f.clock.Now(), "pa", "dc", 30*time.Second)
		cancel, done := cancellableCall(t, f, chatReq("pa/dc"))
		waitFor(t, "the wait", func() bool { return f.status("pa", "dc").Waiting == 1 })
		cancel()
		<-done
		waitFor(t, "the waiter to leave", func() bool { st := f.status("pa", "dc"); return st.Waiting == 0 && st.InFlight == 0 })
		if up.n() != 0 {
			t.Fatal("a cancelled request reached the upstream")
		}
	})
	t.Run("while the upstream works", func(t *testing.T) {
		started, cancelled := make(chan struct{}), make(chan struct{})
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			// The headers first: the proxy has the answer's start, so the
			// call's send is recorded however its write was reported.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			close(started)
			select {
			case <-r.Context().Done():
				close(cancelled)
			case <-time.After(10 * time.Second): // a bound, not a wait
			}
		})
		f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
		cancel, done := cancellableCall(t, f, chatReq("pa/dc2"))
		<-started
		st := f.status("pa", "dc2")
		if st.InFlight != 1 {
			t.Fatalf("in flight %d", st.InFlight)
		}
		held := st.WindowTokens
		cancel()
		<-done
		select {
		case <-cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream request was not cancelled")
		}
		waitFor(t, "the close", func() bool {
			st := f.status("pa", "dc2")
			return st.InFlight == 0 && st.Reserved == 0
		})
		// The provider had the call and counts it: it stays in the window as a
		// call in flight counts (Ledger.Abandon). Released, its room let the
		// waiters through into a window the provider still held.
		if st := f.status("pa", "dc2"); st.WindowTokens <= 0 || st.WindowTokens > held {
			t.Fatalf("after the client went away: window %d tokens (in flight it held %d); want it still counted", st.WindowTokens, held)
		}
	})
	t.Run("while the request is being sent", func(t *testing.T) {
		// Gone before any byte of the answer: whether the send was recorded
		// by then is a race, so either close is right — the ticket closes.
		started := make(chan struct{})
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		})
		f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
		cancel, done := cancellableCall(t, f, chatReq("pa/dc4"))
		<-started
		cancel()
		<-done
		waitFor(t, "the close", func() bool {
			st := f.status("pa", "dc4")
			return st.InFlight == 0 && st.Reserved == 0
		})
		if up.n() != 1 {
			t.Fatalf("the upstream was called %d times, want once: a gone client is not retried", up.n())
		}
	})
	t.Run("while sleeping before a retry", func(t *testing.T) {
		up := newFakeUpstream(t, jsonAnswer(500, `{"error":{"message":"boom"}}`))
		f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
		cancel, done := cancellableCall(t, f, chatReq("pa/dc3"))
		waitFor(t, "the retry delay", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
		cancel()
		<-done
		waitFor(t, "the sleep to end", func() bool { return f.clock.Timers() == 0 })
		f.clock.Advance(time.Hour)
		if up.n() != 1 || f.status("pa", "dc3").InFlight != 0 {
			t.Fatalf("calls %d in flight %d", up.n(), f.status("pa", "dc3").InFlight)
		}
	})
}

// cancellableCall sends body to f's chat completions in the background; cancel
// is the client going away, done gets the client's error.
func cancellableCall(t *testing.T, f *pxFixture, body any) (cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req := mustRequest(t, ctx, f.url+"/v1/chat/completions", body)
	errs := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		errs <- err
	}()
	return cancel, errs
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustRequest(t *testing.T, ctx context.Context, url string, body any) *http.Request {
	t.Helper()
	b := strings.NewReader(mustJSON(t, body))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, b)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// inLongTermWait starts a call of session "lt" whose only route's allowance
// is spent (the upstream answers QUOTA, then 200) and returns once the call
// sits in its long-term wait of quota.longTermDelay (10m).
func inLongTermWait(t *testing.T) (*fakeUpstream, *pxFixture, <-chan pxResult) {
	return inLongTermWaitWith(t, "", 1)
}

// inLongTermWaitWith is inLongTermWait with more config (YAML sections) and
// the server clock's timers the wait holds (its own, and its source's next
// read). A test that fails ends the wait, so the server can stop.
func inLongTermWaitWith(t *testing.T, more string, timers int) (*fakeUpstream, *pxFixture, <-chan pxResult) {
	t.Helper()
	up := newFakeUpstream(t, quotaAnswer, chatOK(4, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1}
pools:
  solo:
    routes:
      - {provider: pa, model: m1}
quota:
  longTermDelay: 10m
%s`, up.URL, more), true)
	// The wait is longer than proxy.maxHold: the client asks to sit it out.
	res := f.callAsync("/v1/chat/completions", chatReq("solo"), "X-Gate-Session", "lt", "Authorization", "Bearer sk-x", "X-Gate-Max-Wait", "10m")
	t.Cleanup(func() { f.clock.Advance(10 * time.Minute) }) // (cleanups run last registered first: before the server stops)
	waitFor(t, "the long-term wait", func() bool { return up.n() == 1 && f.clock.Timers() == timers })
	return up, f, res
}

// TestProxyLongTermWait: a spent allowance with no other route is waited out
// (quota.longTermDelay on the server's clock), then retried on the same route.
func TestProxyLongTermWait(t *testing.T) {
	up, f, res := inLongTermWait(t)
	if st, ok := f.srv.Quota().State("lt"); !ok || !st.Pending {
		t.Fatalf("quota state %+v %v: want a pending long-term wait", st, ok)
	}
	f.clock.Advance(9 * time.Minute)
	if up.n() != 1 {
		t.Fatal("retried before the long-term delay")
	}
	f.clock.Advance(time.Minute)
	r := <-res
	if r.resp.StatusCode != 200 || up.n() != 2 {
		t.Fatalf("status %d after %d calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
	if w, _ := strconv.Atoi(r.resp.Header.Get("X-Gate-Waited-Ms")); w < 600000 {
		t.Fatalf("X-Gate-Waited-Ms %d", w)
	}
	if _, ok := f.srv.Quota().State("lt"); ok {
		t.Fatal("the session's entry did not end with the success")
	}
}

// A long-term wait ends when its provider's mark is lifted by hand (the
// allowance was topped up): the call is retried at once, not at the end of
// quota.longTermDelay.
func TestProxyLongTermWaitEndsOnUnmark(t *testing.T) {
	up, f, res := inLongTermWait(t)
	resp, err := http.Post(f.url+"/gate/v1/providers/pa/unmark", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The server's clock never moves: only the unmark ends the wait. (The
	// timer only keeps a missing wake from hanging the test.)
	var r pxResult
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		f.clock.Advance(10 * time.Minute) // let the wait end, so the server can stop
		<-res
		t.Fatal("the call was still waiting 10 s after its provider was unmarked")
	}
	if resp.StatusCode != 200 || r.resp.StatusCode != 200 || up.n() != 2 {
		t.Fatalf("unmark %d; the call's status %d after %d upstream calls: %s", resp.StatusCode, r.resp.StatusCode, up.n(), r.body)
	}
}

// A long-term wait on a provider with a balance source ends when the source,
// read again each refresh while the call waits, shows a top-up (a balance
// above the 0 it last showed): the call is retried then, not at
// the end of quota.longTermDelay. The source is a real script; the server's
// clock moves one refresh at a time.
func TestProxyLongTermWaitEndsOnATopUp(t *testing.T) {
	balance := filepath.Join(t.TempDir(), "balance.json")
	if err := os.WriteFile(balance, []byte(`{"remaining": 0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	up, f, res := inLongTermWaitWith(t, fmt.Sprintf(`balances:
  - provider: pa
    script: [cat, %s]
    refresh: 1m
`, balance), 2) // the wait's timer and its source's next read
	f.clock.Advance(time.Minute) // read again: still spent
	waitFor(t, "the next read", func() bool { return f.clock.Timers() == 2 })
	if up.n() != 1 {
		t.Fatalf("%d upstream calls after a reading that shows none left, want 1", up.n())
	}
	if err := os.WriteFile(balance, []byte(`{"remaining": 12.5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	var r pxResult
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the call was still waiting 10 s after its provider's balance showed allowance")
	}
	if r.resp.StatusCode != 200 || up.n() != 2 {
		t.Fatalf("status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
	if w, _ := strconv.Atoi(r.resp.Header.Get("X-Gate-Waited-Ms")); w != 120000 {
		t.Fatalf("X-Gate-Waited-Ms %d, want 120000 (two refreshes)", w)
	}
}

// TestProxyMetrics: the proxy's decisions show in /metrics.
func TestProxyMetrics(t *testing.T) {
	up := newFakeUpstream(t, jsonAnswer(500, `{"error":{"message":"boom"}}`), chatOK(3, 1, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 2\n  jitter: 0"), true)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/mx"))
	waitFor(t, "the retry delay", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
	f.clock.Advance(time.Minute)
	if r := <-res; r.resp.StatusCode != 200 {
		t.Fatalf("status %d", r.resp.StatusCode)
	}
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`gatectl_retry_actions_total{action="retry"} 1`,
		`gatectl_failures_total{class="SERVER"} 1`,
		`gatectl_upstream_responses_total{provider="pa",status="500"} 1`,
		`gatectl_upstream_responses_total{provider="pa",status="200"} 1`,
		`gatectl_gate_admissions_total{model="mx",provider="pa",reason="none"} 2`,
		`gatectl_proxy_overhead_seconds_count 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestProxyRateLimitStatesTheLimit: the limits a 429 states — in its headers or
// only in its words — reach the gate with the 429 itself: adopted (the model's
// status shows them), with the cooldown set and the retry held by it.
func TestProxyRateLimitStatesTheLimit(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer http.HandlerFunc
		tokens float64
	}{
		{"headers", jsonAnswer(429, `{"error":{"message":"Too many tokens","type":"tokens","code":"rate_limit_exceeded"}}`,
			"Retry-After", "5", "X-Ratelimit-Limit-Tokens", "60000", "X-Ratelimit-Remaining-Tokens", "0"), 60000},
		{"words", jsonAnswer(429, `{"error":{"message":"Rate limit reached for rl in organization org-x on tokens per min (TPM): Limit 45000, Used 44900, Requested 300. Please try again in 5s.","type":"tokens","code":"rate_limit_exceeded"}}`,
			"Retry-After", "5"), 45000},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newFakeUpstream(t, c.answer, chatOK(10, 2, 0))
			f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3"), true)
			res := f.callAsync("/v1/chat/completions", chatReq("pa/rl"))
			waitFor(t, "the admission wait", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
			if st := f.status("pa", "rl"); st.Stated != c.tokens || st.Start != c.tokens || st.CooldownMs != 5000 || st.Waiting != 1 || st.RateLimited != 1 {
				t.Fatalf("after the 429: stated %v start %v cooldown %dms waiting %d 429s %d; want %v %v 5000 1 1",
					st.Stated, st.Start, st.CooldownMs, st.Waiting, st.RateLimited, c.tokens, c.tokens)
			}
			f.clock.Advance(6 * time.Second) // past the cooldown and its jitter
			if r := <-res; r.resp.StatusCode != 200 || up.n() != 2 {
				t.Fatalf("status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
			}
		})
	}
}

// x-should-retry by class, for a failure gatectl hands back without retrying
// it: the capacity and transient classes invite a later retry; a MISLABELED
// failure handed back is one treated as the bad request it says it is
// (retry.mislabeled off), and the SDK, which honours x-should-retry even on a
// 400, must not resend it.
func TestShouldRetryByClass(t *testing.T) {
	for c, want := range map[engine.Class]bool{
		engine.ClassRateLimit: true, engine.ClassOverloaded: true, engine.ClassServer: true, engine.ClassTimeout: true, engine.ClassTransport: true,
		engine.ClassQuota: false, engine.ClassAuth: false, engine.ClassInvalidRequest: false, engine.ClassContext: false,
		engine.ClassMislabeled: false, engine.ClassUnknown: false,
	} {
		if got := shouldRetry(c); got != want {
			t.Errorf("shouldRetry(%s) = %v, want %v", c, got, want)
		}
	}
}
