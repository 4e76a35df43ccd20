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
// another 429, 50 s in, lengthens past its maxWait (120 s). A pause that would
// still run more than maxWait where the call fails open (in maxWait's last
// tenth, 108–120 s) is answered at once, with its end (x-should-retry false:
// gatectl will not sit it out), not a minute later; one that ends within
// maxWait of it is sat out, and the call sent after it.
func TestProxyQueuedCallNotSentIntoACooldown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extendTo time.Duration // the second 429's Retry-After, 50 s in
		answered bool          // gatectl answers 429; else the call goes after the pause
	}{
		{"past maxWait", 300 * time.Second, true},   // the pause ends at 350 s
		{"within maxWait", 80 * time.Second, false}, // at 130 s
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
			r := stepQueued(t, f, res)
			waited, _ := strconv.Atoi(r.resp.Header.Get("X-Gate-Waited-Ms"))
			end := int(50*time.Second+tc.extendTo) / int(time.Millisecond)
			if !tc.answered {
				if r.resp.StatusCode != http.StatusOK || up.n() != 1 || waited < end {
					t.Fatalf("status %d after %d upstream calls, waited %d ms: want the call sent after the pause (%d ms)", r.resp.StatusCode, up.n(), waited, end)
				}
				return
			}
			if r.resp.StatusCode != http.StatusTooManyRequests || up.n() != 0 {
				t.Fatalf("status %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
			}
			afterMs, _ := strconv.Atoi(r.resp.Header.Get("Retry-After-Ms"))
			// At most the clock's one step past the second 429.
			if waited < 50000 || waited > 51000 {
				t.Fatalf("X-Gate-Waited-Ms %d, want the call answered when the 429 lengthened the pause (50 s)", waited)
			}
			// The clock steps a second past each look (the wake-up's jitter).
			if d := waited + afterMs - end; d < -2000 || d > 2000 {
				t.Fatalf("waited %d ms, told Retry-After-Ms %d: they end %d ms from the pause's end", waited, afterMs, d)
			}
			if r.resp.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("x-should-retry %q, want false", r.resp.Header.Get("X-Should-Retry"))
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

// stepQueued moves f's clock to the one queued call's next look, and a second
// past it (a wake-up's jitter is at most that), then waits until the exchange
// has looked — answered, or queued again with its next look ahead of the
// clock — before the next step: stepping on while it has not polled would
// let the clock pass the pause's end unseen.
func stepQueued(t *testing.T, f *pxFixture, res <-chan pxResult) pxResult {
	t.Helper()
	led := f.srv.Ledger()
	for range 1000 {
		select {
		case r := <-res:
			return r
		default:
		}
		held := led.Held(f.clock.Now())
		if len(held) == 0 {
			// Not queued: sent, answered, or sitting out a pause on a timer.
			if f.clock.Timers() > 0 {
				f.clock.Advance(time.Second)
			}
			time.Sleep(time.Millisecond) // let the exchange reach its next step
			continue
		}
		f.clock.Advance(held[0].ExpectedAt.Sub(f.clock.Now()) + time.Second)
		waitFor(t, "the exchange to look again", func() bool {
			h := led.Held(f.clock.Now())
			return len(h) == 0 || h[0].ExpectedAt.After(f.clock.Now())
		})
	}
	t.Fatal("no answer after 1000 steps")
	return pxResult{}
}

// TestProxyFoldedModelNotSentIntoAPause: past gate.maxModels a new model name
// is counted as provider/(other); a long pause there holds its calls too.
func TestProxyFoldedModelNotSentIntoAPause(t *testing.T) {
	up := newFakeUpstream(t,
		chatOK(10, 2, 0),
		jsonAnswer(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "250"),
		chatOK(10, 2, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 5")+"gate: {maxModels: 1}\n", true)
	if r := <-f.callAsync("/v1/chat/completions", chatReq("pa/first")); r.resp.StatusCode != http.StatusOK {
		t.Fatalf("the first model: %d %s", r.resp.StatusCode, r.body)
	}
	if r := <-f.callAsync("/v1/chat/completions", chatReq("pa/second")); r.resp.StatusCode != http.StatusTooManyRequests || up.n() != 2 {
		t.Fatalf("the 429: %d after %d upstream calls: %s", r.resp.StatusCode, up.n(), r.body)
	}
	for _, model := range []string{"pa/second", "pa/third"} { // both counted as pa/(other)
		r := <-f.callAsync("/v1/chat/completions", chatReq(model))
		if r.resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(r.body, "nothing was sent") {
			t.Fatalf("%s: %d %s", model, r.resp.StatusCode, r.body)
		}
	}
	if up.n() != 2 {
		t.Fatalf("%d upstream calls, want the two before the pause", up.n())
	}
}
