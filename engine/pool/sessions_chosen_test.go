package pool

import (
	"context"
	"fmt"
	"testing"
)

// TestRouteForAnExplicitRouteIsHonoured: a client that names a route of a pool
// itself (provider/model, not the pool) is sent there, session after session:
// RouteFor alone draws a new session's start from the pool, which re-drew such
// a request to another route 4 times out of 4 when the draw favoured another
// provider. RouteForChosen starts the session where it asked; it is moved only
// as any started session is, when its provider is marked (a failover).
func TestRouteForAnExplicitRouteIsHonoured(t *testing.T) {
	ctx := context.Background()
	newF := func() *poolFixture {
		f := newPoolFixture(t, twoPools(), DefaultSettings())
		f.read("a", 10, 0) // a scores 0.1, b 1.0: every draw goes to b
		f.read("b", 20, 0)
		return f
	}
	f := newF()
	redrawn := 0
	for i := range 4 {
		ch, _ := f.q.RouteFor(ctx, fmt.Sprintf("s%d", i), rA)
		if ch.Route != rA {
			redrawn++
		}
	}
	if redrawn != 4 {
		t.Fatalf("RouteFor re-drew %d of 4 new sessions asking for %s; the draw is what a pool name asks for", redrawn, rA)
	}

	f = newF()
	for i := range 4 {
		s := fmt.Sprintf("s%d", i)
		for range 2 {
			ch, _ := f.q.RouteForChosen(ctx, s, rA)
			if ch.Route != rA || ch.Drawn || ch.Pool != "medium" {
				t.Fatalf("session %s asking for %s: got %+v, want %s, not drawn, governed by medium", s, rA, ch, rA)
			}
		}
	}
	// A failover still moves it: its provider is marked.
	f.q.Mark("a", f.clock.Now())
	if ch, _ := f.q.RouteForChosen(ctx, "s0", rA); ch.Route == rA || !ch.Moved {
		t.Fatalf("after a's mark: %+v, want moved off %s", ch, rA)
	}
	// Without a session it is RouteFor: no draw.
	if ch, _ := f.q.RouteForChosen(ctx, "", rB); ch.Route != rB || ch.Drawn {
		t.Fatalf("no session: %+v", ch)
	}
}
