//go:build wasip1

// Command scorer is a pool scorer as a gate/v1 plugin: it scores a route by the
// share of its allowance left — the lowest remaining ÷ capacity × coefficient
// over its windows, else remaining ÷ capacity — and scores 0 a route with less
// than the configured floor left, so the draw avoids nearly spent routes
// altogether instead of merely preferring others.
//
// Config (gate_init): {"floor": 0.05} (the default).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o scorer.wasm ./scorer
package main

import (
	"encoding/json"

	"github.com/gatectl/gatectl/examples/plugins/go/gate"
)

func main() {}

//go:wasmexport gate_abi_v1
func abiV1() {}

var floor = 0.05

//go:wasmexport gate_init
func initConfig(n int32) int32 {
	var cfg struct {
		Floor *float64 `json:"floor"`
	}
	if err := json.Unmarshal(gate.Input(n), &cfg); err != nil {
		gate.Log(gate.LevelError, "config: "+err.Error())
		return gate.Error
	}
	if cfg.Floor != nil {
		floor = *cfg.Floor
	}
	return gate.OK
}

// input is a reading with the balance's settings beside it.
type input struct {
	Remaining *float64 `json:"remaining"`
	Windows   []struct {
		Name      string   `json:"name"`
		Remaining float64  `json:"remaining"`
		Capacity  *float64 `json:"capacity"`
	} `json:"windows"`
	Capacities   map[string]float64 `json:"capacities"`
	Coefficients map[string]float64 `json:"coefficients"`
	Capacity     *float64           `json:"capacity"`
}

//go:wasmexport gate_score
func score(n int32) int32 {
	var in input
	if err := json.Unmarshal(gate.Input(n), &in); err != nil {
		return gate.Error
	}
	best, scored := 0.0, false
	for _, w := range in.Windows {
		c := in.Capacities[w.Name]
		if w.Capacity != nil {
			c = *w.Capacity
		}
		if c <= 0 {
			continue
		}
		k, ok := in.Coefficients[w.Name]
		if !ok {
			k = 1
		}
		if s := w.Remaining / c * k; !scored || s < best {
			best, scored = s, true
		}
	}
	if !scored && in.Remaining != nil && in.Capacity != nil && *in.Capacity > 0 {
		best, scored = *in.Remaining / *in.Capacity, true
	}
	if !scored {
		return gate.Abstain // the route stays unscored
	}
	if best < floor {
		best = 0
	}
	out, _ := json.Marshal(map[string]float64{"score": best})
	if !gate.Output(out) {
		return gate.Error
	}
	return gate.OK
}
