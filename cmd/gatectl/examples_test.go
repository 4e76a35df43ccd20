package main

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/gatectl/gatectl/internal/testenv"
)

// examples/pools runs as-is: real balance scripts (python3 subprocesses) read
// balances.json, the pool scores them and draws in proportion.
func TestExamplePoolsRunAsIs(t *testing.T) {
	testenv.Tool(t, "python3", "the example's balance scripts need it; Debian: apt-get install -y python3")
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	if err := app.Run([]string{"gatectl", "routes", "--offline", "--config", "../../examples/pools/gatectl.yaml", "--draw", "20000", "--format", "json"}); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var rep struct {
		Pools []struct {
			Routes []struct {
				Provider string  `json:"provider"`
				Score    float64 `json:"score"`
				Usable   bool    `json:"usable"`
			} `json:"routes"`
		} `json:"pools"`
		Draws map[string][]int `json:"draws"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := map[string]float64{"deepseek": 0.75, "openrouter": 0.475, "moonshot": 4.0 / 35}
	var total float64
	for _, s := range want {
		total += s
	}
	draws := rep.Draws["medium"]
	if len(rep.Pools) != 1 || len(draws) != 3 {
		t.Fatalf("report %s", out.String())
	}
	for i, r := range rep.Pools[0].Routes {
		if math.Abs(r.Score-want[r.Provider]) > 1e-9 || !r.Usable {
			t.Errorf("%s: score %g usable %v, want %g", r.Provider, r.Score, r.Usable, want[r.Provider])
		}
		share := float64(draws[i]) / 20000
		if math.Abs(share-want[r.Provider]/total) > 0.02 {
			t.Errorf("%s drawn %.3f of the time, want %.3f", r.Provider, share, want[r.Provider]/total)
		}
	}
}
