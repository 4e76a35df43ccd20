package server

// Per-attempt deadlines on an upstream (upstream: in the config): the first byte
// of a stream, the whole of a non-streaming answer, and the silence between two
// reads of a stream that started. Each is real time: it bounds network I/O, not
// the gate's clock.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// deadlineError is an attempt that ran past one of its deadlines. It is a
// timeout (net.Error), so the attempt fails as transport kind "timeout" and
// retry.transport.timeout bounds its retries.
type deadlineError struct {
	key  string        // the config key, e.g. "upstream.firstByteTimeout"
	d    time.Duration // its value
	what string        // what did not happen in time
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("%s within %s (%s): timed out", e.what, e.d, e.key)
}
func (e *deadlineError) Timeout() bool   { return true }
func (e *deadlineError) Temporary() bool { return false }

// attemptDeadline cancels one attempt's context when its current deadline
// passes. arm replaces the deadline; safe for concurrent use.
type attemptDeadline struct {
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
	fired  *deadlineError // the deadline that passed; nil while none has
	armed  *deadlineError // the deadline the timer stands for
}

// withAttemptDeadline derives the attempt's context from the client's: it ends
// with the client's, or when a deadline armed on the returned attemptDeadline
// passes. stop releases both.
func withAttemptDeadline(parent context.Context) (context.Context, *attemptDeadline) {
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, &attemptDeadline{cancel: cancel}
}

// arm (re)starts the deadline: d from now, named by key, describing what must
// happen before it.
func (a *attemptDeadline) arm(key string, d time.Duration, what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired != nil {
		return
	}
	a.armed = &deadlineError{key: key, d: d, what: what}
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.fire)
		return
	}
	a.timer.Reset(d)
}

func (a *attemptDeadline) fire() {
	a.mu.Lock()
	if a.fired == nil {
		a.fired = a.armed
	}
	err := a.fired
	a.mu.Unlock()
	a.cancel(err)
}

// err is the deadline that passed, or nil.
func (a *attemptDeadline) err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired == nil {
		return nil
	}
	return a.fired
}

// explain returns the deadline that passed in place of err (the transport's
// "context canceled"), or err unchanged.
func (a *attemptDeadline) explain(err error) error {
	if err == nil {
		return nil
	}
	if de := a.err(); de != nil {
		return de
	}
	return err
}

// stop ends the attempt's context and its timer.
func (a *attemptDeadline) stop() {
	a.mu.Lock()
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	a.cancel(context.Canceled)
}

// idleBody re-arms the stream's idle deadline on every read that brings bytes
// (idle 0: never, for a non-streaming answer), and names the deadline when a read
// fails because one passed.
type idleBody struct {
	io.ReadCloser
	dl   *attemptDeadline
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.idle > 0 {
		b.dl.arm("upstream.streamIdleTimeout", b.idle, "no data from the upstream stream")
	}
	return n, b.dl.explain(err)
}
