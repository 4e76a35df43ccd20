package fakeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable clock for the provider.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// bodyOf is a chat completion body exactly n bytes long (n ≥ 80).
func bodyOf(t *testing.T, n int, extra string) []byte {
	t.Helper()
	head := `{"model":"m",` + extra + `"messages":[{"role":"user","content":"`
	tail := `"}]}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("a body of %d bytes cannot hold %q", n, extra)
	}
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// send posts body to p at the clock's now (an in-memory round trip).
func send(p *Provider, body []byte) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body))))
	return w
}

// TestWindow: a call costs ceil(bytes/4) + its output; the window admits while
// the sum fits and a call counts until exactly Window after it arrived.
func TestWindow(t *testing.T) {
	var (
		t1 = t0.Add(1 * time.Second)
		t2 = t0.Add(2 * time.Second)
		t3 = t0.Add(10*time.Second - time.Nanosecond) // the first call is still in the window
		t4 = t0.Add(10 * time.Second)                 // it has left
		t5 = t0.Add(11*time.Second - time.Nanosecond) // the second is still in
		t6 = t0.Add(11 * time.Second)
	)
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, Now: c.Now})
	body := bodyOf(t, 1200, "") // 300 prompt + 100 output = 400
	if prompt, out := p.Usage(body); prompt != 300 || out != 100 {
		t.Fatalf("usage = %d + %d, want 300 + 100", prompt, out)
	}
	small := bodyOf(t, 400, "") // 100 + 100 = 200
	steps := []struct {
		at   time.Time
		body []byte
		ok   bool
	}{
		{t0, body, true},   // 400
		{t1, body, true},   // 800
		{t2, body, false},  // 1200 > 1000
		{t2, small, true},  // 1000: exactly the limit fits
		{t2, small, false}, // 1200
		{t3, body, false},  // the first 400 still counts
		{t4, body, true},   // it left: 600 + 400 = 1000
		{t5, small, false}, // 1200
		{t6, small, true},  // the t1 call left: 600 + 200 = 800
	}
	for i, s := range steps {
		c.Set(s.at)
		w := send(p, s.body)
		if got := w.Code == http.StatusOK; got != s.ok {
			t.Fatalf("step %d at +%s: status %d, want ok=%v (%s)", i, s.at.Sub(t0), w.Code, s.ok, w.Body)
		}
	}
	st := p.Stats()
	if st.Served != 5 || st.Refused != 4 || st.Tokens != 400+400+200+400+200 {
		t.Fatalf("stats: served %d (%d tokens), refused %d; want 5 (1600), 4", st.Served, st.Tokens, st.Refused)
	}
	want := []WindowStats{{Tokens: 1000, Requests: 3, Refused: 3}, {Tokens: 600, Requests: 2, Refused: 1}}
	if len(st.Windows) != 2 || st.Windows[0] != want[0] || st.Windows[1] != want[1] {
		t.Fatalf("windows = %+v, want %+v", st.Windows, want)
	}
	if len(st.Refusals) != 4 || st.Refusals[0] != 2*time.Second || st.Refusals[3] != 11*time.Second-time.Nanosecond {
		t.Fatalf("refusal times = %v", st.Refusals)
	}
}

// TestBucket: with TokenBucket a call must find its whole cost in a reserve of
// Tokens that refills at Tokens per Window, full at the start.
func TestBucket(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, Limit: TokenBucket, Now: c.Now})
	body := bodyOf(t, 1200, "") // 400
	steps := []struct {
		after time.Duration
		ok    bool
	}{
		{0, true},                       // 1000 → 600
		{0, true},                       // → 200
		{0, false},                      // 200 < 400
		{2 * time.Second, true},         // +200 refilled: 400 → 0
		{time.Second, false},            // 100 < 400
		{3 * time.Second, true},         // 400 → 0
		{time.Minute, true},             // full again, not more: 1000 → 600
		{0, true},                       // → 200
		{500 * time.Millisecond, false}, // 250 < 400
	}
	now := t0
	for i, s := range steps {
		now = now.Add(s.after)
		c.Set(now)
		if got := send(p, body).Code == http.StatusOK; got != s.ok {
			t.Fatalf("step %d at +%s: ok=%v, want %v", i, now.Sub(t0), got, s.ok)
		}
	}
}

// TestFixedWindow: with FixedWindow the limit counts in clock-aligned windows
// that empty at each boundary: a call just after one fits though a sliding
// window would still hold the calls of a second before.
func TestFixedWindow(t *testing.T) {
	if t0.UnixNano()%int64(10*time.Second) != 0 {
		t.Fatal("t0 must start a 10 s window")
	}
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, Limit: FixedWindow, Headers: true, Now: c.Now})
	body := bodyOf(t, 1200, "") // 400
	steps := []struct {
		at        time.Duration
		ok        bool
		remaining string // per minute, as OpenAI states it
		reset     string
	}{
		{0, true, "3600", "10s"},
		{9 * time.Second, true, "1200", "1s"},
		{10*time.Second - time.Nanosecond, false, "1200", "0s"}, // 1200 > 1000
		{10 * time.Second, true, "3600", "10s"},                 // a new window
		{10 * time.Second, true, "1200", "10s"},
		{12 * time.Second, false, "1200", "8s"},
	}
	for i, s := range steps {
		c.Set(t0.Add(s.at))
		w := send(p, body)
		if got := w.Code == http.StatusOK; got != s.ok {
			t.Fatalf("step %d at +%s: ok=%v, want %v", i, s.at, got, s.ok)
		}
		if rem, reset := w.Header().Get("X-Ratelimit-Remaining-Tokens"), w.Header().Get("X-Ratelimit-Reset-Tokens"); rem != s.remaining || reset != s.reset {
			t.Fatalf("step %d at +%s: remaining %s reset %s, want %s and %s", i, s.at, rem, reset, s.remaining, s.reset)
		}
	}
	if st := p.Stats(); st.Served != 4 || st.Refused != 2 {
		t.Fatalf("served %d, refused %d; want 4, 2", st.Served, st.Refused)
	}
}

// TestAtCompletion: with SlidingCompletion a call counts from when its answer is
// written: calls still being answered do not count against a call arriving,
// and a call leaves the window Window after it completed, not after it arrived.
func TestAtCompletion(t *testing.T) {
	c := &clock{now: t0}
	entered, release := make(chan struct{}), make(chan struct{})
	sleep := func(_ context.Context, d time.Duration) {
		select {
		case <-release:
		default:
			entered <- struct{}{}
			<-release
		}
	}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, PerOutputToken: time.Millisecond,
		Limit: SlidingCompletion, Now: c.Now, Sleep: sleep})
	body := bodyOf(t, 1200, "") // 400
	var (
		wg       sync.WaitGroup
		released sync.Once
	)
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(func() { free(); wg.Wait() })
	codes := make([]int, 3)
	for i := range codes {
		answered := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(answered)
			codes[i] = send(p, body).Code
		}()
		select {
		case <-entered: // admitted and being answered: not counted yet
		case <-answered: // refused at once: the calls being answered counted
			t.Fatalf("call %d, sent while %d were being answered: status %d, want it admitted", i, i, codes[i])
		}
	}
	if st := p.Stats(); st.Served != 0 || st.Tokens != 0 {
		t.Fatalf("before the answers are written: served %d (%d tokens), want nothing counted", st.Served, st.Tokens)
	}
	c.Set(t0.Add(time.Second)) // the three answers complete here
	free()
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("call %d, admitted while the others were being answered: status %d, want 200", i, code)
		}
	}
	steps := []struct {
		after time.Duration
		ok    bool
	}{
		{2 * time.Second, false},                       // 1200 completed in the window
		{10*time.Second + 500*time.Millisecond, false}, // 10.5 s after they arrived, 9.5 s after they completed
		{11 * time.Second, true},                       // they left 10 s after completing
	}
	for i, s := range steps {
		c.Set(t0.Add(s.after))
		if got := send(p, body).Code == http.StatusOK; got != s.ok {
			t.Fatalf("step %d at +%s: ok=%v, want %v", i, s.after, got, s.ok)
		}
	}
	st := p.Stats()
	want := []WindowStats{{Tokens: 1200, Requests: 3, Refused: 1}, {Tokens: 400, Requests: 1, Refused: 1}}
	if st.Served != 4 || st.Refused != 2 || len(st.Windows) != 2 || st.Windows[0] != want[0] || st.Windows[1] != want[1] {
		t.Fatalf("stats: served %d, refused %d, windows %+v; want 4, 2, %+v", st.Served, st.Refused, st.Windows, want)
	}
}

// TestHeadersAtAnswer: with SlidingCompletion and HeadersAtAnswer the headers
// state the window as the answer leaves it — this call counted — where by
// default they state it as the call arrived, before it counted.
func TestHeadersAtAnswer(t *testing.T) {
	for _, atAnswer := range []bool{false, true} {
		c := &clock{now: t0}
		p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, PerOutputToken: time.Millisecond,
			Limit: SlidingCompletion, Headers: true, HeadersAtAnswer: atAnswer, Now: c.Now,
			Sleep: func(_ context.Context, d time.Duration) { c.Set(c.Now().Add(d)) }})
		body := bodyOf(t, 1200, "")              // 400, answered in 100 ms
		want := []string{"6000", "3600", "3600"} // per minute: nothing, then 400 completed, as each call arrived
		if atAnswer {
			want = []string{"3600", "1200", "1200"} // 400, 800, 800 counted as each leaves: the first gone by the third
		}
		for i, at := range []time.Duration{0, time.Second, 10*time.Second + 500*time.Millisecond} {
			c.Set(t0.Add(at))
			w := send(p, body)
			if got := w.Header().Get("X-Ratelimit-Remaining-Tokens"); w.Code != http.StatusOK || got != want[i] {
				t.Fatalf("HeadersAtAnswer %v, call %d at +%s: status %d, remaining %s; want 200, %s", atAnswer, i, at, w.Code, got, want[i])
			}
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "HeadersAtAnswer") {
			t.Fatalf("HeadersAtAnswer on a sliding window counted on arrival: %v, want a panic naming it", r)
		}
	}()
	New(Config{Limit: SlidingArrival, Headers: true, HeadersAtAnswer: true})
}

// TestRefusal: a 429 states Retry-After and OpenAI's wording, per minute.
func TestRefusal(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, Now: c.Now})
	body := bodyOf(t, 2400, "") // 600 + 100
	send(p, body)
	w := send(p, body)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "10" {
		t.Fatalf("status %d, Retry-After %q; want 429, 10", w.Code, w.Header().Get("Retry-After"))
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if want := "tokens per min (TPM): Limit 6000, Used 4200, Requested 4200."; !strings.Contains(e.Error.Message, want) || e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("body %s, want a message with %q", w.Body, want)
	}
	if w.Header().Get("X-Ratelimit-Limit-Tokens") != "" {
		t.Fatal("headers sent without Headers")
	}

	p = New(Config{Tokens: 1000, Window: 10 * time.Second, Requests: 2, RetryAfter: 1500 * time.Millisecond, OutputMedian: 10, Now: c.Now})
	small := bodyOf(t, 100, "")
	send(p, small)
	send(p, small)
	w = send(p, small)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), "requests per min (RPM): Limit 12, Used 12") {
		t.Fatalf("request limit: %d, Retry-After %q, %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if st := p.Stats(); st.RefusedRPM != 1 || st.Refused != 1 {
		t.Fatalf("refused %d (rpm %d), want 1 (1)", st.Refused, st.RefusedRPM)
	}
}

// TestUnstatedRefusal: with Unstated a 429 names its limit's axis but states no
// figure — nothing the gate could adopt as a stated limit — while by default
// the gate reads the limit from the wording.
func TestUnstatedRefusal(t *testing.T) {
	c := &clock{now: t0}
	for _, unstated := range []bool{false, true} {
		p := New(Config{Tokens: 1000, Window: 10 * time.Second, Requests: 3, OutputMedian: 100, Now: c.Now, Unstated: unstated})
		body := bodyOf(t, 2400, "") // 600 + 100
		send(p, body)
		w := send(p, body)
		f := &engine.Failure{Status: w.Code, Body: w.Body.String()}
		tokens, requests := engine.StatedLimits(f)
		if w.Code != http.StatusTooManyRequests || engine.RateLimitAxis(f) != engine.AxisTokens {
			t.Fatalf("unstated=%v: status %d, axis %v; want 429 on tokens: %s", unstated, w.Code, engine.RateLimitAxis(f), w.Body)
		}
		if want := map[bool]int64{false: 6000, true: 0}[unstated]; tokens != want || requests != 0 {
			t.Fatalf("unstated=%v: stated %d tokens, %d requests per minute; want %d, 0: %s", unstated, tokens, requests, want, w.Body)
		}
		small := bodyOf(t, 100, "")
		c.Set(t0.Add(20 * time.Second)) // the window is empty again
		send(p, small)
		send(p, small)
		send(p, small)
		w = send(p, small)
		f = &engine.Failure{Status: w.Code, Body: w.Body.String()}
		_, requests = engine.StatedLimits(f)
		if w.Code != http.StatusTooManyRequests || engine.RateLimitAxis(f) != engine.AxisRequests || requests != map[bool]int64{false: 18, true: 0}[unstated] {
			t.Fatalf("unstated=%v, request limit: status %d, axis %v, stated %d: %s", unstated, w.Code, engine.RateLimitAxis(f), requests, w.Body)
		}
		c.Set(t0)
	}
}

// TestUnnamedRefusal: with Unnamed a 429 names neither its limit nor a figure,
// on either axis: the gate reads it as AxisUnknown.
func TestUnnamedRefusal(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, Requests: 3, OutputMedian: 100, Now: c.Now, Unnamed: true})
	body := bodyOf(t, 2400, "") // 600 + 100: the second does not fit the tokens
	send(p, body)
	w := send(p, body)
	c.Set(t0.Add(20 * time.Second))
	small := bodyOf(t, 100, "")
	for range 3 {
		send(p, small)
	}
	w2 := send(p, small) // the fourth does not fit the requests
	for i, w := range []*httptest.ResponseRecorder{w, w2} {
		f := &engine.Failure{Status: w.Code, Body: w.Body.String()}
		tokens, requests := engine.StatedLimits(f)
		if w.Code != http.StatusTooManyRequests || engine.RateLimitAxis(f) != engine.AxisUnknown || tokens != 0 || requests != 0 {
			t.Fatalf("429 %d: status %d, axis %v, stated %d/%d; want an unnamed 429: %s", i, w.Code, engine.RateLimitAxis(f), tokens, requests, w.Body)
		}
	}
}

// TestHeaders: x-ratelimit-* per minute, on successes and 429s.
func TestHeaders(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, Requests: 5, Headers: true, OutputMedian: 100, Now: c.Now})
	body := bodyOf(t, 1200, "") // 400
	steps := []struct {
		at                      time.Time
		status                  int
		remTokens, remRequests  string
		resetTokens, limitToken string
	}{
		{t0, 200, "3600", "24", "10s", "6000"},
		{t0.Add(2 * time.Second), 200, "1200", "18", "10s", "6000"},
		{t0.Add(3 * time.Second), 429, "1200", "18", "9s", "6000"},
	}
	for i, s := range steps {
		c.Set(s.at)
		h := send(p, body)
		if h.Code != s.status || h.Header().Get("X-Ratelimit-Remaining-Tokens") != s.remTokens ||
			h.Header().Get("X-Ratelimit-Remaining-Requests") != s.remRequests || h.Header().Get("X-Ratelimit-Reset-Tokens") != s.resetTokens ||
			h.Header().Get("X-Ratelimit-Limit-Tokens") != s.limitToken || h.Header().Get("X-Ratelimit-Limit-Requests") != "30" {
			t.Fatalf("step %d: %d %v", i, h.Code, h.Header())
		}
	}
}

// TestUsage: deterministic per body, spread by OutputSigma, capped by max_tokens.
func TestUsage(t *testing.T) {
	p := New(Config{OutputMedian: 140, OutputSigma: 0.35, Seed: 7})
	var sum int64
	seen := map[int64]bool{}
	const n = 400
	for i := range n {
		b := bodyOf(t, 3600, `"user":"s`+strings.Repeat("y", i%50)+`",`)
		b[len(b)-10] = byte('a' + i%26)
		b[len(b)-11] = byte('a' + i/26)
		_, out := p.Usage(b)
		if _, again := p.Usage(b); again != out {
			t.Fatal("the same body drew two outputs")
		}
		sum += out
		seen[out] = true
	}
	if mean := float64(sum) / n; mean < 130 || mean > 165 || len(seen) < 50 {
		t.Fatalf("mean output %.1f over %d distinct values; want ≈ 148 and a spread", mean, len(seen))
	}
	capped := bodyOf(t, 3600, `"max_tokens":20,`)
	w := send(p, capped)
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		}
		Usage struct{ PromptTokens, CompletionTokens int64 } `json:"usage"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &r)
	if w.Code != 200 || r.Choices[0].FinishReason != "length" {
		t.Fatalf("max_tokens 20: %d %s", w.Code, w.Body)
	}
	var u struct {
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &u)
	if u.Usage.Prompt != 900 || u.Usage.Completion != 20 {
		t.Fatalf("usage %+v, want 900 + 20", u.Usage)
	}
}

// TestStream: a streamed answer ends with usage when asked for it.
func TestStream(t *testing.T) {
	p := New(Config{OutputMedian: 40})
	srv := httptest.NewServer(p)
	defer srv.Close()
	body := bodyOf(t, 400, `"stream":true,"stream_options":{"include_usage":true},`)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := string(b)
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(s, "data: ") != 3+1+1+1 ||
		!strings.Contains(s, `"usage":{"completion_tokens":40,"prompt_tokens":100,"total_tokens":140}`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("stream:\n%s", s)
	}
}

// TestHammer: P goroutines send at once at one instant; exactly the calls that
// fit are served, whatever the interleaving.
func TestHammer(t *testing.T) {
	const P, N = 16, 25
	c := &clock{now: t0}
	p := New(Config{Tokens: 10_000, OutputMedian: 100, Now: c.Now, MaxRefusals: 8})
	body := bodyOf(t, 400, "") // 200
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range N {
				if send(p, body).Code == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	st := p.Stats()
	if ok.Load() != 50 || st.Served != 50 || st.Refused != P*N-50 || len(st.Refusals) != 8 {
		t.Fatalf("served %d (stats %d), refused %d, %d refusal times kept; want 50, %d, 8", ok.Load(), st.Served, st.Refused, len(st.Refusals), P*N-50)
	}
}

// TestBounded: the window's entries and the records stay bounded over a long run.
func TestBounded(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: time.Second, OutputMedian: 100, Now: c.Now, MaxWindows: 4, MaxRefusals: 3})
	body := bodyOf(t, 400, "") // 200
	for i := range 1000 {
		c.Set(t0.Add(time.Duration(i) * 100 * time.Millisecond))
		send(p, body)
		send(p, body)
	}
	st := p.Stats()
	if len(st.Windows) != 4 || st.FirstWindow != 96 || len(st.Refusals) != 3 || len(p.entries) > 1000/200*2 {
		t.Fatalf("%d windows from %d, %d refusals, %d window entries", len(st.Windows), st.FirstWindow, len(st.Refusals), len(p.entries))
	}
	if w := st.Windows[3]; w.Tokens != 1000 || w.Requests != 5 || w.Refused != 15 {
		t.Fatalf("last window %+v", w)
	}
	if last := st.Refusals[2]; last != 99*time.Second+900*time.Millisecond {
		t.Fatalf("latest refusal at %s", last)
	}
}

// TestDecidesKnown: with DecidesKnown a call is decided on its prompt and
// max_tokens while calls in flight count that much, and its output counts,
// at its arrival, once written. Decided on the whole cost, the second call
// below is refused.
func TestDecidesKnown(t *testing.T) {
	for _, known := range []bool{true, false} {
		c := &clock{now: t0}
		entered, release := make(chan struct{}, 2), make(chan struct{})
		p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 500, Latency: time.Millisecond, DecidesKnown: known, Now: c.Now,
			Sleep: func(context.Context, time.Duration) { entered <- struct{}{}; <-release }})
		codes := make([]int, 2)
		done := make([]chan struct{}, 2)
		for i, b := range [][]byte{
			bodyOf(t, 1200, ""),                  // 300 prompt + 500 output
			bodyOf(t, 1200, `"max_tokens":200,`), // 300 prompt + 200 output
		} {
			done[i] = make(chan struct{})
			go func() { defer close(done[i]); codes[i] = send(p, b).Code }()
			select { // the call is answered (held in flight) or refused
			case <-entered:
			case <-done[i]:
			}
		}
		close(release)
		<-done[0]
		<-done[1]
		if !known {
			if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests {
				t.Fatalf("whole: statuses %v, want 200 then 429 (800 + 500 > 1000)", codes)
			}
			continue
		}
		// 300 in flight + 500 (300 prompt, 200 max_tokens) ≤ 1000: both go
		if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
			t.Fatalf("known: statuses %v, want both 200", codes)
		}
		// once written, 800 + 500 count: a call of 100 + max_tokens 1 does not fit
		c.Set(t0.Add(time.Second))
		if code := send(p, bodyOf(t, 400, `"max_tokens":1,`)).Code; code != http.StatusTooManyRequests {
			t.Fatalf("known: status %d; the outputs written should count", code)
		}
		c.Set(t0.Add(10 * time.Second)) // both left the window
		if code := send(p, bodyOf(t, 400, `"max_tokens":1,`)).Code; code != http.StatusOK {
			t.Fatalf("known: status %d once the window emptied", code)
		}
	}
}

// WindowTokens is what the sliding window holds: the calls counted within the
// last window, none once it has passed.
func TestWindowTokens(t *testing.T) {
	p := New(Config{Tokens: 1000, Window: 10 * time.Second})
	srv := httptest.NewServer(p)
	defer srv.Close()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	now := time.Now()
	if got := p.WindowTokens(now); got <= 0 || got != p.Stats().Tokens {
		t.Fatalf("window holds %d after one call of %d tokens", got, p.Stats().Tokens)
	}
	if got := p.WindowTokens(now.Add(11 * time.Second)); got != 0 {
		t.Errorf("window holds %d a window later, want 0", got)
	}
}

// brokenBody reads part of a body, then fails: a client that went away while
// writing it.
type brokenBody struct{ r io.Reader }

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestBodyCutIsNoBadRequest: a body that stopped before its end is counted
// as cut, not as an unreadable request (the timing tests fail on those as
// harness errors, and a call cut mid-send at a run's end made one; they check
// the cut bodies against the calls they cut); a body that is not a chat
// completion is an unreadable request.
func TestBodyCutIsNoBadRequest(t *testing.T) {
	c := &clock{now: t0}
	p := New(Config{Tokens: 1000, Window: 10 * time.Second, OutputMedian: 100, Now: c.Now})
	cut := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", &brokenBody{strings.NewReader(`{"model":"m","messages":[{"ro`)})
	w := httptest.NewRecorder()
	p.ServeHTTP(w, cut)
	if st := p.Stats(); w.Code != http.StatusBadRequest || st.CutBodies != 1 || st.BadRequests != 0 || st.Served != 0 {
		t.Fatalf("a cut body: %d, %d cut, %d bad requests, %d served; want 400, 1 cut and nothing else", w.Code, st.CutBodies, st.BadRequests, st.Served)
	}
	if w := send(p, []byte(`{"model":"m","messages":[{"ro`)); w.Code != http.StatusBadRequest || p.Stats().BadRequests != 1 || p.Stats().CutBodies != 1 {
		t.Fatalf("a whole body that is not JSON: %d, %+v; want 400 and one bad request", w.Code, p.Stats())
	}
}
