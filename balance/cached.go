package balance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/hashicorp/go-hclog"
)

// CacheOptions configures a Cached. Zero fields take the defaults shown.
type CacheOptions struct {
	Refresh time.Duration // how long a reading answers; pool.DefaultBalanceRefresh
	Timeout time.Duration // how long one read may take; pool.DefaultBalanceTimeout
	Clock   engine.Clock  // stamps readings and attempts; engine.SystemClock
	Logger  hclog.Logger  // failed reads at warn, reads at debug; discarded when nil
}

// Cached puts a refresh interval in front of a balance source: a reading answers
// for Refresh, and only a due source is read again. It is what the pools hold, and
// it is itself an engine.BalanceSource (Read asks Get with the clock's time).
//
// # The model
//
// Each read is an attempt. An attempt that succeeds leaves its reading, stamped
// TakenAt with the clock when the read finished; one that fails leaves its error
// and a missing reading. Either way the outcome answers every Get for Refresh,
// counted from when the attempt finished: a failed read is not retried on the
// next call, so a hung or broken script costs its timeout once per Refresh, not
// once per draw: the interval bounds how often a script starts.
// A failed read does not bring the previous reading back, nor extend its life: the
// source has no reading until an attempt succeeds, and Status still shows the last
// good reading (LastGood) with its own TakenAt, so its age keeps growing.
//
// The source is due when it has no attempt yet or its last one finished Refresh
// or more ago. A clock that moved back by less than Refresh counts as no time
// passed; by more, the source is due (its age is unknown).
//
// Get on a fresh source answers at once, without a round trip. Get on a due source
// starts a read, or joins the one already running: concurrent callers start it
// once. A caller waits until the read finishes, the read's Timeout passes (it then
// gets ErrTimeout while the read is torn down behind it) or its own context ends,
// whichever comes first. The read itself does not end with the caller that started
// it; it runs to its Timeout for whoever else waits, and for the next call.
//
// # Notes
//
//   - Safe for concurrent use. The zero value is not usable: call NewCached.
//   - A Reading returned by Get is shared with other callers: do not modify it.
//   - A source that panics is recovered and reported as a failed read (ErrPanic).
//   - Close stops the read in progress (a script's process group is killed) and
//     closes the source when it is an io.Closer; afterwards a fresh outcome still
//     answers, and a due source answers ErrClosed instead of reading.
type Cached struct {
	src     engine.BalanceSource
	refresh time.Duration
	timeout time.Duration
	clock   engine.Clock
	logger  hclog.Logger

	mu sync.Mutex
	// The fields below are guarded by mu.
	// attempted: some attempt has finished; checkedAt, reading and err describe the
	// latest one. reading is meaningful only when err is nil.
	attempted bool
	checkedAt time.Time
	reading   engine.Reading
	err       error
	// last is the latest successful reading (nil before the first); it survives
	// failed attempts, for Status.
	last *engine.Reading
	// flight is the read in progress; nil when none is.
	flight *flight
	// closed: Close was called; no read starts any more.
	closed bool
}

// flight is one read shared by every caller that found the source due while it ran.
// reading and err are written before done is closed and never after.
type flight struct {
	done    chan struct{}
	ctx     context.Context // the read's own context: its Timeout, not a caller's
	cancel  context.CancelFunc
	reading engine.Reading
	err     error
}

// NewCached wraps src. It starts nothing: the first Get reads.
func NewCached(src engine.BalanceSource, o CacheOptions) *Cached {
	c := &Cached{src: src, refresh: o.Refresh, timeout: o.Timeout, clock: o.Clock, logger: o.Logger}
	if c.refresh <= 0 {
		c.refresh = pool.DefaultBalanceRefresh
	}
	if c.timeout <= 0 {
		c.timeout = pool.DefaultBalanceTimeout
	}
	if c.clock == nil {
		c.clock = engine.SystemClock{}
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	return c
}

// Source returns the wrapped source.
func (c *Cached) Source() engine.BalanceSource { return c.src }

// Refresh returns how long a reading answers.
func (c *Cached) Refresh() time.Duration { return c.refresh }

// Timeout returns how long one read may take, which bounds every Get.
func (c *Cached) Timeout() time.Duration { return c.timeout }

// Read is Get at the clock's current time; it makes a Cached an engine.BalanceSource.
func (c *Cached) Read(ctx context.Context) (engine.Reading, error) {
	return c.Get(ctx, c.clock.Now())
}

// Get answers with the reading that holds at now: the latest attempt's outcome when
// it is fresh, else the outcome of a new read (shared with concurrent callers). An
// error means a missing reading; it wraps ErrTimeout when the read outlived its
// timeout, or is the caller's context error when the caller gave up first.
func (c *Cached) Get(ctx context.Context, now time.Time) (engine.Reading, error) {
	c.mu.Lock()
	if c.attempted && !c.dueLocked(now) {
		r, err := c.reading, c.err
		c.mu.Unlock()
		return r, err
	}
	f := c.flight
	if f == nil {
		if c.closed {
			c.mu.Unlock()
			return engine.Reading{}, ErrClosed
		}
		f = c.startLocked(ctx)
	}
	c.mu.Unlock()

	select {
	case <-f.done:
		return f.reading, f.err
	case <-f.ctx.Done():
		select {
		case <-f.done: // finished at the deadline: take its outcome
			return f.reading, f.err
		default:
		}
		if errors.Is(f.ctx.Err(), context.Canceled) { // only Close cancels before the read is done
			return engine.Reading{}, ErrClosed
		}
		err := fmt.Errorf("%w: no reading within %s", ErrTimeout, c.timeout)
		// The read's goroutine records its outcome once the source has stopped;
		// until then Status would show the attempt before (or none): a report
		// read right after this answer left the timeout out.
		c.mu.Lock()
		if c.flight == f {
			c.attempted, c.checkedAt, c.reading, c.err = true, c.clock.Now(), engine.Reading{}, err
		}
		c.mu.Unlock()
		return engine.Reading{}, err
	case <-ctx.Done():
		return engine.Reading{}, ctx.Err()
	}
}

// Due reports whether a Get at now would read (or join a read in progress).
func (c *Cached) Due(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.attempted || c.dueLocked(now)
}

// dueLocked reports whether the latest attempt is too old at now. Requires c.mu and
// c.attempted.
func (c *Cached) dueLocked(now time.Time) bool {
	age := now.Sub(c.checkedAt)
	if age < 0 { // the clock moved back
		return -age > c.refresh
	}
	return age >= c.refresh
}

// startLocked starts a read in its own goroutine and records it as the flight.
// Requires c.mu. The read's context keeps ctx's values but not its cancellation:
// it ends at the Timeout only, so the caller that happened to start it cannot cut
// it short for the others.
func (c *Cached) startLocked(ctx context.Context) *flight {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	f := &flight{done: make(chan struct{}), ctx: fctx, cancel: cancel}
	c.flight = f
	go func() {
		defer cancel()
		r, err := c.readSafely(fctx)
		if err != nil && fctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			// The source saw our deadline as its caller's: report it as the timeout.
			err = fmt.Errorf("%w: no reading within %s; the read was stopped", ErrTimeout, c.timeout)
		}
		at := c.clock.Now()
		if err == nil {
			r.TakenAt = at
		} else {
			r = engine.Reading{}
		}
		c.mu.Lock()
		closed := c.closed
		if err != nil && closed {
			err = ErrClosed // stopped by Close, not the source's fault
		}
		c.attempted, c.checkedAt, c.reading, c.err = true, at, r, err
		if err == nil {
			last := r
			c.last = &last
		}
		c.flight = nil
		f.reading, f.err = r, err
		c.mu.Unlock()
		if err != nil && closed {
			c.logger.Debug("balance read stopped: the source was closed")
		} else if err != nil {
			c.logger.Warn("balance read failed; no reading until the next refresh", "error", err, "refresh", c.refresh)
		} else {
			c.logger.Debug("balance read", "remaining", r.Remaining != nil, "windows", len(r.Windows), "provider_error", r.Error != "")
		}
		close(f.done)
	}()
	return f
}

// Close stops the read in progress, if any, and closes the source when it is an
// io.Closer. Callers waiting on the stopped read get ErrClosed. Close is
// idempotent: the source is closed once.
func (c *Cached) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	f := c.flight
	c.mu.Unlock()
	if f != nil {
		f.cancel()
	}
	if cl, ok := c.src.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// readSafely calls the source, turning a panic into an error.
func (c *Cached) readSafely(ctx context.Context) (r engine.Reading, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.logger.Error("balance source panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r, err = engine.Reading{}, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	return c.src.Read(ctx)
}

// Last returns the latest attempt's reading, whatever its age, and false when that
// attempt failed or none has finished. It never reads and never blocks on a read:
// callers that may wait call Get (or Set.Refresh) first.
func (c *Cached) Last() (engine.Reading, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.attempted || c.err != nil {
		return engine.Reading{}, false
	}
	return c.reading, true
}

// Status is what Cached knows about its source at one instant, for reports such as
// `gatectl routes`.
type Status struct {
	// LastGood is the latest successful reading, however old, even when later
	// attempts failed; nil before the first success. Its TakenAt gives its age.
	LastGood *engine.Reading
	// Err is why the latest attempt failed; nil when it succeeded or none finished.
	Err error
	// CheckedAt is when the latest attempt finished; zero when none has.
	CheckedAt time.Time
	// Due: a Get at that instant would read. Running: a read is in progress.
	Due, Running bool
}

// Status reports the source's state at now without reading.
func (c *Cached) Status(now time.Time) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Err: c.err, CheckedAt: c.checkedAt, Running: c.flight != nil}
	s.Due = !c.attempted || c.dueLocked(now)
	if c.last != nil {
		last := *c.last
		s.LastGood = &last
	}
	return s
}

var (
	_ engine.BalanceSource = (*Cached)(nil)
	_ io.Closer            = (*Cached)(nil)
)
