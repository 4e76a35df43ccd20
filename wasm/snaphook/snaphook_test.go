package snaphook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// chain that asks them before the built-in rules; reloads reuse the modules.
func TestSnapshotWithPlugins(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "plugins"), 0o755)
	copyFile(t, "../../testdata/plugins/octafuse-wat.wasm", filepath.Join(dir, "octafuse.wasm"))
	copyFile(t, "../../testdata/plugins/switch.wasm", filepath.Join(dir, "plugins", "switch.wasm"))
	cfgPath := filepath.Join(dir, "gatectl.yaml")
	os.WriteFile(cfgPath, []byte(`
stateDir: state
pluginsDir: plugins
pluginLimits: {timeout: 1s} # as below: the dropped-in module's first call under -race may pass 2 ms
classifiers:
  - wasm: octafuse.wasm
    limits: {timeout: 1s} # the default 2 ms is a production bound; under -race on a loaded CI machine a first call can exceed it
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
	found := false
	for _, l := range s1.Chain.Links() {
		if c, ok := l.(*wasm.Classifier); ok && c.Name() == "wasm/switch.wasm" {
			found = true
			if got := c.Plugin().Limits().Timeout; got != time.Second {
				t.Errorf("dropped-in plugin's deadline = %s, want pluginLimits.timeout 1s", got)
			}
		}
	}
	if !found {
		t.Error("no wasm/switch.wasm classifier among the links")
	}
	if _, err := os.Stat(filepath.Join(dir, "state", wasm.CacheSubdir)); err != nil {
		t.Errorf("no compilation cache under stateDir: %v", err)
	}
	host, _ := hook.Host(nil)
	compiles := host.Stats().Compiles

	// Two reloads, each closing the snapshot it replaced: nothing recompiled, and
	// the modules stay loaded for the snapshot in force.
	opts.Prev = s1
	s2, err := snapshot.Load(ctx, cfgPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	s1.Close()
	opts.Prev = s2
	s3, err := snapshot.Load(ctx, cfgPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if st := host.Stats(); st.Compiles != compiles || st.Plugins != 2 {
		t.Errorf("after reloads: %+v (compiles before: %d)", st, compiles)
	}
	s3.Close()

	// A failing golden case refuses the snapshot, naming the entry.
	os.WriteFile(cfgPath, []byte(`
classifiers:
  - wasm: octafuse.wasm
    limits: {timeout: 1s} # the default 2 ms is a production bound; under -race on a loaded CI machine a first call can exceed it
    cases:
      - input: {status: 200, body: '{"code":"OCTA_BUSY"}'}
        expect: {class: QUOTA}
`), 0o644)
	_, err = snapshot.Load(ctx, cfgPath, opts)
	if err == nil || !strings.Contains(err.Error(), "classifiers[0]: wasm: octafuse.wasm: cases[0]: golden case failed: got OVERLOADED") {
		t.Errorf("err = %v", err)
	}
}

// Reloads through the manager close each replaced snapshot's handles: modules the
// new snapshot keeps stay loaded and answer, a module it drops is unloaded, and
// closing the manager releases the rest.
func TestReloadReleasesOnlyWhatTheNewSnapshotDropped(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "plugins"), 0o755)
	copyFile(t, "../../testdata/plugins/octafuse-wat.wasm", filepath.Join(dir, "octafuse.wasm"))
	copyFile(t, "../../testdata/plugins/switch.wasm", filepath.Join(dir, "plugins", "switch.wasm"))
	cfgPath := filepath.Join(dir, "gatectl.yaml")
	// A generous call deadline: the production 2 ms can pass on a loaded CI
	// machine, and the chain then asks the next link (switch.wasm).
	withOcta := "pluginsDir: plugins\nclassifiers:\n  - wasm: octafuse.wasm\n    limits: {timeout: 1s}\n"
	os.WriteFile(cfgPath, []byte(withOcta), 0o644)
	hook := New(wasm.HostOptions{})
	defer hook.Close(context.Background())
	ctx := context.Background()
	m, err := snapshot.NewManager(ctx, cfgPath, snapshot.Options{Hooks: []snapshot.ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := hook.Host(nil)
	compiles := host.Stats().Compiles
	octa := engine.Failure{Status: 200, Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`}
	for i := range 3 {
		old := m.Current()
		if err := m.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if st := host.Stats(); st.Plugins != 2 || st.Compiles != compiles {
			t.Fatalf("reload %d: %+v (compiles before: %d)", i, st, compiles)
		}
		// The replaced snapshot's links still answer: the module lives on in the new one.
		for _, s := range []*snapshot.Snapshot{old, m.Current()} {
			if v, _, err := s.Chain.Classify(ctx, &octa); err != nil || v.By != "wasm/octafuse.wasm" {
				t.Fatalf("reload %d: verdict %+v, %v", i, v, err)
			}
		}
	}
	os.WriteFile(cfgPath, []byte("pluginsDir: plugins\n"), 0o644)
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st := host.Stats(); st.Plugins != 1 {
		t.Errorf("after dropping octafuse: %+v, want 1 plugin", st)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := host.Stats(); st.Plugins != 0 || st.Modules != 0 {
		t.Errorf("after Manager.Close: %+v, want nothing loaded", st)
	}
}
