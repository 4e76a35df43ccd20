package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A session that fails over on one instance goes on the new route on every
// instance: the ones holding it follow the announcement, one that first sees
// it loads it instead of drawing. Forgetting it forgets it everywhere.
func TestRoutesShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	rA, rB := engine.Route{Provider: "a", Model: "m"}, engine.Route{Provider: "b", Model: "m"}
	pools, err := pool.NewPools(pool.PoolsConfig{
		Pools:     []pool.PoolSpec{{Name: "main", MidSessionSwitch: true, Routes: []engine.Route{rA, rB}}},
		Providers: []string{"a", "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	router := func() *pool.Router {
		s := open(t, srv, FailOpen)
		r := pool.NewRouter(pool.RouterOptions{Pools: pools, Settings: pool.DefaultSettings(), Clock: clock, Routes: s.Routes()})
		s.Notify(Handlers{Route: r.AdoptRoute})
		return r
	}
	a, b := router(), router()
	waitSubscribed(t, srv)
	ctx := context.Background()
	ch, err := a.RouteFor(ctx, "s1", rA)
	if err != nil || ch.Route != rA || !ch.Drawn {
		t.Fatalf("A starts s1: %+v %v, want drawn on %v", ch, err, rA)
	}
	if ch, _ := b.RouteFor(ctx, "s1", rA); ch.Route != rA || ch.Drawn {
		t.Fatalf("B's first call of s1: %+v, want A's route, not a draw", ch)
	}
	d := a.OnQuota(ctx, pool.QuotaFailure{Session: "s1", Route: rA, Turn: "t1", Step: 1})
	if d.Action != pool.ActionFailover || d.Route != rB {
		t.Fatalf("A's QUOTA failure: %+v, want a failover to %v", d, rB)
	}
	waitFor(t, "B to follow A's failover", func() bool { r, _ := b.CurrentRoute("s1"); return r == rB })
	c := router()
	if ch, _ := c.RouteFor(ctx, "s1", rA); ch.Route != rB || ch.Drawn {
		t.Fatalf("an instance that first sees s1: %+v, want the route A failed over to", ch)
	}
	// A new ask is the user's pick: a shared route for another ask does not hold.
	if ch, _ := router().RouteFor(ctx, "s1", rB); !ch.Drawn {
		t.Fatalf("asked %v: %+v, want a draw", rB, ch)
	}
	a.Forget("s1")
	waitFor(t, "B to forget s1", func() bool { _, ok := b.CurrentRoute("s1"); return !ok })
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer cl.Close()
	if n := cl.Exists(ctx, "test:route:{s1}").Val(); n != 0 {
		t.Fatal("the forgotten route is still in Redis")
	}
	a.RouteFor(ctx, "s2", rA)
	if ttl := cl.PTTL(ctx, "test:route:{s2}").Val(); ttl <= 0 {
		t.Fatalf("route key TTL %v, want one", ttl)
	}
	// With Redis down each instance draws alone.
	srv.Kill()
	if ch, _ := b.RouteFor(ctx, "s3", rA); !ch.Drawn {
		t.Fatalf("with Redis down: %+v, want a local draw", ch)
	}
}
