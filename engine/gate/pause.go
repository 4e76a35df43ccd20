package gate

// A call whose caller sends nothing into the provider's pause
// (Request.Pause) is refused while it waits, as soon as the gate sees a pause
// its caller would refuse it in at maxWait: failing it open there would only
// hand the caller a ticket it refuses, later.

import (
	"errors"
	"fmt"
	"time"
)

// PausePolicy is what a caller does with a call the gate lets through at
// maxWait (failing open) while the provider's pause is still on.
type PausePolicy uint8

const (
	// PauseSend: it sends the call (the simulator's sessions).
	PauseSend PausePolicy = iota
	// PauseSitOut: it sits out a pause that ends within maxWait, and answers
	// the call itself when more than maxWait of the pause is left (the proxy).
	PauseSitOut
	// PauseAnswer: it answers the call itself (the decision API).
	PauseAnswer
)

// ErrLongPause is what a refused waiter's admission wraps (PauseError).
var ErrLongPause = errors.New("gate: the model's pause outlasts the call's wait")

// PauseError is Admit's answer to a call refused in a pause
// (Request.Pause): the pause ends at Until, and the call had waited
// Waited when it was refused. Nothing is held.
type PauseError struct {
	Until  time.Time
	Waited time.Duration
}

func (e *PauseError) Error() string {
	return fmt.Sprintf("%v (it ends at %s, after a wait of %s)", ErrLongPause, e.Until.Format(time.RFC3339), e.Waited.Round(time.Millisecond))
}

func (e *PauseError) Unwrap() error { return ErrLongPause }

// Refused reports when the pause a waiter was refused in ends (Request.Pause),
// and whether it was.
func (w *Waiter) Refused() (until time.Time, ok bool) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.refusedUntil, !w.refusedUntil.IsZero()
}

// pauseEndLocked is when the model's cooldown ends: its own, its provider's,
// or another instance's as the shared window last answered it.
func (b *bucket) pauseEndLocked(now time.Time) time.Time {
	end := now.Add(b.cooldownLeft(now))
	if b.sharedHoldReason == "cooldown" && b.sharedHoldUntil.After(end) {
		end = b.sharedHoldUntil
	}
	return end
}

// refuseInPauseLocked refuses w when its caller would refuse it in the pause
// ending at end. A pause that ends past w's maxWait deadline makes its wait
// run past maxWait, so the gate lets it through at its own point of maxWait's
// last tenth, or at the deadline (forcedDue); the caller answers it there when
// more of the pause is left than it sits out (Request.Pause). The rule reads
// the deadline, the latest point: it refuses only a call its caller would
// refuse wherever the gate let it through. Refused now, the call gets that
// answer now, not at maxWait. It reports whether w was refused.
func (b *bucket) refuseInPauseLocked(now time.Time, w *Waiter, end time.Time) bool {
	if w.req.Pause == PauseSend || w.granted || !w.refusedUntil.IsZero() {
		return false
	}
	if _, hard := b.deadlineLocked(w); !end.After(hard.Add(b.sitsOut(w.req.Pause))) {
		return false
	}
	w.refusedUntil = end
	close(w.ready)
	return true
}

// refusePausedLocked refuses every waiter refuseInPauseLocked would: a 429
// just started or lengthened the pause, and the calls queued before it are
// answered at once rather than at their next look.
func (b *bucket) refusePausedLocked(now time.Time) {
	end := b.pauseEndLocked(now)
	if !end.After(now) {
		return
	}
	n := 0
	for _, w := range b.waiters {
		if !b.refuseInPauseLocked(now, w, end) {
			b.waiters[n] = w
			n++
		}
	}
	clear(b.waiters[n:])
	b.waiters = b.waiters[:n]
}

// refusedAtOnceLocked is the waiter, already refused, of a call req whose wait
// is past maxWait as it arrives — the gate would admit it at once, failing
// open — when its caller would refuse it in the pause still on; nil otherwise.
// It never joins the queue.
func (b *bucket) refusedAtOnceLocked(now time.Time, req Request) *Waiter {
	end := b.pauseEndLocked(now)
	if !end.After(now.Add(b.sitsOut(req.Pause))) {
		return nil
	}
	w := &Waiter{b: b, req: req, enqueued: now, ready: make(chan struct{}), refusedUntil: end}
	close(w.ready)
	return w
}

// refusePausedOf runs the refusal pass over provider's models: a provider-wide
// pause (this instance's 429, or another's through the shared store) holds
// them all.
func (l *Ledger) refusePausedOf(provider string, now time.Time) {
	for _, b := range l.allBuckets() {
		if b.provider == provider {
			b.mu.Lock()
			b.refusePausedLocked(now)
			b.mu.Unlock()
		}
	}
}

// sitsOut is how much of a pause a caller with policy p sits out at the point
// the gate lets its call through.
func (b *bucket) sitsOut(p PausePolicy) time.Duration {
	if p == PauseSitOut {
		return b.l.conf().MaxWait
	}
	return 0
}
