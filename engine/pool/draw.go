package pool

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The availability of a route and the draw (why: see docs/RATIONALE.md, "Why do
// pools draw routes in proportion to balance?" and "Why does a spent provider stay
// marked?").
//
// A route is usable when, in this order:
//
//  1. its provider carries no exhaustion mark. A QUOTA failure sets the mark; it is
//     lifted after ExhaustedCooldown, or by a reading taken at least one refresh
//     after the mark that shows allowance again (see withdraws) — so the probe
//     the failure itself triggers cannot withdraw it;
//  2. its provider's reading is neither spent (remaining 0 or less) nor below
//     MinimumRemaining;
//  3. with no reading at all, FailOpen says.
//
// Among usable routes the draw weighs each scored one by its score (a negative
// score weighs 0); unscored routes are drawn only when no usable route weighs
// more than 0, and then the first usable unscored one in declared order is
// taken: a route whose source fails may have allowance, one that scores 0 has
// none. Candidates are laid out by score, highest first, ties in declared order,
// so with an injected random source the choice is exact. A pool with nothing
// usable answers its first route.
//
// A move (a started session leaving a marked provider) uses the same rule on the
// pool's other routes and, when none is usable, takes the first that is merely not
// marked: a route with little left may still be the one that answers.

// stackRoutes is how many routes a draw handles without allocating.
const stackRoutes = 32

type markSnap struct {
	at time.Time
	ok bool
}

type cand struct {
	i     int     // index into the pool's routes
	score float64 // the route's score (finite)
}

// Mark records that provider reported its allowance spent at now. A later mark
// replaces an earlier one.
func (q *Router) Mark(provider string, now time.Time) {
	q.mu.Lock()
	q.marks[provider] = now
	q.mu.Unlock()
	if q.onMark != nil {
		q.onMark(provider, now)
	}
}

// AdoptMark takes a mark another instance set: the later of it and the mark
// held already stands. OnMark does not hear it (it came from outside).
func (q *Router) AdoptMark(provider string, at time.Time) {
	q.mu.Lock()
	if cur, ok := q.marks[provider]; !ok || at.After(cur) {
		q.marks[provider] = at
	}
	q.mu.Unlock()
}

// Unmark lifts the provider's mark by hand; OnUnmark hears it.
func (q *Router) Unmark(provider string) {
	now := q.clock.Now()
	q.mu.Lock()
	delete(q.marks, provider)
	q.wakeLocked(provider) // with the mark: a wait armed after the unmark is not woken by it
	q.mu.Unlock()
	if q.onUnmark != nil {
		q.onUnmark(provider, now)
	}
}

// AdoptUnmark takes an unmark by hand another instance made at at: the mark
// goes unless it was set after at (a newer QUOTA failure stands). OnUnmark does
// not hear it.
func (q *Router) AdoptUnmark(provider string, at time.Time) {
	q.mu.Lock()
	if cur, ok := q.marks[provider]; ok && !cur.After(at) {
		delete(q.marks, provider)
		q.wakeLocked(provider)
	}
	q.mu.Unlock()
}

// Marked returns when the provider was marked, and whether the mark still holds at
// the clock's now (neither expired nor withdrawn by a later reading).
func (q *Router) Marked(provider string) (time.Time, bool) {
	c := q.cfg.Load()
	q.mu.Lock()
	at, ok := q.marks[provider]
	q.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return at, q.holdsOrLift(c, provider, at, q.clock.Now())
}

// marked reports whether provider's mark holds at now.
func (q *Router) marked(c *quotaConfig, provider string, now time.Time) bool {
	q.mu.Lock()
	at, ok := q.marks[provider]
	q.mu.Unlock()
	return ok && q.holdsOrLift(c, provider, at, now)
}

// holdsOrLift is markHolds for the mark set at `at`, deleting it once it no
// longer holds (unless a newer mark replaced it): a reading that withdrew it
// stays read, and a later failed read — a missing reading — does not bring
// the mark back. (choose lifts the marks it draws past the same way.)
func (q *Router) holdsOrLift(c *quotaConfig, provider string, at, now time.Time) bool {
	if q.markHolds(c, provider, at, now) {
		return true
	}
	q.mu.Lock()
	if cur, ok := q.marks[provider]; ok && cur.Equal(at) {
		delete(q.marks, provider)
	}
	q.mu.Unlock()
	return false
}

// markHolds reports whether a mark set at `at` still holds at now.
func (q *Router) markHolds(c *quotaConfig, provider string, at, now time.Time) bool {
	if now.Sub(at) >= c.settings.ExhaustedCooldown {
		return false
	}
	b := c.pools.balanceOf(provider)
	r, ok := q.readings.Last(provider)
	return !(ok && hasContent(&r) && withdraws(&r, b, at))
}

// hasContent reports whether a reading says anything: one with only an error is a
// missing reading.
func hasContent(r *engine.Reading) bool { return r.Remaining != nil || len(r.Windows) > 0 }

// weighs reports whether a reading's window w counts toward the provider's
// allowance: its coefficient is not 0 and it reports a number.
func (b *balance) weighs(w *engine.WindowReading) bool {
	k, ok := b.coefficients[w.Name]
	return !(ok && k == 0) && !math.IsNaN(w.Remaining)
}

// withdraws reports whether reading r lifts a mark set at `at`: taken at least one
// refresh after it, and showing allowance in everything it reports — a
// remaining above 0 and not below the minimum, and every weighed window (one
// whose coefficient is not 0) above 0. A reading of windows alone can lift a
// mark; a remaining cannot while a window it reports is spent.
func withdraws(r *engine.Reading, b *balance, at time.Time) bool {
	if r.TakenAt.Before(at.Add(b.refresh)) {
		return false
	}
	shown := false
	if r.Remaining != nil {
		if !(*r.Remaining > 0) || *r.Remaining < b.minimum {
			return false
		}
		shown = true
	}
	for i := range r.Windows {
		w := &r.Windows[i]
		if !b.weighs(w) {
			continue
		}
		if !(w.Remaining > 0) {
			return false
		}
		shown = true
	}
	return shown
}

// belowMinimum reports whether a reading fails the provider's threshold: spent
// (remaining 0 or less), or below the minimum.
func belowMinimum(r *engine.Reading, b *balance) bool {
	return r.Remaining != nil && (!(*r.Remaining > 0) || *r.Remaining < b.minimum)
}

// scoreRoute is score for routes[i] of p, remembered per reading.
func scoreRoute(ctx context.Context, p *Pool, i int, r *engine.Reading) (float64, bool) {
	if m := p.memo[i].Load(); m != nil && m.matches(r) {
		return m.score, m.scored
	}
	s, ok, _ := score(ctx, p, r, p.bal[i]) // (the report says why a route is unscored)
	m := &scoreMemo{takenAt: r.TakenAt, remaining: math.NaN(), nWindows: len(r.Windows), score: s, scored: ok}
	if r.Remaining != nil {
		m.remaining = *r.Remaining
	}
	if len(r.Windows) > 0 {
		m.windows = &r.Windows[0]
	}
	p.memo[i].Store(m)
	return s, ok
}

// score weighs a usable route's reading with the pool's scorer. A scorer error or a
// score that is not finite leaves the route unscored; the error says which.
func score(ctx context.Context, p *Pool, r *engine.Reading, b *balance) (float64, bool, error) {
	var s float64
	var ok bool
	if _, native := p.scorer.(DefaultScorer); native {
		s, ok = defaultScore(r, b.capacities, b.coefficients, b.capacity)
	} else {
		var err error
		s, ok, err = p.scorer.Score(ctx, *r, b.capacities, b.coefficients, b.capacity)
		if err != nil {
			return 0, false, err
		}
	}
	if ok && !finite(s) {
		return 0, false, fmt.Errorf("the score is not finite (%g)", s)
	}
	return s, ok, nil
}

// choose picks a route of pool p at now, leaving out the route exclude (when not
// nil). With move false it is the draw of a starting session and always answers a
// route (ok false: nothing was usable, the first route answers). With move true it
// is a move off a marked provider, and ok false means no route is even unmarked.
// usable, when not nil, leaves out the routes the caller cannot send to: they
// are never answered, except as the first route of a draw with nothing else.
// It reads readings with Last only: callers refresh first when they may wait.
func (q *Router) choose(ctx context.Context, c *quotaConfig, p *Pool, now time.Time, exclude *engine.Route, move bool, usable func(engine.Route) bool) (engine.Route, bool) {
	n := len(p.routes)
	var markBuf [stackRoutes]markSnap
	var candBuf [stackRoutes]cand
	marks, cands := markBuf[:n:n], candBuf[:0]
	if n > stackRoutes {
		marks, cands = make([]markSnap, n), make([]cand, 0, n)
	}
	q.mu.Lock()
	switch m := len(q.marks); {
	case m == 0:
	case m <= 4: // a few marks: comparing strings beats hashing every provider
		for prov, at := range q.marks {
			for i := range p.routes {
				if p.routes[i].Provider == prov {
					marks[i] = markSnap{at: at, ok: true}
				}
			}
		}
	default:
		for i := range p.routes {
			marks[i].at, marks[i].ok = q.marks[p.routes[i].Provider]
		}
	}
	q.mu.Unlock()

	lifted, weighed := false, false // weighed: a candidate scores above 0
	firstUsable, firstUnmarked, firstUnscored, first := -1, -1, -1, -1
	for i := range p.routes {
		r := &p.routes[i]
		if exclude != nil && RouteMatches(*r, *exclude) || usable != nil && !usable(*r) {
			continue
		}
		if first < 0 {
			first = i
		}
		b := p.bal[i]
		reading, has := q.readings.Last(r.Provider)
		has = has && hasContent(&reading)
		if m := &marks[i]; m.ok {
			if now.Sub(m.at) < c.settings.ExhaustedCooldown && !(has && withdraws(&reading, b, m.at)) {
				continue // 1. exhausted
			}
			lifted = true // deleted below, once no draw needs it
		}
		if firstUnmarked < 0 {
			firstUnmarked = i
		}
		if has {
			if belowMinimum(&reading, b) {
				continue // 2. below the threshold
			}
		} else if !c.settings.FailOpen {
			continue // 3. no reading, fail closed
		}
		if firstUsable < 0 {
			firstUsable = i
		}
		if !has {
			if firstUnscored < 0 {
				firstUnscored = i
			}
			continue // usable but unscored
		}
		if s, ok := scoreRoute(ctx, p, i, &reading); ok {
			cands = append(cands, cand{i: i, score: s})
			weighed = weighed || s > 0
		} else if firstUnscored < 0 {
			firstUnscored = i
		}
	}
	if lifted {
		q.lift(c, p, marks, now)
	}
	switch {
	case len(cands) > 0 && (weighed || firstUnscored < 0):
		return p.routes[q.pick(cands)], true
	case firstUnscored >= 0:
		return p.routes[firstUnscored], true
	case firstUsable >= 0:
		return p.routes[firstUsable], true
	case move && firstUnmarked >= 0:
		return p.routes[firstUnmarked], true
	case move:
		return engine.Route{}, false
	case first >= 0:
		return p.routes[first], false
	}
	return p.routes[0], false
}

// lift deletes the marks of p's providers that no longer hold, unless a newer mark
// replaced one meanwhile. marks is choose's snapshot.
func (q *Router) lift(c *quotaConfig, p *Pool, marks []markSnap, now time.Time) {
	for i := range marks {
		if !marks[i].ok {
			continue
		}
		prov := p.routes[i].Provider
		if q.markHolds(c, prov, marks[i].at, now) {
			continue
		}
		q.mu.Lock()
		if at, ok := q.marks[prov]; ok && at.Equal(marks[i].at) {
			delete(q.marks, prov)
		}
		q.mu.Unlock()
	}
}

// pick draws one candidate in proportion to its score and returns its route index.
// Candidates are ordered by score, highest first, ties in declared order; a
// negative score weighs 0; when every weight is 0 the first candidate wins.
func (q *Router) pick(cands []cand) int {
	for i := 1; i < len(cands); i++ { // insertion sort: stable, no allocation
		c := cands[i]
		j := i
		for j > 0 && cands[j-1].score < c.score {
			cands[j] = cands[j-1]
			j--
		}
		cands[j] = c
	}
	total := 0.0
	for _, c := range cands {
		if c.score > 0 {
			total += c.score
		}
	}
	if !(total > 0) || !finite(total) {
		return cands[0].i
	}
	x := q.float64() * total
	last := cands[0].i
	for _, c := range cands {
		if c.score <= 0 {
			continue
		}
		if x < c.score {
			return c.i
		}
		x -= c.score
		last = c.i
	}
	return last // rounding: the last weighted candidate
}
