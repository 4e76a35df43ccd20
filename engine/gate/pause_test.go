package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// TestQueuedCallsRefusedInALongPause: calls queue behind a 100 s cooldown; at
// 50 s a second 429 lengthens it. Without jitter the gate lets a call whose
// wait runs past maxWait through at its deadline, 120 s. There:
//   - a caller that sits a pause out (PauseSitOut, the proxy) refuses the call
//     when more than maxWait of the pause is left: a pause to 350 s;
//   - a caller that never sends into a pause (PauseAnswer, the decision API)
//     refuses it when any is left: a pause to 130 s too;
//
// and the gate refuses such a call at once, with the pause's end, nothing
// queued or granted. A call that is sent (PauseSend) is let through at its
// deadline as before; a pause that ends by the deadline (115 s) refuses
// nothing. A provider-wide 429 refuses its models' calls.
func TestQueuedCallsRefusedInALongPause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		model   string        // the second 429's model ("": provider-wide)
		end     time.Duration // the pause's end after it
		refused []PausePolicy // the policies refused at 50 s
	}{
		{"long pause", "m", 350 * time.Second, []PausePolicy{PauseSitOut, PauseAnswer}},
		{"provider-wide", "", 350 * time.Second, []PausePolicy{PauseSitOut, PauseAnswer}},
		{"sat out", "m", 240 * time.Second, []PausePolicy{PauseAnswer}}, // maxWait after the deadline
		{"past the deadline", "m", 130 * time.Second, []PausePolicy{PauseAnswer}},
		{"by the deadline", "m", 115 * time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Jitter = 0
			l, _, _ := newTestLedger(t, c)
			l.RateLimited(t0, "p", "m", 100*time.Second)
			policies := []PausePolicy{PauseSend, PauseSitOut, PauseAnswer, PauseSend, PauseSitOut, PauseAnswer}
			var ws []*Waiter
			for i, p := range policies {
				r := Request{Provider: "p", Model: "m", Session: fmt.Sprintf("s%d", i), InputTokens: 10, Pause: p}
				if _, w := l.Submit(t0, r); w == nil {
					t.Fatalf("call %d admitted in the cooldown", i)
				} else {
					ws = append(ws, w)
				}
			}
			at := t0.Add(50 * time.Second)
			l.RateLimitedBy(at, "p", tc.model, engine.RateLimit{RetryAfter: tc.end - 50*time.Second})
			queued := 0
			for i, w := range ws {
				until, refused := w.Refused()
				if want := slices.Contains(tc.refused, policies[i]); refused != want {
					t.Fatalf("call %d (policy %d): refused %v at 50 s, want %v", i, policies[i], refused, want)
				}
				if !refused {
					queued++
					continue
				}
				if got := until.Sub(t0); got != tc.end {
					t.Errorf("call %d refused until %s, want the pause's end %s", i, got, tc.end)
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
			if st := l.BucketStatus(at, "p", "m"); st.Waiting != queued {
				t.Errorf("%d queued after the second 429, want %d", st.Waiting, queued)
			}
			if tc.end <= 120*time.Second {
				return // the calls wait the pause out, as any wait
			}
			// The calls left fail open at their deadline, as before.
			ws[0].Poll(t0.Add(120 * time.Second)) // the deadline: any look forces them all
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
	r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 10, Pause: PauseSitOut}
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
// a 100 s cooldown that a second 429, 50 s in, lengthens; the gate spreads
// their maxWait fail-opens over 108–120 s (jitter 0.1), each at its own look.
// Asked with PauseSend, each is let through at its point, where its caller
// finds the pause still on. Asked with the caller's policy, the gate refuses
// at once only calls the caller would refuse there — more of the pause left
// than it sits out (maxWait for PauseSitOut, nothing for PauseAnswer) — and
// it reads the deadline, the latest point, so a pause ending at 235 s refuses
// none for PauseSitOut (some would be refused at their point, with 115–127 s
// left, and are answered there) and one ending at 250 s all.
func TestPauseRefusesWhatTheCallerWouldAtItsFailOpen(t *testing.T) {
	const n = 12
	run := func(p PausePolicy, end time.Duration) (*Ledger, []*Waiter) {
		c := testGate()
		c.Jitter = 0.1
		c.Defaults.RPM = 100
		l, _, _ := newTestLedger(t, c)
		l.RateLimited(t0, "p", "m", 100*time.Second)
		var ws []*Waiter
		for i := range n {
			_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprintf("s%d", i), InputTokens: 10, Pause: p})
			ws = append(ws, w)
		}
		l.RateLimited(t0.Add(50*time.Second), "p", "m", end-50*time.Second)
		return l, ws
	}
	for _, tc := range []struct {
		policy  PausePolicy
		end     time.Duration
		refused int // of n, at 50 s
	}{
		{PauseSitOut, 235 * time.Second, 0},
		{PauseSitOut, 250 * time.Second, n},
		{PauseAnswer, 235 * time.Second, n},
		{PauseAnswer, 115 * time.Second, 0}, // ends within maxWait: waited out
	} {
		plain, pws := run(PauseSend, tc.end)
		left, seen := make([]time.Duration, n), make([]bool, n) // the pause left where each is let through
		for now := t0.Add(100 * time.Second); !now.After(t0.Add(120 * time.Second)); now = now.Add(10 * time.Millisecond) {
			for i, w := range pws { // each waiter's own look, as its caller's timer runs it
				if seen[i] {
					continue
				}
				if tk, ok := w.Poll(now); ok {
					seen[i] = true
					left[i] = plain.CooldownLeft(now, "p", "m")
					_ = plain.Release(now, tk)
				}
			}
		}
		sitsOut := time.Duration(0)
		if tc.policy == PauseSitOut {
			sitsOut = plain.Config().MaxWait
		}
		callerRefuses := 0
		for i := range seen {
			if !seen[i] {
				t.Fatalf("end %s: session %d not let through by 120 s", tc.end, i)
			}
			if left[i] > sitsOut {
				callerRefuses++
			}
		}
		_, ws := run(tc.policy, tc.end)
		refused := 0
		for i, w := range ws {
			_, ok := w.Refused()
			if ok && left[i] <= sitsOut {
				t.Errorf("policy %d, end %s, session %d: refused at 50 s, but its caller, with %s of the pause left where it is let through, would not refuse it", tc.policy, tc.end, i, left[i])
			}
			if ok {
				refused++
			}
		}
		if refused != tc.refused {
			t.Errorf("policy %d, end %s: %d refused at 50 s, want %d (its caller refuses %d where they are let through)", tc.policy, tc.end, refused, tc.refused, callerRefuses)
		}
		if tc.policy == PauseSitOut && tc.end == 235*time.Second && (callerRefuses == 0 || callerRefuses == n) {
			t.Errorf("end 235 s: the caller refuses %d of %d where they are let through: the case should hold both kinds", callerRefuses, n)
		}
	}
}

// TestRefusedWaiterHoldsNothing: a provider-wide pause another instance
// started (AdoptProviderCooldown) refuses the PauseSitOut calls queued before
// it at once, and leaves the others queued. A call submitted behind that queue
// is refused in the dispatch: no wait is counted or told of, and Cancel and
// Poll on it hold nothing.
func TestRefusedWaiterHoldsNothing(t *testing.T) {
	l, clk, ev := newTestLedger(t, testGate())
	l.RateLimited(t0, "p", "m", 30*time.Second)
	_, first := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 10, Pause: PauseSitOut})
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
		t.Fatal("a PauseSend call was refused")
	}
	waitsBefore := l.BucketStatus(clk.Now(), "p", "m").Waits
	told := len(ev.kinds(EventWait))
	_, w := l.Submit(clk.Now(), Request{Provider: "p", Model: "m", Session: "c", InputTokens: 10, Pause: PauseSitOut})
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
