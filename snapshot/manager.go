package snapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
)

// Manager holds the current snapshot and replaces it on reload. Current is a
// single atomic load: the request path never blocks on a reload.
type Manager struct {
	path   string // the config file; "" for the embedded default
	opts   Options
	logger hclog.Logger

	cur atomic.Pointer[Snapshot]

	mu     sync.Mutex // serialises reloads and guards onSwap, onError and closed
	closed bool       // Close was called: no reload swaps any more
	onSwap []func(old, new *Snapshot)
	onErr  []func(error)
	// Reloads and failures are counted for metrics.
	reloads  atomic.Uint64
	failures atomic.Uint64
	lastErr  atomic.Pointer[string]
	// pending are the files a config that failed to build refers to (a rule file
	// not written yet, say): the watcher watches them too, so creating one retries.
	pending atomic.Pointer[[]string]
	// verdict is what OnVerdict registered; every snapshot's chain calls it.
	verdict atomic.Pointer[func(*engine.Failure, engine.Verdict)]
	// classifierErr is what OnClassifierError registered.
	classifierErr atomic.Pointer[func(link string, err error)]
	// overlay turns the file's config into the one in force (SetOverlay); guarded by mu.
	overlay func(file *config.Config) (*config.Config, error)
}

// SetOverlay registers f to turn each config loaded from the file into the one
// the snapshot is built from: the server's runtime settings over the file's. It
// applies from the next Reload or Rebuild. f must not change its argument; an
// error from it fails that reload (the old snapshot stays).
func (m *Manager) SetOverlay(f func(file *config.Config) (*config.Config, error)) {
	m.mu.Lock()
	m.overlay = f
	m.mu.Unlock()
}

// Rebuild builds a new snapshot from the file's config as the current snapshot
// has it (the file is not read again) through the overlay, and swaps it in as
// Reload does: the OnSwap callbacks run, the old snapshot is closed; on failure
// the old one stays and the error is returned (not counted as a failed reload).
// The runtime settings API calls it after a change.
func (m *Manager) Rebuild(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	old := m.cur.Load()
	s, err := m.build(ctx, old, old.File)
	if err != nil {
		return err
	}
	m.swap(old, s)
	m.logger.Info("runtime settings applied", "version", s.Version)
	return nil
}

// build makes the snapshot of file through the overlay, beside old. m.mu is held.
func (m *Manager) build(ctx context.Context, old *Snapshot, file *config.Config) (*Snapshot, error) {
	opts := m.opts
	opts.Prev = old
	cfg := file
	if m.overlay != nil {
		var err error
		if cfg, err = m.overlay(file); err != nil {
			return nil, err
		}
	}
	s, err := Build(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	s.File = file
	return s, nil
}

// swap makes s current, runs the OnSwap callbacks and releases old. m.mu is held.
func (m *Manager) swap(old, s *Snapshot) {
	m.cur.Store(s)
	for _, f := range m.onSwap {
		f(old, s)
	}
	// A request that loaded old just before the swap may still be using it: a
	// wasm handle closed under it answers while its module lives on in s, and
	// fails over to the next link otherwise; balance readings come from Current.
	if err := old.closeExcept(s); err != nil {
		m.logger.Warn("releasing the replaced configuration failed", "version", old.Version, "error", err)
	}
}

// NewManager loads path and builds the first snapshot; it fails when that does.
func NewManager(ctx context.Context, path string, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	m := &Manager{path: path, logger: opts.Logger.Named("reload")}
	if prev := opts.OnVerdict; prev == nil {
		opts.OnVerdict = m.observe
	} else {
		opts.OnVerdict = func(f *engine.Failure, v engine.Verdict) { prev(f, v); m.observe(f, v) }
	}
	if prev := opts.OnClassifierError; prev == nil {
		opts.OnClassifierError = m.classifierError
	} else {
		opts.OnClassifierError = func(link string, err error) { prev(link, err); m.classifierError(link, err) }
	}
	m.opts = opts
	s, err := Load(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	m.cur.Store(s)
	return m, nil
}

// OnVerdict registers f to see every verdict the chain of every snapshot (the
// current one and those later reloads build) decides, from the goroutine that
// classified. A later registration replaces an earlier one. The server records
// the failures that fell through to a catch-all rule with it: the proxy and the
// decision API both classify through the snapshot's chain.
func (m *Manager) OnVerdict(f func(*engine.Failure, engine.Verdict)) {
	m.verdict.Store(&f)
}

func (m *Manager) observe(f *engine.Failure, v engine.Verdict) {
	if h := m.verdict.Load(); h != nil && *h != nil {
		(*h)(f, v)
	}
}

// OnClassifierError registers f to see every run-time error of a classifier in
// the chain of every snapshot (a trapped plugin, a rule whose expression
// failed), from the goroutine that classified. The chain skips such a link and
// asks the next; the server counts and logs the errors with it. A later
// registration replaces an earlier one.
func (m *Manager) OnClassifierError(f func(link string, err error)) {
	m.classifierErr.Store(&f)
}

func (m *Manager) classifierError(link string, err error) {
	if h := m.classifierErr.Load(); h != nil && *h != nil {
		(*h)(link, err)
	}
}

// Current returns the snapshot in force.
func (m *Manager) Current() *Snapshot { return m.cur.Load() }

// OnSwap registers f to run after each successful swap (to reconfigure the
// ledger, the planner and the pools' runtime, which outlive snapshots).
func (m *Manager) OnSwap(f func(old, new *Snapshot)) {
	m.mu.Lock()
	m.onSwap = append(m.onSwap, f)
	m.mu.Unlock()
}

// OnError registers f to run after each failed reload.
func (m *Manager) OnError(f func(error)) {
	m.mu.Lock()
	m.onErr = append(m.onErr, f)
	m.mu.Unlock()
}

// Stats reports how many reloads succeeded and failed, and the error of the last
// reload when it failed ("" once a later one succeeded).
func (m *Manager) Stats() (reloads, failures uint64, lastErr string) {
	if p := m.lastErr.Load(); p != nil {
		lastErr = *p
	}
	return m.reloads.Load(), m.failures.Load(), lastErr
}

// ErrClosed is what Reload returns once the manager is closed.
var ErrClosed = errors.New("snapshot: manager closed")

// Reload builds a new snapshot from the files as they are now and swaps it in,
// then runs the OnSwap callbacks and closes the old snapshot (what the new one
// shares with it stays open: see Snapshot). On any failure the old snapshot stays
// and the error (naming its path) is returned, logged and counted. Besides what
// Load refuses (an empty config file among it), a reload that would swap the
// file's own providers for the embedded default's is refused: see checkReload.
// It is what SIGHUP and the watcher call.
func (m *Manager) Reload(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	old := m.cur.Load()
	cfg, err := config.Load(m.path)
	if err == nil {
		err = checkReload(old.File, cfg)
	}
	var s *Snapshot
	if err == nil {
		s, err = m.build(ctx, old, cfg)
	}
	if err != nil {
		m.failures.Add(1)
		msg := err.Error()
		m.lastErr.Store(&msg)
		m.logger.Error("reload failed: keeping the previous configuration", "config", m.path, "error", err)
		if cfg, cerr := config.Load(m.path); cerr == nil {
			refs := referencedFiles(cfg)
			m.pending.Store(&refs)
		}
		for _, f := range m.onErr {
			f(err)
		}
		return err
	}
	m.pending.Store(nil)
	m.lastErr.Store(nil) // the error was the latest word; now the running config is the file's
	m.reloads.Add(1)
	m.logger.Info("reloaded", "config", m.path, "version", s.Version, "files", len(s.Files))
	for _, w := range s.Warnings {
		m.logger.Warn("config warning", "warning", w)
	}
	m.swap(old, s)
	return nil
}

// checkReload refuses a reload that would swap the running file's own providers
// for the embedded default's: the new file has no providers section while the
// running one had. That is what a truncated or half-written file looks like (an
// empty file is refused by config itself), and loading it would send every
// request for a configured provider to "unknown model" at once. Removing the
// section on purpose takes a restart. A file that keeps its providers section
// but lists fewer is an edit like any other: a pool or model limit still naming
// a removed provider is refused by the config's own cross-check.
func checkReload(running, next *config.Config) error {
	if running == nil || running.DefaultProviders || !next.DefaultProviders {
		return nil
	}
	return config.Errors{{File: next.Path, Path: "providers",
		Msg: fmt.Sprintf("the file no longer has a providers section: reloading it would replace the configured providers (%s) with the embedded default's; "+
			"put the section back, or restart gatectl to run without it", strings.Join(running.ProviderNames(), ", "))}}
}

// Close closes the snapshot in force and stops reloads: Reload then returns
// ErrClosed. Call it once nothing serves requests from the manager any more (after
// the server's shutdown). Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.cur.Load().Close()
}

// WatchOptions tune Watch.
type WatchOptions struct {
	Debounce time.Duration // wait for a burst of writes to end (250ms)
	Poll     time.Duration // backstop: compare fingerprints this often (5s)
	Ready    func()        // called once the watches are set, before any change is awaited
	// Attempted is called after each reload the watcher starts, with its result,
	// once the watcher is armed again for the next change.
	Attempted func(error)
}

// Watch reloads when the config file, a rule file or a plugin changes, until ctx
// ends. It watches directories (editors replace files by renaming), debounces
// bursts, and polls file fingerprints as a backstop for filesystems where
// notifications are lost.
func (m *Manager) Watch(ctx context.Context, o WatchOptions) error {
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Close()
	watched := map[string]bool{}
	rewatch := func() {
		for _, d := range m.dirs() {
			if !watched[d] {
				if err := w.Add(d); err == nil {
					watched[d] = true
				}
			}
		}
	}
	rewatch()
	fp := m.fingerprint()
	settling := fp // the last sample the debounce took
	poll := time.NewTicker(o.Poll)
	defer poll.Stop()
	if o.Ready != nil {
		o.Ready()
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if m.relevant(ev.Name) {
				debounce = time.After(o.Debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.logger.Warn("file watcher error; the poll backstop continues", "error", err)
		case <-poll.C:
			if now := m.fingerprint(); now != fp {
				debounce = time.After(o.Debounce)
			}
		case <-debounce:
			debounce = nil
			// A file being written in pieces (truncated, then written) can
			// parse at a pause, and a reload of it drops the runtime settings
			// its missing keys seem to change, for good. Reload once the files
			// held still for a whole debounce: two samples alike.
			if now := m.fingerprint(); now != settling {
				settling = now
				debounce = time.After(o.Debounce)
				continue
			}
			err := m.Reload(ctx) // logged; the old snapshot stays on failure
			fp = m.fingerprint()
			settling = fp
			rewatch()
			if o.Attempted != nil {
				o.Attempted(err)
			}
		}
	}
}

// referencedFiles are the files a config names: rule files and wasm modules.
func referencedFiles(cfg *config.Config) []string {
	var out []string
	for _, c := range cfg.Classifiers {
		for _, f := range []string{c.Rules, c.Wasm} {
			if f != "" {
				out = append(out, cfg.Resolve(f))
			}
		}
	}
	for _, name := range cfg.PoolOrder {
		if w := cfg.Pools[name].Scoring.Wasm; w != "" {
			out = append(out, cfg.Resolve(w))
		}
	}
	return out
}

// watchedFiles are the files the snapshot read, and those a failed config named.
func (m *Manager) watchedFiles() []string {
	files := append([]string(nil), m.Current().Files...)
	if p := m.pending.Load(); p != nil {
		files = append(files, *p...)
	}
	return files
}

// dirs are the directories to watch: those of every watched file, and the
// plugins directory.
func (m *Manager) dirs() []string {
	set := map[string]bool{}
	s := m.Current()
	for _, f := range m.watchedFiles() {
		set[filepath.Dir(f)] = true
	}
	if d := pluginsDir(s.Config); d != "" {
		set[d] = true
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func pluginsDir(c *config.Config) string {
	if c == nil || c.PluginsDir == "" {
		return ""
	}
	return c.Resolve(c.PluginsDir)
}

// relevant: a file the snapshot read, or a module in the plugins directory.
func (m *Manager) relevant(name string) bool {
	s := m.Current()
	abs, _ := filepath.Abs(name)
	// Kubernetes updates a mounted ConfigMap by renaming its ..data link
	// over the old one: the files' own names, links into it, see no event.
	swap := filepath.Base(abs) == "..data"
	for _, f := range m.watchedFiles() {
		if fa, _ := filepath.Abs(f); fa == abs || swap && filepath.Dir(fa) == filepath.Dir(abs) {
			return true
		}
	}
	if d := pluginsDir(s.Config); d != "" {
		da, _ := filepath.Abs(d)
		return filepath.Dir(abs) == da && strings.HasSuffix(name, ".wasm")
	}
	return false
}

// fingerprint summarises size and modification time of every watched file and
// the plugins directory's listing.
func (m *Manager) fingerprint() [32]byte {
	s := m.Current()
	h := sha256.New()
	files := m.watchedFiles()
	if d := pluginsDir(s.Config); d != "" {
		matches, _ := filepath.Glob(filepath.Join(d, "*.wasm"))
		files = append(files, matches...)
	}
	sort.Strings(files)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(h, "%s:missing\n", f)
			continue
		}
		fmt.Fprintf(h, "%s:%d:%d\n", f, st.Size(), st.ModTime().UnixNano())
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}
