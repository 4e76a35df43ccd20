package pool

import (
	"time"

	"github.com/gatectl/gatectl/engine"
)

// RoutedSession is a session on a route, and when a call last used it.
type RoutedSession struct {
	Session  string
	Route    engine.Route
	LastUsed time.Time
}

// SessionRoutes returns every session this process holds a route for, in no
// order (the idle sweep bounds them). It only reads.
func (q *Router) SessionRoutes() []RoutedSession {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]RoutedSession, 0, len(q.routes))
	for s, r := range q.routes {
		out = append(out, RoutedSession{Session: s, Route: r.current, LastUsed: r.lastUsed})
	}
	return out
}
