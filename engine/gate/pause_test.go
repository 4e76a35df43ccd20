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
