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
