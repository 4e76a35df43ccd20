package redisstore

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/internal/redistest"
)

// A provider one instance found exhausted is marked on the others at once, and
// an instance that starts later reads the marks set before it.
func TestMarksShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	router := func() (*pool.Router, *Store) {
		s := open(t, srv, FailOpen)
		r := pool.NewRouter(pool.RouterOptions{Settings: pool.DefaultSettings(), Clock: clock, OnMark: s.ShareMark})
		s.Notify(Handlers{Marked: r.AdoptMark})
		return r, s
	}
	a, _ := router()
	b, _ := router()
	waitSubscribed(t, srv)
	a.Mark("openai", clock.Now())
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := b.Marked("openai"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B did not hear A's mark within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, _ := router()
	if at, ok := c.Marked("openai"); !ok || at.UnixMilli() != clock.Now().UnixMilli() {
		t.Fatalf("an instance started later: mark %v %v, want the one A set", at, ok)
	}
	if _, ok := c.Marked("anthropic"); ok {
		t.Fatal("a provider nobody marked is marked")
	}
}

// A mark lifted by hand on one instance is lifted on all of them, and an
// instance that starts later does not read it back; a mark set after the
// unmark stands.
func TestUnmarkShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	router := func() *pool.Router {
		s := open(t, srv, FailOpen)
		r := pool.NewRouter(pool.RouterOptions{Settings: pool.DefaultSettings(), Clock: clock, OnMark: s.ShareMark, OnUnmark: s.ShareUnmark})
		s.Notify(Handlers{Marked: r.AdoptMark, Unmarked: r.AdoptUnmark})
		return r
	}
	a, b := router(), router()
	waitSubscribed(t, srv)
	a.Mark("openai", clock.Now())
	waitFor(t, "B to hear A's mark", func() bool { _, ok := b.Marked("openai"); return ok })
	clock.Advance(time.Second)
	b.Unmark("openai")
	waitFor(t, "A to hear B's unmark", func() bool { _, ok := a.Marked("openai"); return !ok })
	if _, ok := router().Marked("openai"); ok {
		t.Fatal("an instance started after the unmark read the mark back from Redis")
	}
	// An unmark older than the mark held leaves it.
	clock.Advance(time.Second)
	a.Mark("openai", clock.Now())
	waitFor(t, "B to hear A's new mark", func() bool { _, ok := b.Marked("openai"); return ok })
	b.AdoptUnmark("openai", clock.Now().Add(-time.Second))
	if _, ok := b.Marked("openai"); !ok {
		t.Fatal("an unmark made before the mark lifted it")
	}
}

// waitFor polls cond (a notification crossing Redis) for at most 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
