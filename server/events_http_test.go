package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// eventsStream reads a server-sent event stream line by line, in the background, so
// that a test can wait for a record with a real-time bound.
type eventsStream struct {
	lines  chan string
	cancel context.CancelFunc
	resp   *http.Response
}

func (e *apiEnv) openEvents(t *testing.T, query string) *eventsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.http.URL+"/gate/v1/events"+query, nil)
	resp, err := e.http.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("events: %d %v", resp.StatusCode, resp.Header)
	}
	r := &eventsStream{lines: make(chan string, 1024), cancel: cancel, resp: resp}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *eventsStream) close() {
	r.cancel()
	r.resp.Body.Close()
}

// next returns the next record: its comment, or its event type and data.
func (r *eventsStream) next(t *testing.T) (comment, typ string, data map[string]any) {
	t.Helper()
	for {
		var line string
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatal("the stream ended")
			}
			line = l
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s")
		}
		switch {
		case line == "":
			if comment != "" || typ != "" {
				return comment, typ, data
			}
		case strings.HasPrefix(line, ": "):
			comment = strings.TrimPrefix(line, ": ")
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				Type string         `json:"type"`
				At   time.Time      `json:"at"`
				Data map[string]any `json:"data"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("data line: %v: %s", err, line)
			}
			if ev.Type != typ {
				t.Fatalf("data type %q under event %q", ev.Type, typ)
			}
			data = ev.Data
		case strings.HasPrefix(line, "retry: "):
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// nextEvent skips comments.
func (r *eventsStream) nextEvent(t *testing.T) (string, map[string]any) {
	t.Helper()
	for {
		if _, typ, data := r.next(t); typ != "" {
			return typ, data
		}
	}
}

func TestEventsStream(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	sse := e.openEvents(t, "")
	if c, _, _ := sse.next(t); c != "gatectl events" {
		t.Fatalf("opening comment %q", c)
	}
	if n := e.srv.Bus().Subscribers(); n != 1 {
		t.Fatalf("subscribers %d", n)
	}

	// A wait is announced with its expected length, then its end.
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"session":"s2"}`)
	typ, d := sse.nextEvent(t)
	if typ != "wait" || d["provider"] != "alpha" || d["model"] != "small" || d["session"] != "s2" || d["reason"] != "tpm" || d["waitMs"] != 60300.0 {
		t.Fatalf("wait event: %s %v", typ, d)
	}
	apiEventually(t, "the waiter to sleep", func() bool { return e.clock.Timers() == 2 }) // its timer and the heartbeat's
	e.clock.Advance(60300 * time.Millisecond)                                             // the window plus its count guard (0.5%)
	if a := apiRecv(t, ch); a.body["admitted"] != true {
		t.Fatalf("admit: %s", a.raw)
	}
	// The advance also fired the heartbeat: comments and events may come in either order.
	var sawAdmitted, sawBeat bool
	for !sawAdmitted || !sawBeat {
		c, typ, d := sse.next(t)
		switch {
		case c == "heartbeat":
			sawBeat = true
		case typ == "admitted":
			if d["waitMs"] != 60300.0 || d["session"] != "s2" {
				t.Fatalf("admitted event: %v", d)
			}
			sawAdmitted = true
		default:
			t.Fatalf("unexpected record %q %q %v", c, typ, d)
		}
	}

	// A 429 is announced, and so is a failover.
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","status":429,"headers":{"Retry-After":"7"}}`, http.StatusOK)
	if typ, d := sse.nextEvent(t); typ != "rate-limited" || d["retryAfterMs"] != 7000.0 || d["provider"] != "alpha" {
		t.Fatalf("rate-limited event: %s %v", typ, d)
	}
	// The learner took the window reading at the 429 as its trigger, and the quota down to it.
	if typ, d := sse.nextEvent(t); typ != "learn" || d["step"] != "trigger" || d["to"] != 6000.0 {
		t.Fatalf("learn event: %s %v", typ, d)
	}
	if typ, d := sse.nextEvent(t); typ != "learn" || d["step"] != "cut" || d["from"] != 10000.0 || d["to"] != 6000.0 {
		t.Fatalf("learn event: %s %v", typ, d)
	}
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"q","status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"}`, http.StatusOK)
	if typ, d := sse.nextEvent(t); typ != "failover" || d["session"] != "q" || d["pool"] != "medium" || d["to"].(map[string]any)["provider"] != "beta" {
		t.Fatalf("failover event: %s %v", typ, d)
	}

	// A reload is announced.
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if typ, d := sse.nextEvent(t); typ != "reload" || d["ok"] != true || d["version"] != 1.0 {
		t.Fatalf("reload event: %s %v", typ, d)
	}

	// The stream ends with the client.
	sse.close()
	apiEventually(t, "the subscription to end", func() bool { return e.srv.Bus().Subscribers() == 0 })
}

// A failure rides in its pool events (entered, failover) as the
// unclassified list keeps it: credential headers blanked and credentials in
// the body masked — the stream and the console are not for keys.
func TestEventsFailureRedacted(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	sse := e.openEvents(t, "?types=entered,failover")
	sse.next(t) // the opening comment
	quota := `"status":429,"headers":{"Authorization":"Bearer sk-live-SECRET0123456789","x-request-id":"r1"},` +
		`"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"api_key=SECRETSECRET123\"}}"`
	for _, provider := range []string{"alpha", "beta"} { // failover, then entered
		e.post("/gate/v1/failure", `{"provider":"`+provider+`","model":"m1","session":"q",`+quota+`}`, http.StatusOK)
		typ, d := sse.nextEvent(t)
		raw, _ := json.Marshal(d)
		if strings.Contains(string(raw), "SECRET") {
			t.Errorf("%s event carries a credential: %s", typ, raw)
		}
		f, _ := d["failure"].(map[string]any)
		h, _ := f["headers"].(map[string]any)
		if h["Authorization"] != redacted || h["x-request-id"] != "r1" || !strings.Contains(fmt.Sprint(f["body"]), "insufficient_quota") {
			t.Errorf("%s event's failure %v: want the credential blanked and the rest kept", typ, f)
		}
	}
}

func TestEventsFilterAndEntered(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	sse := e.openEvents(t, "?types=entered,left")
	sse.next(t) // the opening comment
	quota := `"status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"`
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"q",`+quota+`}`, http.StatusOK) // failover: filtered out
	e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"q",`+quota+`}`, http.StatusOK)
	if typ, d := sse.nextEvent(t); typ != "entered" || d["session"] != "q" || d["attempts"] != 1.0 {
		t.Fatalf("entered: %s %v", typ, d)
	}
	e.post("/gate/v1/success", `{"provider":"beta","model":"m1","session":"q"}`, http.StatusOK)
	if typ, d := sse.nextEvent(t); typ != "left" || d["reason"] != "recovered" {
		t.Fatalf("left: %s %v", typ, d)
	}
	status, body, _ := e.do(http.MethodGet, "/gate/v1/events?types=wait,gossip", "")
	if field, msg := apiErrorOf(t, body); status != 400 || field != "types" || !strings.Contains(msg, `unknown event type "gossip"`) {
		t.Fatalf("bad type: %d %s", status, body)
	}
}

func TestEventsHeartbeatEndsOnShutdown(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	sse := e.openEvents(t, "")
	sse.next(t)
	apiEventually(t, "the heartbeat timer", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(eventsHeartbeat)
	if c, _, _ := sse.next(t); c != "heartbeat" {
		t.Fatalf("comment %q", c)
	}
	e.srv.ready.Store(false) // what Serve does when a shutdown begins
	apiEventually(t, "the next heartbeat timer", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(eventsHeartbeat)
	select {
	case _, ok := <-sse.lines:
		for ok {
			_, ok = <-sse.lines
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived the shutdown")
	}
	apiEventually(t, "the subscription to end", func() bool { return e.srv.Bus().Subscribers() == 0 })
}

// TestEventsFilterProxyTypes: the proxy's own events (retry, giveup) can be
// selected with ?types= like any other.
func TestEventsFilterProxyTypes(t *testing.T) {
	e := newAPIEnv(t, strings.Replace(apiTestConfig, "  rounds: 3", "  rounds: 0", 1))
	sse := e.openEvents(t, "?types=retry,giveup")
	sse.next(t) // the opening comment
	// Nothing listens at alpha's base URL: a transport failure, given up at once.
	status, body, _ := e.do(http.MethodPost, "/v1/chat/completions", `{"model":"alpha/m9","messages":[]}`)
	if status != http.StatusBadGateway {
		t.Fatalf("proxy: %d %s", status, body)
	}
	if typ, d := sse.nextEvent(t); typ != "giveup" || d["model"] != "m9" || d["class"] != "TRANSPORT" {
		t.Fatalf("giveup: %s %v", typ, d)
	}
}
