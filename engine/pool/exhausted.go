package pool

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// OnQuota decides what a QUOTA failure leads to (why: see docs/RATIONALE.md,
// "Why is QUOTA not retried like RATE_LIMIT?"), in this order:
//
//  1. a session whose switch is off gets ActionPass: the failure goes on as if
//     there were no pools. Its provider is still marked (a fact about the
//     provider, which other sessions' draws use) unless rule 2 applies to it;
//  2. a provider in NativeRetryFirstProviders whose own bounded schedule has not
//     run (NativeSpent false) is neither marked nor moved: ActionNativeRetry —
//     run the schedule, then call again with NativeSpent;
//  3. the provider is marked exhausted;
//  4. when the governing pool allows mid-session switches and holds a route that
//     is not marked, the request moves there at once: ActionFailover, event
//     "failover". The target is drawn among the unmarked routes that clear their
//     threshold, else it is the first unmarked one; no reading is waited for;
//  5. otherwise the long-term wait of LongTermDelay (see ArmLongTerm).
//
// A Planner reaches it through RouteQuota.
func (q *Router) OnQuota(ctx context.Context, f QuotaFailure) Decision {
	return q.onQuota(ctx, q.clock.Now(), f)
}

func (q *Router) onQuota(ctx context.Context, now time.Time, f QuotaFailure) Decision {
	c := q.cfg.Load()
	provider := f.Route.Provider
	quick := c.nativeFirst[provider] && !f.NativeSpent
	if !q.Enabled(f.Session) {
		if !quick {
			q.Mark(provider, now)
		}
		return Decision{Action: ActionPass, Route: f.Route, Reason: "quota retry is off for the session"}
	}
	if quick {
		return Decision{Action: ActionNativeRetry, Route: f.Route,
			Reason: fmt.Sprintf("provider %q runs its own bounded retry schedule first", provider)}
	}
	q.Mark(provider, now)
	if to, pool, ok := q.failover(ctx, c, now, f); ok {
		return Decision{Action: ActionFailover, Route: to, Pool: pool,
			Reason: fmt.Sprintf("provider %q is out of allowance: pool %q moves the request to %s", provider, pool, to)}
	}
	return q.armLongTerm(now, f, c.settings.LongTermDelay)
}

// failover finds where a session failing on f.Route moves, records the move
// and announces it. Only a route f.Usable accepts is a target: a move the
// caller would refuse is neither recorded nor announced. The provider is
// already marked.
func (q *Router) failover(ctx context.Context, c *quotaConfig, now time.Time, f QuotaFailure) (engine.Route, string, bool) {
	session, from := f.Session, f.Route
	var rec SessionRecord
	if session != "" {
		rec, _ = q.sessions.Get(session) // a load failure follows the defaults
	}
	p := q.sessionPool(c, rec, session, f.Pool, from)
	if p == nil || !p.midSessionSwitch {
		return engine.Route{}, "", false
	}
	to, ok := q.choose(ctx, c, p, now, &from, true, f.Usable)
	if !ok {
		return engine.Route{}, p.name, false
	}
	if session != "" {
		q.mu.Lock()
		a := Ask{Route: from}
		if f.Pool != "" {
			a = Ask{Pool: f.Pool}
		}
		if st := q.routes[session]; st != nil {
			st.current, st.lastUsed = to, now
			a = Ask{Route: st.asked, Pool: st.askedPool}
		} else {
			q.addRoute(session, &sessionRoute{asked: a.Route, askedPool: a.Pool, current: to, lastUsed: now}, now)
		}
		q.mu.Unlock()
		q.saveShared(session, a, to)
	}
	src, dst := from, to
	q.emit([]Event{{Kind: EventFailover, Session: session, Failure: f.Failure, From: &src, To: &dst, Pool: p.name, At: now}})
	return to, p.name, true
}

// ArmLongTerm arms a long-term wait of d for the session's failure f: the first
// one opens the session's entry (event "entered", attempts 1); later ones, until
// the entry ends, count further attempts. The returned ActionWait goes to Wait. A
// failure outside a session (f.Session "") gets a plain wait with no entry.
func (q *Router) ArmLongTerm(f QuotaFailure, d time.Duration) Decision {
	return q.armLongTerm(q.clock.Now(), f, d)
}

func (q *Router) armLongTerm(now time.Time, f QuotaFailure, d time.Duration) Decision {
	c := q.cfg.Load()
	if d <= 0 {
		d = c.settings.LongTermDelay
	}
	dec := Decision{Action: ActionWait, Route: f.Route, Wait: d, Until: now.Add(d), Attempts: 1}
	var rec SessionRecord
	if f.Session != "" {
		rec, _ = q.sessions.Get(f.Session)
	}
	switch p := q.sessionPool(c, rec, f.Session, f.Pool, f.Route); {
	case p == nil:
		dec.Reason = "no pool governs the session: waiting in place"
	case !p.midSessionSwitch:
		dec.Pool = p.name
		dec.Reason = fmt.Sprintf("pool %q refuses mid-session switches: waiting in place", p.name)
	default:
		dec.Pool = p.name
		dec.Reason = fmt.Sprintf("no other route of pool %q has allowance: waiting", p.name)
	}
	if f.Session == "" {
		q.mu.Lock()
		dec.wake = q.wakeForLocked(f.Route.Provider)
		q.mu.Unlock()
		return dec
	}
	q.mu.Lock()
	e := q.entries[f.Session]
	opened := e == nil
	if opened {
		e = &quotaEntry{session: f.Session, enteredAt: now, done: make(chan struct{})}
		q.entries[f.Session] = e
	}
	e.lastArmed = now
	e.attempts++
	e.pending = true
	e.nextAttemptAt = dec.Until
	e.provider, e.turn, e.step = f.Route.Provider, f.Turn, f.Step
	dec.Attempts = e.attempts
	dec.entry = e
	dec.wake = q.wakeForLocked(f.Route.Provider)
	if opened {
		q.noteAdd(now) // armed first: a sweep it sets off must see the entry as it is
	}
	q.mu.Unlock()
	if opened {
		q.emit([]Event{{Kind: EventEntered, Session: f.Session, Failure: f.Failure, Provider: f.Route.Provider, Turn: f.Turn, Step: f.Step,
			At: now, EnteredAt: now, NextAttemptAt: dec.Until, Attempts: 1, Pending: true}})
	}
	return dec
}

// Wait sleeps out a ActionWait decision on the injected clock's timer. It returns
// nil when the time is up or the session recovered meanwhile (retry now),
// ErrDisabled when the switch went off (the entry ended: give up as if there
// were no pools), or ctx.Err() when the request was cancelled — the entry then
// survives with pending false, no "left" is announced, and the next QUOTA failure
// re-arms it. Any other decision returns nil at once.
//
// The wait also ends, nil, when the allowance is back as far as anyone can
// tell: its provider's mark lifted by hand (Unmark, or another instance's
// adopted), or a top-up its balance source shows (see toppedUp). While it waits
// on a provider with a balance source it reads the source as it begins and
// again each refresh — no draw may come to read it, as every session of the
// pool may be waiting.
func (q *Router) Wait(ctx context.Context, d Decision) error {
	if d.Action != ActionWait {
		return nil
	}
	var done <-chan struct{}
	if d.entry != nil {
		done = d.entry.done
		select { // ended before the wait began
		case <-done:
			return q.endedErr(d.entry)
		default:
		}
	}
	t := q.clock.NewTimer(d.Wait)
	defer t.Stop()
	// The source's reads end with the wait: the request goes on to retry,
	// and its context with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	provider, since := d.Route.Provider, q.clock.Now()
	// base is what the source showed as the wait began — read at once, as a
	// session's last draw may have read it long before; a source that failed
	// is read each refresh until it answers — and then each reading new
	// enough to tell that was no top-up (toppedUp): a top-up is news against
	// the last reading.
	var base engine.Reading
	var read engine.Timer
	var readC <-chan time.Time
	var readDone chan struct{}
	arm := func(now bool) { // the next read: now, or a refresh on
		if b := q.cfg.Load().pools.balanceOf(provider); b != noBalance {
			after := b.refresh // (NewPools gives every source one)
			if now {
				after = 0
			}
			read = q.clock.NewTimer(after)
			readC = read.C()
		}
	}
	arm(true)
	defer func() {
		if read != nil {
			read.Stop()
		}
	}()
	for {
		select {
		case <-t.C():
			q.disarm(d.entry)
			return nil
		case <-d.wake: // its provider's mark was lifted, or a top-up read: try again now
			q.disarm(d.entry)
			return nil
		case <-done:
			return q.endedErr(d.entry)
		case <-ctx.Done():
			q.disarm(d.entry)
			return ctx.Err()
		case <-readC:
			// Read in the background (within the source's own timeout, one
			// read for every wait on it: the source's cache shares it), so
			// an unmark or the switch is not kept waiting.
			readC, readDone = nil, make(chan struct{})
			go func(ch chan struct{}) {
				q.readings.Refresh(ctx, []string{provider})
				close(ch)
			}(readDone)
		case <-readDone:
			readDone = nil
			q.toppedUp(provider, &base, since) // a top-up closes d.wake
			arm(false)
		}
	}
}

// toppedUp lifts provider's mark and ends the long-term waits on it when its
// latest reading shows a top-up against base, the last reading a wait saw (the
// first reading with content is only the base): it
// shows allowance (withdraws: taken at least a refresh after the mark, or
// after since without one), and either more balance than base or allowance in
// a window base showed spent. A reading new enough to tell and no top-up is
// the next base. A source that showed allowance all along disagrees with the
// provider's QUOTA failure (it reports another limit, or answers from a
// cache), and a window that merely refilled a little says nothing new of a
// limit it never showed spent: waking on such readings would send every
// waiting call back to be refused each refresh rather than each
// LongTermDelay. The mark goes only when the reading is a refresh newer than
// it: a later QUOTA failure stands.
func (q *Router) toppedUp(provider string, base *engine.Reading, since time.Time) {
	r, ok := q.readings.Last(provider)
	if !ok || !hasContent(&r) {
		return
	}
	if !hasContent(base) {
		// Until the source answers, nothing is news: a top-up is read
		// against a reading, never against a failed read.
		*base = r
		return
	}
	b := q.cfg.Load().pools.balanceOf(provider)
	q.mu.Lock()
	defer q.mu.Unlock()
	at, marked := q.marks[provider]
	if !marked {
		at = since
	}
	if r.TakenAt.Before(at.Add(b.refresh)) {
		return // too close to the failure to tell (see withdraws)
	}
	if !withdraws(&r, b, at) || !showsMore(&r, base, b) {
		*base = r
		return
	}
	if marked {
		delete(q.marks, provider)
	}
	q.wakeLocked(provider)
}

// showsMore reports whether reading r shows a top-up against base: r's
// remaining is above base's (a balance rises only when someone pays in), or a
// weighed window base showed spent (0 or less) shows allowance in r.
func showsMore(r, base *engine.Reading, b *balance) bool {
	if r.Remaining != nil && (base.Remaining == nil || *r.Remaining > *base.Remaining) {
		return true
	}
	for i := range r.Windows {
		w := &r.Windows[i]
		if !b.weighs(w) || !(w.Remaining > 0) {
			continue
		}
		if was, seen := windowRemaining(base, w.Name); seen && !(was > 0) {
			return true
		}
	}
	return false
}

// windowRemaining is the remaining of r's window name, and whether r has it.
func windowRemaining(r *engine.Reading, name string) (float64, bool) {
	for i := range r.Windows {
		if r.Windows[i].Name == name && !math.IsNaN(r.Windows[i].Remaining) {
			return r.Windows[i].Remaining, true
		}
	}
	return 0, false
}

func (q *Router) endedErr(e *quotaEntry) error {
	q.mu.Lock()
	reason := e.reason
	q.mu.Unlock()
	if reason == LeftDisabled {
		return ErrDisabled
	}
	return nil
}

// Cancel gives up a ActionWait decision that will not be slept out (its
// request was cancelled before Wait): the entry stays, unarmed, as when Wait
// is cancelled.
func (q *Router) Cancel(d Decision) { q.disarm(d.entry) }

// disarm clears an entry's pending flag (its wait is over or cancelled).
func (q *Router) disarm(e *quotaEntry) {
	if e == nil {
		return
	}
	q.mu.Lock()
	e.pending = false
	e.nextAttemptAt = time.Time{}
	q.mu.Unlock()
}

// wakeForLocked is the channel a long-term wait armed on provider now ends
// on (q.mu held): see Router.wakes.
func (q *Router) wakeForLocked(provider string) <-chan struct{} {
	ch := q.wakes[provider]
	if ch == nil {
		ch = make(chan struct{})
		q.wakes[provider] = ch
	}
	return ch
}

// wakeLocked ends the long-term waits armed on provider (q.mu held): its
// mark was lifted by hand (Unmark, or another instance's adopted), or its
// balance source showed a top-up (toppedUp), so the allowance is back as far
// as anyone can tell, and their calls try again now rather than at the end of
// their LongTermDelay. Called in the step that deletes the mark (or, for a
// top-up read where no mark is left, decides to wake): a wait armed after it
// is not woken. (A draw that finds a mark withdrawn by a reading
// lifts it without a wake: the waits read the source themselves, and tell a
// top-up from a source that never agreed with the provider.)
func (q *Router) wakeLocked(provider string) {
	if ch := q.wakes[provider]; ch != nil {
		close(ch)
		delete(q.wakes, provider)
	}
}

// OnSuccess records that a request of the session succeeded: an open entry ends
// with reason "recovered" (event "left"), and a wait still pending returns nil.
func (q *Router) OnSuccess(session string) {
	q.end(session, LeftRecovered)
}

// end closes the session's entry, if any, and announces it.
func (q *Router) end(session, reason string) {
	if session == "" {
		return
	}
	now := q.clock.Now()
	q.mu.Lock()
	e := q.entries[session]
	if e == nil {
		q.mu.Unlock()
		return
	}
	delete(q.entries, session)
	e.reason = reason
	e.pending = false
	close(e.done)
	ev := Event{Kind: EventLeft, Session: session, Reason: reason, Provider: e.provider, Turn: e.turn, Step: e.step,
		At: now, EnteredAt: e.enteredAt, LeftAt: now, Duration: now.Sub(e.enteredAt), Attempts: e.attempts}
	q.mu.Unlock()
	q.emit([]Event{ev})
}

// Enabled reports the session's effective switch: its own setting, else the
// deployment's DefaultEnabled. A Planner's retry.Request.Router comes from here.
func (q *Router) Enabled(session string) bool {
	var rec SessionRecord
	if session != "" {
		rec, _ = q.sessions.Get(session)
	}
	return enabled(rec, q.cfg.Load().settings)
}

// State returns the session's long-term entry, and whether it has one.
func (q *Router) State(session string) (WaitState, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.entries[session]
	if e == nil {
		return WaitState{}, false
	}
	return WaitState{Pending: e.pending, Attempts: e.attempts, EnteredAt: e.enteredAt, NextAttemptAt: e.nextAttemptAt,
		Provider: e.provider, Turn: e.turn, Step: e.step}, true
}

// IsRetrying reports whether the session is in a long-term entry.
func (q *Router) IsRetrying(session string) bool {
	_, ok := q.State(session)
	return ok
}

// CurrentRoute returns the route the session is on, and whether it has started.
func (q *Router) CurrentRoute(session string) (engine.Route, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.routes[session]; st != nil {
		return st.current, true
	}
	return engine.Route{}, false
}

// Forget drops the session's route (its next request starts it again), on
// every instance when routes are shared. The entry and the durable settings stay.
func (q *Router) Forget(session string) {
	q.mu.Lock()
	delete(q.routes, session)
	q.mu.Unlock()
	q.saveShared(session, Ask{}, engine.Route{}) // on every instance
}
