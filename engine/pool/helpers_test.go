package pool

import (
	"context"
	"github.com/gatectl/gatectl/engine"
	"sync"
	"testing"
	"time"
)

// Helpers shared by the pool, quota and session tests.

var pt0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func pf(v float64) *float64 { return &v }

// seqRand answers its values in turn, round and round.
type seqRand struct {
	mu   sync.Mutex
	vals []float64
	i    int
}

func (r *seqRand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.vals) == 0 {
		return 0
	}
	v := r.vals[r.i%len(r.vals)]
	r.i++
	return v
}

func (r *seqRand) set(vals ...float64) {
	r.mu.Lock()
	r.vals, r.i = vals, 0
	r.mu.Unlock()
}

// quotaLog records quota events.
type quotaLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *quotaLog) RouterEvent(e Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *quotaLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.ev...)
}

func (l *quotaLog) kinds() []EventKind {
	var ks []EventKind
	for _, e := range l.all() {
		ks = append(ks, e.Kind)
	}
	return ks
}

// countingReadings wraps StaticReadings and records what Refresh was asked for.
type countingReadings struct {
	StaticReadings
	mu        sync.Mutex
	refreshed [][]string
}

func (c *countingReadings) Refresh(_ context.Context, providers []string) {
	c.mu.Lock()
	c.refreshed = append(c.refreshed, append([]string(nil), providers...))
	c.mu.Unlock()
}

func (c *countingReadings) refreshes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.refreshed)
}

type poolFixture struct {
	q        *Router
	clock    *engine.FakeClock
	readings *countingReadings
	events   *quotaLog
	rand     *seqRand
	sessions *Sessions
}

func newPoolFixture(t testing.TB, cfg PoolsConfig, s Settings) *poolFixture {
	t.Helper()
	pools, err := NewPools(cfg)
	if err != nil {
		t.Fatalf("NewPools: %v", err)
	}
	f := &poolFixture{clock: engine.NewFakeClock(pt0), readings: &countingReadings{}, events: &quotaLog{}, rand: &seqRand{vals: []float64{0}}}
	f.sessions = NewSessions(nil)
	f.q = NewRouter(RouterOptions{Pools: pools, Settings: s, Readings: f.readings, Sessions: f.sessions,
		Clock: f.clock, Rand: f.rand, Events: f.events})
	return f
}

// read sets a provider's reading taken now (plus age ago).
func (f *poolFixture) read(provider string, remaining float64, age time.Duration, windows ...engine.WindowReading) {
	f.readings.Set(provider, engine.Reading{Remaining: &remaining, Windows: windows, TakenAt: f.clock.Now().Add(-age)})
}

func (f *poolFixture) pick(t testing.TB, pool string, r float64) engine.Route {
	t.Helper()
	f.rand.set(r)
	got, err := f.q.PickRoute(context.Background(), pool)
	if err != nil {
		t.Fatalf("PickRoute(%q): %v", pool, err)
	}
	return got
}

// Routes used across the tests.
var (
	rA = engine.Route{Provider: "a", Model: "m"}
	rB = engine.Route{Provider: "b", Model: "m"}
	rC = engine.Route{Provider: "c", Model: "m"}
	rD = engine.Route{Provider: "d", Model: "m"}
	rX = engine.Route{Provider: "x", Model: "other"} // in no pool
)

// twoPools: "medium" switches mid-session, "advice" does not; they share no route.
func twoPools() PoolsConfig {
	return PoolsConfig{
		Pools: []PoolSpec{
			{Name: "medium", MidSessionSwitch: true, Routes: []engine.Route{rA, rB, rC}},
			{Name: "advice", MidSessionSwitch: false, Routes: []engine.Route{{Provider: "a", Model: "max"}, {Provider: "b", Model: "max"}}},
		},
		Balances: []BalanceSpec{
			{Provider: "a", MinimumRemaining: 5, Refresh: time.Minute, Capacity: pf(100)},
			{Provider: "b", MinimumRemaining: 1, Refresh: time.Minute, Capacity: pf(20)},
			{Provider: "c", Refresh: time.Minute, Capacity: pf(10)},
		},
		Providers: []string{"a", "b", "c", "d", "x"},
	}
}
