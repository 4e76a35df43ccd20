package redisstore

import (
	"context"
	"testing"

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
