package retry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// interleave feeds SERVER failures of turns t1 and t2 of session s1 on provider p
// alternately, a second apart on the planner's clock, until both are given up,
// and returns each turn's retries in order. edit shapes each request.
func interleave(t *testing.T, pl *Planner, edit func(*Request)) map[string][]int {
	t.Helper()
	retries := map[string][]int{}
	done := map[string]bool{}
	now := retryT0
	for i := 0; len(done) < 2; i++ {
		if i > 100 {
			t.Fatalf("still retrying after %d failures: %v", i, retries)
		}
		turn := []string{"t1", "t2"}[i%2]
		if done[turn] {
			continue
		}
		req := retryReq(engine.ClassServer, nil, retryTurn(turn, 1), edit)
		now = now.Add(time.Second)
		a := pl.Plan(context.Background(), now, req)
		switch a.Kind {
		case ActionRetry:
			retries[turn] = append(retries[turn], a.Round)
		case ActionGiveUp:
			if !a.Exhausted || a.Round != 3 {
				t.Fatalf("turn %s given up: round %d exhausted=%v: %s", turn, a.Round, a.Exhausted, a.Reason)
			}
			done[turn] = true
		default:
			t.Fatalf("turn %s: %s", turn, a.Kind)
		}
	}
	return retries
}

// TestPlannerInterleavedTurns: two turns of one session failing in turn on one
// provider each get exactly retry.rounds retries. Before, the budget record kept
// one turn per (session, provider), so each failure of one turn reset the
// other's rounds and both ran on until the attempt backstop.
func TestPlannerInterleavedTurns(t *testing.T) {
	for _, c := range []struct{ oneShot, spender bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("oneShot=%v spender=%v", c.oneShot, c.spender), func(t *testing.T) {
			oneShot := c.oneShot
			pol := DefaultPolicy()
			pol.Rounds = 3
			// spender: a store shared by several processes, which spends rounds itself.
			spender := &spendingStore{}
			store := &spender.MemoryBudgetStore
			var opts PlannerOptions
			if c.spender {
				opts.Store = spender
			} else {
				opts.Store = store
			}
			pl, err := NewPlanner(pol, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := interleave(t, pl, func(r *Request) { r.OneShot = oneShot })
			for _, turn := range []string{"t1", "t2"} {
				if fmt.Sprint(got[turn]) != "[1 2 3]" {
					t.Errorf("turn %s retried on rounds %v, want [1 2 3]", turn, got[turn])
				}
			}
			if c.spender && !oneShot && spender.spends == 0 {
				t.Error("named turns never spent through the store's Spend")
			}
			if oneShot {
				if n := store.Len(); n != 0 || spender.spends != 0 {
					t.Errorf("one-shot turns reached the store: %d records, %d spends; want none", n, spender.spends)
				}
				if n := pl.OneShotTurns(); n != 2 {
					t.Errorf("OneShotTurns = %d, want 2 before EndTurn", n)
				}
				pl.EndTurn("s1", "t1")
				pl.EndTurn("s1", "t2")
				pl.EndTurn("s1", "never-failed") // a turn without a budget is fine
				if n := pl.OneShotTurns(); n != 0 {
					t.Errorf("OneShotTurns = %d after EndTurn, want 0", n)
				}
			} else if n := store.Len(); n != 2 {
				t.Errorf("store holds %d records, want one per turn (2)", n)
			}
		})
	}
}

// TestPlannerOneShotTurn: a one-shot turn's budget is its own (not the store's
// record of a named turn of the same id), follows a failover to another provider
// within the turn, ends with EndTurn, and is pruned by age.
func TestPlannerOneShotTurn(t *testing.T) {
	pol := DefaultPolicy()
	pol.Rounds = 1
	store := NewMemoryBudgetStore()
	pl, err := NewPlanner(pol, PlannerOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	oneShot := func(r *Request) { r.OneShot = true }
	plan := func(at time.Duration, edits ...func(*Request)) Action {
		return pl.Plan(ctx, retryT0.Add(at), retryReq(engine.ClassServer, nil, edits...))
	}
	if a := plan(0, oneShot); a.Kind != ActionRetry {
		t.Fatalf("first failure: %s (%s)", a.Kind, a.Reason)
	}
	if a := plan(time.Second, oneShot); a.Kind != ActionGiveUp || !a.Exhausted {
		t.Fatalf("second failure: %s, want an exhausted give-up", a.Kind)
	}
	if a := plan(2*time.Second, oneShot, retryOn("q")); a.Kind != ActionRetry {
		t.Fatalf("on another provider: %s, want a retry on its own budget", a.Kind)
	}
	if a := plan(3 * time.Second); a.Kind != ActionRetry {
		t.Fatalf("a named turn of the same id: %s, want a retry from the store's budget", a.Kind)
	}
	pl.EndTurn("s1", "t1")
	if a := plan(4*time.Second, oneShot); a.Kind != ActionRetry {
		t.Fatalf("after EndTurn: %s, want a fresh budget", a.Kind)
	}
	if _, err := pl.Prune(retryT0.Add(4 * time.Second)); err != nil || pl.OneShotTurns() != 1 {
		t.Fatalf("Prune before the last save dropped the turn (%d left)", pl.OneShotTurns())
	}
	if _, err := pl.Prune(retryT0.Add(5 * time.Second)); err != nil || pl.OneShotTurns() != 0 {
		t.Fatalf("Prune after the last save left %d one-shot turns (err %v)", pl.OneShotTurns(), err)
	}
}

// TestOneShotBudgetsBound: at the bound a new turn first drops the turns idle for
// oneShotIdle, then (none idle) the least recently saved one; the map never
// grows past maxOneShotTurns.
func TestOneShotBudgetsBound(t *testing.T) {
	var o oneShotBudgets
	key := func(i int) BudgetKey { return BudgetKey{Session: "s", Turn: fmt.Sprint("req-", i), Provider: "p"} }
	for i := range maxOneShotTurns {
		// turn 0 is the oldest; the rest are saved within the idle time of the last.
		o.save(key(i), Budget{Rounds: 1, UpdatedAt: retryT0.Add(time.Duration(i) * time.Millisecond)})
	}
	if n := o.len(); n != maxOneShotTurns {
		t.Fatalf("len = %d, want %d", n, maxOneShotTurns)
	}
	// Nothing idle: the oldest (turn 0) goes.
	at := retryT0.Add(time.Duration(maxOneShotTurns) * time.Millisecond)
	o.save(key(maxOneShotTurns), Budget{Rounds: 1, UpdatedAt: at})
	if n := o.len(); n != maxOneShotTurns {
		t.Fatalf("len = %d after a save at the bound, want %d", n, maxOneShotTurns)
	}
	if _, ok := o.load(key(0)); ok {
		t.Error("the least recently saved turn was kept at the bound")
	}
	if _, ok := o.load(key(1)); !ok {
		t.Error("a turn other than the oldest was dropped")
	}
	// A save to a turn held already never evicts.
	o.save(key(1), Budget{Rounds: 2, UpdatedAt: at.Add(oneShotIdle)})
	if b, _ := o.load(key(1)); b.Rounds != 2 || o.len() != maxOneShotTurns {
		t.Errorf("re-save: rounds %d len %d", b.Rounds, o.len())
	}
	// An idle time on, every turn but key(1) is idle: one new turn drops them all.
	o.save(key(-1), Budget{Rounds: 1, UpdatedAt: at.Add(oneShotIdle + time.Minute)})
	if n := o.len(); n != 2 {
		t.Errorf("len = %d after the idle sweep, want 2 (the re-saved turn and the new one)", n)
	}
}
