package retry

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ActionKind is what the planner tells the caller to do about a failure.
type ActionKind string

// The actions. Their names appear in the decision API and in logs.
const (
	// ActionRetry: send the same request to the same route after Action.Delay.
	ActionRetry ActionKind = "retry"
	// ActionFailover: send it at once to Action.Route (QUOTA with a pool).
	ActionFailover ActionKind = "failover"
	// ActionWaitLongTerm: the allowance is spent and no route has any: try the same
	// route again after Action.Delay (quota.longTermDelay), unbounded by design.
	ActionWaitLongTerm ActionKind = "wait_long_term"
	// ActionGiveUp: return the failure to the client.
	ActionGiveUp ActionKind = "give_up"
)

// The budgets an Action can spend (Action.Budget).
const (
	BudgetMain       = "retry"      // Policy.Rounds
	BudgetMislabeled = "mislabeled" // Policy.Mislabeled.Rounds
	BudgetLongTerm   = "long-term"  // unbounded
)

// Action is the planner's answer to one failure.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Delay is how long to wait before the retry (ActionRetry, ActionWaitLongTerm);
	// 0 otherwise. A RATE_LIMIT retry has Delay 0 and ViaGate set: the cooldown is in
	// the gate, and the next admission waits it.
	Delay time.Duration `json:"-"`
	// Route is where a failover goes; nil for other kinds.
	Route *engine.Route `json:"route,omitempty"`
	// Class is the verdict's class the action answers.
	Class engine.Class `json:"class"`
	// Budget names the budget the action spent or found spent; "" when none.
	Budget string `json:"budget,omitempty"`
	// Round is the 1-based round this retry is on Budget, of Rounds. For a give-up on
	// a spent budget both are the budget's size. Rounds is 0 for the unbounded
	// long-term budget.
	Round  int `json:"round,omitempty"`
	Rounds int `json:"rounds,omitempty"`
	// Exhausted marks a give-up because the budget was spent (as opposed to a class
	// that is not retried).
	Exhausted bool `json:"exhausted,omitempty"`
	// ViaGate marks a RATE_LIMIT retry whose cooldown was recorded in the gate.
	ViaGate bool `json:"viaGate,omitempty"`
	// Quota is QuotaAnswer.Handle for a failover or long-term wait: what the
	// quota runtime needs back to run the wait. nil otherwise.
	Quota any `json:"-"`
	// Reason says why, for people: logs, the decision API, `gatectl sim`.
	Reason string `json:"reason"`
}

// MarshalJSON adds delayMs to the JSON form.
func (a Action) MarshalJSON() ([]byte, error) {
	type plain Action // drops this method
	return json.Marshal(struct {
		plain
		DelayMs int64 `json:"delayMs"`
	}{plain(a), a.Delay.Milliseconds()})
}

// Request is one failure to plan for: the verdict, where it happened, and the
// session state the planner cannot know itself.
type Request struct {
	Verdict  engine.Verdict
	Provider string
	Model    string
	Session  string
	Turn     string
	Step     int
	// Failure is the failure the verdict is about; optional. The planner reads only
	// its SinceCapacityMs (the caller's evidence for MISLABELED, added to what the
	// planner remembers itself, see SinceCapacity) and hands it on to the
	// QuotaRouter for its events.
	Failure *engine.Failure
	// Admitted is when the failed call was admitted by the gate (zero: unknown);
	// the gate measures how late the provider counts from it.
	Admitted time.Time
	// Reserved is what the gate reserved for the failed call (0: unknown).
	Reserved int64
}

// QuotaFailure is a QUOTA failure as the planner hands it to a QuotaRouter.
type QuotaFailure struct {
	Session string
	Turn    string
	Step    int
	Route   engine.Route    // the route the request ran on
	Failure *engine.Failure // Request.Failure; may be nil
	// NativeSpent says the quick retries on the main budget are spent for this turn,
	// or that there are none to run (retry.rounds 0, a hint past retry.maxDelay).
	NativeSpent bool
}

// QuotaAnswer is a QuotaRouter's answer. Kind is one of:
//
//   - ActionRetry: run the quick retries first (quota.nativeRetryFirstProviders);
//     the planner retries on the main budget and asks again with NativeSpent once it
//     is spent. Only an answer to NativeSpent=false.
//   - ActionFailover: retry at once on Route.
//   - ActionWaitLongTerm: wait Wait, then retry on the same route; Attempts counts
//     the long-term attempts of the session's entry, this one included.
//   - ActionGiveUp: quota retry is off for the session (the router passes: the
//     failure goes on as if there were no pools).
type QuotaAnswer struct {
	Kind     ActionKind
	Route    engine.Route
	Wait     time.Duration
	Attempts int
	Reason   string
	// Handle is opaque to the planner and returned as Action.Quota: whatever the
	// router needs back to run the wait (the pools' pool.Decision).
	Handle any
}

// QuotaRouter is the seam to the quota runtime and its route pools:
// the session's switch, exhaustion marks, failover, long-term waits. Without one, a
// QUOTA failure is given up, or retried on the curve when retry.retryOn lists it.
type QuotaRouter interface {
	// RouteQuota is called by Planner.Plan for a QUOTA failure: first with
	// NativeSpent=false unless the quick retries are known to be spent or
	// impossible, and again with NativeSpent=true after answering ActionRetry once
	// they are spent. With RetryOn listing QUOTA it is called only once the curve's
	// budget is spent (the native policy keeps its own retries first). It is called
	// with no planner lock held, concurrently; ctx is Plan's.
	RouteQuota(ctx context.Context, now time.Time, f QuotaFailure) QuotaAnswer
}

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
	// StoreError is told of every failed Load ("load") or Save ("save"). The plan
	// goes on regardless (fail open). nil drops the errors.
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

	capMu    sync.Mutex
	capacity map[string]time.Time // provider -> latest capacity failure planned for

	stats retryStatsBook
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
//     HintlessBaseDelay·2ⁿ⁻¹.
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
		} else {
			a = p.planCurve(now, c, &req, "")
		}
	}
	a.Class = v.Class
	p.stats.record(&Event{
		At: now, Session: req.Session, Turn: req.Turn, Step: req.Step,
		Provider: req.Provider, Model: req.Model, Action: a,
	}, hintless)
	return a
}

func (p *Planner) planRateLimit(now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	var cooldown time.Duration // 0: the gate's fallback
	if hint, ok := req.Verdict.RetryAfter(); ok && pol.RespectRetryAfter {
		cooldown = pol.ClampHint(hint)
	}
	var a Action
	switch {
	case !pol.Retries(engine.ClassRateLimit):
		a = retryNotRetried(engine.ClassRateLimit, "RATE_LIMIT is not retried (retry.retryOn)")
	case p.sink == nil:
		a = p.planCurve(now, c, req, "")
	default:
		round, ok := p.take(now, pol, req, retryBudgetMain, pol.Rounds)
		if !ok {
			a = retryExhausted(BudgetMain, pol.Rounds, req.Provider)
			break
		}
		a = Action{Kind: ActionRetry, Budget: BudgetMain, Round: round, Rounds: pol.Rounds, ViaGate: true,
			Reason: "cooldown recorded in the gate"}
		if cooldown > 0 {
			a.Reason = "cooldown recorded in the gate (" + cooldown.String() + " from the provider's hint)"
		} else {
			a.Reason = "cooldown recorded in the gate (no usable hint: the gate's fallback cooldown)"
		}
	}
	// Every rate limit starts the model's cooldown, whatever this session's budget:
	// the gate holds back every session on the model, and the learner learns from it.
	// It is recorded after the budget is saved, so the wait starts after the record.
	if p.sink != nil {
		p.sink.RateLimitedBy(now, req.Provider, req.Model, engine.RateLimit{
			RetryAfter: cooldown, Axis: engine.RateLimitAxis(req.Failure), Admitted: req.Admitted, Tokens: req.Reserved})
	}
	return a
}

// planCurve plans a retry on the main budget: the hint, the hintless schedule or the
// jittered curve. prefix, when set, starts the reason.
func (p *Planner) planCurve(now time.Time, c *retryConf, req *Request, prefix string) Action {
	pol := &c.policy
	cls := req.Verdict.Class
	if pol.Rounds == 0 {
		return retryNotRetried(cls, "retry.rounds is 0: gatectl does not retry")
	}
	round, ok := p.take(now, pol, req, retryBudgetMain, pol.Rounds)
	if !ok {
		return retryExhausted(BudgetMain, pol.Rounds, req.Provider)
	}
	var d time.Duration
	var why string
	hint, hinted := req.Verdict.RetryAfter()
	switch {
	case hinted && pol.RespectRetryAfter:
		var capped bool
		d, capped = pol.hintWait(hint)
		why = "the provider's hint"
		if capped {
			why = fmt.Sprintf("the provider's hint %s, capped at retry.maxDelay", hint)
		}
	case !hinted && pol.HintlessBackoff && (cls == engine.ClassOverloaded || cls == engine.ClassServer):
		d = pol.doublingWait(pol.HintlessBaseDelay, round)
		why = "no hint: hintless backoff"
	default:
		d = p.jittered(pol, round)
		why = "backoff curve"
	}
	if prefix == "" {
		prefix = retryClassName(cls)
	}
	return Action{Kind: ActionRetry, Delay: d, Budget: BudgetMain, Round: round, Rounds: pol.Rounds,
		Reason: retryReason(prefix, req.Provider, round, pol.Rounds, d, why)}
}

// retryReason renders "PREFIX on PROVIDER: retry N/M in D (WHY)" without fmt's
// boxing: this is the planner's hot path.
func retryReason(prefix, provider string, round, rounds int, d time.Duration, why string) string {
	var buf [128]byte
	b := append(buf[:0], prefix...)
	b = append(b, " on "...)
	b = append(b, provider...)
	b = append(b, ": retry "...)
	b = strconv.AppendInt(b, int64(round), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(rounds), 10)
	b = append(b, " in "...)
	b = append(b, d.String()...)
	b = append(b, " ("...)
	b = append(b, why...)
	b = append(b, ')')
	return string(b)
}

func (p *Planner) planMislabeled(now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	m := pol.Mislabeled
	if !m.Enabled {
		return retryNotRetried(engine.ClassMislabeled, "a 400 that may be mislabeled, but retry.mislabeled is off: treated as INVALID_REQUEST")
	}
	since, ok := p.sinceCapacity(now, req)
	if !ok || since > m.Evidence {
		return retryNotRetried(engine.ClassMislabeled, fmt.Sprintf(
			"no capacity failure on %s within retry.mislabeled.evidence %s: a real INVALID_REQUEST", req.Provider, m.Evidence))
	}
	if m.Rounds == 0 {
		return retryExhausted(BudgetMislabeled, 0, req.Provider)
	}
	round, ok := p.take(now, pol, req, retryBudgetMislabeled, m.Rounds)
	if !ok {
		return retryExhausted(BudgetMislabeled, m.Rounds, req.Provider)
	}
	var d time.Duration
	why := "circuit replay backoff"
	if hint, ok := req.Verdict.RetryAfter(); ok && pol.RespectRetryAfter {
		d = pol.ClampHint(hint)
		why = "the replay's own hint"
	} else {
		d = pol.doublingWait(m.InitialDelay, round)
	}
	return Action{Kind: ActionRetry, Delay: d, Budget: BudgetMislabeled, Round: round, Rounds: m.Rounds,
		Reason: fmt.Sprintf("mislabeled 400 on %s (capacity failure %s ago): retry %d/%d in %s (%s)",
			req.Provider, since.Round(time.Second), round, m.Rounds, d, why)}
}

func (p *Planner) planQuota(ctx context.Context, now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	hint, hinted := req.Verdict.RetryAfter()
	// A hint over the cap asks for a longer pause than a quick retry may take: the
	// failure is handed to the quota runtime, not retried.
	noQuick := pol.Rounds == 0 || (hinted && pol.RespectRetryAfter && pol.ClampHint(hint) > pol.MaxDelay)
	spent := false // the quick retries were tried and their budget is spent
	quick := func() (Action, bool) {
		if noQuick {
			return Action{}, false
		}
		a := p.planCurve(now, c, req, "QUOTA (quick retry)")
		spent = a.Exhausted
		return a, a.Kind == ActionRetry
	}
	// A user who lists QUOTA in retryOn asked for the curve first: its retries run
	// before the quota runtime wakes.
	if pol.Retries(engine.ClassQuota) {
		if a, ok := quick(); ok {
			return a
		}
	}
	if p.quota == nil {
		return p.quotaGiveUp(pol, req, spent, "no quota runtime (pools) to fail over or wait")
	}
	f := QuotaFailure{Session: req.Session, Turn: req.Turn, Step: req.Step, Failure: req.Failure,
		Route: engine.Route{Provider: req.Provider, Model: req.Model}, NativeSpent: noQuick || spent}
	ans := p.quota.RouteQuota(ctx, now, f)
	if ans.Kind == ActionRetry && !f.NativeSpent {
		if a, ok := quick(); ok {
			return a
		}
		f.NativeSpent = true
		ans = p.quota.RouteQuota(ctx, now, f)
	}
	switch ans.Kind {
	case ActionFailover:
		to := ans.Route
		return Action{Kind: ActionFailover, Route: &to, Quota: ans.Handle,
			Reason: fmt.Sprintf("QUOTA: the allowance on %s is spent: failing over to %s (%s)", req.Provider, to, ans.Reason)}
	case ActionWaitLongTerm:
		n, _ := p.take(now, pol, req, retryBudgetLongTerm, -1) // persist before wait
		return Action{Kind: ActionWaitLongTerm, Delay: ans.Wait, Budget: BudgetLongTerm, Round: max(ans.Attempts, n), Quota: ans.Handle,
			Reason: fmt.Sprintf("QUOTA: the allowance on %s is spent: long-term attempt %d in %s (%s)", req.Provider, max(ans.Attempts, n), ans.Wait, ans.Reason)}
	default: // ActionGiveUp ("pass"), or an ActionRetry the quick budget cannot serve
		why := ans.Reason
		if why == "" {
			why = "the quota runtime passed"
		}
		return p.quotaGiveUp(pol, req, spent, why)
	}
}

func (p *Planner) quotaGiveUp(pol *Policy, req *Request, spent bool, why string) Action {
	if spent {
		a := retryExhausted(BudgetMain, pol.Rounds, req.Provider)
		a.Reason += "; " + why
		return a
	}
	return retryNotRetried(engine.ClassQuota, fmt.Sprintf("QUOTA: the allowance on %s is spent; %s", req.Provider, why))
}

// retryBudgetField selects one counter of a Budget.
type retryBudgetField int

const (
	retryBudgetMain retryBudgetField = iota
	retryBudgetMislabeled
	retryBudgetLongTerm
)

func (f retryBudgetField) of(b *Budget) *int {
	switch f {
	case retryBudgetMislabeled:
		return &b.Mislabeled
	case retryBudgetLongTerm:
		return &b.LongTerm
	default:
		return &b.Rounds
	}
}

// take spends one round of a budget of req's (session, provider) in req's turn and
// saves the budget before returning: persist before wait. limit < 0 is unbounded.
// It returns the 1-based round spent, or ok=false and the rounds used when the
// budget is spent (nothing is saved then).
func (p *Planner) take(now time.Time, pol *Policy, req *Request, f retryBudgetField, limit int) (round int, ok bool) {
	k := BudgetKey{Session: req.Session, Provider: req.Provider}
	mu := p.lockFor(k)
	mu.Lock()
	defer mu.Unlock()
	b, found := p.load(k)
	if !found || b.Turn != req.Turn || (pol.BudgetPerStep && b.Step != req.Step) {
		b = Budget{Turn: req.Turn} // a new turn (or step) starts afresh
	}
	b.Step = req.Step
	n := f.of(&b)
	if limit >= 0 && *n >= limit {
		return *n, false
	}
	*n++
	b.UpdatedAt = now
	p.save(k, b)
	return *n, true
}

// lockFor returns the stripe guarding k.
func (p *Planner) lockFor(k BudgetKey) *sync.Mutex {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(k.Session)
	h.WriteByte(0)
	h.WriteString(k.Provider)
	return &p.locks[h.Sum64()%retryLockStripes]
}

// load reads k's budget: the memo first (it only holds what the store failed to
// save, so it is newer), then the store. A load error counts as no budget unless the
// memo has one. Requires k's stripe lock.
func (p *Planner) load(k BudgetKey) (Budget, bool) {
	if p.memoN.Load() > 0 {
		p.memoMu.Lock()
		b, ok := p.memo[k]
		p.memoMu.Unlock()
		if ok {
			return b, true
		}
	}
	b, ok, err := p.store.Load(k)
	if err != nil {
		p.reportStore("load", k, err)
		return Budget{}, false
	}
	return b, ok
}

// save writes k's budget; on failure it keeps it in the memo (fail open). Requires
// k's stripe lock.
func (p *Planner) save(k BudgetKey, b Budget) {
	err := p.store.Save(k, b)
	if err == nil && p.memoN.Load() == 0 {
		return
	}
	p.memoMu.Lock()
	if err != nil {
		if p.memo == nil {
			p.memo = make(map[BudgetKey]Budget)
		}
		p.memo[k] = b
	} else {
		delete(p.memo, k)
	}
	p.memoN.Store(int64(len(p.memo)))
	p.memoMu.Unlock()
	if err != nil {
		p.reportStore("save", k, err)
	}
}

func (p *Planner) reportStore(op string, k BudgetKey, err error) {
	if p.storeErr != nil {
		p.storeErr(op, k, err)
	}
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

// Budget returns the budget the store holds for k (for status pages); ok=false when
// none is saved.
func (p *Planner) Budget(k BudgetKey) (Budget, bool) {
	mu := p.lockFor(k)
	mu.Lock()
	defer mu.Unlock()
	return p.load(k)
}

// Stats returns a copy of the counters: lifetime and each session's current turn.
func (p *Planner) Stats() StatsSnapshot { return p.stats.snapshot() }

// TurnStats returns the counters of session's current turn; ok=false when the
// planner has made no decision for the session (or pruned it).
func (p *Planner) TurnStats(session string) (TurnStats, bool) { return p.stats.session(session) }

// Prune forgets sessions idle since before: their turn counters, and their budgets
// when the store is a BudgetPruner. It returns how many budgets were dropped.
func (p *Planner) Prune(before time.Time) (int, error) {
	p.stats.prune(before)
	p.memoMu.Lock()
	for k, b := range p.memo {
		if b.UpdatedAt.Before(before) {
			delete(p.memo, k)
		}
	}
	p.memoN.Store(int64(len(p.memo)))
	p.memoMu.Unlock()
	if pr, ok := p.store.(BudgetPruner); ok {
		return pr.PruneBudgets(before)
	}
	return 0, nil
}

func retryNotRetried(c engine.Class, reason string) Action {
	return Action{Kind: ActionGiveUp, Class: c, Reason: reason}
}

func retryExhausted(budget string, rounds int, provider string) Action {
	what := "retry budget"
	if budget == BudgetMislabeled {
		what = "mislabeled-400 budget"
	}
	return Action{Kind: ActionGiveUp, Budget: budget, Round: rounds, Rounds: rounds, Exhausted: true,
		Reason: fmt.Sprintf("%s spent: %d of %d rounds on %s this turn", what, rounds, rounds, provider)}
}

func retryClassName(c engine.Class) string {
	if c == "" {
		return "unclassified failure"
	}
	return string(c)
}
