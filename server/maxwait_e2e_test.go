package server

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/testenv"
)

// TestMaxWaitBurstOverRealSockets: sixty sessions send one call each at once
// to a provider that takes about four a window (2 s), the gate at the truth
// with a 5 s maxWait. The queue drains four calls a window; the rest reach
// maxWait together. Each fails open at its own point of maxWait's last tenth
// (engine/gate, deadlineLocked), so the first meets the provider alone, its
// 429 starts the cooldown, and the proxy sends none of the others into it
// (proxy_cooling.go): they sit the pause out and ask again, and a call that
// reaches maxWait in a pause a second time is answered 429. With the grants
// forced in one dispatch: 22 and 11 429s at the provider in two runs (a
// cohort at 5.0 s, or, when a 429 just before covered it, at the next
// maxWait). Spread, but forced by whichever dispatch came first and the
// sat-out calls queued again together: 10, 3, 7, 2. Forced at each waiter's
// own look, a round trip apart, the short pause sat out in the queue: 2–3 in
// eight runs; the bound leaves room for a slower machine.
func TestMaxWaitBurstOverRealSockets(t *testing.T) {
	testenv.RealTiming(t)
	const sessions = 60
	prov, f := pausingProvider(t, 5000, 2*time.Second, 2*time.Second, `
retry: {rounds: 0}
gate:
  window: 2s
  maxWait: 5s
  outputReserveTokens: 200
  defaults: {tpm: 5000, rpm: 100000}
`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions}, Timeout: 30 * time.Second}
	start := time.Now()
	prov.SetEpoch(start)
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 9))
			session := fmt.Sprintf("s%02d", s)
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, f.url+"/v1/chat/completions",
				strings.NewReader(string(timingBody(session, 0, rng, false))))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", session)
			resp, err := client.Do(req)
			code := 0
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	st := prov.Stats()
	t.Logf("%d calls at once: answers %v; the provider served %d and refused %d, at %v", sessions, statuses, st.Served, st.Refused, st.Refusals)
	if st.Served < 8 || statuses[0] != 0 {
		t.Fatalf("served %d, %d calls without an answer: the run did not drain the queue", st.Served, statuses[0])
	}
	if st.Refused > 6 {
		t.Fatalf("the provider refused %d calls at %v: the calls reaching maxWait went together", st.Refused, st.Refusals)
	}
}
