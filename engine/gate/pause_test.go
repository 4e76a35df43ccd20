package gate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// TestQueuedCallsRefusedInALongPause: calls queue behind a 100 s cooldown; at
// 50 s a second 429 asks for 300 s more. A call whose caller sends nothing into
// the pause (NotIntoPause) would fail open at its maxWait deadline (120 s) with
// 230 s of the pause left, more than maxWait, and be refused by its caller
// then: the gate refuses it at once, with the pause's end, and nothing stays
// queued or granted. A call without it is failed open at its deadline as
// before. A pause its caller would sit out (ending within maxWait of the
// deadline) refuses nothing. A provider-wide 429 refuses its models' calls.
func TestQueuedCallsRefusedInALongPause(t *testing.T) {
	for _, tc := range []struct {
		name         string
		model        string        // the second 429's model ("": provider-wide)
		second       time.Duration // its Retry-After, at 50 s
		refused      bool          // the NotIntoPause calls are refused at 50 s
		wantPauseEnd time.Duration
	}{
		{"long pause", "m", 300 * time.Second, true, 350 * time.Second},
		{"provider-wide", "", 300 * time.Second, true, 350 * time.Second},
		{"sat out", "m", 190 * time.Second, false, 0}, // ends at 240 s: maxWait after the deadline
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Jitter = 0
			l, _, _ := newTestLedger(t, c)
			l.RateLimited(t0, "p", "m", 100*time.Second)
			var ws []*Waiter
			for i := range 6 {
				r := Request{Provider: "p", Model: "m", Session: fmt.Sprintf("s%d", i), InputTokens: 10, NotIntoPause: i%2 == 0}
				if _, w := l.Submit(t0, r); w == nil {
					t.Fatalf("call %d admitted in the cooldown", i)
				} else {
					ws = append(ws, w)
				}
			}
			at := t0.Add(50 * time.Second)
			l.RateLimitedBy(at, "p", tc.model, engine.RateLimit{RetryAfter: tc.second})
			for i, w := range ws {
				until, refused := w.Refused()
				want := tc.refused && i%2 == 0
				if refused != want {
					t.Fatalf("call %d (NotIntoPause %v): refused %v at 50 s, want %v", i, i%2 == 0, refused, want)
				}
				if !refused {
					continue
				}
				if got := until.Sub(t0); got != tc.wantPauseEnd {
					t.Errorf("call %d refused until %s, want the pause's end %s", i, got, tc.wantPauseEnd)
				}
				select {
				case <-w.Ready():
				default:
					t.Errorf("call %d refused, Ready not closed: its Admit would sleep on", i)
				}
				if _, ok := w.Ticket(); ok {
					t.Errorf("call %d refused and granted", i)
				}
			}
			want := 6
			if tc.refused {
				want = 3
			}
			if st := l.BucketStatus(at, "p", "m"); st.Waiting != want {
				t.Errorf("%d queued after the second 429, want %d", st.Waiting, want)
			}
			// The calls left fail open at their deadline, as before.
			ws[1].Poll(t0.Add(120 * time.Second))
			for i, w := range ws {
				if _, refused := w.Refused(); refused {
					continue
				}
				if tk, ok := w.Ticket(); !ok || !tk.FailOpen || tk.Reason != "max-wait" {
					t.Errorf("call %d at 120 s: %+v, %v; want a max-wait fail-open", i, tk, ok)
				}
			}
		})
	}
}

// TestAdmitRefusedInALongPause: Admit answers a call refused in the queue
// with a *PauseError (ErrLongPause) naming the pause's end and the wait, and
// a call submitted into a pause that outlasts its deadline by more than
// maxWait is refused at once.
func TestAdmitRefusedInALongPause(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	l.RateLimited(t0, "p", "m", 30*time.Second)
	r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10, NotIntoPause: true}
	// The context ends once the call is queued: not refused, Admit returns
	// its error rather than sleep on the fake clock.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := l.AdmitObserved(ctx, r, func(*Waiter) {
		clk.Advance(5 * time.Second)
		l.RateLimited(clk.Now(), "p", "m", 400*time.Second) // queued, and the pause grows
		cancel()
	})
	var pe *PauseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrLongPause) {
		t.Fatalf("Admit: %v, want a *PauseError", err)
	}
	if pe.Until != t0.Add(405*time.Second) || pe.Waited != 5*time.Second {
		t.Errorf("PauseError %+v: want the pause's end at 405 s after a 5 s wait", pe)
	}
	if st := l.BucketStatus(clk.Now(), "p", "m"); st.Waiting != 0 || st.InFlight != 0 {
		t.Errorf("after the refusal: %d queued, %d in flight; want nothing held", st.Waiting, st.InFlight)
	}
	_, w := l.Submit(clk.Now(), r)
	if w == nil {
		t.Fatal("admitted into the pause")
	}
	if until, ok := w.Refused(); !ok || until != t0.Add(405*time.Second) {
		t.Errorf("submitted 400 s before the pause ends: refused %v until %s", ok, until.Sub(t0))
	}
}

// TestPauseRefusesWhatTheCallerWouldAtItsFailOpen: twelve sessions queue behind
// a 100 s cooldown that a second 429, 50 s in, lengthens to end at 235 s; the
// gate spreads their maxWait fail-opens over 108–120 s (jitter 0.1). Asked
// without NotIntoPause, each is let through at its own point, where its
// caller finds the pause still on: more than maxWait of it left for some (the
// caller answers them), less for others (the caller sits it out). Asked with
// NotIntoPause, the gate refuses exactly the first kind, when the 429 comes.
func TestPauseRefusesWhatTheCallerWouldAtItsFailOpen(t *testing.T) {
	const n = 12
	run := func(notIntoPause bool) (*Ledger, []*Waiter) {
		c := testGate()
		c.Jitter = 0.1
		c.Defaults.RPM = 100
		l, _, _ := newTestLedger(t, c)
		l.RateLimited(t0, "p", "m", 100*time.Second)
		var ws []*Waiter
		for i := range n {
			_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprintf("s%d", i), InputTokens: 10, NotIntoPause: notIntoPause})
			ws = append(ws, w)
		}
		l.RateLimited(t0.Add(50*time.Second), "p", "m", 185*time.Second)
		return l, ws
	}
	plain, pws := run(false)
	callerRefuses, seen := make([]bool, n), make([]bool, n)
	for now := t0.Add(100 * time.Second); !now.After(t0.Add(120 * time.Second)); now = now.Add(10 * time.Millisecond) {
		pws[0].Poll(now) // one dispatch a step, over the whole queue
		for i, w := range pws {
			if tk, ok := w.Ticket(); ok && !seen[i] {
				if !tk.FailOpen || tk.Reason != "max-wait" {
					t.Fatalf("session %d granted %+v at %s, want a max-wait fail-open", i, tk, now.Sub(t0))
				}
				seen[i] = true
				callerRefuses[i] = plain.CooldownLeft(now, "p", "m") > plain.Config().MaxWait
				_ = plain.Release(now, tk)
			}
		}
	}
	for i := range seen {
		if !seen[i] {
			t.Fatalf("session %d not let through by 120 s", i)
		}
	}
	_, ws := run(true)
	var refused, satOut int
	for i, w := range ws {
		_, ok := w.Refused()
		if ok != callerRefuses[i] {
			t.Errorf("session %d: refused %v at 50 s; its caller, at its fail-open, refuses it: %v", i, ok, callerRefuses[i])
		}
		if ok {
			refused++
		} else {
			satOut++
		}
	}
	if refused == 0 || satOut == 0 {
		t.Fatalf("%d refused, %d sat out: the case should hold both kinds", refused, satOut)
	}
}

// TestRefusedWaiterHoldsNothing: a provider-wide pause another instance
// started (AdoptProviderCooldown) refuses the NotIntoPause calls queued before
// it at once, and leaves the others queued. A call submitted behind that queue
// is refused in the dispatch: no wait is counted or told of, and Cancel and
// Poll on it hold nothing.
func TestRefusedWaiterHoldsNothing(t *testing.T) {
	l, clk, ev := newTestLedger(t, testGate())
	l.RateLimited(t0, "p", "m", 30*time.Second)
	_, first := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 10, NotIntoPause: true})
	_, plain := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 10}) // stays queued: not refused
	if first == nil || plain == nil {
		t.Fatal("admitted in the cooldown")
	}
	clk.Advance(5 * time.Second)
	l.AdoptProviderCooldown("p", t0.Add(400*time.Second))
	if until, ok := first.Refused(); !ok || until != t0.Add(400*time.Second) {
		t.Fatalf("queued call after another instance's provider-wide pause: refused %v until %s", ok, until.Sub(t0))
	}
	if _, ok := plain.Refused(); ok {
		t.Fatal("a call without NotIntoPause was refused")
	}
	waitsBefore := l.BucketStatus(clk.Now(), "p", "m").Waits
	told := len(ev.kinds(EventWait))
	_, w := l.Submit(clk.Now(), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, NotIntoPause: true})
	if _, ok := w.Refused(); !ok {
		t.Fatal("submitted behind a queue into the pause: not refused")
	}
	if len(ev.kinds(EventWait)) != told {
		t.Errorf("a refused call was told of as a wait: %+v", ev.kinds(EventWait)[told:])
	}
	if got := l.BucketStatus(clk.Now(), "p", "m").Waits; got != waitsBefore {
		t.Errorf("waits %d after a refused call, want %d", got, waitsBefore)
	}
	w.Cancel(clk.Now())
	if _, ok := w.Poll(clk.Now()); ok {
		t.Error("a refused waiter was granted")
	}
	plain.Cancel(clk.Now())
	if st := l.BucketStatus(clk.Now(), "p", "m"); st.Waiting != 0 || st.InFlight != 0 || st.Reserved != 0 {
		t.Errorf("after the refusals and a cancel: %+v", st)
	}
}
