package sim

import (
	"fmt"

	"github.com/gatectl/gatectl/engine/gate"
)

// The matrix is chaotic: one 429 earlier or later changes the rest of a run's
// hour, so a change that leaves the mean utilization where it was still moves
// runs across the targets' thresholds. Nudging two admission settings that no
// target depends on, by 1/70 (1.43%) or less, shows how far: a change is
// judged against that band (its sweep over seeds and nudges), not one matrix.
// The band's figures: docs/benchmarks.md, "The gate's fourteenth round".

// A Nudge moves one admission setting by a hair. Apply is nil for the settings
// as the scenario has them.
type Nudge struct {
	Name  string
	Apply func(g *GateSpec)
}

// Nudges are the settings as the scenario has them, then five nudges: pace ×
// 0.99 and × 1.01, paceBurst × 69/70, 70.5/70 and 71/70 (of the scenario's
// value, or the gate's default).
var Nudges = []Nudge{
	{Name: "as set"},
	{Name: "pace ×0.99", Apply: func(g *GateSpec) { g.Pace = scaled(g.Pace, gate.DefaultConfig().Pace, 0.99) }},
	{Name: "pace ×1.01", Apply: func(g *GateSpec) { g.Pace = scaled(g.Pace, gate.DefaultConfig().Pace, 1.01) }},
	{Name: "paceBurst ×69/70", Apply: func(g *GateSpec) { g.PaceBurst = scaled(g.PaceBurst, gate.DefaultConfig().PaceBurst, 69.0/70) }},
	{Name: "paceBurst ×70.5/70", Apply: func(g *GateSpec) { g.PaceBurst = scaled(g.PaceBurst, gate.DefaultConfig().PaceBurst, 70.5/70) }},
	{Name: "paceBurst ×71/70", Apply: func(g *GateSpec) { g.PaceBurst = scaled(g.PaceBurst, gate.DefaultConfig().PaceBurst, 71.0/70) }},
}

// scaled is f × the value set, or × def when none is.
func scaled(set *float64, def, f float64) *float64 {
	v := valueOr(set, def) * f
	return &v
}

// valueOr is the value set, or def when none is.
func valueOr(set *float64, def float64) float64 {
	if set != nil {
		return *set
	}
	return def
}

// SweepRow is one matrix (one seed, one nudge) summed against the targets.
type SweepRow struct {
	Seed        uint64         `json:"seed"`
	Nudge       string         `json:"nudge"`
	Runs        int            `json:"runs"`
	Met         int            `json:"met"`         // runs meeting every target
	OracleToo   int            `json:"oracleToo"`   // runs missing only targets the oracle missed too (MatrixTally)
	RateLimited int            `json:"rateLimited"` // the gate's 429s, all runs
	Utilization float64        `json:"utilization"` // the runs' mean utilization of the true TPM
	Misses      map[string]int `json:"misses"`      // runs missing each target
	// OracleMisses is, of the runs missing each target, those whose oracle
	// missed it too.
	OracleMisses map[string]int `json:"oracleMisses"`
}

// Sweep runs the matrix from base for each seed, with each nudge, one
// SweepRow per pair in seed-major order.
func Sweep(base Scenario, seeds []uint64, nudges []Nudge) ([]SweepRow, error) {
	if len(seeds) == 0 || len(nudges) == 0 {
		return nil, fmt.Errorf("sweep: no seeds or no nudges")
	}
	var out []SweepRow
	for _, seed := range seeds {
		for _, n := range nudges {
			s := base
			s.Seed = seed
			if n.Apply != nil {
				n.Apply(&s.Gate)
				if sameAdmission(s.Gate, base.Gate) {
					continue // with the pacer off (pace 0) a nudge changes nothing: a repeat, not a nudge
				}
			}
			rows, err := Matrix(s)
			if err != nil {
				return nil, fmt.Errorf("sweep: seed %d, %s: %w", seed, n.Name, err)
			}
			out = append(out, sweepRow(seed, n.Name, rows))
		}
	}
	return out, nil
}

func sweepRow(seed uint64, nudge string, rows []MatrixRow) SweepRow {
	t := Tally(rows)
	r := SweepRow{Seed: seed, Nudge: nudge, Runs: t.Runs, Met: t.Met, OracleToo: t.OracleToo, Misses: map[string]int{}, OracleMisses: map[string]int{}}
	for _, m := range t.Misses {
		r.Misses[m.Target] = m.Runs
		r.OracleMisses[m.Target] = m.OracleToo
	}
	for _, row := range rows {
		r.RateLimited += row.RateLimited
		r.Utilization += row.Utilization / float64(len(rows))
	}
	return r
}

// sameAdmission reports whether a and b pace grants alike.
func sameAdmission(a, b GateSpec) bool {
	def := gate.DefaultConfig()
	pa, pb := valueOr(a.Pace, def.Pace), valueOr(b.Pace, def.Pace)
	if pa == 0 && pb == 0 {
		return true // the pacer is off: its burst does nothing
	}
	return pa == pb && valueOr(a.PaceBurst, def.PaceBurst) == valueOr(b.PaceBurst, def.PaceBurst)
}
