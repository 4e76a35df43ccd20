package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// getJSON GETs path on the fixture and decodes the answer.
func (f *pxFixture) getJSON(path string, want int, into any) {
	f.t.Helper()
	resp, err := http.Get(f.url + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		f.t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, b, want)
	}
	if err := json.Unmarshal(b, into); err != nil {
		f.t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// GET /gate/v1/sessions lists the sessions that called through the proxy, the
// most recently active first, each with its settings, its route and what its
// current turn spent of its retry budget; ?limit= bounds the page and the total
// stays beside it.
func TestSessionsListFromProxiedCalls(t *testing.T) {
	up := newFakeUpstream(t,
		chatOK(3, 1, 0), // s-old
		jsonAnswer(500, `{"error":{"message":"internal error"}}`), // s-retried, retried once
		chatOK(3, 1, 0), // s-retried
		jsonAnswer(500, `{"error":{"message":"internal error"}}`), // s-oneshot, retried once
		chatOK(3, 1, 0)) // s-oneshot, then s-new
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3\n  initialDelay: 2s\n  jitter: 0"), true)

	var empty APISessionList
	f.getJSON("/gate/v1/sessions", http.StatusOK, &empty)
	if empty.Total != 0 || len(empty.Sessions) != 0 || empty.Limit != apiSessionsDefaultLimit {
		t.Fatalf("sessions on an idle server: %+v", empty)
	}

	if r, b := f.call("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Session", "s-old"); r.StatusCode != 200 {
		t.Fatalf("s-old: %d %s", r.StatusCode, b)
	}
	f.clock.Advance(time.Second)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Session", "s-retried", "X-Gate-Turn", "t1")
	waitFor(t, "s-retried's retry delay", func() bool { return up.n() == 2 && f.clock.Timers() == 1 })
	f.clock.Advance(2 * time.Second)
	if r := <-res; r.resp.StatusCode != 200 {
		t.Fatalf("s-retried: %d %s", r.resp.StatusCode, r.body)
	}
	// Without X-Gate-Turn the request is its turn: its budget lives while it runs.
	f.clock.Advance(time.Second)
	res = f.callAsync("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Session", "s-oneshot")
	waitFor(t, "s-oneshot's retry delay", func() bool { return up.n() == 4 && f.clock.Timers() == 1 })
	var mid APISessionList
	f.getJSON("/gate/v1/sessions", http.StatusOK, &mid)
	if o := mid.Sessions[0]; o.Session != "s-oneshot" || len(o.Budgets) != 1 || o.Budgets[0].Left != 2 {
		t.Fatalf("while s-oneshot waits to retry: %+v, want it first with 2 of 3 left", o)
	}
	f.clock.Advance(2 * time.Second)
	if r := <-res; r.resp.StatusCode != 200 {
		t.Fatalf("s-oneshot: %d %s", r.resp.StatusCode, r.body)
	}
	f.clock.Advance(time.Second)
	if r, b := f.call("/v1/chat/completions", chatReq("pa/m"), "X-Gate-Session", "s-new"); r.StatusCode != 200 {
		t.Fatalf("s-new: %d %s", r.StatusCode, b)
	}

	var l APISessionList
	f.getJSON("/gate/v1/sessions", http.StatusOK, &l)
	var order []string
	for _, s := range l.Sessions {
		order = append(order, s.Session)
	}
	if l.Total != 4 || fmt.Sprint(order) != "[s-new s-oneshot s-retried s-old]" {
		t.Fatalf("sessions %v (total %d), want [s-new s-oneshot s-retried s-old], the most recent first", order, l.Total)
	}
	// The one-shot turn ended with its request; its counters still show the retry.
	if o := l.Sessions[1]; o.Turn == nil || o.Turn.Stats.Retries != 1 || len(o.Budgets) != 1 || o.Budgets[0].Left != 2 {
		t.Fatalf("s-oneshot after its request: turn %+v budgets %+v, want 1 retry, 2 of 3 left", o.Turn, o.Budgets)
	}
	if got := l.Sessions[3].LastActive; !got.Equal(pxT0) {
		t.Fatalf("s-old last active %v, want %v", got, pxT0)
	}
	r := l.Sessions[2]
	if r.Turn == nil || r.Turn.Turn != "t1" || r.Turn.Stats.Retries != 1 {
		t.Fatalf("s-retried turn %+v, want turn t1 with 1 retry", r.Turn)
	}
	if len(r.Budgets) != 1 || r.Budgets[0] != (APIRetryBudget{Provider: "pa", Rounds: 3, Left: 2, MislabeledLeft: r.Budgets[0].MislabeledLeft}) {
		t.Fatalf("s-retried budgets %+v, want pa: 2 of 3 left", r.Budgets)
	}
	// The settings are those GET /gate/v1/sessions/{id} answers.
	if r.Source != "default" || r.PoolSource == "" || r.Pools == nil {
		t.Fatalf("s-retried settings %+v, want the session's facts", r.APISession)
	}
	if n := l.Sessions[0]; n.Turn != nil || len(n.Budgets) != 0 {
		t.Fatalf("s-new had no retry decision: turn %+v budgets %+v", n.Turn, n.Budgets)
	}

	var one APISessionList
	f.getJSON("/gate/v1/sessions?limit=1", http.StatusOK, &one)
	if one.Total != 4 || one.Limit != 1 || len(one.Sessions) != 1 || one.Sessions[0].Session != "s-new" {
		t.Fatalf("limit=1: %+v, want s-new alone of 4", one)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=1&limit=2", "session=s-new"} {
		var e struct {
			Error struct{ Field, Message string } `json:"error"`
		}
		f.getJSON("/gate/v1/sessions?"+q, http.StatusBadRequest, &e)
		if e.Error.Field == "" || e.Error.Message == "" {
			t.Fatalf("%s: error %+v, want one naming the field", q, e)
		}
	}
}

// The sessions remembered from proxied calls are bounded: past the cap the least
// recently seen half goes, and the janitor forgets idle ones.
func TestSessionsSeenBounded(t *testing.T) {
	b := newSeenSessions()
	for i := range maxSeenSessions + 1 {
		b.note(fmt.Sprintf("s%05d", i), pxT0.Add(time.Duration(i)*time.Millisecond))
	}
	n, newest, oldestKept := 0, false, false
	b.each(func(id string, _ time.Time) {
		n++
		newest = newest || id == fmt.Sprintf("s%05d", maxSeenSessions)
		oldestKept = oldestKept || id == "s00000"
	})
	if n > maxSeenSessions || !newest || oldestKept {
		t.Fatalf("after %d sessions: %d kept (newest kept %v, oldest kept %v), want at most %d with the newest", maxSeenSessions+1, n, newest, oldestKept, maxSeenSessions)
	}
	b.prune(pxT0.Add(time.Hour))
	n = 0
	b.each(func(string, time.Time) { n++ })
	if n != 0 {
		t.Fatalf("after pruning everything idle: %d kept", n)
	}
}
