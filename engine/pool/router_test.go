package pool

import (
	"context"
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestQuotaOnQuota walks the decision of the routing design's "what happens to a session"
// step by step: one QUOTA failure, from a known state.
func TestQuotaOnQuota(t *testing.T) {
	maxA, maxB := engine.Route{Provider: "a", Model: "max"}, engine.Route{Provider: "b", Model: "max"}
	cases := []struct {
		name    string
		setup   func(f *poolFixture)
		fail    QuotaFailure
		action  Action
		route   engine.Route
		pool    string
		marked  bool // the failing provider is marked afterwards
		events  []EventKind
		entered bool // the session has an entry afterwards
	}{
		{name: "pool with allowance: failover", fail: QuotaFailure{Session: "s", Route: rA},
			action: ActionFailover, route: rB, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "failover skips marked routes", setup: func(f *poolFixture) { f.q.Mark("b", f.clock.Now()) },
			fail: QuotaFailure{Session: "s", Route: rA}, action: ActionFailover, route: rC, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "failover draws among routes that clear their threshold", setup: func(f *poolFixture) {
			f.read("b", 0.5, 0) // below b's minimum 1
			f.read("c", 5, 0)
		}, fail: QuotaFailure{Session: "s", Route: rA}, action: ActionFailover, route: rC, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "else the first route merely not marked", setup: func(f *poolFixture) {
			f.read("b", 0.5, 0) // below its minimum
			f.q.Mark("c", f.clock.Now())
		}, fail: QuotaFailure{Session: "s", Route: rA}, action: ActionFailover, route: rB, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "every other route marked: long-term wait", setup: func(f *poolFixture) {
			f.q.Mark("b", f.clock.Now())
			f.q.Mark("c", f.clock.Now())
		}, fail: QuotaFailure{Session: "s", Route: rA}, action: ActionWait, route: rA, pool: "medium", marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "pool refusing mid-session switches waits in place", fail: QuotaFailure{Session: "s", Route: maxA},
			action: ActionWait, route: maxA, pool: "advice", marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "no pool: waits in place", fail: QuotaFailure{Session: "s", Route: rX},
			action: ActionWait, route: rX, marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "pool off: waits in place", setup: func(f *poolFixture) { mustSet(f.q.SetPool("s", "off")) },
			fail: QuotaFailure{Session: "s", Route: rA}, action: ActionWait, route: rA, marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "stated pool governs a route outside it", setup: func(f *poolFixture) { mustSet(f.q.SetPool("s", "medium")) },
			fail: QuotaFailure{Session: "s", Route: rX}, action: ActionFailover, route: rA, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "stated pool that refuses switches waits", setup: func(f *poolFixture) { mustSet(f.q.SetPool("s", "advice")) },
			fail: QuotaFailure{Session: "s", Route: maxB}, action: ActionWait, route: maxB, pool: "advice", marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "switch off: pass, the provider still marked", setup: func(f *poolFixture) { mustSet(f.q.SetSwitch("s", "off")) },
			fail: QuotaFailure{Session: "s", Route: rA}, action: ActionPass, route: rA, marked: true},
		{name: "native-first provider runs its schedule first, unmarked", fail: QuotaFailure{Session: "s", Route: engine.Route{Provider: "qwen", Model: "m"}},
			action: ActionNativeRetry, route: engine.Route{Provider: "qwen", Model: "m"}},
		{name: "native-first provider, schedule spent: marked, then as usual", fail: QuotaFailure{Session: "s", Route: engine.Route{Provider: "qwen", Model: "m"}, NativeSpent: true},
			action: ActionWait, route: engine.Route{Provider: "qwen", Model: "m"}, marked: true, events: []EventKind{EventEntered}, entered: true},
		{name: "native-first provider, switch off: pass, unmarked", setup: func(f *poolFixture) { mustSet(f.q.SetSwitch("s", "off")) },
			fail: QuotaFailure{Session: "s", Route: engine.Route{Provider: "qwen", Model: "m"}}, action: ActionPass, route: engine.Route{Provider: "qwen", Model: "m"}},
		{name: "native-first provider, switch off, schedule spent: pass, marked", setup: func(f *poolFixture) { mustSet(f.q.SetSwitch("s", "off")) },
			fail: QuotaFailure{Session: "s", Route: engine.Route{Provider: "qwen", Model: "m"}, NativeSpent: true}, action: ActionPass, route: engine.Route{Provider: "qwen", Model: "m"}, marked: true},
		{name: "no session: failover without state", fail: QuotaFailure{Route: rA}, action: ActionFailover, route: rB, pool: "medium", marked: true, events: []EventKind{EventFailover}},
		{name: "no session: a wait with no entry and no event", fail: QuotaFailure{Route: rX}, action: ActionWait, route: rX, marked: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := DefaultSettings()
			s.NativeRetryFirstProviders = []string{"qwen"}
			f := newPoolFixture(t, twoPools(), s)
			if c.setup != nil {
				c.setup(f)
			}
			d := f.q.OnQuota(context.Background(), c.fail)
			if d.Action != c.action || d.Route != c.route || d.Pool != c.pool {
				t.Errorf("OnQuota = %s %s pool %q (%s); want %s %s pool %q", d.Action, d.Route, d.Pool, d.Reason, c.action, c.route, c.pool)
			}
			if _, held := f.q.Marked(c.fail.Route.Provider); held != c.marked {
				t.Errorf("marked = %v, want %v", held, c.marked)
			}
			if got := f.events.kinds(); !slices.Equal(got, c.events) {
				t.Errorf("events %v, want %v", got, c.events)
			}
			if got := f.q.IsRetrying(c.fail.Session); got != c.entered {
				t.Errorf("IsRetrying = %v, want %v", got, c.entered)
			}
			if d.Action == ActionWait && (d.Wait != time.Hour || !d.Until.Equal(pt0.Add(time.Hour))) {
				t.Errorf("wait %s until %s, want 1h from now", d.Wait, d.Until)
			}
			if d.Action == ActionFailover && c.fail.Session != "" {
				if r, ok := f.q.CurrentRoute(c.fail.Session); !ok || r != c.route {
					t.Errorf("the session is on %s (%v), want %s", r, ok, c.route)
				}
			}
		})
	}
}

func mustSet(_ SessionRecord, err error) {
	if err != nil {
		panic(err)
	}
}

func TestQuotaFailoverEvent(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	fail := &engine.Failure{Status: 429, Body: "insufficient_quota", Provider: "a"}
	f.q.OnQuota(context.Background(), QuotaFailure{Session: "s", Route: rA, Failure: fail, Turn: "t1", Step: 2})
	ev := f.events.all()
	if len(ev) != 1 {
		t.Fatalf("events %v", ev)
	}
	e := ev[0]
	if e.Kind != EventFailover || e.Session != "s" || *e.From != rA || *e.To != rB || e.Pool != "medium" || !e.At.Equal(pt0) || e.Failure != fail {
		t.Errorf("failover event %+v", e)
	}
}

// TestQuotaLongTermEntry follows one entry: entered on the first failure, more
// attempts on the next ones, cancel keeps it, success ends it.
func TestQuotaLongTermEntry(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	fail := QuotaFailure{Session: "s", Route: rX, Turn: "t1", Step: 1}

	d := f.q.OnQuota(ctx, fail)
	st, ok := f.q.State("s")
	if !ok || !st.Pending || st.Attempts != 1 || !st.EnteredAt.Equal(pt0) || !st.NextAttemptAt.Equal(pt0.Add(time.Hour)) || st.Provider != "x" || st.Turn != "t1" || st.Step != 1 {
		t.Fatalf("state after entry: %+v %v", st, ok)
	}

	// The wait runs out on the fake clock.
	errc := make(chan error, 1)
	go func() { errc <- f.q.Wait(ctx, d) }()
	waitTimers(t, f.clock, 1)
	f.clock.Advance(time.Hour)
	if err := <-errc; err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if st, _ := f.q.State("s"); st.Pending {
		t.Error("still pending after the wait")
	}

	// The attempt fails again: attempt 2, no second "entered".
	d = f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rX, Turn: "t1", Step: 2})
	if d.Attempts != 2 {
		t.Errorf("attempts %d, want 2", d.Attempts)
	}

	// Cancelling the request keeps the entry: pending false, no "left".
	cctx, cancel := context.WithCancel(ctx)
	go func() { errc <- f.q.Wait(cctx, d) }()
	waitTimers(t, f.clock, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v", err)
	}
	st, ok = f.q.State("s")
	if !ok || st.Pending || st.Attempts != 2 || !st.EnteredAt.Equal(pt0) {
		t.Errorf("state after cancel: %+v %v", st, ok)
	}
	if f.clock.Timers() != 0 {
		t.Error("the cancelled wait left its timer")
	}

	// The next failure re-arms the same entry.
	f.clock.Advance(10 * time.Minute)
	d = f.q.OnQuota(ctx, fail)
	if st, _ := f.q.State("s"); !st.Pending || st.Attempts != 3 || !st.EnteredAt.Equal(pt0) {
		t.Errorf("state after re-arm: %+v", st)
	}

	// A success elsewhere in the session ends the entry; the pending wait returns.
	go func() { errc <- f.q.Wait(ctx, d) }()
	waitTimers(t, f.clock, 1)
	f.clock.Advance(5 * time.Minute)
	f.q.OnSuccess("s")
	if err := <-errc; err != nil {
		t.Errorf("Wait after success = %v", err)
	}
	if f.q.IsRetrying("s") {
		t.Error("entry survives success")
	}
	ev := f.events.all()
	if kinds := f.events.kinds(); !slices.Equal(kinds, []EventKind{EventEntered, EventLeft}) {
		t.Fatalf("events %v", kinds)
	}
	left := ev[1]
	if left.Reason != LeftRecovered || left.Attempts != 3 || left.Duration != 75*time.Minute || !left.LeftAt.Equal(pt0.Add(75*time.Minute)) || left.Provider != "x" {
		t.Errorf("left %+v", left)
	}
	entered := ev[0]
	if entered.Attempts != 1 || !entered.Pending || !entered.NextAttemptAt.Equal(pt0.Add(time.Hour)) || entered.Turn != "t1" {
		t.Errorf("entered %+v", entered)
	}

	// A success with no entry announces nothing.
	f.q.OnSuccess("s")
	if n := len(f.events.all()); n != 2 {
		t.Errorf("%d events after a second success", n)
	}
}

func TestQuotaSwitchOffEndsTheWait(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rX})
	errc := make(chan error, 1)
	go func() { errc <- f.q.Wait(ctx, d) }()
	waitTimers(t, f.clock, 1)
	f.clock.Advance(time.Minute)
	if _, err := f.q.SetSwitch("s", "off"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrDisabled) {
		t.Errorf("Wait = %v, want ErrDisabled", err)
	}
	if f.clock.Timers() != 0 {
		t.Error("the aborted wait left its timer")
	}
	ev := f.events.all()
	if len(ev) != 2 || ev[1].Kind != EventLeft || ev[1].Reason != LeftDisabled || ev[1].Duration != time.Minute {
		t.Errorf("events %+v", ev)
	}
	// A Wait that starts after the entry ended returns at once.
	if err := f.q.Wait(ctx, d); !errors.Is(err, ErrDisabled) {
		t.Errorf("late Wait = %v", err)
	}
	// With the switch off, the next failure passes.
	if d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rX}); d.Action != ActionPass {
		t.Errorf("after off: %s", d.Action)
	}
}

func TestQuotaDefaultDisabled(t *testing.T) {
	s := DefaultSettings()
	s.DefaultEnabled = false
	f := newPoolFixture(t, twoPools(), s)
	ctx := context.Background()
	if d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rA}); d.Action != ActionPass {
		t.Errorf("default off: %s", d.Action)
	}
	mustSet(f.q.SetSwitch("s", "on"))
	if d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rA}); d.Action != ActionFailover {
		t.Errorf("opted in: %s", d.Action)
	}
	// "default" goes back to the deployment's default: off again. An entry ends.
	mustSet(f.q.SetSwitch("t", "on"))
	f.q.OnQuota(ctx, QuotaFailure{Session: "t", Route: rX})
	mustSet(f.q.SetSwitch("t", "default"))
	if f.q.IsRetrying("t") {
		t.Error("switch back to a default of off kept the entry")
	}
}

func TestQuotaLongTermDelaySetting(t *testing.T) {
	s := DefaultSettings()
	s.LongTermDelay = 30 * time.Minute
	f := newPoolFixture(t, twoPools(), s)
	d := f.q.OnQuota(context.Background(), QuotaFailure{Session: "s", Route: rX})
	if d.Wait != 30*time.Minute {
		t.Errorf("wait %s", d.Wait)
	}
	// Zero durations take the design's defaults.
	f = newPoolFixture(t, twoPools(), Settings{DefaultEnabled: true})
	if got := f.q.Settings(); got.LongTermDelay != time.Hour || got.ExhaustedCooldown != time.Hour {
		t.Errorf("defaults %+v", got)
	}
}

// TestQuotaRouteFor: where each request goes.
func TestQuotaRouteFor(t *testing.T) {
	ctx := context.Background()
	maxA, maxB := engine.Route{Provider: "a", Model: "max"}, engine.Route{Provider: "b", Model: "max"}
	type step struct {
		do    func(f *poolFixture) // before the request
		asked engine.Route
		r     float64 // the random draw
		want  engine.Route
		drawn bool
		moved bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a new session is drawn from the pool its route belongs to", []step{
			{do: func(f *poolFixture) { f.read("a", 10, 0); f.read("b", 20, 0) }, asked: rA, r: 0, want: rB, drawn: true}, // b 1.0 vs a 0.1
			{asked: rA, r: 0.99, want: rB},
		}},
		{"a pool refusing switches still draws the start", []step{
			{do: func(f *poolFixture) { f.read("a", 10, 0); f.read("b", 20, 0) }, asked: maxA, r: 0, want: maxB, drawn: true},
		}},
		{"a reading below the threshold never moves a started session", []step{
			{asked: rA, r: 0, want: rA, drawn: true},
			{do: func(f *poolFixture) { f.read("a", 0.5, 0) }, asked: rA, want: rA},
		}},
		{"a marked provider moves a started session, without waiting for readings", []step{
			{asked: rA, want: rA, drawn: true},
			{do: func(f *poolFixture) { f.q.Mark("a", f.clock.Now()) }, asked: rA, want: rB, moved: true},
			{asked: rA, want: rB},
		}},
		{"a marked provider never moves a session of a pool that refuses", []step{
			{asked: maxA, want: maxA, drawn: true},
			{do: func(f *poolFixture) { f.q.Mark("a", f.clock.Now()) }, asked: maxA, want: maxA},
		}},
		{"everything marked: the session stays", []step{
			{asked: rA, want: rA, drawn: true},
			{do: func(f *poolFixture) {
				for _, p := range []string{"a", "b", "c"} {
					f.q.Mark(p, f.clock.Now())
				}
			}, asked: rA, want: rA},
		}},
		{"the user's pick stands", []step{
			{asked: rA, want: rA, drawn: true},
			{asked: rC, want: rC},
			{asked: rC, want: rC},
		}},
		{"a pick outside the pool is left alone even when marked", []step{
			{asked: rA, want: rA, drawn: true},
			{do: func(f *poolFixture) { f.q.Mark("x", f.clock.Now()) }, asked: rX, want: rX},
		}},
		{"a route in no pool is untouched", []step{
			{asked: rX, want: rX},
			{do: func(f *poolFixture) { f.q.Mark("x", f.clock.Now()) }, asked: rX, want: rX},
		}},
		{"naming a pool starts the session in it", []step{
			{asked: rX, want: rX},
			{do: func(f *poolFixture) { mustSet(f.q.SetPool("s", "advice")); f.read("a", 10, 0); f.read("b", 20, 0) }, asked: rX, r: 0, want: maxB, drawn: true},
			{asked: rX, want: maxB},
		}},
		{"pool off: untouched", []step{
			{do: func(f *poolFixture) { mustSet(f.q.SetPool("s", "off")) }, asked: rA, want: rA},
		}},
		{"switch off: untouched", []step{
			{do: func(f *poolFixture) { mustSet(f.q.SetSwitch("s", "off")) }, asked: rA, r: 0.9, want: rA},
		}},
		{"a restart reads as the start", []step{
			{do: func(f *poolFixture) { f.read("a", 10, 0); f.read("b", 20, 0); f.read("c", 10, 0) }, asked: rA, r: 0, want: rB, drawn: true},
			{do: func(f *poolFixture) { f.q.Forget("s") }, asked: rA, r: 0.9, want: rC, drawn: true},
		}},
		{"a failover moves the session's later requests", []step{
			{asked: rA, want: rA, drawn: true},
			{do: func(f *poolFixture) { f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rA}) }, asked: rA, want: rB},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newPoolFixture(t, twoPools(), DefaultSettings())
			for i, st := range c.steps {
				if st.do != nil {
					st.do(f)
				}
				f.rand.set(st.r)
				ch, err := f.q.RouteFor(ctx, "s", st.asked)
				if err != nil {
					t.Fatal(err)
				}
				if ch.Route != st.want || ch.Drawn != st.drawn || ch.Moved != st.moved {
					t.Errorf("step %d: RouteFor(%s) = %+v; want %s drawn %v moved %v", i, st.asked, ch, st.want, st.drawn, st.moved)
				}
			}
		})
	}
}

func TestQuotaRouteForRefreshesOnlyAtTheStart(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	if _, err := f.q.RouteFor(ctx, "s", rA); err != nil {
		t.Fatal(err)
	}
	if n := f.readings.refreshes(); n != 1 {
		t.Fatalf("start refreshed %d times, want 1", n)
	}
	f.q.Mark("a", f.clock.Now())
	f.q.RouteFor(ctx, "s", rA)                              // moved
	f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rB}) // failover
	f.q.RouteFor(ctx, "", rA)                               // no session
	if n := f.readings.refreshes(); n != 1 {
		t.Errorf("moves refreshed readings: %d refreshes", n)
	}
}

func TestQuotaPoolOfAndFacts(t *testing.T) {
	cfg := twoPools()
	cfg.Pools = append(cfg.Pools, PoolSpec{Name: "shared", Routes: []engine.Route{rA}}) // rA now in two pools
	f := newPoolFixture(t, cfg, DefaultSettings())
	if got := f.q.PoolOf("s", rA); got != "" {
		t.Errorf("a shared route names pool %q", got)
	}
	if got := f.q.PoolOf("s", rB); got != "medium" {
		t.Errorf("PoolOf(rB) = %q", got)
	}
	mustSet(f.q.SetPool("s", "advice"))
	if got := f.q.PoolOf("s", rB); got != "advice" {
		t.Errorf("stated pool: %q", got)
	}
	if _, err := f.q.SetPool("s", "nope"); !errors.Is(err, ErrNoPool) {
		t.Errorf("SetPool(nope) = %v", err)
	}
	if _, err := f.q.SetPool("s", "Bad_Name"); !errors.Is(err, ErrSessionSetting) {
		t.Errorf("SetPool(Bad_Name) = %v", err)
	}
	facts, err := f.q.Facts("s")
	if err != nil {
		t.Fatal(err)
	}
	if !facts.Enabled || !facts.DefaultEnabled || facts.Source != SourceDefault || facts.Pool == nil || *facts.Pool != "advice" ||
		facts.PoolSource != SourceSession || !slices.Equal(facts.Pools, []string{"medium", "advice", "shared"}) {
		t.Errorf("facts %+v", facts)
	}
	mustSet(f.q.SetPool("s", "off"))
	mustSet(f.q.SetSwitch("s", "off"))
	facts, _ = f.q.Facts("s")
	if facts.Enabled || facts.Source != SourceSession || facts.Pool != nil || facts.PoolSource != SourceOff {
		t.Errorf("facts after off %+v", facts)
	}
}

func TestQuotaRouteQuotaAdapter(t *testing.T) {
	s := DefaultSettings()
	s.NativeRetryFirstProviders = []string{"qwen"}
	f := newPoolFixture(t, twoPools(), s)
	ctx := context.Background()
	now := pt0.Add(time.Minute)
	cases := []struct {
		f    retry.QuotaFailure
		kind retry.ActionKind
	}{
		{retry.QuotaFailure{Session: "s", Route: engine.Route{Provider: "qwen", Model: "m"}}, retry.ActionRetry},
		{retry.QuotaFailure{Session: "s", Route: rA}, retry.ActionFailover},
		{retry.QuotaFailure{Session: "s", Route: rX}, retry.ActionWaitLongTerm},
	}
	for _, c := range cases {
		a := f.q.RouteQuota(ctx, now, c.f)
		if a.Kind != c.kind {
			t.Errorf("RouteQuota(%s) = %s (%s), want %s", c.f.Route, a.Kind, a.Reason, c.kind)
		}
		if _, ok := a.Handle.(Decision); !ok {
			t.Errorf("handle %T", a.Handle)
		}
	}
	if at, held := f.q.Marked("a"); !held || !at.Equal(now) {
		t.Errorf("mark at %s (%v), want the planner's now", at, held)
	}
	mustSet(f.q.SetSwitch("s", "off"))
	if a := f.q.RouteQuota(ctx, now, retry.QuotaFailure{Session: "s", Route: rA}); a.Kind != retry.ActionGiveUp {
		t.Errorf("switch off: %s", a.Kind)
	}
}

// waitTimers waits, without sleeping, until the clock has n pending timers.
func waitTimers(t *testing.T, c *engine.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Timers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("clock has %d timers, want %d", c.Timers(), n)
		}
		runtime.Gosched()
	}
}

func TestQuotaIdleSweep(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	f.q.RouteFor(ctx, "old", rA)
	d := f.q.OnQuota(ctx, QuotaFailure{Session: "gone", Route: rX})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f.q.Wait(cctx, d) // the turn is cancelled: the entry stays, unarmed
	// A wait the decision API told a harness of: armed, and nobody here ever
	// calls Wait on it.
	f.q.OnQuota(ctx, QuotaFailure{Session: "told", Route: rX})
	f.q.ArmLongTerm(QuotaFailure{Session: "waiting", Route: rX}, 48*time.Hour)
	f.clock.Advance(25 * time.Hour)
	for i := range sweepEvery {
		f.q.RouteFor(ctx, fmt.Sprintf("new-%d", i), rA)
	}
	if _, ok := f.q.CurrentRoute("old"); ok {
		t.Error("an idle session route survived the sweep")
	}
	if f.q.IsRetrying("gone") {
		t.Error("an idle, unarmed entry survived the sweep")
	}
	if f.q.IsRetrying("told") {
		t.Error("an entry whose wait ended a day ago survived the sweep")
	}
	if !f.q.IsRetrying("waiting") {
		t.Error("the sweep dropped a wait that is not over")
	}
	if _, ok := f.q.CurrentRoute(fmt.Sprintf("new-%d", sweepEvery-1)); !ok {
		t.Error("the sweep dropped a fresh session")
	}
}

// The insertion that sets off a sweep is swept with the others: an entry it
// opens must be armed by then, or the sweep takes it for an idle one.
func TestQuotaSweepSparesTheEntryThatSetItOff(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	for i := range sweepEvery - 1 {
		f.q.RouteFor(ctx, fmt.Sprintf("s-%d", i), rA)
	}
	f.q.OnQuota(ctx, QuotaFailure{Session: "last", Route: rX}) // the sweepEvery-th insertion
	if !f.q.IsRetrying("last") {
		t.Fatal("the sweep dropped the entry just opened")
	}
}

// Session names are the client's: a client that invents one per request must
// not grow the routes or the entries for the day the idle sweep waits.
func TestQuotaTrackedSessionsBounded(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	f.q.RouteFor(ctx, "kept", rA)
	for i := range maxTracked + 10 {
		f.clock.Advance(time.Millisecond) // distinct last uses: the oldest go first
		if i == maxTracked/2 {
			f.q.RouteFor(ctx, "kept", rA) // used again: among the newest now
		}
		f.q.RouteFor(ctx, fmt.Sprintf("s-%d", i), rA)
	}
	routes, _ := f.q.Tracked()
	if routes > maxTracked {
		t.Errorf("%d session routes, want at most %d", routes, maxTracked)
	}
	if _, ok := f.q.CurrentRoute("s-0"); ok {
		t.Error("the least recently used route survived")
	}
	if _, ok := f.q.CurrentRoute("kept"); !ok {
		t.Error("a route used since went before older ones")
	}
	if _, ok := f.q.CurrentRoute(fmt.Sprintf("s-%d", maxTracked+9)); !ok {
		t.Error("the newest route went")
	}

	for i := range maxTracked + 10 {
		f.clock.Advance(time.Millisecond)
		f.q.ArmLongTerm(QuotaFailure{Session: fmt.Sprintf("e-%d", i), Route: rX}, 48*time.Hour)
	}
	if _, entries := f.q.Tracked(); entries > maxTracked {
		t.Errorf("%d entries, want at most %d", entries, maxTracked)
	}
	if f.q.IsRetrying("e-0") || !f.q.IsRetrying(fmt.Sprintf("e-%d", maxTracked+9)) {
		t.Error("the entries did not go oldest first")
	}
}

func TestQuotaReport(t *testing.T) {
	cfg := twoPools()
	cfg.Balances[0].Coefficients = map[string]float64{"monthly": 0.25}
	cfg.Balances[0].Capacities = map[string]float64{"monthly": 40}
	cfg.Balances = append(cfg.Balances, BalanceSpec{Provider: "ghost"})
	f := newPoolFixture(t, cfg, DefaultSettings())
	f.read("a", 50, 30*time.Second, engine.WindowReading{Name: "weekly", Remaining: 7, Capacity: pf(35)}, engine.WindowReading{Name: "monthly", Remaining: 20},
		engine.WindowReading{Name: "daily", Remaining: 1})
	f.read("b", 0.5, 0)
	f.q.Mark("c", f.clock.Now().Add(-10*time.Minute))
	rep, err := f.q.Report(context.Background(), true, "medium")
	if err != nil {
		t.Fatal(err)
	}
	if f.readings.refreshes() != 1 || !slices.Equal(f.readings.refreshed[0], []string{"a", "b", "c"}) {
		t.Errorf("refreshed %v", f.readings.refreshed)
	}
	if len(rep.Pools) != 1 || rep.Pools[0].Name != "medium" || !rep.Pools[0].MidSessionSwitch {
		t.Fatalf("pools %+v", rep.Pools)
	}
	ra, rb, rc := rep.Pools[0].Routes[0], rep.Pools[0].Routes[1], rep.Pools[0].Routes[2]
	if ra.Route != rA || !ra.Usable || ra.Score == nil || *ra.Score != 0.125 || *ra.ReadingAgeMs != 30000 ||
		!slices.Equal(ra.ScoringWindows, []string{"weekly", "monthly"}) || ra.MinimumRemaining != 5 {
		t.Errorf("route a %+v", ra)
	}
	if rb.Usable || rb.Why != "below minimumRemaining 1" || rb.Score == nil || *rb.Score != 0.025 {
		t.Errorf("route b %+v", rb)
	}
	if rc.Usable || !rc.Marked || rc.Reading != nil || rc.Score != nil || !rc.MarkUntil.Equal(pt0.Add(50*time.Minute)) ||
		rc.Why != "exhausted: the provider reported its allowance spent" {
		t.Errorf("route c %+v", rc)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], `"ghost"`) {
		t.Errorf("warnings %q", rep.Warnings)
	}
	if _, err := f.q.Report(context.Background(), false, "medium", "nope"); !errors.Is(err, ErrNoPool) {
		t.Errorf("Report(nope) = %v", err)
	}
	all, _ := f.q.Report(context.Background(), false)
	if len(all.Pools) != 2 || all.Pools[1].Name != "advice" || all.Pools[1].MidSessionSwitch {
		t.Errorf("all pools %+v", all.Pools)
	}
}

func TestQuotaFactsInherited(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	mustSet(f.q.SetSwitch("parent", "off"))
	mustSet(f.q.SetPool("parent", "advice"))
	mustSet(f.q.Fork("child", "parent"))
	facts, err := f.q.Facts("child")
	if err != nil {
		t.Fatal(err)
	}
	if facts.Enabled || facts.Source != SourceInherited || facts.Pool == nil || *facts.Pool != "advice" || facts.PoolSource != SourceInherited {
		t.Errorf("child facts %+v", facts)
	}
	facts, _ = f.q.Facts("stranger")
	if !facts.Enabled || facts.Source != SourceDefault || facts.Pool != nil || facts.PoolSource != SourceDefault {
		t.Errorf("stranger facts %+v", facts)
	}
	// A session on a pooled route reports the pool it belongs to.
	f.q.RouteFor(context.Background(), "stranger", rA)
	facts, _ = f.q.Facts("stranger")
	if facts.Pool == nil || *facts.Pool != "medium" || facts.PoolSource != SourceDefault || facts.Route == nil {
		t.Errorf("pooled stranger facts %+v", facts)
	}
}
