package gate

// A call whose caller sends nothing into the provider's pause
// (Request.NotIntoPause) is refused while it waits, as soon as the gate sees
// that the pause outlasts anything its wait could end in: failing it open at
// maxWait would only hand the caller a ticket it refuses.

import (
	"errors"
	"fmt"
	"time"
)

// ErrLongPause is what a refused waiter's admission wraps (PauseError).
var ErrLongPause = errors.New("gate: the model's pause outlasts the call's wait")

// PauseError is Admit's answer to a call refused in a pause
// (Request.NotIntoPause): the pause ends at Until, and the call had waited
// Waited when it was refused. Nothing is held.
type PauseError struct {
	Until  time.Time
	Waited time.Duration
}

func (e *PauseError) Error() string {
	return fmt.Sprintf("%v (it ends at %s, after a wait of %s)", ErrLongPause, e.Until.Format(time.RFC3339), e.Waited.Round(time.Millisecond))
}

func (e *PauseError) Unwrap() error { return ErrLongPause }

// Refused reports when the pause a waiter was refused in ends (NotIntoPause),
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

// refuseInPauseLocked refuses w when its caller sends nothing into a pause and
// the pause ending at end outlasts what its wait can come to: the pause makes
// its wait run past maxWait, so the gate forces it through at its own point of
// maxWait's last tenth (deadlineLocked), and a caller that finds more than
// maxWait of the pause left there answers the call itself (a shorter pause
// it sits out). Refused now, the call gets that answer now, not at maxWait.
// It reports whether w was refused.
func (b *bucket) refuseInPauseLocked(now time.Time, w *Waiter, end time.Time) bool {
	if !w.req.NotIntoPause || w.granted || !w.refusedUntil.IsZero() {
		return false
	}
	if at, _ := b.deadlineLocked(w); !end.After(at.Add(b.l.conf().MaxWait)) {
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
// open — when that wait is a pause with more than maxWait left; nil otherwise.
// It never joins the queue.
func (b *bucket) refusedAtOnceLocked(now time.Time, req Request) *Waiter {
	end := b.pauseEndLocked(now)
	if !end.After(now.Add(b.l.conf().MaxWait)) {
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
