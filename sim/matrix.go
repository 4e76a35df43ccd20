package sim

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// The matrix's dimensions: the target table, one run per combination.
var (
	MatrixStarts  = []float64{1, 2, 0.5} // gate.start
	MatrixOutside = []float64{0, 0.1}    // outside.share
)

// MatrixDuration is each run's default simulated time: an hour of 60 s windows
// keeps the whole matrix to a few seconds of CPU.
const MatrixDuration = time.Hour

// MatrixRow is one run of the matrix: the gate against one provider model,
// latency, start and outside share, with the oracle's utilization beside it.
type MatrixRow struct {
	Model    string  `json:"model"`
	Latency  bool    `json:"latency"` // the network delay applies (else 0)
	Start    float64 `json:"start"`   // the gate's start ÷ the truth
	Outside  float64 `json:"outside"` // the outside client's share of the true TPM
	Sessions int     `json:"sessions"`
	Demand   float64 `json:"demand"`
	// OracleUtilization is the oracle's utilization of the true limit on the same
	// trace: the reference. OracleMisses are the targets the oracle misses in
	// the same run (OracleTargets): those no learning can meet.
	OracleUtilization float64  `json:"oracleUtilization"`
	OracleMisses      []string `json:"oracleMisses"`
	// Utilization, RemainingUtilization and the rest are the gate's.
	Utilization                        float64  `json:"utilization"`
	RemainingUtilization               float64  `json:"remainingUtilization"`
	RateLimited                        int      `json:"rateLimited"`
	RateLimitedPerHourAfterConvergence *float64 `json:"rateLimitedPerHourAfterConvergence"` // null: never converged
	ConvergedAfterWindows              *int     `json:"convergedAfterWindows"`              // null: never converged
	LowestTrigger                      float64  `json:"lowestTrigger,omitempty"`
	Lost                               int      `json:"lost"`
	// Misses lists the targets this row fails (see Targets).
	Misses []string `json:"misses"`
}

// Matrix runs the gate (and the oracle, for reference) for every provider limit
// model × {no latency, latency} × MatrixStarts × MatrixOutside, from base. Rows
// vary sessions over 24–40 and demand over 1.4–1.6 deterministically. The latency
// rows use base.Network, or the default scenario's when base has none. The rows
// without outside traffic drop outside.until; those with it keep base's outside
// keys, but the built-in outside.callTokens no larger than provider.tpm. A row
// that still cannot run is refused before any run. Runs go in parallel; the
// result is the same in any order.
func Matrix(base Scenario) ([]MatrixRow, error) {
	scens, rows := matrixRuns(base)
	for i, s := range scens { // a row that cannot run is the scenario's to fix: said before any runs
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("matrix: the scenario cannot run as row %d (%s, start %g, outside.share %g): %w", i, rows[i].Model, rows[i].Start, rows[i].Outside, err)
		}
	}
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rep, err := RunModes(scens[i], ModeOracle, ModeGate)
			if err != nil {
				errs[i] = fmt.Errorf("matrix row %d (%s): %w", i, rows[i].Model, err)
				return
			}
			g := rep.Modes[ModeGate]
			r := &rows[i]
			o := rep.Modes[ModeOracle]
			r.OracleUtilization = o.Utilization
			r.OracleMisses = OracleTargets(*r, o)
			r.Utilization, r.RemainingUtilization = g.Utilization, g.RemainingUtilization
			r.RateLimited, r.Lost, r.LowestTrigger = g.RateLimited, g.Lost, g.LowestTrigger
			r.ConvergedAfterWindows, r.RateLimitedPerHourAfterConvergence = g.ConvergedAfterWindows, g.RateLimitedPerHourAfterConvergence
			r.Misses = Targets(*r)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// matrixRuns is the matrix's scenarios and their rows, before any run.
func matrixRuns(base Scenario) ([]Scenario, []MatrixRow) {
	lat := base.Network
	if lat.Delay == 0 && lat.Jitter == 0 {
		lat = DefaultScenario().Network
	}
	var scens []Scenario
	var rows []MatrixRow
	for _, model := range LimitModels {
		for _, latency := range []bool{false, true} {
			for _, start := range MatrixStarts {
				for _, out := range MatrixOutside {
					i := len(rows)
					s := base
					s.Provider.Model = model
					s.Network = NetworkSpec{}
					if latency {
						s.Network = lat
					}
					s.Gate.Start, s.Gate.TPM, s.Gate.RPM = start, 0, 0
					s.Outside.Share = out
					if out == 0 {
						s.Outside.Until = 0 // no client to stop
					} else if s.Outside.CallTokens == DefaultScenario().Outside.CallTokens {
						// the built-in size: no larger than the limit it spends
						s.Outside.CallTokens = min(s.Outside.CallTokens, s.Provider.TPM)
					}
					s.Sessions = 24 + (i*7)%17             // 24 … 40
					s.Demand = 1.4 + 0.05*float64((i*3)%5) // 1.40 … 1.60
					scens = append(scens, s)
					rows = append(rows, MatrixRow{Model: model, Latency: latency, Start: start, Outside: out, Sessions: s.Sessions, Demand: s.Demand})
				}
			}
		}
	}
	return scens, rows
}

// Targets returns the targets a matrix row misses, as short labels:
//
//	start 1.0: util≥.93 (of the true TPM), ≤1/h (429s per hour after convergence), lost=0
//	start 2.0: conv≤3 (windows), 429s≤3 (in all)
//	start 0.5: conv≤10
//	outside:   remaining≥.90, no-false-trigger (the lowest trigger ≥ 95% of the
//	           capacity left to the gate)
//
// A row that never converged misses every convergence target.
func Targets(r MatrixRow) []string {
	var miss []string
	conv := r.ConvergedAfterWindows
	switch r.Start {
	case 1:
		if r.Utilization < 0.93 {
			miss = append(miss, "util≥.93")
		}
		if conv == nil || *r.RateLimitedPerHourAfterConvergence > 1 {
			miss = append(miss, "≤1/h")
		}
		if r.Lost != 0 {
			miss = append(miss, "lost=0")
		}
	case 2:
		if conv == nil || *conv > 3 {
			miss = append(miss, "conv≤3")
		}
		if r.RateLimited > 3 {
			miss = append(miss, "429s≤3")
		}
	case 0.5:
		if conv == nil || *conv > 10 {
			miss = append(miss, "conv≤10")
		}
	}
	if r.Outside > 0 {
		if r.RemainingUtilization < 0.90 {
			miss = append(miss, "remaining≥.90")
		}
		if r.LowestTrigger > 0 && r.LowestTrigger < 1-convergedBand {
			miss = append(miss, "no-false-trigger")
		}
	}
	return miss
}

// OracleTargets returns the targets of the row's run that the oracle (its
// metrics o) misses: those that judge what the admission achieves, not what
// the gate learned — util≥.93, ≤1/h (its 429s over the whole run: it has
// nothing to converge to) and lost=0 at start 1, 429s≤3 at start 2, and
// remaining≥.90 with outside traffic. A target the oracle misses, the gate's
// admission misses even when it knows the truth; the convergence and trigger
// targets have no oracle figure.
func OracleTargets(r MatrixRow, o Metrics) []string {
	var miss []string
	switch r.Start {
	case 1:
		if o.Utilization < 0.93 {
			miss = append(miss, "util≥.93")
		}
		if o.RateLimitedPerHour > 1 {
			miss = append(miss, "≤1/h")
		}
		if o.Lost != 0 {
			miss = append(miss, "lost=0")
		}
	case 2:
		if o.RateLimited > 3 {
			miss = append(miss, "429s≤3")
		}
	}
	if r.Outside > 0 && o.RemainingUtilization < 0.90 {
		miss = append(miss, "remaining≥.90")
	}
	return miss
}

// sharedWithOracle says whether the row's miss of target is one its oracle
// missed too. A gate that never converged misses `≤1/h` for that alone, which
// no oracle shares.
func sharedWithOracle(r MatrixRow, target string) bool {
	if target == "≤1/h" && r.ConvergedAfterWindows == nil {
		return false
	}
	return slices.Contains(r.OracleMisses, target)
}

// OracleLabels are the targets OracleTargets judges the oracle by.
var OracleLabels = []string{"util≥.93", "≤1/h", "lost=0", "429s≤3", "remaining≥.90"}

// TargetLabels are the labels Targets gives, in the order it checks them.
var TargetLabels = []string{"util≥.93", "≤1/h", "lost=0", "conv≤3", "429s≤3", "conv≤10", "remaining≥.90", "no-false-trigger"}

// MatrixTally sums a matrix against the targets: how many runs meet them all,
// how many more miss only targets the oracle misses in the same run, and how
// many runs miss each one.
type MatrixTally struct {
	Runs, Met int
	// OracleToo counts the runs that miss a target but none the oracle met
	// (sharedWithOracle): what they miss, the gate's admission misses too when
	// it knows the truth.
	OracleToo int
	Misses    []TargetMisses // TargetLabels order, targets no run missed left out
}

// TargetMisses is how many runs of a matrix miss one target, and of those, in
// how many the oracle missed it too.
type TargetMisses struct {
	Target    string
	Runs      int
	OracleToo int
}

// Tally sums rows against the targets.
func Tally(rows []MatrixRow) MatrixTally {
	t := MatrixTally{Runs: len(rows)}
	n, shared := map[string]int{}, map[string]int{}
	for _, r := range rows {
		if len(r.Misses) == 0 {
			t.Met++
		}
		own := 0 // misses the oracle did not share
		for _, m := range r.Misses {
			n[m]++
			if sharedWithOracle(r, m) {
				shared[m]++
			} else {
				own++
			}
		}
		if len(r.Misses) > 0 && own == 0 {
			t.OracleToo++
		}
	}
	for _, label := range TargetLabels {
		if n[label] > 0 {
			t.Misses = append(t.Misses, TargetMisses{label, n[label], shared[label]})
		}
	}
	return t
}
