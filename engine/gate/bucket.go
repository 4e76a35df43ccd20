package gate

import (
	"sync"
	"time"
)

// bucket is one provider/model's ledger. Every field below mu is guarded by it.
type bucket struct {
	l        *Ledger
	provider string
	model    string
	prov     *providerState
	limits   ModelLimits
	rpm      int // request budget: rpm × safety factor, at least 1

	mu            sync.Mutex
	win           slidingWindow
	learn         learner
	est           estimator
	cooldownUntil time.Time
	reservedOpen  int64 // reservations of tickets not yet settled
	inFlight      int
	perSession    map[string]int // in flight per session; kept only with a cap

	slots []ticketSlot
	free  []int32

	waiters     []*Waiter
	round       uint64 // fair round of the last grant
	arrivals    uint64
	waits       int64
	rateLimited int64
	last429     time.Time

	// Limits the provider stated (Calibrate), per minute; 0 when none. They
	// override the configured ones, across reloads too.
	statedTokens, statedRequests int64
}

// ticketSlot remembers an open ticket. gen changes when the slot is reused, so a
// stale ticket cannot settle someone else's reservation.
type ticketSlot struct {
	gen      uint32
	open     bool
	seq      uint64
	reserved int64
	output   int64
	asked    bool
	bytes    int
	session  string
}

// reconfigureLocked adopts a reloaded configuration (see Ledger.Reconfigure).
func (b *bucket) reconfigureLocked(now time.Time, cfg *Config) {
	lim := cfg.Limits(b.provider + "/" + b.model)
	if b.statedTokens > 0 { // a stated limit supersedes the configured guess
		lim.TPM = int(scaleLimit(b.statedTokens, cfg.Window))
	}
	if b.statedRequests > 0 {
		lim.RPM = int(scaleLimit(b.statedRequests, cfg.Window))
	}
	b.limits = lim
	b.rpm = max(1, int(float64(lim.RPM)*lim.SafetyFactor))
	b.win.span = cfg.Window
	b.learn.enabled = cfg.Learn
	if start := float64(lim.TPM); start != b.learn.start {
		untouched := b.learn.quota == b.learn.start && b.learn.trigger == 0
		fresh := newLearner(lim.TPM, cfg.Learn, now)
		b.learn.start, b.learn.floor = fresh.start, fresh.floor
		if untouched {
			b.learn.quota = fresh.quota
		}
		b.learn.quota = max(b.learn.quota, b.learn.floor)
	}
	b.est.configuredReserve = cfg.OutputReserveTokens
	if b.est.nOutputs < reserveMinSamples {
		b.est.reserve = int64(cfg.OutputReserveTokens)
	}
	switch {
	case cfg.MaxInFlightPerSession > 0 && b.perSession == nil:
		b.perSession = make(map[string]int) // calls already in flight are not counted
	case cfg.MaxInFlightPerSession == 0:
		b.perSession = nil
	}
	b.dispatchLocked(now) // a larger budget may let waiters through
}

func newBucket(l *Ledger, provider, model string, ps *providerState, now time.Time) *bucket {
	lim := l.conf().Limits(provider + "/" + model)
	b := &bucket{
		l:        l,
		provider: provider,
		model:    model,
		prov:     ps,
		limits:   lim,
		rpm:      max(1, int(float64(lim.RPM)*lim.SafetyFactor)),
		win:      newSlidingWindow(l.conf().Window),
		learn:    newLearner(lim.TPM, l.conf().Learn, now),
		est:      newEstimator(l.conf().OutputReserveTokens),
	}
	if l.conf().MaxInFlightPerSession > 0 {
		b.perSession = make(map[string]int)
	}
	if l.quotas != nil && l.conf().Learn {
		if q, ok := l.quotas.Load(provider, model); ok {
			b.learn.restore(q)
		}
	}
	return b
}

// tokenBudget is min(learned quota, tightest trigger) × safety factor.
func (b *bucket) tokenBudget() int64 {
	return int64(b.learn.budget() * b.limits.SafetyFactor)
}

func (b *bucket) cooldownLeft(now time.Time) time.Duration {
	until := b.cooldownUntil
	if p := b.prov.cooldownUntil.Load(); p > until.UnixNano() {
		until = time.Unix(0, p)
	}
	return max(until.Sub(now), 0)
}

// block says why a reservation of res for session cannot go now, and for how long
// at least: wait = max(cooldown left, TPM drain, RPM drain). capped means the
// session's in-flight cap holds it until one of its calls settles.
func (b *bucket) block(now time.Time, res int64, session string) (reason string, wait time.Duration, capped bool) {
	cd := b.cooldownLeft(now)
	budget := b.tokenBudget()
	var tpm time.Duration
	if res <= budget { // an over-budget reservation never waits for the window
		tpm, _ = b.win.tokenDrain(now, res, budget)
	}
	rpm := b.win.requestDrain(now, b.rpm)
	wait = max(cd, tpm, rpm)
	switch {
	case wait == 0:
	case cd == wait:
		reason = "cooldown"
	case tpm == wait:
		reason = "tpm"
	default:
		reason = "rpm"
	}
	if b.perSession != nil && b.perSession[session] >= b.l.conf().MaxInFlightPerSession {
		capped = true
		if reason == "" {
			reason = "session-cap"
		}
	}
	if cd == 0 && (tpm > 0 || res > budget) {
		// the token budget — not RPM, not a cooldown — held this call back, or is too
		// small to hold it at all (a trigger set by outside traffic can shrink it
		// below every reservation: the relax rules must still see the pressure)
		if st, moved := b.learn.onTokenBlocked(now, b.l.conf().Window); moved {
			b.emitLearn(now, st)
		}
	}
	return reason, wait, capped
}

// reservation sizes a request: estimated input + output reserve.
func (b *bucket) reservation(req Request) (total, output int64, asked bool) {
	in := int64(req.InputTokens)
	if in <= 0 {
		in = b.est.input(req.InputBytes)
	}
	output = b.est.outputReserve(req.MaxTokens)
	return in + output, output, req.MaxTokens > 0
}

func (b *bucket) submitLocked(now time.Time, req Request) (Ticket, *Waiter) {
	b.win.expire(now)
	res, out, asked := b.reservation(req)
	if len(b.waiters) == 0 {
		reason, wait, capped := b.block(now, res, req.Session)
		if wait == 0 && !capped {
			return b.grantLocked(now, req, res, out, asked, 0, ""), nil
		}
		if wait > b.l.conf().MaxWait {
			t := b.grantLocked(now, req, res, out, asked, 0, "max-wait")
			t.FailOpen = true
			defer func() {
				if r := recover(); r != nil { // the event hook panicked: Submit fails open without t
					_ = b.closeSlotLocked(now, t, 0, nil)
					panic(r)
				}
			}()
			b.event(EventFailOpen, now, req.Session, "max-wait:"+reason, wait, res)
			return t, nil
		}
	}
	// Queue: round-robin across sessions, FIFO within one.
	queued := uint64(0)
	for _, w := range b.waiters {
		if w.req.Session == req.Session && w.req.Priority == req.Priority {
			queued++
		}
	}
	b.arrivals++
	w := &Waiter{
		b: b, req: req, reserved: res, output: out, asked: asked,
		enqueued: now, round: b.round + queued + 1, arrival: b.arrivals,
		ready: make(chan struct{}),
	}
	b.waiters = append(b.waiters, w)
	defer func() {
		if r := recover(); r != nil {
			// The event hook panicked: Submit fails the call open, so nothing of
			// this waiter may stay behind (queued, it would be granted later and
			// never settled).
			b.abandonLocked(now, w)
			panic(r)
		}
	}()
	b.dispatchLocked(now)
	if w.granted {
		return w.ticket, nil
	}
	b.waits++
	b.event(EventWait, now, req.Session, w.reason, w.next.Sub(now), res)
	return Ticket{}, w
}

// dispatchLocked grants, in fair order, every waiter that fits at now. A waiter
// that does not fit lets smaller ones behind it through (no head-of-line blocking)
// until it has waited half a window; from then on it holds everyone behind it, so
// a huge context cannot be starved by a stream of small requests.
func (b *bucket) dispatchLocked(now time.Time) {
	if len(b.waiters) == 0 {
		return
	}
	b.win.expire(now)
	sortWaiters(b.waiters)
	var held *Waiter
	for _, w := range b.waiters {
		if w.granted {
			continue // granted by a dispatch that a panicking event hook cut short
		}
		deadline := w.enqueued.Add(b.l.conf().MaxWait)
		if held != nil {
			if w.reason == "" {
				w.reason = "queue"
			}
			if !now.Before(deadline) { // holding the queue never stretches a wait past maxWait
				b.grantWaiterLocked(now, w, "max-wait")
				w.ticket.FailOpen = true
				b.event(EventFailOpen, now, w.req.Session, "max-wait:queue", now.Sub(w.enqueued), w.reserved)
				continue
			}
			w.next = held.next
			if w.next.After(deadline) {
				w.next = deadline
			}
			continue
		}
		reason, wait, capped := b.block(now, w.reserved, w.req.Session)
		switch {
		case wait == 0 && !capped:
			b.grantWaiterLocked(now, w, "")
			continue
		case !now.Before(deadline):
			b.grantWaiterLocked(now, w, "max-wait")
			w.ticket.FailOpen = true
			b.event(EventFailOpen, now, w.req.Session, "max-wait:"+reason, now.Sub(w.enqueued), w.reserved)
			continue
		}
		if w.reason == "" {
			w.reason = reason
		}
		if capped && wait == 0 {
			w.next = deadline // woken by the settlement that frees the cap
		} else {
			w.next = now.Add(wait)
			if w.next.After(deadline) {
				w.next = deadline
			}
		}
		// Only a call the window holds back holds the queue: one held by its own
		// session's in-flight cap waits for that session, not for capacity.
		if now.Sub(w.enqueued) >= b.l.conf().Window/2 && !capped {
			held = w
		}
	}
	n := 0
	for _, w := range b.waiters {
		if !w.granted {
			b.waiters[n] = w
			n++
		}
	}
	clear(b.waiters[n:])
	b.waiters = b.waiters[:n]
}

func (b *bucket) grantWaiterLocked(now time.Time, w *Waiter, reason string) {
	if reason == "" {
		reason = w.reason
	}
	w.ticket = b.grantLocked(now, w.req, w.reserved, w.output, w.asked, now.Sub(w.enqueued), reason)
	w.granted = true
	if w.round > b.round {
		b.round = w.round
	}
	close(w.ready)
	if w.ticket.Waited > 0 {
		b.event(EventAdmitted, now, w.req.Session, w.ticket.Reason, w.ticket.Waited, w.reserved)
	}
}

func (b *bucket) removeWaiterLocked(w *Waiter) {
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return
		}
	}
}

// grantLocked records the reservation in the window and issues its ticket.
func (b *bucket) grantLocked(now time.Time, req Request, res, out int64, asked bool, waited time.Duration, reason string) Ticket {
	if budget := b.tokenBudget(); res > budget {
		reason = "over-budget"
		b.event(EventOverBudget, now, req.Session, reason, waited, res)
	}
	// The clean-window record counts calls at their expected output, like the 429
	// reading; before any output was seen there is no expectation, and a reading
	// made of reserves would overstate it (and later raise a false leak warning).
	reading := 0.0
	if b.est.meanOutput() >= 0 {
		reading = b.providerViewLocked() + float64(res-out+b.est.expectedOutput(out))
	}
	b.learn.observeAdmit(now, reading, b.l.conf().Window)
	seq := b.win.add(now, res, out)
	var idx int32
	if n := len(b.free); n > 0 {
		idx = b.free[n-1]
		b.free = b.free[:n-1]
	} else {
		b.slots = append(b.slots, ticketSlot{})
		idx = int32(len(b.slots) - 1)
	}
	s := &b.slots[idx]
	s.open, s.seq, s.reserved, s.output, s.asked, s.bytes, s.session = true, seq, res, out, asked, req.InputBytes, req.Session
	b.reservedOpen += res
	b.inFlight++
	if b.perSession != nil {
		b.perSession[req.Session]++
	}
	return Ticket{b: b, slot: idx, gen: s.gen, Reserved: res, ReservedOutput: out, Waited: waited, Reason: reason}
}

// closeLocked settles (u != nil) or releases a ticket.
func (b *bucket) closeLocked(now time.Time, t Ticket, tokens int64, u *Usage) error {
	if err := b.closeSlotLocked(now, t, tokens, u); err != nil {
		return err
	}
	b.dispatchLocked(now) // the refund may let waiters through
	return nil
}

// abandonLocked takes w out without dispatching (nor emitting): it leaves the
// queue, or gives back the grant nobody will use. For recovery from a panic.
func (b *bucket) abandonLocked(now time.Time, w *Waiter) {
	if w.cancelled {
		return
	}
	w.cancelled = true
	if w.granted {
		_ = b.closeSlotLocked(now, w.ticket, 0, nil)
		return
	}
	b.removeWaiterLocked(w)
}

// closeSlotLocked is closeLocked without the dispatch.
func (b *bucket) closeSlotLocked(now time.Time, t Ticket, tokens int64, u *Usage) error {
	if int(t.slot) >= len(b.slots) {
		return ErrTicketClosed
	}
	s := &b.slots[t.slot]
	if !s.open || s.gen != t.gen {
		return ErrTicketClosed
	}
	b.win.expire(now)
	b.win.settle(s.seq, tokens) // false: it already left the window and counts no more
	b.reservedOpen -= s.reserved
	b.inFlight--
	if b.perSession != nil {
		if b.perSession[s.session]--; b.perSession[s.session] <= 0 {
			delete(b.perSession, s.session)
		}
	}
	if u != nil {
		b.est.observe(s.bytes, u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens, u.OutputTokens, s.output, s.asked)
	}
	*s = ticketSlot{gen: s.gen + 1}
	b.free = append(b.free, t.slot)
	return nil
}

func (b *bucket) rateLimitedLocked(now time.Time, retryAfter time.Duration, fallback bool) {
	b.win.expire(now)
	if until := now.Add(retryAfter); until.After(b.cooldownUntil) {
		b.cooldownUntil = until // a shorter, later cooldown never shortens a longer one
	}
	b.rateLimited++
	b.last429 = now
	e := b.newEvent(EventRateLimited, now, "", "", 0, 0)
	e.RetryAfter, e.FromFallback = retryAfter, fallback
	b.l.emit(e)
	for _, st := range b.learn.on429(now, b.providerViewLocked(), b.l.conf().Window) {
		b.emitLearn(now, st)
	}
}

// providerViewLocked estimates what the provider counted in the window: settled
// usage as is, and for calls still in flight their input plus the output the model
// usually writes — not the output reserve, which is sized to be rarely exceeded and
// would inflate the learner's readings (seed 000: the reading overshoots). Both the
// 429 reading and the clean-window record use it, so the leak signal compares like
// with like. O(1): it is on the admission path.
func (b *bucket) providerViewLocked() float64 {
	view := b.win.tokens
	if expected := b.est.meanOutput(); expected >= 0 {
		view -= max(0, b.win.openOutput-int64(b.win.openCount)*expected)
	}
	return float64(view)
}

func (b *bucket) emitLearn(now time.Time, st learnStep) {
	if st.SkippedRepeat {
		return // a retry storm is one sample: nothing moved, nothing to log
	}
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.learn.snapshot())
	}
	kind := EventLearn
	if st.Kind == "leak" {
		kind = EventLeak
	}
	e := b.newEvent(kind, now, "", "", 0, 0)
	e.Step, e.From, e.To = st.Kind, st.From, st.To
	if st.Kind == "leak" {
		e.From = st.CleanMaxSeen
		e.To = st.Trigger
	}
	b.l.emit(e)
}

func (b *bucket) event(kind EventKind, now time.Time, session, reason string, wait time.Duration, res int64) {
	if b.l.onEvent == nil {
		return
	}
	b.l.emit(b.newEvent(kind, now, session, reason, wait, res))
}

func (b *bucket) newEvent(kind EventKind, now time.Time, session, reason string, wait time.Duration, res int64) Event {
	return Event{
		Kind: kind, At: now, Provider: b.provider, Model: b.model, Session: session, Reason: reason, Wait: wait,
		WindowTokens: b.win.tokens, TokenBudget: b.tokenBudget(), Reservation: res,
		Quota: b.learn.quota, Start: b.learn.start, Trigger: b.learn.trigger,
		Requests: b.win.requests(), RPMBudget: b.rpm, CooldownLeft: b.cooldownLeft(now),
	}
}
