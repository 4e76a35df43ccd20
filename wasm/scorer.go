package wasm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/gatectl/gatectl/engine"
)

// Scorer is a gate/v1 module exporting gate_score, as a pool's scorer
// (engine.Scorer). The module gets the route's reading — its members
// (remaining, windows, resetsAt, error) at the top level — with the balance's
// settings beside them:
//
//	{"remaining": 2.94, "windows": [{"name": "weekly", "remaining": 2.94, "capacity": 35}],
//	 "capacities": {"monthly": 40}, "coefficients": {"monthly": 0.25}, "capacity": 20}
//
// and returns {"score": n}. {"score": null} or returning 1 leaves the route
// unscored; a failing module is an error (the pool treats the route as unscored).
//
// A Scorer is immutable and safe for concurrent use.
type Scorer struct {
	p *Plugin
}

// ScorerOptions configure NewScorer.
type ScorerOptions struct {
	Name   string         // default: the file name
	Config map[string]any // handed to gate_init
	Limits Limits         // zero fields take DefaultLimits(KindScore)
}

// NewScorer loads the module at path as a scorer.
func NewScorer(ctx context.Context, h *Host, path string, opts ScorerOptions) (*Scorer, error) {
	p, err := h.Load(ctx, path, Options{Kind: KindScore, Name: opts.Name, Config: opts.Config, Limits: opts.Limits})
	if err != nil {
		return nil, err
	}
	return &Scorer{p: p}, nil
}

// ScorerFor wraps a loaded plugin of kind score.
func ScorerFor(p *Plugin) *Scorer { return &Scorer{p: p} }

// Plugin returns the plugin behind the scorer.
func (s *Scorer) Plugin() *Plugin { return s.p }

// Close gives the plugin handle back.
func (s *Scorer) Close() error { return s.p.Close() }

// scoreInput is what gate_score reads: the reading inlined, the balance's
// settings beside it.
type scoreInput struct {
	engine.Reading
	Capacities   map[string]float64 `json:"capacities,omitempty"`
	Coefficients map[string]float64 `json:"coefficients,omitempty"`
	Capacity     *float64           `json:"capacity,omitempty"`
}

// Score implements engine.Scorer.
func (s *Scorer) Score(ctx context.Context, r engine.Reading, capacities, coefficients map[string]float64, capacity *float64) (float64, bool, error) {
	in, err := json.Marshal(scoreInput{Reading: r, Capacities: capacities, Coefficients: coefficients, Capacity: capacity})
	if err != nil {
		// A NaN or an infinity in the reading: nothing a module could score.
		return 0, false, fmt.Errorf("wasm: %s: reading: %w", s.p.Name(), err)
	}
	var score *float64
	abstain, err := s.p.call(ctx, in, func(out []byte) error {
		var o struct {
			Score *float64 `json:"score"`
		}
		if err := json.Unmarshal(out, &o); err != nil {
			return jsonErr(out, err)
		}
		score = o.Score
		return nil
	})
	if err != nil || abstain || score == nil || math.IsNaN(*score) {
		return 0, false, err
	}
	return *score, true, nil
}

var (
	_ engine.Scorer = (*Scorer)(nil)
	_ io.Closer     = (*Scorer)(nil) // the snapshot that holds it finds Close by type assertion
)
