package pool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Report is every pool, route, reading, score and mark: what `gatectl
// routes` and /gate/v1/routes print.
type Report struct {
	At time.Time `json:"at"`
	// Warnings are the provider check's findings, printed above the pools.
	Warnings []string     `json:"warnings,omitempty"`
	Pools    []PoolReport `json:"pools"`
}

// PoolReport is one pool of a Report.
type PoolReport struct {
	Name string `json:"name"`
	// MidSessionSwitch false is named in the header: it says why a session did not
	// move.
	MidSessionSwitch bool          `json:"midSessionSwitch"`
	Routes           []RouteReport `json:"routes"`
}

// RouteReport is one route of a PoolReport.
type RouteReport struct {
	engine.Route
	// Reading is the provider's last reading; nil when it has none.
	Reading        *engine.Reading `json:"reading,omitempty"`
	ReadingTakenAt time.Time       `json:"readingTakenAt,omitzero"`
	ReadingAgeMs   *int64          `json:"readingAgeMs,omitempty"`
	// ScoringWindows names the reading's windows that weigh in the default score.
	ScoringWindows   []string `json:"scoringWindows,omitempty"`
	MinimumRemaining float64  `json:"minimumRemaining"`
	// Score is the route's score; nil when the route is unscored.
	Score *float64 `json:"score"`
	// ScoreError is why the pool's scorer could not score the reading (an expr
	// that failed on it, a plugin's error): the route is then drawn as an
	// unscored one.
	ScoreError string `json:"scoreError,omitempty"`
	// Marked: the provider carries an exhaustion mark that still holds.
	Marked    bool      `json:"marked"`
	MarkedAt  time.Time `json:"markedAt,omitzero"`
	MarkUntil time.Time `json:"markUntil,omitzero"` // when the cooldown lifts it at the latest
	// Usable: a starting session could be drawn onto it. Why says why not.
	Usable bool   `json:"usable"`
	Why    string `json:"why,omitempty"`
}

// Report describes the named pools (every pool when none is named), after
// refreshing their due sources when refresh is set. ErrNoPool names an unknown
// pool. It changes no state but for lifting a mark that a reading withdrew.
func (q *Router) Report(ctx context.Context, refresh bool, pools ...string) (Report, error) {
	c := q.cfg.Load()
	var sel []*Pool
	if len(pools) == 0 {
		sel = c.pools.All()
	}
	for _, name := range pools {
		p := c.pools.Pool(name)
		if p == nil {
			return Report{}, fmt.Errorf("%w: %q (pools: %s)", ErrNoPool, name, strings.Join(c.pools.Names(), ", "))
		}
		sel = append(sel, p)
	}
	if refresh {
		var provs []string
		for _, p := range sel {
			for _, pr := range p.providers {
				if !slices.Contains(provs, pr) {
					provs = append(provs, pr)
				}
			}
		}
		q.readings.Refresh(ctx, provs)
	}
	now := q.clock.Now()
	rep := Report{At: now, Warnings: c.pools.Warnings(), Pools: []PoolReport{}}
	q.mu.Lock()
	marks := make(map[string]time.Time, len(q.marks))
	for k, v := range q.marks {
		marks[k] = v
	}
	q.mu.Unlock()
	for _, p := range sel {
		pr := PoolReport{Name: p.name, MidSessionSwitch: p.midSessionSwitch, Routes: make([]RouteReport, 0, len(p.routes))}
		for _, r := range p.routes {
			pr.Routes = append(pr.Routes, q.routeReport(ctx, c, p, r, now, marks))
		}
		rep.Pools = append(rep.Pools, pr)
	}
	return rep, nil
}

func (q *Router) routeReport(ctx context.Context, c *quotaConfig, p *Pool, r engine.Route, now time.Time, marks map[string]time.Time) RouteReport {
	b := c.pools.balanceOf(r.Provider)
	rr := RouteReport{Route: r, MinimumRemaining: b.minimum}
	reading, has := q.readings.Last(r.Provider)
	if has {
		cp := reading
		rr.Reading = &cp
		rr.ReadingTakenAt = reading.TakenAt
		age := now.Sub(reading.TakenAt).Milliseconds()
		rr.ReadingAgeMs = &age
		rr.ScoringWindows = scoringWindows(&reading, b)
	}
	has = has && hasContent(&reading)
	if has {
		s, ok, err := score(ctx, p, &reading, b)
		if ok {
			rr.Score = &s
		}
		if err != nil {
			rr.ScoreError = err.Error()
		}
	}
	if at, ok := marks[r.Provider]; ok && q.holdsOrLift(c, r.Provider, at, now) {
		rr.Marked, rr.MarkedAt, rr.MarkUntil = true, at, at.Add(c.settings.ExhaustedCooldown)
	}
	switch {
	case rr.Marked:
		rr.Why = "exhausted: the provider reported its allowance spent"
	case has && reading.Remaining != nil && !(*reading.Remaining > 0):
		rr.Why = "spent: the reading shows nothing remaining"
	case has && belowMinimum(&reading, b):
		rr.Why = fmt.Sprintf("below minimumRemaining %g", b.minimum)
	case !has && !c.settings.FailOpen:
		rr.Why = "no reading (failOpen is off)"
	default:
		rr.Usable = true
	}
	return rr
}

// scoringWindows names the windows of r that DefaultScorer weighs.
func scoringWindows(r *engine.Reading, b *balance) []string {
	var names []string
	for _, w := range r.Windows {
		one := engine.Reading{Windows: []engine.WindowReading{w}}
		if _, ok := defaultScore(&one, b.capacities, b.coefficients, nil); ok {
			names = append(names, w.Name)
		}
	}
	return names
}

// DrawCounts draws n starting routes from the pool (after refreshing its due
// sources once) and counts where they land, by route index: how the pool would
// split n sessions now. It draws from the injected random source and lifts expired
// marks, nothing else.
func (q *Router) DrawCounts(ctx context.Context, pool string, n int) ([]int, error) {
	c := q.cfg.Load()
	p := c.pools.Pool(pool)
	if p == nil {
		return nil, fmt.Errorf("%w: %q (pools: %s)", ErrNoPool, pool, strings.Join(c.pools.Names(), ", "))
	}
	q.readings.Refresh(ctx, p.providers)
	now := q.clock.Now()
	counts := make([]int, len(p.routes))
	for range n {
		r, _ := q.choose(ctx, c, p, now, nil, false, nil)
		counts[slices.Index(p.routes, r)]++
	}
	return counts, nil
}
