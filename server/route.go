package server

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/snapshot"
)

// apiKind is the wire protocol of an endpoint and of a provider.
type apiKind string

const (
	kindOpenAI    apiKind = "openai"
	kindAnthropic apiKind = "anthropic"
)

// resolved is where a proxied request goes first, and what its key may reach.
type resolved struct {
	route engine.Route
	// asked is the route the client named (for a pool: the route the request
	// starts on); pool is the pool's name when the client named one.
	asked engine.Route
	pool  string
	// keyProvider is the provider the client's own key is meant for: the one it
	// named (provider/model, or a bare model's), or for a pool the provider of the
	// route the request started on. See upstream_keys.go.
	keyProvider string
	// who: the request's standing with the API token (clientKeys; provider
	// unset: keyProvider is it).
	who clientKeys
}

// routeError is a 400 about the request's model: the message lists what exists.
type routeError struct{ msg string }

func (e *routeError) Error() string { return e.msg }

// modelTarget is what a model name names: a pool, or a route (with the alias
// that led there, if any).
type modelTarget struct {
	pool  *pool.Pool
	route engine.Route
	alias *config.ModelAlias
}

// lookupModel says what model names, trying in order (the first that applies
// decides):
//
//  1. a pool name;
//  2. provider/model with a configured provider;
//  3. an exact alias of models: (to a pool or a route);
//  4. a bare model exactly one configured route serves;
//  5. the most specific models: pattern that matches (gpt-* -> openai/*).
//
// Anything else is a routeError listing what exists. It draws nothing and
// reads no session: resolveModel does that with what it returns.
func (s *Server) lookupModel(snap *snapshot.Snapshot, model string) (modelTarget, error) {
	cfg := snap.Config
	if model == "" {
		return modelTarget{}, &routeError{"the request has no model; " + s.modelChoices(snap)}
	}
	if p := snap.Pools.Pool(model); p != nil {
		return modelTarget{pool: p}, nil
	}
	if i := strings.IndexByte(model, '/'); i > 0 {
		if _, ok := cfg.Providers[model[:i]]; ok && i < len(model)-1 {
			return modelTarget{route: engine.Route{Provider: model[:i], Model: model[i+1:]}}, nil
		}
	}
	viaAlias := func(a config.ModelAlias) (modelTarget, error) {
		if a.Pool != "" {
			p := snap.Pools.Pool(a.Pool)
			if p == nil { // validated at load, against the same config
				return modelTarget{}, &routeError{fmt.Sprintf("model %q is an alias of pool %q, which is not configured", model, a.Pool)}
			}
			return modelTarget{pool: p, alias: &a}, nil
		}
		r := a.RouteFor(model)
		return modelTarget{route: engine.Route{Provider: r.Provider, Model: r.Model}, alias: &a}, nil
	}
	if a, ok := cfg.Models.LookupExact(model); ok {
		return viaAlias(a)
	}
	var found []engine.Route
	for _, r := range configuredRoutes(snap) {
		if r.Model == model {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
	case 1:
		return modelTarget{route: found[0]}, nil
	default:
		names := make([]string, len(found))
		for i, r := range found {
			names[i] = r.String()
		}
		return modelTarget{}, &routeError{fmt.Sprintf("model %q is served by several routes (%s): name one as provider/model", model, strings.Join(names, ", "))}
	}
	if a, ok := cfg.Models.LookupPattern(model); ok {
		return viaAlias(a)
	}
	return modelTarget{}, &routeError{fmt.Sprintf("unknown model %q; %s", model, s.modelChoices(snap))}
}

// resolveModel turns the request's model into where it goes first (see
// lookupModel for the order): a pool is drawn from (or keeps the session's
// route), a route may be replaced by the session's chosen one.
func (s *Server) resolveModel(ctx context.Context, snap *snapshot.Snapshot, kind apiKind, model, session string, who clientKeys) (resolved, error) {
	cfg := snap.Config
	t, err := s.lookupModel(snap, model)
	if err != nil {
		return resolved{}, err
	}
	if t.pool != nil {
		return s.resolvePool(ctx, snap, kind, t.pool, session, who)
	}
	asked := t.route
	if err := kindMatches(cfg, kind, asked.Provider); err != nil {
		return resolved{}, err
	}
	res := resolved{asked: asked, route: asked, keyProvider: asked.Provider, who: who}
	// The client named this route: a new session starts on it, not on a draw;
	// it is moved only where its key and this endpoint may go.
	ch, err := s.quota.Route(ctx, session, pool.Ask{Route: asked, Chosen: true, Usable: func(_, to engine.Route) bool {
		return usableRoute(cfg, kind, who.meantFor(asked.Provider), to) == nil
	}})
	if err != nil {
		s.proxyLog.Warn("session settings could not be loaded; following the defaults", "session", session, "error", err)
	}
	if ch.Route.Provider != "" && kindMatches(cfg, kind, ch.Route.Provider) == nil {
		res.route = ch.Route
	}
	return res, nil
}

// resolvePool draws (or keeps) the session's route in pool p, among the
// routes of the endpoint's protocol. The pool the client named governs the
// session, even when it shares the route with another pool.
func (s *Server) resolvePool(ctx context.Context, snap *snapshot.Snapshot, kind apiKind, p *pool.Pool, session string, who clientKeys) (resolved, error) {
	cfg := snap.Config
	ch, err := s.quota.Route(ctx, session, pool.Ask{Pool: p.Name(), Usable: func(from, to engine.Route) bool {
		if from.Provider == "" { // a draw: the client's key is taken for the drawn route's
			return usableRoute(cfg, kind, who.meantFor(to.Provider), to) == nil
		}
		// A move: the client's key was meant for the route the session is on.
		return usableRoute(cfg, kind, who.meantFor(from.Provider), to) == nil
	}})
	if err != nil {
		s.proxyLog.Warn("session settings could not be loaded; following the defaults", "session", session, "error", err)
	}
	r := ch.Route
	if err := kindMatches(cfg, kind, r.Provider); err != nil {
		return resolved{}, &routeError{fmt.Sprintf("pool %q has no %s-kind route for this endpoint (routes: %s); %s", p.Name(), kind, apiRouteList(p.Routes()), err)}
	}
	return resolved{asked: r, route: r, pool: p.Name(), keyProvider: r.Provider, who: who}, nil
}

// kindMatches refuses an endpoint of one protocol for a provider of the other.
func kindMatches(cfg *config.Config, kind apiKind, provider string) error {
	pc, ok := cfg.Providers[provider]
	if !ok {
		return &routeError{fmt.Sprintf("no provider %q is configured (have: %s)", provider, strings.Join(cfg.ProviderNames(), ", "))}
	}
	if apiKind(pc.Kind) != kind {
		other := "/v1/chat/completions, /v1/completions, /v1/embeddings or /v1/responses"
		if pc.Kind == string(kindAnthropic) {
			other = "/v1/messages"
		}
		return &routeError{fmt.Sprintf("provider %q is %s-kind: send its requests to %s", provider, pc.Kind, other)}
	}
	return nil
}

// configuredRoutes are the routes the config names: every pool's, then the
// gate.models keys, deduplicated, in that order.
func configuredRoutes(snap *snapshot.Snapshot) []engine.Route {
	seen := map[engine.Route]bool{}
	var out []engine.Route
	add := func(r engine.Route) {
		r.ReasoningEffort = ""
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, p := range snap.Pools.All() {
		for _, r := range p.Routes() {
			add(r)
		}
	}
	keys := make([]string, 0, len(snap.Config.Gate.Models))
	for k := range snap.Config.Gate.Models {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if i := strings.IndexByte(k, '/'); i > 0 && i < len(k)-1 {
			if _, ok := snap.Config.Providers[k[:i]]; ok {
				add(engine.Route{Provider: k[:i], Model: k[i+1:]})
			}
		}
	}
	return out
}

// modelChoices lists what a model may name, for a 400.
func (s *Server) modelChoices(snap *snapshot.Snapshot) string {
	var b strings.Builder
	b.WriteString("use a pool (")
	if names := snap.Pools.Names(); len(names) > 0 {
		b.WriteString(strings.Join(names, ", "))
	} else {
		b.WriteString("none configured")
	}
	b.WriteString("), a configured route (")
	routes := configuredRoutes(snap)
	if len(routes) == 0 {
		b.WriteString("none")
	}
	for i, r := range routes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.String())
	}
	b.WriteString("), a name of models: (")
	aliases := snap.Config.Models.All()
	if len(aliases) == 0 {
		b.WriteString("none")
	}
	for i, a := range aliases {
		if i == maxListedAliases {
			fmt.Fprintf(&b, ", … %d more: GET /v1/models lists them", len(aliases)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.Name)
	}
	b.WriteString(") or provider/model with a provider of ")
	b.WriteString(strings.Join(snap.Config.ProviderNames(), ", "))
	return b.String()
}

// maxListedAliases bounds the aliases a 400 lists: a long models: section would
// otherwise bury the message.
const maxListedAliases = 20
