package wasm

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Plugin is a handle on a loaded module of one kind: a bounded pool of instances,
// its limits, its failure counts and its quarantine. Host.Load returns one; the
// kinds (Classifier, Scorer, Balance) wrap one. Handles on the same plugin share
// everything but their Close.
//
// A Plugin is safe for concurrent use: each call takes an instance of its own.
type Plugin struct {
	s      *shared
	closed atomic.Bool
}

// shared is the plugin behind every handle on it.
type shared struct {
	host   *Host
	mod    *module
	key    pluginKey
	refs   int // handles; guarded by host.mu
	name   string
	kind   Kind
	limits Limits
	cfg    []byte // gate_init's input
	logger hclog.Logger
	mcfg   wazero.ModuleConfig

	// life is read-held by every call and write-held by teardown, so teardown
	// waits for the calls in flight (each bounded by its deadline).
	life   sync.RWMutex
	closed bool // guarded by life

	pool pool

	calls, failures, abstains, timeouts, traps, skipped, quarantines, discarded, made counter
	busyNanos                                                                         counter // time spent in the module's entry point
	initNanos                                                                         counter // time spent making instances

	// streak counts the failures in a row; quarantinedUntil is the end of the
	// current quarantine in Unix nanoseconds of the host clock, 0 when none.
	// Entering quarantine is done by the one failure that brings streak to
	// MaxFailures exactly.
	streak           atomic.Int64
	quarantinedUntil atomic.Int64
}

// pool holds idle instances. slots has a token for each call holding (or making)
// an instance: at most MaxInstances. A call takes a slot, then an idle instance or,
// when none is idle, makes one; it gives the instance back (or discards it), then
// the slot. Live instances never exceed MaxInstances.
type pool struct {
	slots chan struct{}
	idle  chan *instance
}

func newShared(h *Host, m *module, key pluginKey, cfg []byte) *shared {
	s := &shared{
		host:   h,
		mod:    m,
		key:    key,
		name:   key.name,
		kind:   key.kind,
		limits: key.limits,
		cfg:    cfg,
		logger: h.logger.With("plugin", key.name),
		pool: pool{
			slots: make(chan struct{}, key.limits.MaxInstances),
			idle:  make(chan *instance, key.limits.MaxInstances),
		},
	}
	// No files, no environment, no arguments; wazero's defaults give fake clocks
	// (walltime and nanotime advance by 1ms per read), a deterministic random
	// source and no-op sleep. See doc.go, "Sandbox".
	s.mcfg = wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithStdout(h.stderr).
		WithStderr(h.stderr)
	return s
}

// instance is one instantiated module, serving one call at a time.
type instance struct {
	s     *shared
	mod   api.Module
	fn    api.Function
	stack []uint64 // CallWithStack's in/out; length 1

	// The deadline: timer (made on the first call) fires expire, which ends cur.
	timer *time.Timer
	cur   atomic.Pointer[callCtx]

	// Per call, set and read by the goroutine that holds the instance.
	input  []byte
	out    []byte
	wrote  bool
	outErr error
	logs   int
}

// newInstance instantiates the module, runs _initialize and gate_init, bounded by
// InitTimeout. A failure counts against the plugin.
func (s *shared) newInstance(ctx context.Context) (*instance, error) {
	began := time.Now()
	defer func() { s.initNanos.Add(uint64(time.Since(began))) }()
	inst := &instance{s: s, stack: make([]uint64, 1)}
	ictx, cancel := context.WithTimeout(context.WithValue(ctx, instKey{}, inst), s.limits.InitTimeout)
	defer cancel()
	mod, err := s.mod.rt.InstantiateModule(ictx, s.mod.cm, s.mcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: instantiate: %s", ErrInit, s.name, firstLine(err))
	}
	fail := func(what string, err error) (*instance, error) {
		_ = mod.Close(context.Background())
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s: %s: %s", ErrInit, s.name, what, firstLine(err))
	}
	if f := mod.ExportedFunction("_initialize"); f != nil {
		if err := f.CallWithStack(ictx, nil); err != nil {
			return fail("_initialize", err)
		}
	}
	if f := mod.ExportedFunction("gate_init"); f != nil {
		inst.input = s.cfg
		inst.stack[0] = api.EncodeU32(uint32(len(s.cfg)))
		if err := f.CallWithStack(ictx, inst.stack); err != nil {
			return fail("gate_init", err)
		}
		if rc := int32(inst.stack[0]); rc != 0 {
			return fail("gate_init", fmt.Errorf("returned %d", rc))
		}
	}
	inst.mod = mod
	inst.fn = mod.ExportedFunction(s.kind.Export())
	inst.input = nil
	s.made.Add(1)
	return inst, nil
}

func (inst *instance) close() {
	if inst.timer != nil {
		inst.timer.Stop()
	}
	_ = inst.mod.Close(context.Background())
}

// get takes an instance for one call, waiting at most wait for a free slot.
func (s *shared) get(ctx context.Context, wait time.Duration) (*instance, error) {
	select {
	case s.pool.slots <- struct{}{}:
	default:
		t := time.NewTimer(wait)
		select {
		case s.pool.slots <- struct{}{}:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("%w: %s: %d instances busy for %s", ErrBusy, s.name, cap(s.pool.slots), wait)
		}
	}
	select {
	case inst := <-s.pool.idle:
		return inst, nil
	default:
	}
	inst, err := s.newInstance(ctx)
	if err != nil {
		<-s.pool.slots
		return nil, err
	}
	return inst, nil
}

// put gives a healthy instance back to the pool.
func (s *shared) put(inst *instance) {
	inst.input, inst.wrote, inst.outErr, inst.logs = nil, false, nil, 0
	s.pool.idle <- inst // never blocks: live instances <= cap(idle)
	<-s.pool.slots
}

// discard closes an instance instead of pooling it.
func (s *shared) discard(inst *instance) {
	inst.close()
	s.discarded.Add(1)
	<-s.pool.slots
}

// teardown closes the plugin: it waits for the calls in flight, closes the idle
// instances and gives back the compiled module.
func (s *shared) teardown(ctx context.Context) {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return
	}
	s.closed = true
	for {
		select {
		case inst := <-s.pool.idle:
			inst.close()
			continue
		default:
		}
		break
	}
	s.life.Unlock()
	s.host.release(s.mod)
	s.logger.Debug("plugin closed")
}

// call runs the entry point on input and hands the output to parse while the
// instance is held (out is only valid during parse). It returns abstain=true when
// the module returned 1 (parse is then not called). A call that fails in the
// module's fault (trap, timeout, error code, missing or bad output, an instance
// that would not start) is counted, may quarantine the plugin, and discards the
// instance.
func (s *shared) call(ctx context.Context, input []byte, parse func(out []byte) error) (abstain bool, err error) {
	if len(input) > s.limits.MaxInputBytes {
		return false, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrInput, s.name, len(input), s.limits.MaxInputBytes)
	}
	if err := s.admit(); err != nil {
		return false, err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return false, fmt.Errorf("%w: %s", ErrClosed, s.name)
	}
	inst, err := s.get(ctx, s.limits.Timeout)
	if err != nil {
		if errors.Is(err, ErrInit) {
			s.calls.Add(1)
			s.fail(err)
		}
		return false, err
	}
	s.calls.Add(1)

	if err := ctx.Err(); err != nil {
		s.put(inst)
		return false, err
	}
	inst.input = input
	inst.stack[0] = api.EncodeU32(uint32(len(input)))
	cctx := inst.arm(ctx, s.limits.Timeout)
	began := time.Now()
	callErr := inst.fn.CallWithStack(cctx, inst.stack)
	s.busyNanos.Add(uint64(time.Since(began)))
	reusable := inst.disarm()

	switch {
	case callErr != nil && (ctx.Err() != nil || (cctx.byCaller && cctx.expired.Load())):
		// The caller gave up: not the module's fault, but the instance is closed.
		s.discard(inst)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return false, context.DeadlineExceeded
	case callErr != nil:
		var ee *sys.ExitError
		if cctx.expired.Load() || (errors.As(callErr, &ee) && ee.ExitCode() == sys.ExitCodeDeadlineExceeded) {
			s.timeouts.Add(1)
			err = fmt.Errorf("%w: %s: stopped after %s", ErrTimeout, s.name, s.limits.Timeout)
		} else {
			s.traps.Add(1)
			err = fmt.Errorf("%w: %s: %s", ErrTrap, s.name, firstLine(callErr))
		}
	default:
		switch rc := int32(inst.stack[0]); {
		case rc == 1:
			abstain = true
		case rc != 0:
			err = fmt.Errorf("%w: %s: returned %d", ErrCode, s.name, rc)
		case inst.outErr != nil:
			err = fmt.Errorf("%w (%s)", inst.outErr, s.name)
		case !inst.wrote:
			err = fmt.Errorf("%w: %s: returned 0 without calling output_write", ErrOutput, s.name)
		default:
			if perr := parse(inst.out); perr != nil {
				err = fmt.Errorf("%w: %s: %w", ErrOutput, s.name, perr)
			}
		}
	}
	if err != nil {
		s.discard(inst)
		s.fail(err)
		return false, err
	}
	if !reusable || inst.mod.IsClosed() || uint32(inst.mod.Memory().Size()/PageSize) > s.limits.RetainPages {
		// Its deadline fired as the call returned, or it grew past the cap: a
		// fresh instance next time.
		s.discard(inst)
	} else {
		s.put(inst)
	}
	s.streak.Store(0)
	if abstain {
		s.abstains.Add(1)
	}
	return abstain, nil
}

// admit refuses a call while the plugin is quarantined. When a quarantine has
// run out it ends it, leaving the streak one short of MaxFailures: the next
// failure quarantines again, a success clears it.
func (s *shared) admit() error {
	until := s.quarantinedUntil.Load()
	if until == 0 {
		return nil
	}
	now := s.host.clock.Now().UnixNano()
	if now < until {
		s.skipped.Add(1)
		return fmt.Errorf("%w: %s: for %s more", ErrQuarantined, s.name, time.Duration(until-now).Round(time.Millisecond))
	}
	if s.quarantinedUntil.CompareAndSwap(until, 0) {
		s.streak.Store(int64(s.limits.MaxFailures) - 1)
		s.logger.Info("plugin quarantine over")
	}
	return nil
}

// fail counts a failure in the module's fault and quarantines the plugin on the
// MaxFailures-th in a row.
func (s *shared) fail(err error) {
	s.failures.Add(1)
	n := s.streak.Add(1)
	s.logger.Debug("plugin call failed", "error", err, "in_a_row", n)
	if n != int64(s.limits.MaxFailures) {
		return
	}
	until := s.host.clock.Now().Add(s.limits.Quarantine)
	s.quarantinedUntil.Store(until.UnixNano())
	s.quarantines.Add(1)
	s.logger.Warn("plugin quarantined", "failures_in_a_row", n, "for", s.limits.Quarantine, "error", err)
}

// Stats are a plugin's counts since it was loaded, for metrics. Handles on one
// plugin report the same counts.
type Stats struct {
	Calls    uint64 // calls that reached an instance (or failed to make one)
	Failures uint64 // calls that failed in the module's fault
	Abstains uint64 // calls the module abstained from
	Timeouts uint64 // failures that were deadline hits
	Traps    uint64 // failures that were traps
	// Skipped counts calls refused while quarantined.
	Skipped uint64
	// Quarantines counts how many times the plugin was quarantined.
	Quarantines uint64
	// Quarantined is true while calls are refused, until QuarantinedUntil.
	Quarantined      bool
	QuarantinedUntil time.Time
	// Instances is how many instances are idle in the pool now.
	Instances int
	// Made and Discarded count instances made and thrown away.
	Made, Discarded uint64
	// CallTime is the total time spent inside the module's entry point.
	CallTime time.Duration
	// InitTime is the total time spent making instances (instantiate,
	// _initialize, gate_init): at load, and on the call that finds no idle
	// instance after one was discarded — that call waits for it, up to
	// InitTimeout, beyond its own deadline.
	InitTime time.Duration
}

// Stats reports the plugin's counts.
func (p *Plugin) Stats() Stats {
	s := p.s
	st := Stats{
		Calls: s.calls.Load(), Failures: s.failures.Load(), Abstains: s.abstains.Load(),
		Timeouts: s.timeouts.Load(), Traps: s.traps.Load(), Skipped: s.skipped.Load(),
		Quarantines: s.quarantines.Load(), Instances: len(s.pool.idle), CallTime: time.Duration(s.busyNanos.Load()),
		InitTime: time.Duration(s.initNanos.Load()), Made: s.made.Load(), Discarded: s.discarded.Load(),
	}
	if u := s.quarantinedUntil.Load(); u != 0 && s.host.clock.Now().UnixNano() < u {
		st.Quarantined, st.QuarantinedUntil = true, time.Unix(0, u)
	}
	return st
}

// Name is the plugin's name (Options.Name: by default its file name).
func (p *Plugin) Name() string { return p.s.name }

// Kind is the entry point the plugin is called through.
func (p *Plugin) Kind() Kind { return p.s.kind }

// Limits are the plugin's limits, defaults filled in.
func (p *Plugin) Limits() Limits { return p.s.limits }

// SHA256 is the hex sha256 of the module's bytes.
func (p *Plugin) SHA256() string { return hex.EncodeToString(p.s.key.sum[:]) }

// Info describes the module's imports and exports.
func (p *Plugin) Info() Info { return *p.s.mod.info }

// Call runs the plugin's entry point on a JSON input and returns a copy of its
// JSON output; abstain is true when the module returned 1. Errors are as for the
// kinds: the call is counted and may quarantine the plugin.
func (p *Plugin) Call(ctx context.Context, input []byte) (out []byte, abstain bool, err error) {
	abstain, err = p.s.call(ctx, input, func(b []byte) error {
		out = append([]byte(nil), b...)
		return nil
	})
	return out, abstain, err
}

// call is Call with a parse callback, for the kinds.
//
// A closed handle still answers while its plugin lives (another handle holds it):
// a request that picked up the previous snapshot's classifier just before a
// reload closed it is served by the very same pool. Once the plugin is gone, calls
// fail with ErrClosed, and a chain moves on to its next link.
func (p *Plugin) call(ctx context.Context, input []byte, parse func([]byte) error) (bool, error) {
	return p.s.call(ctx, input, parse)
}

// Close gives the handle back. The plugin itself closes with its last handle,
// after its calls in flight. Close is idempotent.
func (p *Plugin) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.s.host.drop(p.s)
	return nil
}

// firstLine keeps the first line of a wazero error (the rest is a wasm stack trace).
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
