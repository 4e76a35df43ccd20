package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/redistest"
)

// The output window shared (scripts.go: …:ow, …:ot, …:os): a model with an
// output limit (Anthropic's OTPM) counts every instance's output against it.

func reserveOut(t *testing.T, s *Store, now time.Time, tokens, output, outputBudget int64) gate.SharedGrant {
	t.Helper()
	g, err := s.Reserve(gate.SharedReserve{Provider: "p", Model: "m", Now: now, Span: time.Minute,
		Tokens: tokens, Need: tokens, Budget: 100_000, Output: output, OutputBudget: outputBudget})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// outLedger is a ledger on its own store on srv, with an output limit of
// otpm a window (0: none), its token limit far away, nothing random; told of
// releases, and with learned, sharing the learned state too. The store is
// returned with it.
func outLedger(t *testing.T, srv *redistest.Server, clock engine.Clock, otpm int, learned bool) (*gate.Ledger, *Store) {
	t.Helper()
	return outLedgerWith(t, srv, clock, otpm, learned, nil)
}

// outLedgerWith is outLedger with its config changed by tune first.
func outLedgerWith(t *testing.T, srv *redistest.Server, clock engine.Clock, otpm int, learned bool, tune func(*gate.Config)) (*gate.Ledger, *Store) {
	t.Helper()
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100_000, RPM: 1000, OTPM: otpm, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	if tune != nil {
		tune(&cfg)
	}
	s := open(t, srv, FailOpen)
	opts := []gate.Option{gate.WithSharedWindow(s)}
	h := Handlers{}
	if learned {
		opts = append(opts, gate.WithLearnedStore(s))
	}
	l, err := gate.NewLedger(cfg, clock, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.Released = l.SharedReleased
	if learned {
		h.Learned = l.AdoptLearned
	}
	s.Notify(h)
	return l, s
}

// outputSum is the shared output window's sum as Redis holds it ("" when
// there is none).
func outputSum(s *Store) string {
	return s.c.Get(context.Background(), s.base("p", "m")+"os").Val()
}

// outReq is a call of 10 input tokens asking max_tokens out.
func outReq(session string, out int) gate.Request {
	return gate.Request{Provider: "p", Model: "m", Session: session, InputTokens: 10, MaxTokens: out}
}

func TestSharedOutputWindow(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	a := reserveOut(t, s, t0, 1000, 600, 1000)
	if a.ID == "" || a.WindowOutput != 600 {
		t.Fatalf("first call: %+v, want admitted with 600 in the output window", a)
	}
	// 600 + 600 is over the output budget though the token window is far
	// from its own: refused for otpm until the first entry leaves (50 s).
	b := reserveOut(t, s, t0.Add(10*time.Second), 1000, 600, 1000)
	if b.ID != "" || b.Reason != "otpm" || b.Wait != 50*time.Second || b.WindowOutput != 600 {
		t.Fatalf("over the output budget: %+v, want refused for otpm for 50s", b)
	}
	// A call recorded without an output budget (no output limit known to
	// its instance, or an older version's) leaves the output window alone.
	if g := reserve(t, s, t0.Add(10*time.Second), 500, 100_000); g.ID == "" || g.WindowOutput != 0 {
		t.Fatalf("a call without an output budget: %+v", g)
	}
	if n := s.c.ZCard(context.Background(), s.base("p", "m")+"ow").Val(); n != 1 {
		t.Fatalf("the output window holds %d entries, want 1 (the call without an output budget is not in it)", n)
	}
	// The first call wrote 100 of its 600: the settle corrects its output,
	// and the second fits (100 + 600).
	if err := s.Settle("p", "m", a.ID, 1100, 100); err != nil {
		t.Fatal(err)
	}
	c := reserveOut(t, s, t0.Add(10*time.Second), 1000, 600, 1000)
	if c.ID == "" || c.WindowOutput != 700 {
		t.Fatalf("after the correction: %+v, want admitted with 700 in the output window", c)
	}
	// A settle whose output is not known (-1: another instance's ticket)
	// keeps the entry's output reserve; the tokens are settled all the same.
	if err := s.Settle("p", "m", c.ID, 1000, -1); err != nil {
		t.Fatal(err)
	}
	if v := outputSum(s); v != "700" {
		t.Fatalf("the output sum after a settle without output: %s, want 700 (the reserve kept)", v)
	}
	// A call larger than the whole output budget is recorded, not checked
	// (OutputBudget < 0), as the gate lets it go at once.
	if g := reserveOut(t, s, t0.Add(11*time.Second), 1000, 5000, -1); g.ID == "" || g.WindowOutput != 5700 {
		t.Fatalf("a call over the whole output budget: %+v, want recorded with 5700 in the output window", g)
	}
	// A window on, every entry has left the output window too.
	if g := reserveOut(t, s, t0.Add(72*time.Second), 1000, 600, 1000); g.ID == "" || g.WindowOutput != 600 {
		t.Fatalf("a window on: %+v, want admitted into an emptied output window", g)
	}
	for _, key := range []string{"ow", "ot", "os"} {
		if ttl := s.c.PTTL(context.Background(), s.base("p", "m")+key).Val(); ttl <= 0 || ttl > 2*time.Minute {
			t.Fatalf("key %s expires in %s, want within two windows", key, ttl)
		}
	}
	if s.Errors() != 0 {
		t.Fatalf("store errors: %d", s.Errors())
	}
}

// A call sent late moves its output entry with its token entry; written back
// after an outage, a call's output goes to the output window too.
func TestSharedOutputSentAndWrittenBack(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	g := reserveOut(t, s, t0, 1000, 600, 1000)
	if moved, err := s.Sent("p", "m", g.ID, t0.Add(20*time.Second), time.Minute); !moved || err != nil {
		t.Fatalf("sent: moved %v, %v", moved, err)
	}
	entry, _, _ := strings.Cut(g.ID, "-")
	if v := s.c.ZScore(context.Background(), s.base("p", "m")+"ow", entry).Val(); v != float64(t0.Add(20*time.Second).UnixMilli()) {
		t.Fatalf("the output entry counts from %v, want the send (%v)", v, t0.Add(20*time.Second).UnixMilli())
	}
	// Counted from its send, the output holds 70 s after the admission.
	if b := reserveOut(t, s, t0.Add(70*time.Second), 1000, 600, 1000); b.ID != "" || b.Reason != "otpm" || b.Wait != 10*time.Second {
		t.Fatalf("70 s on: %+v, want refused for otpm until the send's window ends (10 s)", b)
	}
	if _, err := s.WriteBack("p", "m", t0.Add(75*time.Second), time.Minute, []gate.SharedCall{
		{At: t0.Add(70 * time.Second), Tokens: 900, Output: 300},
		{At: t0.Add(71 * time.Second), Tokens: 900},
	}); err != nil {
		t.Fatal(err)
	}
	if v := outputSum(s); v != "900" {
		t.Fatalf("output after the write-back: %s, want 900 (600 sent + 300 written back)", v)
	}
}

// Two instances' ledgers with an output limit share it: B holds a call back
// for the output A's call reserved, wakes when A's answer gives most of it
// back, and a 429 about the output read on B counts A's output too.
func TestLedgersShareTheOutputLimit(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	a, _ := outLedger(t, srv, clock, 1000, false)
	b, _ := outLedger(t, srv, clock, 1000, false)
	waitSubscribed(t, srv)
	req := outReq
	ta, w := a.Submit(clock.Now(), req("a", 600))
	if w != nil || ta.Shared == "" {
		t.Fatal("A's call was not admitted through the store")
	}
	_, w = b.Submit(clock.Now(), req("b", 600))
	if w == nil {
		t.Fatal("B admitted 600 of output beside A's 600 under a shared limit of 1,000")
	}
	if st := b.BucketStatus(clock.Now(), "p", "m"); st.OutputWindow != 0 {
		t.Fatalf("B's own output window holds %d, want 0: it is the shared window that holds the call", st.OutputWindow)
	}
	// The output held that call, not its tokens: a call with more input and
	// a short answer fits and goes (it is not held as at least as large).
	tc, wc := b.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "c", InputTokens: 5000, MaxTokens: 100})
	if wc != nil || tc.Shared == "" {
		t.Fatal("B held a call of 100 output tokens that fits beside A's 600, as if the output refusal were a token one")
	}
	_ = b.Release(clock.Now(), tc)
	// A call asking more output than the whole budget goes at once, as
	// locally: the hold does not keep it either.
	if td, wd := b.Submit(clock.Now(), req("d", 2000)); wd != nil || td.Shared == "" {
		t.Fatal("B held a call of 2,000 output tokens, more than the whole output budget: it goes at once")
	} else {
		_ = b.Release(clock.Now(), td)
	}
	if err := a.Settle(clock.Now(), ta, gate.Usage{InputTokens: 10, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("A's answer gave 500 of output back, yet B's waiter was not woken within 5s")
	}
	if tk, ok := w.Ticket(); !ok || tk.Shared == "" {
		t.Fatalf("B's waiter: %+v %v", tk, ok)
	}
	// The shared window holds A's 100 and B's 600, and A adds 200 after B's
	// last answer. B meets a 429 about the output: its reading is the key's
	// window as it is then (900), not its own 600 nor the 700 of its last
	// answer.
	if _, w := a.Submit(clock.Now(), req("a2", 200)); w != nil {
		t.Fatal("A's second call waited: 900 of 1,000")
	}
	b.RateLimitedBy(clock.Now(), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if st := b.BucketStatus(clock.Now(), "p", "m"); st.OutputTrigger < 0.9*900 || st.OutputTrigger > 900 {
		t.Fatalf("B's output trigger %v, want about the shared reading 900 (A's 300 and B's 600), under it by the step down", st.OutputTrigger)
	}
}

// A trigger under the limit steps back up while the shared window holds calls
// back, as it does while the local one does: with several instances each
// local window holds only its share, and the trigger stayed low for good.
func TestSharedOutputTriggerRelaxes(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(t0)
	a, _ := outLedger(t, srv, clock, 1000, false)
	b, _ := outLedger(t, srv, clock, 1000, false)
	req := outReq
	tb, _ := b.Submit(clock.Now(), req("b", 300))
	b.RateLimitedBy(clock.Now(), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	_ = b.Release(clock.Now(), tb)
	low := b.BucketStatus(clock.Now(), "p", "m").OutputTrigger
	if low <= 0 || low >= 400 {
		t.Fatalf("B's trigger after the 429: %v, want about its 300", low)
	}
	// Twelve windows on, A fills the shared window each window, and B's call,
	// which its own window has room for, is refused there.
	for i := range 12 {
		clock.Advance(time.Minute)
		ta, w := a.Submit(clock.Now(), req("a", 900))
		if w != nil {
			t.Fatalf("window %d: A's call waited", i)
		}
		_, w = b.Submit(clock.Now(), req("b", int(low/2)))
		if w == nil {
			t.Fatalf("window %d: B admitted beside A's 900 of 1,000", i)
		}
		w.Cancel(clock.Now())
		_ = a.Release(clock.Now(), ta)
	}
	if st := b.BucketStatus(clock.Now(), "p", "m"); st.OutputTrigger <= low {
		t.Fatalf("B's trigger stayed at %v after twelve windows held by the shared window, want stepped up from %v", st.OutputTrigger, low)
	}
}

// An output limit learned after the first calls (stated by their answers, as
// Anthropic's headers state it): the first reservation under it brings what
// this instance's output window held into the shared one — the calls in
// flight by their entries (their settle corrects them), the settled ones from
// when they count — so the other instances see them too.
func TestSharedOutputBroughtInWhenTheLimitIsLearned(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(t0)
	l, s := outLedger(t, srv, clock, 0, false)
	req := outReq
	settled, _ := l.Submit(clock.Now(), req("a", 400))
	open, _ := l.Submit(clock.Now(), req("b", 300))
	clock.Advance(time.Second)
	if err := l.Settle(clock.Now(), settled, gate.Usage{InputTokens: 10, OutputTokens: 250}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := s.c.Exists(ctx, s.base("p", "m")+"ow").Val(); n != 0 {
		t.Fatal("an output window was kept before any output limit was known")
	}
	l.StateOutputLimit(clock.Now(), "p", "m", 12_000) // a minute, as stated: the window is a minute
	third, w := l.Submit(clock.Now(), req("c", 100))
	if w != nil || third.Shared == "" {
		t.Fatal("the third call was not admitted through the store")
	}
	if v := outputSum(s); v != "650" {
		t.Fatalf("the shared output window holds %s, want 650: the settled 250, the open 300 and the new 100", v)
	}
	// The call in flight came in by its entry: its settle corrects it.
	if err := l.Settle(clock.Now(), open, gate.Usage{InputTokens: 10, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	if v := outputSum(s); v != "400" {
		t.Fatalf("after the open call's settle the shared output window holds %s, want 400", v)
	}
	// Brought in once: a later reservation adds only its own output.
	if _, w := l.Submit(clock.Now(), req("d", 100)); w != nil {
		t.Fatal("the fourth call waited")
	}
	if v := outputSum(s); v != "500" {
		t.Fatalf("after a fourth call the shared output window holds %s, want 500", v)
	}
}

// A sum never outlives its entries: the settle gives the output sum the
// output window's own TTL, and a sum whose entries expired before it reads 0
// (in the token window too): kept, it re-set itself at every call and held
// the model at "full" for good.
func TestSharedSumsNeverOutliveTheirEntries(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	ctx := context.Background()
	k := s.base("p", "m")
	a := reserveOut(t, s, t0, 1000, 600, 1000)
	s.c.PExpire(ctx, k+"ow", 3*time.Second)
	s.c.PExpire(ctx, k+"ot", 3*time.Second)
	reserve(t, s, t0.Add(time.Second), 100, 100_000) // a call without output refreshes the token keys only
	if err := s.Settle("p", "m", a.ID, 800, 200); err != nil {
		t.Fatal(err)
	}
	if ttl := s.c.PTTL(ctx, k+"os").Val(); ttl > 3*time.Second {
		t.Fatalf("the output sum expires in %s after the settle, past its entries (3s)", ttl)
	}
	// Entries gone, sums left: a window's keys expiring apart.
	s.c.Del(ctx, k+"ow", k+"ot", k+"w", k+"t")
	s.c.Set(ctx, k+"os", 900, time.Minute)
	s.c.Set(ctx, k+"s", 90_000, time.Minute)
	if g := reserveOut(t, s, t0.Add(2*time.Second), 1000, 600, 1000); g.ID == "" || g.WindowOutput != 600 || g.WindowTokens != 1000 {
		t.Fatalf("with the entries gone and the sums left: %+v, want admitted into empty windows", g)
	}
}

// A ticket settled on another instance (the decision API behind a load
// balancer) corrects the output window to what the call wrote; an abandoned
// one keeps its reserve.
func TestSettleForCorrectsTheOutput(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	a := reserveOut(t, s, t0, 1000, 600, 1000)
	b := reserveOut(t, s, t0, 1000, 300, 1000)
	if _, err := s.SettleFor("p", "m", a.ID, 1100, 100, "gts_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AbandonFor("p", "m", b.ID, "gts_b"); err != nil {
		t.Fatal(err)
	}
	if v := outputSum(s); v != "400" {
		t.Fatalf("the output window after SettleFor (600 → 100) and AbandonFor (300 kept): %s, want 400", v)
	}
}

// Calls admitted alone while Redis was down, with an output limit configured:
// after the recovery their output is in the shared output window once, not
// once by the write-back and again by the first reservation under the limit.
func TestSharedOutputOfCallsAdmittedAloneCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	l, s := outLedger(t, srv, clock, 10_000, false)
	srv.Kill()
	for _, session := range []string{"a", "b"} {
		tk, w := l.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: session, InputTokens: 10, MaxTokens: 400})
		if w != nil || tk.Shared != "" {
			t.Fatal("with Redis down the call was not admitted alone")
		}
		if err := l.Settle(clock.Now(), tk, gate.Usage{InputTokens: 10, OutputTokens: 200}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart()
	waitUndegraded(t, s)
	l.WriteBackAlone()
	if _, w := l.Submit(clock.Now(), gate.Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, MaxTokens: 100}); w != nil {
		t.Fatal("the call after the recovery waited")
	}
	if v := outputSum(s); v != "500" {
		t.Fatalf("the shared output window after the recovery holds %s, want 500: the two calls' 200 each, once, and the new 100", v)
	}
}

// Instances that share the learned state step a low output trigger up once a
// window between them: the shared window refuses each of them, and each step
// one instance takes reaches the others with its time.
func TestSharedOutputRelaxStepsOnceAWindowBetweenInstances(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(t0)
	a, _ := outLedger(t, srv, clock, 1000, true)
	b, _ := outLedger(t, srv, clock, 1000, true)
	waitSubscribed(t, srv)
	req := outReq
	trigger := func(l *gate.Ledger) float64 { return l.BucketStatus(clock.Now(), "p", "m").OutputTrigger }
	agree := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for trigger(a) != want || trigger(b) != want {
			if time.Now().After(deadline) {
				t.Fatalf("the instances' output triggers %v and %v, want both at %v", trigger(a), trigger(b), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ta, _ := a.Submit(clock.Now(), req("a", 200))
	tb, _ := b.Submit(clock.Now(), req("b", 300))
	b.RateLimitedBy(clock.Now(), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	_, _ = a.Release(clock.Now(), ta), b.Release(clock.Now(), tb)
	low := trigger(b)
	agree(low)
	stepped := 0
	for range 12 {
		clock.Advance(time.Minute)
		before := trigger(a)
		// A call larger than the whole budget goes at once and fills the
		// shared window; then each instance's call is refused there.
		tf, _ := a.Submit(clock.Now(), req("f", 2000))
		for _, l := range []*gate.Ledger{a, b} {
			if _, w := l.Submit(clock.Now(), req("x", 10)); w != nil {
				w.Cancel(clock.Now())
			}
			agree(trigger(l)) // the step, if one was taken, reached the other
		}
		if after := trigger(a); after > before {
			stepped++
			if after > before*1.06 {
				t.Fatalf("one window stepped the trigger %v → %v: each instance took a step", before, after)
			}
		}
		_ = a.Release(clock.Now(), tf)
	}
	if stepped == 0 {
		t.Fatalf("the trigger stayed at %v for twelve windows held by the shared window", low)
	}
}

// Calls without max_tokens reserve an expected output, and the output window
// keeps room for the spread of those in flight (engine/gate/output.go): the
// shared window too, by a budget smaller by that margin for the call. B's
// second such call fits B's own window with its margin, but not the key's,
// which holds A's output as well.
func TestSharedOutputKeepsTheMargin(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(t0)
	ledger := func() *gate.Ledger {
		l, _ := outLedgerWith(t, srv, clock, 3000, false, func(c *gate.Config) {
			c.Window, c.MaxWait, c.MarginSigmas = 10*time.Second, 20*time.Second, 2
		})
		return l
	}
	a, b := ledger(), ledger()
	free := func(s string) gate.Request {
		return gate.Request{Provider: "p", Model: "m", Session: s, InputTokens: 10}
	}
	// B has seen outputs of 100 and 900 in turn: it expects 500, spread 400.
	for i := range 16 {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		tk, w := b.Submit(at, free("warm"))
		if w != nil {
			t.Fatalf("warm-up call %d waits", i)
		}
		if err := b.Settle(at.Add(time.Millisecond), tk, gate.Usage{InputTokens: 10, OutputTokens: int64(100 + 800*(i%2))}); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(200 * time.Second)
	if _, w := a.Submit(at, outReq("a", 1500)); w != nil {
		t.Fatal("A's call of 1,500 waits in an empty window")
	}
	// B's first: 1,500 + 500 within 3,000 less 2σ of one output (800).
	if _, w := b.Submit(at, free("b1")); w != nil {
		t.Fatal("B's first call without max_tokens waits")
	}
	// B's second: its own window (500 + 500 + 2σ of two, 1,131) has room;
	// the key's (2,000 + 500 within 3,000 less 1,131) has not.
	if _, w := b.Submit(at, free("b2")); w == nil {
		t.Fatal("B's second call without max_tokens went: the shared output window kept no margin for the outputs in flight")
	}
}
