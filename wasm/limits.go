package wasm

import (
	"fmt"
	"runtime"
	"time"
)

// Kind is which gate/v1 entry point a plugin is called through.
type Kind string

// The kinds of plugin, one per entry point.
const (
	KindClassify Kind = "classify" // gate_classify: a failure in, a verdict out
	KindScore    Kind = "score"    // gate_score: a reading in, {"score": n} out
	KindBalance  Kind = "balance"  // gate_balance: an HTTP response in, a reading out
)

// Kinds lists the kinds in the order Info reports them.
var Kinds = []Kind{KindClassify, KindScore, KindBalance}

// Export is the name of the kind's entry point: "gate_classify" and so on.
func (k Kind) Export() string { return "gate_" + string(k) }

func (k Kind) valid() bool {
	return k == KindClassify || k == KindScore || k == KindBalance
}

// PageSize is the size of a WebAssembly memory page, in bytes.
const PageSize = 65536

// Limits bound one plugin. A zero field takes the kind's default (DefaultLimits);
// a negative one is an error. Limits is a plain value.
type Limits struct {
	// Timeout is the deadline of one call, enforced by wazero's
	// WithCloseOnContextDone: a call still running then is stopped and its
	// instance discarded. Default 2ms for classify and score, 50ms for balance.
	Timeout time.Duration
	// InitTimeout bounds making an instance: instantiation, _initialize and
	// gate_init. Default 1s (a Go module's runtime takes a few ms to start).
	InitTimeout time.Duration
	// MemoryPages is the hard cap on an instance's linear memory, in 64 KiB
	// pages: memory.grow past it fails, and a module that cannot cope traps.
	// Default 512 (32 MiB).
	MemoryPages uint32
	// RetainPages: an instance whose memory grew past this many pages is
	// discarded after its call instead of going back to the pool. Default half of
	// MemoryPages.
	RetainPages uint32
	// MaxBodyBytes: the host truncates a failure's body (classify) or a response
	// body (balance) to this many bytes, at a UTF-8 boundary, before the module
	// sees it. Default 16 KiB for classify and score, 256 KiB for balance.
	MaxBodyBytes int
	// MaxInputBytes bounds the JSON input of one call; a larger one is refused
	// without calling the module. Default 64 KiB, 512 KiB for balance.
	MaxInputBytes int
	// MaxOutputBytes bounds what output_write accepts; a larger output fails the
	// call. Default 16 KiB.
	MaxOutputBytes int
	// MaxInstances bounds the instance pool. Instances are made lazily, one per
	// concurrent call; a call that finds every instance busy waits for one (at
	// most its Timeout). Default 2 × GOMAXPROCS, at least 4.
	MaxInstances int
	// MaxFailures is how many calls in a row may fail before the plugin is
	// quarantined. Default 5.
	MaxFailures int
	// Quarantine is how long a quarantined plugin is not called. Default 30s.
	Quarantine time.Duration
}

// DefaultLimits returns the limits a zero Limits stands for, for kind k.
func DefaultLimits(k Kind) Limits {
	l := Limits{
		Timeout:        2 * time.Millisecond,
		InitTimeout:    time.Second,
		MemoryPages:    512,
		RetainPages:    256,
		MaxBodyBytes:   16 << 10,
		MaxInputBytes:  64 << 10,
		MaxOutputBytes: 16 << 10,
		MaxInstances:   max(4, 2*runtime.GOMAXPROCS(0)),
		MaxFailures:    5,
		Quarantine:     30 * time.Second,
	}
	if k == KindBalance {
		l.Timeout = 50 * time.Millisecond
		l.MaxBodyBytes = 256 << 10
		l.MaxInputBytes = 512 << 10
	}
	return l
}

// withDefaults fills the zero fields of l with the defaults of kind k and checks
// the result.
func (l Limits) withDefaults(k Kind) (Limits, error) {
	d := DefaultLimits(k)
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"timeout", int64(l.Timeout)}, {"initTimeout", int64(l.InitTimeout)},
		{"maxBodyBytes", int64(l.MaxBodyBytes)}, {"maxInputBytes", int64(l.MaxInputBytes)},
		{"maxOutputBytes", int64(l.MaxOutputBytes)}, {"maxInstances", int64(l.MaxInstances)},
		{"maxFailures", int64(l.MaxFailures)}, {"quarantine", int64(l.Quarantine)},
	} {
		if f.v < 0 {
			return l, fmt.Errorf("limits.%s: must not be negative (got %d)", f.name, f.v)
		}
	}
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = d.InitTimeout
	}
	if l.MemoryPages == 0 {
		l.MemoryPages = d.MemoryPages
	}
	if l.MemoryPages > 65536 {
		return l, fmt.Errorf("limits.memoryPages: at most 65536 (4 GiB) (got %d)", l.MemoryPages)
	}
	if l.RetainPages == 0 {
		l.RetainPages = max(1, l.MemoryPages/2)
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxInputBytes == 0 {
		l.MaxInputBytes = d.MaxInputBytes
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxInstances == 0 {
		l.MaxInstances = d.MaxInstances
	}
	if l.MaxFailures == 0 {
		l.MaxFailures = d.MaxFailures
	}
	if l.Quarantine == 0 {
		l.Quarantine = d.Quarantine
	}
	return l, nil
}
