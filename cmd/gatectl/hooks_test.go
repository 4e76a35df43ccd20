package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/wasm"
)

// serve --state-dir moves the compilation cache with the state file: in the
// packaged deployments the config sits in a read-only directory, and the
// config's own stateDir resolves next to it.
func TestStateDirFlagHoldsTheCompilationCache(t *testing.T) {
	readOnly := filepath.Join(t.TempDir(), "etc")
	if err := os.WriteFile(readOnly, nil, 0o600); err != nil { // a file: nothing can be made under it
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = filepath.Join(readOnly, ".gatectl")
	flagDir := t.TempDir()
	hook := pluginHook(nil, flagDir)
	defer hook.Close(context.Background())
	if _, err := hook.Host(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(wasm.CacheDir(flagDir)); err != nil {
		t.Fatalf("the cache is not under --state-dir: %v", err)
	}
	// Without the flag the config's stateDir cannot be made: the plugins
	// still load, compiled in memory.
	other := pluginHook(nil, "")
	defer other.Close(context.Background())
	if _, err := other.Host(cfg); err != nil {
		t.Fatalf("a compilation cache that cannot be made stopped the host: %v", err)
	}
}
