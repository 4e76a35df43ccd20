package snaphook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
)

// A `balances[i].wasm` source loads its module on the hook's host, passed down
// through snapshot building: without a hook there is no host, and the entry fails.
func TestWasmBalanceLoadsOnTheHookHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	copyFile(t, "../../testdata/plugins/echo.wasm", filepath.Join(dir, "echo.wasm"))
	cfgPath := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfgPath, []byte(`
stateDir: state
providers:
  beta: {kind: openai, baseURL: "https://beta.example/v1"}
balances:
  - provider: beta
    wasm: {module: echo.wasm, url: "`+srv.URL+`"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	_, err := snapshot.Load(ctx, cfgPath, snapshot.Options{})
	if err == nil || !strings.Contains(err.Error(), "balances[0].wasm: WebAssembly balance sources need a plugin host") {
		t.Fatalf("without a hook: err = %v", err)
	}

	hook := New(wasm.HostOptions{})
	defer hook.Close(ctx)
	if hook.PluginStats() != nil {
		t.Errorf("stats before the host was made: %v", hook.PluginStats())
	}
	s, err := snapshot.Load(ctx, cfgPath, snapshot.Options{Hooks: []snapshot.ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Balances.Source("beta").Source().(*wasm.Balance); !ok {
		t.Fatalf("source = %T", s.Balances.Source("beta").Source())
	}
	s.Balances.Refresh(ctx, []string{"beta"})
	if r, ok := s.Balances.Last("beta"); !ok || r.Remaining == nil || *r.Remaining != 7 {
		t.Fatalf("reading = %+v, %v", r, ok)
	}
	stats := hook.PluginStats()
	if len(stats) != 1 || stats[0].Kind != wasm.KindBalance || stats[0].Stats.Calls != 1 {
		t.Errorf("plugin stats = %+v", stats)
	}
}
