package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Settings are the deployment's quota-response settings (config `quota:`).
// DefaultSettings gives the defaults.
type Settings struct {
	// DefaultEnabled is the switch of a session with no setting of its own.
	DefaultEnabled bool
	// LongTermDelay is the interval between long-term attempts; 1h when zero.
	LongTermDelay time.Duration
	// ExhaustedCooldown is how long a QUOTA failure keeps its provider marked; 1h
	// when zero.
	ExhaustedCooldown time.Duration
	// FailOpen makes a route with no reading usable.
	FailOpen bool
	// NativeRetryFirstProviders run the provider's own bounded retry schedule
	// before a QUOTA failure marks them: they report a plain rate limit as a spent
	// quota, and an hour's wait for a limit that clears in seconds is the failure to
	// avoid.
	NativeRetryFirstProviders []string
}

// Default intervals: a spent allowance rarely returns within minutes, and each
// long-term attempt is a billed request.
const (
	DefaultLongTermDelay     = time.Hour
	DefaultExhaustedCooldown = time.Hour
)

// DefaultSettings returns the defaults: enabled, 1h waits, 1h marks,
// fail-open, no native-first providers.
func DefaultSettings() Settings {
	return Settings{DefaultEnabled: true, LongTermDelay: DefaultLongTermDelay, ExhaustedCooldown: DefaultExhaustedCooldown, FailOpen: true}
}

// EventSink receives the quota transitions. Implementations must be safe for
// concurrent use and return quickly; Router calls it with no lock held.
type EventSink interface {
	RouterEvent(Event)
}

// EventFunc adapts a function to EventSink.
type EventFunc func(Event)

// Event implements EventSink.
func (f EventFunc) RouterEvent(e Event) { f(e) }

// EventKind names a transition.
type EventKind string

// The transitions of a session's quota response, for subscribers.
const (
	// EventEntered: the first QUOTA failure that found no route to move to took the
	// session into the long-term wait. Once per entry.
	EventEntered EventKind = "entered"
	// EventFailover: a failed request is retried at once on another route.
	EventFailover EventKind = "failover"
	// EventLeft: an entry ended, Reason "recovered" (a request succeeded) or
	// "disabled" (the switch went off).
	EventLeft EventKind = "left"
)

// Reasons an entry leaves.
const (
	LeftRecovered = "recovered"
	LeftDisabled  = "disabled"
)

// Event is one transition. Which fields are set depends on Kind, as the field
// comments say.
type Event struct {
	Kind    EventKind `json:"kind"`
	Session string    `json:"session"`
	// Failure that opened the entry or triggered the move (entered, failover).
	Failure *engine.Failure `json:"failure,omitempty"`
	// Location of the failing request (entered, left).
	Provider string `json:"provider,omitempty"`
	Turn     string `json:"turn,omitempty"`
	Step     int    `json:"step,omitempty"`
	// failover
	From *engine.Route `json:"from,omitempty"`
	To   *engine.Route `json:"to,omitempty"`
	Pool string        `json:"pool,omitempty"`
	// At is when the transition happened (failover's "at", entered's enteredAt,
	// left's leftAt).
	At            time.Time     `json:"at"`
	EnteredAt     time.Time     `json:"enteredAt,omitzero"`
	NextAttemptAt time.Time     `json:"nextAttemptAt,omitzero"`
	LeftAt        time.Time     `json:"leftAt,omitzero"`
	Duration      time.Duration `json:"durationNs,omitempty"` // left: LeftAt - EnteredAt
	Attempts      int           `json:"attempts,omitempty"`
	Pending       bool          `json:"pending,omitempty"`
	Reason        string        `json:"reason,omitempty"` // left
}

// QuotaFailure is one request that failed with a spent allowance (class QUOTA).
type QuotaFailure struct {
	Session string       // "" for a request outside any session: no entry, no events
	Route   engine.Route // the route the request ran on
	Turn    string
	Step    int
	Failure *engine.Failure // carried into events; may be nil
	// NativeSpent says the provider's own bounded retry schedule has run out for
	// this step, or that there is none to run (no policy, an unbounded one, or a
	// hint past its cap). It matters only for NativeRetryFirstProviders.
	NativeSpent bool
	// Pool is the pool the request named ("": it named a route); it governs the
	// failover unless the session's own pool setting says otherwise.
	Pool string
	// Usable, when set, says which routes the caller can send the request to:
	// a failover goes only there, so no move is recorded that the caller would
	// refuse (another protocol, a client key meant for another provider).
	Usable func(engine.Route) bool
}

// Action is what to do about a QUOTA failure.
type Action string

// The answers of Router.OnQuota.
const (
	// ActionPass: not ours — the session's switch is off; handle the failure as if
	// there were no pools (normally: give up).
	ActionPass Action = "pass"
	// ActionNativeRetry: the provider is in NativeRetryFirstProviders and its own
	// bounded schedule has not run: run it, and come back with NativeSpent.
	ActionNativeRetry Action = "native-retry"
	// ActionFailover: retry at once on Route, another route of Pool.
	ActionFailover Action = "failover"
	// ActionWait: wait Wait (until Until), then retry on the same Route. Use
	// Router.Wait, which also ends early when the switch goes off.
	ActionWait Action = "wait"
)

// Decision is Router.OnQuota's answer.
type Decision struct {
	Action Action
	Route  engine.Route // where to retry: the new route (failover) or the same one
	Pool   string       // the governing pool, "" when none
	// Wait and Until: the long-term wait (ActionWait only).
	Wait     time.Duration
	Until    time.Time
	Attempts int // long-term attempts scheduled in this entry, this one included
	Reason   string

	entry *quotaEntry // the entry a ActionWait belongs to; nil outside a session
	// wake, of an ActionWait, is closed when its provider's mark is lifted by
	// hand, or its balance source shows a top-up, after the wait was armed
	// (see Router.wakes).
	wake <-chan struct{}
}

// RouteChoice is Router.RouteFor's answer: where a session's request goes.
type RouteChoice struct {
	Route engine.Route
	Pool  string // the governing pool, "" when none
	// Drawn: the session started here — its route was drawn from Pool.
	Drawn bool
	// Moved: the session's route was replaced because its provider is marked.
	Moved bool
}

// WaitState is a session's long-term wait, while it has an entry.
type WaitState struct {
	Pending       bool      `json:"pending"`  // a wait is armed right now
	Attempts      int       `json:"attempts"` // long-term attempts scheduled in this entry
	EnteredAt     time.Time `json:"enteredAt"`
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"` // while pending
	Provider      string    `json:"provider"`
	Turn          string    `json:"turn,omitempty"`
	Step          int       `json:"step,omitempty"`
}

// ErrDisabled is what Wait returns when the session's switch went off during
// the wait: the entry ended with reason "disabled".
var ErrDisabled = errors.New("quota retry switched off for the session")

// RouterOptions wires a Router.
type RouterOptions struct {
	Pools *Pools // nil: no pools (every session waits in place)
	// Settings: start from DefaultSettings(); zero durations take the
	// defaults, but the zero booleans mean what they say (disabled, fail closed).
	Settings Settings
	Readings Readings     // nil: no readings (failOpen decides)
	Sessions *Sessions    // nil: settings in memory
	Clock    engine.Clock // nil: SystemClock
	// Rand draws routes; nil uses math/rand/v2's global source. It is called under
	// a lock, so an unsynchronised *rand.Rand is fine.
	Rand   engine.Rand
	Events EventSink // nil: events are dropped
	// OnMark, when set, hears every exhaustion mark this router sets (not the
	// ones it adopts with AdoptMark): the hook that shares marks between
	// instances. It runs outside the router's lock.
	OnMark func(provider string, at time.Time)
	// OnUnmark, when set, hears every mark lifted by hand (Unmark), with when:
	// the hook that shares unmarks between instances. It runs outside the lock.
	OnUnmark func(provider string, at time.Time)
	// Routes, when set, shares each session's route between instances: a
	// session that starts or fails over on one instance goes on where it went
	// there, whichever instance its next call reaches. nil: routes stay in this
	// process.
	Routes RouteStore
}

// SessionRoute is a session's route as a RouteStore shares it: the route the
// client asked for, and the one its calls go to (drawn, or failed over to).
type SessionRoute struct {
	Asked     engine.Route `json:"asked"`
	AskedPool string       `json:"askedPool,omitempty"` // the pool asked, when the client named one
	Current   engine.Route `json:"current"`
}

// RouteStore shares session routes between the instances of a gate. Both
// methods are called outside the router's lock, on the request's path, so
// they must answer within a short deadline; a store that fails answers
// ok=false and the router draws as if alone.
type RouteStore interface {
	// LoadRoute returns the route another instance recorded for the session.
	LoadRoute(session string) (SessionRoute, bool)
	// SaveRoute records the session's route, and tells the other instances
	// (they call AdoptRoute); the zero SessionRoute forgets it (Forget).
	SaveRoute(session string, r SessionRoute)
}

// Router is the runtime of the pools: exhaustion marks, the draw, each
// session's current route, and the long-term waits. Route state lives in memory
// only (short-lived facts, cheap to learn again and misleading once stale); the
// per-session settings live in its Sessions. Safe for concurrent use.
//
// The server calls, per request: Route (or RouteFor) before sending it;
// OnSuccess after a success; for a QUOTA verdict either OnQuota directly or,
// through the Planner, RouteQuota (it implements retry.QuotaRouter); a long-term wait is then slept out
// with Wait (for a Planner's action, Wait(ctx, action.Quota.(Decision))).
// PickRoute draws a route for a session that does not exist yet; SetSwitch,
// SetPool, Fork and Facts serve the session settings.
//
// Reload swaps pools and settings; marks, session routes and entries survive it.
type Router struct {
	cfg      atomic.Pointer[quotaConfig]
	readings Readings
	sessions *Sessions
	clock    engine.Clock
	events   EventSink
	onMark   func(provider string, at time.Time) // nil: marks stay in this process
	onUnmark func(provider string, at time.Time) // nil: unmarks stay in this process
	shared   RouteStore                          // nil: session routes stay in this process

	randMu sync.Mutex // guards rand
	rand   engine.Rand

	mu sync.Mutex // guards the maps below
	// marks: provider -> when its last QUOTA failure marked it. A mark is lifted
	// (deleted) once observed expired or withdrawn by a later reading.
	marks map[string]time.Time
	// routes: session -> the route it is on; a session with none has not started.
	routes map[string]*sessionRoute
	// entries: session -> its open long-term entry.
	entries map[string]*quotaEntry
	// wakes: per provider, the channel the long-term waits armed on it since
	// its mark was last lifted by hand (or its source last showed a top-up)
	// hold; lifting it closes the channel (the waits end, their calls try
	// again now) and the next wait gets a new one. Keyed by configured
	// providers: bounded.
	wakes map[string]chan struct{}
	// adds counts insertions into routes and entries since the last sweep.
	adds int
}

// quotaConfig is the reloadable part of a Router; immutable once published.
type quotaConfig struct {
	pools       *Pools
	settings    Settings
	nativeFirst map[string]bool
}

type sessionRoute struct {
	asked     engine.Route // the route the client last asked for; zero when it asked a pool
	askedPool string       // the pool the client last asked for; "" when it asked a route
	current   engine.Route // the route its requests go to
	lastUsed  time.Time    // for the idle sweep
}

type quotaEntry struct {
	session       string
	enteredAt     time.Time
	lastArmed     time.Time // when a wait was last armed (the idle sweep)
	nextAttemptAt time.Time
	attempts      int
	pending       bool
	provider      string
	turn          string
	step          int
	done          chan struct{} // closed when the entry ends
	reason        string        // why it ended; set before done is closed
}

// NewRouter builds the runtime. It has no side effects.
func NewRouter(o RouterOptions) *Router {
	q := &Router{
		readings: o.Readings, sessions: o.Sessions, clock: o.Clock, rand: o.Rand, events: o.Events, onMark: o.OnMark, onUnmark: o.OnUnmark, shared: o.Routes,
		marks: map[string]time.Time{}, routes: map[string]*sessionRoute{}, entries: map[string]*quotaEntry{}, wakes: map[string]chan struct{}{},
	}
	if q.readings == nil {
		q.readings = noReadings{}
	}
	if q.sessions == nil {
		q.sessions = NewSessions(nil)
	}
	if q.clock == nil {
		q.clock = engine.SystemClock{}
	}
	if q.rand == nil {
		q.rand = globalRand{}
	}
	q.Reload(o.Pools, o.Settings)
	return q
}

type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// Reload swaps in new pools and settings. Marks, session routes and entries stay.
func (q *Router) Reload(pools *Pools, s Settings) {
	if s.LongTermDelay <= 0 {
		s.LongTermDelay = DefaultLongTermDelay
	}
	if s.ExhaustedCooldown <= 0 {
		s.ExhaustedCooldown = DefaultExhaustedCooldown
	}
	s.NativeRetryFirstProviders = slices.Clone(s.NativeRetryFirstProviders)
	c := &quotaConfig{pools: pools, settings: s, nativeFirst: map[string]bool{}}
	for _, p := range s.NativeRetryFirstProviders {
		c.nativeFirst[p] = true
	}
	q.cfg.Store(c)
}

// Pools returns the current pools (nil when none are configured).
func (q *Router) Pools() *Pools { return q.cfg.Load().pools }

// Settings returns the current settings, defaults filled in.
func (q *Router) Settings() Settings {
	s := q.cfg.Load().settings
	s.NativeRetryFirstProviders = slices.Clone(s.NativeRetryFirstProviders)
	return s
}

// Sessions returns the per-session settings.
func (q *Router) Sessions() *Sessions { return q.sessions }

func (q *Router) emit(evs []Event) {
	if q.events == nil {
		return
	}
	for _, e := range evs {
		q.events.RouterEvent(e)
	}
}

func (q *Router) float64() float64 {
	q.randMu.Lock()
	f := q.rand.Float64()
	q.randMu.Unlock()
	return f
}

// enabled reports the session's effective switch.
func enabled(rec SessionRecord, s Settings) bool {
	switch rec.Switch {
	case SettingOn:
		return true
	case SettingOff:
		return false
	}
	return s.DefaultEnabled
}

// governing returns the pool that governs a session with record rec on route r:
// the one it states (nil when it states "off" or a pool that no longer exists),
// else the pool the request named (pool), else the single pool that holds r.
func governing(c *quotaConfig, rec SessionRecord, pool string, r engine.Route) *Pool {
	switch rec.Pool {
	case "":
		if pool != "" {
			return c.pools.Pool(pool)
		}
		return c.pools.Holding(r)
	case SettingOff:
		return nil
	}
	return c.pools.Pool(rec.Pool)
}

// sessionPool is governing for a session known only by name (a QUOTA failure, a
// report) on route on: the pool named (pool); else, when on is the session's
// route, the pool its last request named or, once moved, the one holding the
// route it asked; else the one holding on.
func (q *Router) sessionPool(c *quotaConfig, rec SessionRecord, session, pool string, on engine.Route) *Pool {
	var asked engine.Route
	if session != "" && pool == "" {
		q.mu.Lock()
		if st := q.routes[session]; st != nil && st.current == on {
			pool, asked = st.askedPool, st.asked
		}
		q.mu.Unlock()
	}
	p := governing(c, rec, pool, on)
	if p == nil && rec.Pool == "" && pool == "" && asked != (engine.Route{}) && asked != on {
		p = governing(c, rec, "", asked)
	}
	return p
}

// PickRoute draws the route a session that does not exist yet should start on: it
// refreshes the pool's due sources (waiting for exactly those), then draws among
// the usable routes in proportion to score; a pool with nothing usable answers its
// first route. ErrNoPool when no pool by that name exists.
func (q *Router) PickRoute(ctx context.Context, pool string) (engine.Route, error) {
	c := q.cfg.Load()
	p := c.pools.Pool(pool)
	if p == nil {
		return engine.Route{}, fmt.Errorf("%w: %q (pools: %s)", ErrNoPool, pool, strings.Join(c.pools.Names(), ", "))
	}
	q.readings.Refresh(ctx, p.providers)
	r, _ := q.choose(ctx, c, p, q.clock.Now(), nil, false, nil)
	return r, nil
}

// Ask is what a request names: a route (provider/model) or a pool.
type Ask struct {
	// Route is the route the client named; zero when it named a pool.
	Route engine.Route
	// Pool is the pool the client named, "" when it named a route. It governs
	// the session unless the session's own pool setting says otherwise; a pool
	// that shares a route with another still governs what it was asked for.
	Pool string
	// Chosen: the client named Route itself, so a session that has not started
	// starts on it instead of a draw (see RouteForChosen).
	Chosen bool
	// Usable, when set, says whether the caller can send this request to route
	// to: from is the route the session is on when it is moved, the zero Route
	// for a draw. The router draws and moves only among the routes it accepts,
	// so it never records a route the caller would refuse (an endpoint of the
	// other protocol, a client key meant for another provider).
	Usable func(from, to engine.Route) bool
}

// usable reports whether the caller accepts to (from zero: a draw).
func (a *Ask) usable(from, to engine.Route) bool { return a.Usable == nil || a.Usable(from, to) }

// filter is a's predicate for choose, for a session on from (zero: a draw).
func (a *Ask) filter(from engine.Route) func(engine.Route) bool {
	if a.Usable == nil {
		return nil
	}
	return func(to engine.Route) bool { return a.Usable(from, to) }
}

// standIn is where a pool ask goes when no pool governs the session (its
// switch or pool setting is off): the pool's first route the caller can use,
// else its first. A route ask goes where it asked.
func standIn(c *quotaConfig, a *Ask) engine.Route {
	if a.Pool == "" {
		return a.Route
	}
	p := c.pools.Pool(a.Pool)
	if p == nil {
		return engine.Route{}
	}
	for _, r := range p.routes {
		if a.usable(engine.Route{}, r) {
			return r
		}
	}
	return p.routes[0]
}

// RouteFor answers where a session's request for route asked goes: Route with
// Ask{Route: asked}.
func (q *Router) RouteFor(ctx context.Context, session string, asked engine.Route) (RouteChoice, error) {
	return q.Route(ctx, session, Ask{Route: asked})
}

// Route answers where a session's request for a goes.
//
//   - A session whose switch is off, or that no pool governs, goes where it asked
//     (a pool ask: the pool's first route the caller can use).
//   - A session that has not started (no route in memory: new, restarted, or just
//     put in a pool) starts on a route drawn from its pool, after the pool's due
//     sources have answered — whatever midSessionSwitch says. A chosen route
//     (Ask.Chosen) starts it there instead. A pool ask without a session is drawn
//     on every call.
//   - A started session stays on its route. It is moved only when its provider
//     carries an exhaustion mark, its pool allows mid-session switches, its route
//     is one of the pool's, and another route has not been marked; the move waits
//     for no reading. A reading below the threshold never moves it.
//   - A route the client asks for that differs from the one it asked for last is
//     the user's choice: the session goes there, and is moved later only under the
//     rule above. A pool asked after something else keeps the session's route when
//     the pool holds it.
//   - A session asking a pool whose route the pool no longer holds (a reload took
//     it out) or the caller cannot use is drawn again; one that asked a route and
//     was moved to such a route goes back to the route it asked.
//
// err is non-nil only when the session's settings could not be loaded; the choice
// then follows the defaults and is still valid.
func (q *Router) Route(ctx context.Context, session string, a Ask) (RouteChoice, error) {
	c := q.cfg.Load()
	var rec SessionRecord
	var err error
	if session != "" {
		rec, err = q.sessions.Get(session)
	}
	if session == "" && a.Pool != "" { // no session: every call is a draw (PickRoute)
		if p := c.pools.Pool(a.Pool); p != nil {
			q.readings.Refresh(ctx, p.providers)
			r, _ := q.choose(ctx, c, p, q.clock.Now(), nil, false, a.filter(engine.Route{}))
			return RouteChoice{Route: r, Pool: p.name, Drawn: true}, err
		}
	}
	if !enabled(rec, c.settings) {
		return RouteChoice{Route: standIn(c, &a)}, err
	}
	now := q.clock.Now()

	if session == "" { // no session: never drawn, only moved off a marked provider
		p := governing(c, rec, a.Pool, a.Route)
		if p == nil {
			return RouteChoice{Route: standIn(c, &a)}, err
		}
		ch := RouteChoice{Route: a.Route, Pool: p.name}
		if p.midSessionSwitch && q.marked(c, a.Route.Provider, now) {
			if to, ok := q.choose(ctx, c, p, now, &a.Route, true, a.filter(a.Route)); ok {
				ch.Route, ch.Moved = to, true
			}
		}
		return ch, err
	}

	q.mu.Lock()
	st := q.routes[session]
	if st == nil && a.Chosen { // the client named this route: the session starts on it
		st = &sessionRoute{asked: a.Route, current: a.Route, lastUsed: now}
		q.addRoute(session, st, now)
	}
	on := a.Route
	if st != nil {
		if st.asked != a.Route || st.askedPool != a.Pool {
			st.asked, st.askedPool = a.Route, a.Pool
			if a.Pool == "" { // the user picked a route: it stands
				st.current = a.Route
			} // a pool keeps the session's route if it holds it (checked below)
		}
		on = st.current
		st.lastUsed = now
	}
	q.mu.Unlock()

	p := governing(c, rec, a.Pool, on)
	if p == nil && st != nil && a.Pool == "" && on != a.Route {
		p = governing(c, rec, "", a.Route) // moved onto a route pools share: the pool of the route it asked
	}
	if st != nil && a.Pool == "" && on != a.Route && (p == nil || !p.Holds(on) || !a.usable(a.Route, on)) {
		// Moved to a route its pool no longer holds, or the caller cannot use:
		// back to the route it asked.
		on = q.setCurrent(st, on, a.Route)
		p = governing(c, rec, "", on)
	}
	if p == nil {
		if a.Pool != "" {
			return RouteChoice{Route: standIn(c, &a)}, err
		}
		return RouteChoice{Route: on}, err
	}
	if st == nil { // the session starts here: where another instance has it, else drawn from its pool
		if r, ok := q.loadShared(session, a); ok {
			st, on = q.adoptStarted(session, a, r, now)
			if p = governing(c, rec, a.Pool, on); p == nil {
				return RouteChoice{Route: on}, err
			}
		}
	}
	redraw := st != nil && a.Pool != "" && (!p.Holds(on) || !a.usable(engine.Route{}, on))
	if st == nil || redraw {
		q.readings.Refresh(ctx, p.providers)
		now = q.clock.Now()
		r, _ := q.choose(ctx, c, p, now, nil, false, a.filter(engine.Route{}))
		if !a.usable(engine.Route{}, r) { // nothing the caller can use: nothing to record
			return RouteChoice{Route: r, Pool: p.name}, err
		}
		q.mu.Lock()
		drawn := true
		switch cur := q.routes[session]; {
		case cur == nil:
			q.addRoute(session, &sessionRoute{asked: a.Route, askedPool: a.Pool, current: r, lastUsed: now}, now)
		case cur == st && cur.current == on: // redrawn
			cur.current = r
		default: // a concurrent request started or moved it
			r, drawn = cur.current, false
		}
		q.mu.Unlock()
		if drawn {
			q.saveShared(session, a, r)
		}
		return RouteChoice{Route: r, Pool: p.name, Drawn: true}, err
	}
	ch := RouteChoice{Route: on, Pool: p.name}
	if p.midSessionSwitch && p.Holds(on) && q.marked(c, on.Provider, now) {
		if to, ok := q.choose(ctx, c, p, now, &on, true, a.filter(on)); ok {
			if ch.Route = q.setCurrent(st, on, to); ch.Route != on {
				ch.Moved = true
				q.saveShared(session, a, ch.Route)
			}
		}
	}
	return ch, err
}

// setCurrent moves the session from route from to route to, unless a
// concurrent request moved it meanwhile; it returns the session's route.
func (q *Router) setCurrent(st *sessionRoute, from, to engine.Route) engine.Route {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st.current == from {
		st.current = to
	}
	return st.current
}

// loadShared reads the session's route another instance recorded; only one
// for what the client asks now counts (a new ask is the user's pick).
func (q *Router) loadShared(session string, a Ask) (engine.Route, bool) {
	if q.shared == nil {
		return engine.Route{}, false
	}
	r, ok := q.shared.LoadRoute(session)
	if !ok || r.Asked != a.Route || r.AskedPool != a.Pool {
		return engine.Route{}, false
	}
	return r.Current, true
}

// adoptStarted records a session another instance started, unless a
// concurrent request here started it first; it returns the session's route.
func (q *Router) adoptStarted(session string, a Ask, current engine.Route, now time.Time) (*sessionRoute, engine.Route) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.routes[session]; st != nil {
		return st, st.current
	}
	st := &sessionRoute{asked: a.Route, askedPool: a.Pool, current: current, lastUsed: now}
	q.addRoute(session, st, now)
	return st, current
}

// saveShared records a session's new route for the other instances.
func (q *Router) saveShared(session string, a Ask, current engine.Route) {
	if q.shared != nil && session != "" {
		q.shared.SaveRoute(session, SessionRoute{Asked: a.Route, AskedPool: a.Pool, Current: current})
	}
}

// AdoptRoute takes a session's route another instance recorded (a RouteStore's
// notification). A session this router does not hold is left to load it when
// its first call arrives; one whose client asks another route here keeps it.
// The zero SessionRoute forgets the session (another instance's Forget).
func (q *Router) AdoptRoute(session string, r SessionRoute) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r == (SessionRoute{}) {
		delete(q.routes, session) // forgotten: the next call starts it again
	} else if st := q.routes[session]; st != nil && st.asked == r.Asked && st.askedPool == r.AskedPool {
		st.current = r.Current
	}
}

// addRoute records a session's route. q.mu must be held.
func (q *Router) addRoute(session string, st *sessionRoute, now time.Time) {
	q.routes[session] = st
	q.noteAdd(now)
}

// sweepEvery is how many insertions into routes and entries trigger a sweep.
const sweepEvery = 4096

// maxTracked bounds the session routes and the entries each. Session names are
// the client's (a header, a hashed key, the decision API's field), so a
// client inventing one per request must not grow them for the day the idle
// sweep waits: past the bound, the least recently used go until an eighth of
// it is free.
const maxTracked = 1 << 16

// noteAdd counts an insertion and, every sweepEvery of them or past
// maxTracked, sweeps (see Sweep). q.mu must be held.
func (q *Router) noteAdd(now time.Time) {
	if q.adds++; q.adds < sweepEvery && len(q.routes) <= maxTracked && len(q.entries) <= maxTracked {
		return
	}
	q.sweepLocked(now)
}

// Sweep drops what has been idle for a day (or two long-term delays, when
// longer): session routes with no entry, and entries with no wait armed (a
// cancelled turn whose session never came back) or whose wait is over (a wait
// the decision API told a harness of, which nobody here sleeps on). A dropped
// session simply starts afresh. Past maxTracked it drops the least recently
// used too. The server's janitor calls it on its clock; insertions call it
// too, so a burst of new sessions cannot outgrow one sweep interval.
func (q *Router) Sweep(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sweepLocked(now)
}

// Tracked is how many sessions the router holds a route or an entry for.
func (q *Router) Tracked() (routes, entries int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.routes), len(q.entries)
}

func (q *Router) sweepLocked(now time.Time) {
	q.adds = 0
	idle := q.idleAfter()
	for id, e := range q.entries {
		if e.pending && !now.Before(e.nextAttemptAt) {
			// Its wait is over: a proxy's Wait has woken (and disarms it
			// itself); a harness told to wait by the decision API has no Wait.
			e.pending, e.nextAttemptAt = false, time.Time{}
		}
		if !e.pending && now.Sub(e.lastArmed) > idle {
			q.dropEntryLocked(id, e)
		}
	}
	for id, r := range q.routes {
		if now.Sub(r.lastUsed) > idle && q.entries[id] == nil {
			delete(q.routes, id)
		}
	}
	if len(q.entries) > maxTracked {
		// Unarmed ones first, then the longest armed: a dropped wait's sleeper
		// wakes and retries, as when its session recovers.
		ids := slices.Collect(maps.Keys(q.entries))
		slices.SortFunc(ids, func(a, b string) int {
			ea, eb := q.entries[a], q.entries[b]
			if ea.pending != eb.pending {
				return cmp.Compare(b2i(ea.pending), b2i(eb.pending))
			}
			return ea.lastArmed.Compare(eb.lastArmed)
		})
		for _, id := range ids[:len(ids)-maxTracked*7/8] {
			q.dropEntryLocked(id, q.entries[id])
		}
	}
	if len(q.routes) > maxTracked {
		// A session with an entry keeps its route, as the idle sweep keeps it.
		ids := slices.DeleteFunc(slices.Collect(maps.Keys(q.routes)), func(id string) bool { return q.entries[id] != nil })
		slices.SortFunc(ids, func(a, b string) int { return q.routes[a].lastUsed.Compare(q.routes[b].lastUsed) })
		for _, id := range ids[:max(0, min(len(ids), len(q.routes)-maxTracked*7/8))] {
			delete(q.routes, id)
		}
	}
}

// dropEntryLocked forgets an entry without announcing it: its session is idle
// or one of too many. A Wait on it returns nil (retry now).
func (q *Router) dropEntryLocked(id string, e *quotaEntry) {
	delete(q.entries, id)
	close(e.done)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// idleAfter is how long a session may be idle before its state is dropped: a
// day, or two long-term delays when longer.
func (q *Router) idleAfter() time.Duration {
	idle := 24 * time.Hour
	if d := 2 * q.cfg.Load().settings.LongTermDelay; d > idle {
		idle = d
	}
	return idle
}

// SessionIdle is how long a session may be idle before the router (and the
// server's janitor, for what else it keeps per session) forgets it.
func (q *Router) SessionIdle() time.Duration { return q.idleAfter() }

// SetSwitch sets the session's switch (on, off, default). When the effective
// switch is now off, an open entry ends at once: a pending wait returns
// ErrDisabled and "left" is announced with reason "disabled". An error
// wrapping ErrSessionNotSaved means the setting applies but is not durable.
func (q *Router) SetSwitch(session, value string) (SessionRecord, error) {
	rec, err := q.sessions.SetSwitch(session, value)
	if err != nil && !errors.Is(err, ErrSessionNotSaved) {
		return rec, err
	}
	if !enabled(rec, q.cfg.Load().settings) {
		q.end(session, LeftDisabled)
	}
	return rec, err
}

// SetPool puts the session under a pool's care (a pool name), opts it out of
// pools ("off"), or lets its route decide ("default"). Naming a pool makes the
// session's next request start in it, drawn from its usable routes; the name
// must exist (ErrNoPool).
func (q *Router) SetPool(session, value string) (SessionRecord, error) {
	v, err := ParsePoolSetting(value)
	if err != nil {
		return SessionRecord{}, err
	}
	c := q.cfg.Load()
	if v != SettingOff && v != SettingDefault && c.pools.Pool(v) == nil {
		return SessionRecord{}, fmt.Errorf("%w: %q (pools: %s)", ErrNoPool, v, strings.Join(c.pools.Names(), ", "))
	}
	rec, err := q.sessions.SetPool(session, v)
	if err != nil && !errors.Is(err, ErrSessionNotSaved) {
		return rec, err
	}
	if v != SettingOff && v != SettingDefault {
		q.Forget(session)
	}
	return rec, err
}

// Fork records that child was forked or delegated from parent: the child takes a
// snapshot of its nearest ancestor's explicit settings.
func (q *Router) Fork(child, parent string) (SessionRecord, error) {
	return q.sessions.Fork(child, parent)
}

// PoolOf returns the pool governing the session right now ("" when none): the
// one it states, or the one holding the route it is on (or asked, before it has
// started).
func (q *Router) PoolOf(session string, asked engine.Route) string {
	rec, _ := q.sessions.Get(session)
	on := asked
	if r, ok := q.CurrentRoute(session); ok {
		on = r
	}
	if p := q.sessionPool(q.cfg.Load(), rec, session, "", on); p != nil {
		return p.name
	}
	return ""
}

// SessionFacts is what a client shows of a session's settings.
type SessionFacts struct {
	Enabled        bool     `json:"enabled"`        // the effective switch
	DefaultEnabled bool     `json:"defaultEnabled"` // the deployment's default
	Source         string   `json:"source"`         // default | session | inherited
	Pool           *string  `json:"pool"`           // the pool governing the session, or null
	PoolSource     string   `json:"poolSource"`     // default | session | inherited | off
	Pools          []string `json:"pools"`          // every configured pool, in order
	// Route is the route the session is on, when it has started.
	Route *engine.Route `json:"route,omitempty"`
}

// Facts returns the session's settings as a client shows them.
func (q *Router) Facts(session string) (SessionFacts, error) {
	c := q.cfg.Load()
	rec, err := q.sessions.Get(session)
	f := SessionFacts{Enabled: enabled(rec, c.settings), DefaultEnabled: c.settings.DefaultEnabled,
		Source: SourceDefault, PoolSource: SourceDefault, Pools: c.pools.Names()}
	if f.Pools == nil {
		f.Pools = []string{}
	}
	if rec.Switch != "" {
		f.Source = rec.SwitchSource
	}
	switch {
	case rec.Pool == SettingOff:
		f.PoolSource = SourceOff
	case rec.Pool != "":
		f.PoolSource = rec.PoolSource
	}
	var on engine.Route
	if r, ok := q.CurrentRoute(session); ok {
		on = r
		f.Route = &r
	}
	if p := q.sessionPool(c, rec, session, "", on); p != nil {
		name := p.name
		f.Pool = &name
	}
	return f, err
}

var _ EventSink = EventFunc(nil)
