package gate

import (
	"context"
	"errors"
	"github.com/gatectl/gatectl/engine"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Priority orders waiters on one model: interactive before batch.
type Priority uint8

const (
	PriorityInteractive Priority = iota
	PriorityBatch
)

// Request is what admission needs to know about a call.
type Request struct {
	Provider string
	Model    string
	Session  string
	Priority Priority
	// InputTokens is the caller's input estimate; 0 means estimate from InputBytes.
	InputTokens int
	// InputBytes is the request body's size, for the estimate and its calibration.
	InputBytes int
	// MaxTokens is the request's max_tokens; 0 means reserve the calibrated default.
	MaxTokens int
	// Sends: the caller reports when the call leaves for the provider (Sent).
	// The level the call was admitted at is then read when it leaves, as the
	// provider meets it.
	Sends bool
	// Pause says what the caller does with a call the gate lets through at
	// maxWait while the provider's pause is still on (pause.go). Unless it
	// sends it (PauseSend, the zero value), a queued call its caller would
	// refuse there is refused as soon as the gate sees the pause — Admit
	// returns a *PauseError, Waiter.Refused reports it — not let through at
	// maxWait only to be refused by its caller.
	Pause PausePolicy
}

// Usage is what the provider reported for a call. Cache reads and writes count
// against TPM where the provider counts cached input toward the rate limit
// (OpenAI: a cache hit saves cost and latency but not quota); a provider whose
// limit leaves cache reads out says so with CacheReadsUncounted.
type Usage struct {
	InputTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	OutputTokens     int64
	// CacheReadsUncounted: the provider's token limit does not count cache
	// reads (Anthropic's input-tokens-per-minute, for current models). They
	// stay out of the window, and still teach the estimator, which sizes a
	// request's whole input from its bytes: a call whose cache has expired
	// pays all of it, so the reservation covers that and the settle refunds
	// the cached part.
	CacheReadsUncounted bool
	// OutputUnseen: the answer did not report what it wrote (no usage, or a
	// stream cut before its final usage), so OutputTokens is at most a lower
	// bound: the output window keeps the call at its output reserve, or
	// OutputTokens when that is larger (output.go). The token window and the
	// estimator take OutputTokens as before: an upstream that never reports
	// usage is admitted on its input.
	OutputUnseen bool
}

// Total is every token the provider counts against the window.
func (u Usage) Total() int64 {
	return u.counted() + u.OutputTokens
}

// counted is the input the provider counts against the window.
func (u Usage) counted() int64 {
	if u.CacheReadsUncounted {
		return u.InputTokens + u.CacheWriteTokens
	}
	return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Ticket is an admitted call's reservation. Settle or Release it exactly once.
// It is a value (not a pointer) so that admission does not allocate.
type Ticket struct {
	b    *bucket
	slot int32
	gen  uint32

	Reserved       int64         // tokens reserved: input estimate + output reserve
	ReservedOutput int64         // the output part of Reserved
	Waited         time.Duration // how long admission held the call
	Reason         string        // why it waited or failed open; "" when it did neither
	FailOpen       bool          // admitted without the gate's protection
	Shared         string        // the shared window's entry id; "" without a shared store
}

// Model is the provider/model the reservation is counted under: the request's,
// or its provider's OtherModel past Config.MaxModels; "" for a ticket admitted
// without a bucket.
func (t Ticket) Model() (provider, model string) {
	if t.b == nil {
		return "", ""
	}
	return t.b.provider, t.b.model
}

// ErrTicketClosed is returned when a ticket is settled or released twice, or was
// never issued by this ledger: nothing is counted twice.
var ErrTicketClosed = errors.New("gate: ticket already settled or released")

// Ledger is the admission gate: one bucket per provider/model with a sliding
// window of tokens and requests, reservations settled with real usage, cooldowns,
// a learned quota and a fair queue of waiters.
//
// Admit blocks (the only place in gatectl that sleeps for the rate limit); Submit
// and Waiter.Poll are the same decisions without blocking, for the simulator and
// the decision API. A Ledger is safe for concurrent use; buckets are independent,
// so calls on different models do not contend beyond a read lock.
type Ledger struct {
	cfg   atomic.Pointer[Config] // replaced whole by Reconfigure
	clock engine.Clock

	randMu sync.Mutex
	rand   engine.Rand

	onEvent     func(Event)
	quotas      LearnedStore // nil: learned state in memory only
	shared      SharedWindow // nil: this process's window is the whole truth
	writeBackMu sync.Mutex   // one WriteBackAlone pass at a time (shared.go)

	// Buckets are spread over shards, each with its own lock, so calls on different
	// models on different cores do not contend on one lock word.
	shards   [ledgerShards]bucketShard
	seed     maphash.Seed
	nBuckets atomic.Int64 // buckets in the shards, for MaxModels

	mu        sync.RWMutex // guards providers
	providers map[string]*providerState
}

const ledgerShards = 32

type bucketShard struct {
	mu sync.RWMutex
	m  map[bucketKey]*bucket
	_  [40]byte // keep shards on separate cache lines
}

func (l *Ledger) shardOf(provider, model string) *bucketShard {
	h := maphash.String(l.seed, provider) ^ (maphash.String(l.seed, model) * 0x9e3779b97f4a7c15)
	return &l.shards[h%ledgerShards]
}

// allBuckets lists every bucket (for status snapshots and reconfiguration).
func (l *Ledger) allBuckets() []*bucket {
	var bs []*bucket
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for _, b := range sh.m {
			bs = append(bs, b)
		}
		sh.mu.RUnlock()
	}
	return bs
}

type bucketKey struct{ provider, model string }

// OtherModel is the model name of the bucket that model names past
// Config.MaxModels share, one per provider.
const OtherModel = "(other)"

// ModelKey names a provider/model bucket.
type ModelKey struct{ Provider, Model string }

type providerState struct {
	// cooldownUntil is the provider-wide cooldown when the model is unknown
	// (nil: none). A time.Time, not unix nanos: with the system clock it
	// carries a monotonic reading, so a wall clock stepped back does not
	// lengthen it.
	cooldownUntil atomic.Pointer[time.Time]
}

// Option configures a Ledger.
type Option func(*Ledger)

// WithEventHook sets the function that receives the gate's events. It runs with a
// bucket locked: it must be quick and must not call back into the Ledger.
func WithEventHook(f func(Event)) Option { return func(l *Ledger) { l.onEvent = f } }

// WithRand sets the jitter's random source (default: a fixed-seed generator).
func WithRand(r engine.Rand) Option { return func(l *Ledger) { l.rand = r } }

// NewLedger validates cfg and returns an empty ledger reading clock.
func NewLedger(cfg Config, clock engine.Clock, opts ...Option) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Ledger{
		clock:     clock,
		rand:      newSplitMix(1),
		seed:      maphash.MakeSeed(),
		providers: make(map[string]*providerState),
	}
	for i := range l.shards {
		l.shards[i].m = make(map[bucketKey]*bucket)
	}
	l.cfg.Store(&cfg)
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Config returns the configuration the ledger runs with.
func (l *Ledger) Config() Config { return *l.conf() }

func (l *Ledger) conf() *Config { return l.cfg.Load() }

// Reconfigure applies a reloaded configuration. Everything learned survives:
// windows, reservations, cooldowns, learned quotas and triggers, waiters. A
// model's new starting TPM replaces its quota only while nothing was learned yet;
// a new window converts the learned token figures at the same rate.
func (l *Ledger) Reconfigure(now time.Time, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.cfg.Store(&cfg)
	for _, b := range l.allBuckets() {
		b.mu.Lock()
		b.reconfigureLocked(now, &cfg)
		b.mu.Unlock()
	}
	return nil
}

func (l *Ledger) emit(e Event) {
	if l.onEvent != nil {
		l.onEvent(e)
	}
}

// emitSafely emits from a recovery path: a hook that panics again is ignored.
func (l *Ledger) emitSafely(e Event) {
	defer func() { _ = recover() }()
	l.emit(e)
}

// bucketFor returns the bucket of provider/model, creating it on first use. Past
// MaxModels buckets, a model the config does not list gets its provider's
// OtherModel bucket instead of a new one. The bucket may be evicted before the
// caller locks it: callers that add to it check b.evicted and look again.
func (l *Ledger) bucketFor(provider, model string, now time.Time) *bucket {
	k := bucketKey{provider, model}
	sh := l.shardOf(provider, model)
	sh.mu.RLock()
	b := sh.m[k]
	sh.mu.RUnlock()
	if b != nil {
		return b
	}
	cfg := l.conf()
	// A name the config does not list takes its place in MaxModels before the
	// bucket is built: checked and counted in one step, so that callers racing
	// with new names cannot all pass the check at the last free place.
	counted := false
	if model != OtherModel && cfg.MaxModels > 0 {
		if _, listed := cfg.Models[provider+"/"+model]; !listed {
			if l.nBuckets.Add(1) > int64(cfg.MaxModels) {
				l.nBuckets.Add(-1)
				return l.bucketFor(provider, OtherModel, now)
			}
			counted = true
		}
	}
	// Built outside the shard's lock: it loads what the model learned, which with
	// a shared store is a network round trip that must not hold the other models
	// of the shard. Two callers may build one each; the first to insert wins.
	nb := newBucket(l, cfg, provider, model, l.providerState(provider), now)
	sh.mu.Lock()
	if b = sh.m[k]; b != nil {
		sh.mu.Unlock()
		if counted {
			l.nBuckets.Add(-1)
		}
		return b
	}
	sh.m[k] = nb
	if !counted {
		l.nBuckets.Add(1)
	}
	sh.mu.Unlock()
	// A reload while it was built walked the buckets without it: it adopts
	// the configuration now in force, read under its lock (a reload that
	// stores one after that finds it in the map and waits for the lock; adopting
	// the same one twice changes nothing).
	nb.mu.Lock()
	if cur := l.conf(); cur != cfg {
		nb.reconfigureLocked(now, cur)
	}
	nb.mu.Unlock()
	return nb
}

// lockedBucketFor is bucketFor with the bucket locked, never an evicted one.
func (l *Ledger) lockedBucketFor(provider, model string, now time.Time) *bucket {
	for {
		b := l.bucketFor(provider, model, now)
		b.mu.Lock()
		if !b.evicted {
			return b
		}
		b.mu.Unlock()
	}
}

// Buckets is how many provider/model buckets the ledger holds.
func (l *Ledger) Buckets() int { return int(l.nBuckets.Load()) }

// Evict drops the buckets that hold nothing and were last used at least idle
// before now, and returns their keys (so that what is kept per model elsewhere,
// such as metric series, can go too). A bucket holds something while it has a
// reservation, a waiter, a call in its windows or a cooldown running, or has
// learned anything: a 429 seen, a learned quota or trigger, a stated limit.
// Those stay however long they are idle. What an evicted model had learned about
// its calls' sizes is learned again when it comes back.
func (l *Ledger) Evict(now time.Time, idle time.Duration) []ModelKey {
	var out []ModelKey
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, b := range sh.m {
			b.mu.Lock()
			if b.evictableLocked(now, idle) {
				b.evicted = true
				delete(sh.m, k)
				l.nBuckets.Add(-1)
				out = append(out, ModelKey{k.provider, k.model})
			}
			b.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return out
}

// evictableLocked says whether b holds nothing and was idle for idle at now.
func (b *bucket) evictableLocked(now time.Time, idle time.Duration) bool {
	if now.Sub(b.lastUsed) < idle || len(b.waiters) > 0 || b.inFlight > 0 || b.reservedOpen > 0 || now.Before(b.cooldownUntil) {
		return false
	}
	if b.rateLimited > 0 || b.statedTokens > 0 || b.statedRequests > 0 || b.rpmTrigger > 0 || b.rpmLearned > 0 ||
		b.learn.trigger > 0 || b.learn.quota != b.learn.start || b.out.statedPerMinute > 0 || b.out.trigger > 0 {
		return false
	}
	b.expireLocked(now)
	return b.win.n == b.win.holes && b.done.requests() == 0
}

func (l *Ledger) providerState(provider string) *providerState {
	l.mu.RLock()
	ps := l.providers[provider]
	l.mu.RUnlock()
	if ps != nil {
		return ps
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ps = l.providers[provider]; ps == nil {
		ps = &providerState{}
		l.providers[provider] = ps
	}
	return ps
}

// Admit blocks until req may be sent, ctx is done, or waiting would exceed
// maxWait (then it fails open). It never returns an error but ctx's: any internal
// failure admits at once with FailOpen set — the gate must never become the outage.
func (l *Ledger) Admit(ctx context.Context, req Request) (t Ticket, err error) {
	return l.AdmitObserved(ctx, req, nil)
}

// jitter is a random extra wait of up to Jitter×d, capped at one second, so
// waiters that computed the same drain time do not wake together.
func (l *Ledger) jitter(d time.Duration) time.Duration {
	if d <= 0 || l.conf().Jitter == 0 {
		return 0
	}
	l.randMu.Lock()
	f := l.rand.Float64()
	l.randMu.Unlock()
	return min(time.Duration(f*l.conf().Jitter*float64(d)), time.Second)
}

// Submit makes the admission decision at now without blocking: either a ticket
// (w == nil), or a queued Waiter to Poll until it is granted.
func (l *Ledger) Submit(now time.Time, req Request) (t Ticket, w *Waiter) {
	defer func() {
		if r := recover(); r != nil { // fail open: the gate must never become the outage
			t, w = Ticket{FailOpen: true, Reason: "internal"}, nil
			l.emitSafely(Event{Kind: EventFailOpen, At: now, Provider: req.Provider, Model: req.Model, Session: req.Session, Reason: "internal"})
		}
	}()
	if req.Provider == "" || req.Model == "" {
		l.emit(Event{Kind: EventFailOpen, At: now, Provider: req.Provider, Model: req.Model, Session: req.Session, Reason: "no-bucket"})
		return Ticket{FailOpen: true, Reason: "no-bucket"}, nil
	}
	b := l.lockedBucketFor(req.Provider, req.Model, now)
	defer b.mu.Unlock()
	return b.submitLocked(now, req)
}

// Settle replaces t's reservation with the real usage and refunds the difference.
func (l *Ledger) Settle(now time.Time, t Ticket, u Usage) error {
	// A negative count is a caller's bug; it must not shrink the window. An
	// absurd one (a provider's int64 passed through) is bounded as a
	// reservation is, so that the sums cannot wrap: four of maxReservation
	// stay far below int64's range.
	u.InputTokens, u.CacheReadTokens = usageCount(u.InputTokens), usageCount(u.CacheReadTokens)
	u.CacheWriteTokens, u.OutputTokens = usageCount(u.CacheWriteTokens), usageCount(u.OutputTokens)
	return l.close(now, t, u.Total(), &u)
}

// usageCount bounds one reported count to [0, maxReservation].
func usageCount(n int64) int64 { return min(max(n, 0), maxReservation) }

// Sent records that t's call left for the provider at now, and returns the
// time its entry counts from (zero when nothing changed: the ticket is closed,
// stale or without a bucket, or now is not after the entry's time). A call
// sent late after its admission (a busy machine, a new connection's handshake)
// is counted by the provider that much later, so its entry stays in the gate's
// window from now instead: the gate never frees a call the provider still
// holds. For a call admitted with Request.Sends, the level it meets at the
// provider is read now, and it joins the provider view the learner reads.
func (l *Ledger) Sent(now time.Time, t Ticket) time.Time {
	if t.b == nil {
		return time.Time{}
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(t.slot) >= len(b.slots) {
		return time.Time{}
	}
	s := &b.slots[t.slot]
	if !s.open || s.gen != t.gen {
		return time.Time{}
	}
	b.expireLocked(now)
	if b.coldFrom != 0 {
		b.startColdLocked(now, l.conf())
	}
	admitted := s.admitted
	var at int64
	if s.seq < b.win.headSeq {
		// Sent a whole window after its admission: its entry already left the
		// window, but the provider counts it from now.
		s.seq = b.win.add(now, s.reserved, s.output, s.asked)
		at = b.win.last
	} else {
		s.seq, at = b.win.restamp(s.seq, now.UnixNano())
	}
	// The output window likewise: the provider counts the call's output from
	// its send too.
	if s.outSeq < b.out.win.headSeq {
		s.outSeq = b.out.win.add(now, s.output, 0, false)
	} else {
		s.outSeq, _ = b.out.win.restamp(s.outSeq, now.UnixNano())
	}
	if s.sendPending {
		s.sendPending = false
		b.land.open(s.landing) // at the provider from now: it may complete
		if b.est.meanOutput() >= 0 {
			// The served level's base, read as the provider meets the call:
			// without it (it is not in the view until sent) and without what
			// only the count guard keeps.
			s.viewArrival = int64(b.arrivalViewLocked()) - b.win.tail()
		}
		s.reqArrival, s.reqDone = int32(b.providerRequestsIn(false)), int32(b.providerRequestsIn(true)) // it is not in it while unsent
		b.unsent -= s.unsent
		b.unsentCount--
		s.unsent = 0
		// The level this call meets at the provider: the window as it is now,
		// this call in it. Read at its admission, it would count the calls that
		// left the provider's window while this one waited to be sent.
		reading := b.providerViewLocked() // on arrival, this call is in it
		if b.atCompletion {
			reading += float64(b.providerCostLocked(s.reserved, s.output))
		}
		b.observeAdmitLocked(now, reading)
	}
	if at == 0 {
		b.readAtSendLocked(now)
		return time.Time{}
	}
	s.admitted = at                      // the call writes from its send: its age counts from there
	b.readAtSendLocked(time.Unix(0, at)) // stamped as the caller will name the send
	if ss, ok := l.shared.(SharedSends); ok && s.shared != "" && time.Duration(at-admitted) > b.warmGuardLocked(l.conf()) {
		// Later than the count guard: the other instances would free it
		// before the provider does (the guard they keep: a start's longer
		// one is this instance's alone, and ends). A store that fails
		// counts its own failure; the local entry moved either way.
		_, _ = ss.Sent(b.provider, b.model, s.shared, time.Unix(0, at), b.win.span)
	}
	return time.Unix(0, at)
}

// Release gives t's whole reservation back: no usage ever arrived, and the
// provider counted nothing (the call failed before it was sent, or was
// refused). A client gone after the send is Abandon's.
func (l *Ledger) Release(now time.Time, t Ticket) error {
	return l.close(now, t, 0, nil)
}

// Abandon closes t for a call that got no usable answer after it was sent
// (its client went away, its deadline passed, its answer broke): no usage will
// come, but the provider counted the call as it arrived (or counts it as it
// completes), so it stays in the window at what the provider is expected to
// count of a call in flight (providerCostLocked). Released, its room would let
// the waiters through into a window the provider still holds: when a batch is
// cancelled, a burst of 429s. A call not sent yet is released, and so is one
// sent a window ago or more: the provider no longer holds it. kept is what
// stays in the window (0 when released).
func (l *Ledger) Abandon(now time.Time, t Ticket) (kept int64, err error) {
	if t.b == nil {
		return 0, l.close(now, t, 0, nil)
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(t.slot) < len(b.slots) {
		s := &b.slots[t.slot]
		if s.open && s.gen == t.gen && !s.sendPending && now.UnixNano()-s.admitted < int64(b.l.conf().Window) {
			kept = b.providerCostLocked(s.reserved, s.output)
		}
	}
	if err := b.closeLocked(now, t, kept, nil); err != nil {
		return 0, err
	}
	return kept, nil
}

func (l *Ledger) close(now time.Time, t Ticket, tokens int64, u *Usage) error {
	if t.b == nil {
		if t.FailOpen {
			return nil // admitted without a bucket: nothing was reserved
		}
		return ErrTicketClosed
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeLocked(now, t, tokens, u)
}

// RateLimited records a 429 (RateLimitSink): the model cools down for
// retryAfter (the fallback when 0) — a later, shorter cooldown never shortens a
// longer one — and the learner takes the window reading as a sample. An empty
// model starts a provider-wide cooldown.
func (l *Ledger) RateLimited(now time.Time, provider, model string, retryAfter time.Duration) {
	l.RateLimitedBy(now, provider, model, engine.RateLimit{RetryAfter: retryAfter})
}

// RateLimitedBy is RateLimited with what else the caller knows about the 429
// (RateLimitSink). Call it after releasing the refused call's ticket: the
// learner's reading is then what the provider held when it refused.
func (l *Ledger) RateLimitedBy(now time.Time, provider, model string, sig engine.RateLimit) {
	retryAfter := sig.RetryAfter
	fallback := retryAfter <= 0
	if fallback {
		retryAfter = l.conf().FallbackCooldown
	}
	until := now.Add(retryAfter)
	if model == "" {
		l.extendProviderCooldown(l.providerState(provider), until)
		l.shareProviderCooldown(provider, now, until)
		l.emit(Event{Kind: EventRateLimited, At: now, Provider: provider, Reason: "provider-wide", RetryAfter: retryAfter, FromFallback: fallback})
		l.refusePausedOf(provider, now)
		return
	}
	b := l.lockedBucketFor(provider, model, now)
	defer b.mu.Unlock()
	if b.model == model { // folded into OtherModel: one model's stated limits are not the others'
		b.statedIn429Locked(now, sig)
		b.adoptStatedOutputLocked(now, sig.StatedOutputTokens)
	}
	b.rateLimitedLocked(now, sig, retryAfter, fallback)
	b.refusePausedLocked(now)
}

// Reset forgets what the ledger learned about provider/model — the learned
// quota, the token and request triggers, the clean-window record and the
// measured count delay — and starts again from the configured limit, or one an
// answer's headers stated (a limit only a 429 stated is forgotten too).
// A running cooldown stays. It reports the model's status before the reset,
// and whether the model was known.
func (l *Ledger) Reset(now time.Time, provider, model string) (before BucketStatus, ok bool) {
	sh := l.shardOf(provider, model)
	sh.mu.RLock()
	b := sh.m[bucketKey{provider, model}]
	sh.mu.RUnlock()
	if b == nil {
		return BucketStatus{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	before = b.statusLocked(now)
	from := b.learn.budget()
	b.resetLocked(now)
	e := b.newEvent(EventLearn, now, "", "reset", 0, 0)
	e.Step, e.From, e.To = "reset", from, b.learn.budget()
	l.emit(e)
	return before, true
}

var _ engine.RateLimitSink = (*Ledger)(nil)

// Waiter is a queued admission. Poll it (or wait on Ready) until Ticket reports
// a grant; Cancel it to leave the queue.
type Waiter struct {
	b        *bucket
	req      Request
	reserved int64
	size     sizing
	enqueued time.Time
	round    uint64
	arrival  uint64
	reason   string // why it first waited
	ready    chan struct{}
	// dueNow: its wait was past maxWait at once, and a failClosed store held
	// the forced grant; the queue forces it again as soon as the store lets it.
	dueNow bool

	// guarded by b.mu
	next      time.Time
	until     time.Time // when its own wait ends, as the last dispatch found it (the queue's head: see dispatchLocked)
	granted   bool
	cancelled bool
	ticket    Ticket
	// refusedUntil, when set, is the end of the pause the waiter was refused
	// in (pause.go): it left the queue, nothing granted.
	refusedUntil time.Time
}

// Ready is closed when the waiter is granted (or refused: Refused).
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Ticket returns the grant, if there is one yet.
func (w *Waiter) Ticket() (Ticket, bool) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.ticket, w.granted
}

// Next is when the waiter should be polled again: its own drain time, or its
// maxWait deadline. Settlements may grant it earlier (Ready closes).
func (w *Waiter) Next() time.Time {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.next
}

// Poll runs the bucket's dispatch at now and reports whether w was granted.
func (w *Waiter) Poll(now time.Time) (Ticket, bool) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	w.b.looking = w
	defer func() { w.b.looking = nil }() // also when an event hook panics
	w.b.dispatchLocked(now)
	return w.ticket, w.granted
}

// Cancel removes w from the queue. If it was granted meanwhile, its reservation
// is released, so a client that went away holds nothing.
func (w *Waiter) Cancel(now time.Time) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	if w.granted {
		if !w.cancelled {
			w.cancelled = true
			_ = w.b.closeLocked(now, w.ticket, 0, nil)
		}
		return
	}
	w.cancelled = true
	w.b.removeWaiterLocked(w)
	w.b.dispatchLocked(now) // it may have been holding others back
}

// splitMix is a tiny deterministic Rand, the default jitter source.
type splitMix struct{ s uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{s: seed} }

func (r *splitMix) Float64() float64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// sortWaiters orders waiters for dispatch: priority, then fair round (round-robin
// across sessions), then arrival (FIFO within a session).
func sortWaiters(ws []*Waiter) {
	slices.SortFunc(ws, func(a, b *Waiter) int {
		switch {
		case a.req.Priority != b.req.Priority:
			return int(a.req.Priority) - int(b.req.Priority)
		case a.round != b.round:
			if a.round < b.round {
				return -1
			}
			return 1
		case a.arrival < b.arrival:
			return -1
		case a.arrival > b.arrival:
			return 1
		}
		return 0
	})
}
