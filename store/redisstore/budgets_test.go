package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A retry budget spent on one instance is what the next instance reads; while
// Redis is down each instance falls back to its own record.
func TestBudgetsShared(t *testing.T) {
	srv := redistest.Start(t)
	localA, localB := retry.NewMemoryBudgetStore(), retry.NewMemoryBudgetStore()
	a, b := open(t, srv, FailOpen).Budgets(localA), open(t, srv, FailOpen).Budgets(localB)
	k := retry.BudgetKey{Session: "s1", Provider: "openai"}
	if err := a.Save(k, retry.Budget{Turn: "t1", Rounds: 3}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := b.Load(k)
	if err != nil || !ok || got.Rounds != 3 || got.Turn != "t1" {
		t.Fatalf("B loads %+v %v %v, want the 3 rounds A spent", got, ok, err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if ttl := c.PTTL(context.Background(), "test:budget:{s1}:openai").Val(); ttl <= 0 {
		t.Fatalf("budget key TTL %v, want one", ttl)
	}
	srv.Kill()
	if got, ok, _ := b.Load(k); ok {
		t.Fatalf("with Redis down B read %+v, but it never saved one itself", got)
	}
	if got, ok, _ := a.Load(k); !ok || got.Rounds != 3 {
		t.Fatalf("with Redis down A read %+v %v, want its local record", got, ok)
	}
}

// Two instances spending the same session's budget at the same instant spend
// exactly its rounds, never one more: the limit is checked in Redis, in the
// same step that spends.
func TestBudgetSpendAtomic(t *testing.T) {
	srv := redistest.Start(t)
	const rounds, workers = 3, 16
	stores := []*Budgets{open(t, srv, FailOpen).Budgets(retry.NewMemoryBudgetStore()), open(t, srv, FailOpen).Budgets(retry.NewMemoryBudgetStore())}
	k := retry.BudgetKey{Session: "s1", Provider: "openai"}
	now := time.Now()
	for turn := range 5 { // several turns: each starts afresh, each spends exactly its rounds
		sp := retry.BudgetSpend{Turn: "t" + strconv.Itoa(turn), Step: 1, Counter: "rounds", Limit: rounds, KindLimit: -1, Now: now}
		var spent atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, ok, err := stores[i%2].Spend(k, sp); err != nil {
					t.Error(err)
				} else if ok {
					spent.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := spent.Load(); n != rounds {
			t.Fatalf("turn %d: %d workers on two instances spent %d rounds of a budget of %d", turn, workers, n, rounds)
		}
		got, ok, _ := stores[1].Load(k)
		if !ok || got.Rounds != rounds || got.Turn != sp.Turn {
			t.Fatalf("turn %d: the shared record is %+v %v, want %d rounds of %s", turn, got, ok, rounds, sp.Turn)
		}
	}
}

// A transport kind's own limit and the main one are checked together in Redis,
// the kind's first (as retry.BudgetSpend.Apply does), and the record round-trips
// through Lua's JSON intact.
func TestBudgetSpendTransport(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	b := s.Budgets(retry.NewMemoryBudgetStore())
	k := retry.BudgetKey{Session: "s/ü", Provider: "p"}
	now := time.Date(2026, 1, 1, 12, 0, 0, 123456789, time.UTC)
	refused := retry.BudgetSpend{Turn: "t1", Step: 2, Counter: "rounds", Limit: 3, Kind: "refused", KindLimit: 1, Now: now}
	var local retry.Budget
	var found bool
	for i, want := range []bool{true, false} {
		got, ok, err := b.Spend(k, refused)
		if err != nil || ok != want {
			t.Fatalf("refused #%d: ok=%v err=%v, want %v", i+1, ok, err, want)
		}
		exp, expOK := refused.Apply(local, found)
		if expOK {
			local, found = exp, true
		}
		if !got.UpdatedAt.Equal(exp.UpdatedAt) || got.Rounds != exp.Rounds || got.Transport != exp.Transport || got.Turn != exp.Turn || got.Step != exp.Step {
			t.Fatalf("refused #%d: Redis answered %+v, Apply %+v", i+1, got, exp)
		}
		if !ok && !refused.KindSpent(got) {
			t.Fatalf("refused #%d: refused, but not for the kind's own limit: %+v", i+1, got)
		}
	}
	reset := refused
	reset.Kind, reset.KindLimit = "reset", 5
	for i, want := range []bool{true, true, false} { // the main budget (3) is the tighter one now
		got, ok, err := b.Spend(k, reset)
		if err != nil || ok != want {
			t.Fatalf("reset #%d: ok=%v err=%v, want %v (%+v)", i+1, ok, err, want, got)
		}
		if !ok && reset.KindSpent(got) {
			t.Fatalf("reset #%d: refused for the kind, but its limit was not reached: %+v", i+1, got)
		}
	}
	long := retry.BudgetSpend{Turn: "t1", Step: 2, Counter: "longTerm", Limit: -1, KindLimit: -1, Now: now}
	if got, ok, _ := b.Spend(k, long); !ok || got.LongTerm != 1 || got.Rounds != 3 || got.Transport.Refused != 1 || got.Transport.Reset != 2 {
		t.Fatalf("long-term wait: ok=%v %+v", ok, got)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if ttl := c.PTTL(context.Background(), "test:budget:{s/ü}:p").Val(); ttl <= 0 {
		t.Fatalf("budget key TTL %v, want one", ttl)
	}
	// With Redis down, the round is spent on the local record, under the same rules.
	srv.Kill()
	if got, ok, err := b.Spend(k, long); err != nil || !ok || got.LongTerm != 2 {
		t.Fatalf("with Redis down: ok=%v err=%v %+v, want the local record spent", ok, err, got)
	}
	if _, ok, _ := b.Spend(k, reset); ok {
		t.Fatal("with Redis down the local record let the main budget go past its limit")
	}
}

// Two named turns of one session, interleaved on two instances, each spend
// exactly their own rounds: a turn's record is its own key, so one turn never
// starts another's budget afresh.
func TestBudgetTurnsKeptApart(t *testing.T) {
	srv := redistest.Start(t)
	const rounds = 3
	stores := []*Budgets{open(t, srv, FailOpen).Budgets(retry.NewMemoryBudgetStore()), open(t, srv, FailOpen).Budgets(retry.NewMemoryBudgetStore())}
	now := time.Now()
	spent := map[string]int{}
	for i := range 2 * (rounds + 2) {
		turn := "t" + strconv.Itoa(i%2)
		k := retry.BudgetKey{Session: "s1", Provider: "openai", Turn: turn}
		sp := retry.BudgetSpend{Turn: turn, Step: 1, Counter: "rounds", Limit: rounds, KindLimit: -1, Now: now}
		if _, ok, err := stores[i%2].Spend(k, sp); err != nil {
			t.Fatal(err)
		} else if ok {
			spent[turn]++
		}
	}
	if spent["t0"] != rounds || spent["t1"] != rounds {
		t.Fatalf("interleaved turns spent %v, want %d each", spent, rounds)
	}
}

// Session and turn ids are the client's: a session id holding "}" and a turn
// name must not spell another session's turn record, or one client could spend
// another's retry rounds.
func TestBudgetKeysDoNotCollide(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv, FailOpen).Budgets(retry.NewMemoryBudgetStore())
	mine := retry.BudgetKey{Session: "a}:p:turn:x", Provider: "p"}
	theirs := retry.BudgetKey{Session: "a", Provider: "p", Turn: "x}:p"}
	sp := retry.BudgetSpend{Counter: "rounds", Limit: 1, KindLimit: -1, Now: t0}
	if _, ok, err := b.Spend(mine, sp); !ok || err != nil {
		t.Fatalf("spend: %v %v", ok, err)
	}
	if got, ok, _ := b.Load(theirs); ok {
		t.Fatalf("session %q turn %q reads %+v, the record of session %q", theirs.Session, theirs.Turn, got, mine.Session)
	}
	if _, ok, err := b.Spend(theirs, sp); !ok || err != nil {
		t.Fatalf("the other session's only round was spent by the first: %v %v", ok, err)
	}
}
