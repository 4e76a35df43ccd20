package pool

import (
	"context"
	"errors"
	"github.com/gatectl/gatectl/engine"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestPoolConstructorRefuses(t *testing.T) {
	ok := []engine.Route{rA}
	cases := []struct {
		name string
		cfg  PoolsConfig
		is   error
		want string // substring of the error
	}{
		{"uppercase", PoolsConfig{Pools: []PoolSpec{{Name: "Medium", Routes: ok}}}, ErrPoolName, `pools.Medium: invalid pool name "Medium": want lowercase letters, digits and hyphens ([a-z0-9-]+)`},
		{"underscore", PoolsConfig{Pools: []PoolSpec{{Name: "my_pool", Routes: ok}}}, ErrPoolName, `[a-z0-9-]+`},
		{"empty", PoolsConfig{Pools: []PoolSpec{{Name: "", Routes: ok}}}, ErrPoolName, `empty`},
		{"duplicate pool", PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: ok}, {Name: "p", Routes: ok}}}, ErrPoolSpec, `pools.p: invalid pool: defined twice`},
		{"no routes", PoolsConfig{Pools: []PoolSpec{{Name: "p"}}}, ErrPoolSpec, `pools.p.routes: invalid pool: a pool needs at least one route`},
		{"route without model", PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: []engine.Route{{Provider: "a"}}}}}, ErrPoolSpec, `pools.p.routes[0]`},
		{"duplicate route", PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: []engine.Route{rA, rB, rA}}}}, ErrPoolSpec, `pools.p.routes[2]: invalid pool: route a/m is already pools.p.routes[0]`},
		{"duplicate balance", PoolsConfig{Balances: []BalanceSpec{{Provider: "a"}, {Provider: "a"}}}, ErrPoolSpec, `balances[1]: invalid pool: provider "a" already has a balance source`},
		{"zero capacity", PoolsConfig{Balances: []BalanceSpec{{Provider: "a", Capacity: pf(0)}}}, ErrPoolSpec, `balances[0].capacity`},
		{"negative coefficient", PoolsConfig{Balances: []BalanceSpec{{Provider: "a", Coefficients: map[string]float64{"monthly": -1}}}}, ErrPoolSpec, `balances[0].coefficients.monthly`},
		{"zero window capacity", PoolsConfig{Balances: []BalanceSpec{{Provider: "a", Capacities: map[string]float64{"monthly": 0}}}}, ErrPoolSpec, `balances[0].capacities.monthly`},
		{
			"undefined provider", PoolsConfig{
				Pools: []PoolSpec{
					{Name: "medium", Routes: []engine.Route{{Provider: "opencode-go", Model: "m"}, rA}},
					{Name: "advice", Routes: []engine.Route{rB, {Provider: "opencode-go", Model: "max"}}},
				},
				Balances:  []BalanceSpec{{Provider: "opencode-go"}},
				Providers: []string{"kimi-coding", "a", "b"},
			}, ErrUnknownProvider,
			`unknown provider: no provider "opencode-go" is defined (named by pools.medium.routes[0], pools.advice.routes[1], balances[0]); ` +
				`a request on one of its routes would fail. Defined providers: a, b, kimi-coding`,
		},
	}
	for _, name := range ReservedPoolNames {
		cases = append(cases, struct {
			name string
			cfg  PoolsConfig
			is   error
			want string
		}{"reserved " + name, PoolsConfig{Pools: []PoolSpec{{Name: name, Routes: ok}}}, ErrPoolName, `pools.` + name + `: invalid pool name "` + name + `": reserved`})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewPools(c.cfg)
			if err == nil {
				t.Fatal("NewPools accepted it")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s", err, c.want)
			}
		})
	}
}

func TestPoolConstructorAccepts(t *testing.T) {
	ps, err := NewPools(PoolsConfig{
		Pools: []PoolSpec{
			{Name: "medium-2", MidSessionSwitch: true, Routes: []engine.Route{rA, rB}},
			{Name: "x0", Routes: []engine.Route{{Provider: "a", Model: "m", ReasoningEffort: "high"}, {Provider: "a", Model: "m", ReasoningEffort: "low"}}},
		},
		Balances:  []BalanceSpec{{Provider: "ghost"}, {Provider: "a", Capacity: pf(10)}}, // ghost: only a warning
		Providers: []string{"a", "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ps.Names(), ","); got != "medium-2,x0" {
		t.Errorf("Names() = %s", got)
	}
	w := ps.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], `no provider "ghost" is defined (named by balances[0])`) {
		t.Errorf("Warnings() = %q", w)
	}
	if !ps.Pool("medium-2").MidSessionSwitch() || ps.Pool("x0").MidSessionSwitch() {
		t.Error("midSessionSwitch not kept")
	}
	// nil Providers skips the check.
	if _, err := NewPools(PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: []engine.Route{{Provider: "nowhere", Model: "m"}}}}}); err != nil {
		t.Errorf("nil Providers: %v", err)
	}
}

func TestPoolConstructorDoesNotAlias(t *testing.T) {
	routes := []engine.Route{rA, rB}
	coef := map[string]float64{"w": 1}
	ps, err := NewPools(PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: routes}}, Balances: []BalanceSpec{{Provider: "a", Coefficients: coef}}})
	if err != nil {
		t.Fatal(err)
	}
	routes[0] = rC
	coef["w"] = 0
	if ps.Pool("p").Routes()[0] != rA || ps.balanceOf("a").coefficients["w"] != 1 {
		t.Error("the pools share the caller's slices or maps")
	}
}

func TestPoolHolding(t *testing.T) {
	ps, err := NewPools(PoolsConfig{Pools: []PoolSpec{
		{Name: "one", Routes: []engine.Route{rA, rB}},
		{Name: "two", Routes: []engine.Route{rB, {Provider: "c", Model: "m", ReasoningEffort: "high"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		r    engine.Route
		want string
	}{
		{rA, "one"},
		{rB, ""}, // shared by two pools: names neither
		{rC, "two"},
		{engine.Route{Provider: "c", Model: "m", ReasoningEffort: "high"}, "two"},
		{engine.Route{Provider: "c", Model: "m", ReasoningEffort: "low"}, ""},
		{rX, ""},
	}
	for _, c := range cases {
		got := ""
		if p := ps.Holding(c.r); p != nil {
			got = p.Name()
		}
		if got != c.want {
			t.Errorf("Holding(%s) = %q, want %q", c.r, got, c.want)
		}
	}
}

func TestPoolDefaultScorer(t *testing.T) {
	w := func(name string, rem float64, capacity *float64) engine.WindowReading {
		return engine.WindowReading{Name: name, Remaining: rem, Capacity: capacity}
	}
	cases := []struct {
		name     string
		r        engine.Reading
		caps     map[string]float64
		coef     map[string]float64
		capacity *float64
		want     float64
		scored   bool
	}{
		{name: "seed reading", r: engine.Reading{Remaining: pf(2.94), Windows: []engine.WindowReading{w("five-hour", 14, pf(14)), w("weekly", 2.94, pf(35)), w("monthly", 37.94, nil)}},
			coef: map[string]float64{"five-hour": 1, "monthly": 0.25}, caps: map[string]float64{"monthly": 40}, want: 2.94 / 35, scored: true},
		{name: "monthly is the tightest once weighed", r: engine.Reading{Windows: []engine.WindowReading{w("five-hour", 14, pf(14)), w("monthly", 4, nil)}},
			coef: map[string]float64{"monthly": 0.25}, caps: map[string]float64{"monthly": 40}, want: 4.0 / 40 * 0.25, scored: true},
		{name: "window without capacity is skipped", r: engine.Reading{Windows: []engine.WindowReading{w("five-hour", 7, pf(14)), w("monthly", 1, nil)}}, want: 0.5, scored: true},
		{name: "the reading's capacity wins over capacities", r: engine.Reading{Windows: []engine.WindowReading{w("weekly", 10, pf(20))}},
			caps: map[string]float64{"weekly": 1000}, want: 0.5, scored: true},
		{name: "unnamed window weighs 1", r: engine.Reading{Windows: []engine.WindowReading{w("a", 3, pf(4)), w("b", 1, pf(2))}},
			coef: map[string]float64{"zzz": 0.1}, want: 0.5, scored: true},
		{name: "coefficient 0 drops a window", r: engine.Reading{Windows: []engine.WindowReading{w("a", 3, pf(4)), w("b", 0, pf(2))}},
			coef: map[string]float64{"b": 0}, want: 0.75, scored: true},
		{name: "all windows dropped: the whole reading against capacity", r: engine.Reading{Remaining: pf(5), Windows: []engine.WindowReading{w("b", 0, pf(2))}},
			coef: map[string]float64{"b": 0}, capacity: pf(20), want: 0.25, scored: true},
		{name: "no windows: the whole reading against capacity", r: engine.Reading{Remaining: pf(5)}, capacity: pf(20), want: 0.25, scored: true},
		{name: "capacity does not override a scorable window", r: engine.Reading{Remaining: pf(20), Windows: []engine.WindowReading{w("a", 1, pf(10))}}, capacity: pf(20), want: 0.1, scored: true},
		{name: "no windows, no capacity: unscored", r: engine.Reading{Remaining: pf(5)}},
		{name: "unscorable windows, no capacity: unscored", r: engine.Reading{Remaining: pf(5), Windows: []engine.WindowReading{w("monthly", 5, nil)}}},
		{name: "capacity but no remaining: unscored", r: engine.Reading{}, capacity: pf(20)},
		{name: "overdrawn window scores negative", r: engine.Reading{Windows: []engine.WindowReading{w("a", -1, pf(4))}}, want: -0.25, scored: true},
		{name: "zero capacity in the reading falls back to capacities", r: engine.Reading{Windows: []engine.WindowReading{w("a", 1, pf(0))}}, caps: map[string]float64{"a": 4}, want: 0.25, scored: true},
		{name: "NaN window is skipped", r: engine.Reading{Windows: []engine.WindowReading{w("a", math.NaN(), pf(4)), w("b", 1, pf(2))}}, want: 0.5, scored: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, scored, err := DefaultScorer{}.Score(context.Background(), c.r, c.caps, c.coef, c.capacity)
			if err != nil || scored != c.scored || math.Abs(got-c.want) > 1e-12 {
				t.Errorf("Score = %v, %v, %v; want %v, %v", got, scored, err, c.want, c.scored)
			}
		})
	}
}

// TestPoolAvailability walks the three rules in their order: the exhaustion mark,
// then the reading against minimumRemaining, then failOpen.
func TestPoolAvailability(t *testing.T) {
	cases := []struct {
		name     string
		failOpen bool
		setup    func(f *poolFixture) // provider "a" is the route under test; min 5, refresh 1m
		usable   bool
		marked   bool
	}{
		{name: "no reading, fail open", failOpen: true, setup: func(f *poolFixture) {}, usable: true},
		{name: "no reading, fail closed", setup: func(f *poolFixture) {}, usable: false},
		{name: "error-only reading is a missing reading", failOpen: false, setup: func(f *poolFixture) {
			f.readings.Set("a", engine.Reading{Error: "401", TakenAt: f.clock.Now()})
		}, usable: false},
		{name: "reading above minimum", setup: func(f *poolFixture) { f.read("a", 50, 0) }, usable: true},
		{name: "reading at minimum", setup: func(f *poolFixture) { f.read("a", 5, 0) }, usable: true},
		{name: "reading below minimum", failOpen: true, setup: func(f *poolFixture) { f.read("a", 4.99, 0) }, usable: false},
		{name: "stale reading still counts", setup: func(f *poolFixture) { f.read("a", 50, 10*time.Hour) }, usable: true},
		{name: "marked, fresh reading with allowance", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.read("a", 50, 0)
		}, usable: false, marked: true},
		{name: "marked, reading less than one refresh after the mark", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(59 * time.Second)
			f.read("a", 50, 0)
		}, usable: false, marked: true},
		{name: "marked, reading one refresh after the mark lifts it", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(time.Minute)
			f.read("a", 50, 0)
		}, usable: true},
		{name: "marked, later reading without allowance keeps it", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(2 * time.Minute)
			f.read("a", 0, 0)
		}, usable: false, marked: true},
		{name: "marked, later reading below minimum keeps it", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(2 * time.Minute)
			f.read("a", 3, 0)
		}, usable: false, marked: true},
		{name: "mark holds until the cooldown", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(time.Hour - time.Nanosecond)
		}, usable: false, marked: true},
		{name: "mark lifts at the cooldown", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(time.Hour)
		}, usable: true},
		{name: "mark lifted by cooldown, then the reading decides", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(time.Hour)
			f.read("a", 1, 0)
		}, usable: false},
		{name: "clock going backwards keeps the mark", failOpen: true, setup: func(f *poolFixture) {
			f.q.Mark("a", f.clock.Now())
			f.clock.Advance(-time.Hour)
		}, usable: false, marked: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := DefaultSettings()
			s.FailOpen = c.failOpen
			f := newPoolFixture(t, PoolsConfig{
				Pools:    []PoolSpec{{Name: "p", Routes: []engine.Route{rA, rB}}},
				Balances: []BalanceSpec{{Provider: "a", MinimumRemaining: 5, Refresh: time.Minute}},
			}, s)
			f.read("b", 1000, 0) // b is always usable: the draw answers a only if a is usable
			c.setup(f)
			rep, err := f.q.Report(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			ra := rep.Pools[0].Routes[0]
			if ra.Usable != c.usable || ra.Marked != c.marked {
				t.Errorf("report: usable %v marked %v (why %q); want usable %v marked %v", ra.Usable, ra.Marked, ra.Why, c.usable, c.marked)
			}
			// Neither route is scored (no capacity): the draw takes the first usable.
			got := f.pick(t, "p", 0)
			if want := map[bool]engine.Route{true: rA, false: rB}[c.usable]; got != want {
				t.Errorf("draw = %s, want %s", got, want)
			}
			if _, held := f.q.Marked("a"); held != c.marked {
				t.Errorf("Marked(a) = %v, want %v", held, c.marked)
			}
		})
	}
}

// TestPoolDraw checks the draw's layout with an exact random value: scored
// candidates by score, highest first, ties in declared order.
func TestPoolDraw(t *testing.T) {
	cfg := func(caps ...float64) PoolsConfig {
		c := PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: []engine.Route{rA, rB, rC, rD}}}}
		for i, p := range []string{"a", "b", "c", "d"} {
			if i < len(caps) && caps[i] > 0 {
				c.Balances = append(c.Balances, BalanceSpec{Provider: p, Capacity: pf(caps[i])})
			}
		}
		return c
	}
	type read map[string]float64 // provider -> remaining; absent: no reading
	cases := []struct {
		name     string
		cfg      PoolsConfig
		failOpen bool
		reads    read
		marks    []string
		r        float64
		want     engine.Route
	}{
		// Scores a 0.1, b 0.3, c 0.2, d 0.4 (capacity 10 each): layout d, b, c, a.
		{"r=0 lands on the highest score", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, nil, 0, rD},
		{"just below d's share", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, nil, 0.399, rD},
		{"just past d's share", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, nil, 0.401, rB},
		{"c's share", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, nil, 0.75, rC},
		{"a's share", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, nil, 0.95, rA},
		{"ties in declared order", cfg(10, 10, 10, 10), true, read{"a": 2, "b": 2, "c": 2, "d": 2}, nil, 0.3, rB},
		{"ties in declared order, first", cfg(10, 10, 10, 10), true, read{"a": 2, "b": 2, "c": 2, "d": 2}, nil, 0.1, rA},
		{"unscored is not drawable while a scored route is usable", cfg(0, 10), true, read{"a": 100, "b": 1}, nil, 0.99, rB},
		{"unscored failOpen route loses to a scored one", cfg(0, 0, 10), true, read{"c": 0.5}, nil, 0.99, rC},
		{"nothing scored: declared order", cfg(), true, read{"a": 1, "b": 100}, nil, 0.99, rA},
		{"nothing scored: first usable in declared order", cfg(), true, read{"b": 100, "c": 1}, []string{"a"}, 0.99, rB},
		{"nothing usable: the first route", cfg(10, 10, 10, 10), false, read{}, nil, 0.5, rA},
		{"nothing usable, all marked: the first route", cfg(10, 10, 10, 10), true, read{}, []string{"a", "b", "c", "d"}, 0.5, rA},
		{"marked scored route is out", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, []string{"d"}, 0, rB},
		{"marked scored route is out, many marks", cfg(10, 10, 10, 10), true, read{"a": 1, "b": 3, "c": 2, "d": 4}, []string{"x1", "x2", "d", "x3", "x4"}, 0, rB},
		{"all scores zero: highest in declared order", cfg(10, 10, 10, 10), true, read{"a": 0, "b": 0, "c": 0, "d": 0}, nil, 0.7, rA},
		{"negative score weighs nothing", cfg(10, 10), true, read{"a": -5, "b": 1}, nil, 0.99, rB},
		{"below minimum is out even when scored", PoolsConfig{Pools: []PoolSpec{{Name: "p", Routes: []engine.Route{rA, rB}}},
			Balances: []BalanceSpec{{Provider: "a", Capacity: pf(10), MinimumRemaining: 9.5}, {Provider: "b", Capacity: pf(10)}}}, true, read{"a": 9, "b": 0.1}, nil, 0, rB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := DefaultSettings()
			s.FailOpen = c.failOpen
			f := newPoolFixture(t, c.cfg, s)
			for p, v := range c.reads {
				f.read(p, v, 0)
			}
			for _, p := range c.marks {
				f.q.Mark(p, f.clock.Now())
			}
			if got := f.pick(t, "p", c.r); got != c.want {
				t.Errorf("draw with r=%v = %s, want %s", c.r, got, c.want)
			}
		})
	}
}

func TestPoolPickRouteUnknownPool(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	_, err := f.q.PickRoute(context.Background(), "nope")
	if !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("PickRoute(nope) = %v", err)
	}
}

func TestPoolPickRouteRefreshesOnlyItsProviders(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.pick(t, "advice", 0)
	if got := f.readings.refreshed; len(got) != 1 || strings.Join(got[0], ",") != "a,b" {
		t.Errorf("refreshed %v, want [[a b]]", got)
	}
}

// errScorer fails on every reading.
type errScorer struct{}

func (errScorer) Score(context.Context, engine.Reading, map[string]float64, map[string]float64, *float64) (float64, bool, error) {
	return 1, true, errors.New("trap")
}

// halfScorer scores remaining/2, a stand-in for an expr or wasm scorer.
type halfScorer struct{}

func (halfScorer) Score(_ context.Context, r engine.Reading, _, _ map[string]float64, _ *float64) (float64, bool, error) {
	return *r.Remaining / 2, true, nil
}

func TestPoolPluggableScorer(t *testing.T) {
	f := newPoolFixture(t, PoolsConfig{Pools: []PoolSpec{
		{Name: "half", Routes: []engine.Route{rA, rB}, Scorer: halfScorer{}},
		{Name: "broken", Routes: []engine.Route{rA, rB}, Scorer: errScorer{}},
	}}, DefaultSettings())
	f.read("a", 1, 0)
	f.read("b", 3, 0)
	if got := f.pick(t, "half", 0); got != rB { // b scores 1.5, a 0.5: b first
		t.Errorf("half scorer draw = %s, want %s", got, rB)
	}
	if got := f.pick(t, "half", 0.8); got != rA {
		t.Errorf("half scorer draw at 0.8 = %s, want %s", got, rA)
	}
	if got := f.pick(t, "broken", 0.99); got != rA { // errors leave routes unscored: declared order
		t.Errorf("failing scorer draw = %s, want %s", got, rA)
	}
	// The report says why a route is unscored: the scorer's error.
	rep, err := f.q.Report(context.Background(), false, "broken")
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Pools[0].Routes[0]; r.Score != nil || r.ScoreError != "trap" || !r.Usable {
		t.Errorf("report of a route the scorer failed on: %+v", r)
	}
}

// TestPoolDrawProportions is the chi-square test: 100,000 seeded draws land on
// each route in proportion to its score.
func TestPoolDrawProportions(t *testing.T) {
	remaining := []float64{1, 2, 3, 4, 10}
	cfg := PoolsConfig{Pools: []PoolSpec{{Name: "p"}}}
	for i, rem := range remaining {
		prov := string(rune('a' + i))
		cfg.Pools[0].Routes = append(cfg.Pools[0].Routes, engine.Route{Provider: prov, Model: "m"})
		cfg.Balances = append(cfg.Balances, BalanceSpec{Provider: prov, Capacity: pf(20)})
		_ = rem
	}
	pools, err := NewPools(cfg)
	if err != nil {
		t.Fatal(err)
	}
	readings := &StaticReadings{}
	for i, rem := range remaining {
		readings.Set(string(rune('a'+i)), engine.Reading{Remaining: pf(rem), TakenAt: pt0})
	}
	q := NewRouter(RouterOptions{Pools: pools, Settings: DefaultSettings(), Readings: readings,
		Clock: engine.NewFakeClock(pt0), Rand: rand.New(rand.NewPCG(2026, 4))})
	const n = 100_000
	counts, err := q.DrawCounts(context.Background(), "p", n)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, r := range remaining {
		total += r
	}
	chi2 := 0.0
	for i, r := range remaining {
		exp := n * r / total
		d := float64(counts[i]) - exp
		chi2 += d * d / exp
	}
	// 4 degrees of freedom: P(χ² > 18.467) = 0.001.
	if chi2 > 18.467 {
		t.Errorf("chi-square %.2f > 18.467 (counts %v for weights %v)", chi2, counts, remaining)
	}
	t.Logf("counts %v for weights %v: chi-square %.2f", counts, remaining, chi2)
}

func BenchmarkDraw16(b *testing.B) {
	cfg := PoolsConfig{Pools: []PoolSpec{{Name: "p", MidSessionSwitch: true}}}
	readings := &StaticReadings{}
	for i := range 16 {
		prov := "provider-" + string(rune('a'+i))
		cfg.Pools[0].Routes = append(cfg.Pools[0].Routes, engine.Route{Provider: prov, Model: "model"})
		cfg.Balances = append(cfg.Balances, BalanceSpec{Provider: prov, MinimumRemaining: 1, Refresh: time.Minute,
			Coefficients: map[string]float64{"monthly": 0.25}, Capacities: map[string]float64{"monthly": 40}})
		readings.Set(prov, engine.Reading{Remaining: pf(float64(10 + i)), TakenAt: pt0, Windows: []engine.WindowReading{
			{Name: "five-hour", Remaining: float64(i + 1), Capacity: pf(20)},
			{Name: "weekly", Remaining: float64(2 * (i + 1)), Capacity: pf(35)},
			{Name: "monthly", Remaining: 30},
		}})
	}
	pools, err := NewPools(cfg)
	if err != nil {
		b.Fatal(err)
	}
	q := NewRouter(RouterOptions{Pools: pools, Settings: DefaultSettings(), Readings: readings,
		Clock: engine.NewFakeClock(pt0), Rand: rand.New(rand.NewPCG(1, 2))})
	q.Mark("provider-c", pt0) // one marked provider, as in real traffic
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := q.PickRoute(ctx, "p"); err != nil {
			b.Fatal(err)
		}
	}
}

// A reading that withdrew a mark stays read: a later attempt that failed (a
// missing reading, which failOpen takes as no word) does not bring the mark
// back, though no draw ran in between — the report alone looked.
func TestPoolMarkWithdrawnStaysWithdrawn(t *testing.T) {
	s := DefaultSettings()
	s.FailOpen = true
	f := newPoolFixture(t, PoolsConfig{
		Pools:    []PoolSpec{{Name: "p", Routes: []engine.Route{rA, rB}}},
		Balances: []BalanceSpec{{Provider: "a", MinimumRemaining: 5, Refresh: time.Minute}},
	}, s)
	f.read("b", 1000, 0)
	f.q.Mark("a", f.clock.Now())
	f.clock.Advance(2 * time.Minute)
	f.read("a", 50, 0) // a refresh after the mark, with allowance: it withdraws it
	usableA := func() bool {
		rep, err := f.q.Report(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Pools[0].Routes[0].Usable && !rep.Pools[0].Routes[0].Marked
	}
	if !usableA() {
		t.Fatal("the reading did not withdraw the mark")
	}
	f.readings.Delete("a") // the next attempt failed: no reading
	if !usableA() {
		t.Error("a failed read brought the withdrawn mark back")
	}
	if _, held := f.q.Marked("a"); held {
		t.Error("Marked(a) holds after its withdrawal")
	}
}

// A pool none of whose routes can ever be scored draws its first usable route
// every time: the load warns about it, naming the pool.
func TestPoolUnscoredWarning(t *testing.T) {
	cases := []struct {
		name string
		bal  []BalanceSpec
		pool PoolSpec
		warn bool
	}{
		{"no balances", nil, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}}, true},
		{"balances without capacity", []BalanceSpec{{Provider: "a"}, {Provider: "b"}}, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}}, true},
		{"a capacity", []BalanceSpec{{Provider: "a"}, {Provider: "b", Capacity: pf(5)}}, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}}, false},
		{"capacities", []BalanceSpec{{Provider: "a", Capacities: map[string]float64{"weekly": 35}}}, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}}, false},
		{"windows reported", []BalanceSpec{{Provider: "a", Windows: true}}, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}}, false},
		{"a scorer of its own", nil, PoolSpec{Name: "p", Routes: []engine.Route{rA, rB}, Scorer: halfScorer{}}, false},
		{"one route", nil, PoolSpec{Name: "p", Routes: []engine.Route{rA}}, false},
	}
	for _, c := range cases {
		ps, err := NewPools(PoolsConfig{Pools: []PoolSpec{c.pool}, Balances: c.bal, Providers: []string{"a", "b"}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w := strings.Join(ps.Warnings(), "\n")
		if got := strings.Contains(w, "pools.p: none of its routes can be scored"); got != c.warn {
			t.Errorf("%s: warnings %q, want the unscored warning: %v", c.name, w, c.warn)
		}
	}
}
