package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The visible waits, end to end over real HTTP on the system clock: a gatectl
// server on loopback in front of a fake upstream, the gate held by a cooldown
// recorded in its ledger. Every wait here is bounded (a second or two).

func holdConfig(openaiURL, anthURL, proxy string) string {
	return fmt.Sprintf(`
providers:
  pa:   {kind: openai, baseURL: %s/v1}
  anth: {kind: anthropic, baseURL: %s}
retry:
  rounds: 2
proxy:
%s
`, openaiURL, anthURL, proxy)
}

// coolDown holds every call to provider/model for d from now.
func (f *pxFixture) coolDown(provider, model string, d time.Duration) {
	f.srv.Ledger().RateLimitedBy(f.srv.clock.Now(), provider, model, engine.RateLimit{RetryAfter: d})
}

// sseLine is one line of a response body and when it arrived.
type sseLine struct {
	text string
	at   time.Time
}

// readLines reads body line by line until EOF, bounded by the test's deadline.
func readLines(t *testing.T, body io.Reader) []sseLine {
	t.Helper()
	var out []sseLine
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		out = append(out, sseLine{sc.Text(), time.Now()})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return out
}

func streamingChat(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, chatChunk("po"), chatChunk("ng"), usageChunk(3, 2), "data: [DONE]\n\n")
}

// TestHoldStreamGetsHeadersAndCommentsBeforeAdmission: a streamed request held
// by the gate receives its headers and ": gatectl waiting" comments before it is
// admitted, then the upstream's stream, whole.
func TestHoldStreamGetsHeadersAndCommentsBeforeAdmission(t *testing.T) {
	up := newFakeUpstream(t, streamingChat)
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 100ms\n  holdNoticeEvery: 200ms"), false)
	f.coolDown("pa", "m", 1200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := f.post(ctx, "/v1/chat/completions", chatReq("pa/m", "stream", true))
	defer resp.Body.Close()
	// No upstream call yet: the headers came while the gate held the call (a
	// bound in real time would only add a way to fail on a loaded machine).
	if up.n() != 0 {
		t.Fatalf("the headers came after the upstream call (%d calls): they must come while the gate holds", up.n())
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("X-Gate-Held") != "true" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	lines := readLines(t, resp.Body)
	var comments, data []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.text, ":"):
			if len(data) > 0 {
				t.Fatalf("a comment after the data began: %q", l.text)
			}
			comments = append(comments, l.text)
		case strings.HasPrefix(l.text, "data: "):
			data = append(data, strings.TrimPrefix(l.text, "data: "))
		}
	}
	if len(comments) < 3 {
		t.Fatalf("%d comments, want one every 200ms through a ~1.2s hold: %q", len(comments), comments)
	}
	for _, c := range comments {
		if !strings.HasPrefix(c, ": gatectl waiting ") || !strings.Contains(c, "on pa/m") {
			t.Fatalf("comment %q: want ': gatectl waiting Ns (REASON on pa/m…)'", c)
		}
	}
	if !strings.Contains(comments[0], "left)") {
		t.Errorf("the first comment %q does not say the expected rest of the wait", comments[0])
	}
	if len(data) != 3 || !strings.Contains(data[0], `"po"`) || !strings.Contains(data[1], `"ng"`) || data[2] != "[DONE]" {
		t.Fatalf("data = %q, want the two chunks and [DONE] (usage stripped)", data)
	}
	if up.n() != 1 {
		t.Fatalf("%d upstream calls, want 1", up.n())
	}
}

// TestHoldStreamShortWaitSendsNothingEarly: a wait shorter than
// proxy.holdNotice leaves the response exactly as the upstream's.
func TestHoldStreamShortWaitSendsNothingEarly(t *testing.T) {
	up := newFakeUpstream(t, streamingChat)
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 5s"), false)
	f.coolDown("pa", "m", 300*time.Millisecond)
	resp, body := f.call("/v1/chat/completions", chatReq("pa/m", "stream", true))
	if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Held") != "" || strings.Contains(body, ": gatectl") || resp.Header.Get("X-Gate-Waited-Ms") == "" {
		t.Fatalf("status %d headers %v body %q", resp.StatusCode, resp.Header, body)
	}
}

// TestHoldStreamErrorShapes: a failure after a held stream's headers went out
// is the protocol's own error event — OpenAI's `data: {"error":…}`,
// Anthropic's `event: error` with `{"type":"error","error":…}` — carrying the
// upstream's error object; the SDKs raise it as an API error.
func TestHoldStreamErrorShapes(t *testing.T) {
	openaiErr := `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}`
	anthErr := `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}`
	cases := []struct {
		name, path, model string
		upstream          string
		body              map[string]any
		want              []string // consecutive lines after the comments
	}{
		{"openai", "/v1/chat/completions", "pa/m", openaiErr, chatReq("pa/m", "stream", true),
			[]string{`data: {"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}`}},
		{"anthropic", "/v1/messages", "anth/claude", anthErr,
			map[string]any{"model": "anth/claude", "max_tokens": 5, "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}}},
			[]string{"event: error", `data: {"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t, jsonAnswer(400, tc.upstream))
			f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 50ms\n  holdNoticeEvery: 100ms"), false)
			route := strings.SplitN(tc.model, "/", 2)
			f.coolDown(route[0], route[1], 400*time.Millisecond)
			resp, body := f.call(tc.path, tc.body)
			if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Held") != "true" {
				t.Fatalf("status %d headers %v: want the held stream's 200", resp.StatusCode, resp.Header)
			}
			var rest []string
			for _, l := range strings.Split(body, "\n") {
				if l != "" && !strings.HasPrefix(l, ":") {
					rest = append(rest, l)
				}
			}
			if strings.Join(rest, "\n") != strings.Join(tc.want, "\n") || !strings.Contains(body, ": gatectl waiting") {
				t.Fatalf("body:\n%s\nwant the comments, then:\n%s", body, strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestHoldStreamGiveUpWithoutBody: gatectl's own give-up (a transport failure)
// after the headers is an error event in gatectl's words.
func TestHoldStreamGiveUpWithoutBody(t *testing.T) {
	up := newFakeUpstream(t, chatOK(1, 1, 0))
	dead := up.URL
	up.Close()
	f := newPxFixture(t, holdConfig(dead, dead, "  holdNotice: 50ms\n  holdNoticeEvery: 100ms")+"\n", false)
	f.coolDown("pa", "m", 300*time.Millisecond)
	resp, body := f.call("/v1/chat/completions", chatReq("pa/m", "stream", true), "X-Gate-Turn", "t")
	events := readEvents(t, body)
	if resp.StatusCode != 200 || len(events) != 1 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	var ev struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(events[0]), &ev); err != nil || !strings.Contains(ev.Error.Message, "TRANSPORT") || ev.Error.Code != 502 || ev.Error.Type != "api_error" {
		t.Fatalf("error event %s (%v)", events[0], err)
	}
}

// TestHoldNonStreamCappedAtMaxHold: a non-streamed request whose wait outlasts
// proxy.maxHold gets 429 with Retry-After and the reason, at once when the wait
// is known to be longer; X-Gate-Max-Wait asks to sit it out instead.
func TestHoldNonStreamCappedAtMaxHold(t *testing.T) {
	up := newFakeUpstream(t, chatOK(3, 1, 0))
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  maxHold: 200ms"), false)
	f.coolDown("pa", "m", 1500*time.Millisecond)
	t0 := time.Now()
	resp, body := f.call("/v1/chat/completions", chatReq("pa/m"))
	if resp.StatusCode != http.StatusTooManyRequests || up.n() != 0 {
		t.Fatalf("status %d after %d upstream calls: %s", resp.StatusCode, up.n(), body)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 || ra > 2 {
		t.Errorf("Retry-After %q, want the rest of the 1.5s wait, rounded up", resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("X-Should-Retry") != "true" || !strings.Contains(body, "proxy.maxHold") ||
		!strings.Contains(body, "on pa/m") || !strings.Contains(body, `"type":"rate_limit_error"`) {
		t.Errorf("headers %v body %s", resp.Header, body)
	}
	if got := resp.Header.Get("X-Gate-Route"); got != "pa/m" {
		t.Errorf("X-Gate-Route %q, want pa/m", got)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("answered after %s: a wait known to outlast maxHold is answered at once", d)
	}
	if st := f.status("pa", "m"); st.Waiting != 0 || st.InFlight != 0 {
		t.Fatalf("the capped request left state behind: %+v", st)
	}

	resp, body = f.call("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Max-Wait", "10s")
	if resp.StatusCode != 200 || up.n() != 1 {
		t.Fatalf("with X-Gate-Max-Wait: status %d after %d calls: %s", resp.StatusCode, up.n(), body)
	}
	if w, _ := strconv.Atoi(resp.Header.Get("X-Gate-Waited-Ms")); w < 500 {
		t.Errorf("X-Gate-Waited-Ms %d: the request did not wait out the cooldown", w)
	}

	resp, body = f.call("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Max-Wait", "soon")
	if resp.StatusCode != 400 || !strings.Contains(body, `"field":"X-Gate-Max-Wait"`) {
		t.Fatalf("bad X-Gate-Max-Wait: status %d %s", resp.StatusCode, body)
	}
}

// TestHoldNonStreamCutAtTheLimit: an admission wait expected to end in time,
// that a second rate limit then stretches, is cut at the limit itself (on the
// fake clock) with the rest of the new wait as Retry-After.
func TestHoldNonStreamCutAtTheLimit(t *testing.T) {
	up := newFakeUpstream(t, chatOK(3, 1, 0))
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  maxHold: 10s")+`
gate:
  maxWait: 60s
`, true)
	f.coolDown("pa", "m", 5*time.Second)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/m"))
	waitFor(t, "the admission wait and the hold limit", func() bool { return f.clock.Timers() == 2 })
	f.clock.Advance(4 * time.Second)
	f.coolDown("pa", "m", 30*time.Second) // the provider asks for longer: the wait now ends at 34s
	f.clock.Advance(2 * time.Second)      // the waiter wakes at 5s and sleeps on
	waitFor(t, "the waiter to sleep on", func() bool { return f.clock.Timers() == 2 })
	f.clock.Advance(4 * time.Second) // the limit: 10s
	r := <-res
	ra, _ := strconv.Atoi(r.resp.Header.Get("Retry-After"))
	if r.resp.StatusCode != http.StatusTooManyRequests || up.n() != 0 || ra < 24 || ra > 26 || !strings.Contains(r.body, "rate limit on pa/m") {
		t.Fatalf("status %d after %d calls, Retry-After %d (want ~24): %s", r.resp.StatusCode, up.n(), ra, r.body)
	}
	if st := f.status("pa", "m"); st.Waiting != 0 {
		t.Fatalf("the cut waiter is still queued: %+v", st)
	}
	// The 429 says how long the request was held: the cut wait counts.
	if w := r.resp.Header.Get("X-Gate-Waited-Ms"); w != "10000" {
		t.Errorf("X-Gate-Waited-Ms %q, want 10000 (held 10s on the fake clock)", w)
	}
}

// TestHoldCutAfterAnAttemptGivesUp: a retry's wait cut at proxy.maxHold, after
// an attempt went upstream and failed, is gatectl giving up: the client gets
// the upstream's failure with x-should-retry: false — not a 429 saying
// "retry", which the SDK took as a new request with new budgets (one call
// reached the provider twelve times). Both ways a retry waits: its delay (a
// 503's hint), and a QUOTA's long-term wait.
func TestHoldCutAfterAnAttemptGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer http.HandlerFunc
		status int
	}{
		{"retry delay", jsonAnswer(503, `{"error":{"message":"overloaded, try later"}}`, "Retry-After", "60"), 503},
		{"long-term wait", jsonAnswer(429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`), 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t, tc.answer, tc.answer, tc.answer)
			f := newPxFixture(t, holdConfig(up.URL, up.URL, "  maxHold: 200ms"), false)
			resp, body := f.call("/v1/chat/completions", chatReq("pa/m", "max_tokens", 10))
			if resp.StatusCode != tc.status || up.n() != 1 {
				t.Fatalf("status %d after %d upstream calls, want %d after 1: %s", resp.StatusCode, up.n(), tc.status, body)
			}
			if resp.Header.Get("X-Should-Retry") != "false" {
				t.Errorf("X-Should-Retry %q, want false: gatectl's retrying is over", resp.Header.Get("X-Should-Retry"))
			}
			if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.Header.Get("Retry-After") != "" && ra < 60 {
				t.Errorf("Retry-After %d: under a minute invites the SDK's retry", ra)
			}
		})
	}
}

// TestFailInStreamAnthropicTypes: gatectl's own error event on a held Anthropic
// stream carries the error type Anthropic's API (and writeAnthropicError) gives
// the status, so an SDK reads a timeout as timeout_error whether or not the
// stream's headers were out.
func TestFailInStreamAnthropicTypes(t *testing.T) {
	for status, want := range map[int]string{504: "timeout_error", 413: "request_too_large", 404: "not_found_error",
		429: "rate_limit_error", 529: "overloaded_error", 502: "api_error", 400: "invalid_request_error"} {
		rec := httptest.NewRecorder()
		x := &exchange{w: rec, pr: &proxyRequest{ep: &endpoint{kind: kindAnthropic}}}
		x.failInStream(status, "gatectl: failed", nil)
		var ev struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		body := rec.Body.String()
		data, ok := strings.CutPrefix(body, "event: error\ndata: ")
		if !ok || json.Unmarshal([]byte(data), &ev) != nil || ev.Type != "error" || ev.Error.Type != want || ev.Error.Message != "gatectl: failed" {
			t.Errorf("status %d: %q, want an error event of type %s", status, body, want)
		}
		if want != anthropicErrorType(status) {
			t.Errorf("status %d: the table disagrees with anthropicErrorType (%s)", status, anthropicErrorType(status))
		}
	}
}

// TestHoldStreamClientGone: a client that leaves a held stream after its
// headers leaves nothing behind: no queued call, nothing in flight, no upstream
// call, no planner turn; and its access line says it went away (its status is
// the 200 of the held headers).
func TestHoldStreamClientGone(t *testing.T) {
	up := newFakeUpstream(t, streamingChat)
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 50ms\n  holdNoticeEvery: 50ms")+"log: {access: true}\n", false)
	f.coolDown("pa", "m", 30*time.Second) // within gate.maxWait: the gate holds it
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := f.post(ctx, "/v1/chat/completions", chatReq("pa/m", "stream", true))
	if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Held") != "true" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, ": gatectl waiting") {
		t.Fatalf("first line %q (%v)", line, err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the access line", func() bool { return strings.Contains(f.logs.String(), "gatectl.access: proxied") })
	if st := f.status("pa", "m"); st.Waiting != 0 || st.InFlight != 0 || st.Reserved != 0 {
		t.Errorf("the gone client left state behind: %+v", st)
	}
	if up.n() != 0 || f.srv.Planner().OneShotTurns() != 0 {
		t.Errorf("%d upstream calls, %d one-shot turns", up.n(), f.srv.Planner().OneShotTurns())
	}
	if logs := f.logs.String(); !strings.Contains(logs, "status=200") || !strings.Contains(logs, "client_gone=true") {
		t.Errorf("access line does not say the client went away:\n%s", logs)
	}
}

// smallSendBuffers gives every accepted connection the smallest send buffer
// the kernel allows, so a client that stops reading blocks the server's writes
// after a few kilobytes instead of megabytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(1)
	}
	return c, err
}

// TestHoldStalledClientDoesNotBlockTheCall: a streamed client that stays
// connected but stops reading fills the connection with notices until a write
// blocks; that write gives up at its deadline, so the request ends (the client
// counts as gone) rather than holding its admitted call forever.
func TestHoldStalledClientDoesNotBlockTheCall(t *testing.T) {
	up := newFakeUpstream(t, streamingChat)
	f := newPxFixture(t, holdConfig(up.URL, up.URL, "  holdNotice: 1ms\n  holdNoticeEvery: 1ms"), false)
	served := make(chan struct{})
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		f.srv.Handler().ServeHTTP(w, r)
	}))
	hs.Listener = smallSendBuffers{hs.Listener}
	hs.Start()
	defer hs.Close()
	f.coolDown("pa", "m", 1500*time.Millisecond)

	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(1)
	body, _ := json.Marshal(chatReq("pa/m", "stream", true))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gatectl\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// never read: the notices pile up until the server's writes block

	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never finished: stopping the notices waits on a write the client never takes")
	}
}

// A held stream whose upstream never answered gets the code the same timeout
// gets outside a stream: 504, not 502.
func TestHoldStreamTimeoutIs504(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1}
retry:
  rounds: 0
upstream:
  firstByteTimeout: 100ms
proxy:
  holdNotice: 50ms
  holdNoticeEvery: 100ms
`, hang.URL), false)
	f.coolDown("pa", "m", 300*time.Millisecond)
	resp, body := f.call("/v1/chat/completions", chatReq("pa/m", "stream", true), "X-Gate-Turn", "t")
	events := readEvents(t, body)
	if resp.StatusCode != 200 || len(events) != 1 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	var ev struct {
		Error struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(events[0]), &ev); err != nil || !strings.Contains(ev.Error.Message, "TIMEOUT") || ev.Error.Code != 504 {
		t.Fatalf("error event %s (%v), want TIMEOUT with code 504", events[0], err)
	}
}

func TestGateReasonTextNamesEveryBudget(t *testing.T) {
	for reason, want := range map[string]string{
		"cooldown": "rate limit", "tpm": "token budget (tpm)", "rpm": "request budget (rpm)",
		"otpm": "output token budget (otpm)", "pace": "pacing", "session-cap": "in-flight cap of the session",
		"queue": "queue", "something new": "admission",
	} {
		if got := gateReasonText(reason); got != want {
			t.Errorf("gateReasonText(%q) = %q, want %q", reason, got, want)
		}
	}
}
