package server

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// TestProxyRetryConcurrentSessionlessRequests: concurrent requests of one client
// without X-Gate-Session or X-Gate-Turn share a session (the client key's) but
// are each a turn of their own, so each is retried retry.rounds times at most,
// counted at the upstream. Before, the one budget record per (session,
// provider) was reset by every other request's failure, and each request ran
// on to the attempt backstop (13 attempts by default).
func TestProxyRetryConcurrentSessionlessRequests(t *testing.T) {
	const n, rounds = 4, 2
	up := newFakeUpstream(t, jsonAnswer(http.StatusServiceUnavailable, `{"error":{"message":"upstream connect error"}}`))
	f := newPxFixture(t, retryConfig(up.URL, fmt.Sprintf("  rounds: %d\n  initialDelay: 1s\n  maxDelay: 2s\n  jitter: 0", rounds)), true)
	results := make(chan pxResult, n)
	for i := range n {
		go func() {
			results <- <-f.callAsync("/v1/chat/completions", chatReq("pa/m", "user", fmt.Sprint("r", i)), "Authorization", "Bearer sk-one-client")
		}()
	}
	// Drive the server's clock through the retry delays until every request is
	// answered; bounded by a real deadline and a number of steps.
	deadline := time.Now().Add(20 * time.Second)
	for got, steps := 0, 0; got < n; {
		select {
		case r := <-results:
			if r.resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want the upstream's 503 once the retries are spent: %s", r.resp.StatusCode, r.body)
			}
			got++
			continue
		default:
		}
		if time.Now().After(deadline) || steps > 10000 {
			t.Fatalf("%d of %d requests answered after %d upstream calls", got, n, up.n())
		}
		if f.clock.Timers() > 0 {
			f.clock.Advance(250 * time.Millisecond)
			steps++
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond) // yield to the server goroutines; not a wait for time to pass
	}
	perRequest := map[string]int{}
	for i := range up.n() {
		perRequest[fmt.Sprint(up.call(i).Body["user"])]++
	}
	for i := range n {
		if got := perRequest[fmt.Sprint("r", i)]; got != rounds+1 {
			t.Errorf("request r%d made %d upstream attempts, want retry.rounds+1 = %d", i, got, rounds+1)
		}
	}
	if total := up.n(); total > n*(rounds+1) {
		t.Errorf("%d upstream attempts in all, want at most %d", total, n*(rounds+1))
	}
	// Each request's budget ended with it.
	if left := f.srv.planner.OneShotTurns(); left != 0 {
		t.Errorf("%d one-shot turns still hold a budget after every request ended", left)
	}
}
