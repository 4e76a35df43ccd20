package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/redistest"
)

// On a real three-node Redis Cluster every operation works: a model's keys share
// one slot (the hash tag), so no script or pipeline crosses slots, and models
// spread over the nodes.
func TestCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	openC := func() *Store {
		s, err := Open(Options{URL: "redis://" + nodes[0].Addr + "?addr=" + nodes[1].Addr, KeyPrefix: "c:", Timeout: time.Second, Cluster: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := openC(), openC()
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	la, _ := gate.NewLedger(cfg, clock, gate.WithSharedWindow(a), gate.WithLearnedStore(a))
	lb, _ := gate.NewLedger(cfg, clock, gate.WithSharedWindow(b), gate.WithLearnedStore(b))
	b.Notify(Handlers{Released: lb.SharedReleased, Learned: lb.AdoptLearned})
	for _, model := range []string{"m1", "m2", "m3", "m4", "m5", "m6"} { // several slots, several nodes
		tk, w := la.Submit(clock.Now(), gate.Request{Provider: "p", Model: model, Session: "s", InputTokens: 4000, MaxTokens: 4000})
		if w != nil || tk.Shared == "" {
			t.Fatalf("%s: not admitted through the cluster", model)
		}
		if _, w := lb.Submit(clock.Now(), gate.Request{Provider: "p", Model: model, Session: "s", InputTokens: 2000, MaxTokens: 2000}); w == nil {
			t.Fatalf("%s: B admitted past the shared budget on the cluster", model)
		}
		if moved, err := a.Sent("p", model, tk.Shared, clock.Now().Add(time.Second), time.Minute); err != nil || !moved {
			t.Fatalf("%s: moving the entry to its send on the cluster: %v", model, err)
		}
		entry, _, _ := strings.Cut(tk.Shared, "-")
		if at, err := a.c.ZScore(context.Background(), a.base("p", model)+"w", entry).Result(); err != nil || int64(at) != clock.Now().Add(time.Second).UnixMilli() {
			t.Fatalf("%s: the entry counts from %v (%v) on the cluster, want its send", model, at, err)
		}
		if err := la.Settle(clock.Now(), tk, gate.Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
		la.RateLimited(clock.Now(), "p", model, time.Second)
		if v, err := a.View("p", model); err != nil || v.Requests < 1 || v.CooldownUntil.IsZero() {
			t.Fatalf("%s: view %+v %v", model, v, err)
		}
	}
	if a.Errors() != 0 || a.Degraded() {
		t.Fatalf("store errors on the cluster: %d", a.Errors())
	}
	a.ShareMark("openai", clock.Now())
	if m := b.marks(); m["openai"].IsZero() {
		t.Fatalf("marks on the cluster: %v", m)
	}
	k := retry.BudgetKey{Session: "s", Provider: "p"}
	_ = a.Budgets(retry.NewMemoryBudgetStore()).Save(k, retry.Budget{Rounds: 2})
	if got, ok, _ := b.Budgets(retry.NewMemoryBudgetStore()).Load(k); !ok || got.Rounds != 2 {
		t.Fatalf("budget on the cluster: %+v %v", got, ok)
	}
	sp := retry.BudgetSpend{Turn: "t", Counter: "rounds", Limit: 3, KindLimit: -1, Now: clock.Now()}
	if got, ok, err := b.Budgets(retry.NewMemoryBudgetStore()).Spend(k, sp); err != nil || !ok || got.Rounds != 1 {
		t.Fatalf("spending a round on the cluster: %+v %v %v", got, ok, err)
	}
	a.ShareUnmark("openai", clock.Now())
	if m := b.marks(); !m["openai"].IsZero() {
		t.Fatalf("unmark on the cluster: %v", m)
	}
	if err := a.ProviderCooldown("p", clock.Now(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if cd := b.providerCooldowns(); cd["p"].IsZero() {
		t.Fatalf("provider cooldowns on the cluster: %v", cd)
	}
	sr := pool.SessionRoute{Asked: engine.Route{Provider: "p", Model: "m1"}, Current: engine.Route{Provider: "q", Model: "m1"}}
	a.Routes().SaveRoute("s", sr)
	if got, ok := b.Routes().LoadRoute("s"); !ok || got != sr {
		t.Fatalf("session route on the cluster: %+v %v", got, ok)
	}
	_ = a.Sessions(&pool.MemorySessionStore{}).SaveSession("s", pool.SessionRecord{Switch: "off"})
	if rec, ok, _ := b.Sessions(&pool.MemorySessionStore{}).LoadSession("s"); !ok || rec.Switch != "off" {
		t.Fatalf("session on the cluster: %+v %v", rec, ok)
	}
	if _, err := a.Check(t.Context()); err != nil {
		t.Fatalf("check on the cluster: %v", err)
	}
	if a.Errors() != 0 || b.Errors() != 0 {
		t.Fatalf("store errors on the cluster: %d, %d", a.Errors(), b.Errors())
	}
}
