package retry

import (
	"context"
	"errors"
	"github.com/gatectl/gatectl/engine"
	"sync"
	"testing"
	"time"
)

// retryFlakyStore wraps a MemoryBudgetStore and fails Load or Save on demand.
type retryFlakyStore struct {
	MemoryBudgetStore
	mu           sync.Mutex
	failLoad     bool
	failSave     bool
	loads, saves int
	lastSaved    Budget
	onSave       func(k BudgetKey, b Budget)
}

var errRetryStoreDown = errors.New("store down")

func (s *retryFlakyStore) Load(k BudgetKey) (Budget, bool, error) {
	s.mu.Lock()
	s.loads++
	fail := s.failLoad
	s.mu.Unlock()
	if fail {
		return Budget{}, false, errRetryStoreDown
	}
	return s.MemoryBudgetStore.Load(k)
}

func (s *retryFlakyStore) Save(k BudgetKey, b Budget) error {
	s.mu.Lock()
	s.saves++
	fail := s.failSave
	s.lastSaved = b
	s.mu.Unlock()
	if s.onSave != nil {
		s.onSave(k, b)
	}
	if fail {
		return errRetryStoreDown
	}
	return s.MemoryBudgetStore.Save(k, b)
}

func (s *retryFlakyStore) set(load, save bool) {
	s.mu.Lock()
	s.failLoad, s.failSave = load, save
	s.mu.Unlock()
}

func TestMemoryBudgetStore(t *testing.T) {
	var s MemoryBudgetStore // the zero value is ready
	k := BudgetKey{Session: "s", Provider: "p"}
	if _, ok, err := s.Load(k); ok || err != nil {
		t.Fatalf("Load on an empty store = %v, %v", ok, err)
	}
	b := Budget{Turn: "t1", Step: 2, Rounds: 3, Mislabeled: 1, LongTerm: 4, UpdatedAt: retryT0}
	if err := s.Save(k, b); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Load(k); !ok || err != nil || got != b {
		t.Errorf("Load = %+v, %v, %v; want %+v", got, ok, err, b)
	}
	old := BudgetKey{Session: "old", Provider: "p"}
	_ = s.Save(old, Budget{UpdatedAt: retryT0.Add(-time.Hour)})
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2", s.Len())
	}
	if n, err := s.PruneBudgets(retryT0); n != 1 || err != nil {
		t.Errorf("PruneBudgets = %d, %v; want 1", n, err)
	}
	if _, ok, _ := s.Load(old); ok {
		t.Error("pruned record still there")
	}
	if _, ok, _ := s.Load(k); !ok {
		t.Error("fresh record pruned")
	}
}

func TestBudgetSurvivesReconnect(t *testing.T) {
	store := NewMemoryBudgetStore()
	pol := DefaultPolicy()
	pol.Rounds = 4
	ctx := context.Background()
	a, _ := NewPlanner(pol, PlannerOptions{Store: store})
	for range 3 {
		a.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil))
	}
	// The session reconnects: a new planner (a restarted server, say) on the same store.
	b, _ := NewPlanner(pol, PlannerOptions{Store: store})
	if got := b.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)); got.Kind != ActionRetry || got.Round != 4 {
		t.Errorf("after reconnect: %+v, want round 4/4", got)
	}
	if got := b.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)); got.Kind != ActionGiveUp || !got.Exhausted {
		t.Errorf("after reconnect, budget spent: %+v, want give up", got)
	}
	if got, ok := b.Budget(BudgetKey{Session: "s1", Provider: "p", Turn: "t1"}); !ok || got.Rounds != 4 || got.Turn != "t1" {
		t.Errorf("Budget = %+v, %v", got, ok)
	}
	if _, ok := b.Budget(BudgetKey{Session: "nobody", Provider: "p"}); ok {
		t.Error("Budget found a record for an unknown session")
	}
}

// TestBudgetPersistBeforeWait checks the first invariant of persistence: the planned retry is
// on record before anything starts waiting — for RATE_LIMIT, before the gate's
// cooldown starts; for the others, before Plan returns.
func TestBudgetPersistBeforeWait(t *testing.T) {
	store := NewMemoryBudgetStore()
	k := BudgetKey{Session: "s1", Provider: "p", Turn: "t1"}
	var seen []int
	sink := &retrySink{onCall: func(retrySinkCall) {
		b, _, _ := store.Load(k)
		seen = append(seen, b.Rounds)
	}}
	pol := DefaultPolicy()
	pol.HintRounds = FollowRounds // both kinds of retry on one counter
	pl, _ := NewPlanner(pol, PlannerOptions{Store: store, Sink: sink})
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		a := pl.Plan(ctx, retryT0, retryReq(engine.ClassRateLimit, retryMs(2000)))
		if b, _, _ := store.Load(k); b.Rounds != a.Round || a.Round != 2*i-1 {
			t.Errorf("after RATE_LIMIT %d: stored %d rounds, action round %d", i, b.Rounds, a.Round)
		}
		a = pl.Plan(ctx, retryT0, retryReq(engine.ClassOverloaded, nil))
		if b, _, _ := store.Load(k); b.Rounds != a.Round {
			t.Errorf("after OVERLOADED: stored %d rounds, action round %d", b.Rounds, a.Round)
		}
	}
	if want := []int{1, 3, 5}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Errorf("rounds on record when the gate's cooldown started = %v, want %v", seen, want)
	}
	// Given-up and never-retried failures write nothing.
	fs := &retryFlakyStore{}
	pl2, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Store: fs})
	pl2.Plan(ctx, retryT0, retryReq(engine.ClassAuth, nil))
	pl2.Plan(ctx, retryT0, retryReq(engine.ClassMislabeled, nil))
	if fs.loads != 0 || fs.saves != 0 {
		t.Errorf("non-retried failures touched the store: %d loads, %d saves", fs.loads, fs.saves)
	}
}

func TestBudgetStoreFailOpen(t *testing.T) {
	type report struct {
		op string
		k  BudgetKey
	}
	var reports []report
	fs := &retryFlakyStore{}
	pol := DefaultPolicy()
	pol.Rounds = 3
	pl, _ := NewPlanner(pol, PlannerOptions{Store: fs, StoreError: func(op string, k BudgetKey, err error) {
		if !errors.Is(err, errRetryStoreDown) {
			t.Errorf("StoreError got %v", err)
		}
		reports = append(reports, report{op, k})
	}})
	ctx := context.Background()
	k := BudgetKey{Session: "s1", Provider: "p", Turn: "t1"}
	plan := func() Action { return pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)) }

	steps := []struct {
		name      string
		load      bool // fail Load
		save      bool // fail Save
		kind      ActionKind
		round     int
		reports   []string
		stored    int // rounds in the store afterwards
		memoEmpty bool
	}{
		{"saves fail: the retry stands", false, true, ActionRetry, 1, []string{"save"}, 0, false},
		{"still failing: the memo keeps the count", false, true, ActionRetry, 2, []string{"save"}, 0, false},
		{"loads fail too: the memo answers", true, true, ActionRetry, 3, []string{"save"}, 0, false},
		{"store back: spent by the memo, nothing saved", false, false, ActionGiveUp, 3, nil, 0, false},
		// The new turn's budget is a record of its own; the spent turn's memo entry
		// stays until the janitor prunes it.
		{"a new turn saves on its own key", false, false, ActionRetry, 1, nil, 1, false},
	}
	for i, st := range steps {
		fs.set(st.load, st.save)
		reports = nil
		var a Action
		if i == len(steps)-1 {
			a = pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil, retryTurn("t2", 1)))
		} else {
			a = plan()
		}
		if a.Kind != st.kind || a.Round != st.round {
			t.Errorf("%s: %s round %d (%s), want %s round %d", st.name, a.Kind, a.Round, a.Reason, st.kind, st.round)
		}
		if len(reports) != len(st.reports) {
			t.Errorf("%s: reports %v, want %v", st.name, reports, st.reports)
		}
		for j := range min(len(reports), len(st.reports)) {
			if reports[j].op != st.reports[j] || reports[j].k != k {
				t.Errorf("%s: report %d = %+v, want %s on %+v", st.name, j, reports[j], st.reports[j], k)
			}
		}
		stored := k
		if i == len(steps)-1 {
			stored.Turn = "t2"
		}
		b, _, _ := fs.MemoryBudgetStore.Load(stored)
		if b.Rounds != st.stored {
			t.Errorf("%s: store holds %d rounds, want %d", st.name, b.Rounds, st.stored)
		}
		if empty := pl.memoN.Load() == 0; empty != st.memoEmpty {
			t.Errorf("%s: memo empty = %v, want %v", st.name, empty, st.memoEmpty)
		}
	}

	t.Run("load fails with no memo: a fresh budget, reported", func(t *testing.T) {
		fs := &retryFlakyStore{}
		var ops []string
		pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Store: fs, StoreError: func(op string, _ BudgetKey, _ error) { ops = append(ops, op) }})
		_ = fs.MemoryBudgetStore.Save(k, Budget{Turn: "t1", Rounds: 5})
		fs.set(true, false)
		if a := pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)); a.Kind != ActionRetry || a.Round != 1 {
			t.Errorf("got %+v, want a retry on a fresh budget", a)
		}
		if len(ops) != 1 || ops[0] != "load" {
			t.Errorf("reports = %v, want [load]", ops)
		}
	})
	t.Run("no StoreError hook: errors are dropped", func(t *testing.T) {
		fs := &retryFlakyStore{}
		fs.set(true, true)
		pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Store: fs})
		if a := pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)); a.Kind != ActionRetry {
			t.Errorf("got %+v, want a retry", a)
		}
	})
}

func TestBudgetPrune(t *testing.T) {
	fs := &retryFlakyStore{}
	pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Store: fs})
	ctx := context.Background()
	pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil, retrySession("old")))
	fs.set(false, true) // "failing" keeps a memo entry for s-memo
	pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil, retrySession("s-memo")))
	fs.set(false, false)
	pl.Plan(ctx, retryT0.Add(time.Hour), retryReq(engine.ClassServer, nil, retrySession("new")))

	n, err := pl.Prune(retryT0.Add(time.Minute))
	if n != 1 || err != nil {
		t.Errorf("Prune = %d, %v; want 1 budget dropped", n, err)
	}
	if pl.memoN.Load() != 0 {
		t.Error("Prune left the old memo entry")
	}
	if _, ok := pl.TurnStats("old"); ok {
		t.Error("Prune left the old session's stats")
	}
	if _, ok := pl.TurnStats("new"); !ok {
		t.Error("Prune dropped the new session's stats")
	}
	if _, ok := pl.Budget(BudgetKey{Session: "new", Provider: "p", Turn: "t1"}); !ok {
		t.Error("Prune dropped the new budget")
	}

	t.Run("a store that cannot prune", func(t *testing.T) {
		pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Store: retryPlainStore{NewMemoryBudgetStore()}})
		if n, err := pl.Prune(retryT0); n != 0 || err != nil {
			t.Errorf("Prune = %d, %v", n, err)
		}
	})
}

// retryPlainStore hides MemoryBudgetStore's PruneBudgets.
type retryPlainStore struct{ s *MemoryBudgetStore }

func (p retryPlainStore) Load(k BudgetKey) (Budget, bool, error) { return p.s.Load(k) }
func (p retryPlainStore) Save(k BudgetKey, b Budget) error       { return p.s.Save(k, b) }
