package gate

import (
	"fmt"
	"testing"
	"time"
)

// grantOrder polls every waiter at now and returns the sessions granted, in the
// order the dispatcher granted them (their Waited ties; arrival order of grants is
// recorded through the ready channels' closing being observed in sequence).
func granted(ws []*Waiter) []string {
	var out []string
	for _, w := range ws {
		select {
		case <-w.Ready():
			out = append(out, w.req.Session+fmt.Sprint(w.arrival))
		default:
		}
	}
	return out
}

// fairGate: 1000 tokens, room for exactly one 1000-token call at a time.
func fairGate() Config {
	c := testGate()
	c.Defaults.RPM = 1000
	c.MaxWait = time.Hour // these tests wait several windows; failing open is tested elsewhere
	return c
}

func TestFairRoundRobinAcrossSessionsFIFOWithin(t *testing.T) {
	l, _, ev := newTestLedger(t, fairGate())
	var seq []string
	l.onEvent = func(e Event) {
		ev.add(e)
		if e.Kind == EventAdmitted {
			seq = append(seq, e.Session)
		}
	}
	first := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 900}) // fills the window
	// A queues three, then B and C one each.
	var ws []*Waiter
	for _, s := range []string{"A", "A", "A", "B", "C"} {
		_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: s, InputTokens: 900})
		if w == nil {
			t.Fatal("admitted")
		}
		ws = append(ws, w)
	}
	now := t0
	for i := 0; i < 5; i++ {
		now = now.Add(61 * time.Second) // each window lets exactly one through
		ws[0].Poll(now)
		_ = first
	}
	want := []string{"A", "B", "C", "A", "A"}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("grant order %v, want %v (round-robin across sessions, FIFO within)", seq, want)
	}
	// FIFO within A: its first waiter was granted first.
	for i, w := range []*Waiter{ws[0], ws[1], ws[2]} {
		tk, _ := w.Ticket()
		if want := time.Duration(61*(map[int]int{0: 1, 1: 4, 2: 5}[i])) * time.Second; tk.Waited != want {
			t.Fatalf("A's waiter %d waited %s, want %s", i, tk.Waited, want)
		}
	}
}

func TestFairInteractiveBeforeBatch(t *testing.T) {
	l, _, _ := newTestLedger(t, fairGate())
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 900})
	_, batch := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 900, Priority: PriorityBatch})
	_, inter := l.Submit(t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "i", InputTokens: 900})
	inter.Poll(t0.Add(61 * time.Second))
	if _, ok := inter.Ticket(); !ok {
		t.Fatal("interactive not granted first")
	}
	if _, ok := batch.Ticket(); ok {
		t.Fatal("batch granted before interactive")
	}
}

func TestFairEveryWaiterThatFitsIsAdmitted(t *testing.T) {
	l, _, _ := newTestLedger(t, fairGate())
	big := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 900})
	var ws []*Waiter
	for i := 0; i < 6; i++ { // six calls of 150 each; 4 fit once the big one is refunded
		_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: fmt.Sprint("s", i), InputTokens: 50})
		ws = append(ws, w)
	}
	// the big call used only 300: the refund (700) lets four 150s in at once, and
	// only those four are woken — no thundering herd
	l.Settle(t0.Add(time.Second), big, Usage{InputTokens: 300})
	if got := granted(ws); len(got) != 4 {
		t.Fatalf("granted %v, want exactly four", got)
	}
}

func TestFairNoHeadOfLineBlockingButNoStarvation(t *testing.T) {
	l, _, _ := newTestLedger(t, fairGate())
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 500}) // 600
	// a huge context waits for the window …
	_, huge := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "huge", InputTokens: 800})
	if huge == nil {
		t.Fatal("huge admitted")
	}
	// … but small requests of another session go past it meanwhile
	small := mustAdmitOrQueued(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "small", InputTokens: 50})
	if !small {
		t.Fatal("a small request was blocked behind the huge one before it waited half a window")
	}
	// Once the huge one has waited half a window, it holds everyone behind it.
	if _, ok := huge.Poll(t0.Add(30 * time.Second)); ok {
		t.Fatal("huge fits too early")
	}
	if mustAdmitOrQueued(t, l, t0.Add(31*time.Second), Request{Provider: "p", Model: "m", Session: "small", InputTokens: 50}) {
		t.Fatal("small request overtook a waiter that waited half a window: starvation possible")
	}
	if tk, ok := huge.Poll(t0.Add(61 * time.Second)); !ok || tk.Waited != 61*time.Second {
		t.Fatalf("huge %+v %v", tk, ok)
	}
}

func mustAdmitOrQueued(t *testing.T, l *Ledger, now time.Time, r Request) bool {
	t.Helper()
	_, w := l.Submit(now, r)
	return w == nil
}

func TestFairPerSessionInFlightCap(t *testing.T) {
	c := fairGate()
	c.MaxInFlightPerSession = 1
	l, _, _ := newTestLedger(t, c)
	a := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "A", InputTokens: 10})
	_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "A", InputTokens: 10})
	if w == nil || w.reason != "session-cap" {
		t.Fatalf("second call of A: %+v, want a session-cap wait", w)
	}
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "B", InputTokens: 10}) // another session is free
	l.Settle(t0.Add(2*time.Second), a, Usage{InputTokens: 10})
	if tk, ok := w.Ticket(); !ok || tk.Waited != 2*time.Second {
		t.Fatalf("A's second call %+v %v: want granted by the settlement", tk, ok)
	}
}

// A waiter queued behind one that holds the queue (it waited half a window) still
// fails open at its own maxWait deadline: holding the queue must not stretch
// another call's wait past maxWait.
func TestFairHeldQueueKeepsMaxWait(t *testing.T) {
	cases := []struct {
		name     string
		behind   Request // queued first, sorted behind the holder
		behindAt time.Duration
	}{
		{"batch behind an interactive holder", Request{Provider: "p", Model: "m", Session: "b", InputTokens: 50, Priority: PriorityBatch}, 0},
		{"a later round behind the holder", Request{Provider: "p", Model: "m", Session: "i", InputTokens: 50}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// maxWait 120s, window 60s; the window holds 900 of 1000
			l, _, ev := newTestLedger(t, testGate())
			mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 800})
			if tc.behind.Session == "i" {
				// session i queues two: its second one sorts behind the holder of session h
				if _, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "i", InputTokens: 50}); w == nil {
					t.Fatal("admitted")
				}
			}
			_, behind := l.Submit(t0.Add(tc.behindAt), tc.behind)
			_, holder := l.Submit(t0.Add(10*time.Second), Request{Provider: "p", Model: "m", Session: "h", InputTokens: 50})
			if behind == nil || holder == nil {
				t.Fatal("admitted")
			}
			// a cooldown past everyone's deadline: nobody fits before failing open
			l.RateLimited(t0.Add(20*time.Second), "p", "m", 180*time.Second)
			holder.Poll(t0.Add(40 * time.Second)) // the holder has waited half a window
			if got := behind.Next(); got.After(t0.Add(tc.behindAt + 120*time.Second)) {
				t.Fatalf("next poll at %s, after the maxWait deadline %s", got.Sub(t0), tc.behindAt+120*time.Second)
			}
			tk, ok := behind.Poll(t0.Add(tc.behindAt + 120*time.Second))
			if !ok || !tk.FailOpen || tk.Waited != 120*time.Second {
				t.Fatalf("ticket %+v ok=%v: want a fail-open grant at its 120s deadline", tk, ok)
			}
			if len(ev.kinds(EventFailOpen)) == 0 {
				t.Fatal("no fail-open warning")
			}
		})
	}
}

// A waiter held back only by its own session's in-flight cap does not hold the
// queue once it has waited half a window: capacity is free, and only its own
// session's settlement can let it through.
func TestFairSessionCapDoesNotHoldTheQueue(t *testing.T) {
	cases := []struct {
		name  string
		other Request
	}{
		{"another session", Request{Provider: "p", Model: "m", Session: "B", InputTokens: 10}},
		{"another session, batch", Request{Provider: "p", Model: "m", Session: "C", InputTokens: 10, Priority: PriorityBatch}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fairGate()
			c.MaxInFlightPerSession = 1
			l, _, _ := newTestLedger(t, c)
			a := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "A", InputTokens: 10}) // a long stream
			_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "A", InputTokens: 10})
			if w == nil || w.Reason() != "session-cap" {
				t.Fatalf("A's second call: %+v, want a session-cap wait", w)
			}
			w.Poll(t0.Add(31 * time.Second)) // it has waited half a window
			if tk, wb := l.Submit(t0.Add(31*time.Second), tc.other); wb != nil {
				t.Fatalf("%s waits (%s until %s) behind a session-capped call with the window empty", tc.other.Session, wb.Reason(), wb.Next().Sub(t0))
			} else if tk.Waited != 0 {
				t.Fatalf("ticket %+v", tk)
			}
			if err := l.Settle(t0.Add(40*time.Second), a, Usage{InputTokens: 10}); err != nil {
				t.Fatal(err)
			}
			if tk, ok := w.Ticket(); !ok || tk.Waited != 40*time.Second {
				t.Fatalf("A's second call %+v %v: want granted by the settlement", tk, ok)
			}
		})
	}
}
