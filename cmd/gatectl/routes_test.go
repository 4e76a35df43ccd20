package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine/pool"
)

const routesYAML = `
providers:
  gateway-a: {kind: openai, baseURL: https://a.example/v1}
  gateway-b: {kind: openai, baseURL: https://b.example/v1}
  gateway-c: {kind: openai, baseURL: https://c.example/v1}
pools:
  medium:
    routes:
      - {provider: gateway-a, model: flash-1, reasoningEffort: high}
      - {provider: gateway-b, model: flash-1, reasoningEffort: high}
      - {provider: gateway-c, model: flash-1}
  advice:
    midSessionSwitch: false
    routes:
      - {provider: gateway-a, model: model-max}
      - {provider: gateway-b, model: model-max}
balances:
  - provider: gateway-a
    script: [sh, -c, 'echo ''{"remaining": 2.94, "windows":[{"name":"five-hour","remaining":14,"capacity":14},{"name":"weekly","remaining":2.94,"capacity":35},{"name":"monthly","remaining":37.94}]}''']
    minimumRemaining: 1
    coefficients: {monthly: 0.25}
    capacities: {monthly: 40}
  - provider: gateway-b
    script: [sh, -c, 'echo ''{"remaining": 4}''']
    minimumRemaining: 1
    capacity: 20
  - provider: gateway-c
    script: [sh, -c, 'exit 3']
`

func runRoutes(t *testing.T, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(routesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		if a == "CONFIG" {
			args[i] = path
		}
	}
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"gatectl", "routes"}, args...))
	return out.String(), err
}

func TestRoutesOfflineText(t *testing.T) {
	out, err := runRoutes(t, "--offline", "--config", "CONFIG", "--draw", "1000", "--seed", "7")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pool medium\n",
		"pool advice (refuses mid-session switches: a started session waits on its route)\n",
		"gateway-a/flash-1@high", "five-hour 14/14*, weekly 2.94/35*, monthly 37.94*", "0.0840",
		"gateway-b/flash-1@high", "0.2000",
		"gateway-c/flash-1", "unscored",
		"DRAWS", "0 (0.0%)", // an unscored route is never drawn while a scored one is usable
		"no reading from gateway-c: balance: script failed: exit status 3",
		"* marks the windows the score weighs", // the legend of the *
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRoutesOfflineJSONOnePool(t *testing.T) {
	out, err := runRoutes(t, "advice", "--offline", "--config", "CONFIG", "--format", "json", "--draw", "300")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Pools []pool.PoolReport `json:"pools"`
		Draws map[string][]int  `json:"draws"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Pools) != 1 || rep.Pools[0].Name != "advice" || rep.Pools[0].MidSessionSwitch {
		t.Fatalf("pools %+v", rep.Pools)
	}
	r := rep.Pools[0].Routes
	if r[0].Score == nil || *r[0].Score != 2.94/35 || r[1].Score == nil || *r[1].Score != 0.2 || !r[0].Usable {
		t.Errorf("routes %+v", r)
	}
	if d := rep.Draws["advice"]; len(d) != 2 || d[0]+d[1] != 300 {
		t.Errorf("draws %v", d)
	}
}

func TestRoutesErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nope", "--offline", "--config", "CONFIG"}, `no such pool: "nope"`},
		{[]string{"--config", "CONFIG"}, "use --offline"},
		{[]string{"--offline", "--config", "CONFIG", "--format", "xml"}, "--format must be text or json"},
		{[]string{"a", "b", "--offline"}, "at most one POOL"},
	}
	for _, c := range cases {
		_, err := runRoutes(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("routes %v = %v, want %q", c.args, err, c.want)
		}
	}
	_, err := runRoutes(t, "nope", "--offline", "--config", "CONFIG")
	if !errors.Is(err, pool.ErrNoPool) {
		t.Errorf("unknown pool: %v is not ErrNoPool", err)
	}
}
