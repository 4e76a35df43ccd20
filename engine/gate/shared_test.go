package gate

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// sharedLedger is a ledger on cfg with st as its shared window, on a fake
// clock at t0.
func sharedLedger(t *testing.T, cfg Config, st SharedWindow) (*Ledger, *engine.FakeClock) {
	t.Helper()
	clk := engine.NewFakeClock(t0)
	l, err := NewLedger(cfg, clk, WithSharedWindow(st))
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// downStore is a shared window that is down (failing open) until up is set,
// and records what it is written back.
type downStore struct {
	nopShared // Settle, Cooldown, Available
	up        bool
	opened    int
	written   []SharedCall
}

var errDown = errors.New("down")

func (s *downStore) Reserve(r SharedReserve) (SharedGrant, error) {
	if !s.up {
		return SharedGrant{}, errDown
	}
	s.opened++
	return SharedGrant{ID: "e"}, nil
}
func (s *downStore) WriteBack(_, _ string, _ time.Time, _ time.Duration, calls []SharedCall) (int, error) {
	if !s.up {
		return 0, errDown
	}
	s.written = append(s.written, calls...)
	return len(calls), nil
}

// What a model keeps for the write-back through an outage is bounded, and
// only what the provider still counts is written: the calls of the last
// window, closed or open, once.
func TestWriteBackAloneBoundedToTheWindow(t *testing.T) {
	cfg := testGate()
	cfg.Defaults = ModelLimits{TPM: 1 << 40, RPM: 1 << 30}
	st := &downStore{}
	l, clk := sharedLedger(t, cfg, st)
	r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10}
	now := t0
	for i := range 3 * maxAloneCalls {
		if i == 2*maxAloneCalls {
			now = now.Add(2 * cfg.Window) // the calls before leave the window
		}
		tk := mustAdmit(t, l, now, r)
		if err := l.Settle(now, tk, Usage{InputTokens: 10, OutputTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	open := mustAdmit(t, l, now, r)
	b := open.b
	if n := len(b.alone); n > maxAloneCalls {
		t.Fatalf("%d closed calls kept for the write-back, want at most %d", n, maxAloneCalls)
	}
	clk.Set(now)
	l.WriteBackAlone() // still down: nothing is lost
	if len(b.alone) == 0 || !b.slots[open.slot].alone {
		t.Fatal("a write-back that failed dropped what it had to write")
	}
	st.up = true
	l.WriteBackAlone()
	if len(st.written) != maxAloneCalls || st.opened != 1 {
		t.Fatalf("written back: %d closed calls and %d open, want the last window's %d closed and 1 open",
			len(st.written), st.opened, maxAloneCalls)
	}
	for _, c := range st.written {
		if c.At.Before(now) || c.Tokens != 15 {
			t.Fatalf("written back %+v: a call from before the window, or not at what it cost (15)", c)
		}
	}
	l.WriteBackAlone()
	if len(st.written) != maxAloneCalls || st.opened != 1 {
		t.Fatal("a second write-back wrote again")
	}
}

// holdingStore is a failClosed shared window that does not answer until up:
// its Reserve errors wrap ErrStoreHolds; Available stays nil (the store's
// grace before it refuses). asked counts the Reserve calls.
type holdingStore struct {
	nopShared
	up    bool
	asked int
}

func (s *holdingStore) Reserve(SharedReserve) (SharedGrant, error) {
	s.asked++
	if !s.up {
		return SharedGrant{}, errors.Join(ErrStoreHolds, errDown)
	}
	return SharedGrant{ID: "e"}, nil
}

// A store that holds calls (failClosed, not answering) keeps every way to a
// grant shut — the window's, the one for a wait longer than maxWait, the one at
// maxWait — until it answers; then the calls go through it at once, not at
// their maxWait.
func TestStoreThatHoldsAdmitsNothingAlone(t *testing.T) {
	cfg := testGate()
	st := &holdingStore{}
	l, _ := sharedLedger(t, cfg, st)
	r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10}
	tk, w := l.Submit(t0, r)
	if w == nil {
		t.Fatalf("admitted %+v alone while the store holds calls", tk)
	}
	if w.Reason() != storeReason {
		t.Fatalf("held for %q, want %q", w.Reason(), storeReason)
	}
	// A cooldown longer than maxWait: such a call is admitted at once, failing
	// open — but not past a store that holds calls; once it answers, at once.
	q := Request{Provider: "p", Model: "q", Session: "s", InputTokens: 10}
	l.RateLimited(t0, "p", "q", 2*cfg.MaxWait)
	tk, wq := l.Submit(t0, q)
	if wq == nil {
		t.Fatalf("a wait past maxWait admitted %+v while the store holds calls", tk)
	}
	if tk, ok := wq.Poll(t0.Add(storeRetry / 2)); ok {
		t.Fatalf("granted %+v while the store holds calls", tk)
	}
	st.up = true
	if next := wq.Next(); next.After(t0.Add(storeRetry)) {
		t.Fatalf("the call past maxWait asks again at %v, want within %v: the store answers by then", next.Sub(t0), storeRetry)
	}
	if tk, ok := wq.Poll(t0.Add(storeRetry)); !ok || tk.Shared != "e" || !tk.FailOpen {
		t.Fatalf("call past maxWait once the store answers: granted=%v %+v, want the max-wait grant, through the store", ok, tk)
	}
	st.up = false
	now := t0.Add(cfg.MaxWait + time.Second) // the first call's maxWait passed
	if tk, ok := w.Poll(now); ok {
		t.Fatalf("granted %+v at maxWait while the store holds calls", tk)
	}
	st.up = true
	if tk, ok := w.Poll(now.Add(storeRetry)); !ok || tk.Shared != "e" {
		t.Fatalf("call at maxWait once the store answers: granted=%v %+v, want a grant through it", ok, tk)
	}
}

// While a failClosed store does not answer, a model asks it once per storeRetry,
// however many calls are queued: each dispatch pass runs over the whole queue,
// and each held call asking on each pass made the asking grow with the square
// of the queue, under the model's lock.
func TestStoreThatHoldsIsAskedOncePerRetry(t *testing.T) {
	st := &holdingStore{}
	l, _ := sharedLedger(t, testGate(), st)
	var held []*Waiter
	for i := range 100 {
		_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprint("s", i), InputTokens: 10})
		if w == nil {
			t.Fatal("admitted while the store holds calls")
		}
		held = append(held, w)
	}
	for _, w := range held {
		w.Poll(t0.Add(storeRetry))
	}
	if st.asked > 2 {
		t.Fatalf("the store was asked %d times for 100 calls over one retry, want at most 2", st.asked)
	}
}

// coolingStore is a shared window whose model cools down (another instance
// met the 429) until until: its Reserve refuses with reason cooldown.
type coolingStore struct {
	nopShared
	until time.Time
}

func (s *coolingStore) Reserve(r SharedReserve) (SharedGrant, error) {
	if !r.Force && r.Now.Before(s.until) {
		return SharedGrant{Wait: s.until.Sub(r.Now), Reason: "cooldown"}, nil
	}
	return SharedGrant{ID: "e"}, nil
}

// Another instance's cooldown reaches this one as the shared window's
// refusal; CooldownLeft counts it, as this instance's own.
func TestCooldownLeftOfAnotherInstance(t *testing.T) {
	st := &coolingStore{until: t0.Add(200 * time.Second)}
	l, _ := sharedLedger(t, testGate(), st)
	// Longer than maxWait: the gate fails the call open (the proxy sends no
	// such call: server/proxy_cooling.go).
	if tk, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10}); w != nil || !tk.FailOpen {
		t.Fatalf("%+v, %v: want a fail-open grant", tk, w)
	}
	if cd := l.CooldownLeft(t0.Add(10*time.Second), "p", "m"); cd != 190*time.Second {
		t.Fatalf("CooldownLeft %s, want the shared cooldown's 190s", cd)
	}
}

// switchingStore is a shared window whose model cools down until until
// (another instance met the 429); with down set it fails (failOpen: the
// instance decides alone). asked counts the Reserve calls that were not forced.
type switchingStore struct {
	nopShared
	until time.Time
	down  bool
	asked int
}

func (s *switchingStore) Reserve(r SharedReserve) (SharedGrant, error) {
	if s.down {
		return SharedGrant{}, errDown
	}
	if !r.Force {
		s.asked++
	}
	if !r.Force && r.Now.Before(s.until) {
		return SharedGrant{Wait: s.until.Sub(r.Now), Reason: "cooldown"}, nil
	}
	return SharedGrant{ID: "e"}, nil
}

// Another instance's cooldown, once the shared window answered it, holds every
// call of the model until it ends, whatever its size: a cooldown is the
// provider's pause, not a window too full for one call. Neither a release
// notification (another instance's call settled: room came back, the pause
// did not end) nor a store that fails open afterwards lets a call into it, and
// the calls held ask the store nothing more until it ends.
func TestAnotherInstancesCooldownHoldsEveryCall(t *testing.T) {
	until := t0.Add(30 * time.Second) // within maxWait: the calls wait it out
	st := &switchingStore{until: until}
	l, _ := sharedLedger(t, testGate(), st)
	big := Request{Provider: "p", Model: "m", Session: "a", InputTokens: 500}
	if tk, w := l.Submit(t0, big); w == nil {
		t.Fatalf("admitted %+v into another instance's cooldown", tk)
	}
	asked := st.asked
	// A smaller call: held by the cooldown known, without asking again.
	small := Request{Provider: "p", Model: "m", Session: "b", InputTokens: 10}
	tk, w := l.Submit(t0.Add(time.Second), small)
	if w == nil {
		t.Fatalf("a smaller call admitted %+v into another instance's cooldown", tk)
	}
	if st.asked != asked {
		t.Fatalf("the store was asked %d more times during a cooldown it answered", st.asked-asked)
	}
	// Another instance's call settles: a release, not the pause's end.
	l.SharedReleased("p", "m")
	if st.asked != asked {
		t.Fatalf("a release during the cooldown had the store asked %d more times", st.asked-asked)
	}
	if cd := l.CooldownLeft(t0.Add(2*time.Second), "p", "m"); cd != 28*time.Second {
		t.Fatalf("CooldownLeft %s after a release, want the shared cooldown's 28s", cd)
	}
	// The store fails (failOpen): the cooldown known still holds, through a
	// release too.
	st.down = true
	l.SharedReleased("p", "m")
	if tk, ok := w.Poll(t0.Add(3 * time.Second)); ok {
		t.Fatalf("granted %+v into the known cooldown with the store down", tk)
	}
	if tk, w2 := l.Submit(t0.Add(4*time.Second), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 5}); w2 == nil {
		t.Fatalf("a new call admitted %+v into the known cooldown with the store down", tk)
	}
	// At its end the calls go, the store still down: this instance alone.
	if tk, ok := w.Poll(until); !ok || tk.FailOpen {
		t.Fatalf("at the cooldown's end: granted=%v %+v, want a grant", ok, tk)
	}
}

// askingStore grants every call and says n instances ask for the model.
type askingStore struct {
	nopShared
	n int
}

func (s *askingStore) Reserve(SharedReserve) (SharedGrant, error) {
	return SharedGrant{ID: "e", Instances: s.n}, nil
}

// With a shared window each of the instances competing for a model paces at
// its share of the pace: the burst it lets through at once and the rate after.
func TestSharedPaceIsSplitAmongTheInstancesAsking(t *testing.T) {
	cfg := testGate()
	cfg.Defaults = ModelLimits{TPM: 100000, RPM: 10000}
	cfg.Pace, cfg.PaceBurst = 3, 0.1 // a burst of 10,000 tokens; 5,000 a second
	granted := func(n int) (atOnce, inThreeSeconds int) {
		l, _ := sharedLedger(t, cfg, &askingStore{n: n})
		var ws []*Waiter
		for i := range 40 {
			if _, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprint("s", i), InputTokens: 1000}); w != nil {
				ws = append(ws, w)
				continue
			}
			atOnce++
		}
		for _, w := range ws {
			if _, ok := w.Poll(t0.Add(3 * time.Second)); ok {
				inThreeSeconds++
			}
		}
		return atOnce, inThreeSeconds
	}
	// Each call reserves 1,100 tokens (its input and testGate's output
	// reserve of 100): alone, 9 at once and 13 in three seconds.
	alone, aloneNext := granted(1)
	three, threeNext := granted(3)
	t.Logf("granted at once and within the next three seconds: alone %d, %d; one of three %d, %d", alone, aloneNext, three, threeNext)
	if three*2 > alone || threeNext*2 > aloneNext || three == 0 || threeNext == 0 {
		t.Fatalf("one of three instances let %d through at once and %d in the next three seconds, alone %d and %d: want about a third", three, threeNext, alone, aloneNext)
	}
	// Never less than a budget a window: ten instances at a pace of 3 pace
	// at a third each, not a tenth — a busy one is not held under the limit.
	if ten, tenNext := granted(10); ten != three || tenNext != threeNext {
		t.Fatalf("one of ten instances let %d through at once and %d in the next three seconds, want %d and %d: a third of the pace", ten, tenNext, three, threeNext)
	}
}

// At a share of the pace, the longest pace wait is still a window ÷ pace: a
// large call takes the pacer no deeper than the share of the budget.
func TestSharedPaceWaitStaysWithinAWindowOverPace(t *testing.T) {
	cfg := testGate()
	cfg.Defaults = ModelLimits{TPM: 100000, RPM: 10000}
	cfg.Pace, cfg.PaceBurst = 3, 0.1
	l, _ := sharedLedger(t, cfg, &askingStore{n: 3})
	if _, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 100}); w != nil {
		t.Fatal("the first call waited")
	}
	at := t0.Add(time.Second) // the pacer full again, at its share
	if _, w := l.Submit(at, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 50000}); w != nil {
		t.Fatal("a call of half the budget waited on a full pacer")
	}
	_, w := l.Submit(at, Request{Provider: "p", Model: "m", Session: "c", InputTokens: 1000})
	if w == nil {
		t.Fatal("a call right after half the budget went unpaced")
	}
	if d, most := w.Next().Sub(at), cfg.Window/time.Duration(cfg.Pace); d > most {
		t.Fatalf("paced for %v, want at most a window ÷ pace, %v", d, most)
	}
}

// queuedStore refuses the first call it is asked for (tpm, a second) and
// grants the rest, recording whether each ask said calls were queued.
type queuedStore struct {
	nopShared
	queued []bool
}

func (s *queuedStore) Reserve(r SharedReserve) (SharedGrant, error) {
	s.queued = append(s.queued, r.Queued)
	if len(s.queued) == 1 {
		return SharedGrant{Wait: time.Second, Reason: "tpm"}, nil
	}
	return SharedGrant{ID: "e"}, nil
}

// An instance tells the shared window it competes for a model when it has
// calls queued: not for a call asked at once into an empty queue (a trickle
// granted at once does not slow the others' pace), but for one its queue
// asks for.
func TestSharedReserveSaysWhenCallsAreQueued(t *testing.T) {
	st := &queuedStore{}
	l, _ := sharedLedger(t, testGate(), st)
	_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10})
	if w == nil {
		t.Fatal("the first call was not refused")
	}
	if _, ok := w.Poll(t0.Add(time.Second)); !ok {
		t.Fatal("the queued call was not granted when the store let it")
	}
	if len(st.queued) != 2 || st.queued[0] || !st.queued[1] {
		t.Fatalf("asked with queued %v, want [false true]: the empty queue's call, then the queued one", st.queued)
	}
}
