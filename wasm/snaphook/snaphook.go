// Package snaphook plugs the wasm host into snapshot building: it is the
// snapshot.ChainHook that turns `classifiers[i].wasm` entries and the modules of
// `pluginsDir` into chain links, and it builds `pools.*.scoring.wasm` scorers.
//
// It lives apart from package wasm because it needs snapshot, which sits above
// wasm. The daemon makes one Hook for its lifetime and passes it in
// snapshot.Options.Hooks; every reload then asks the same host, so unchanged
// modules (same sha256) keep their compiled form and warm pool.
package snaphook

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/gatectl/gatectl/balance"
	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
)

// Hook is a snapshot.ChainHook backed by one wasm.Host. The host is made on first
// use, with its compilation cache under the first config's stateDir; it also loads
// the modules of `balances[i].wasm` sources (snapshot.BalanceHook) and reports the
// plugins' counters (PluginStats). A later config with another stateDir keeps the
// first host.
//
// Each build gets handles of its own (wasm.Host.Load), even on modules an earlier
// snapshot holds: the snapshot owns them and closes them with itself, and a module
// is unloaded when its last handle goes. A Hook is safe for concurrent use; Close
// it (closing the host) once no snapshot it built is in use.
type Hook struct {
	opts wasm.HostOptions

	mu   sync.Mutex
	host *wasm.Host
}

// New returns a hook; opts.CacheDir, when empty, is taken from the first config's
// stateDir.
func New(opts wasm.HostOptions) *Hook { return &Hook{opts: opts} }

// Host returns the hook's host, making it for cfg if needed.
func (h *Hook) Host(cfg *config.Config) (*wasm.Host, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.host != nil {
		return h.host, nil
	}
	opts := h.opts
	if opts.CacheDir == "" && cfg != nil && cfg.StateDir != "" {
		opts.CacheDir = wasm.CacheDir(cfg.Resolve(cfg.StateDir))
	}
	host, err := wasm.NewHost(opts)
	if err != nil {
		return nil, err
	}
	h.host = host
	return host, nil
}

// BalanceModules implements snapshot.BalanceHook: the "wasm" balance sources
// load their modules on the hook's host.
func (h *Hook) BalanceModules(cfg *config.Config) (balance.ModuleHost, error) {
	host, err := h.Host(cfg)
	if err != nil {
		return nil, err
	}
	return host, nil
}

// PluginStats reports the counters of every plugin on the hook's host, for
// metrics; nil before the host is made.
func (h *Hook) PluginStats() []wasm.PluginStat {
	h.mu.Lock()
	host := h.host
	h.mu.Unlock()
	if host == nil {
		return nil
	}
	return host.PluginStats()
}

// ClassifierFor implements snapshot.ChainHook for `classifiers[i].wasm`: the
// module is loaded with the entry's config (for gate_init) and its golden cases
// are run; a failing case refuses the snapshot.
func (h *Hook) ClassifierFor(ctx context.Context, cfg *config.Config, i int, prev *snapshot.Snapshot) ([]engine.Classifier, []string, bool, error) {
	ref := cfg.Classifiers[i]
	if ref.Wasm == "" {
		return nil, nil, false, nil
	}
	host, err := h.Host(cfg)
	if err != nil {
		return nil, nil, true, err
	}
	path := cfg.Resolve(ref.Wasm)
	c, err := wasm.NewClassifier(ctx, host, path, wasm.ClassifierOptions{Config: ref.Config, Cases: ref.Cases, Limits: limitsOf(ref.Limits)})
	if err != nil {
		return nil, []string{path}, true, err
	}
	return []engine.Classifier{c}, []string{path}, true, nil
}

// DirClassifiers implements snapshot.ChainHook: the classifiers dropped into
// pluginsDir, by file name (wasm.LoadDir).
func (h *Hook) DirClassifiers(ctx context.Context, cfg *config.Config, prev *snapshot.Snapshot) ([]engine.Classifier, []string, error) {
	if cfg.PluginsDir == "" {
		return nil, nil, nil
	}
	dir := cfg.Resolve(cfg.PluginsDir)
	files := modules(dir)
	if len(files) == 0 {
		return nil, nil, nil // no host (and no cache dir) for an empty directory
	}
	host, err := h.Host(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := wasm.LoadDir(ctx, host, dir, wasm.DirOptions{Limits: limitsOf(cfg.PluginLimits)})
	if err != nil {
		return nil, files, err
	}
	links := make([]engine.Classifier, len(cs))
	for i, c := range cs {
		links[i] = c
	}
	return links, files, nil
}

// ScorerFor builds the scorer of `pools.<pool>.scoring.wasm`. The snapshot's
// pool building calls it; the returned files are the module.
func (h *Hook) ScorerFor(ctx context.Context, cfg *config.Config, pool string, prev *snapshot.Snapshot) (engine.Scorer, []string, error) {
	p, ok := cfg.Pools[pool]
	if !ok || p.Scoring.Wasm == "" {
		return nil, nil, fmt.Errorf("pools.%s.scoring: not a wasm scorer", pool)
	}
	host, err := h.Host(cfg)
	if err != nil {
		return nil, nil, err
	}
	path := cfg.Resolve(p.Scoring.Wasm)
	s, err := wasm.NewScorer(ctx, host, path, wasm.ScorerOptions{})
	if err != nil {
		return nil, []string{path}, fmt.Errorf("pools.%s.scoring.wasm: %w", pool, err)
	}
	return s, []string{path}, nil
}

// Close closes the host and every plugin.
func (h *Hook) Close(ctx context.Context) error {
	h.mu.Lock()
	host := h.host
	h.host = nil
	h.mu.Unlock()
	if host == nil {
		return nil
	}
	return host.Close(ctx)
}

// modules lists the *.wasm files of dir, sorted.
func modules(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wasm") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// limitsOf converts a config entry's limits; zero fields keep the host's defaults.
func limitsOf(l config.PluginLimits) wasm.Limits {
	return wasm.Limits{Timeout: l.Timeout, MemoryPages: uint32(l.MemoryPages), MaxBodyBytes: l.MaxBodyBytes, MaxOutputBytes: l.MaxOutputBytes}
}

var (
	_ snapshot.ChainHook   = (*Hook)(nil)
	_ snapshot.ScorerHook  = (*Hook)(nil)
	_ snapshot.BalanceHook = (*Hook)(nil)
	// The snapshot releases the classifiers the hook gives it through io.Closer,
	// found by type assertion: without Close their handles would leak silently.
	_ io.Closer = (*wasm.Classifier)(nil)
)
