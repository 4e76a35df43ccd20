package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DirOptions configure LoadDir.
type DirOptions struct {
	// Limits bound every classifier found; zero fields take the defaults.
	Limits Limits
}

// LoadDir loads every *.wasm file directly in dir that exports gate_classify as a
// classifier (no config, no cases), ordered by file name: the modules dropped into
// pluginsDir, which run before the built-in rules. Files exporting no
// gate_classify (a scorer, a balance parser) are skipped. A missing dir is empty.
//
// LoadDir is what a reload calls: a module whose bytes did not change comes back
// as a handle on the plugin already loaded (see Host.LoadBytes), keeping its
// compiled form and warm pool. Any file that fails (unreadable, bad wasm, a
// forbidden import, an instance that will not start) fails the whole call, every
// failure reported with its file name; the classifiers loaded so far are closed.
func LoadDir(ctx context.Context, h *Host, dir string, opts DirOptions) ([]*Classifier, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wasm: plugins dir: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
			if strings.HasSuffix(e.Name(), ".wasm") && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	var (
		out  []*Classifier
		errs []error
	)
	h.loadMu.Lock()
	for _, name := range names {
		path := filepath.Join(dir, name)
		c, err := h.loadDirEntry(ctx, path, name, opts.Limits)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		case c != nil:
			out = append(out, c)
		}
	}
	h.loadMu.Unlock()
	if len(errs) > 0 {
		for _, c := range out {
			c.Close()
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// loadDirEntry loads one file of LoadDir, or returns nil when it is no classifier.
// The caller holds loadMu; the module is compiled once whatever its kind.
func (h *Host) loadDirEntry(ctx context.Context, path, name string, limits Limits) (*Classifier, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, cfg, err := keyFor(bin, Options{Kind: KindClassify, Name: name, Limits: limits})
	if err != nil {
		return nil, err
	}
	if h.notClassifier(key.sum) {
		return nil, nil // seen before: a scorer or a balance parser
	}
	m, err := h.compile(ctx, name, bin, key.sum, key.limits.MemoryPages)
	if err != nil {
		return nil, err
	}
	defer h.release(m) // loadLocked takes its own reference
	if !m.info.Has(KindClassify) {
		h.rememberNotClassifier(key.sum)
		return nil, nil
	}
	p, err := h.loadLocked(ctx, bin, key, cfg)
	if err != nil {
		return nil, err
	}
	return ClassifierFor(p), nil
}

// maxSkipped bounds the memo of modules LoadDir found to be no classifier.
const maxSkipped = 256

// notClassifier reports whether LoadDir already found the module with this
// sha256 to export no gate_classify, so a reload need not compile it again.
func (h *Host) notClassifier(sum [32]byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.skipped[sum]
	return ok
}

func (h *Host) rememberNotClassifier(sum [32]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.skipped == nil || len(h.skipped) >= maxSkipped {
		h.skipped = map[[32]byte]struct{}{}
	}
	h.skipped[sum] = struct{}{}
}
