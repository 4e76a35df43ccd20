package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// slowProxy forwards to addr, holding each answer back by delay: a Redis a
// slow link away, where a call is one round trip and a connection's set-up
// (HELLO, CLIENT SETINFO, then the call) several.
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() {
				defer wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// A connection's set-up costs round trips a call on an open one does not:
// under the call's deadline, a Redis whose set-up took longer was never
// connected, and the store stayed degraded. The probe sets connections up
// under connectTimeout, and the calls that follow meet them open.
func TestSlowConnectionSetUpStillConnects(t *testing.T) {
	srv := redistest.Start(t)
	// A call 80 ms, a set-up over 200 (three round trips or more); the probe's
	// eleven round trips take about 0.9 s of its 2 s.
	addr := slowProxy(t, srv.Addr, 80*time.Millisecond)
	s, err := Open(Options{URL: "redis://" + addr, KeyPrefix: "test:", Timeout: 200 * time.Millisecond, OnError: FailOpen}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Degraded() {
		t.Fatal("degraded after Open: the connections' set-up ran under the call deadline")
	}
	for i := range minIdleConns {
		if g := reserve(t, s, t0.Add(time.Duration(i)*time.Millisecond), 1, 100); g.ID == "" {
			t.Fatalf("call %d: %+v", i, g)
		}
	}
	if s.Degraded() || s.Errors() != 0 {
		t.Fatalf("degraded=%v errors=%d after calls on set-up connections", s.Degraded(), s.Errors())
	}
}

// A Redis that answers PING but refuses writes (a replica) fails every script:
// the store stays degraded until a write goes through, instead of recovering
// on the PING and degrading again on the next call.
func TestReadOnlyRedisStaysDegraded(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	ctx := context.Background()
	if err := raw.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil { // a master that is not there: read-only
		t.Fatal(err)
	}
	if _, err := s.Reserve(reserveArgs(t0)); err == nil {
		t.Fatal("a write on a read-only Redis: no error")
	}
	if !s.Degraded() {
		t.Fatal("not degraded after a refused write")
	}
	time.Sleep(3 * pingEvery) // (the probe's period: wall time is what it runs on)
	if !s.Degraded() {
		t.Fatal("recovered on a Redis that still refuses writes")
	}
	if err := raw.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	waitUndegraded(t, s)
	if g := reserve(t, s, t0, 1, 10); g.ID == "" {
		t.Fatalf("after recovery: %+v", g)
	}
}

// An instance that started while Redis did not answer never read the
// provider-wide cooldowns and marks set before: recovery hands them over.
func TestRecoveryHandsOverCooldownsAndMarks(t *testing.T) {
	srv := redistest.Start(t)
	a := open(t, srv, FailOpen)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := a.ProviderCooldown("p", time.Now(), until); err != nil {
		t.Fatal(err)
	}
	a.ShareMark("q", until.Add(-2*time.Hour))
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	if err := raw.Do(context.Background(), "CLIENT", "PAUSE", int64((connectTimeout + time.Second).Milliseconds()), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(Options{URL: srv.URL(), KeyPrefix: "test:", Timeout: 100 * time.Millisecond, OnError: FailOpen}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Degraded() {
		t.Fatal("not degraded while Redis is paused")
	}
	var mu sync.Mutex
	cooled, marked := map[string]time.Time{}, map[string]time.Time{}
	marks := 0
	b.Notify(Handlers{
		ProviderCooldown: func(p string, u time.Time) { mu.Lock(); cooled[p] = u; mu.Unlock() },
		Marked:           func(p string, at time.Time) { mu.Lock(); marked[p] = at; marks++; mu.Unlock() },
	})
	waitUndegraded(t, b)
	deadline := time.Now().Add(10 * time.Second) // the handlers run just after the flag turns
	for {
		mu.Lock()
		done := cooled["p"].Equal(until) && !marked["q"].IsZero()
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after recovery: cooldowns %v, marks %v; want p's cooldown until %v and q's mark", cooled, marked, until)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Once read, the marks are not handed over again by a later recovery: one
	// lifted here meanwhile (by hand, by a reading) is still in Redis.
	b.resync()
	mu.Lock()
	defer mu.Unlock()
	if marks != 1 {
		t.Errorf("the marks were handed over %d times, want once", marks)
	}
}

func waitUndegraded(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("the store did not recover within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func reserveArgs(now time.Time) gate.SharedReserve {
	return gate.SharedReserve{Provider: "p", Model: "m", Now: now, Span: time.Minute, Tokens: 1, Need: 1, Budget: 10}
}

// What an instance admitted alone while Redis was down still counts at the
// provider for a window. Recovery writes it to the shared window, so another
// instance does not take the window for empty and send the budget a second
// time: the closed calls with what they cost, the open ones with their
// reservation, which their settlement then corrects.
func TestRecoveryWritesBackWhatWasAdmittedAlone(t *testing.T) {
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
		s.Notify(Handlers{Released: l.SharedReleased, Learned: l.AdoptLearned, Recovered: l.WriteBackAlone})
		return l, s
	}
	a, sa := ledger()
	b, _ := ledger()
	srv.Kill()
	req := func(session string) gate.Request {
		return gate.Request{Provider: "p", Model: "m", Session: session, InputTokens: 3000, MaxTokens: 1000}
	}
	// A, alone: one call closed at 3,500 tokens, one still open (4,000 reserved).
	closed, w := a.Submit(clock.Now(), req("s1"))
	if w != nil || closed.Shared != "" {
		t.Fatalf("A with Redis down: waiter=%v ticket %+v, want a local admission", w != nil, closed)
	}
	clock.Advance(time.Second)
	if err := a.Settle(clock.Now(), closed, gate.Usage{InputTokens: 3000, OutputTokens: 500}); err != nil {
		t.Fatal(err)
	}
	open_, w := a.Submit(clock.Now(), req("s2"))
	if w != nil {
		t.Fatal("A's second call waits: 3,500 + 4,000 fit its 10,000")
	}
	srv.Restart()
	waitUndegraded(t, sa)
	deadline := time.Now().Add(10 * time.Second) // the handler runs just after the flag turns
	for {
		v, err := sa.View("p", "m")
		if err == nil && v.WindowTokens == 7500 && v.Requests == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after recovery the shared window holds %+v (%v), want A's 3,500 settled and 4,000 open: 7,500 in 2 requests", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, w := b.Submit(clock.Now(), req("s3")); w == nil {
		t.Fatal("B admitted 4,000 on top of the 7,500 A sent alone: the shared window did not hold them")
	} else {
		w.Cancel(clock.Now())
	}
	// The open call's settlement corrects its written entry: 4,000 → 3,200.
	if err := a.Settle(clock.Now(), open_, gate.Usage{InputTokens: 3000, OutputTokens: 200}); err != nil {
		t.Fatal(err)
	}
	if v, err := sa.View("p", "m"); err != nil || v.WindowTokens != 6700 {
		t.Fatalf("after the open call settled: %+v (%v), want 6,700", v, err)
	}
	// Once written, nothing is written again by a later recovery.
	a.WriteBackAlone()
	if v, err := sa.View("p", "m"); err != nil || v.WindowTokens != 6700 || v.Requests != 2 {
		t.Fatalf("a second write-back: %+v (%v), want 6,700 in 2 requests still", v, err)
	}
}

// A call that fails open at maxWait while another waiter holds the queue is
// sent like any other: the shared window records it, so the other instances
// count it too.
func TestFailOpenBehindAHeldQueueIsShared(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 1000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	cfg.Window, cfg.MaxWait = time.Minute, 2*time.Minute
	cfg.OutputReserveTokens, cfg.CountGuard = 100, 0
	s := open(t, srv, FailOpen)
	l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s), gate.WithLearnedStore(s))
	if err != nil {
		t.Fatal(err)
	}
	t0 := clock.Now()
	if _, w := l.Submit(t0, gate.Request{Provider: "p", Model: "m", Session: "x", InputTokens: 800}); w != nil {
		t.Fatal("the first call waits")
	}
	_, behind := l.Submit(t0, gate.Request{Provider: "p", Model: "m", Session: "b", InputTokens: 50, Priority: gate.PriorityBatch})
	_, holder := l.Submit(t0.Add(10*time.Second), gate.Request{Provider: "p", Model: "m", Session: "h", InputTokens: 50})
	if behind == nil || holder == nil {
		t.Fatal("admitted past the budget")
	}
	l.RateLimited(t0.Add(20*time.Second), "p", "m", 180*time.Second) // nobody fits before failing open
	holder.Poll(t0.Add(40 * time.Second))                            // the holder has waited half a window
	tk, ok := behind.Poll(t0.Add(2 * time.Minute))
	if !ok || !tk.FailOpen {
		t.Fatalf("ticket %+v ok=%v: want a fail-open grant at its 120s deadline", tk, ok)
	}
	if tk.Shared == "" {
		t.Fatal("the fail-open grant behind the held queue has no shared entry: the other instances do not count it")
	}
	if v, err := s.View("p", "m"); err != nil || v.WindowTokens != 150 {
		t.Fatalf("the shared window: %+v (%v), want the fail-open call's 150 (the first call left it at 60s)", v, err)
	}
}

// Under failClosed, a Redis that stops answering for a moment holds the calls
// of that moment — queued, not admitted alone, not refused — and the probe's
// recovery lets them through the shared window. A call that reaches maxWait
// meanwhile is held too: the gate's max-wait grant fails open, and failClosed
// never does.
func TestFailClosedHoldsThroughABlip(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(Options{URL: srv.URL(), KeyPrefix: "test:", Timeout: 100 * time.Millisecond, OnError: FailClosed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.refuseAfter = time.Minute // the pause below stays under it
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s))
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	if err := raw.Do(context.Background(), "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	req := gate.Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000, MaxTokens: 1000}
	tk, first := l.Submit(clock.Now(), req)
	if first == nil {
		t.Fatalf("Redis paused, failClosed: admitted %+v, want the call held", tk)
	}
	if !s.Degraded() || l.StoreAvailable() != nil {
		t.Fatalf("degraded=%v, available=%v: want a degraded store that holds calls", s.Degraded(), l.StoreAvailable())
	}
	clock.Advance(cfg.MaxWait / 2)
	tk, late := l.Submit(clock.Now(), req)
	if late == nil {
		t.Fatalf("second call admitted %+v while Redis is paused", tk)
	}
	clock.Advance(cfg.MaxWait) // past the first call's maxWait
	for _, w := range []*gate.Waiter{first, late} {
		if tk, ok := w.Poll(clock.Now()); ok {
			t.Fatalf("granted %+v while Redis is paused: failClosed admitted alone", tk)
		}
	}
	if !s.Degraded() {
		t.Fatal("the store recovered before the polls above: the machine stalled for the whole pause, and they tested nothing")
	}
	waitUndegraded(t, s)
	clock.Advance(time.Second)
	for i, w := range []*gate.Waiter{first, late} {
		tk, ok := w.Poll(clock.Now())
		// Through the shared window; the first call within its maxWait, not
		// failing open (the second, past it, may be the max-wait grant).
		if !ok || tk.Shared == "" || (w == first && tk.FailOpen) {
			t.Fatalf("call %d after Redis answers again: granted=%v %+v, want a grant through the shared window", i, ok, tk)
		}
	}
}

// A store that recovers and fails again at once — the probe reaches Redis, the
// calls do not (here one model's window key holds the wrong type) — is in one
// outage: failClosed refuses refuseAfter from its first failure, rather than
// starting the hold over at each recovery and holding calls for ever.
func TestFailClosedRefusesAFlappingStore(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailClosed)
	s.refuseAfter = time.Second
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	if err := raw.Set(context.Background(), "test:{p/m}:w", "not a window", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recovered := false
	for time.Since(start) < 10*time.Second {
		if _, err := s.Reserve(reserveArgs(t0)); err == nil {
			t.Fatal("Reserve on a window of the wrong type: no error")
		}
		if errors.Is(s.Available(), gate.ErrStoreUnavailable) {
			if !recovered {
				t.Fatal("refused before the store ever recovered: the test did not flap")
			}
			if d := time.Since(start); d > 3*s.refuseAfter {
				t.Fatalf("refused after %v, want about %v from the first failure", d, s.refuseAfter)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
		recovered = recovered || !s.Degraded()
	}
	t.Fatalf("a store failing every call, recovering between them, still held calls after %v", time.Since(start))
}

// Every script the package defines is in scripts, which the probe preloads and
// `gatectl check` loads: one left out costs its first call a second round trip
// (EVALSHA refused, then EVAL), past the deadline on a slow link — and a
// managed Redis that forbids Lua would pass the check and fail that call.
func TestEveryScriptIsPreloaded(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	defined := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		defined += strings.Count(string(src), "= redis.NewScript(")
	}
	distinct := map[*redis.Script]bool{}
	for _, sc := range scripts {
		distinct[sc] = true
	}
	if len(distinct) != defined || len(scripts) != defined {
		t.Fatalf("the package defines %d scripts; scripts lists %d (%d distinct)", defined, len(scripts), len(distinct))
	}
}
