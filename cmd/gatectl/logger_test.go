package main

import (
	"context"
	"github.com/gatectl/gatectl/internal/testlog"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
)

// The daemon's wiring names each component's logger once: the wasm host logs
// under gatectl.wasm and a balance source under gatectl.balance, never
// gatectl.wasm.wasm or gatectl.balance.balance.
func TestComponentLoggersAreNamedOnce(t *testing.T) {
	dir := t.TempDir()
	mod, err := os.ReadFile(filepath.Join(pluginsTestdata, "octafuse-wat.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "octafuse.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(`
stateDir: state
providers:
  beta: {kind: openai, baseURL: "https://beta.example/v1"}
classifiers:
  - wasm: octafuse.wasm
balances:
  - provider: beta
    script: [sh, -c, 'echo ''{"remaining": 5}''']
`), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := &testlog.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Debug, Output: buf})
	ctx := context.Background()
	hook := pluginHook(logger, "")
	defer hook.Close(ctx)
	opts := snapshotOptions(logger, hook)
	s, err := snapshot.Load(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Balances.Refresh(ctx, []string{"beta"})

	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`\] (gatectl[\w.]*):`).FindAllStringSubmatch(buf.String(), -1) {
		names[m[1]] = true
	}
	if !names["gatectl.wasm"] || !names["gatectl.balance"] || len(names) != 2 {
		t.Errorf("logger names = %v, want gatectl.wasm and gatectl.balance:\n%s", names, buf)
	}
}
