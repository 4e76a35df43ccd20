package snaphook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A config naming a wasm classifier (with cases) and a plugins directory builds a
// chain that asks them before the built-in rules; reloads reuse the modules and
// release what the old snapshots held.
func TestSnapshotWithPlugins(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "plugins"), 0o755)
	copyFile(t, "../../testdata/plugins/octafuse-wat.wasm", filepath.Join(dir, "octafuse.wasm"))
	copyFile(t, "../../testdata/plugins/switch.wasm", filepath.Join(dir, "plugins", "switch.wasm"))
	cfgPath := filepath.Join(dir, "gatectl.yaml")
	os.WriteFile(cfgPath, []byte(`
stateDir: state
pluginsDir: plugins
classifiers:
  - wasm: octafuse.wasm
    cases:
      - input: {status: 200, body: '{"code":"OCTA_BUSY","wait_ms":7}'}
        expect: {class: OVERLOADED, retryAfterMs: 7}
`), 0o644)
	hook := New(wasm.HostOptions{})
	defer hook.Close(context.Background())
	opts := snapshot.Options{Hooks: []snapshot.ChainHook{hook}}
	ctx := context.Background()
	s1, err := snapshot.Load(ctx, cfgPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range s1.Chain.Links() {
		names = append(names, l.Name())
	}
	if got := strings.Join(names, ","); !strings.HasPrefix(got, "wasm/octafuse.wasm,wasm/switch.wasm,") {
		t.Errorf("chain = %s", got)
	}
	v, _, _ := s1.Chain.Classify(ctx, &engine.Failure{Status: 200, Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`})
	if v.By != "wasm/octafuse.wasm" || *v.RetryAfterMs != 1500 {
		t.Errorf("verdict = %+v", v)
	}
	v, _, _ = s1.Chain.Classify(ctx, &engine.Failure{Status: 500, Body: "x"})
	if v.By != "wasm/switch.wasm" {
		t.Errorf("dropped-in plugin did not decide: %+v", v)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", wasm.CacheSubdir)); err != nil {
		t.Errorf("no compilation cache under stateDir: %v", err)
	}
	host, _ := hook.Host(nil)
	compiles := host.Stats().Compiles

	// Two reloads: nothing recompiled; the first snapshot's handles are released.
	opts.Prev = s1
	s2, err := snapshot.Load(ctx, cfgPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Prev = s2
	if _, err := snapshot.Load(ctx, cfgPath, opts); err != nil {
		t.Fatal(err)
	}
	if st := host.Stats(); st.Compiles != compiles || st.Plugins != 2 {
		t.Errorf("after reloads: %+v (compiles before: %d)", st, compiles)
	}

	// A failing golden case refuses the snapshot, naming the entry.
	os.WriteFile(cfgPath, []byte(`
classifiers:
  - wasm: octafuse.wasm
    cases:
      - input: {status: 200, body: '{"code":"OCTA_BUSY"}'}
        expect: {class: QUOTA}
`), 0o644)
	_, err = snapshot.Load(ctx, cfgPath, opts)
	if err == nil || !strings.Contains(err.Error(), "classifiers[0]: wasm: octafuse.wasm: cases[0]: golden case failed: got OVERLOADED") {
		t.Errorf("err = %v", err)
	}
}
