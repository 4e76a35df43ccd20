// Package server is gatectl's HTTP face: the OpenAI/Anthropic-compatible proxy
// that applies every decision itself, the decision API for harnesses that make
// their own calls, the event stream, and /metrics, /healthz, /readyz.
//
// A Server owns what must outlive a configuration reload — the ledger (windows,
// cooldowns, learned quotas), the retry planner's budgets, the pools' runtime
// (marks, each session's route), the session settings in the state file — and
// reads the current policy (providers, classifier chain, pools, balance sources)
// from the snapshot manager on every request.
package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/gatelog"
	"github.com/gatectl/gatectl/internal/sameorigin"
	"github.com/gatectl/gatectl/report"
	"github.com/gatectl/gatectl/settings"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/state"
	"github.com/gatectl/gatectl/store/redisstore"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure a Server.
type Options struct {
	Manager *snapshot.Manager // required
	Clock   engine.Clock      // nil: the system clock
	Logger  hclog.Logger      // nil: discard
	Rand    engine.Rand       // jitter, route draws, spread Retry-Afters; safe for concurrent use; nil: seeded from the time
	// Transport carries upstream requests; nil: a pooled transport of its own.
	Transport http.RoundTripper
	// StateDir overrides the config's stateDir (the bbolt file lives there).
	StateDir string
	// ShutdownGrace is how long running requests and streams may finish after a
	// shutdown begins (default 30s).
	ShutdownGrace time.Duration
	// Plugins reports the plugins' counters for /metrics (the wasm snapshot hook
	// the manager builds with); nil: no plugin metrics.
	Plugins PluginStats
}

// Server is the gatectl daemon. Build it with New, run it with Serve, then Close.
type Server struct {
	snap     *snapshot.Manager
	clock    engine.Clock
	logger   hclog.Logger
	proxyLog hclog.Logger // logger.Named("proxy"), built once in New
	apiLog   hclog.Logger // logger.Named("api"), built once in New
	ledger   *gate.Ledger
	rnd      engine.Rand // Options.Rand: jitter, route draws, spread Retry-Afters
	planner  *retry.Planner
	quota    *pool.Router
	sessions *pool.Sessions
	seen     *seenSessions // when each session last called, for GET /gate/v1/sessions
	swept    time.Time     // the janitor's last pass (janitor.go)
	// stateDirFlag: the state directory came from the command line, not the config.
	stateDirFlag bool
	store        *state.Store
	shared       *redisstore.Store // nil: the gate's state lives in this process only
	settings     *settings.Book    // runtime settings over the config file's
	report       *report.Book      // what the gate did since start, for GET /gate/v1/report
	bus          *Bus
	metrics      *Metrics
	// accessLog is logger.Named("access"): one line per proxied call when
	// log.access is on (access.go)
	accessLog hclog.Logger
	// unclassified keeps the failures that fell through to a catch-all rule.
	unclassified *unclassifiedLog
	client       *http.Client
	grace        time.Duration
	started      time.Time
	ready        atomic.Bool
	drain        drainer  // ends the holds when the shutdown begins (drain.go)
	active       handlers // the requests being answered
	handler      http.Handler
	api          *api
	auth         apiAuth      // the decision API's and the console's token; read once in New
	conns        atomic.Int64 // client connections open now (Serve's limitListener)
	// bodies caps the body bytes held at once (server.maxBufferedBytes).
	bodies *bodyBudget
	// redact holds the redactor of the current snapshot's secrets (redact.go).
	redact redactorCache
}

// New builds the server from the manager's current snapshot. Close it when done:
// it holds the state file.
func New(o Options) (*Server, error) {
	if o.Manager == nil {
		return nil, errors.New("server: no snapshot manager")
	}
	if o.Clock == nil {
		o.Clock = engine.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Rand == nil {
		o.Rand = &lockedRand{r: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9a7e))}
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	snap := o.Manager.Current()
	s := &Server{snap: o.Manager, clock: o.Clock, logger: o.Logger, proxyLog: o.Logger.Named("proxy"), apiLog: o.Logger.Named("api"),
		accessLog: o.Logger.Named("access"), bus: NewBusCap(snap.Config.API.MaxSubscribers), grace: o.ShutdownGrace, started: o.Clock.Now(),
		drain: newDrainer(), rnd: o.Rand}

	dir := o.StateDir
	s.stateDirFlag = dir != "" // (the config's stateDir is then not the one in use)
	if dir == "" {
		dir = snap.Config.Resolve(snap.Config.StateDir)
	}
	store, err := state.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err) // (the error names the state file)
	}
	s.store = store
	store.SetClock(o.Clock.Now)
	if err := s.openSettings(o.Manager); err != nil {
		store.Close()
		return nil, fmt.Errorf("server: settings: %w", err)
	}
	snap = o.Manager.Current()
	s.report = report.New(o.Clock.Now())

	gateLog := gatelog.Hook(o.Logger.Named("gate"))
	poolsLog, retryLog := o.Logger.Named("pools"), o.Logger.Named("retry")
	gateOpts := []gate.Option{gate.WithRand(o.Rand), gate.WithEventHook(func(e gate.Event) {
		gateLog(e)
		s.report.Observe(report.FromGate(e))
		s.publishGate(e)
	})}
	if ro := snap.Config.Store.Redis; ro != nil {
		if s.shared, err = redisstore.Open(*ro, o.Logger.Named("store")); err != nil {
			store.Close()
			return nil, fmt.Errorf("server: store.redis: %w", err)
		}
		gateOpts = append(gateOpts, gate.WithSharedWindow(s.shared), gate.WithLearnedStore(s.shared))
	}
	s.ledger, err = gate.NewLedger(snap.Gate, o.Clock, gateOpts...)
	if err != nil {
		s.closeShared()
		store.Close()
		return nil, fmt.Errorf("server: gate: %w", err)
	}
	var sessionStore pool.SessionStore = store
	if s.shared != nil { // a session's settings hold on every instance
		sessionStore = s.shared.Sessions(store)
	}
	s.sessions = pool.NewSessions(sessionStore)
	s.seen = newSeenSessions()
	var routes pool.RouteStore
	if s.shared != nil { // a session goes on one route, whichever instance its calls reach
		routes = s.shared.Routes()
	}
	s.quota = pool.NewRouter(pool.RouterOptions{
		Pools: snap.Pools, Settings: snap.Quota, Readings: liveReadings{s.snap}, Sessions: s.sessions,
		Clock: o.Clock, Rand: o.Rand, OnMark: s.shareMark(), OnUnmark: s.shareUnmark(), Routes: routes,
		Events: pool.EventFunc(func(e pool.Event) {
			poolsLog.Info("pool event", "kind", e.Kind, "session", e.Session)
			s.metrics.PoolEvent(string(e.Kind))
			e.Failure = redactFailure(e.Failure) // the stream and the console are not for credentials
			s.bus.Publish(Event{Type: string(e.Kind), At: s.clock.Now(), Data: e})
		}),
	})
	var budgets retry.BudgetStore = store
	if s.shared != nil { // a session's calls on several instances spend one budget
		budgets = s.shared.Budgets(store)
	}
	s.planner, err = retry.NewPlanner(snap.Retry, retry.PlannerOptions{
		Sink: s.ledger, Store: budgets, Rand: o.Rand, Quota: s.quota,
		StoreError: func(op string, _ retry.BudgetKey, err error) {
			retryLog.Warn("retry budget store failed; continuing in memory", "op", op, "error", err)
		},
	})
	if err != nil {
		s.closeShared()
		store.Close()
		return nil, fmt.Errorf("server: retry: %w", err)
	}
	s.metrics = NewMetrics(s.ledger, o.Clock, s.readingStatus, o.Plugins)
	s.bodies = newBodyBudget(int64(snap.Config.Server.MaxBufferedBytes))
	s.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gatectl_buffered_bytes",
		Help: "Bytes of request and response bodies held in memory now; at most server.maxBufferedBytes.",
	}, func() float64 { return float64(s.bodies.inUse()) }))
	s.metrics.RetryStats(func() retry.Stats { return s.planner.LifetimeStats() })
	s.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gatectl_server_connections",
		Help: "Client connections open now; at most server.maxConnections (new ones wait in the accept queue past it).",
	}, func() float64 { return float64(s.conns.Load()) }))
	s.registerStoreMetrics()
	s.unclassified = newUnclassifiedLog(o.Clock, unclassifiedKeep)
	o.Manager.OnVerdict(s.unclassified.observe)
	o.Manager.OnClassifierError(newClassifierErrors(o.Clock, o.Logger.Named("classify"), s.metrics, func(msg string) string {
		msg = string(s.redact.get(s.snap.Current().Config).bytes([]byte(msg))) // gatectl's own keys, by value
		msg, _ = redactBody(msg, unclassifiedExcerpt)                          // and whatever looks like one
		return msg
	}).observe)

	o.Manager.OnSwap(s.applySnapshot)
	o.Manager.OnError(func(err error) {
		s.metrics.Reload(false)
		s.bus.Publish(Event{Type: "reload", At: s.clock.Now(), Data: map[string]any{"ok": false, "error": err.Error()}})
	})

	transport := o.Transport
	if transport == nil {
		transport = newTransport(snap.Config.Server.MaxConnections)
	}
	// No client timeout: streams run long; contexts bound them.
	s.client = &http.Client{Transport: transport, CheckRedirect: sameorigin.CheckRedirect}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, map[string]any{"ok": true}) })
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	s.registerProxy(mux)
	s.registerAPI(mux)
	if s.shared != nil { // after the API: a notice may name one of its tickets
		s.shared.Notify(redisstore.Handlers{Released: s.ledger.SharedReleased, Learned: s.ledger.AdoptLearned,
			Settled: s.settledElsewhere, Marked: s.quota.AdoptMark, Unmarked: s.quota.AdoptUnmark,
			SessionChanged: s.sessions.Forget, ProviderCooldown: s.ledger.AdoptProviderCooldown, Route: s.quota.AdoptRoute,
			Recovered: s.ledger.WriteBackAlone})
	}
	s.registerUI(mux)
	s.auth = newAPIAuth(os.Getenv(snap.Config.API.TokenEnv))
	if s.auth.set {
		var keyed []string
		for _, name := range snap.Config.ProviderNames() {
			if snap.Config.Providers[name].OwnKey() {
				keyed = append(keyed, name)
			}
		}
		if len(keyed) > 0 { // said at start: a client that sent a dummy key before now gets 401
			s.logger.Warn("with the API token set, proxied calls to providers sent with gatectl's own key need the token: clients send it as their API key (or in X-Gate-Token)",
				"providers", strings.Join(keyed, ", "))
		}
	}
	s.handler = refuseCrossSite(s.auth.wrap(mux))
	s.ready.Store(true)
	return s, nil
}

// startOnlyChanged names the settings a reload changed that the daemon reads
// at start only: the listener, the state file, the connection limits, the
// API's token and event cap, the shared store, the log format. An operator who
// adds an API token to a running daemon is told it is not guarding anything yet.
func startOnlyChanged(o, n *config.Config, stateDirFlag bool) []string {
	var out []string
	if o.Listen != n.Listen {
		out = append(out, "listen")
	}
	if o.Resolve(o.StateDir) != n.Resolve(n.StateDir) && !stateDirFlag {
		out = append(out, "stateDir")
	}
	if !reflect.DeepEqual(o.Server, n.Server) {
		out = append(out, "server")
	}
	if o.API != n.API {
		out = append(out, "api")
	}
	if !reflect.DeepEqual(o.Store, n.Store) {
		out = append(out, "store")
	}
	if o.Log.Format != n.Log.Format {
		out = append(out, "log.format")
	}
	return out
}

// Handler returns the server's HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Ledger, Planner and Quota expose the long-lived engine objects (for tests and the CLI).
func (s *Server) Ledger() *gate.Ledger         { return s.ledger }
func (s *Server) Planner() *retry.Planner      { return s.planner }
func (s *Server) Quota() *pool.Router          { return s.quota }
func (s *Server) Bus() *Bus                    { return s.bus }
func (s *Server) Snapshot() *snapshot.Snapshot { return s.snap.Current() }

// openSettings reads the runtime settings from the state file, drops those the
// file changed while the server was stopped, and rebuilds the manager's snapshot
// with the rest over the file.
func (s *Server) openSettings(m *snapshot.Manager) error {
	book, err := settings.Open(s.store, s.clock.Now, s.logger)
	if err != nil {
		return err
	}
	s.settings = book
	m.SetOverlay(book.Apply)
	book.Reconcile(m.Current().File)
	if book.Empty() {
		return nil
	}
	err = m.Rebuild(context.Background())
	if err == nil || errors.Is(err, snapshot.ErrClosed) {
		return err
	}
	// The gate must never become the outage: start on the file's settings, and
	// drop the overrides that could not be built (here and in the state file).
	for _, sec := range config.RuntimeSections {
		ovs := book.List(sec)
		if len(ovs) == 0 {
			continue
		}
		keys := make([]string, len(ovs))
		for i, o := range ovs {
			keys[i] = strings.Join(o.Key, ".")
		}
		s.logger.Warn("runtime settings dropped at start: the snapshot could not be built with them; the config file's values apply",
			"section", sec, "keys", keys, "error", err)
		if rerr := book.Reset(sec, func() error { return nil }); rerr != nil {
			s.logger.Warn("removing the dropped runtime settings from the state file failed", "section", sec, "error", rerr)
		}
	}
	return nil
}

// applySnapshot reconfigures the long-lived objects after a reload or a change
// of the runtime settings. Everything learned survives: the ledger keeps its
// windows and quotas, the pools their marks.
func (s *Server) applySnapshot(old, next *snapshot.Snapshot) {
	if err := s.ledger.Reconfigure(s.clock.Now(), next.Gate); err != nil {
		s.logger.Error("reload: the gate refused the new settings; keeping the old ones", "error", err)
	}
	if err := s.planner.SetPolicy(next.Retry); err != nil {
		s.logger.Error("reload: the retry planner refused the new policy; keeping the old one", "error", err)
	}
	s.quota.Reload(next.Pools, next.Quota)
	// (said before a new log level may hide it)
	restart := startOnlyChanged(old.Config, next.Config, s.stateDirFlag)
	if len(restart) > 0 {
		s.logger.Warn("reload: these settings are read at start; restart to apply them", "changed", strings.Join(restart, ", "))
	}
	if o, n := old.Config.Log, next.Config.Log; o != n {
		if o.Level != n.Level {
			s.logger.Info("reload: log level changes", "from", o.Level, "to", n.Level)
			// hclog's named loggers share their root's level: this moves them all
			s.logger.SetLevel(hclog.LevelFromString(n.Level))
		}
	}
	if old.File != next.File { // the file changed (not only the runtime settings)
		s.metrics.Reload(true)
		data := map[string]any{"ok": true, "version": next.Version}
		if len(restart) > 0 {
			data["restartToApply"] = restart
		}
		s.bus.Publish(Event{Type: "reload", At: s.clock.Now(), Data: data})
		dropped := map[string]bool{}
		for _, d := range s.settings.Reconcile(next.File) {
			dropped[d.Section] = true
		}
		for sec := range dropped {
			s.publishSettings(sec, s.settings.Overrides(sec))
		}
	}
	s.logger.Info("effective settings", settings.Summary(next.Config)...)
}

// Serve answers on ln until ctx ends, then shuts down gracefully: it stops
// accepting, answers the requests held in the gate 503 at once, lets calls
// upstream and streams finish within the grace period, and cancels the rest,
// each answered and its reservation released (drain.go).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	base, cancelAll := context.WithCancelCause(context.Background())
	defer cancelAll(nil)
	cfg := s.snap.Current().Config
	if err := checkExposure(ln.Addr(), s.auth, cfg.API.TokenEnv); err != nil {
		return err
	}
	lim := cfg.Server // read once: a reload does not change them (see conns.go)
	hs := newHTTPServer(s.active.track(hostGuard(s.handler, s.auth)), lim)
	hs.BaseContext = func(net.Listener) context.Context { return base }
	hs.ErrorLog = s.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	ln = newLimitListener(ln, lim.MaxConnections, &s.conns)
	hs.RegisterOnShutdown(s.bus.CloseAll) // event streams never finish on their own
	go s.runJanitor(base)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.logger.Info("serving", "addr", ln.Addr().String(), "maxConnections", lim.MaxConnections,
		"headerTimeout", lim.HeaderTimeout, "bodyTimeout", lim.BodyTimeout, "idleTimeout", lim.IdleTimeout)
	s.logger.Info("effective settings", settings.Summary(s.snap.Current().Config)...)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.ready.Store(false)
	s.logger.Info("shutting down: held requests are answered 503, calls upstream may finish", "grace", s.grace)
	s.drain.stop() // the holds end at once (drain.go)
	sctx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// What did not finish in time is cancelled: each handler answers its
		// client (503, or an error event) and releases its reservation
		// before the connections close.
		cancelAll(errShutdown)
		if !s.active.waitFor(handlerWait) {
			s.logger.Warn("shutting down: some requests did not end after their cancellation", "waited", handlerWait)
		}
		err = hs.Close()
	}
	s.active.waitFor(handlerWait) // the store closes after them (Close)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// Close releases the state file.
func (s *Server) Close() error {
	s.closeShared()
	return s.store.Close()
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "shutting down"})
		return
	}
	reloads, failures, lastErr := s.snap.Stats()
	if lastErr != "" && s.auth.set && !s.auth.allows(r) {
		// Probes carry no token, and a reload's error quotes the file (a
		// value, a path) to whoever asks: with a token, only to its holders.
		lastErr = "the last reload failed: the log says why (or send the API token)"
	}
	body := map[string]any{"ready": true, "configVersion": s.snap.Current().Version,
		"reloads": reloads, "reloadFailures": failures, "lastReloadError": lastErr}
	status := http.StatusOK
	if st := s.storeStatus(); st != nil {
		body["store"] = st
		if s.ledger.StoreAvailable() != nil { // failClosed and Redis down: this instance refuses calls
			body["ready"], body["reason"] = false, "shared store unavailable"
			status = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, status, body)
}

func (s *Server) publishGate(e gate.Event) {
	data := map[string]any{
		"provider": e.Provider, "model": e.Model, "session": e.Session, "reason": e.Reason,
		"waitMs": e.Wait.Milliseconds(), "windowTokens": e.WindowTokens, "tokenBudget": e.TokenBudget,
		"reservation": e.Reservation, "quota": int64(e.Quota), "trigger": int64(e.Trigger), "cooldownMs": e.CooldownLeft.Milliseconds(),
	}
	if e.Kind == gate.EventLearn {
		data["step"], data["from"], data["to"] = e.Step, int64(e.From), int64(e.To)
		if e.Step == "decides" {
			data["to"] = math.Round(e.To*100) / 100 // a slope, not a token count
		}
	}
	if e.Kind == gate.EventRateLimited {
		data["retryAfterMs"], data["fallback"] = e.RetryAfter.Milliseconds(), e.FromFallback
	}
	s.bus.Publish(Event{Type: string(e.Kind), At: e.At, Data: data})
}

func (s *Server) readingStatus() []ReadingStatus {
	set := s.snap.Current().Balances
	if set == nil {
		return nil
	}
	now := s.clock.Now()
	var out []ReadingStatus
	for p, st := range set.Status() {
		rs := ReadingStatus{Provider: p}
		if st.LastGood != nil {
			rs.OK, rs.Remaining, rs.Age = true, st.LastGood.Remaining, now.Sub(st.LastGood.TakenAt)
		}
		out = append(out, rs)
	}
	return out
}

// liveReadings hands the pools the current snapshot's balance sources, so a
// reload that changes them takes effect without rebuilding the pools' runtime.
type liveReadings struct{ m *snapshot.Manager }

func (l liveReadings) Refresh(ctx context.Context, providers []string) {
	if set := l.m.Current().Balances; set != nil {
		set.Refresh(ctx, providers)
	}
}

func (l liveReadings) Last(provider string) (engine.Reading, bool) {
	if set := l.m.Current().Balances; set != nil {
		return set.Last(provider)
	}
	return engine.Reading{}, false
}

var _ pool.Readings = liveReadings{}

// lockedRand makes a *rand.Rand safe to share.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// newTransport is the upstream transport. It keeps up to maxIdle idle connections
// per upstream host, maxIdle being server.maxConnections: every call in flight
// holds a client connection, so no more upstream connections than that are ever
// busy at once, and one a call just finished with is kept for the next instead
// of being closed and opened again (at 256 per host, a flood of 500 sessions
// opened thousands).
func newTransport(maxIdle int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // bounded per host; the hosts are the configured providers
	t.MaxIdleConnsPerHost = maxIdle
	t.IdleConnTimeout = 90 * time.Second
	t.ForceAttemptHTTP2 = true
	// No ResponseHeaderTimeout: each attempt carries its own deadlines
	// (upstream.firstByteTimeout, responseTimeout, streamIdleTimeout; deadline.go).
	return t
}
