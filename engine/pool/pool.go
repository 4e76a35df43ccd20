package pool

import (
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// ReservedPoolNames are the names a pool may not take: the session commands and
// menus answer them themselves, so a pool called "off"
// could never be selected.
var ReservedPoolNames = []string{"status", "off", "none", "disable", "disabled", "default", "reset", "auto", "error"}

// Errors the pools report. Each is wrapped with the config path and the bad value.
var (
	// ErrPoolName: a pool name is not [a-z0-9-]+ or is reserved.
	ErrPoolName = errors.New("invalid pool name")
	// ErrUnknownProvider: a route names a provider the config does not define.
	ErrUnknownProvider = errors.New("unknown provider")
	// ErrNoPool: no pool by that name is configured (a config error at the caller).
	ErrNoPool = errors.New("no such pool")
	// ErrPoolSpec: a pool or balance entry is malformed (no routes, a duplicate, …).
	ErrPoolSpec = errors.New("invalid pool")
)

// PoolSpec is one configured pool: a named, ordered list of interchangeable routes.
type PoolSpec struct {
	Name string
	// MidSessionSwitch lets gatectl move a session that has started on one of the
	// pool's routes to another when its provider reports the allowance spent. false
	// means the routes are interchangeable to start on, never under a live session.
	MidSessionSwitch bool
	Routes           []engine.Route
	// Scorer turns a reading into a draw weight; nil means DefaultScorer.
	Scorer engine.Scorer
}

// BalanceSpec is what the pools need to know of one provider's balance source: how
// its readings are weighed and when they count. One per provider.
type BalanceSpec struct {
	Provider string
	// MinimumRemaining: a reading whose remaining is below it (or at 0 or less:
	// spent) makes the provider's routes unusable for a draw (never for a session
	// already on one). Zero by default.
	MinimumRemaining float64
	// Refresh is how long a reading answers a draw; a reading taken at least Refresh
	// after an exhaustion mark, showing allowance, lifts the mark. 60s when zero.
	Refresh time.Duration
	// Coefficients weigh the reading's windows by name; a window the map does not
	// name weighs 1, a coefficient of 0 drops the window from the score.
	Coefficients map[string]float64
	// Capacities give a window's full amount when the reading carries none.
	Capacities map[string]float64
	// Capacity is the full amount of the whole reading, used when no window scores.
	Capacity *float64
	// Windows says the source may report windows, which may carry their own
	// capacity (a script, a module, an http source with a windows expression).
	// NewPools warns about a pool none of whose routes can be scored.
	Windows bool
}

// Defaults of a balance source (config balances[*].refresh and .timeout). They are
// defined here once; config and balance take them from here.
const (
	// DefaultBalanceRefresh is how long a reading answers when the config gives no refresh.
	DefaultBalanceRefresh = 60 * time.Second
	// DefaultBalanceTimeout bounds one read of a source when the config gives no timeout.
	DefaultBalanceTimeout = 5 * time.Second
)

// PoolsConfig is everything NewPools needs.
type PoolsConfig struct {
	// Pools in configured order; the order is the one reports and menus list.
	Pools    []PoolSpec
	Balances []BalanceSpec
	// Providers are the provider names the config defines. A route naming any other
	// is refused: a request on it would only fail later, far from the config; a
	// balance naming one only costs
	// its readings, so it is a warning. nil skips the check (tests, the simulator).
	Providers []string
}

// Pool is one validated pool. It is immutable.
type Pool struct {
	name             string
	midSessionSwitch bool
	routes           []engine.Route
	scorer           engine.Scorer
	providers        []string // distinct providers of routes, in route order
	// bal[i] is the balance rules of routes[i]'s provider, set by NewPools.
	bal []*balance
	// memo[i] remembers the score of the last reading of routes[i]'s provider, so
	// a draw recomputes a score only when a new reading arrives. It is a cache, not
	// state: the pool stays immutable in every way a caller can observe.
	memo []atomic.Pointer[scoreMemo]
}

// scoreMemo is one remembered score, valid for the reading it was computed from.
type scoreMemo struct {
	takenAt   time.Time
	remaining float64 // NaN when the reading had none
	windows   *engine.WindowReading
	nWindows  int
	score     float64
	scored    bool
}

// matches reports whether m was computed from reading r (the same reading: same
// time, same remaining, the same windows slice).
func (m *scoreMemo) matches(r *engine.Reading) bool {
	if !m.takenAt.Equal(r.TakenAt) || len(r.Windows) != m.nWindows {
		return false
	}
	if m.nWindows > 0 && &r.Windows[0] != m.windows {
		return false
	}
	if r.Remaining == nil {
		return math.IsNaN(m.remaining)
	}
	return *r.Remaining == m.remaining
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// MidSessionSwitch reports whether the pool lets a started session move.
func (p *Pool) MidSessionSwitch() bool { return p.midSessionSwitch }

// Routes returns a copy of the pool's routes in declared order.
func (p *Pool) Routes() []engine.Route { return slices.Clone(p.routes) }

// Providers returns the distinct providers of the pool's routes, in route order.
func (p *Pool) Providers() []string { return slices.Clone(p.providers) }

// Holds reports whether r is one of the pool's routes (see RouteMatches).
func (p *Pool) Holds(r engine.Route) bool {
	for _, pr := range p.routes {
		if RouteMatches(pr, r) {
			return true
		}
	}
	return false
}

// RouteMatches reports whether a session on route asked is on the pool route pr:
// same provider and model, and the same reasoning effort unless asked names none.
func RouteMatches(pr, asked engine.Route) bool {
	return pr.Provider == asked.Provider && pr.Model == asked.Model &&
		(asked.ReasoningEffort == "" || asked.ReasoningEffort == pr.ReasoningEffort)
}

// balance is a validated BalanceSpec.
type balance struct {
	minimum      float64
	refresh      time.Duration
	coefficients map[string]float64
	capacities   map[string]float64
	capacity     *float64
	windows      bool // the source may report windows with a capacity
}

// scorable reports whether the default scoring may weigh a reading of b: it
// declares a capacity, or its source may report windows carrying one.
func (b *balance) scorable() bool {
	return b.capacity != nil || len(b.capacities) > 0 || b.windows
}

// noBalance answers for a provider with no balance source: no minimum, the default
// refresh, nothing to weigh.
var noBalance = &balance{refresh: DefaultBalanceRefresh}

// Pools is a validated, immutable set of pools and the balance rules of their
// providers. Build it with NewPools; the runtime state (marks, readings, sessions)
// lives in Router. Safe for concurrent use.
type Pools struct {
	pools    []*Pool
	byName   map[string]*Pool
	balances map[string]*balance
	warnings []string
}

// NewPools validates cfg and builds the pools. It refuses, each error naming its
// config path: a pool name that is not [a-z0-9-]+ or is reserved, a duplicate pool,
// a pool with no routes, a duplicate or incomplete route, a route whose provider the
// config does not define (the message names it, where it is named, and which
// providers exist), and a
// malformed balance entry. All problems are returned at once (errors.Join).
func NewPools(cfg PoolsConfig) (*Pools, error) {
	ps := &Pools{byName: map[string]*Pool{}, balances: map[string]*balance{}}
	var errs []error
	for _, spec := range cfg.Pools {
		path := "pools." + spec.Name
		if err := CheckPoolName(spec.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if _, dup := ps.byName[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: %w: defined twice", path, ErrPoolSpec))
			continue
		}
		if len(spec.Routes) == 0 {
			errs = append(errs, fmt.Errorf("%s.routes: %w: a pool needs at least one route", path, ErrPoolSpec))
			continue
		}
		p := &Pool{name: spec.Name, midSessionSwitch: spec.MidSessionSwitch, routes: slices.Clone(spec.Routes), scorer: spec.Scorer}
		if p.scorer == nil {
			p.scorer = DefaultScorer{}
		}
		bad := false
		for i, r := range p.routes {
			rp := fmt.Sprintf("%s.routes[%d]", path, i)
			if r.Provider == "" || r.Model == "" {
				errs = append(errs, fmt.Errorf("%s: %w: a route needs a provider and a model (got %q)", rp, ErrPoolSpec, r.String()))
				bad = true
				continue
			}
			for j := range i {
				if p.routes[j] == r {
					errs = append(errs, fmt.Errorf("%s: %w: route %s is already %s.routes[%d]", rp, ErrPoolSpec, r, path, j))
					bad = true
				}
			}
			if !slices.Contains(p.providers, r.Provider) {
				p.providers = append(p.providers, r.Provider)
			}
		}
		if bad {
			continue
		}
		ps.pools = append(ps.pools, p)
		ps.byName[p.name] = p
	}
	for i, b := range cfg.Balances {
		path := fmt.Sprintf("balances[%d]", i)
		if b.Provider == "" {
			errs = append(errs, fmt.Errorf("%s.provider: %w: missing", path, ErrPoolSpec))
			continue
		}
		if _, dup := ps.balances[b.Provider]; dup {
			errs = append(errs, fmt.Errorf("%s: %w: provider %q already has a balance source", path, ErrPoolSpec, b.Provider))
			continue
		}
		nb := &balance{minimum: b.MinimumRemaining, refresh: b.Refresh, coefficients: b.Coefficients, capacities: b.Capacities, windows: b.Windows}
		if nb.refresh <= 0 {
			nb.refresh = DefaultBalanceRefresh
		}
		if math.IsNaN(b.MinimumRemaining) || math.IsInf(b.MinimumRemaining, 0) {
			errs = append(errs, fmt.Errorf("%s.minimumRemaining: %w: must be finite (got %v)", path, ErrPoolSpec, b.MinimumRemaining))
		}
		for _, k := range sortedKeys(b.Coefficients) {
			if v := b.Coefficients[k]; !(v >= 0) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("%s.coefficients.%s: %w: must be a finite number >= 0 (got %v)", path, k, ErrPoolSpec, v))
			}
		}
		for _, k := range sortedKeys(b.Capacities) {
			if v := b.Capacities[k]; !(v > 0) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("%s.capacities.%s: %w: must be a finite number > 0 (got %v)", path, k, ErrPoolSpec, v))
			}
		}
		if b.Capacity != nil {
			if v := *b.Capacity; !(v > 0) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("%s.capacity: %w: must be a finite number > 0 (got %v)", path, ErrPoolSpec, v))
			}
			c := *b.Capacity
			nb.capacity = &c
		}
		nb.coefficients = cloneMap(b.Coefficients)
		nb.capacities = cloneMap(b.Capacities)
		ps.balances[b.Provider] = nb
	}
	for _, p := range ps.pools {
		p.bal = make([]*balance, len(p.routes))
		for i, r := range p.routes {
			p.bal[i] = ps.balanceOf(r.Provider)
		}
		p.memo = make([]atomic.Pointer[scoreMemo], len(p.routes))
	}
	if cfg.Providers != nil {
		pe, warn := providerCheck(cfg)
		errs = append(errs, pe...)
		ps.warnings = warn
	}
	for _, p := range ps.pools {
		if w := unscoredWarning(p); w != "" {
			ps.warnings = append(ps.warnings, w)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ps, nil
}

// providerCheck compares every provider a pool route or a balance names with the
// defined ones. A route naming an undefined provider is an error; a balance naming
// one is a warning (it only loses a reading). Each message names the provider, every
// place that names it, and the providers that exist: the fix is in the message.
func providerCheck(cfg PoolsConfig) (errs []error, warnings []string) {
	defined := map[string]bool{}
	for _, p := range cfg.Providers {
		defined[p] = true
	}
	type use struct {
		where   []string
		inRoute bool
	}
	uses := map[string]*use{}
	var order []string
	note := func(provider, where string, route bool) {
		if defined[provider] || provider == "" {
			return
		}
		u := uses[provider]
		if u == nil {
			u = &use{}
			uses[provider] = u
			order = append(order, provider)
		}
		u.where = append(u.where, where)
		u.inRoute = u.inRoute || route
	}
	for _, p := range cfg.Pools {
		for i, r := range p.Routes {
			note(r.Provider, fmt.Sprintf("pools.%s.routes[%d]", p.Name, i), true)
		}
	}
	for i, b := range cfg.Balances {
		note(b.Provider, fmt.Sprintf("balances[%d]", i), false)
	}
	have := slices.Clone(cfg.Providers)
	sort.Strings(have)
	list := strings.Join(have, ", ")
	if list == "" {
		list = "(none)"
	}
	for _, name := range order {
		u := uses[name]
		if u.inRoute {
			errs = append(errs, fmt.Errorf("%w: no provider %q is defined (named by %s); a request on one of its routes would fail. Defined providers: %s",
				ErrUnknownProvider, name, strings.Join(u.where, ", "), list))
		} else {
			warnings = append(warnings, fmt.Sprintf("no provider %q is defined (named by %s); its balance source only costs readings. Defined providers: %s",
				name, strings.Join(u.where, ", "), list))
		}
	}
	return errs, warnings
}

// unscoredWarning says when none of a default-scored pool's routes can ever
// be scored: every draw then takes the first usable route in declared order,
// which is rarely what a pool of several routes is for.
func unscoredWarning(p *Pool) string {
	if _, native := p.scorer.(DefaultScorer); !native || len(p.routes) < 2 {
		return ""
	}
	for _, b := range p.bal {
		if b.scorable() {
			return ""
		}
	}
	return fmt.Sprintf("pools.%s: none of its routes can be scored (no balance of theirs declares capacity or capacities, or reports windows): every draw takes the first usable route, %s; give the balances a capacity to spread sessions",
		p.name, p.routes[0])
}

// CheckPoolName reports whether name may name a pool: [a-z0-9-]+ and not reserved.
func CheckPoolName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty (want [a-z0-9-]+)", ErrPoolName)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w %q: want lowercase letters, digits and hyphens ([a-z0-9-]+)", ErrPoolName, name)
		}
	}
	if slices.Contains(ReservedPoolNames, name) {
		return fmt.Errorf("%w %q: reserved (reserved names: %s)", ErrPoolName, name, strings.Join(ReservedPoolNames, ", "))
	}
	return nil
}

// Pool returns the pool by that name, or nil.
func (ps *Pools) Pool(name string) *Pool {
	if ps == nil {
		return nil
	}
	return ps.byName[name]
}

// All returns the pools in configured order.
func (ps *Pools) All() []*Pool {
	if ps == nil {
		return nil
	}
	return slices.Clone(ps.pools)
}

// Names returns the pool names in configured order.
func (ps *Pools) Names() []string {
	if ps == nil {
		return nil
	}
	names := make([]string, len(ps.pools))
	for i, p := range ps.pools {
		names[i] = p.name
	}
	return names
}

// Warnings returns the provider check's non-fatal findings (balances naming a
// provider the config does not define), to be logged once.
func (ps *Pools) Warnings() []string {
	if ps == nil {
		return nil
	}
	return slices.Clone(ps.warnings)
}

// Holding returns the single pool that holds route r, or nil when none does or when
// several do: a route two pools share names neither, so a session is never moved
// between pools on a guess.
func (ps *Pools) Holding(r engine.Route) *Pool {
	if ps == nil {
		return nil
	}
	var found *Pool
	for _, p := range ps.pools {
		if p.Holds(r) {
			if found != nil {
				return nil
			}
			found = p
		}
	}
	return found
}

// balanceOf returns the provider's balance rules (noBalance when it has none).
func (ps *Pools) balanceOf(provider string) *balance {
	if ps != nil {
		if b := ps.balances[provider]; b != nil {
			return b
		}
	}
	return noBalance
}

func cloneMap(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	c := make(map[string]float64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
