package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func open(t *testing.T, srv *redistest.Server, policy string) *Store {
	t.Helper()
	s, err := Open(Options{URL: srv.URL(), KeyPrefix: "test:", Timeout: time.Second, OnError: policy}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func reserve(t *testing.T, s *Store, now time.Time, tokens, budget int64) gate.SharedGrant {
	t.Helper()
	g, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: now, Span: time.Minute,
		Tokens: tokens, Need: tokens, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestReserveSettleRelease(t *testing.T) {
	s := open(t, redistest.Start(t), FailOpen)
	a := reserve(t, s, t0, 600, 1000)
	if a.ID == "" || a.Wait != 0 || a.WindowTokens != 600 {
		t.Fatalf("first reservation: %+v, want an id and 600 tokens", a)
	}
	b := reserve(t, s, t0.Add(10*time.Second), 600, 1000)
	if b.ID != "" || b.Reason != "tpm" || b.Wait != 50*time.Second {
		t.Fatalf("over the budget: %+v, want refused for tpm until the first entry leaves (50s)", b)
	}
	if err := s.Settle("p", "m", a.ID, 100, -1); err != nil { // the call used 100: 500 come back
		t.Fatal(err)
	}
	c := reserve(t, s, t0.Add(10*time.Second), 600, 1000)
	if c.ID == "" || c.WindowTokens != 700 {
		t.Fatalf("after the refund: %+v, want admitted with 700 in the window", c)
	}
	if err := s.Settle("p", "m", c.ID, 0, -1); err != nil { // released: the tokens leave, the request stays
		t.Fatal(err)
	}
	v, err := s.View("p", "m")
	if err != nil || v.WindowTokens != 100 || v.Requests != 2 {
		t.Fatalf("view %+v (%v), want 100 tokens and 2 requests", v, err)
	}
	// A minute after the first entry it leaves; the released one holds no tokens.
	d := reserve(t, s, t0.Add(61*time.Second), 950, 1000)
	if d.ID == "" || d.WindowTokens != 950 {
		t.Fatalf("%+v: want admitted into a window holding nothing but a released call", d)
	}
}

func TestRequestBudget(t *testing.T) {
	s := open(t, redistest.Start(t), FailOpen)
	for i := range 3 {
		g, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: t0.Add(time.Duration(i) * time.Second),
			Span: time.Minute, Tokens: 1, Need: 1, Budget: 1000, RPM: 3})
		if err != nil || g.ID == "" {
			t.Fatalf("request %d: %+v %v", i, g, err)
		}
	}
	g, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: t0.Add(5 * time.Second),
		Span: time.Minute, Tokens: 1, Need: 1, Budget: 1000, RPM: 3})
	if err != nil || g.ID != "" || g.Reason != "rpm" || g.Wait != 55*time.Second {
		t.Fatalf("fourth request: %+v %v, want refused for rpm for 55s", g, err)
	}
}

// Many goroutines on two stores (two instances) race for one budget: exactly
// the budget is admitted, and the sum matches the entries.
func TestReserveAtomicAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*Store{open(t, srv, FailOpen), open(t, srv, FailOpen)}
	var admitted atomic.Int64
	var ids sync.Map
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for range 20 {
				r, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: t0, Span: time.Minute,
					Tokens: 10, Need: 10, Budget: 1000})
				if err != nil {
					t.Error(err)
					return
				}
				if r.ID != "" {
					admitted.Add(1)
					if _, dup := ids.LoadOrStore(r.ID, true); dup {
						t.Errorf("id %s issued twice", r.ID)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 100 {
		t.Fatalf("admitted %d calls of 10 tokens against a budget of 1000, want exactly 100", n)
	}
	// Settle them all concurrently at 4 tokens each: the sum follows exactly.
	ids.Range(func(k, _ any) bool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stores[0].Settle("p", "m", k.(string), 4, -1); err != nil {
				t.Error(err)
			}
		}()
		return true
	})
	wg.Wait()
	if v, _ := stores[1].View("p", "m"); v.WindowTokens != 400 || v.Requests != 100 {
		t.Fatalf("after settling: %+v, want 400 tokens in 100 requests", v)
	}
}

func TestCooldownNeverShortened(t *testing.T) {
	s := open(t, redistest.Start(t), FailOpen)
	if _, err := s.Cooldown("p", "m", t0, t0.Add(30*time.Second), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cooldown("p", "m", t0.Add(time.Second), t0.Add(5*time.Second), time.Minute); err != nil {
		t.Fatal(err)
	}
	g := reserve(t, s, t0.Add(10*time.Second), 1, 1000)
	if g.ID != "" || g.Reason != "cooldown" || g.Wait != 20*time.Second {
		t.Fatalf("%+v, want refused for the longer cooldown (20s left)", g)
	}
	if v, _ := s.View("p", "m"); !v.CooldownUntil.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("cooldown until %v, want %v", v.CooldownUntil, t0.Add(30*time.Second))
	}
}

// Every key has a TTL, and a model's keys share one hash tag (one Cluster slot).
func TestKeysHaveTTLAndHashTag(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	now := time.Now()
	g := reserve(t, s, now, 10, 1000)
	_ = s.Settle("p", "m", g.ID, 5, -1)
	o := reserveOut(t, s, now, 10, 5, 100) // the output window's keys
	_ = s.Settle("p", "m", o.ID, 8, 3)
	_, _ = s.Cooldown("p", "m", now, now.Add(10*time.Second), time.Minute)
	s.Save("p", "m", gate.LearnedQuota{Quota: 500})
	reserve(t, s, now, 10, 1000)
	// The keys outside a model's window: provider-wide cooldowns, exhaustion
	// marks (an unmark leaves the others), retry budgets, session settings.
	_ = s.ProviderCooldown("p", now, now.Add(10*time.Second))
	s.ShareMark("p", now)
	s.ShareMark("q", now)
	s.ShareUnmark("q", now)
	bud := s.Budgets(retry.NewMemoryBudgetStore())
	if _, ok, err := bud.Spend(retry.BudgetKey{Session: "s1", Provider: "p"}, retry.BudgetSpend{Turn: "t", Counter: "rounds", Limit: 3, KindLimit: -1, Now: now}); !ok || err != nil {
		t.Fatalf("Spend: %v %v", ok, err)
	}
	if err := s.Sessions(&pool.MemorySessionStore{}).SaveSession("s1", pool.SessionRecord{Pool: "main"}); err != nil {
		t.Fatal(err)
	}
	s.Routes().SaveRoute("s1", pool.SessionRoute{Asked: engine.Route{Provider: "p", Model: "m"}, Current: engine.Route{Provider: "q", Model: "m"}})
	others := map[string]bool{"test:{cooldowns}": true, "test:{marks}": true, "test:budget:{s1}:p": true, "test:session:{s1}": true, "test:route:{s1}": true,
		"test:{health}": true} // the probe's write
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 9+len(others) {
		t.Fatalf("keys %v: want the window, tokens, sum, sequence, cooldown, learned and output window keys, and %v", keys, others)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "test:{p/m}:") && !others[k] {
			t.Errorf("key %q lacks the prefix and the hash tag {p/m}", k)
		}
		delete(others, k)
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %q has no TTL (%v)", k, ttl)
		}
	}
	if len(others) > 0 {
		t.Errorf("keys %v were not written", others)
	}
}

// AbandonFor closes an entry another instance issued whose call was sent and
// got no answer: the entry keeps its reservation (the provider had the call),
// no refund is announced, and the issuing instance is told with the tokens
// kept. A closed entry answers ErrNotOpen.
func TestAbandonForKeepsTheEntry(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv, FailOpen), open(t, srv, FailOpen)
	type note struct {
		ticket string
		tokens int64
	}
	settled, released := make(chan note, 4), make(chan struct{}, 4)
	a.Notify(Handlers{
		Settled:  func(ticket string, tokens int64) { settled <- note{ticket, tokens} },
		Released: func(p, m string) { released <- struct{}{} },
	})
	waitSubscribed(t, srv)
	g := reserve(t, a, t0, 600, 1000)
	kept, err := b.AbandonFor("p", "m", g.ID, "gts_abandoned")
	if err != nil || kept != 600 {
		t.Fatalf("AbandonFor: %d, %v; want the 600 reserved kept", kept, err)
	}
	if v, err := b.View("p", "m"); err != nil || v.WindowTokens != 600 || v.Requests != 1 {
		t.Fatalf("view %+v (%v), want the 600 still in the window", v, err)
	}
	select {
	case n := <-settled:
		if n != (note{"gts_abandoned", 600}) {
			t.Fatalf("the issuing instance was told %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the issuing instance was not told within 5s")
	}
	select {
	case <-released:
		t.Fatal("a refund was announced: waiters would go into a window the provider still holds")
	default:
	}
	if _, err := b.AbandonFor("p", "m", g.ID, "gts_abandoned"); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("abandoned twice: %v, want ErrNotOpen", err)
	}
	if _, err := b.SettleFor("p", "m", g.ID, 10, 0, "gts_abandoned"); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("settled after the abandon: %v, want ErrNotOpen", err)
	}
}

func TestLearnedSharedAndNotified(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv, FailOpen), open(t, srv, FailOpen)
	got := make(chan gate.LearnedQuota, 4)
	b.Notify(Handlers{Learned: func(p, m string, q gate.LearnedQuota) {
		if p == "p" && m == "m" {
			got <- q
		}
	}})
	waitSubscribed(t, srv)
	a.Save("p", "m", gate.LearnedQuota{Quota: 1234, Trigger: 1100})
	select {
	case q := <-got:
		if q.Quota != 1234 || q.Trigger != 1100 {
			t.Fatalf("notified %+v", q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other instance was not told of the learned quota within 5s")
	}
	if q, ok := b.Load("p", "m"); !ok || q.Quota != 1234 {
		t.Fatalf("Load: %+v %v", q, ok)
	}
}

// waitSubscribed waits until a pattern subscription is live on srv.
func waitSubscribed(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for c.PubSubNumPat(context.Background()).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no subscription within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDegradedAndRecovered(t *testing.T) {
	srv := redistest.Start(t)
	open_, closed := open(t, srv, FailOpen), open(t, srv, FailClosed)
	closed.refuseAfter = time.Second
	srv.Kill()
	for _, s := range []*Store{open_, closed} {
		_, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: t0, Span: time.Minute, Tokens: 1, Need: 1, Budget: 10})
		if err == nil {
			t.Fatal("Reserve with Redis down: no error")
		}
		// failClosed holds the call to ask again; failOpen lets the local gate decide.
		if holds := errors.Is(err, gate.ErrStoreHolds); holds != (s == closed) {
			t.Fatalf("%s: Reserve's error %v holds the call: %v", s.opts.OnError, err, holds)
		}
		if !s.Degraded() || s.Errors() == 0 {
			t.Fatalf("degraded=%v errors=%d after a failed call", s.Degraded(), s.Errors())
		}
		// Degraded: the next call fails at once without the network.
		if _, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: t0, Span: time.Minute}); !errors.Is(err, ErrDegraded) {
			t.Fatalf("degraded call: %v, want ErrDegraded", err)
		}
	}
	if open_.Available() != nil {
		t.Fatal("failOpen store unavailable: it must let the local gate decide")
	}
	// failClosed: degraded, the store holds calls for refuseAfter (a blip
	// the probe finds over costs a wait), then refuses them.
	if err := closed.Available(); err != nil {
		t.Fatalf("failClosed store refuses at once: %v, want calls held for %v", err, closed.refuseAfter)
	}
	time.Sleep(closed.refuseAfter) // (the store's own wall clock decides)
	if !errors.Is(closed.Available(), gate.ErrStoreUnavailable) {
		t.Fatal("failClosed store available while Redis is down")
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for open_.Degraded() || closed.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("the stores did not recover within 10s of Redis returning")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g := reserve(t, open_, t0, 1, 10); g.ID == "" {
		t.Fatalf("after recovery: %+v", g)
	}
}

// Two ledgers (two instances) on one Redis: the second waits for what the first
// holds, and the first one's refund wakes it through the release channel.
func TestLedgersShareOneWindow(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	ledger := func() (*gate.Ledger, *Store) {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned})
		return l, s
	}
	a, _ := ledger()
	b, _ := ledger()
	waitSubscribed(t, srv)
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 3000, MaxTokens: 3000}
	ta, w := a.Submit(clock.Now(), req)
	if w != nil || ta.Shared == "" {
		t.Fatalf("first call on A: waiter=%v ticket %+v, want admitted with a shared entry", w != nil, ta)
	}
	tb, w := b.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 2000, MaxTokens: 2000})
	if w != nil {
		t.Fatalf("B's 4000 on top of A's 6000 fits 10000, yet it waits")
	}
	_, w = b.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "s2", InputTokens: 2000, MaxTokens: 2000})
	if w == nil {
		t.Fatal("B admitted past the shared budget: it did not see A's reservation")
	}
	if err := a.Settle(clock.Now(), ta, gate.Usage{InputTokens: 1000, OutputTokens: 100}); err != nil { // 4900 come back
		t.Fatal(err)
	}
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("A's refund did not wake B's waiter within 5s")
	}
	if tk, ok := w.Ticket(); !ok || tk.Shared == "" {
		t.Fatalf("B's waiter: %+v %v", tk, ok)
	}
	_ = b.Release(clock.Now(), tb)
}

// A 429 seen by one instance cools the model down for the other, and the quota
// it learned reaches the other.
func TestLedgersShareCooldownAndLearning(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100000, RPM: 1000}
	cfg.Pace = 0
	var ls []*gate.Ledger
	for range 2 {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned})
		ls = append(ls, l)
	}
	waitSubscribed(t, srv)
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000, MaxTokens: 1000}
	for range 10 {
		for _, l := range ls { // both carry calls in the window
			tk, w := l.Submit(clock.Now(), req)
			if w != nil {
				t.Fatal("waited on a window far from its budget")
			}
			_ = l.Settle(clock.Now(), tk, gate.Usage{InputTokens: 1000, OutputTokens: 1000})
		}
	}
	before := ls[1].BucketStatus(clock.Now(), "p", "m")
	ls[0].RateLimited(clock.Now(), "p", "m", 30*time.Second)
	if a := ls[0].BucketStatus(clock.Now(), "p", "m"); a.Trigger != 40000 {
		t.Fatalf("A's trigger after the 429: %v, want the shared reading 40000 (both instances' calls)", a.Trigger)
	}
	if _, w := ls[1].Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "t", InputTokens: 10, MaxTokens: 10}); w == nil {
		t.Fatal("B admitted during the cooldown A's 429 started")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := ls[1].BucketStatus(clock.Now(), "p", "m")
		if after.Quota != before.Quota || after.Trigger != before.Trigger {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's learned state stayed quota %v trigger %v after A learned from a 429", after.Quota, after.Trigger)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With Redis down, a failOpen ledger decides with its own window (it still
// holds its budget), and a failClosed one refuses: Admit answers
// gate.ErrStoreUnavailable, never a fail-open ticket.
func TestLedgerWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	stores := map[string]*Store{}
	ledger := func(policy string) *gate.Ledger {
		s := open(t, srv, policy)
		stores[policy] = s
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fo, fc := ledger(FailOpen), ledger(FailClosed)
	stores[FailClosed].refuseAfter = 0 // down for good: refused at once (TestFailClosedHoldsThroughABlip: the wait before)
	srv.Kill()
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 3000, MaxTokens: 3000}
	tk, w := fo.Submit(clock.Now(), req)
	if w != nil || tk.FailOpen || tk.Shared != "" {
		t.Fatalf("failOpen with Redis down: waiter=%v ticket %+v, want a local admission", w != nil, tk)
	}
	if _, w := fo.Submit(clock.Now(), req); w == nil {
		t.Fatal("failOpen with Redis down admitted past its own window's budget")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := fc.Admit(ctx, req); !errors.Is(err, gate.ErrStoreUnavailable) {
		t.Fatalf("failClosed with Redis down: Admit %v, want ErrStoreUnavailable", err)
	}
	if _, err := fc.Admit(ctx, req); !errors.Is(err, gate.ErrStoreUnavailable) {
		t.Fatalf("failClosed, degraded: Admit %v, want ErrStoreUnavailable at once", err)
	}
}

// A key prefix with braces or glob characters is refused before anything
// connects: braces would make the prefix every key's hash tag and the
// notifications would be read back under the wrong name (and dropped), glob
// characters would subscribe to other prefixes' channels.
func TestOpenRefusesKeyPrefixThatBreaksTagsOrPattern(t *testing.T) {
	for _, p := range []string{"app{1}:", "app}", "app*:", "a?", "a[b]", `a\b`} {
		if s, err := Open(Options{URL: "redis://127.0.0.1:1", KeyPrefix: p}, nil); err == nil {
			s.Close()
			t.Errorf("Open with keyPrefix %q: no error", p)
		} else if !strings.Contains(err.Error(), "keyPrefix") {
			t.Errorf("Open with keyPrefix %q: %v, want it to name keyPrefix", p, err)
		}
	}
	// The notifications are parsed by their {…} part: a prefix without braces
	// keeps a mark's channel recognisable.
	s := &Store{opts: Options{KeyPrefix: "app:1:"}, instance: "me"}
	var got []string
	s.on.Marked = func(p string, _ time.Time) { got = append(got, p) }
	s.dispatch(s.marksChannel(), "m other 1000 openai")
	if len(got) != 1 || got[0] != "openai" {
		t.Fatalf("mark dispatched to %v, want [openai]", got)
	}
}

// The notifications go on after Redis restarts under a listening store: the
// client subscribes again by itself (what docs/redis.md and Notify promise).
func TestNotifyResubscribesAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv, FailOpen), open(t, srv, FailOpen)
	got := make(chan gate.LearnedQuota, 8)
	b.Notify(Handlers{Learned: func(p, m string, q gate.LearnedQuota) { got <- q }})
	waitSubscribed(t, srv)
	srv.Kill()
	srv.Restart()
	waitSubscribed(t, srv) // the restarted Redis knows no subscription until b's client makes it again
	deadline := time.Now().Add(10 * time.Second)
	for a.Degraded() { // a's first call after the restart may have found Redis gone
		if time.Now().After(deadline) {
			t.Fatal("a did not recover within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.Save("p", "m", gate.LearnedQuota{Quota: 4321})
	select {
	case q := <-got:
		if q.Quota != 4321 {
			t.Fatalf("notified %+v", q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s of a save after the restart")
	}
}

// A URL that does not parse never brings its password into the error, however
// the password is spelled (the parser quotes the URL with escapes).
func TestOpenURLErrorHidesPassword(t *testing.T) {
	for _, tc := range []struct{ url, secret, want string }{
		{`redis://:se"cret@host:notaport/0`, `cret`, "invalid port"},
		{`redis://:sec@ret@host:notaport/0`, `sec`, "invalid port"},
		{`redis://:sécret@host:bad/0`, `cret`, "invalid port"},
		{`redis://:ab%zzcd@host:1/0`, `zz`, "user:password"},
		{`redis://user:secret@host:bad/0`, `secret`, "invalid port"},
	} {
		for _, cluster := range []bool{false, true} {
			_, err := Open(Options{URL: tc.url, Cluster: cluster}, nil)
			if err == nil {
				t.Fatalf("%s: no error", tc.url)
			}
			if strings.Contains(err.Error(), tc.secret) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s (cluster %v): %v: want %q named and %q not shown", tc.url, cluster, err, tc.want, tc.secret)
			}
		}
	}
}

// A first failure racing Close must not start background work Close no longer
// waits for (sync.WaitGroup forbids an Add concurrent with its Wait); run with
// -race, which reports that Add.
func TestFailRacingClose(t *testing.T) {
	srv := redistest.Start(t)
	for range 200 {
		s, err := Open(Options{URL: srv.URL(), KeyPrefix: "test:", Timeout: time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.fail(errors.New("injected: Redis does not answer"))
		}()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}

// A call sent late after its admission counts on the shared window from its
// send, as it does in its own instance's window: another instance does not
// free it while the provider still counts it. A send within the count guard
// costs no round trip; a settled entry stays where it was.
func TestSentMovesTheSharedEntry(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv, FailOpen), open(t, srv, FailOpen)
	clock := engine.NewFakeClock(t0)
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	la, _ := gate.NewLedger(cfg, clock, gate.WithSharedWindow(a))
	lb, _ := gate.NewLedger(cfg, clock, gate.WithSharedWindow(b))
	big := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 3000, MaxTokens: 3000}
	late, w := la.Submit(t0, big)
	if w != nil || late.Shared == "" {
		t.Fatal("A's call was not admitted through the store")
	}
	early, w := la.Submit(t0.Add(time.Second), gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100, MaxTokens: 100})
	if w != nil {
		t.Fatal("A's second call was not admitted")
	}
	la.Sent(t0.Add(time.Second+100*time.Millisecond), early) // within the guard (300 ms): stays at +1s
	// Later than the guard, within the four times it A keeps as its traffic
	// starts cold: the other instances keep the guard alone, so it moves.
	startLate, w := la.Submit(t0.Add(2*time.Second), gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100, MaxTokens: 100})
	if w != nil {
		t.Fatal("A's third call was not admitted")
	}
	la.Sent(t0.Add(2800*time.Millisecond), startLate)
	// The window's keys would expire in a second; the move keeps them two windows.
	for _, key := range []string{"w", "t", "s", "o"} {
		a.c.PExpire(context.Background(), a.base("p", "m")+key, time.Second)
	}
	la.Sent(t0.Add(5*time.Second), late) // late: the store's entry moves to +5s
	for _, key := range []string{"w", "t", "s", "o"} {
		if ttl := a.c.PTTL(context.Background(), a.base("p", "m")+key).Val(); ttl < time.Minute {
			t.Fatalf("key %s expires in %s after the move, want two windows", key, ttl)
		}
	}
	score := func(tk gate.Ticket) float64 {
		t.Helper()
		entry, _, _ := strings.Cut(tk.Shared, "-")
		v, err := a.c.ZScore(context.Background(), a.base("p", "m")+"w", entry).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got, want := score(late), float64(t0.Add(5*time.Second).UnixMilli()); got != want {
		t.Fatalf("the late call's entry counts from %v ms, want %v (its send)", got, want)
	}
	if got, want := score(early), float64(t0.Add(time.Second).UnixMilli()); got != want {
		t.Fatalf("the call sent within the guard counts from %v ms, want %v (its admission)", got, want)
	}
	if got, want := score(startLate), float64(t0.Add(2800*time.Millisecond).UnixMilli()); got != want {
		t.Fatalf("the call sent 800 ms late as traffic started counts from %v ms, want %v (its send)", got, want)
	}
	// The same send reported again — here to the other instance, as a
	// harness that retries its report may — leaves the entry where the first
	// report put it: a call is sent once.
	if moved, err := b.Sent("p", "m", late.Shared, t0.Add(8*time.Second), time.Minute); moved || err != nil {
		t.Fatalf("the send reported again: moved %v, %v; want not moved, no error", moved, err)
	}
	if got, want := score(late), float64(t0.Add(5*time.Second).UnixMilli()); got != want {
		t.Fatalf("the send reported again moved the entry to %v ms, want it at %v (the first report)", got, want)
	}
	// Past its admission's window and guard, B still cannot fit 6,000 beside it.
	clock.Set(t0.Add(61 * time.Second))
	if _, w := lb.Submit(clock.Now(), big); w == nil {
		t.Fatal("B admitted 6,000 at +61s while A's call, sent at +5s, still counts 6,000 of 10,000")
	}
	// A settled entry is not moved again.
	if err := la.Settle(clock.Now(), early, gate.Usage{InputTokens: 100, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if moved, err := a.Sent("p", "m", early.Shared, clock.Now(), time.Minute); moved || !errors.Is(err, gate.ErrSharedEntryClosed) {
		t.Fatalf("sent after the settle: moved %v, %v; want not moved, gate.ErrSharedEntryClosed", moved, err)
	}
	if got, want := score(early), float64(t0.Add(time.Second).UnixMilli()); got != want {
		t.Fatalf("a settled entry moved to %v, want it at %v", got, want)
	}
	// The entry marked sent still settles, once, with its nonce.
	if err := la.Settle(clock.Now(), late, gate.Usage{InputTokens: 3000, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if v := a.c.HGet(context.Background(), a.base("p", "m")+"t", strings.SplitN(late.Shared, "-", 2)[0]).Val(); v != "3010" {
		t.Fatalf("the entry sent and settled holds %q tokens, want 3010", v)
	}
	if a.Errors() != 0 || b.Errors() != 0 {
		t.Fatalf("store errors: %d, %d", a.Errors(), b.Errors())
	}
}

// The id sequence may be gone while an entry it gave out is still in the
// window: its TTL runs from the last reservation and a sent entry's from its
// send, and an eviction policy may drop it alone. A new reservation then
// never takes that entry's id: it would overwrite the entry, whose settle
// would be refused and whose tokens would stay in the window's sum for as
// long as anyone reserved.
func TestReserveNeverReusesALiveEntrysID(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	a := reserve(t, s, t0, 100, 1<<30)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.Del(context.Background(), s.base("p", "m")+"q").Err(); err != nil { // the sequence gone, the entry not
		t.Fatal(err)
	}
	b := reserve(t, s, t0.Add(time.Second), 50, 1<<30)
	if ea, _, _ := strings.Cut(a.ID, "-"); strings.HasPrefix(b.ID, ea+"-") { // the entry's id, then its nonce
		t.Fatalf("the second reservation %q took the first's entry (%q)", b.ID, a.ID)
	}
	if err := s.Settle("p", "m", a.ID, 100, -1); err != nil {
		t.Fatalf("settling the first entry: %v", err)
	}
	if err := s.Settle("p", "m", b.ID, 50, -1); err != nil {
		t.Fatalf("settling the second entry: %v", err)
	}
	if g := reserve(t, s, t0.Add(2*time.Minute), 1, 1<<30); g.WindowTokens != 1 {
		t.Fatalf("once both left the window it holds %d tokens, want 1 (the new call alone)", g.WindowTokens)
	}
}

// Through a real Redis: a call B holds in A's cooldown stays held when A's
// call settles (a release: room came back, the pause did not end) and when
// Redis then goes down (failOpen: B decides alone, the cooldown it was told of
// still holds), and goes at the cooldown's end.
func TestCooldownHoldOutlivesAReleaseAndTheStore(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100000, RPM: 1000}
	cfg.Pace = 0
	released := make(chan struct{}, 16)
	var ls []*gate.Ledger
	for i := range 2 {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s))
		if err != nil {
			t.Fatal(err)
		}
		h := Handlers{Released: l.SharedReleased}
		if i == 1 {
			h.Released = func(provider, model string) {
				l.SharedReleased(provider, model)
				released <- struct{}{}
			}
		}
		s.Notify(h)
		ls = append(ls, l)
	}
	a, b := ls[0], ls[1]
	waitSubscribed(t, srv)
	first, w := a.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000, MaxTokens: 1000})
	if w != nil {
		t.Fatal("A waited on an empty window")
	}
	a.RateLimited(clock.Now(), "p", "m", 30*time.Second)
	_, held := b.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "t", InputTokens: 10, MaxTokens: 10})
	if held == nil {
		t.Fatal("B admitted a call into the cooldown A's 429 started")
	}
	_ = a.Settle(clock.Now(), first, gate.Usage{InputTokens: 1000, OutputTokens: 10}) // frees 990: a release
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("B heard no release within 5s")
	}
	if tk, ok := held.Poll(clock.Now()); ok {
		t.Fatalf("B granted %+v into A's cooldown after a release", tk)
	}
	if cd := b.CooldownLeft(clock.Now(), "p", "m"); cd < 29*time.Second {
		t.Fatalf("B's CooldownLeft %s after a release, want A's 30s", cd)
	}
	srv.Kill()
	clock.Advance(time.Second)
	if tk, ok := held.Poll(clock.Now()); ok {
		t.Fatalf("B granted %+v into A's cooldown with Redis down", tk)
	}
	if tk, w := b.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "u", InputTokens: 1, MaxTokens: 1}); w == nil {
		t.Fatalf("B admitted a smaller call %+v into A's cooldown with Redis down", tk)
	}
	clock.Advance(30 * time.Second)
	if tk, ok := held.Poll(clock.Now()); !ok || tk.FailOpen {
		t.Fatalf("at the cooldown's end with Redis down: granted=%v %+v, want B's own grant", ok, tk)
	}
}

// pacedInstances submits calls of size tokens to n ledgers sharing srv, all
// waiting out the cooldown the first one's 429 starts, and returns what each
// moment from the cooldown's end on granted, in tokens, across them all.
func pacedInstances(t *testing.T, srv *redistest.Server, n int, prefix string, steps []time.Duration) []int64 {
	t.Helper()
	clock := engine.NewFakeClock(t0)
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100000, RPM: 10000}
	cfg.Learn = false
	cfg.Jitter = 0
	cfg.MarginSigmas = 0
	cfg.OutputReserveTokens = 0
	var ls []*gate.Ledger
	for range n {
		s, err := Open(Options{URL: srv.URL(), KeyPrefix: prefix, Timeout: time.Second, OnError: FailOpen}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	const cooldown = 30 * time.Second
	ls[0].RateLimited(t0, "p", "m", cooldown)
	var waiters []*gate.Waiter
	for i, l := range ls {
		for j := range 60 / n {
			tk, w := l.Submit(t0, gate.Request{Provider: "p", Model: "m", Session: fmt.Sprint("s", i, "-", j), InputTokens: 1000, MaxTokens: 1})
			if w == nil {
				t.Fatalf("instance %d admitted %+v in the cooldown", i, tk)
			}
			waiters = append(waiters, w)
		}
	}
	granted := make([]int64, len(steps))
	done := make([]bool, len(waiters))
	for k, d := range steps {
		now := t0.Add(cooldown + d)
		clock.Set(now)
		for i, w := range waiters {
			if tk, ok := w.Poll(now); ok && !done[i] {
				done[i] = true
				granted[k] += tk.Reserved
			}
		}
	}
	return granted
}

// Instances sharing a key pace its calls as one instance does: at a shared
// cooldown's end they let through one burst between them, not one each, and
// then the budget at the pace's rate between them. (Each at the whole pace,
// three instances let three bursts through at the end — the cohort a provider
// that still counts the calls of before the cooldown refuses — and the budget
// three times as fast.)
func TestInstancesPaceTheKeyAsOne(t *testing.T) {
	srv := redistest.Start(t)
	steps := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}
	cfg := gate.DefaultConfig()
	burst := cfg.PaceBurst * 100000                  // 7,000 tokens at once
	rate := cfg.Pace * 100000 / cfg.Window.Seconds() // 5,000 a second
	const call = 1001                                // what each call reserves
	for _, n := range []int{1, 3} {
		g := pacedInstances(t, srv, n, fmt.Sprintf("pace%d:", n), steps)
		t.Logf("%d instance(s): tokens granted at the cooldown's end, then in each second after: %v", n, g)
		// Each instance's pacer lets a call through when it holds the whole
		// call: what it holds short of the next call is each one's slack.
		var sum int64
		for k, d := range steps {
			sum += g[k]
			if want := burst + rate*d.Seconds() + float64(n*call); float64(sum) > want {
				t.Errorf("%d instance(s): %d tokens from the cooldown's end to %v after, want at most one burst and the pace: %.0f", n, sum, d, want)
			}
		}
		if want := burst + rate*steps[len(steps)-1].Seconds() - float64(2*n*call); float64(sum) < want {
			t.Errorf("%d instance(s): %d tokens by %v, want the burst and the pace: at least %.0f", n, sum, steps[len(steps)-1], want)
		}
	}
}

// An instance competes for a model — counts in the others' share of the pace —
// from a call it queues or that Redis refuses, for a window: not for calls
// granted at once with nothing queued (a trickle does not slow a busy peer).
func TestInstancesCompetingForAModel(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv, FailOpen), open(t, srv, FailOpen)
	ask := func(s *Store, now time.Time, budget int64, queued bool) gate.SharedGrant {
		t.Helper()
		g, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: now, Span: time.Minute, ActiveSpan: time.Minute,
			Tokens: 100, Need: 100, Budget: budget, Queued: queued})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := ask(a, t0, 100000, false); g.ID == "" || g.Instances != 0 {
		t.Fatalf("a call granted at once, nothing queued: %+v, want granted and no instance competing", g)
	}
	if g := ask(b, t0, 100000, true); g.Instances != 1 {
		t.Fatalf("b with calls queued: %d instances, want 1", g.Instances)
	}
	if g := ask(a, t0, 100000, false); g.Instances != 1 {
		t.Fatalf("a granted at once again: %d instances, want b's 1", g.Instances)
	}
	if g := ask(a, t0, 1, false); g.ID != "" || g.Instances != 2 {
		t.Fatalf("a refused: %+v, want refused and 2 instances", g)
	}
	if g := ask(a, t0.Add(time.Minute+time.Millisecond), 100000, false); g.Instances != 0 {
		t.Fatalf("a window later: %d instances, want none", g.Instances)
	}
}
