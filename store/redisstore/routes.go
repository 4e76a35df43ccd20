package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/pool"
	"github.com/redis/go-redis/v9"
)

// routeTTL is how long a session's route outlives its last change: the
// router forgets an idle session after a day too.
const routeTTL = 24 * time.Hour

// Routes shares each session's route (drawn at its start, or failed over to)
// between the instances: a session whose calls reach several instances goes on
// one route. A change is announced on the routes' channel so the instances
// holding the session follow it; one that first sees the session loads it.
type Routes struct{ s *Store }

// Routes returns the shared route store (pool.RouterOptions.Routes).
func (s *Store) Routes() *Routes { return &Routes{s: s} }

func (s *Store) routeKey(session string) string { return s.opts.KeyPrefix + "route:{" + session + "}" }
func (s *Store) routesChannel() string          { return s.opts.KeyPrefix + "{routes}:ev" }

// LoadRoute implements pool.RouteStore.
func (x *Routes) LoadRoute(session string) (pool.SessionRoute, bool) {
	var r pool.SessionRoute
	var raw []byte
	err := x.s.call(func(ctx context.Context) error {
		var err error
		raw, err = x.s.c.Get(ctx, x.s.routeKey(session)).Bytes()
		return err
	})
	if err != nil || json.Unmarshal(raw, &r) != nil {
		if err != nil && !errors.Is(err, redis.Nil) && !errors.Is(err, ErrDegraded) {
			x.s.log.Debug("shared session route unavailable; drawing locally", "error", err)
		}
		return r, false
	}
	return r, true
}

// routeNote is the announcement of a route change.
type routeNote struct {
	From    string            `json:"from"`
	Session string            `json:"session"`
	Route   pool.SessionRoute `json:"route"`
}

// SaveRoute implements pool.RouteStore.
func (x *Routes) SaveRoute(session string, r pool.SessionRoute) {
	raw, _ := json.Marshal(r)
	note, _ := json.Marshal(routeNote{From: x.s.instance, Session: session, Route: r})
	_ = x.s.call(func(ctx context.Context) error {
		p := x.s.c.Pipeline()
		if r == (pool.SessionRoute{}) {
			p.Del(ctx, x.s.routeKey(session))
		} else {
			p.Set(ctx, x.s.routeKey(session), raw, routeTTL)
		}
		p.Publish(ctx, x.s.routesChannel(), "t "+string(note))
		_, err := p.Exec(ctx)
		return err
	})
}

var _ pool.RouteStore = (*Routes)(nil)

// dispatchRoute hands another instance's route change to the handler.
func (s *Store) dispatchRoute(payload string) {
	raw, ok := strings.CutPrefix(payload, "t ")
	if !ok || s.on.Route == nil {
		return
	}
	var n routeNote
	if json.Unmarshal([]byte(raw), &n) == nil && n.From != s.instance {
		s.on.Route(n.Session, n.Route)
	}
}
