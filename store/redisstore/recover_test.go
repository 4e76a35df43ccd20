package redisstore

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

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
