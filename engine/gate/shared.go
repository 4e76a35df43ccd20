package gate

import (
	"errors"
	"time"
)

// SharedWindow is the seam for a window shared by several gatectl processes
// (store/redisstore implements it on Redis). With one, the bucket still decides
// everything it decides alone — cooldowns, pacing, the session cap, the fair
// queue of its own waiters, the estimates — and then asks the shared window,
// in one atomic step, whether the call fits what every instance admitted; only
// a call that fits both is granted. The local window keeps counting this
// instance's calls, so a store that fails leaves a working gate behind.
//
// Every method is called with the model's bucket locked, so it must answer
// within the store's deadline; an error means "the store could not decide",
// and the ledger then follows the store's policy (Available).
type SharedWindow interface {
	// Reserve checks the model's shared window and, when the call fits,
	// records its reservation and returns the entry's id. An error that
	// wraps ErrStoreHolds keeps the call waiting, to ask again (the store
	// fails closed); any other lets this instance's own gate decide alone.
	Reserve(r SharedReserve) (SharedGrant, error)
	// Settle replaces the entry id's reservation with the real usage; 0
	// releases it (the request still counts, its tokens do not). output is
	// what the call counts in the output window from now on, when Reserve
	// recorded an output reserve (SharedReserve.OutputBudget); negative: not
	// known, the entry keeps its output reserve.
	Settle(provider, model, id string, tokens, output int64) error
	// Cooldown extends the model's shared cooldown to until (never shortens
	// it) and returns the shared window's tokens, the learner's reading.
	Cooldown(provider, model string, now, until time.Time, span time.Duration) (windowTokens int64, err error)
	// Available is nil when calls may go on, or the error to answer with when
	// the store is down and its policy is to fail closed.
	Available() error
}

// SharedSends is implemented by a shared window that can move an entry to the
// time its call was sent, once (store/redisstore does: a send reported again,
// to any instance, leaves the entry where the first report put it). Ledger.Sent calls it for a
// call sent later than the count guard after its admission, so the other
// instances count it from when the provider did; a call sent within the guard
// costs no round trip, since the guard keeps every entry that long anyway.
type SharedSends interface {
	// Sent moves entry id to at, if it is still open and counted from
	// earlier (moved); span is how long an entry counts, as in Reserve. An
	// entry that left the window or was settled stays as it is, and the
	// answer is ErrSharedEntryClosed.
	Sent(provider, model, id string, at time.Time, span time.Duration) (moved bool, err error)
}

// ErrSharedEntryClosed is SharedSends.Sent's answer for an entry settled
// already or gone from the shared window.
var ErrSharedEntryClosed = errors.New("gate: the shared entry is settled already or left the window")

// SharedReserve is one admission check against the shared window.
type SharedReserve struct {
	Provider, Model string
	Now             time.Time
	Span            time.Duration // how long an entry counts
	Tokens          int64         // the reservation recorded
	Need            int64         // Tokens plus the margin, checked against Budget
	Budget          int64         // token budget; 0: no token check (an over-budget call)
	RPM             int           // request budget; 0: no request check
	Force           bool          // record without checking (a call that fails open)
	// Queued: the instance has calls of the model queued. It competes for
	// the model (SharedGrant.Instances) from a call it queues or that the
	// shared window refuses, for ActiveSpan.
	Queued     bool
	ActiveSpan time.Duration
	// The output window (output.go), shared when the model has an output
	// limit: the call's output reserve recorded, checked against
	// OutputBudget; OutputBudget 0: none recorded, no output check.
	Output, OutputBudget int64
	// What this instance's output window held before the output limit was
	// known, added to the shared output window before the check, once, when
	// the axis first binds (a limit stated by the first answers comes after
	// the first calls): OpenOutputs, its calls in flight, whose entries the
	// settle then corrects; OutputBefore, what settled, from when it counts.
	OpenOutputs  []SharedOutput
	OutputBefore []SharedCall
}

// SharedOutput is an entry's output reserve: its id as Reserve returned it.
type SharedOutput struct {
	ID     string
	Output int64
}

// SharedGrant is the answer of Reserve: an entry id, or how long until the
// call could fit.
type SharedGrant struct {
	ID           string
	Wait         time.Duration // > 0 when refused
	Reason       string        // why refused: cooldown | tpm | rpm | otpm
	WindowTokens int64         // the shared window's tokens after the decision
	WindowOutput int64         // its output tokens, when the request had an OutputBudget
	// Instances is how many instances compete for the model (see
	// SharedReserve.Queued), this one included when it does; 0: not known.
	Instances int
}

// ErrStoreUnavailable is Admit's answer when the shared store is down and its
// policy is failClosed: the caller answers 503 rather than overspend a quota
// other instances share.
var ErrStoreUnavailable = errors.New("gate: shared store unavailable (store.redis.onError: failClosed)")

// ErrStoreHolds, wrapped in a Reserve error, asks the gate to hold the call
// and ask again rather than admit it alone: the store fails closed, and did not
// answer. Until Available reports the store down, a held call only waits — a
// slow answer or a dropped connection costs the calls of that moment a few
// hundred milliseconds, not a refusal each.
var ErrStoreHolds = errors.New("gate: the shared store did not answer; held to ask again (store.redis.onError: failClosed)")

// WithSharedWindow makes the ledger admit against s as well as its own window.
func WithSharedWindow(s SharedWindow) Option { return func(l *Ledger) { l.shared = s } }

// storeRetry is how soon a waiter asks again after the store failed to answer
// under failClosed (Admit then reports ErrStoreUnavailable if it is still down).
const storeRetry = 200 * time.Millisecond

// storeReason is a wait's reason while a failClosed store does not answer.
const storeReason = "store"

// sharedReserveLocked asks the shared window for a call the local checks let
// through. It returns the entry id (or "" without a store, or when the store
// failed open), or how long the call must still wait and why.
func (b *bucket) sharedReserveLocked(now time.Time, sz sizing, force bool) (id string, wait time.Duration, reason string) {
	s := b.l.shared
	if s == nil {
		return "", 0, ""
	}
	if now.Before(b.storeHoldUntil) {
		return "", b.storeHoldUntil.Sub(now), storeReason // a failClosed store did not answer: asked again then
	}
	budget := b.tokenBudget(now)
	need := sz.total + b.margin(sz.variance)
	ob := b.outputBudgetLocked()
	// What the output check needs of the window: the call's output and the
	// margin for the outputs in flight (outputDrainLocked), within the budget.
	var outNeed int64 // (none for a call with no output: the output window does not check it)
	if sz.output > 0 {
		outNeed = b.outputNeedLocked(sz.output, sz.variance-sz.inputVar, ob)
	}
	// A call at least this large was refused until then, and no release
	// arrived since: held (for an output refusal, a call needing as much of
	// the output window that could fit the output budget at all).
	held := need >= b.sharedHoldNeed && outNeed >= b.sharedHoldOutput && (b.sharedHoldOutput == 0 || sz.output <= ob)
	if !force && now.Before(b.sharedHoldUntil) && held {
		return "", b.sharedHoldUntil.Sub(now), b.sharedHoldReason
	}
	r := SharedReserve{Provider: b.provider, Model: b.model, Now: now, Span: b.win.span,
		Tokens: sz.total, Need: min(need, budget), Budget: budget, RPM: b.rpm, Force: force,
		Queued: len(b.waiters) > 0, ActiveSpan: b.l.conf().Window}
	if ob <= 0 {
		// The axis stopped binding (a reload, a reset): when it binds again,
		// what this instance spent meanwhile goes to the shared window again.
		// (What was there already may count twice for a window: the safe side.)
		b.sharedOutputsOpen, b.sharedOthersOutput = false, 0
	}
	if ob > 0 && sz.output > 0 {
		// The output limit is the key's too: every instance's output counts.
		// A call larger than the whole budget is recorded and not checked, as
		// locally (outputDrainLocked).
		// The margin as a smaller budget for this call: the script checks
		// the window plus its output against it, and records its output alone.
		r.Output, r.OutputBudget = sz.output, ob-(outNeed-sz.output)
		if sz.output > ob {
			r.OutputBudget = -1
		}
		if !b.sharedOutputsOpen {
			for i := range b.slots {
				if sl := &b.slots[i]; sl.open && sl.shared != "" && sl.output > 0 {
					r.OpenOutputs = append(r.OpenOutputs, SharedOutput{ID: sl.shared, Output: sl.output})
				}
			}
			b.out.win.eachSettled(func(at, tokens int64) {
				r.OutputBefore = append(r.OutputBefore, SharedCall{At: time.Unix(0, at), Output: tokens})
			})
		}
	}
	switch {
	case b.overCapLocked(sz.total):
		// Larger than the user's cap: only into an empty shared window, like locally.
		c := b.capBudgetLocked()
		r.Need, r.Budget = c, c
	case sz.total > budget:
		r.Budget = 0 // it could never fit: admitted without waiting for the window, like locally
	}
	g, err := s.Reserve(r)
	if err == nil && r.OutputBudget != 0 {
		b.sharedOutputsOpen = true // the calls in flight are in the output window now, or left the shared one
	}
	if err != nil {
		b.sharedAsking = 0 // deciding alone, it paces alone; the next answer says again
		if errors.Is(err, ErrStoreHolds) || s.Available() != nil {
			b.storeHoldUntil = now.Add(storeRetry)
			return "", storeRetry, storeReason
		}
		return "", 0, "" // failOpen: the local gate decides alone
	}
	b.sharedAsking = g.Instances
	others := g.WindowTokens - b.win.tokens
	if g.ID != "" {
		others -= sz.total // the window Redis reported holds this call already; the local one will
	}
	b.sharedOthers = max(0, others)
	if r.OutputBudget != 0 {
		outOthers := g.WindowOutput - b.out.win.tokens
		if g.ID != "" {
			outOthers -= sz.output
		}
		b.sharedOthersOutput, b.sharedOthersOutputAt = max(0, outOthers), now
	}
	if g.Wait > 0 {
		b.sharedHoldUntil, b.sharedHoldNeed, b.sharedHoldOutput, b.sharedHoldReason = now.Add(g.Wait), need, 0, g.Reason
		if g.Reason == "otpm" {
			b.sharedHoldNeed, b.sharedHoldOutput = 0, outNeed // the output held it, whatever its tokens
			// The shared window holds calls back now, where the local one (this
			// instance's share) may not: a trigger under the limit relaxes here.
			b.outputHeldLocked(now)
		}
		if g.Reason == "rpm" {
			b.rpmBoundAt = now // the shared request count binds: the request pacer runs
		}
		if g.Reason == "cooldown" {
			// Another instance's 429: the provider's pause holds every call,
			// whatever its size, until it ends — asked again meanwhile, the
			// store says the same, and failing open it would let one in.
			b.sharedHoldNeed, b.sharedHoldOutput = 0, 0
		}
		return "", g.Wait, g.Reason
	}
	return g.ID, 0, ""
}

// SharedReleased is a release notification from another instance (or this
// one): capacity came back, so the hold is lifted and the waiters are tried —
// unless the hold is another instance's cooldown, which a release does not end.
func (l *Ledger) SharedReleased(provider, model string) {
	sh := l.shardOf(provider, model)
	sh.mu.RLock()
	b := sh.m[bucketKey{provider, model}]
	sh.mu.RUnlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sharedHoldReason == "cooldown" && b.l.clock.Now().Before(b.sharedHoldUntil) {
		return // room came back, the provider's pause did not end
	}
	b.sharedHoldUntil = time.Time{}
	b.dispatchLocked(b.l.clock.Now())
}

// AdoptLearned takes a model's learned state from another instance (a shared
// LearnedStore's notification): every instance learns from every 429. A model
// this ledger has not seen yet loads it when it first does.
func (l *Ledger) AdoptLearned(provider, model string, q LearnedQuota) {
	if !l.conf().Learn {
		return
	}
	sh := l.shardOf(provider, model)
	sh.mu.RLock()
	b := sh.m[bucketKey{provider, model}]
	sh.mu.RUnlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.l.clock.Now()
	held := b.tokenBudget(now)
	b.restoreLocked(q)
	switch budget := b.tokenBudget(now); {
	case budget > held:
		b.raisedLocked(now, held) // another instance's step: tried one call at a time here too
	case budget < held:
		b.stepHeld = 0 // another instance's cut ends a step, as a 429 here does
	}
	b.dispatchLocked(now) // a raised quota may let waiters through
}

// closeSharedLocked settles or releases the shared entry of a closing slot,
// output its count in the output window.
func (b *bucket) closeSharedLocked(id string, tokens, output int64) {
	if id == "" || b.l.shared == nil {
		return
	}
	if !b.sharedOutputsOpen {
		output = -1 // the output window was never shared from here: nothing of this call is in it
	}
	_ = b.l.shared.Settle(b.provider, b.model, id, tokens, output) // the store counts and logs its own failures
}

// sharedCooldownLocked shares a 429's cooldown and refreshes the reading of
// what the other instances hold.
func (b *bucket) sharedCooldownLocked(now, until time.Time) {
	if b.l.shared == nil {
		return
	}
	if n, err := b.l.shared.Cooldown(b.provider, b.model, now, until, b.win.span); err == nil {
		b.sharedOthers = max(0, n-b.win.tokens)
	}
}

// SharedOutputReading is an optional capability of a SharedWindow: reading
// the model's shared output window (store/redisstore has it). A 429 about the
// output reads it, so what the other instances hold counts as it is then, not
// as the last answer said.
type SharedOutputReading interface {
	OutputWindow(provider, model string, now time.Time, span time.Duration) (int64, error)
}

// sharedOutputReadLocked refreshes what the other instances hold of the output
// window, when this instance keeps it shared.
func (b *bucket) sharedOutputReadLocked(now time.Time) {
	r, ok := b.l.shared.(SharedOutputReading)
	if !ok || !b.sharedOutputsOpen {
		return
	}
	if n, err := r.OutputWindow(b.provider, b.model, now, b.win.span); err == nil {
		b.sharedOthersOutput, b.sharedOthersOutputAt = max(0, n-b.out.win.tokens), now
	}
}

// StoreAvailable is nil unless a shared store is down under failClosed.
func (l *Ledger) StoreAvailable() error {
	if l.shared == nil {
		return nil
	}
	return l.shared.Available()
}

// attachShared ties a shared entry to the ticket just granted. Granted without
// one while a store is set, the call was admitted alone (the store failed
// open): recovery writes it to the shared window (WriteBackAlone).
func (b *bucket) attachShared(t Ticket, id string) Ticket {
	if t.b != b {
		return t
	}
	if id != "" {
		b.slots[t.slot].shared = id
		t.Shared = id
	} else if b.l.shared != nil {
		b.slots[t.slot].alone = true
	}
	return t
}

func (b *bucket) attachWaiterShared(w *Waiter, id string) { w.ticket = b.attachShared(w.ticket, id) }

// SettledElsewhere closes t after another instance settled its shared entry
// with tokens (a decision-API ticket settled where it was not issued): the local
// window takes the real usage, and the shared entry is not touched again.
func (l *Ledger) SettledElsewhere(now time.Time, t Ticket, tokens int64) error {
	if t.b == nil {
		return ErrTicketClosed
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(t.slot) < len(b.slots) && b.slots[t.slot].gen == t.gen {
		b.slots[t.slot].shared = ""
		b.slots[t.slot].settledElsewhere = true
	}
	return b.closeLocked(now, t, max(tokens, 0), nil)
}

// SharedProviderCooldowns is an optional capability of a SharedWindow: sharing
// provider-wide cooldowns (a 429 that names no model), which no model's window
// holds. The store records the longest and tells the other instances, which
// adopt it (AdoptProviderCooldown).
type SharedProviderCooldowns interface {
	ProviderCooldown(provider string, now, until time.Time) error
}

// shareProviderCooldown hands a provider-wide cooldown to the shared store, if
// it takes them. A store that fails counts and logs its own failure; the local
// cooldown holds either way.
func (l *Ledger) shareProviderCooldown(provider string, now, until time.Time) {
	if s, ok := l.shared.(SharedProviderCooldowns); ok {
		_ = s.ProviderCooldown(provider, now, until)
	}
}

// AdoptProviderCooldown takes a provider-wide cooldown another instance started:
// every model of the provider waits until until. A shorter one never shortens a
// longer one. It is not a 429 this instance saw, so no event tells of it.
func (l *Ledger) AdoptProviderCooldown(provider string, until time.Time) {
	now := l.clock.Now()
	if until.Before(now) {
		return
	}
	l.extendProviderCooldown(l.providerState(provider), until)
	l.refusePausedOf(provider, now)
}

// extendProviderCooldown moves ps's cooldown to until unless it ends later already.
func (l *Ledger) extendProviderCooldown(ps *providerState, until time.Time) {
	for {
		cur := ps.cooldownUntil.Load()
		if (cur != nil && !cur.Before(until)) || ps.cooldownUntil.CompareAndSwap(cur, &until) {
			return
		}
	}
}

// SharedWriteBack is an optional capability of a SharedWindow: taking the calls
// an instance admitted alone while the store failed open (store/redisstore has
// it). Without it, N instances that each spent the budget alone during an
// outage would admit as if the shared window were empty once it answers again,
// while the provider still counts what they sent: N× the budget for a window
// past the outage.
type SharedWriteBack interface {
	// WriteBack records closed calls in the model's shared window, each counted
	// from its time with its tokens; calls older than span at now are left out.
	// It returns how many of calls, from the first, it has handled: all of
	// them, or fewer with the error that stopped it.
	WriteBack(provider, model string, now time.Time, span time.Duration, calls []SharedCall) (handled int, err error)
}

// SharedCall is one closed call written back: when it counts from, its
// tokens, and its output when the model has an output limit (0 otherwise).
type SharedCall struct {
	At             time.Time
	Tokens, Output int64
}

// aloneCall is a call admitted alone, closed since (unix nanos, tokens, and
// its output when the model has an output limit).
type aloneCall struct{ at, tokens, output int64 }

// maxAloneCalls bounds what a model keeps for the write-back through an outage
// longer than a window: the calls older than a window are dropped first, then
// the oldest half.
const maxAloneCalls = 1 << 13

// keepAloneLocked keeps a closed call that was admitted alone for the write-back.
func (b *bucket) keepAloneLocked(now time.Time, at, tokens, output int64) {
	if len(b.alone) >= maxAloneCalls {
		b.pruneAloneLocked(now)
		if len(b.alone) >= maxAloneCalls {
			b.alone = append(b.alone[:0], b.alone[len(b.alone)/2:]...)
		}
	}
	if b.outputBudgetLocked() <= 0 || !b.sharedOutputsOpen {
		// No output limit, or the shared output window not yet joined: the
		// first reservation under the limit brings this call in (OutputBefore).
		output = 0
	}
	b.alone = append(b.alone, aloneCall{at, tokens, output})
}

// pruneAloneLocked drops the kept calls that left the window.
func (b *bucket) pruneAloneLocked(now time.Time) {
	cutoff := now.UnixNano() - int64(b.win.span)
	kept := b.alone[:0]
	for _, c := range b.alone {
		if c.at > cutoff {
			kept = append(kept, c)
		}
	}
	clear(b.alone[len(kept):])
	b.alone = kept
}

// WriteBackAlone hands the shared window what this instance admitted alone
// while the store failed open and the provider still counts: the calls still
// open get a shared entry from when they were admitted (their settlement then
// corrects it, as any call's), the closed ones are written with what they
// cost. The store calls it when it answers again (redisstore.Handlers.Recovered).
// A store that fails again meanwhile keeps the rest for its next recovery.
//
// The open calls are written under the model's lock (their slots take the
// entries' ids), the closed ones — up to maxAloneCalls, in several round
// trips — outside it, so admissions do not wait on a store just back.
func (l *Ledger) WriteBackAlone() {
	if l.shared == nil {
		return
	}
	// One pass at a time: a second recovery during a pass would find the
	// calls the first holds taken out, and leave what the first puts back.
	l.writeBackMu.Lock()
	defer l.writeBackMu.Unlock()
	wb, _ := l.shared.(SharedWriteBack)
	for _, b := range l.allBuckets() {
		b.mu.Lock()
		now := l.clock.Now()
		if !b.shareOpenAloneLocked(now) {
			b.mu.Unlock()
			return // the store failed again: the rest waits for the next recovery
		}
		b.pruneAloneLocked(now)
		calls := b.alone
		b.alone = nil
		span := b.win.span
		b.mu.Unlock()
		if len(calls) == 0 || wb == nil {
			continue
		}
		out := make([]SharedCall, len(calls))
		for i, c := range calls {
			out[i] = SharedCall{At: time.Unix(0, c.at), Tokens: c.tokens, Output: c.output}
		}
		n, _ := wb.WriteBack(b.provider, b.model, now, span, out) // the store counts and logs its own failures
		if n < len(calls) {
			b.mu.Lock()
			b.alone = append(calls[n:], b.alone...) // kept, before what closed meanwhile
			if len(b.alone) > maxAloneCalls {
				b.alone = b.alone[len(b.alone)-maxAloneCalls:]
			}
			b.mu.Unlock()
		}
	}
}

// shareOpenAloneLocked gives each open call admitted alone a shared entry from
// its admission; false when the store failed.
func (b *bucket) shareOpenAloneLocked(now time.Time) bool {
	span := b.win.span
	cutoff := now.UnixNano() - int64(span)
	for i := range b.slots {
		s := &b.slots[i]
		if !s.open || !s.alone {
			continue
		}
		if s.admitted <= cutoff {
			s.alone = false // left the window: the provider no longer counts it
			continue
		}
		r := SharedReserve{Provider: b.provider, Model: b.model, Now: time.Unix(0, s.admitted),
			Span: span, Tokens: s.reserved, Need: s.reserved, Force: true}
		if b.outputBudgetLocked() > 0 && s.output > 0 && b.sharedOutputsOpen {
			r.Output, r.OutputBudget = s.output, -1 // recorded, not checked (not yet joined: OpenOutputs brings it)
		}
		g, err := b.l.shared.Reserve(r)
		if err != nil {
			return false
		}
		s.shared, s.alone = g.ID, false
	}
	return true
}
