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
	if v := s.c.Get(context.Background(), s.base("p", "m")+"os").Val(); v != "700" {
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
	if v := s.c.Get(context.Background(), s.base("p", "m")+"os").Val(); v != "900" {
		t.Fatalf("output after the write-back: %s, want 900 (600 sent + 300 written back)", v)
	}
}

// Two instances' ledgers with an output limit share it: B holds a call back
// for the output A's call reserved, wakes when A's answer gives most of it
// back, and a 429 about the output read on B counts A's output too.
func TestLedgersShareTheOutputLimit(t *testing.T) {
	srv := redistest.Start(t)
	clock := engine.NewFakeClock(time.Now())
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100_000, RPM: 1000, OTPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	ledger := func() *gate.Ledger {
		s := open(t, srv, FailOpen)
		l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s))
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(Handlers{Released: l.SharedReleased})
		return l
	}
	a, b := ledger(), ledger()
	waitSubscribed(t, srv)
	req := func(session string, out int) gate.Request {
		return gate.Request{Provider: "p", Model: "m", Session: session, InputTokens: 10, MaxTokens: out}
	}
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
	// The shared window now holds A's 100 and B's 600. B meets a 429 about
	// the output: its reading is the key's window, not its own 600.
	b.RateLimitedBy(clock.Now(), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if st := b.BucketStatus(clock.Now(), "p", "m"); st.OutputTrigger < 0.9*700 || st.OutputTrigger > 700 {
		t.Fatalf("B's output trigger %v, want about the shared reading 700 (A's 100 and B's 600), under it by the step down", st.OutputTrigger)
	}
}

// An output limit learned after the first calls (stated by their answers, as
// Anthropic's headers state it): the first reservation under it brings what
// this instance's output window held into the shared one — the calls in
// flight by their entries (their settle corrects them), the settled ones from
// when they count — so the other instances see them too.
func TestSharedOutputBroughtInWhenTheLimitIsLearned(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, FailOpen)
	clock := engine.NewFakeClock(t0)
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 100_000, RPM: 1000, SafetyFactor: 1}
	cfg.MarginSigmas, cfg.Jitter, cfg.Pace = 0, 0, 0
	l, err := gate.NewLedger(cfg, clock, gate.WithSharedWindow(s))
	if err != nil {
		t.Fatal(err)
	}
	req := func(session string, out int) gate.Request {
		return gate.Request{Provider: "p", Model: "m", Session: session, InputTokens: 10, MaxTokens: out}
	}
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
	if v := s.c.Get(ctx, s.base("p", "m")+"os").Val(); v != "650" {
		t.Fatalf("the shared output window holds %s, want 650: the settled 250, the open 300 and the new 100", v)
	}
	// The call in flight came in by its entry: its settle corrects it.
	if err := l.Settle(clock.Now(), open, gate.Usage{InputTokens: 10, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	if v := s.c.Get(ctx, s.base("p", "m")+"os").Val(); v != "400" {
		t.Fatalf("after the open call's settle the shared output window holds %s, want 400", v)
	}
	// Brought in once: a later reservation adds only its own output.
	if _, w := l.Submit(clock.Now(), req("d", 100)); w != nil {
		t.Fatal("the fourth call waited")
	}
	if v := s.c.Get(ctx, s.base("p", "m")+"os").Val(); v != "500" {
		t.Fatalf("after a fourth call the shared output window holds %s, want 500", v)
	}
}
