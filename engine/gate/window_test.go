package gate

import (
	"testing"
	"time"
)

// An entry that holds a settled call's output alone (addOutput) is tokens in
// the window, not a request: the request count, the time until a request
// leaves and the requests admitted after a time skip it, and it leaves the
// window like any entry.
func TestWindowOutputEntriesAreNotRequests(t *testing.T) {
	w := newSlidingWindow(time.Minute)
	w.addOutput(t0, 200)
	w.add(t0.Add(10*time.Second), 100, 0, false)
	w.addOutput(t0.Add(15*time.Second), 300)
	w.add(t0.Add(20*time.Second), 100, 0, false)
	now := t0.Add(30 * time.Second)
	w.expire(now)
	if w.tokens != 700 || w.requests() != 2 {
		t.Fatalf("%d tokens, %d requests; want 700 and 2", w.tokens, w.requests())
	}
	if got := w.requestsAfter(t0.Add(5 * time.Second).UnixNano()); got != 2 {
		t.Fatalf("requests after 5 s: %d, want 2", got)
	}
	// one more fits under a budget of 2 once the call at 10 s leaves, at 70 s
	if got := w.requestDrain(now, 2); got != 40*time.Second {
		t.Fatalf("request drain %s, want 40s", got)
	}
	if d, _ := w.tokenDrain(now, 500, 1000); d != 30*time.Second {
		t.Fatalf("token drain %s, want 30s: the output at 0 s leaves at 60 s", d)
	}
	w.expire(t0.Add(61 * time.Second))
	if w.tokens != 500 || w.requests() != 2 || w.outputs != 1 {
		t.Fatalf("at 61 s: %d tokens, %d requests, %d output entries; want 500, 2, 1", w.tokens, w.requests(), w.outputs)
	}
}

// A wall clock stepped back (an NTP step, a date set by hand) leaves the calls
// of the window stamped in the new clock's future. Kept so, they would leave
// the window only when the clock caught up — a drain wait as long as the step,
// and past maxWait every call failed open: no gate at all for the step and a
// window. The window keeps its entries' ages against the new clock instead.
func TestClockSteppedBackKeepsTheWindowsAges(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	at := t0.Add(30 * time.Second)
	for range 5 {
		mustAdmit(t, l, at, req(100)) // 200 each with the reserve: the window is full
	}
	back := at.Add(-5 * time.Minute) // the clock steps back five minutes
	tk, w := l.Submit(back, req(100))
	if w == nil {
		t.Fatalf("admitted (fail open %v) after the clock stepped back, want a wait for the window", tk.FailOpen)
	}
	if w.reason != "tpm" || w.Next().Sub(back) != time.Minute {
		t.Fatalf("waits %s until %s after the step, want tpm for the window's minute", w.reason, w.Next().Sub(back))
	}
	// And the calls leave a window after they were admitted, in the new clock.
	mustAdmit(t, l, back.Add(time.Minute), req(100))
}

// With the system clock's monotonic reading the gate tells a step of the wall
// clock from a caller whose now was read a while before it got the lock: the
// second call here was read two seconds before the first (both clocks moved
// alike), is no step, and is stamped with the first; a wall-only rule would
// have moved the first call two seconds back, out of the window early.
func TestLateNowIsNoClockStep(t *testing.T) {
	base := time.Now() // carries a monotonic reading, as the server's clock does
	l, _, _ := newTestLedger(t, testGate())
	mustAdmit(t, l, base.Add(10*time.Second), req(300))
	mustAdmit(t, l, base.Add(8*time.Second), req(300))
	if got := l.BucketStatus(base.Add(69*time.Second), "p", "m"); got.WindowTokens != 800 {
		t.Fatalf("window %d at +69s, want 800 (both stamped at +10s)", got.WindowTokens)
	}
	if got := l.BucketStatus(base.Add(70*time.Second), "p", "m"); got.WindowTokens != 0 {
		t.Fatalf("window %d at +70s, want 0", got.WindowTokens)
	}
}
