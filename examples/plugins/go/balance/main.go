//go:build wasip1

// Command balance is a balance parser as a gate/v1 plugin: the host GETs
// OpenRouter's credits endpoint (https://openrouter.ai/api/v1/credits, with the
// management key from apiKeyEnv in a header) and hands the answer over; this
// module turns {"data": {"total_credits": 100.5, "total_usage": 25.75}} into a
// reading {"remaining": 74.75}. Any other status is no reading.
//
// Config (gate_init): {"reserve": 0} — credits held back from what is reported.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o balance.wasm ./balance
package main

import (
	"encoding/json"
	"strconv"

	"github.com/gatectl/gatectl/examples/plugins/go/gate"
)

func main() {}

//go:wasmexport gate_abi_v1
func abiV1() {}

var reserve float64

//go:wasmexport gate_init
func initConfig(n int32) int32 {
	var cfg struct {
		Reserve float64 `json:"reserve"`
	}
	if err := json.Unmarshal(gate.Input(n), &cfg); err != nil {
		return gate.Error
	}
	reserve = cfg.Reserve
	return gate.OK
}

type input struct {
	NowMs int64 `json:"nowMs"`
	Fetch struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"fetch"`
}

type credits struct {
	Data struct {
		TotalCredits *float64 `json:"total_credits"`
		TotalUsage   *float64 `json:"total_usage"`
	} `json:"data"`
}

//go:wasmexport gate_balance
func parse(n int32) int32 {
	var in input
	if err := json.Unmarshal(gate.Input(n), &in); err != nil {
		return gate.Error
	}
	if in.Fetch.Status != 200 {
		gate.Log(gate.LevelWarn, "credits endpoint answered "+strconv.Itoa(in.Fetch.Status))
		return gate.Abstain // no reading
	}
	var c credits
	if err := json.Unmarshal([]byte(in.Fetch.Body), &c); err != nil || c.Data.TotalCredits == nil || c.Data.TotalUsage == nil {
		gate.Log(gate.LevelWarn, "credits body lacks data.total_credits or data.total_usage")
		return gate.Error
	}
	out, _ := json.Marshal(map[string]float64{"remaining": *c.Data.TotalCredits - *c.Data.TotalUsage - reserve})
	if !gate.Output(out) {
		return gate.Error
	}
	return gate.OK
}
