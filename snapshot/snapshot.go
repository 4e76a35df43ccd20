// Package snapshot builds gatectl's runtime policy from a configuration: the
// gate's and the retry planner's settings, the classifier chain (rule files,
// WebAssembly plugins, the built-in rules), the pools and the balance sources.
//
// A Snapshot is complete and immutable: a reload builds a new one beside the old
// one — config decoded strictly, rules compiled, modules compiled, every golden case
// run — and the Manager swaps the pointer only when the new one is whole. What
// must survive a reload (the ledger, learned quotas, cooldowns, marks, sessions)
// lives outside the snapshot, in the engine objects the server keeps.
//
// It sits above config, rules, wasm and balance (config imports only engine, so it
// cannot assemble them itself), and below server and cmd.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/gatectl/gatectl/balance"
	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/rules"
	"github.com/hashicorp/go-hclog"
)

// Snapshot is one complete, validated runtime policy. Never change one after Build
// returned it.
//
// A snapshot owns what it was built with that holds resources: the balance
// sources (a script read in progress, a wasm module handle) and the links and
// scorers the hooks gave it that are io.Closers (wasm plugin handles). Close
// releases them; the Manager closes a snapshot once it is replaced, and the one
// in force when it is closed itself. Reuse across reloads is by reference count
// below the snapshot: each build takes its own handles on the modules it keeps,
// so closing the old snapshot never stops what the new one uses.
type Snapshot struct {
	// Config is the configuration in force: the file's, with the runtime
	// settings of the manager's overlay over it (see Manager.SetOverlay).
	Config *config.Config
	// File is the configuration as the file gives it, before the overlay; the
	// same pointer as Config when there is none.
	File     *config.Config
	Gate     gate.Config
	Retry    retry.Policy
	Chain    *engine.Chain
	Pools    *pool.Pools // nil when the config has no pools
	Quota    pool.Settings
	Balances *balance.Set
	// Scoring describes each pool's scorer, for reports.
	Scoring map[string]string
	// Files are the files the snapshot was read from (the config, rule files,
	// plugin modules); the watcher watches their directories.
	Files    []string
	Warnings []string
	BuiltAt  time.Time
	Version  uint64

	owned     []io.Closer // released by Close, in reverse order
	closeOnce sync.Once
	closeErr  error
}

// Options are what Build needs besides the config.
type Options struct {
	Clock  engine.Clock // nil: the system clock
	Logger hclog.Logger // the parent logger, passed on as it is: each component names itself; nil: discard
	Prev   *Snapshot    // the snapshot being replaced: unchanged modules are reused
	Hooks  []ChainHook  // extra chain links (the wasm plugins register one)
	// OnVerdict, when set, sees every verdict the snapshot's chain decides (see
	// engine.Chain.WithVerdictHook); a Manager sets it to call what was
	// registered with Manager.OnVerdict.
	OnVerdict func(f *engine.Failure, v engine.Verdict)
	// OnClassifierError, when set, sees every run-time error of a link of the
	// snapshot's chain (see engine.Chain.WithErrorHook); a Manager sets it to call
	// what was registered with Manager.OnClassifierError.
	OnClassifierError func(link string, err error)
}

// ChainHook adds classifiers for one config entry or directory scan. It returns
// the links for entry i of cfg.Classifiers (ok=false when it does not handle that
// entry's kind), and files it read.
//
// Links (and ScorerHook's scorers) that implement io.Closer belong to the snapshot
// being built: it closes them when it is closed, or at once when its build fails.
// A hook must therefore hand each build links of its own (a fresh handle on a
// shared module, say), never one it gave an earlier snapshot.
type ChainHook interface {
	ClassifierFor(ctx context.Context, cfg *config.Config, i int, prev *Snapshot) (links []engine.Classifier, files []string, ok bool, err error)
	// DirClassifiers returns the classifiers dropped into cfg.PluginsDir, ordered by
	// file name; they run after the configured ones and before the built-in rules.
	DirClassifiers(ctx context.Context, cfg *config.Config, prev *Snapshot) (links []engine.Classifier, files []string, err error)
}

// ScorerHook is the optional part of a ChainHook that builds
// `pools.<name>.scoring: {wasm: FILE}` scorers.
type ScorerHook interface {
	ScorerFor(ctx context.Context, cfg *config.Config, pool string, prev *Snapshot) (engine.Scorer, []string, error)
}

// BalanceHook is the optional part of a ChainHook that loads the modules of
// `balances[i].wasm` sources. Build calls BalanceModules once, and only when cfg
// has such a source; the first hook implementing it is asked.
type BalanceHook interface {
	BalanceModules(cfg *config.Config) (balance.ModuleHost, error)
}

// Load reads the config at path ("" for the embedded default) and builds it.
func Load(ctx context.Context, path string, opts Options) (*Snapshot, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return Build(ctx, cfg, opts)
}

// Build assembles a snapshot from cfg. Every problem is reported at once, each
// naming its config path.
func Build(ctx context.Context, cfg *config.Config, opts Options) (*Snapshot, error) {
	if opts.Clock == nil {
		opts.Clock = engine.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Snapshot{Config: cfg, File: cfg, BuiltAt: opts.Clock.Now()}
	if opts.Prev != nil {
		s.Version = opts.Prev.Version + 1
	}
	if cfg.Path != "" {
		s.Files = append(s.Files, cfg.Path)
	}
	for _, w := range cfg.Warnings {
		s.Warnings = append(s.Warnings, w.Error())
	}
	var errs []error
	var err error
	if s.Gate, err = GateConfig(cfg); err != nil {
		errs = append(errs, err)
	}
	if s.Retry, err = RetryPolicy(cfg.Retry); err != nil {
		errs = append(errs, err)
	}
	if err := s.buildChain(ctx, cfg, opts); err != nil {
		errs = append(errs, err)
	}
	if err := s.buildPools(ctx, cfg, opts); err != nil {
		errs = append(errs, err)
	}
	if err := s.buildBalances(cfg, opts); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		s.Close() // what was built for a snapshot that never was
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// own records c, when it holds resources, as the snapshot's to release.
func (s *Snapshot) own(c any) {
	if cl, ok := c.(io.Closer); ok {
		s.owned = append(s.owned, cl)
	}
}

// Close releases what the snapshot owns (see Snapshot): balance sources and the
// hooks' plugin handles. Call it once no request uses the snapshot any more; a
// wasm classifier closed under a request still answers while another snapshot
// holds its module, and fails over to the next link otherwise. Close is
// idempotent and returns every error it met.
func (s *Snapshot) Close() error { return s.closeExcept(nil) }

// closeExcept is Close, sparing whatever keep owns too (the same link handed to
// both, which a hook must not do, but then it stays open).
func (s *Snapshot) closeExcept(keep *Snapshot) error {
	s.closeOnce.Do(func() {
		shared := map[io.Closer]bool{}
		if keep != nil {
			for _, c := range keep.owned {
				if isComparable(c) {
					shared[c] = true
				}
			}
		}
		var errs []error
		for i := len(s.owned) - 1; i >= 0; i-- {
			c := s.owned[i]
			if isComparable(c) && shared[c] {
				continue
			}
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// isComparable reports whether c can be a map key (a closer of a func or slice type
// cannot; it is never taken for shared).
func isComparable(c io.Closer) bool { return reflect.TypeOf(c).Comparable() }

// GateConfig returns the gate section for the engine's ledger. config decodes it
// into a gate.Config already and reports its problems with file and line; Validate
// stays as the engine's own guard.
func GateConfig(cfg *config.Config) (gate.Config, error) {
	c := cfg.Gate
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// RetryPolicy returns the retry section for the engine's planner. config decodes
// it into a retry.Policy already; Validate stays as the engine's own guard.
func RetryPolicy(r config.Retry) (retry.Policy, error) {
	p := r
	p.RetryOn = append([]engine.Class(nil), r.RetryOn...)
	if err := p.Validate(); err != nil {
		return retry.Policy{}, err
	}
	return p, nil
}

// buildChain: the configured classifiers in order, then the plugins directory,
// then the built-in rules, which always decide last.
func (s *Snapshot) buildChain(ctx context.Context, cfg *config.Config, opts Options) error {
	ropts := rules.Options{Evidence: cfg.Retry.Mislabeled.Evidence, Now: opts.Clock.Now}
	var links []engine.Classifier
	var errs []error
	for i, ref := range cfg.Classifiers {
		where := fmt.Sprintf("classifiers[%d]", i)
		if ref.Rules != "" {
			path := cfg.Resolve(ref.Rules)
			o := ropts
			o.Cases, o.CasesFile, o.CasesPath = ref.Cases, configName(cfg), where+".cases"
			rs, err := rules.Load(path, o)
			if errors.Is(err, rules.ErrCaseFailed) {
				errs = append(errs, err) // it names its file and case
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.rules: %w", where, err))
				continue
			}
			links = append(links, rs)
			s.Files = append(s.Files, path)
			continue
		}
		handled := false
		for _, h := range opts.Hooks {
			ls, files, ok, err := h.ClassifierFor(ctx, cfg, i, opts.Prev)
			if !ok {
				continue
			}
			handled = true
			for _, l := range ls {
				s.own(l)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
			links = append(links, ls...)
			s.Files = append(s.Files, files...)
			break
		}
		if !handled {
			errs = append(errs, fmt.Errorf("%s.wasm: %s: WebAssembly classifiers need a plugin host, and none was given (snapshot.Options.Hooks)", where, ref.Wasm))
		}
	}
	for _, h := range opts.Hooks {
		ls, files, err := h.DirClassifiers(ctx, cfg, opts.Prev)
		for _, l := range ls {
			s.own(l)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pluginsDir: %w", err))
		}
		links = append(links, ls...)
		s.Files = append(s.Files, files...)
	}
	builtin, err := rules.Builtin(ropts)
	if err != nil {
		errs = append(errs, fmt.Errorf("built-in rules: %w", err))
	} else {
		links = append(links, builtin)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	s.Chain = engine.NewChain(links...)
	if opts.OnVerdict != nil {
		s.Chain = s.Chain.WithVerdictHook(opts.OnVerdict)
	}
	if opts.OnClassifierError != nil {
		s.Chain = s.Chain.WithErrorHook(opts.OnClassifierError)
	}
	return nil
}

func wasmScorer(ctx context.Context, cfg *config.Config, pool string, opts Options) (engine.Scorer, []string, error) {
	for _, h := range opts.Hooks {
		if sh, ok := h.(ScorerHook); ok {
			return sh.ScorerFor(ctx, cfg, pool, opts.Prev)
		}
	}
	return nil, nil, fmt.Errorf("%s: WebAssembly scorers need a plugin host, and none was given (snapshot.Options.Hooks)", cfg.Pools[pool].Scoring.Wasm)
}

// buildBalances builds the balance sources, with the module host of the first
// BalanceHook when some source runs a wasm module.
func (s *Snapshot) buildBalances(cfg *config.Config, opts Options) error {
	bo := balance.BuildOptions{Clock: opts.Clock, Logger: opts.Logger}
	if needsModules(cfg) {
		for _, h := range opts.Hooks {
			if bh, ok := h.(BalanceHook); ok {
				mh, err := bh.BalanceModules(cfg)
				if err != nil {
					return fmt.Errorf("balances: %w", err)
				}
				bo.Modules = mh
				break
			}
		}
	}
	set, err := balance.SetFromConfig(cfg, bo)
	if err != nil {
		return err
	}
	s.Balances = set
	s.own(set)
	return nil
}

// needsModules reports whether some balance source of cfg runs a wasm module.
func needsModules(cfg *config.Config) bool {
	for _, b := range cfg.Balances {
		if b.Wasm != nil {
			return true
		}
	}
	return false
}

func configName(cfg *config.Config) string {
	if cfg.Path == "" {
		return "(embedded default)"
	}
	return cfg.Path
}

func (s *Snapshot) buildPools(ctx context.Context, cfg *config.Config, opts Options) error {
	pc := pool.PoolsConfig{Providers: cfg.ProviderNames()}
	s.Scoring = map[string]string{}
	order := cfg.PoolOrder
	if len(order) == 0 {
		for name := range cfg.Pools {
			order = append(order, name)
		}
		sort.Strings(order)
	}
	for _, name := range order {
		p := cfg.Pools[name]
		spec := pool.PoolSpec{Name: name, MidSessionSwitch: p.MidSessionSwitch}
		for _, r := range p.Routes {
			spec.Routes = append(spec.Routes, engine.Route{Provider: r.Provider, Model: r.Model, ReasoningEffort: r.ReasoningEffort})
		}
		switch {
		case p.Scoring.Expr != "":
			sc, err := rules.NewScorer(p.Scoring.Expr)
			if err != nil {
				return fmt.Errorf("pools.%s.scoring: %w", name, err)
			}
			spec.Scorer = sc
			s.Scoring[name] = "expr " + p.Scoring.Expr
		case p.Scoring.Wasm != "":
			sc, files, err := wasmScorer(ctx, cfg, name, opts)
			if sc != nil {
				s.own(sc)
			}
			if err != nil {
				return fmt.Errorf("pools.%s.scoring.wasm: %w", name, err)
			}
			spec.Scorer = sc
			s.Files = append(s.Files, files...)
			s.Scoring[name] = "wasm " + p.Scoring.Wasm
		default:
			s.Scoring[name] = "default"
		}
		pc.Pools = append(pc.Pools, spec)
	}
	for _, b := range cfg.Balances {
		pc.Balances = append(pc.Balances, pool.BalanceSpec{Provider: b.Provider, MinimumRemaining: b.MinimumRemaining, Refresh: b.Refresh,
			Coefficients: b.Coefficients, Capacities: b.Capacities, Capacity: b.Capacity,
			Windows: b.HTTP == nil || b.HTTP.Windows != ""})
	}
	s.Quota = cfg.Quota
	if len(pc.Pools) == 0 {
		return nil
	}
	pools, err := pool.NewPools(pc)
	if err != nil {
		return err
	}
	s.Pools = pools
	s.Warnings = append(s.Warnings, pools.Warnings()...)
	return nil
}
