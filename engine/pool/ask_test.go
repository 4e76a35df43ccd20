package pool

import (
	"context"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

// A failover goes only to a route the caller accepts; with none, the session
// waits where it is: nothing is recorded, nothing announced.
func TestFailoverOnlyToUsableRoutes(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	notB := func(r engine.Route) bool { return r.Provider != "b" }
	if ch, _ := f.q.Route(ctx, "s", Ask{Pool: "medium"}); ch.Route != rA {
		t.Fatalf("drawn %v, want %v", ch.Route, rA)
	}
	d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rA, Pool: "medium", Usable: notB})
	if d.Action != ActionFailover || d.Route != rC {
		t.Fatalf("decision %+v, want a failover to %v", d, rC)
	}
	none := func(engine.Route) bool { return false }
	d = f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rC, Pool: "medium", Usable: none})
	if d.Action != ActionWait {
		t.Fatalf("decision %+v, want a long-term wait", d)
	}
	if cur, _ := f.q.CurrentRoute("s"); cur != rC {
		t.Errorf("session on %v, want %v: a refused move was recorded", cur, rC)
	}
	var failovers int
	for _, e := range f.events.all() {
		if e.Kind == EventFailover {
			failovers++
		}
	}
	if failovers != 1 {
		t.Errorf("%d failover events, want 1: %v", failovers, f.events.kinds())
	}
	// A started session on a marked provider is moved only where the caller
	// accepts the move.
	f.q.Mark("a", f.clock.Now())
	f.q.Forget("t")
	f.q.RouteForChosen(ctx, "t", rA)
	onlyA := func(_, to engine.Route) bool { return to.Provider == "a" }
	if ch, _ := f.q.Route(ctx, "t", Ask{Route: rA, Usable: onlyA}); ch.Route != rA || ch.Moved {
		t.Errorf("choice %+v, want to stay on %v", ch, rA)
	}
	if cur, _ := f.q.CurrentRoute("t"); cur != rA {
		t.Errorf("session t on %v, want %v", cur, rA)
	}
}

// Two pools share a route: the pool asked governs the draw, the session's
// route, and its failover — also when a QUOTA does not name the pool.
func TestSharedRouteGovernedByThePoolAsked(t *testing.T) {
	cfg := twoPools()
	cfg.Pools = append(cfg.Pools, PoolSpec{Name: "shared", MidSessionSwitch: true, Routes: []engine.Route{rA, rD}})
	f := newPoolFixture(t, cfg, DefaultSettings())
	ctx := context.Background()
	ch, _ := f.q.Route(ctx, "s", Ask{Pool: "shared"})
	if ch.Route != rA || ch.Pool != "shared" || !ch.Drawn {
		t.Fatalf("first %+v, want drawn %v in shared", ch, rA)
	}
	if ch, _ = f.q.Route(ctx, "s", Ask{Pool: "shared"}); ch.Route != rA || ch.Drawn {
		t.Fatalf("second %+v, want kept on %v", ch, rA)
	}
	if got := f.q.PoolOf("s", engine.Route{}); got != "shared" {
		t.Errorf("PoolOf = %q, want shared", got)
	}
	d := f.q.OnQuota(ctx, QuotaFailure{Session: "s", Route: rA}) // the decision API names no pool
	if d.Action != ActionFailover || d.Route != rD || d.Pool != "shared" {
		t.Fatalf("decision %+v, want a failover to %v in shared", d, rD)
	}
}

// A reload that takes a session's route out of its pool: the pool's session is
// drawn again, a session that asked a route goes back to it.
func TestReloadRedrawsSessionsOnRemovedRoutes(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	f.q.Route(ctx, "pool", Ask{Pool: "medium"})
	f.q.RouteForChosen(ctx, "route", rC)
	if d := f.q.OnQuota(ctx, QuotaFailure{Session: "route", Route: rC}); d.Route != rA {
		t.Fatalf("failover %+v, want to %v", d, rA)
	}
	cfg := twoPools()
	cfg.Pools[0].Routes = []engine.Route{rB, rC}
	pools, err := NewPools(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.q.Reload(pools, DefaultSettings())
	if ch, _ := f.q.Route(ctx, "pool", Ask{Pool: "medium"}); ch.Route != rB || !ch.Drawn {
		t.Errorf("pool session: %+v, want drawn again onto %v", ch, rB)
	}
	f.clock.Advance(2 * DefaultExhaustedCooldown) // c's mark is over
	if ch, _ := f.q.Route(ctx, "route", Ask{Route: rC}); ch.Route != rC {
		t.Errorf("route session: %+v, want back on %v", ch, rC)
	}
}

// Asking the pool after one of its routes keeps the route; after a route it
// does not hold, the session is drawn.
func TestPoolAskAfterRoute(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	ctx := context.Background()
	f.q.RouteForChosen(ctx, "s", rB)
	if ch, _ := f.q.Route(ctx, "s", Ask{Pool: "medium"}); ch.Route != rB || ch.Drawn {
		t.Errorf("choice %+v, want kept on %v", ch, rB)
	}
	f.read("a", 0, 0)
	f.read("b", 20, 0)
	f.read("c", 10, 0)
	f.q.RouteForChosen(ctx, "u", rX)
	if ch, _ := f.q.Route(ctx, "u", Ask{Pool: "medium"}); !ch.Drawn || ch.Route == rX || ch.Route == rA {
		t.Errorf("choice %+v, want a draw past the spent %v", ch, rA)
	}
}
