package rules

import (
	"context"
	"fmt"
	"math"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"github.com/gatectl/gatectl/engine"
)

// DefaultScoreExpr is the pools' default scoring rule as an expr program: the lowest
// remaining ÷ capacity × coefficient over the scorable windows (a window needs a
// capacity, its own or the balance's `capacities`; a window the coefficients do
// not name weighs 1; a coefficient of 0 drops it); else remaining ÷ capacity; else
// unscored (nil). pool.DefaultScorer is the same rule compiled into Go, which a
// pool uses when it names no scorer; a test holds the two equal.
const DefaultScoreExpr = `
let scores = map(
  filter(windows,
    ((#.capacity != nil && #.capacity > 0) || (#.name in capacities && capacities[#.name] > 0))
    && (#.name in coefficients ? coefficients[#.name] : 1) != 0),
  #.remaining
    / ((#.capacity != nil && #.capacity > 0) ? #.capacity : capacities[#.name])
    * (#.name in coefficients ? coefficients[#.name] : 1));
len(scores) > 0
  ? min(scores)
  : (remaining != nil && capacity != nil && capacity > 0 ? remaining / capacity : nil)`

// ScoreEnv is what a scoring expression sees.
type ScoreEnv struct {
	Remaining    any                `expr:"remaining"`    // float64, or nil when the reading has none
	Windows      []map[string]any   `expr:"windows"`      // {name, remaining, capacity (nil when absent)}
	Capacities   map[string]float64 `expr:"capacities"`   // the balance's capacities
	Coefficients map[string]float64 `expr:"coefficients"` // the balance's coefficients
	Capacity     any                `expr:"capacity"`     // the balance's capacity, or nil
}

// Scorer is an expr scoring rule; it implements engine.Scorer. The expression
// returns a number (the score) or nil (unscored). Compiled once; safe for
// concurrent use.
type Scorer struct {
	src  string
	prog *vm.Program
}

// NewScorer compiles a scoring expression; errors name the line and column.
func NewScorer(src string) (*Scorer, error) {
	prog, err := expr.Compile(src, expr.Env(ScoreEnv{}))
	if err != nil {
		return nil, fmt.Errorf("scoring expression: %w", err)
	}
	return &Scorer{src: src, prog: prog}, nil
}

// Source returns the expression.
func (s *Scorer) Source() string { return s.src }

// Score implements engine.Scorer.
func (s *Scorer) Score(_ context.Context, r engine.Reading, capacities, coefficients map[string]float64, capacity *float64) (float64, bool, error) {
	env := ScoreEnv{Capacities: capacities, Coefficients: coefficients, Windows: make([]map[string]any, len(r.Windows))}
	if env.Capacities == nil {
		env.Capacities = map[string]float64{}
	}
	if env.Coefficients == nil {
		env.Coefficients = map[string]float64{}
	}
	if r.Remaining != nil {
		env.Remaining = *r.Remaining
	}
	if capacity != nil {
		env.Capacity = *capacity
	}
	for i, w := range r.Windows {
		m := map[string]any{"name": w.Name, "remaining": w.Remaining, "capacity": nil}
		if w.Capacity != nil {
			m["capacity"] = *w.Capacity
		}
		env.Windows[i] = m
	}
	out, err := expr.Run(s.prog, env)
	if err != nil {
		return 0, false, fmt.Errorf("scoring expression: %w", err)
	}
	switch v := out.(type) {
	case nil:
		return 0, false, nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, false, nil
		}
		return v, true, nil
	case int:
		return float64(v), true, nil
	}
	return 0, false, fmt.Errorf("scoring expression returned %T, want a number or nil", out)
}

var _ engine.Scorer = (*Scorer)(nil)
