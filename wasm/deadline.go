package wasm

import (
	"context"
	"sync/atomic"
	"time"
)

// callCtx is the context one call runs under: it carries the instance (for the
// gate host functions) and ends at the call's deadline, which wazero, built with
// WithCloseOnContextDone, turns into closing the module.
//
// Why not context.WithTimeout(context.WithValue(...))? A call of a small module
// takes a few microseconds, and those two cost about as much again: a timerCtx, a
// runtime timer added and deleted, cancel propagation and a value node per call.
// callCtx costs one small allocation and a channel; the timer is the instance's
// own, re-armed per call (instance.arm).
//
// The caller's context is consulted for its deadline (the earlier of the two
// wins) and for values; a caller that cancels without a deadline is noticed
// before the call starts, not during it — a call lasts milliseconds at most.
type callCtx struct {
	parent   context.Context
	inst     *instance
	deadline time.Time
	done     chan struct{}
	expired  atomic.Bool
	// byCaller: the deadline is the caller's, earlier than the plugin's own.
	byCaller bool
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) Value(key any) any {
	if key == (instKey{}) {
		return c.inst
	}
	return c.parent.Value(key)
}

// expire ends the call's context; the instance's timer calls it.
func (c *callCtx) expire() {
	if c.expired.CompareAndSwap(false, true) {
		close(c.done)
	}
}

// arm starts the instance's deadline for a call under parent and returns the
// call's context. disarm must follow the call.
func (inst *instance) arm(parent context.Context, timeout time.Duration) *callCtx {
	now := time.Now()
	c := &callCtx{parent: parent, inst: inst, deadline: now.Add(timeout), done: make(chan struct{})}
	if d, ok := parent.Deadline(); ok && d.Before(c.deadline) {
		c.deadline, c.byCaller = d, true
		timeout = d.Sub(now)
	}
	inst.cur.Store(c)
	if inst.timer == nil {
		inst.timer = time.AfterFunc(timeout, inst.expire)
	} else {
		inst.timer.Reset(timeout)
	}
	return c
}

// disarm stops the deadline after a call. It reports false when the timer had
// already fired (or is firing): the instance may be closing and must not be
// reused, since a late expiry would otherwise hit its next call.
func (inst *instance) disarm() bool {
	return inst.timer.Stop()
}

// expire is the instance timer's function: it ends the current call's context.
func (inst *instance) expire() {
	if c := inst.cur.Load(); c != nil {
		c.expire()
	}
}
