package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
)

// apiTarget is where a decision API call goes: the route, and the pool that
// chose it when one did.
type apiTarget struct {
	Route engine.Route `json:"route"`
	Pool  string       `json:"pool,omitempty"`
	// Drawn: the route was drawn from Pool (a session's first request, or no session).
	Drawn bool `json:"drawn,omitempty"`
	// Moved: the session's route was replaced because its provider is out of allowance.
	Moved bool `json:"moved,omitempty"`
}

// apiAsk is how a request names its target: provider and model, or a pool, or
// route "provider/model[@effort]", or model alone naming a pool or provider/model.
type apiAsk struct {
	Provider        string
	Model           string
	ReasoningEffort string
	Pool            string
	Route           string
	Session         string
}

// target resolves what a request asks for into the route its call goes to.
//
//   - pool: a draw from the pool (a session keeps the route it was drawn, and is
//     moved off a provider out of allowance as the pool allows);
//   - provider+model, or route: that route, through the session's pool rules;
//   - model alone: a pool by that name, else "provider/model" with a configured
//     provider, else the one configured route (pools, gate.models) serving that
//     model — the proxy's rules for a request's model.
//
// The provider need not be configured: a harness may gate calls gatectl does not
// forward. The error is an apiFieldError, or wraps pool.ErrNoPool.
func (a *api) target(ctx context.Context, ask apiAsk) (apiTarget, error) {
	if err := apiFirstErr(apiCheckName("provider", ask.Provider), apiCheckName("model", ask.Model),
		apiCheckName("reasoningEffort", ask.ReasoningEffort), apiCheckName("pool", ask.Pool),
		apiCheckName("route", ask.Route), apiCheckName("session", ask.Session)); err != nil {
		return apiTarget{}, err
	}
	if ask.Session != "" {
		a.s.seen.note(ask.Session, a.s.clock.Now()) // in use: its settings' record stays (janitor.go)
	}
	n := 0
	for _, set := range []bool{ask.Provider != "" || ask.Model != "", ask.Pool != "", ask.Route != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		field := "pool"
		if ask.Pool == "" {
			field = "route"
		}
		return apiTarget{}, apiFieldError{field, "name the target one way: provider and model, or pool, or route"}
	}
	snap := a.s.snap.Current()
	pools := a.s.quota.Pools()
	switch {
	case ask.Pool != "":
		return a.poolTarget(ctx, ask.Pool, ask.Session, "pool")
	case ask.Route != "":
		r, err := apiParseRoute(ask.Route)
		if err != nil {
			return apiTarget{}, err
		}
		if err := a.checkProvider("route", r.Provider); err != nil {
			return apiTarget{}, err
		}
		return a.routeTarget(ctx, r, ask.Session), nil
	case ask.Provider != "":
		if ask.Model == "" {
			return apiTarget{}, apiFieldError{"model", "model is required with provider"}
		}
		if err := a.checkProvider("provider", ask.Provider); err != nil {
			return apiTarget{}, err
		}
		return a.routeTarget(ctx, engine.Route{Provider: ask.Provider, Model: ask.Model, ReasoningEffort: ask.ReasoningEffort}, ask.Session), nil
	case ask.Model != "":
		if pools.Pool(ask.Model) != nil {
			return a.poolTarget(ctx, ask.Model, ask.Session, "model")
		}
		if p, m, ok := strings.Cut(ask.Model, "/"); ok && m != "" {
			if _, configured := snap.Config.Providers[p]; configured {
				return a.routeTarget(ctx, engine.Route{Provider: p, Model: m, ReasoningEffort: ask.ReasoningEffort}, ask.Session), nil
			}
		}
		var serving []engine.Route // the proxy's rule: the routes of the pools and of gate.models
		for _, r := range configuredRoutes(snap) {
			if r.Model == ask.Model {
				serving = append(serving, r)
			}
		}
		if len(serving) == 1 {
			return a.routeTarget(ctx, serving[0], ask.Session), nil
		}
		if len(serving) > 1 {
			return apiTarget{}, apiFieldError{"model", fmt.Sprintf("model %q is served by %d routes (%s): name the provider", ask.Model, len(serving), apiRouteList(serving))}
		}
		return apiTarget{}, apiFieldError{"provider", fmt.Sprintf("provider is required: model %q is neither a pool (pools: %s) nor provider/model with a configured provider", ask.Model, apiNames(pools.Names()))}
	}
	return apiTarget{}, apiFieldError{"model", "name the target: provider and model, or pool, or route"}
}

// routeTarget sends a session's call for r where the pools say (RouteFor): r
// itself, unless the session is governed by a pool that draws or moves it.
func (a *api) routeTarget(ctx context.Context, r engine.Route, session string) apiTarget {
	ch, err := a.s.quota.RouteFor(ctx, session, r)
	if err != nil { // the settings could not be loaded: the choice follows the defaults
		a.s.apiLog.Warn("session settings unreadable; using the defaults", "session", session, "error", err)
	}
	return apiTarget{Route: ch.Route, Pool: ch.Pool, Drawn: ch.Drawn, Moved: ch.Moved}
}

// poolTarget draws from the pool, as the proxy does for a pool name (see
// resolvePool): a session starts on a drawn route, keeps it, and is moved off an
// exhausted provider as the pool allows; without a session each call is a fresh
// draw. The pool named governs, even when it shares a route with another. field
// names the request field that named the pool.
func (a *api) poolTarget(ctx context.Context, name, session, field string) (apiTarget, error) {
	pools := a.s.quota.Pools()
	if pools.Pool(name) == nil {
		return apiTarget{}, apiFieldError{field, fmt.Sprintf("%v: %q (pools: %s)", pool.ErrNoPool, name, apiNames(pools.Names()))}
	}
	ch, err := a.s.quota.Route(ctx, session, pool.Ask{Pool: name})
	if err != nil { // the settings could not be loaded: the choice follows the defaults
		a.s.apiLog.Warn("session settings unreadable; using the defaults", "session", session, "error", err)
	}
	return apiTarget{Route: ch.Route, Pool: name, Drawn: ch.Drawn, Moved: ch.Moved}, nil
}

// apiParseRoute reads "provider/model" or "provider/model@effort". The model may
// hold slashes (openrouter/deepseek/deepseek-chat).
func apiParseRoute(s string) (engine.Route, error) {
	p, m, ok := strings.Cut(s, "/")
	if !ok || p == "" || m == "" {
		return engine.Route{}, apiFieldError{"route", fmt.Sprintf("route %q: want provider/model or provider/model@effort", s)}
	}
	r := engine.Route{Provider: p, Model: m}
	if i := strings.LastIndex(m, "@"); i >= 0 {
		r.Model, r.ReasoningEffort = m[:i], m[i+1:]
		if r.Model == "" || r.ReasoningEffort == "" {
			return engine.Route{}, apiFieldError{"route", fmt.Sprintf("route %q: want provider/model or provider/model@effort", s)}
		}
	}
	return r, nil
}

func apiRouteList(rs []engine.Route) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

func apiNames(names []string) string {
	if len(names) == 0 {
		return "none configured"
	}
	return strings.Join(names, ", ")
}
