package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBodyBudgetBoundsConcurrentBodies: 20 concurrent 8 MiB requests against a
// 96 MiB budget: at most as many reach the upstream at once as fit in the
// requests' share (each holds its body twice), the rest get 503 with Retry-After
// after the short wait, every call gets an answer, and the budget is empty after.
func TestBodyBudgetBoundsConcurrentBodies(t *testing.T) {
	const (
		clients = 20
		size    = 8 << 20
		budget  = 96 << 20
	)
	var inFlight, peak atomic.Int64
	release := make(chan struct{})
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		chatOK(1, 1, 0)(w, r)
	})
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  p: {kind: openai, baseURL: %s/v1}
server: {maxBufferedBytes: %d}
`, up.URL, budget), false)
	// One body shared by every client: a JSON object with a long message.
	body := []byte(`{"model":"p/m","messages":[{"role":"user","content":"` + strings.Repeat("x", size-64) + `"}]}`)
	fits := int64(float64(budget)*requestShare) / (2 * int64(len(body)))

	var wg sync.WaitGroup
	var ok, full, other atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				other.Add(1)
				t.Errorf("no answer: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200:
				ok.Add(1)
			case resp.StatusCode == 503 && validSpreadRetryAfter(resp.Header.Get("Retry-After")) && strings.Contains(string(b), "server.maxBufferedBytes"):
				full.Add(1)
			default:
				other.Add(1)
				t.Errorf("status %d: %.200s", resp.StatusCode, b)
			}
		}()
	}
	// The refused ones are answered within bufferWait; then the held ones may go.
	waitFor(t, "the calls past the budget to be refused", func() bool { return full.Load()+other.Load() >= clients-fits })
	if n := f.srv.bodies.inUse(); n > int64(float64(budget)*requestShare) {
		t.Fatalf("the budget holds %d bytes, over the requests' share of %d", n, budget)
	}
	close(release)
	wg.Wait()
	if ok.Load()+full.Load() != clients || other.Load() != 0 {
		t.Fatalf("ok %d, 503 %d, other %d: want every one of %d answered 200 or 503", ok.Load(), full.Load(), other.Load(), clients)
	}
	if peak.Load() > fits || ok.Load() > fits || ok.Load() == 0 {
		t.Fatalf("%d reached the upstream at once and %d succeeded; at most %d fit in %d bytes", peak.Load(), ok.Load(), fits, budget)
	}
	if n := f.srv.bodies.inUse(); n != 0 {
		t.Fatalf("the budget holds %d bytes after every call ended", n)
	}
}

// TestProxyOversizedAnswerIsPermanent: an answer over the 64 MiB limit is one
// failure, not a TRANSPORT one retried: one download, a 502 naming the limit,
// x-should-retry false. Announced over the limit, nothing of it is read.
func TestProxyOversizedAnswerIsPermanent(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run("declared="+strconv.FormatBool(declared), func(t *testing.T) {
			var sent atomic.Int64
			up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if declared {
					w.Header().Set("Content-Length", strconv.Itoa(maxResponseBody+1))
				}
				w.WriteHeader(200)
				chunk := bytes.Repeat([]byte(" "), 1<<20)
				for range maxResponseBody>>20 + 1 {
					n, err := w.Write(chunk)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
				_, _ = w.Write([]byte("x"))
			})
			f := newPxFixture(t, fmt.Sprintf("providers:\n  p: {kind: openai, baseURL: %s/v1}\nretry: {initialDelay: 10ms}\n", up.URL), false)
			r, body := f.call("/v1/chat/completions", chatReq("p/m"))
			if r.StatusCode != http.StatusBadGateway || r.Header.Get("X-Should-Retry") != "false" ||
				!strings.Contains(body, "64 MiB") || !strings.Contains(body, "not retried") {
				t.Fatalf("status %d should-retry %q: %s", r.StatusCode, r.Header.Get("X-Should-Retry"), body)
			}
			if up.n() != 1 {
				t.Fatalf("the upstream was asked %d times, want once", up.n())
			}
			if n := f.srv.bodies.inUse(); n != 0 {
				t.Fatalf("the budget holds %d bytes after the call", n)
			}
		})
	}
}

// TestBodyBudgetAnswerWithoutRoom: an upstream answer that finds no room within
// the wait is gatectl's own 503 with Retry-After, not an upstream failure, and
// it is not retried. The room is held by an earlier answer whose client does not
// read it.
func TestBodyBudgetAnswerWithoutRoom(t *testing.T) {
	const answer = 60 << 20 // two of these do not fit in 96 MiB
	big := bytes.Repeat([]byte(" "), answer)
	copy(big, `{"id":"c1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		_, _ = w.Write(big)
	})
	f := newPxFixture(t, fmt.Sprintf("providers:\n  p: {kind: openai, baseURL: %s/v1}\nserver: {maxBufferedBytes: %d}\n", up.URL, 96<<20), false)
	// The first client reads only the headers: its answer stays in the budget
	// while gatectl writes it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := f.post(ctx, "/v1/chat/completions", chatReq("p/m"))
	defer first.Body.Close()
	if first.StatusCode != 200 {
		t.Fatalf("first call: status %d", first.StatusCode)
	}
	r, body := f.call("/v1/chat/completions", chatReq("p/m"))
	if r.StatusCode != http.StatusServiceUnavailable || !validSpreadRetryAfter(r.Header.Get("Retry-After")) || !strings.Contains(body, "server.maxBufferedBytes") {
		t.Fatalf("second call: status %d retry-after %q: %.300s", r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	if up.n() != 2 {
		t.Fatalf("the upstream was asked %d times, want 2 (no retry of the answer without room)", up.n())
	}
	cancel()
	first.Body.Close()
	waitFor(t, "the budget to empty", func() bool { return f.srv.bodies.inUse() == 0 })
}

// TestBodyBudgetSemaphore: the ceilings, the grant order and a cancelled wait.
func TestBodyBudgetSemaphore(t *testing.T) {
	b := newBodyBudget(100)
	ctx := context.Background()
	if n, err := b.acquire(ctx, 70, true); n != 70 || err != nil { // requests: at most 75
		t.Fatalf("acquire 70: %d %v", n, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.acquire(done, 10, true); err != errBudgetFull { // 80 > 75
		t.Fatalf("a request past its share: %v", err)
	}
	if n, err := b.acquire(ctx, 30, false); n != 30 || err != nil { // answers: up to 100
		t.Fatalf("an answer within the whole budget: %d %v", n, err)
	}
	got := make(chan int64, 2)
	go func() { n, _ := b.acquire(ctx, 50, false); got <- n }()
	go func() { n, _ := b.acquire(ctx, 1000, false); got <- n }() // clamped to the whole budget: runs alone
	waitFor(t, "two waiters", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 2 })
	b.release(70)
	if n := <-got; n != 50 {
		t.Fatalf("the waiter that fits got %d", n)
	}
	b.release(30)
	b.release(50)
	if n := <-got; n != 100 {
		t.Fatalf("the clamped waiter got %d", n)
	}
	b.release(100)
	if b.inUse() != 0 || len(b.waiters) != 0 {
		t.Fatalf("in use %d, waiters %d", b.inUse(), len(b.waiters))
	}
}

// readBudgeted reads bodies of unknown length whole, at the chunk edges too;
// refuses one over the limit (and releases what it took), or keeps the first
// limit bytes with truncate; and never charges the budget more than the limit
// and the one byte that tells the end.
func TestReadBudgetedSizes(t *testing.T) {
	const limit = 1<<20 + 5
	for _, n := range []int{0, 1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 128 << 10, 1 << 20, limit, limit + 1, 3 << 20} {
		for _, truncate := range []bool{false, true} {
			body := make([]byte, n)
			for i := range body {
				body[i] = byte(i*7 + i/251)
			}
			b := newBodyBudget(64 << 20)
			res, err := b.readBudgeted(context.Background(), time.Second, &shortReader{b: body}, -1, limit, false, truncate, "the answer")
			switch {
			case n > limit && !truncate:
				var tl *errTooLarge
				if !errors.As(err, &tl) || tl.size != limit+1 {
					t.Fatalf("%d bytes: err %v, want errTooLarge at %d", n, err, limit+1)
				}
				if used := b.inUse(); used != 0 {
					t.Fatalf("%d bytes refused: %d bytes of the budget still taken", n, used)
				}
				continue
			case err != nil:
				t.Fatalf("%d bytes (truncate %v): %v", n, truncate, err)
			}
			want := body[:min(n, limit)]
			if !bytes.Equal(res.b, want) {
				t.Fatalf("%d bytes (truncate %v): read %d bytes, not the body's first %d", n, truncate, len(res.b), len(want))
			}
			if res.charged > limit+1 || b.inUse() != res.charged {
				t.Fatalf("%d bytes: charged %d (in use %d), want at most %d and all of it held", n, res.charged, b.inUse(), limit+1)
			}
			b.release(res.charged)
		}
	}
}

// shortReader returns at most 1,000 bytes a read.
type shortReader struct{ b []byte }

func (r *shortReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 1000)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// An answer of unknown length over the limit is refused having allocated about
// the limit, not the three times the limit that doubling one buffer allocated
// (1.0× against 3.0× measured): on a machine whose fresh pages fault in slowly,
// three such answers at once took seconds to refuse (docs/faults.md).
func TestReadBudgetedOversizedAllocatesTheLimit(t *testing.T) {
	const limit = 32 << 20
	b := newBodyBudget(256 << 20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := b.readBudgeted(context.Background(), time.Second, &zeroes{n: 2 * limit}, -1, limit, false, false, "the answer")
	runtime.ReadMemStats(&after)
	var tl *errTooLarge
	if !errors.As(err, &tl) {
		t.Fatalf("err %v, want errTooLarge", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit*3/2 {
		t.Fatalf("allocated %d bytes refusing an answer over %d, want at most 1.5× the limit", alloc, limit)
	}
}

// zeroes reads n zero bytes, at most 1,000 a read, allocating nothing.
type zeroes struct{ n int }

var zeroBlock [1000]byte

func (r *zeroes) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], zeroBlock[:])
	r.n -= n
	return n, nil
}

// TestBodyBudget429WithoutRoom: a 429 whose error body finds no room in the
// budget is answered 503 like any answer without room, and still reaches the
// gate: its status and Retry-After carry the model's cooldown. Dropped, the
// model got none, and every other session kept sending into the limit. Two
// answers held by clients that read only their headers (60 and 35.5 MiB of 96)
// leave less than the error body's MiB when the 429 comes.
func TestBodyBudget429WithoutRoom(t *testing.T) {
	answer := func(size int) http.HandlerFunc {
		big := bytes.Repeat([]byte(" "), size)
		copy(big, `{"id":"c1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		}
	}
	release := make(chan struct{})
	up := newFakeUpstream(t,
		func(w http.ResponseWriter, r *http.Request) { // the 429, once the answers hold the budget
			<-release
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(bytes.Repeat([]byte(" "), 1<<20))
		},
		answer(60<<20), answer(71<<19))
	f := newPxFixture(t, fmt.Sprintf("providers:\n  p: {kind: openai, baseURL: %s/v1}\nserver: {maxBufferedBytes: %d}\n", up.URL, 96<<20), false)
	type result struct {
		status int
		body   string
	}
	limited := make(chan result, 1)
	go func() {
		r, body := f.call("/v1/chat/completions", chatReq("p/x"))
		limited <- result{r.StatusCode, body}
	}()
	waitFor(t, "the call the upstream holds", func() bool { return up.n() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range []string{"p/a", "p/c"} {
		held := f.post(ctx, "/v1/chat/completions", chatReq(m))
		defer held.Body.Close()
		if held.StatusCode != 200 {
			t.Fatalf("%s: status %d", m, held.StatusCode)
		}
	}
	close(release)
	r := <-limited
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "server.maxBufferedBytes") {
		t.Fatalf("the 429's call: status %d: %.300s", r.status, r.body)
	}
	if st := f.status("p", "x"); st.CooldownMs <= 0 || st.RateLimited != 1 {
		t.Fatalf("cooldown %dms, 429s %d after the unread 429: want its 7 s cooldown", st.CooldownMs, st.RateLimited)
	}
	cancel()
	waitFor(t, "the budget to empty", func() bool { return f.srv.bodies.inUse() == 0 })
}
