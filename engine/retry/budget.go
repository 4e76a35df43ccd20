package retry

import (
	"hash/maphash"
	"sync"
	"time"
)

// BudgetKey names one retry budget: a session's retries in one turn on one
// provider (why: see docs/RATIONALE.md, "Why are retries budgeted per session,
// turn and provider?"). Several models of a provider share it: they usually fail
// for the same reason (the provider's capacity), so a budget per model would only
// multiply retries.
//
// Turn is part of the key so that concurrent turns of one session do not reset
// each other's budgets (see "Why does each turn have its own budget record?"). A
// store must keep keys that differ only in Turn apart; records of finished turns
// go by age (BudgetPruner).
type BudgetKey struct {
	Session  string `json:"session"`
	Provider string `json:"provider"`
	Turn     string `json:"turn,omitempty"`
}

// budgetKeyOf is the key of req's budget.
func budgetKeyOf(req *Request) BudgetKey {
	return BudgetKey{Session: req.Session, Provider: req.Provider, Turn: req.Turn}
}

// Budget is what the planner has spent of one (session, turn, provider) budget.
// The record carries its turn (and step) too: a record of another turn (one a
// store keyed without the turn hands back) or of another step without
// AcrossSteps starts the budget afresh.
//
// Its JSON form is what a durable BudgetStore may persist.
type Budget struct {
	Turn string `json:"turn"`
	Step int    `json:"step"`
	// Rounds is how many retries were planned on the main budget (Policy.Rounds).
	Rounds int `json:"rounds"`
	// Mislabeled is how many were planned on the mislabeled budget.
	Mislabeled int `json:"mislabeled"`
	// Hinted is how many hint-driven retries were planned (Policy.HintRounds).
	Hinted int `json:"hinted,omitempty"`
	// LongTerm is how many long-term QUOTA waits were planned (unbounded by design).
	LongTerm int `json:"longTerm"`
	// Transport is how many retries were planned per transport failure kind that
	// Policy.Transport bounds. Each of them is counted in Rounds too.
	Transport TransportSpent `json:"transport,omitzero"`
	// UpdatedAt is when the planner last saved the record (BudgetPruner uses it).
	UpdatedAt time.Time `json:"updatedAt"`
}

// TransportSpent counts the retries of a Budget per transport failure kind.
type TransportSpent struct {
	DNS     int `json:"dns,omitempty"`
	Refused int `json:"refused,omitempty"`
	Reset   int `json:"reset,omitempty"`
	Timeout int `json:"timeout,omitempty"`
}

// of returns kind's counter; nil for a kind it has none for.
func (t *TransportSpent) of(kind string) *int {
	switch kind {
	case "dns":
		return &t.DNS
	case "refused":
		return &t.Refused
	case "reset":
		return &t.Reset
	case "timeout":
		return &t.Timeout
	}
	return nil
}

// BudgetStore keeps retry budgets where they survive a reconnect: a session that
// reconnects or resumes reads its budget back instead of starting a fresh one. The
// Planner is its only caller.
//
// Implementations must be safe for concurrent use. The Planner serialises calls for
// one key, never across keys.
type BudgetStore interface {
	// Load returns the budget saved under k; ok=false when there is none. It is
	// called by Planner.Plan for each failure of a class that spends a budget. An
	// error is logged and the planner falls back to what it holds in memory.
	Load(k BudgetKey) (b Budget, ok bool, err error)
	// Save stores b under k, replacing what was there. It is called by Planner.Plan
	// before Plan returns a retry or a long-term wait, so a planned wait is on record
	// before any timer starts (persist before wait: a crash or a cancellation never
	// leaves an invisible retry pending). An error does not stop
	// the retry (fail open): it is reported to PlannerOptions.StoreError.
	Save(k BudgetKey, b Budget) error
}

// BudgetSpender is an optional capability of a BudgetStore that several
// processes share: it spends one round in one atomic step where the record
// lives, with the limits checked there. The Planner's stripe lock serialises a
// key within one process only, so without it two processes planning a retry for
// the same session at the same instant could both load the record, both see the
// last round free and both spend it.
type BudgetSpender interface {
	// Spend applies s to k's record (as BudgetSpend.Apply does) and saves it when
	// the round was spent. It returns the record after the spend, or the record
	// as it stands (its turn started afresh if it was another's) and ok=false when
	// a limit was reached. An error means nothing was decided: the Planner then
	// falls back to Load and Save.
	Spend(k BudgetKey, s BudgetSpend) (b Budget, ok bool, err error)
}

// BudgetSpend is one round to spend on a budget.
type BudgetSpend struct {
	Turn    string
	Step    int
	PerStep bool // a record of another step starts afresh too (!Policy.AcrossSteps)
	// Counter is the counter spent, by its JSON name: "rounds", "mislabeled" or
	// "longTerm". Limit is its size; < 0 is unbounded.
	Counter string
	Limit   int
	// KindLimit >= 0 spends a transport kind's own round with the main one (Counter
	// is then "rounds"): Kind is dns, refused, reset or timeout; another Kind has no
	// counter of its own and is refused only when KindLimit is 0.
	Kind      string
	KindLimit int
	Now       time.Time // the record's UpdatedAt when spent
}

// Apply spends s on b (found: whether there was a record) and returns the record
// after, and whether the round was spent. A record of another turn (or step,
// with PerStep) starts afresh. A transport kind's limit is checked before the
// main one.
func (s BudgetSpend) Apply(b Budget, found bool) (Budget, bool) {
	if !found || b.Turn != s.Turn || (s.PerStep && b.Step != s.Step) {
		b = Budget{Turn: s.Turn}
	}
	b.Step = s.Step
	n := counterOf(&b, s.Counter)
	if s.KindLimit >= 0 {
		var spare int
		kn := b.Transport.of(s.Kind)
		if kn == nil {
			kn = &spare
		}
		if *kn >= s.KindLimit || (s.Limit >= 0 && *n >= s.Limit) {
			return b, false
		}
		*kn++
	} else if s.Limit >= 0 && *n >= s.Limit {
		return b, false
	}
	*n++
	b.UpdatedAt = s.Now
	return b, true
}

// KindSpent reports whether s was refused for its transport kind's own limit (and
// not the main one) on the record b that Apply or Spend returned.
func (s BudgetSpend) KindSpent(b Budget) bool {
	if s.KindLimit < 0 {
		return false
	}
	if n := b.Transport.of(s.Kind); n != nil {
		return *n >= s.KindLimit
	}
	return s.KindLimit == 0
}

// counterOf returns the counter of b named by its JSON name.
func counterOf(b *Budget, name string) *int {
	switch name {
	case "mislabeled":
		return &b.Mislabeled
	case "longTerm":
		return &b.LongTerm
	case "hinted":
		return &b.Hinted
	default:
		return &b.Rounds
	}
}

// BudgetPruner is an optional capability of a BudgetStore: dropping records not
// saved since before. Planner.Prune calls it.
type BudgetPruner interface {
	PruneBudgets(before time.Time) (removed int, err error)
}

// MemoryBudgetStore is a BudgetStore in process memory: budgets survive a new
// Planner on the same store (a reconnect), not a restart. Its zero value is an empty
// store ready to use; it is safe for concurrent use.
type MemoryBudgetStore struct {
	mu sync.Mutex
	m  map[BudgetKey]Budget // nil until the first Save
}

// NewMemoryBudgetStore returns an empty store.
func NewMemoryBudgetStore() *MemoryBudgetStore { return &MemoryBudgetStore{} }

// Load returns the budget saved under k. It never fails.
func (s *MemoryBudgetStore) Load(k BudgetKey) (Budget, bool, error) {
	s.mu.Lock()
	b, ok := s.m[k]
	s.mu.Unlock()
	return b, ok, nil
}

// Save stores b under k. It never fails.
func (s *MemoryBudgetStore) Save(k BudgetKey, b Budget) error {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[BudgetKey]Budget)
	}
	s.m[k] = b
	s.mu.Unlock()
	return nil
}

// PruneBudgets drops every record saved before before.
func (s *MemoryBudgetStore) PruneBudgets(before time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, b := range s.m {
		if b.UpdatedAt.Before(before) {
			delete(s.m, k)
			n++
		}
	}
	return n, nil
}

// Len returns how many records the store holds.
func (s *MemoryBudgetStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

var (
	_ BudgetStore  = (*MemoryBudgetStore)(nil)
	_ BudgetPruner = (*MemoryBudgetStore)(nil)
)

// Below: the Planner's side of the budgets (take, the stripe locks, load/save with the memo, Prune).

// retryBudgetField selects one counter of a Budget.
type retryBudgetField int

const (
	retryBudgetMain retryBudgetField = iota
	retryBudgetMislabeled
	retryBudgetLongTerm
	retryBudgetHint
)

func (f retryBudgetField) of(b *Budget) *int { return counterOf(b, f.name()) }

// name is the counter's JSON name (BudgetSpend.Counter).
func (f retryBudgetField) name() string {
	switch f {
	case retryBudgetMislabeled:
		return "mislabeled"
	case retryBudgetLongTerm:
		return "longTerm"
	case retryBudgetHint:
		return "hinted"
	default:
		return "rounds"
	}
}

// spend spends s through a store shared by several processes (BudgetSpender),
// where the limit is checked atomically. handled is false when the store has no
// such capability or could not decide, and for a one-shot turn, whose budget is
// never in the store: the caller then loads and saves itself. Requires k's
// stripe lock.
func (p *Planner) spend(req *Request, k BudgetKey, s BudgetSpend) (b Budget, ok, handled bool) {
	sp, can := p.store.(BudgetSpender)
	if !can || req.OneShot {
		return b, false, false
	}
	b, ok, err := sp.Spend(k, s)
	if err != nil {
		p.reportStore("spend", k, err)
		return b, false, false
	}
	return b, ok, true
}

func spendOf(now time.Time, pol *Policy, req *Request, counter string, limit int) BudgetSpend {
	return BudgetSpend{Turn: req.Turn, Step: req.Step, PerStep: !pol.AcrossSteps, Counter: counter, Limit: limit, KindLimit: -1, Now: now}
}

// take spends one round of a budget of req's (session, provider) in req's turn and
// saves the budget before returning: persist before wait. limit < 0 is unbounded.
// It returns the 1-based round spent, or ok=false and the rounds used when the
// budget is spent (nothing is saved then).
func (p *Planner) take(now time.Time, pol *Policy, req *Request, f retryBudgetField, limit int) (round int, ok bool) {
	k := budgetKeyOf(req)
	mu := p.lockFor(k)
	mu.Lock()
	defer mu.Unlock()
	if b, ok, handled := p.spend(req, k, spendOf(now, pol, req, f.name(), limit)); handled {
		return *f.of(&b), ok
	}
	b := p.turnBudget(k, pol, req)
	n := f.of(&b)
	if limit >= 0 && *n >= limit {
		return *n, false
	}
	*n++
	b.UpdatedAt = now
	p.saveFor(req, k, b)
	return *n, true
}

// takeTransport spends one round of the main budget (of size pol.Rounds) and one of
// kind's own (of size limit) together, and saves the budget before returning. When
// either is spent nothing is: ok is false and kindSpent tells which one it was.
// round and kindRound are the 1-based rounds spent.
func (p *Planner) takeTransport(now time.Time, pol *Policy, req *Request, kind string, limit int) (round, kindRound int, ok, kindSpent bool) {
	k := budgetKeyOf(req)
	mu := p.lockFor(k)
	mu.Lock()
	defer mu.Unlock()
	s := spendOf(now, pol, req, "rounds", pol.Rounds)
	s.Kind, s.KindLimit = kind, limit
	if b, ok, handled := p.spend(req, k, s); handled {
		kn := 0
		if n := b.Transport.of(kind); n != nil {
			kn = *n
		} else if ok {
			kn = 1 // a kind without a counter of its own spent its one round
		}
		return b.Rounds, kn, ok, !ok && s.KindSpent(b)
	}
	b := p.turnBudget(k, pol, req)
	n := b.Transport.of(kind)
	if n == nil { // not a kind Policy.Transport bounds: the main budget alone
		var spare int
		n = &spare
	}
	switch {
	case *n >= limit:
		return b.Rounds, *n, false, true
	case b.Rounds >= pol.Rounds:
		return b.Rounds, *n, false, false
	}
	*n++
	b.Rounds++
	b.UpdatedAt = now
	p.saveFor(req, k, b)
	return b.Rounds, *n, true, false
}

// turnBudget loads k's budget for req's turn (and step, without AcrossSteps): a
// record of another turn (or step) starts afresh. Requires k's stripe lock.
func (p *Planner) turnBudget(k BudgetKey, pol *Policy, req *Request) Budget {
	var b Budget
	var found bool
	if req.OneShot {
		b, found = p.oneShot.load(k)
	} else {
		b, found = p.load(k)
	}
	if !found || b.Turn != req.Turn || (!pol.AcrossSteps && b.Step != req.Step) {
		b = Budget{Turn: req.Turn} // a new turn (or step) starts afresh
	}
	b.Step = req.Step
	return b
}

// lockFor returns the stripe guarding k.
func (p *Planner) lockFor(k BudgetKey) *sync.Mutex {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(k.Session)
	h.WriteByte(0)
	h.WriteString(k.Provider)
	h.WriteByte(0)
	h.WriteString(k.Turn)
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

// saveFor saves req's budget b under k: a one-shot turn's in the planner's
// memory only, any other in the store. Requires k's stripe lock.
func (p *Planner) saveFor(req *Request, k BudgetKey, b Budget) {
	if req.OneShot {
		p.oneShot.save(k, b)
		return
	}
	p.save(k, b)
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

// Budget returns the budget saved for k (for status pages): a one-shot turn's from
// the planner's memory while its request runs, any other from the store; ok=false
// when none is saved.
func (p *Planner) Budget(k BudgetKey) (Budget, bool) {
	if b, ok := p.oneShot.load(k); ok {
		return b, true
	}
	mu := p.lockFor(k)
	mu.Lock()
	defer mu.Unlock()
	return p.load(k)
}

// Prune forgets sessions idle since before: their turn counters, and their budgets
// when the store is a BudgetPruner. It returns how many budgets were dropped.
func (p *Planner) Prune(before time.Time) (int, error) {
	p.stats.prune(before)
	p.oneShot.prune(before)
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
