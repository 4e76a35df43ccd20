package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/gatectl/gatectl/internal/testenv"
)

// The output axis over real HTTP: an Anthropic Messages API on 127.0.0.1 whose
// binding limit is on output tokens alone (its OTPM), a real gatectl server in
// front of it, and 30 closed-loop sessions writing long answers. The input
// limit is far away; the output limit is hidden, but where the answers' headers
// state it, as Anthropic's do.
//
//	go test ./server/ -run TestGateOutputLimitE2E -v -count=1
//
// Before the output axis, a 429 about the output was read in the token window:
// under the input limit the headers stated it was taken for another client's
// spend and taught nothing, so the gate refilled into the next 429 at each
// cooldown's end (docs/benchmarks.md, "Output tokens apart").

const (
	otpmWindow   = 5 * time.Second
	otpmLimit    = 20_000 // output tokens per otpmWindow: 240,000 a minute
	otpmDuration = 15 * time.Second
	otpmSessions = 30
	otpmMax      = 400 // each call's max_tokens; it writes 150–350
)

// otpmUpstream is the fake: it counts a call's max_tokens against the output
// limit when the call arrives and corrects it to what it wrote when it ends
// (as Anthropic documents for OTPM), in a sliding window.
type otpmUpstream struct {
	headers bool

	mu      sync.Mutex
	epoch   time.Time
	entries []otpmEntry
	seq     int
	served  []int64 // output written per window since epoch
	refused []time.Duration
	calls   int
}

type otpmEntry struct {
	at  time.Time
	out int64
	id  int
}

func (u *otpmUpstream) usedLocked(now time.Time) int64 {
	var n int64
	keep := u.entries[:0]
	for _, e := range u.entries {
		if now.Sub(e.at) < otpmWindow {
			keep = append(keep, e)
			n += e.out
		}
	}
	u.entries = keep
	return n
}

func (u *otpmUpstream) limitHeaders(h http.Header, remaining int64) {
	if !u.headers {
		return
	}
	perMinute := int64(otpmLimit * int64(time.Minute/otpmWindow))
	h.Set("anthropic-ratelimit-input-tokens-limit", "40000000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "39000000")
	h.Set("anthropic-ratelimit-output-tokens-limit", strconv.FormatInt(perMinute, 10))
	h.Set("anthropic-ratelimit-output-tokens-remaining", strconv.FormatInt(max(0, remaining)*int64(time.Minute/otpmWindow), 10))
	// The tighter of the two token limits, as Anthropic states it: the output one.
	h.Set("anthropic-ratelimit-tokens-limit", strconv.FormatInt(perMinute, 10))
	h.Set("anthropic-ratelimit-tokens-remaining", strconv.FormatInt(max(0, remaining)*int64(time.Minute/otpmWindow), 10))
	h.Set("anthropic-ratelimit-requests-limit", "100000")
	h.Set("anthropic-ratelimit-requests-remaining", "99000")
}

func (u *otpmUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		MaxTokens int64 `json:"max_tokens"`
		Seed      int   `json:"metadata_seed"`
	}
	if json.Unmarshal(body, &req) != nil || req.MaxTokens <= 0 {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens is required"}}`, http.StatusBadRequest)
		return
	}
	now := time.Now()
	u.mu.Lock()
	u.calls++
	used := u.usedLocked(now)
	if used+req.MaxTokens > otpmLimit {
		// When the oldest entries free enough room: the wait Anthropic's
		// retry-after states, in whole seconds.
		wait, free := time.Duration(0), used+req.MaxTokens-otpmLimit
		for _, e := range u.entries {
			if free -= e.out; free <= 0 {
				wait = otpmWindow - now.Sub(e.at)
				break
			}
		}
		u.refused = append(u.refused, now.Sub(u.epoch))
		u.limitHeaders(w.Header(), 0)
		u.mu.Unlock()
		w.Header().Set("retry-after", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (fake) of %d output tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}`, otpmLimit*int64(time.Minute/otpmWindow))
		return
	}
	u.seq++
	id := u.seq
	u.entries = append(u.entries, otpmEntry{at: now, out: req.MaxTokens, id: id})
	remaining := otpmLimit - used - req.MaxTokens
	u.mu.Unlock()

	rng := rand.New(rand.NewPCG(uint64(id), 9))
	out := int64(150 + rng.IntN(201))
	time.Sleep(5*time.Millisecond + time.Duration(out)*50*time.Microsecond)
	in := int64(len(body) / 4)

	u.mu.Lock()
	for i := range u.entries {
		if u.entries[i].id == id {
			u.entries[i].out = out // corrected to what it wrote
		}
	}
	if k := int(now.Sub(u.epoch) / otpmWindow); k >= 0 {
		for len(u.served) <= k {
			u.served = append(u.served, 0)
		}
		u.served[k] += out
	}
	u.limitHeaders(w.Header(), remaining)
	u.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	fmt.Fprintf(w, `{"id":"msg_%d","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"%s"}],"stop_reason":"end_turn","usage":{"input_tokens":%d,"output_tokens":%d}}`,
		id, strings.Repeat("x", int(out)), in, out)
}

type otpmResult struct {
	ok, lost, harness int
	refused           []time.Duration
	served            []int64
	status            string
	model             gate.BucketStatus // the model's status at the end
	steps             []string          // the gate's log lines about output limits and 429s
}

// runOTPM runs the sessions against a fake with headers or without for
// otpmDuration and returns what the provider and the clients saw.
func runOTPM(t *testing.T, headers bool, instances int) otpmResult {
	up := &otpmUpstream{headers: headers}
	hs := httptest.NewServer(up)
	t.Cleanup(hs.Close)
	cfg := fmt.Sprintf(`
providers:
  anth: {kind: anthropic, baseURL: %s}
gate:
  window: %s
  defaults: {tpm: 10000000, rpm: 100000}
`, hs.URL, otpmWindow)
	if instances > 1 { // several gatectl processes sharing the key through Redis
		cfg += fmt.Sprintf("store:\n  redis: {url: %q}\n", redistest.Start(t).URL())
	}
	fs := make([]*pxFixture, max(instances, 1))
	for i := range fs {
		fs[i] = newPxFixtureWith(t, cfg, nil)
	}
	f := fs[0]
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * otpmSessions}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	start := time.Now()
	up.mu.Lock()
	up.epoch = start
	up.mu.Unlock()
	stopAt := start.Add(otpmDuration)
	ctx, cancel := context.WithDeadline(context.Background(), stopAt.Add(2*otpmWindow))
	defer cancel()
	var res otpmResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range otpmSessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprintf("s%02d", s)
			for i := 0; i < 2000 && time.Now().Before(stopAt); i++ {
				body := fmt.Sprintf(`{"model":"anth/claude-fake","max_tokens":%d,"messages":[{"role":"user","content":"%s turn %d %s"}]}`,
					otpmMax, session, i, strings.Repeat("lorem ", 600)) // about 900 input tokens
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fs[s%len(fs)].url+"/v1/messages", strings.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("X-Gate-Session", session)
				resp, err := client.Do(req)
				if err != nil {
					return // cut at the end
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch {
				case resp.StatusCode == http.StatusOK:
					res.ok++
				case resp.Header.Get("X-Gate-Class") != "":
					res.lost++
				default:
					res.harness++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	up.mu.Lock()
	res.refused = append([]time.Duration(nil), up.refused...)
	res.served = append([]int64(nil), up.served...)
	up.mu.Unlock()
	if d := os.Getenv("OTPM_LOG"); d != "" {
		_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("otpm-%v-%d.log", headers, instances)), []byte(f.logs.String()), 0o644)
	}
	for _, line := range strings.Split(f.logs.String(), "\n") {
		if strings.Contains(line, "output-") || strings.Contains(line, "rate-limited") {
			res.steps = append(res.steps, line)
		}
	}
	if resp, err := http.Get(f.url + "/gate/v1/status"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.status = string(b)
		var st APIStatus
		if json.Unmarshal(b, &st) == nil {
			for _, m := range st.Models {
				if m.Provider == "anth" && m.Model == "claude-fake" {
					res.model = m
				}
			}
		}
	}
	return res
}

func TestGateOutputLimitE2E(t *testing.T) {
	testenv.RealTiming(t)
	cases := []struct {
		name      string
		headers   bool
		max429    int
		floor     float64 // of the output limit from window 1 on; the target is 0.90 (logged when missed)
		instances int
	}{
		// Anthropic's way: every answer states the output limit; the gate holds
		// to it from the first answer on.
		{"OTPMStated", true, 0, 0.90, 1},
		// Only the 429's words name the output limit (and its figure, which
		// caps the reading: engine.OutputLimitInWords): the first 429 teaches it.
		// The calls already sent when it comes back meet it too (one to six,
		// all within 90 ms, in most runs recorded; 15 within 65 ms in one
		// `.ci/run`: nothing could hold them, no limit being known). How many
		// is the machine's timing, bounded by one a session — each has at
		// most one call out — and none may come after the first window. What
		// it learned is on the output axis, the token window untouched (before
		// the axis, the same 429 set the token trigger). The reading is the
		// gate's count of a window a third of which is calls in flight at their
		// max_tokens, and calls reach the provider in another order than they
		// left the gate: 0.859–0.968 of the limit in most runs recorded, 0.745
		// in one `.ci/run` whose reading lay a quarter under the limit
		// (docs/benchmarks.md). Hence a floor far under the target, which is
		// logged when missed.
		{"OTPMInWords", false, otpmSessions, 0.60, 1},
		// Two gatectl instances sharing the key through Redis, the limit
		// stated: the output window is shared (docs/redis.md), so the two
		// together hold to it as one does. (With each counting only its own
		// calls, they met the limit at half of it each: one or two 429s,
		// each read as this instance's share, 0.906–0.921 of the limit, and
		// a trigger under the stated limit that steps back up into the next
		// 429 after ten windows.)
		{"OTPMStatedTwoInstances", true, 0, 0.90, 2},
	}
	// The one-instance cases side by side, then the two instances: run beside
	// them, the words' case took 9–10 429s in its first 90 ms in two runs of
	// six (the machine's two cores busier, more calls left before its first
	// 429 was read).
	results := make([]otpmResult, len(cases))
	for _, many := range []bool{false, true} {
		var wg sync.WaitGroup
		for i, c := range cases {
			if (c.instances > 1) != many {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = runOTPM(t, c.headers, c.instances) }()
		}
		wg.Wait()
	}
	for i, c := range cases {
		r := results[i]
		windows := int(otpmDuration / otpmWindow)
		var served []string
		var learned, total int64
		for k := 0; k < windows && k < len(r.served); k++ {
			served = append(served, fmt.Sprintf("%.1fk", float64(r.served[k])/1000))
			total += r.served[k]
			if k >= 1 {
				learned += r.served[k]
			}
		}
		util := float64(learned) / float64(otpmLimit*(windows-1))
		t.Logf("%s: %d calls ok, %d lost, %d harness errors; %d 429s (at %v); output served per %s window: %s; from window 1 on %.3f of the limit",
			c.name, r.ok, r.lost, r.harness, len(r.refused), r.refused, otpmWindow, strings.Join(served, " "), util)
		if t.Failed() || len(r.refused) > 1 {
			for _, l := range r.steps {
				t.Logf("%s: %.300s", c.name, l)
			}
		}
		if r.harness > 0 || r.ok == 0 {
			t.Errorf("%s: %d harness errors, %d calls served", c.name, r.harness, r.ok)
		}
		if r.lost > 0 {
			t.Errorf("%s: %d calls lost", c.name, r.lost)
		}
		if len(r.refused) > c.max429 {
			t.Errorf("%s: %d 429s, want at most %d", c.name, len(r.refused), c.max429)
		}
		for _, at := range r.refused {
			if at >= otpmWindow {
				t.Errorf("%s: a 429 at %s, after the first window: the output limit was not learned", c.name, at)
				break
			}
		}
		if util < c.floor {
			t.Errorf("%s: %.3f of the output limit served from window 1 on, want at least %.2f", c.name, util, c.floor)
		} else if util < 0.90 {
			reportMisses(t, c.name, []string{fmt.Sprintf("%.3f of the output limit from window 1 on < 0.90", util)})
		}
		if m := r.model; m.OutputLimit <= 0 || m.Trigger != 0 || (c.headers && m.OutputStated != float64(otpmLimit)) || (!c.headers && m.OutputTrigger <= 0) {
			t.Errorf("%s: the model's status %+v, want an output limit (stated: %v) and no token trigger: %.400s", c.name, m, c.headers, r.status)
		}
	}
}
