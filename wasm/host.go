package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/internal/failurejson"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// CacheSubdir is where, under the config's stateDir, the host keeps wazero's
// compilation cache.
const CacheSubdir = "wasm-cache"

// CacheDir returns the compilation cache directory for stateDir ("" for none).
func CacheDir(stateDir string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(stateDir, CacheSubdir)
}

// HostOptions configure a Host. The zero value is a host without an on-disk
// cache, logging nowhere, on the system clock.
type HostOptions struct {
	// CacheDir holds wazero's on-disk compilation cache (see CacheDir); "" keeps
	// compiled code in memory only. The directory is created if missing.
	CacheDir string
	// Logger is the parent logger; the host logs as Named("wasm"), each plugin
	// With("plugin", name). nil discards.
	Logger hclog.Logger
	// Clock times quarantines and stamps a balance call's nowMs; nil is the system
	// clock. Call deadlines are real time whatever the clock.
	Clock engine.Clock
	// Stderr receives what modules write to stdout and stderr (a Go plugin's
	// panic message, say); nil discards it. `gatectl plugin check` sets it.
	Stderr io.Writer
}

// Host loads gate/v1 modules and runs them. Modules are compiled once per distinct
// content (sha256) and memory cap, through a compilation cache shared by every
// runtime the host makes (and, with CacheDir, by the next process). A loaded
// module becomes a Plugin: a pool of instances of one kind, with one config and
// one set of limits; loading the same bytes with the same kind, name, config and
// limits again returns a handle on the same plugin (same pool, same counters), so a
// reload that keeps a module keeps its warm instances.
//
// A Host is safe for concurrent use. Close it when done: that closes every plugin.
type Host struct {
	cache  wazero.CompilationCache
	logger hclog.Logger
	clock  engine.Clock
	stderr io.Writer

	loadMu sync.Mutex // serializes loads, so two loads of one module compile once

	mu       sync.Mutex // guards the fields below
	closed   bool
	modules  map[moduleKey]*module
	plugins  map[pluginKey]*shared
	compiles uint64                // CompileModule calls made (cache hits included)
	skipped  map[[32]byte]struct{} // modules LoadDir found to be no classifier
}

// moduleKey names one compiled form: the same bytes under the same memory cap.
type moduleKey struct {
	sum   [32]byte
	pages uint32
}

// module is one compiled module in its own runtime (the runtime carries the memory
// cap). refs counts the plugins using it; guarded by Host.mu.
type module struct {
	key  moduleKey
	refs int
	rt   wazero.Runtime
	cm   wazero.CompiledModule
	info *Info
}

// pluginKey is what makes two loads the same plugin.
type pluginKey struct {
	sum    [32]byte
	kind   Kind
	name   string
	config string // canonical JSON of the config
	limits Limits
}

// NewHost makes a host. It creates opts.CacheDir when set and missing, and
// compiles in memory (with a warning) when it cannot.
func NewHost(opts HostOptions) (*Host, error) {
	h := &Host{
		logger:  opts.Logger,
		clock:   opts.Clock,
		stderr:  opts.Stderr,
		modules: map[moduleKey]*module{},
		plugins: map[pluginKey]*shared{},
	}
	if h.logger == nil {
		h.logger = hclog.NewNullLogger()
	}
	h.logger = h.logger.Named("wasm")
	if h.clock == nil {
		h.clock = engine.SystemClock{}
	}
	if h.stderr == nil {
		h.stderr = io.Discard
	}
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err == nil {
			h.cache = c
			return h, nil
		}
		// The cache only saves compiling again after a restart: a directory
		// that cannot be made (a read-only config directory next to which
		// stateDir resolves) costs that, never the plugins themselves.
		h.logger.Warn("compilation cache unavailable; compiling in memory", "dir", opts.CacheDir, "error", err)
	}
	h.cache = wazero.NewCompilationCache()
	return h, nil
}

// Options describe one plugin to load.
type Options struct {
	// Kind is the entry point the plugin is called through. Required.
	Kind Kind
	// Name names the plugin in Verdict.By, logs and stats. Default: the file's
	// base name (LoadBytes: "module").
	Name string
	// Config is handed to gate_init as a JSON object; nil is {}.
	Config map[string]any
	// Limits bound the plugin; zero fields take DefaultLimits(Kind).
	Limits Limits
}

// Load reads the module at path and loads it as a plugin (see LoadBytes).
func (h *Host) Load(ctx context.Context, path string, opts Options) (*Plugin, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wasm: %w", err)
	}
	if opts.Name == "" {
		opts.Name = filepath.Base(path)
	}
	return h.LoadBytes(ctx, bin, opts)
}

// LoadBytes loads a module as a plugin: it compiles the module (or reuses the
// compiled form of the same bytes), refuses forbidden imports before anything is
// instantiated, checks the exports against the ABI for opts.Kind, and makes one
// instance (running _initialize and gate_init) so a module that cannot start fails
// here rather than on a request. The instance stays in the pool.
//
// Loading what is already loaded (same bytes, kind, name, config and limits)
// returns a new handle on the existing plugin without compiling or instantiating.
// Each handle is closed once; the plugin goes when its last handle does.
func (h *Host) LoadBytes(ctx context.Context, bin []byte, opts Options) (*Plugin, error) {
	key, cfg, err := keyFor(bin, opts)
	if err != nil {
		return nil, err
	}
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	return h.loadLocked(ctx, bin, key, cfg)
}

// keyFor checks opts and returns the plugin's key and gate_init config.
func keyFor(bin []byte, opts Options) (pluginKey, []byte, error) {
	if !opts.Kind.valid() {
		return pluginKey{}, nil, fmt.Errorf("wasm: unknown kind %q (valid: classify, score, balance)", opts.Kind)
	}
	if opts.Name == "" {
		opts.Name = "module"
	}
	limits, err := opts.Limits.withDefaults(opts.Kind)
	if err != nil {
		return pluginKey{}, nil, fmt.Errorf("wasm: %s: %w", opts.Name, err)
	}
	cfg, err := canonicalConfig(opts.Config)
	if err != nil {
		return pluginKey{}, nil, fmt.Errorf("wasm: %s: config: %w", opts.Name, err)
	}
	return pluginKey{sum: sha256.Sum256(bin), kind: opts.Kind, name: opts.Name, config: string(cfg), limits: limits}, cfg, nil
}

// loadLocked is LoadBytes past its argument checks; the caller holds loadMu.
func (h *Host) loadLocked(ctx context.Context, bin []byte, key pluginKey, cfg []byte) (*Plugin, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if s, ok := h.plugins[key]; ok {
		s.refs++
		h.mu.Unlock()
		return &Plugin{s: s}, nil
	}
	h.mu.Unlock()

	m, err := h.compile(ctx, key.name, bin, key.sum, key.limits.MemoryPages)
	if err != nil {
		return nil, err
	}
	if err := checkExports(key.name, m.cm, key.kind); err != nil {
		h.release(m)
		return nil, err
	}
	s := newShared(h, m, key, cfg)
	inst, err := s.newInstance(ctx)
	if err != nil {
		h.release(m)
		return nil, err
	}
	s.pool.idle <- inst

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.teardown(ctx)
		return nil, ErrClosed
	}
	s.refs = 1
	h.plugins[key] = s
	h.mu.Unlock()
	s.logger.Debug("plugin loaded", "kind", key.kind, "sha256", hex.EncodeToString(key.sum[:8]))
	return &Plugin{s: s}, nil
}

// Inspect compiles a module (through the cache) and describes it. The error is
// non-nil when the module is not valid wasm or imports something forbidden; the
// Info is returned whenever the module compiled, so a caller can show both.
func (h *Host) Inspect(ctx context.Context, name string, bin []byte) (*Info, error) {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	sum := sha256.Sum256(bin)
	m, err := h.compileOnly(ctx, name, bin, sum, DefaultLimits(KindClassify).MemoryPages)
	if m == nil {
		return nil, err
	}
	info := *m.info
	h.release(m)
	return &info, err
}

// compile returns the compiled module for (sum, pages), compiling it when no
// plugin holds it, with its imports checked. The caller holds loadMu and owns one
// reference, to give back with release.
func (h *Host) compile(ctx context.Context, name string, bin []byte, sum [32]byte, pages uint32) (*module, error) {
	m, err := h.compileOnly(ctx, name, bin, sum, pages)
	if err != nil {
		if m != nil {
			h.release(m)
		}
		return nil, err
	}
	return m, nil
}

// compileOnly is compile that also returns the module when only the import check
// failed (with one reference held).
func (h *Host) compileOnly(ctx context.Context, name string, bin []byte, sum [32]byte, pages uint32) (*module, error) {
	key := moduleKey{sum: sum, pages: pages}
	h.mu.Lock()
	if m, ok := h.modules[key]; ok {
		m.refs++
		h.mu.Unlock()
		return m, nil
	}
	h.compiles++
	h.mu.Unlock()

	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(h.cache).
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	cm, err := rt.CompileModule(ctx, bin)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("%w: %s: %w", ErrABI, name, err)
	}
	info := inspect(cm)
	info.SHA256 = hex.EncodeToString(sum[:])
	info.Size = len(bin)
	m := &module{key: key, refs: 1, rt: rt, cm: cm, info: info}
	if err := checkImports(name, cm); err != nil {
		// Not registered: nothing may instantiate it. The caller only reads info.
		m.refs = -1
		return m, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: %s: instantiate WASI: %w", name, err)
	}
	if err := instantiateGate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: %s: instantiate gate host module: %w", name, err)
	}
	h.mu.Lock()
	h.modules[key] = m
	h.mu.Unlock()
	return m, nil
}

// release gives back one reference on m, closing its runtime with the last one.
func (h *Host) release(m *module) {
	h.mu.Lock()
	if m.refs < 0 { // never registered (refused imports)
		h.mu.Unlock()
		_ = m.rt.Close(context.Background())
		return
	}
	m.refs--
	last := m.refs == 0
	if last {
		delete(h.modules, m.key)
	}
	h.mu.Unlock()
	if last {
		_ = m.cm.Close(context.Background())
		_ = m.rt.Close(context.Background())
	}
}

// HostStats count what a host holds and has done.
type HostStats struct {
	Modules  int    // compiled modules held (by sha256 and memory cap)
	Plugins  int    // plugins loaded
	Compiles uint64 // modules compiled (or fetched from the on-disk cache) so far
}

// Stats reports the host's counts.
// PluginStat is one loaded plugin's counts, for metrics.
type PluginStat struct {
	Name  string
	Kind  Kind
	Stats Stats
}

// PluginStats reports every plugin loaded on the host, sorted by name.
func (h *Host) PluginStats() []PluginStat {
	h.mu.Lock()
	ps := make([]*shared, 0, len(h.plugins))
	for _, s := range h.plugins {
		ps = append(ps, s)
	}
	h.mu.Unlock()
	out := make([]PluginStat, 0, len(ps))
	for _, s := range ps {
		out = append(out, PluginStat{Name: s.name, Kind: s.kind, Stats: (&Plugin{s: s}).Stats()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HostStats{Modules: len(h.modules), Plugins: len(h.plugins), Compiles: h.compiles}
}

// Close closes every plugin (waiting for calls in flight, each bounded by its
// deadline) and the compilation cache's in-memory part. Handles still held then
// answer ErrClosed.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	plugins := make([]*shared, 0, len(h.plugins))
	for k, s := range h.plugins {
		plugins = append(plugins, s)
		delete(h.plugins, k)
	}
	h.mu.Unlock()
	for _, s := range plugins {
		s.teardown(ctx)
	}
	h.loadMu.Lock() // no load in flight past this point
	defer h.loadMu.Unlock()
	return h.cache.Close(ctx)
}

// drop gives back one handle's reference on s; the last one tears s down.
func (h *Host) drop(s *shared) {
	h.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last && h.plugins[s.key] == s {
		delete(h.plugins, s.key)
	}
	h.mu.Unlock()
	if last {
		s.teardown(context.Background())
	}
}

// canonicalConfig renders a plugin's config as the JSON gate_init reads: object
// keys sorted (encoding/json sorts map keys), nil as {}.
func canonicalConfig(cfg map[string]any) ([]byte, error) {
	if cfg == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(failurejson.Normalize(cfg))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// instKey is the context key under which a call carries its instance, so the
// gate host functions find the input to copy and the buffer to fill.
type instKey struct{}

// instantiateGate adds the "gate" host module to rt.
func instantiateGate(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(ImportModuleGate)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostInputRead), gateImports["input_read"].params, nil).
		WithParameterNames("ptr").
		Export("input_read")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostOutputWrite), gateImports["output_write"].params, gateImports["output_write"].results).
		WithParameterNames("ptr", "len").
		Export("output_write")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostLog), gateImports["log"].params, nil).
		WithParameterNames("level", "ptr", "len").
		Export("log")
	_, err := b.Instantiate(ctx)
	return err
}

// errNoCall is the trap a host function raises when called outside a call.
var errNoCall = errors.New("gate host function called outside a gate/v1 call")

// hostInputRead is gate.input_read(ptr): copy the call's input to ptr. Writing
// out of bounds traps.
func hostInputRead(ctx context.Context, mod api.Module, stack []uint64) {
	inst, _ := ctx.Value(instKey{}).(*instance)
	if inst == nil {
		panic(errNoCall)
	}
	ptr := api.DecodeU32(stack[0])
	if !mod.Memory().Write(ptr, inst.input) {
		panic(fmt.Errorf("gate.input_read: %d bytes at %d are out of memory bounds", len(inst.input), ptr))
	}
}

// hostOutputWrite is gate.output_write(ptr, len) -> i32: take len bytes at ptr as
// the call's output (a second write replaces the first). It returns 0, or 1 when
// the output is larger than MaxOutputBytes or out of bounds; the call then fails.
func hostOutputWrite(ctx context.Context, mod api.Module, stack []uint64) {
	inst, _ := ctx.Value(instKey{}).(*instance)
	if inst == nil {
		panic(errNoCall)
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	stack[0] = 1
	if int64(n) > int64(inst.s.limits.MaxOutputBytes) {
		inst.outErr = fmt.Errorf("%w: output of %d bytes exceeds the limit of %d", ErrOutput, n, inst.s.limits.MaxOutputBytes)
		return
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		inst.outErr = fmt.Errorf("%w: output of %d bytes at %d is out of memory bounds", ErrOutput, n, ptr)
		return
	}
	inst.out = append(inst.out[:0], b...)
	inst.wrote, inst.outErr = true, nil
	stack[0] = 0
}

// Bounds on what gate.log passes on.
const (
	maxLogBytes = 1024 // longer messages are cut
	maxLogLines = 16   // per call (or per instance start); the rest are dropped
)

// hostLog is gate.log(level, ptr, len): 0 trace, 1 debug, 2 info, 3 warn, 4+
// error. Messages are cut to 1 KiB, at most 16 per call; bad pointers are ignored.
func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	inst, _ := ctx.Value(instKey{}).(*instance)
	if inst == nil {
		return
	}
	level, ptr, n := int32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	if inst.logs >= maxLogLines {
		return
	}
	inst.logs++
	n = min(n, maxLogBytes)
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	msg := strings.ToValidUTF8(string(bytes.TrimRight(b, "\n")), "\uFFFD")
	lg := inst.s.logger
	switch {
	case level <= 0:
		lg.Trace("plugin says", "msg", msg)
	case level == 1:
		lg.Debug("plugin says", "msg", msg)
	case level == 2:
		lg.Info("plugin says", "msg", msg)
	case level == 3:
		lg.Warn("plugin says", "msg", msg)
	default:
		lg.Error("plugin says", "msg", msg)
	}
}

// counter is an atomic event count.
type counter = atomic.Uint64
