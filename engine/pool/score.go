package pool

import (
	"context"
	"github.com/gatectl/gatectl/engine"
	"math"
)

// DefaultScorer is the pools' default scoring rule, natively (why: see
// docs/RATIONALE.md, "Why do pools draw routes in proportion to balance?"):
//
//   - a reading with one or more scorable windows scores the lowest
//     remaining ÷ capacity × coefficient among them. A window is scorable when it
//     carries a capacity (the reading's own always wins) or the balance's
//     capacities name it, and its coefficient is not 0; a window the coefficients
//     do not name weighs 1;
//   - a reading with no scorable window scores remaining ÷ capacity when the
//     balance declares a capacity (and the reading a remaining);
//   - anything else is unscored.
//
// A score can be negative (a window overdrawn); the draw weighs it as 0. The zero
// value is ready to use and safe for concurrent use. rules/ carries the same rule as
// an expr program; this one is what a pool uses when it names no scorer.
type DefaultScorer struct{}

// Score implements Scorer. It never fails.
func (DefaultScorer) Score(_ context.Context, r engine.Reading, capacities, coefficients map[string]float64, capacity *float64) (float64, bool, error) {
	s, ok := defaultScore(&r, capacities, coefficients, capacity)
	return s, ok, nil
}

// defaultScore is DefaultScorer's rule on a pointer, so the draw does not copy.
func defaultScore(r *engine.Reading, capacities, coefficients map[string]float64, capacity *float64) (float64, bool) {
	best, scored := 0.0, false
	for i := range r.Windows {
		w := &r.Windows[i]
		if !finite(w.Remaining) {
			continue
		}
		var c float64
		switch {
		case w.Capacity != nil && *w.Capacity > 0 && finite(*w.Capacity):
			c = *w.Capacity
		default:
			v, ok := capacities[w.Name]
			if !ok || !(v > 0) || !finite(v) {
				continue // no capacity: shown to a person, skipped by the score
			}
			c = v
		}
		k := 1.0
		if v, ok := coefficients[w.Name]; ok {
			if v == 0 || !finite(v) {
				continue // a coefficient of 0 drops the window
			}
			k = v
		}
		s := w.Remaining / c * k
		if !scored || s < best {
			best, scored = s, true
		}
	}
	if scored {
		return best, true
	}
	if capacity != nil && *capacity > 0 && r.Remaining != nil && finite(*r.Remaining) {
		return *r.Remaining / *capacity, true
	}
	return 0, false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

var _ engine.Scorer = DefaultScorer{}
