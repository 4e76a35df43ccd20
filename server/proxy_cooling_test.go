package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProxySendsNothingIntoALongCooldown: the provider asked for a pause
// longer than gate.maxWait. The call that met it is handed back (its retry
// would fail open into the pause); so is every later call, which the gate
// admits failing open at once — answered by gatectl with the pause's end,
// never sent: before, each was a 429 at the provider.
func TestProxySendsNothingIntoALongCooldown(t *testing.T) {
	up := newFakeUpstream(t,
		jsonAnswer(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "250"),
		chatOK(10, 2, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 5"), true)
	if r := <-f.callAsync("/v1/chat/completions", chatReq("pa/long")); r.resp.StatusCode != http.StatusTooManyRequests || up.n() != 1 {
		t.Fatalf("the 429: status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
	f.clock.Advance(10 * time.Second)
	events, stop := f.srv.bus.Subscribe(64)
	defer stop()
	for i := range 3 {
		r := <-f.callAsync("/v1/chat/completions", chatReq("pa/long"))
		if r.resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(r.body, "nothing was sent") {
			t.Fatalf("call %d: status %d: %s", i, r.resp.StatusCode, r.body)
		}
		h := r.resp.Header
		if h.Get("Retry-After") != "240" || h.Get("Retry-After-Ms") != "240000" || h.Get("X-Should-Retry") != "false" ||
			h.Get("X-Gate-Class") != "RATE_LIMIT" || h.Get("X-Gate-Route") != "pa/long" {
			t.Fatalf("call %d: headers %v", i, h)
		}
	}
	if up.n() != 1 {
		t.Fatalf("%d upstream calls, want the one that met the 429", up.n())
	}
	// Not asked of the gate at all: no fail-open (whose warning would say the
	// call went), one giveup event each.
	kinds := map[string]int{}
	for len(events) > 0 {
		kinds[(<-events).Type]++
	}
	if kinds["fail-open"] != 0 || kinds["giveup"] != 3 {
		t.Fatalf("events %v, want 3 giveup and no fail-open", kinds)
	}
	if st := f.status("pa", "long"); st.InFlight != 0 || st.Reserved != 0 || st.WindowTokens != 0 {
		t.Fatalf("ledger holds %d in flight, %d reserved, %d in the window", st.InFlight, st.Reserved, st.WindowTokens)
	}
	// Once the pause is over, calls go as before.
	f.clock.Advance(241 * time.Second)
	if r := <-f.callAsync("/v1/chat/completions", chatReq("pa/long")); r.resp.StatusCode != http.StatusOK || up.n() != 2 {
		t.Fatalf("after the pause: status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
}

// TestProxyQueuedCallNotSentIntoACooldown: a call waits out a cooldown that
// another 429 lengthens past its maxWait; where it fails open (in maxWait's
// last tenth, 108–120 s) it is answered with the time the pause still runs,
// not sent. x-should-retry says whether that is a wait gatectl would sit out.
func TestProxyQueuedCallNotSentIntoACooldown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		extendTo   time.Duration // the second 429's Retry-After, 50 s in
		wantShould string
	}{
		{"past maxWait", 300 * time.Second, "false"}, // the pause ends at 350 s
		{"within maxWait", 80 * time.Second, "true"}, // at 130 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t, chatOK(10, 2, 0))
			f := newPxFixture(t, retryConfig(up.URL, "  rounds: 5"), true)
			led := f.srv.Ledger()
			led.RateLimited(f.clock.Now(), "pa", "q", 100*time.Second)
			res := f.callAsync("/v1/chat/completions", chatReq("pa/q"))
			waitFor(t, "the call to queue", func() bool { return f.status("pa", "q").Waiting == 1 && f.clock.Timers() > 0 })
			f.clock.Advance(50 * time.Second)
			led.RateLimited(f.clock.Now(), "pa", "q", tc.extendTo)
			r := advanceUntil(t, f, res, time.Second)
			if r.resp.StatusCode != http.StatusTooManyRequests || up.n() != 0 {
				t.Fatalf("status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
			}
			waited, _ := strconv.Atoi(r.resp.Header.Get("X-Gate-Waited-Ms"))
			afterMs, _ := strconv.Atoi(r.resp.Header.Get("Retry-After-Ms"))
			end := int(50*time.Second+tc.extendTo) / int(time.Millisecond)
			if waited < 108000 || waited > 121000 {
				t.Fatalf("X-Gate-Waited-Ms %d, want in maxWait's last tenth", waited)
			}
			// The wake-up's jitter (≤ 1 s) and the clock's steps (1 s) blur both.
			if d := waited + afterMs - end; d < -2000 || d > 2000 {
				t.Fatalf("waited %d ms, told Retry-After-Ms %d: they end %d ms from the pause's end", waited, afterMs, d)
			}
			if r.resp.Header.Get("X-Should-Retry") != tc.wantShould {
				t.Fatalf("x-should-retry %q, want %s", r.resp.Header.Get("X-Should-Retry"), tc.wantShould)
			}
			if st := f.status("pa", "q"); st.InFlight != 0 || st.Reserved != 0 || st.Waiting != 0 {
				t.Fatalf("ledger holds %d in flight, %d reserved, %d waiting", st.InFlight, st.Reserved, st.Waiting)
			}
		})
	}
}

// TestHeldStreamNotSentIntoACooldown: a streamed call whose headers went out
// while it was held gets the refusal as the stream's error event (real time:
// a 1 s window, a 2 s maxWait, a 1.5 s cooldown that a second 429 lengthens
// to 5 s once the stream's headers are out).
func TestHeldStreamNotSentIntoACooldown(t *testing.T) {
	up := newFakeUpstream(t, streamingChat)
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 100ms")+"gate: {window: 1s, maxWait: 2s}\n", false)
	f.coolDown("pa", "m", 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := f.post(ctx, "/v1/chat/completions", chatReq("pa/m", "stream", true))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Gate-Held") != "true" {
		t.Fatalf("status %d headers %v: want the held stream's early headers", resp.StatusCode, resp.Header)
	}
	f.coolDown("pa", "m", 5*time.Second)
	var data []string
	for _, l := range readLines(t, resp.Body) {
		if s, ok := strings.CutPrefix(l.text, "data: "); ok {
			data = append(data, s)
		}
	}
	if len(data) != 1 || !strings.Contains(data[0], `"error"`) || !strings.Contains(data[0], "nothing was sent") {
		t.Fatalf("data = %q, want one error event", data)
	}
	if up.n() != 0 {
		t.Fatalf("%d upstream calls, want none", up.n())
	}
}
