package redisstore

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/redistest"
)

// A 429 that names no model cools the whole provider on every instance, an
// instance that starts during it starts cooled, and a shorter cooldown never
// shortens a longer one. With Redis down the cooldown still holds locally.
func TestProviderCooldownShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100000, RPM: 1000}
	cfg.Pace = 0
	ledger := func() (*gate.Ledger, *Store) {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned, ProviderCooldown: l.AdoptProviderCooldown})
		return l, s
	}
	a, _ := ledger()
	b, _ := ledger()
	waitSubscribed(t, srv)
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10, MaxTokens: 10}
	admits := func(l *gate.Ledger) bool {
		tk, w := l.Submit(clock.Now(), req)
		if w != nil {
			w.Cancel(clock.Now())
			return false
		}
		_ = l.Release(clock.Now(), tk)
		return true
	}
	if !admits(b) {
		t.Fatal("B waits before any 429")
	}
	a.RateLimited(clock.Now(), "p", "", 30*time.Second)
	waitFor(t, "B to adopt A's provider-wide cooldown", func() bool { return !admits(b) })
	if st := b.BucketStatus(clock.Now(), "p", "m"); st.CooldownMs < 29000 {
		t.Fatalf("B's cooldown left %dms, want the 30s A started", st.CooldownMs)
	}
	a.RateLimited(clock.Now(), "p", "", 5*time.Second) // shorter: never shortens
	c, _ := ledger()
	if admits(c) {
		t.Fatal("an instance started during the provider's cooldown admitted a call")
	}
	clock.Advance(10 * time.Second)
	if admits(c) || admits(b) {
		t.Fatal("the later, shorter cooldown shortened the 30s one")
	}
	clock.Advance(21 * time.Second)
	if !admits(c) || !admits(b) {
		t.Fatal("the provider's cooldown outlived its 30s")
	}
	srv.Kill() // failOpen: the local cooldown holds without Redis
	a.RateLimited(clock.Now(), "p", "", 30*time.Second)
	if admits(a) {
		t.Fatal("with Redis down, a provider-wide 429 did not cool the provider locally")
	}
}
