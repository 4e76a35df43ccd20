package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
)

// The janitor runs on the server's clock while it serves: sessions idle past the
// router's idle time lose their retry budgets (memory and state file), turn
// statistics and pool routes, and a ticket nobody settled is released without
// another API call arriving.
func TestJanitorPrunesIdleSessionsAndTickets(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
	}()

	h := e.srv.Handler()
	const sessions = 3000
	for i := range sessions {
		rec := httptest.NewRecorder()
		body := fmt.Sprintf(`{"provider":"alpha","model":"m1","session":"s%d","turn":"t1","status":500,"body":"oops"}`, i)
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/gate/v1/failure", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("failure %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"forgetful","inputTokens":100,"maxTokens":100}`, http.StatusOK)
	if a["admitted"] != true {
		t.Fatal(a)
	}
	e.post("/gate/v1/admit", `{"provider":"alpha","model":"m1","session":"pooled","inputTokens":1,"maxTokens":1,"wait":false}`, http.StatusOK)
	budget := func(i int) bool {
		_, ok := e.srv.Planner().Budget(retry.BudgetKey{Session: fmt.Sprintf("s%d", i), Provider: "alpha", Turn: "t1"})
		return ok
	}
	if !budget(0) || !budget(sessions-1) || len(e.srv.Planner().Stats().Turns) != sessions {
		t.Fatalf("budgets before the sweep: %v %v, %d turns", budget(0), budget(sessions-1), len(e.srv.Planner().Stats().Turns))
	}
	if routes, _ := e.srv.Quota().Tracked(); routes == 0 {
		t.Fatal("no session routes before the sweep")
	}

	// The ticket expires first: the next janitor pass releases it.
	apiEventually(t, "the janitor's timer", func() bool { return e.clock.Timers() >= 1 })
	e.clock.Advance(apiTicketTTL + janitorEvery)
	apiEventually(t, "the janitor to release the ticket", func() bool { return e.bucket("alpha", "small").InFlight == 0 })

	// A day later every session is idle: their state goes. The janitor re-arms
	// its timer after its pass; advancing before that would skip the next one.
	apiEventually(t, "the janitor's timer again", func() bool { return e.clock.Timers() >= 1 })
	e.clock.Advance(e.srv.Quota().SessionIdle() + janitorEvery)
	apiEventually(t, "the janitor to prune the sessions", func() bool {
		return len(e.srv.Planner().Stats().Turns) == 0 && !budget(sessions-1)
	})
	for _, i := range []int{0, sessions / 2, sessions - 1} {
		if budget(i) {
			t.Fatalf("session s%d kept its budget", i)
		}
	}
	apiEventually(t, "the routes to go", func() bool { routes, _ := e.srv.Quota().Tracked(); return routes == 0 })
	if n := e.srv.Ledger().Buckets(); n != 0 {
		t.Fatalf("%d buckets left", n)
	}
}

// A session's record in the state file (its switch, pool, parent) goes a week
// after its last use: a harness forking a session per subagent left one each,
// for ever. A session that keeps calling keeps its record.
func TestJanitorDropsUnusedSessionRecords(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	for _, id := range []string{"busy", "api-busy", "idle-1", "idle-2"} {
		e.call(http.MethodPut, "/gate/v1/sessions/"+id, `{"switch":"off"}`, http.StatusOK)
	}
	if n, _ := e.srv.store.Sessions(); n != 4 {
		t.Fatalf("%d records, want 4", n)
	}
	for day := range 8 {
		// busy calls through the proxy, api-busy reports to the decision API
		e.srv.seen.note("busy", e.clock.Now())
		e.post("/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"api-busy","status":500,"body":"x"}`, http.StatusOK)
		for range 24 {
			e.clock.Advance(time.Hour)
			e.srv.sweep(e.clock.Now())
		}
		if n, _ := e.srv.store.Sessions(); day < 6 && n != 4 {
			t.Fatalf("day %d: %d records, want all 4 still", day+1, n)
		}
	}
	if n, _ := e.srv.store.Sessions(); n != 2 {
		t.Fatalf("after 8 days: %d records, want the two busy sessions'", n)
	}
	if got := e.get("/gate/v1/sessions/idle-1", http.StatusOK); fmt.Sprint(got["switch"]) == "off" {
		t.Fatalf("idle-1 still switched off after its record went: %v", got)
	}
	if got := e.get("/gate/v1/sessions/busy", http.StatusOK); fmt.Sprint(got["switch"]) != "off" {
		t.Fatalf("busy lost its setting: %v", got)
	}
}
