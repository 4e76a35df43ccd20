package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

const apiBig = `{"provider":"alpha","model":"small","session":"s1","inputTokens":5000,"maxTokens":1000`

func TestAPIAdmitSettle(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	a := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	tk, _ := a["ticket"].(string)
	if a["admitted"] != true || !strings.HasPrefix(tk, "gt_") || apiNum(t, a, "reservedTokens") != 6000 ||
		apiNum(t, a, "reservedOutputTokens") != 1000 || a["reason"] != "" || a["failOpen"] != false || apiNum(t, a, "waitedMs") != 0 {
		t.Fatalf("admit: %v", a)
	}
	if r := a["route"].(map[string]any); r["provider"] != "alpha" || r["model"] != "small" {
		t.Fatalf("route: %v", a)
	}
	if a["expiresAt"] != apiT0.Add(apiTicketTTL).Format(time.RFC3339) {
		t.Fatalf("expiresAt: %v", a["expiresAt"])
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 1 || b.Reserved != 6000 || b.WindowTokens != 6000 {
		t.Fatalf("after admit: %+v", b)
	}
	s := e.post("/gate/v1/settle", `{"ticket":"`+tk+`","usage":{"inputTokens":4000,"cacheReadTokens":500,"cacheWriteTokens":0,"outputTokens":300}}`, http.StatusOK)
	if s["settled"] != true || s["released"] != false || apiNum(t, s, "usedTokens") != 4800 || apiNum(t, s, "reservedTokens") != 6000 {
		t.Fatalf("settle: %v", s)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.Reserved != 0 || b.WindowTokens != 4800 {
		t.Fatalf("after settle: %+v", b)
	}
	// A ticket settles once.
	status, body, _ := e.do(http.MethodPost, "/gate/v1/settle", `{"ticket":"`+tk+`","release":true}`)
	if field, msg := apiErrorOf(t, body); status != http.StatusNotFound || field != "ticket" || !strings.Contains(msg, "already settled") {
		t.Fatalf("second settle: %d %s", status, body)
	}
	// Release gives the whole reservation back.
	a = e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":100}`, http.StatusOK)
	r := e.post("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","release":true}`, http.StatusOK)
	if r["released"] != true || r["settled"] != false || apiNum(t, r, "usedTokens") != 0 {
		t.Fatalf("release: %v", r)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.WindowTokens != 4800 {
		t.Fatalf("after release: %+v", b)
	}
}

// abandon: true closes a ticket whose call was sent and got no answer (the
// harness cancelled it): the provider had the call, so it stays counted as a
// call in flight and a waiter is not let into the room a release would give.
// A window after its admission the provider holds it no more: nothing stays.
func TestAPISettleAbandon(t *testing.T) {
	for _, how := range []string{"release", "abandon"} {
		t.Run(how, func(t *testing.T) {
			e := newAPIEnv(t, apiTestConfig)
			tk := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)["ticket"].(string) // 6,000 of 10,000
			e.clock.Advance(time.Second)
			s := e.post("/gate/v1/settle", `{"ticket":"`+tk+`","`+how+`":true}`, http.StatusOK)
			abandoned := how == "abandon"
			if s["abandoned"] != abandoned || s["released"] != !abandoned || s["settled"] != false || apiNum(t, s, "reservedTokens") != 6000 {
				t.Fatalf("%s: %v", how, s)
			}
			kept := int64(apiNum(t, s, "usedTokens"))
			if abandoned != (kept > 5000) { // the input and what the output is expected to be
				t.Fatalf("%s: %d tokens kept", how, kept)
			}
			if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.WindowTokens != kept {
				t.Fatalf("after %s: %+v, want %d in the window", how, b, kept)
			}
			second := e.post("/gate/v1/admit", apiBig+`,"wait":false}`, http.StatusOK)
			if second["admitted"] == abandoned {
				t.Fatalf("after %s, a second call admitted %v: %v", how, second["admitted"], second)
			}
		})
	}
	e := newAPIEnv(t, apiTestConfig)
	tk := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)["ticket"].(string)
	e.clock.Advance(61 * time.Second)
	if s := e.post("/gate/v1/settle", `{"ticket":"`+tk+`","abandon":true}`, http.StatusOK); s["abandoned"] != true || apiNum(t, s, "usedTokens") != 0 {
		t.Fatalf("abandoned a window after its admission: %v", s)
	}
	if b := e.bucket("alpha", "small"); b.WindowTokens != 0 {
		t.Fatalf("a window after: %+v", b)
	}
}

func TestAPIAdmitBlocksUntilSettle(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	first := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"session":"s2"}`)
	apiEventually(t, "the second call to queue", func() bool { return e.bucket("alpha", "small").Waiting == 1 })
	select {
	case a := <-ch:
		t.Fatalf("answered while the window is full: %s", a.raw)
	default:
	}
	// The first call used far less than it reserved: the refund lets the second in.
	e.post("/gate/v1/settle", `{"ticket":"`+first["ticket"].(string)+`","usage":{"inputTokens":100,"outputTokens":10}}`, http.StatusOK)
	a := apiRecv(t, ch)
	if a.status != http.StatusOK || a.body["admitted"] != true || a.body["reason"] != "tpm" || a.body["ticket"] == "" {
		t.Fatalf("second: %d %s", a.status, a.raw)
	}
}

func TestAPIAdmitBlocksUntilWindowDrains(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"priority":"batch"}`)
	apiEventually(t, "the second call to sleep", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(60300 * time.Millisecond) // the window plus its count guard (0.5%)
	a := apiRecv(t, ch)
	if a.status != http.StatusOK || a.body["admitted"] != true || a.body["reason"] != "tpm" || apiNum(t, a.body, "waitedMs") != 60300 {
		t.Fatalf("second: %d %s", a.status, a.raw)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 2 || b.Waiting != 0 {
		t.Fatalf("bucket: %+v", b)
	}
}

func TestAPIAdmitMaxWait(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", apiBig+`,"maxWaitMs":5000}`)
	apiEventually(t, "the second call to sleep", func() bool { return e.clock.Timers() == 1 })
	e.clock.Advance(5 * time.Second)
	a := apiRecv(t, ch)
	if a.status != http.StatusOK || a.body["admitted"] != false || a.body["ticket"] != nil || a.body["reason"] != "tpm" ||
		apiNum(t, a.body, "waitMs") != 55300 || apiNum(t, a.body, "waitedMs") != 5000 {
		t.Fatalf("second: %d %s", a.status, a.raw)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 1 || b.Waiting != 0 || b.Reserved != 6000 {
		t.Fatalf("nothing may be held: %+v", b)
	}
}

func TestAPIAdmitNoWait(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	// wait:false on a free model is an ordinary admission.
	a := e.post("/gate/v1/admit", apiBig+`,"wait":false}`, http.StatusOK)
	if a["admitted"] != true || a["ticket"] == nil {
		t.Fatalf("first: %v", a)
	}
	status, body, h := e.do(http.MethodPost, "/gate/v1/admit", apiBig+`,"wait":false}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"admitted":false`) || !strings.Contains(string(body), `"waitMs":60300`) ||
		!strings.Contains(string(body), `"reason":"tpm"`) || h.Get("Retry-After") != "61" {
		t.Fatalf("second: %d %s %v", status, body, h)
	}
	// maxWaitMs 0 is the same.
	b := e.post("/gate/v1/admit", apiBig+`,"maxWaitMs":0}`, http.StatusOK)
	if b["admitted"] != false || apiNum(t, b, "waitMs") != 60300 {
		t.Fatalf("maxWaitMs 0: %v", b)
	}
	if st := e.bucket("alpha", "small"); st.InFlight != 1 || st.Waiting != 0 || st.Reserved != 6000 {
		t.Fatalf("nothing may be held: %+v", st)
	}
}

func TestAPIAdmitClientGoneHoldsNothing(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.async(ctx, http.MethodPost, "/gate/v1/admit", apiBig+`}`)
	apiEventually(t, "the second call to queue", func() bool { return e.bucket("alpha", "small").Waiting == 1 })
	cancel()
	apiRecv(t, ch)
	apiEventually(t, "the waiter to leave", func() bool { return e.bucket("alpha", "small").Waiting == 0 })
	if b := e.bucket("alpha", "small"); b.InFlight != 1 {
		t.Fatalf("bucket: %+v", b)
	}
}

func TestAPIAdmitCooldownAfterRateLimit(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","turn":"t1","status":429,"headers":{"Retry-After":"20"}}`, http.StatusOK)
	a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputTokens":10,"wait":false}`, http.StatusOK)
	if a["admitted"] != false || a["reason"] != "cooldown" || apiNum(t, a, "waitMs") != 20000 {
		t.Fatalf("admit during cooldown: %v", a)
	}
}

// TestAPIAdmitNotIntoALongCooldown: the provider asked for a pause longer
// than gate.maxWait. The gate would admit a waiting call failing open at once,
// into the pause; the API answers it not admitted, with the pause's end, as
// the proxy sends no such call.
func TestAPIAdmitNotIntoALongCooldown(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","turn":"t1","status":429,"headers":{"Retry-After":"250"}}`, http.StatusOK)
	events, stop := e.srv.bus.Subscribe(64)
	defer stop()
	status, body, h := e.do(http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputTokens":10}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"admitted":false`) || !strings.Contains(string(body), `"reason":"cooldown"`) ||
		!strings.Contains(string(body), `"waitMs":250000`) || strings.Contains(string(body), `"ticket"`) || h.Get("Retry-After") != "250" {
		t.Fatalf("admit in the pause: %d %s %v", status, body, h)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.Reserved != 0 || b.Waiting != 0 {
		t.Fatalf("nothing may be held: %+v", b)
	}
	for len(events) > 0 {
		if ev := <-events; ev.Type == "fail-open" {
			t.Fatalf("the gate was asked, and failed open: %v", ev)
		}
	}
	e.clock.Advance(251 * time.Second)
	if a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputTokens":10}`, http.StatusOK); a["admitted"] != true || a["failOpen"] != false {
		t.Fatalf("after the pause: %v", a)
	}
}

// TestAPIQueuedAdmitAnsweredInALongPause: an admit queued behind a 30 s
// cooldown when a second 429, 10 s in, asks for more. A pause that ends past
// the call's maxWait deadline (120 s) — at 300 s, or at 160 s — makes the gate
// let it through at maxWait into the pause, which the API never admits into:
// it is answered at once, not admitted, with the pause's end in waitMs, and
// nothing stays queued.
func TestAPIQueuedAdmitAnsweredInALongPause(t *testing.T) {
	for _, retryAfter := range []int{290, 150} {
		t.Run(fmt.Sprintf("Retry-After %d", retryAfter), func(t *testing.T) {
			e := newAPIEnv(t, apiTestConfig)
			e.post("/gate/v1/failure", `{"provider":"alpha","model":"small","session":"s1","turn":"t1","status":429,"headers":{"Retry-After":"30"}}`, http.StatusOK)
			ch := e.async(context.Background(), http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s2","inputTokens":10}`)
			apiEventually(t, "the call to queue", func() bool { return e.bucket("alpha", "small").Waiting == 1 && e.clock.Timers() > 0 })
			e.clock.Advance(10 * time.Second)
			e.post("/gate/v1/failure", fmt.Sprintf(`{"provider":"alpha","model":"small","session":"s1","turn":"t2","status":429,"headers":{"Retry-After":"%d"}}`, retryAfter), http.StatusOK)
			a := apiRecv(t, ch)
			if a.status != http.StatusOK || a.body["admitted"] != false || a.body["reason"] != "cooldown" ||
				apiNum(t, a.body, "waitMs") != float64(retryAfter*1000) || apiNum(t, a.body, "waitedMs") != 10000 || a.body["ticket"] != nil {
				t.Fatalf("queued admit when the pause outlasts it: %d %s", a.status, a.raw)
			}
			if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.Reserved != 0 || b.Waiting != 0 {
				t.Fatalf("nothing may be held: %+v", b)
			}
		})
	}
}

func TestAPIAdmitTargets(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	route := func(m map[string]any) string {
		r := m["route"].(map[string]any)
		s := r["provider"].(string) + "/" + r["model"].(string)
		if eff, ok := r["reasoningEffort"].(string); ok {
			s += "@" + eff
		}
		return s
	}
	cases := []struct {
		name, body, route, pool string
		drawn                   bool
	}{
		{"ProviderModel", `{"provider":"alpha","model":"big"}`, "alpha/big", "", false},
		{"RouteString", `{"route":"beta/deepseek/deepseek-chat@high"}`, "beta/deepseek/deepseek-chat@high", "", false},
		{"ModelProviderSlash", `{"model":"beta/m9"}`, "beta/m9", "", false},
		{"PoolRouteGoverned", `{"provider":"alpha","model":"m1"}`, "alpha/m1", "medium", false},
		{"PoolNoSession", `{"pool":"medium"}`, "", "medium", true},
		{"ModelIsPool", `{"model":"medium"}`, "", "medium", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.post("/gate/v1/admit", c.body, http.StatusOK)
			if a["admitted"] != true || (c.route != "" && route(a) != c.route) || a["pool"] != anyOrNil(c.pool) || (a["drawn"] == true) != c.drawn {
				t.Fatalf("%s: %v", c.body, a)
			}
			if c.pool != "" && route(a) != "alpha/m1" && route(a) != "beta/m1" {
				t.Fatalf("drawn outside the pool: %v", a)
			}
		})
	}
	t.Run("SessionKeepsItsDraw", func(t *testing.T) {
		first := route(e.post("/gate/v1/admit", `{"pool":"medium","session":"sticky"}`, http.StatusOK))
		for range 5 {
			if got := route(e.post("/gate/v1/admit", `{"pool":"medium","session":"sticky"}`, http.StatusOK)); got != first {
				t.Fatalf("session moved from %s to %s", first, got)
			}
		}
		pick := e.get("/gate/v1/pools/medium/pick?session=sticky", http.StatusOK)
		if route(pick) != first || pick["session"] != "sticky" {
			t.Fatalf("pick: %v", pick)
		}
	})
}

func anyOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestAPIAdmitValidation(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	cases := []struct{ name, body, field, msg string }{
		{"UnknownField", `{"provider":"alpha","model":"x","tokens":5}`, "tokens", `unknown field "tokens"`},
		{"WrongType", `{"provider":"alpha","model":"x","inputTokens":"many"}`, "inputTokens", "must be an integer"},
		{"Negative", `{"provider":"alpha","model":"x","maxTokens":-1}`, "maxTokens", "must not be negative"},
		{"HugeInput", `{"provider":"alpha","model":"small","inputTokens":9223372036854775000,"maxTokens":1000,"wait":false}`, "inputTokens", "must be at most 2147483647"},
		{"HugeBytes", `{"provider":"alpha","model":"small","inputBytes":9223372036854775000,"wait":false}`, "inputBytes", "must be at most"},
		{"HugeMaxTokens", `{"provider":"alpha","model":"small","maxTokens":9223372036854775000,"wait":false}`, "maxTokens", "must be at most"},
		{"NegativeMaxWait", `{"provider":"alpha","model":"x","maxWaitMs":-5}`, "maxWaitMs", "must not be negative"},
		{"Priority", `{"provider":"alpha","model":"x","priority":"urgent"}`, "priority", "choices are interactive, batch"},
		{"NoModel", `{"provider":"alpha"}`, "model", "model is required"},
		{"NoTarget", `{"session":"s"}`, "model", "name the target"},
		{"TwoTargets", `{"provider":"alpha","model":"x","pool":"medium"}`, "pool", "one way"},
		{"UnknownPool", `{"pool":"large"}`, "pool", `no such pool: "large" (pools: medium)`},
		{"BareModelTwoRoutes", `{"model":"m1"}`, "model", "served by 2 routes (alpha/m1, beta/m1)"},
		{"BareModelUnknown", `{"model":"gpt-9"}`, "provider", "neither a pool"},
		{"BadRoute", `{"route":"nothing"}`, "route", "want provider/model"},
		{"ControlChars", `{"provider":"al\u0000pha","model":"x"}`, "provider", "control characters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := e.do(http.MethodPost, "/gate/v1/admit", c.body)
			field, msg := apiErrorOf(t, body)
			if status != http.StatusBadRequest || field != c.field || !strings.Contains(msg, c.msg) {
				t.Fatalf("%s: %d field %q message %q", c.body, status, field, msg)
			}
		})
	}
	if n := len(e.srv.Ledger().Status(e.clock.Now())); n != 0 {
		t.Fatalf("refused calls created %d buckets", n)
	}
}

func TestAPISettleValidation(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	tk := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":10}`, http.StatusOK)["ticket"].(string)
	cases := []struct{ name, body, field, msg string }{
		{"NoTicket", `{"release":true}`, "ticket", "ticket is required"},
		{"Neither", `{"ticket":"` + tk + `"}`, "usage", "give usage, release: true or abandon: true"},
		{"Both", `{"ticket":"` + tk + `","release":true,"usage":{}}`, "release", "not both"},
		{"UsageAndAbandon", `{"ticket":"` + tk + `","abandon":true,"usage":{}}`, "abandon", "not both"},
		{"ReleaseAndAbandon", `{"ticket":"` + tk + `","abandon":true,"release":true}`, "abandon", "not both"},
		{"AllThree", `{"ticket":"` + tk + `","abandon":true,"release":true,"usage":{}}`, "abandon", "give one of usage, release: true or abandon: true"},
		{"NestedUnknown", `{"ticket":"` + tk + `","usage":{"inputTokens":1,"reasoningTokens":2}}`, "usage.reasoningTokens", "fields: inputTokens, cacheReadTokens, cacheWriteTokens, outputTokens"},
		{"NestedType", `{"ticket":"` + tk + `","usage":{"outputTokens":1.5}}`, "usage.outputTokens", "must be an integer"},
		{"NegativeUsage", `{"ticket":"` + tk + `","usage":{"outputTokens":-1}}`, "usage.outputTokens", "must not be negative"},
		{"HugeUsage", `{"ticket":"` + tk + `","usage":{"inputTokens":9223372036854775000,"outputTokens":1000}}`, "usage.inputTokens", "must be at most 2147483647"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := e.do(http.MethodPost, "/gate/v1/settle", c.body)
			field, msg := apiErrorOf(t, body)
			if status != http.StatusBadRequest || field != c.field || !strings.Contains(msg, c.msg) {
				t.Fatalf("%s: %d field %q message %q", c.body, status, field, msg)
			}
		})
	}
	status, body, _ := e.do(http.MethodPost, "/gate/v1/settle", `{"ticket":"gt_nope","release":true}`)
	if field, _ := apiErrorOf(t, body); status != http.StatusNotFound || field != "ticket" {
		t.Fatalf("unknown ticket: %d %s", status, body)
	}
	// None of that touched the ticket.
	e.post("/gate/v1/settle", `{"ticket":"`+tk+`","usage":{"inputTokens":10}}`, http.StatusOK)
}

func TestAPITicketExpiry(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	events, stop := e.srv.Bus().Subscribe(16)
	defer stop()
	tk := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)["ticket"].(string)
	e.clock.Advance(apiTicketTTL - time.Second)
	if st := e.get("/gate/v1/status", http.StatusOK); apiNum(t, st, "openTickets") != 1 {
		t.Fatalf("expired early: %v", st)
	}
	e.clock.Advance(time.Second)
	if st := e.get("/gate/v1/status", http.StatusOK); apiNum(t, st, "openTickets") != 0 {
		t.Fatalf("not expired: %v", st)
	}
	if b := e.bucket("alpha", "small"); b.InFlight != 0 || b.Reserved != 0 {
		t.Fatalf("the expired ticket still holds: %+v", b)
	}
	status, body, _ := e.do(http.MethodPost, "/gate/v1/settle", `{"ticket":"`+tk+`","usage":{"outputTokens":5}}`)
	if field, msg := apiErrorOf(t, body); status != http.StatusNotFound || field != "ticket" || !strings.Contains(msg, "expired") {
		t.Fatalf("settle after expiry: %d %s", status, body)
	}
	for {
		select {
		case ev := <-events:
			if ev.Type != "ticket-expired" {
				continue
			}
			if d := ev.Data.(map[string]any); d["provider"] != "alpha" || d["reservedTokens"] != int64(6000) {
				t.Fatalf("event: %+v", ev)
			}
			return
		default:
			t.Fatal("no ticket-expired event")
		}
	}
}

func TestAPITicketTableBounded(t *testing.T) {
	ts := newAPITickets(time.Minute, 2)
	a, ev := ts.add(apiT0, gate.Ticket{Reserved: 1}, "p", "m", "s")
	b, _ := ts.add(apiT0, gate.Ticket{Reserved: 2}, "p", "m", "s")
	if len(ev) != 0 || a.id == b.id {
		t.Fatalf("ids %q %q, evicted %v", a.id, b.id, ev)
	}
	c, ev := ts.add(apiT0, gate.Ticket{Reserved: 3}, "p", "m", "s")
	if len(ev) != 1 || ev[0] != a || ts.open() != 2 || ts.take(a.id) != nil {
		t.Fatalf("evicted %v, open %d", ev, ts.open())
	}
	if got := ts.expired(apiT0.Add(time.Minute)); len(got) != 2 || got[0] != b || got[1] != c || ts.open() != 0 {
		t.Fatalf("expired %v", got)
	}
}

func TestAPIAdmitEvictionReleases(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	a := newAPI(e.srv) // a second API on the same server, with a table of one
	a.tickets.max = 1
	mux := http.NewServeMux()
	a.mount(mux)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	e.http = hs
	first := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":10}`, http.StatusOK)["ticket"].(string)
	e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":10}`, http.StatusOK)
	if b := e.bucket("alpha", "small"); b.InFlight != 1 {
		t.Fatalf("the evicted ticket still holds: %+v", b)
	}
	status, _, _ := e.do(http.MethodPost, "/gate/v1/settle", `{"ticket":"`+first+`","release":true}`)
	if status != http.StatusNotFound {
		t.Fatalf("evicted ticket settled: %d", status)
	}
	// A ticket whose call the harness reported sent stays counted when it is
	// evicted: the provider had the call (Ledger.Abandon).
	sent := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":10}`, http.StatusOK)["ticket"].(string)
	e.post("/gate/v1/sent", `{"ticket":"`+sent+`"}`, http.StatusOK)
	last := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":10}`, http.StatusOK)
	if b := e.bucket("alpha", "small"); b.InFlight != 1 || b.WindowTokens <= int64(apiNum(t, last, "reservedTokens")) {
		t.Fatalf("the evicted sent call: in flight %d, window %d; want 1 and more than the open call's %v", b.InFlight, b.WindowTokens, last["reservedTokens"])
	}
}

// POST /gate/v1/sent: a harness that sends its call late after the admission
// says so, and the gate's window holds the call from the send, as the
// provider counts it. The first report stands.
func TestAPISentCountsTheCallFromItsSend(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	tk := e.post("/gate/v1/admit", apiBig+`}`, http.StatusOK)["ticket"].(string)
	e.clock.Advance(5 * time.Second)
	s := e.post("/gate/v1/sent", `{"ticket":"`+tk+`"}`, http.StatusOK)
	if s["moved"] != true || s["countsFrom"] != apiT0.Add(5*time.Second).Format(time.RFC3339) || s["provider"] != "alpha" || s["model"] != "small" {
		t.Fatalf("sent: %v", s)
	}
	e.clock.Advance(5 * time.Second)
	if again := e.post("/gate/v1/sent", `{"ticket":"`+tk+`"}`, http.StatusOK); again["moved"] != false || again["countsFrom"] != nil {
		t.Fatalf("sent again: %v", again)
	}
	// Past the admission's window and its count guard, the call still counts:
	// it was sent 5 s after it.
	e.clock.Set(apiT0.Add(61 * time.Second))
	if b := e.bucket("alpha", "small"); b.WindowTokens != 6000 {
		t.Fatalf("at +61s: window %d, want the call's 6000 (it counts from +5s)", b.WindowTokens)
	}
	// Settled after that window: the settle records usage, and the call leaves
	// with its send's window.
	e.post("/gate/v1/settle", `{"ticket":"`+tk+`","usage":{"inputTokens":4000,"outputTokens":300}}`, http.StatusOK)
	if b := e.bucket("alpha", "small"); b.WindowTokens != 4300 {
		t.Fatalf("after settle at +61s: window %d, want 4300", b.WindowTokens)
	}
	// It leaves a window and its guard after the send: the guard of traffic
	// starting cold, 2% of the window (1.2 s), for the first window's calls.
	e.clock.Set(apiT0.Add(66 * time.Second))
	if b := e.bucket("alpha", "small"); b.WindowTokens != 4300 {
		t.Fatalf("at +66s: window %d, want 4300 (the cold start's guard keeps it until +66.2s)", b.WindowTokens)
	}
	e.clock.Set(apiT0.Add(66300 * time.Millisecond))
	if b := e.bucket("alpha", "small"); b.WindowTokens != 0 {
		t.Fatalf("at +66.3s: window %d, want 0", b.WindowTokens)
	}
	// A settled ticket, an unknown one, none.
	status, body, _ := e.do(http.MethodPost, "/gate/v1/sent", `{"ticket":"`+tk+`"}`)
	if field, msg := apiErrorOf(t, body); status != http.StatusNotFound || field != "ticket" || !strings.Contains(msg, "already settled") {
		t.Fatalf("sent after settle: %d %s", status, body)
	}
	status, body, _ = e.do(http.MethodPost, "/gate/v1/sent", `{}`)
	if field, _ := apiErrorOf(t, body); status != http.StatusBadRequest || field != "ticket" {
		t.Fatalf("sent without a ticket: %d %s", status, body)
	}
}

// A harness that makes its own calls hands the answer's headers to settle, and
// the gate reads their rate-limit headers as the proxy reads its own answers':
// the stated limit, and the token reset — six answers whose reset names the
// next edge of the minute, across the window, and the model counts fixed
// windows.
func TestAPISettleReadsRateLimitHeaders(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	settle := func(headers string) {
		a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","inputTokens":100,"maxTokens":100}`, http.StatusOK)
		e.clock.Advance(20 * time.Millisecond) // the call's trip
		e.post("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","usage":{"inputTokens":100,"outputTokens":50},"headers":{`+headers+`}}`, http.StatusOK)
	}
	settle(`"x-ratelimit-limit-tokens":"20000","x-ratelimit-remaining-tokens":"19850"`)
	if b := e.bucket("alpha", "small"); b.Stated != 20000 || b.Quota != 20000 {
		t.Fatalf("after an answer stating 20000 tokens a minute: stated %.0f, quota %.0f; want 20000 and 20000", b.Stated, b.Quota)
	}
	for i := 0; i < 6; i++ {
		e.clock.Advance(8 * time.Second)
		now := e.clock.Now()
		reset := now.Truncate(time.Minute).Add(time.Minute).Sub(now) // stated as the call arrived, at its admission
		if b := e.bucket("alpha", "small"); b.Windows != "" {
			t.Fatalf("after %d resets at the edge: windows %q, want sliding still", i, b.Windows)
		}
		settle(`"X-Ratelimit-Limit-Tokens":"20000","X-Ratelimit-Remaining-Tokens":"19000","X-Ratelimit-Reset-Tokens":"` + reset.String() + `"`)
	}
	if b := e.bucket("alpha", "small"); b.Windows != "fixed" {
		t.Fatalf("after six resets at the edge across the window: windows %q, want fixed", b.Windows)
	}
}
