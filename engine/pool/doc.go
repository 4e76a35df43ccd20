// Package pool routes sessions across pools of interchangeable provider/model
// routes, drawn in proportion to what each route's balance source reports, and
// moves a session on when a route's allowance is spent.
//
// # Model
//
// Pools is the configured set of pools: each a list of routes, a scorer and
// whether a session may switch routes mid-way. A route's score comes from its
// provider's last balance Reading (Readings refreshes the due sources); a draw
// picks a route with probability proportional to its score, skipping routes
// whose provider is marked exhausted.
//
// Router is the runtime: per session, the route it runs on and its long-term
// wait; per provider, exhaustion marks. Route (RouteFor) chooses a session's route
// before a call; a QUOTA failure (OnQuota, or RouteQuota through the retry
// planner) marks the provider, fails the session over to another route of its
// pool, or — when none is left — arms a long-term wait until the allowance
// comes back. Sessions holds each session's own switch and pool settings in a
// SessionStore, inherited by forked sessions.
//
// # Invariants
//
//   - A draw never returns a marked route while an unmarked one remains.
//   - A draw, a move or a failover answers only a route the caller accepts
//     (Ask.Usable, QuotaFailure.Usable); a move the caller would refuse is
//     never recorded.
//   - The pool a request names (Ask.Pool, QuotaFailure.Pool) governs it, unless
//     the session's own pool setting names another.
//   - A session that opted out of pools, or whose pool does not hold the route it
//     asked for, keeps its route.
//   - Route state (marks, current routes, waits) lives in memory: it is short-
//     lived and misleading once stale; only the session settings persist.
//
// # Concurrency
//
// Pools is immutable once built; a reload builds a new one and swaps it into the
// Router (Reload), keeping marks, session routes and waits. Router, Sessions and
// StaticReadings are safe for concurrent use. Draws take an injected engine.Rand.
package pool
