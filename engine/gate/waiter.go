package gate

import (
	"context"
	"time"
)

// Reason says why the waiter is held back — cooldown, tpm, rpm, otpm, pace,
// session-cap, queue or store (a failClosed shared store that does not answer) — as the gate's "wait" event reports it. The decision API answers it to a
// call that asked not to wait (or stopped waiting) before it was granted.
func (w *Waiter) Reason() string {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.reason
}

// Hold is what a held call can be told about its wait: why, since when, and
// when the gate expects to admit it.
type Hold struct {
	Provider, Model string
	Reason          string    // as Reason
	Since           time.Time // when it was queued
	Expected        time.Time // the waiter's next drain time (never past its maxWait deadline)
}

// Hold returns the waiter's state for a progress notice.
func (w *Waiter) Hold() Hold {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return Hold{Provider: w.b.provider, Model: w.b.model, Reason: w.reason, Since: w.enqueued, Expected: w.next}
}

// AdmitObserved is Admit that tells queued, once, about the Waiter when the call
// has to wait (never when it is admitted at once), so that the caller can show
// the wait while it lasts (Waiter.Hold). queued runs on the caller's goroutine
// before the wait starts and must not block; nil is Admit.
func (l *Ledger) AdmitObserved(ctx context.Context, req Request, queued func(*Waiter)) (t Ticket, err error) {
	var w *Waiter
	defer func() {
		if r := recover(); r != nil {
			if w != nil { // failing open: leave nothing queued or granted behind
				w.b.mu.Lock()
				w.b.abandonLocked(l.clock.Now(), w)
				w.b.mu.Unlock()
			}
			t, err = Ticket{FailOpen: true, Reason: "internal"}, nil
			l.emitSafely(Event{Kind: EventFailOpen, At: l.clock.Now(), Provider: req.Provider, Model: req.Model, Session: req.Session, Reason: "internal"})
		}
	}()
	if err := l.StoreAvailable(); err != nil {
		return Ticket{}, err
	}
	t, w = l.Submit(l.clock.Now(), req)
	if w == nil {
		return t, nil
	}
	if _, refused := w.Refused(); queued != nil && !refused {
		queued(w)
	}
	for {
		if t, ok := w.Ticket(); ok {
			return t, nil
		}
		if until, ok := w.Refused(); ok {
			return Ticket{}, &PauseError{Until: until, Waited: l.clock.Now().Sub(w.enqueued)}
		}
		if err := l.StoreAvailable(); err != nil {
			w.Cancel(l.clock.Now())
			return Ticket{}, err
		}
		d := w.Next().Sub(l.clock.Now())
		d += l.jitter(d)
		timer := l.clock.NewTimer(max(d, 0))
		select {
		case <-w.ready:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			w.Cancel(l.clock.Now())
			return Ticket{}, ctx.Err()
		case <-timer.C():
			w.Poll(l.clock.Now())
		}
	}
}
