package gate

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestMaxWaitGrantsAreSpread: twenty sessions queue together behind a
// cooldown that a second 429 lengthens past their maxWait (120 s). Each fails
// open at its own point of the last Config.Jitter (10%) of maxWait — between
// 108 and 120 s, never later — not all in the one dispatch at 120 s, which
// let the whole burst through into a window the gate held full. Without
// jitter, they all go at 120 s, as before. A wait that ends within maxWait —
// a cooldown of 115 s — is waited out: the spread moves only the grants
// maxWait forces.
func TestMaxWaitGrantsAreSpread(t *testing.T) {
	for _, tc := range []struct {
		name     string
		jitter   float64
		cooldown time.Duration // from the start
		within   bool          // it ends within maxWait; else lengthened to 350 s at 50 s
	}{{"spread", 0.1, 100 * time.Second, false}, {"no jitter", 0, 100 * time.Second, false}, {"within maxWait", 0.1, 115 * time.Second, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Jitter = tc.jitter
			c.OutputReserveTokens = 20 // twenty calls of 30 fit the window's 1,000 tokens
			c.Defaults.RPM = 100
			l, _, _ := newTestLedger(t, c)
			l.RateLimited(t0, "p", "m", tc.cooldown)
			var ws []*Waiter
			for i := range 20 {
				_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprintf("session-%d", i), InputTokens: 10})
				if w == nil {
					t.Fatalf("call %d admitted in the cooldown", i)
				}
				ws = append(ws, w)
			}
			within := tc.within
			if !within {
				l.RateLimited(t0.Add(50*time.Second), "p", "m", 300*time.Second)
			}
			var at []time.Duration
			seen := make([]bool, len(ws))
			for now := t0.Add(100 * time.Second); len(at) < len(ws) && now.Before(t0.Add(130*time.Second)); now = now.Add(100 * time.Millisecond) {
				for i, w := range ws { // each waiter's own look, as its caller's timer runs it
					if !seen[i] {
						w.Poll(now)
					}
				}
				for i, w := range ws {
					tk, ok := w.Ticket()
					if !ok || seen[i] {
						continue
					}
					if failOpen := tk.FailOpen && tk.Reason == "max-wait"; failOpen == within {
						t.Fatalf("at %s granted %+v, want a max-wait fail-open: %v", now.Sub(t0), tk, !within)
					}
					seen[i] = true
					at = append(at, now.Sub(t0))
				}
			}
			if len(at) != len(ws) {
				t.Fatalf("%d of %d granted by 130 s", len(at), len(ws))
			}
			slices.Sort(at)
			first, last := at[0], at[len(at)-1]
			if within {
				if first != tc.cooldown || last != tc.cooldown {
					t.Fatalf("granted from %s to %s, want all as the cooldown ends", first, last)
				}
				return
			}
			if tc.jitter == 0 {
				if first != 120*time.Second || last != 120*time.Second {
					t.Fatalf("granted from %s to %s, want all at maxWait", first, last)
				}
				return
			}
			perSecond := map[time.Duration]int{}
			for _, a := range at {
				perSecond[a.Truncate(time.Second)]++
			}
			most := 0
			for _, n := range perSecond {
				most = max(most, n)
			}
			if first < 108*time.Second || last > 120*time.Second || last-first < 8*time.Second || most > 5 {
				t.Fatalf("granted at %v (at most %d in one second), want spread over [108 s, 120 s]", at, most)
			}
		})
	}
}

// TestMaxWaitForcesOnlyAtTheWaitersOwnLook: four waiters whose waits run past
// maxWait and whose points of its last tenth have all passed. A dispatch run
// by the look of one forces that one only: another is forced at its own look,
// a gap after the last forced grant, or by anyone's at its hard deadline.
// Forced by whichever dispatch came first, every waiter whose point had passed
// went together (over real sockets, a cohort of 7–19 refused at the provider).
func TestMaxWaitForcesOnlyAtTheWaitersOwnLook(t *testing.T) {
	c := testGate()
	c.Jitter = 0.1
	l, _, _ := newTestLedger(t, c)
	l.RateLimited(t0, "p", "m", 100*time.Second)
	var ws []*Waiter
	for i := range 4 {
		_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprintf("s%d", i), InputTokens: 10})
		if w == nil {
			t.Fatal("admitted in the cooldown")
		}
		ws = append(ws, w)
	}
	l.RateLimited(t0.Add(50*time.Second), "p", "m", 300*time.Second) // every wait now runs past maxWait (120 s)
	point := func(w *Waiter) time.Time {
		w.b.mu.Lock()
		defer w.b.mu.Unlock()
		spread, _ := w.b.deadlineLocked(w)
		return spread
	}
	slices.SortFunc(ws, func(a, b *Waiter) int { return point(a).Compare(point(b)) })
	hard := t0.Add(120 * time.Second)
	at := point(ws[1]) // the first two points passed, not the deadline
	if !at.Add(120 * time.Millisecond).Before(hard) {
		t.Fatalf("the sessions' points %s, %s leave no room for the gap before the deadline", point(ws[0]).Sub(t0), at.Sub(t0))
	}
	if tk, ok := ws[0].Poll(at); !ok || !tk.FailOpen {
		t.Fatalf("the looking waiter at %s: %+v, %v; want forced", at.Sub(t0), tk, ok)
	}
	for i, w := range ws[1:] {
		if _, ok := w.Ticket(); ok {
			t.Fatalf("waiter %d was forced by another's look", i+1)
		}
	}
	// Its own look, at the instant of the other's forced grant: a gap later
	// (a thousandth of maxWait, no 429 measured).
	if _, ok := ws[1].Poll(at); ok || ws[1].Next() != at.Add(120*time.Millisecond) {
		t.Fatalf("at its own look, with the other forced at that instant: granted %v, next look at %s; want it 120 ms later", ok, ws[1].Next().Sub(t0))
	}
	if tk, ok := ws[1].Poll(at.Add(120 * time.Millisecond)); !ok || !tk.FailOpen {
		t.Fatalf("a gap later: %+v, %v; want forced", tk, ok)
	}
	// The gap never moves a look past the deadline, where any dispatch
	// forces a waiter.
	near := hard.Add(-50 * time.Millisecond)
	if _, ok := ws[2].Poll(near); ok && ws[3].Next().After(hard) {
		t.Fatalf("next look at %s, past the deadline", ws[3].Next().Sub(t0))
	}
	if _, ok := ws[3].Poll(near); ok || ws[3].Next() != hard {
		t.Fatalf("in the gap 50 ms before the deadline: granted %v, next look at %s; want the deadline", ok, ws[3].Next().Sub(t0))
	}
	ws[2].Poll(hard)
	if _, ok := ws[3].Ticket(); !ok {
		t.Fatal("a waiter at its hard deadline was not forced by another's look")
	}
}
