package retry

import (
	"context"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// PlannerOptions are the Planner's collaborators. Every field is optional.
type PlannerOptions struct {
	// Sink is the gate (the Ledger). With one, RATE_LIMIT records the model's
	// cooldown there and is retried at once; without one, RATE_LIMIT waits on the
	// curve like the other classes.
	Sink engine.RateLimitSink
	// Store keeps budgets across reconnects; nil means a new MemoryBudgetStore.
	Store BudgetStore
	// Rand draws the jitter; nil means no jitter. The planner serialises its draws,
	// so a *math/rand/v2.Rand is fine.
	Rand engine.Rand
	// Quota answers QUOTA failures (failover, long-term waits); nil means none.
	Quota QuotaRouter
	// StoreError is told of every failed Load ("load"), Save ("save") or
	// BudgetSpender.Spend ("spend"). The plan goes on regardless (fail open). nil drops the errors.
	StoreError func(op string, k BudgetKey, err error)
}

// retryConf is one immutable planner configuration, swapped whole by SetPolicy.
type retryConf struct {
	policy Policy
}

// retryLockStripes is how many mutexes guard budget keys: one key always maps to
// the same stripe, so a key's load-modify-save is serialised while other sessions
// plan in parallel (a durable store's Save may take milliseconds).
const retryLockStripes = 64

// Planner answers what to do about a failed request: retry after a delay, fail
// over, wait long-term, or give up (see Plan). It spends and persists the
// per-(session, turn, provider) retry budgets, feeds rate limits to the gate, and
// keeps the counters (Stats).
//
// A Planner is safe for concurrent use. Create one with NewPlanner; the zero value
// is not usable. Budgets live in the BudgetStore, so a new Planner on the same store
// (a reconnect, a reload) continues them; counters live in the Planner.
type Planner struct {
	conf     atomic.Pointer[retryConf]
	sink     engine.RateLimitSink
	store    BudgetStore
	quota    QuotaRouter
	storeErr func(op string, k BudgetKey, err error)

	randMu sync.Mutex // guards rnd, which need not be safe for concurrent use
	rnd    engine.Rand

	seed  maphash.Seed
	locks [retryLockStripes]sync.Mutex // by hash of BudgetKey

	// memo holds the budgets the store failed to save, so a failing store does not
	// hand out a fresh budget on every failure. An entry is dropped by the next
	// successful Save of its key. memoN is len(memo), read without memoMu to skip
	// the lock in the common case of an empty memo.
	memoMu sync.Mutex
	memo   map[BudgetKey]Budget
	memoN  atomic.Int64

	// oneShot holds the budgets of one-shot turns (Request.OneShot).
	oneShot oneShotBudgets

	capMu    sync.Mutex
	capacity map[string]time.Time // provider -> latest capacity failure planned for

	stats       retryStatsBook
	newSessions atomic.Int64 // sessions new to the stats book, for the sweep
}

// NewPlanner returns a planner for p and the options. It fails when p is invalid.
func NewPlanner(p Policy, opts PlannerOptions) (*Planner, error) {
	pl := &Planner{
		sink:     opts.Sink,
		store:    opts.Store,
		quota:    opts.Quota,
		storeErr: opts.StoreError,
		rnd:      opts.Rand,
		seed:     maphash.MakeSeed(),
		capacity: make(map[string]time.Time),
	}
	if pl.store == nil {
		pl.store = NewMemoryBudgetStore()
	}
	if err := pl.SetPolicy(p); err != nil {
		return nil, err
	}
	return pl, nil
}

// SetPolicy swaps in a new policy (a config reload). Budgets and counters carry
// on; a budget already past a lowered Rounds is spent. On error the old policy stays.
func (p *Planner) SetPolicy(policy Policy) error {
	if err := policy.Validate(); err != nil {
		return err
	}
	c := &retryConf{policy: policy}
	c.policy.RetryOn = append([]engine.Class(nil), policy.RetryOn...) // the caller's slice may change
	p.conf.Store(c)
	return nil
}

// Policy returns a copy of the policy in force.
func (p *Planner) Policy() Policy {
	pol := p.conf.Load().policy
	pol.RetryOn = append([]engine.Class(nil), pol.RetryOn...)
	return pol
}

// Plan answers one failure. It never blocks on a timer and never fails: a store
// error is reported to PlannerOptions.StoreError and the answer stands.
//
// The rules, by class:
//
//   - RATE_LIMIT goes through the gate, so that only admission sleeps for it and
//     every session on the model honours the cooldown: the model's cooldown (the
//     clamped hint, or 0 for the gate's fallback) is recorded in the Sink for every
//     rate limit, retried or not; a retry is answered at once (Delay 0, ViaGate) and
//     spends a round of the main budget, since the next admission waits the cooldown.
//   - OVERLOADED, SERVER, TIMEOUT, TRANSPORT and whatever else RetryOn lists wait on
//     the main budget: the clamped hint when under MaxDelay, else MaxDelay; without
//     a hint the jittered curve, or for OVERLOADED/SERVER with HintlessBackoff
//     HintlessBaseDelay·2ⁿ⁻¹; a hint and that schedule each spread by the
//     request's own share (spreadHint, spreadSchedule).
//   - A transport failure (Request.Failure.ErrorKind set) of a kind that
//     Policy.Transport bounds gets at most that many retries on a budget of its own,
//     each spending a round of the main budget too and waiting on the curve: by
//     default a DNS failure is given up at once and a refused connection after one
//     retry. Such a give-up is Exhausted, with Budget BudgetTransport.
//   - MISLABELED is retried on its own budget when Mislabeled.Enabled and the
//     provider had a capacity failure within Mislabeled.Evidence; otherwise it is a
//     real INVALID_REQUEST and given up.
//   - QUOTA goes to the QuotaRouter (the pools): quick retries on the main
//     budget first when it asks for them (quota.nativeRetryFirstProviders), then a
//     failover or a long-term wait as it answers. When RetryOn lists QUOTA the curve
//     runs first. Without a router, or when it passes (the session's switch is off),
//     QUOTA is given up.
//   - Anything else (AUTH, INVALID_REQUEST, CONTEXT, UNKNOWN by default) is given up.
//
// Every retry or long-term wait is saved in the BudgetStore before Plan returns
// (persist before wait).
func (p *Planner) Plan(ctx context.Context, now time.Time, req Request) Action {
	c := p.conf.Load()
	v := req.Verdict
	_, hinted := v.RetryAfter()
	capacity := v.Class == engine.ClassRateLimit || v.Class == engine.ClassOverloaded
	if capacity {
		p.noteCapacity(now, req.Provider)
	}
	hintless := !hinted && (capacity || v.Class == engine.ClassServer)

	var a Action
	switch v.Class {
	case engine.ClassRateLimit:
		a = p.planRateLimit(now, c, &req)
	case engine.ClassMislabeled:
		a = p.planMislabeled(now, c, &req)
	case engine.ClassQuota:
		a = p.planQuota(ctx, now, c, &req)
	default:
		if !c.policy.Retries(v.Class) {
			a = retryNotRetried(v.Class, retryClassName(v.Class)+" is not retried (retry.retryOn)")
		} else if kind, limit, ok := transportLimit(&c.policy, req.Failure); ok {
			a = p.planTransport(now, c, &req, kind, limit)
		} else {
			a = p.planCurve(now, c, &req, "", false)
		}
	}
	a.Class = v.Class
	added := p.stats.record(&Event{
		At: now, Session: req.Session, Turn: req.Turn, Step: req.Step,
		Provider: req.Provider, Model: req.Model, Action: a,
	}, hintless)
	if added && p.newSessions.Add(1)%sweepEvery == 0 {
		p.sweep(now)
	}
	return a
}

// Sessions are named by clients (X-Gate-Session, a client key's hash), so what
// the planner keeps per session is swept: every sweepEvery new sessions, those
// idle for sweepIdle are forgotten (their counters, and their budgets when the
// store can prune). A forgotten session that comes back starts afresh.
const (
	sweepEvery = 4096
	sweepIdle  = 24 * time.Hour
)

func (p *Planner) sweep(now time.Time) {
	if _, err := p.Prune(now.Add(-sweepIdle)); err != nil {
		p.reportStore("prune", BudgetKey{}, err)
	}
}

// transportLimit returns the failure's transport kind and its bound when
// pol.Transport bounds it.
func transportLimit(pol *Policy, f *engine.Failure) (kind string, limit int, ok bool) {
	if f == nil || f.ErrorKind == "" {
		return "", 0, false
	}
	limit, ok = pol.Transport.For(f.ErrorKind)
	return f.ErrorKind, limit, ok
}

// jittered draws round's curve wait.
func (p *Planner) jittered(pol *Policy, round int) time.Duration {
	if p.rnd == nil || pol.Jitter == 0 {
		return pol.BaseDelay(round)
	}
	p.randMu.Lock()
	defer p.randMu.Unlock()
	return pol.Delay(round, p.rnd)
}

// maxHintSpread bounds how far a hinted or scheduled wait is spread.
const maxHintSpread = 5 * time.Second

// spreadHint lengthens a hinted wait d by up to Jitter of it (at most
// maxHintSpread), never shortens it, and stays under ceiling (retry.maxDelay
// for the provider's hint on the curve, hintClamp.max for a replay's): forty
// sessions refused together with "Retry-After: 2" all came back within 49 ms
// two seconds later, and a provider that refused them for capacity met them as
// one burst again. (A rate limit's wait is spread by the gate's queue instead;
// a 503's or a 529's hint had nothing.) The spread is scaled into the room
// under the ceiling rather than clipped at it: clipped, the draws that reached
// it all landed on it. The share is a hash of the request's session, turn,
// provider and round, not a draw: hints draw nothing from the random source,
// so the curve's draws stay where they were.
func spreadHint(pol *Policy, req *Request, round int, d, ceiling time.Duration) time.Duration {
	room := min(time.Duration(float64(d)*pol.Jitter), maxHintSpread, ceiling-d)
	if room <= 0 {
		return d
	}
	return d + time.Duration(float64(room)*spreadShare(req, round))
}

// spreadSchedule spreads a wait of gatectl's own schedule (the hintless
// doubling, a mislabeled 400's replay) as spreadHint does a hint; at the
// ceiling, where a hint stays as it is, the schedule's wait spreads below it —
// it is no promise to the provider, and every session's schedule reaches the
// ceiling at the same round.
func spreadSchedule(pol *Policy, req *Request, round int, d, ceiling time.Duration) time.Duration {
	if s := spreadHint(pol, req, round, d, ceiling); s != d || d < ceiling {
		return s
	}
	room := min(time.Duration(float64(d)*pol.Jitter), maxHintSpread)
	return d - time.Duration(float64(room)*spreadShare(req, round))
}

// spreadShare is the request's share of a spread, in [0, 1): a hash of its
// session, turn, provider and round.
func spreadShare(req *Request, round int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", req.Session, req.Turn, req.Provider, round)
	return float64(h.Sum64()>>11) / (1 << 53)
}

// noteCapacity records a capacity failure on provider: evidence for MISLABELED.
func (p *Planner) noteCapacity(now time.Time, provider string) {
	p.capMu.Lock()
	if last, ok := p.capacity[provider]; !ok || now.After(last) {
		p.capacity[provider] = now
	}
	p.capMu.Unlock()
}

// SinceCapacity returns how long ago the planner last saw a capacity failure
// (RATE_LIMIT, OVERLOADED) on provider; ok=false when it saw none. The caller can
// hand it to the classifiers as Failure.SinceCapacityMs. A clock that went back
// reads 0.
func (p *Planner) SinceCapacity(now time.Time, provider string) (time.Duration, bool) {
	p.capMu.Lock()
	last, ok := p.capacity[provider]
	p.capMu.Unlock()
	if !ok {
		return 0, false
	}
	return max(now.Sub(last), 0), true
}

// sinceCapacity combines the caller's and the planner's evidence: the most recent.
func (p *Planner) sinceCapacity(now time.Time, req *Request) (time.Duration, bool) {
	since, ok := p.SinceCapacity(now, req.Provider)
	if req.Failure != nil && req.Failure.SinceCapacityMs != nil {
		s := max(time.Duration(*req.Failure.SinceCapacityMs)*time.Millisecond, 0)
		if !ok || s < since {
			since, ok = s, true
		}
	}
	return since, ok
}

// Stats returns a copy of the counters: lifetime and each session's current turn.
func (p *Planner) Stats() StatsSnapshot { return p.stats.snapshot() }

// LifetimeStats returns the counters since the planner started, without the
// sessions' turns that Stats copies too.
func (p *Planner) LifetimeStats() Stats { return p.stats.lifetime() }

// TurnStats returns the counters of session's current turn; ok=false when the
// planner has made no decision for the session (or pruned it).
func (p *Planner) TurnStats(session string) (TurnStats, bool) { return p.stats.session(session) }
