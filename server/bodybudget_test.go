package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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
			case resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "1" && strings.Contains(string(b), "server.maxBufferedBytes"):
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
