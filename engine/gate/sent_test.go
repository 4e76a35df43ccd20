package gate

import (
	"testing"
	"time"
)

// A call written to the provider late after its admission is counted by the
// provider from then: the gate's window holds it from then too, and a later
// call waits until it leaves at that time, not at its admission's.
func TestSentLateHoldsTheEntryFromTheSend(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	// reservations of 400 (300 input + 100 reserve): 800 in the window.
	a := mustAdmit(t, l, t0, req(300))
	l.Sent(t0.Add(5*time.Second), a) // a left 5 s after its admission
	mustAdmit(t, l, t0.Add(10*time.Second), req(300))
	// 800 + 400 > 1000: a must leave, at t0+5s+60s now, not at t0+60s.
	w := mustWait(t, l, t0.Add(20*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 300}, "tpm", 65*time.Second)
	w.Cancel(t0.Add(20 * time.Second))
	// At t0+60s+1ms the admission's window would have let it go; it still waits.
	w = mustWait(t, l, t0.Add(60*time.Second+time.Millisecond), Request{Provider: "p", Model: "m", Session: "y", InputTokens: 300}, "tpm", 65*time.Second)
	w.Cancel(t0.Add(60*time.Second + time.Millisecond))
	if got := l.BucketStatus(t0.Add(61*time.Second), "p", "m"); got.WindowTokens != 800 || got.WindowRequests != 2 {
		t.Fatalf("window at t0+61s = %d tokens, %d requests; want 800 and 2 (a still counts, once)", got.WindowTokens, got.WindowRequests)
	}
	// A call of 700 needs both out: the later to leave is b, at t0+70s.
	w = mustWait(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", Session: "y", InputTokens: 600}, "tpm", 70*time.Second)
	w.Cancel(t0.Add(61 * time.Second))
	// a leaves with its send's window.
	mustAdmit(t, l, t0.Add(65*time.Second), Request{Provider: "p", Model: "m", Session: "z", InputTokens: 300})
}

// Only the call sent late moves: the calls admitted after it and sent on time
// leave at their own time, not held behind it (a window that held them would
// read more than the provider holds, and a 429 would read a limit above the
// truth).
func TestSentMovesTheEntryNotThoseAfterIt(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0, req(300))                  // 400
	b := mustAdmit(t, l, t0.Add(time.Second), req(300)) // 400, sent on time
	l.Sent(t0.Add(5*time.Second), a)
	// 800 + 400 > 1000: the first to leave is b, at t0+61s.
	w := mustWait(t, l, t0.Add(5*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 300}, "tpm", 61*time.Second)
	w.Cancel(t0.Add(5 * time.Second))
	if got := l.BucketStatus(t0.Add(62*time.Second), "p", "m"); got.WindowTokens != 400 || got.WindowRequests != 1 {
		t.Fatalf("window at t0+62s = %d tokens, %d requests; want a's 400 and 1", got.WindowTokens, got.WindowRequests)
	}
	// a is still the call its ticket settles, in its new place.
	if err := l.Settle(t0.Add(63*time.Second), a, Usage{InputTokens: 300, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(63*time.Second), "p", "m"); got.WindowTokens != 310 || got.InFlight != 1 {
		t.Fatalf("after a settled: %d tokens, %d in flight; want 310 and 1 (b)", got.WindowTokens, got.InFlight)
	}
	if err := l.Settle(t0.Add(63*time.Second), b, Usage{InputTokens: 300}); err != nil {
		t.Fatal(err) // b left the window: settled, counted nowhere
	}
	if got := l.BucketStatus(t0.Add(66*time.Second), "p", "m"); got.WindowTokens != 0 || got.WindowRequests != 0 {
		t.Fatalf("at t0+66s: %d tokens, %d requests; want an empty window", got.WindowTokens, got.WindowRequests)
	}
}

// The request budget counts a moved call once, and waits for the requests'
// own times.
func TestSentCountsARequestOnce(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 1_000_000, RPM: 4}
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(1))
	a := mustAdmit(t, l, t0.Add(time.Second), req(1))
	mustAdmit(t, l, t0.Add(2*time.Second), req(1))
	l.Sent(t0.Add(10*time.Second), a)
	mustAdmit(t, l, t0.Add(11*time.Second), req(1)) // 4 requests, not 5
	// The next waits for the oldest request: the first, at t0+60s.
	mustWait(t, l, t0.Add(12*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 1}, "rpm", 60*time.Second)
}

// The window's own reads skip the place a moved entry left: the drains, the
// requests after a time, the tail.
func TestRestampedWindowReads(t *testing.T) {
	w := newSlidingWindow(time.Minute)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.add(at(0), 100, 50, false)
	a := w.add(at(1), 200, 50, false)
	w.add(at(2), 300, 50, false)
	if got, _ := w.restamp(a, at(10).UnixNano()); got != a+2 {
		t.Fatalf("restamp moved a to %d, want %d (the end)", got, a+2)
	}
	w.expire(at(12))
	if w.requests() != 3 || w.tokens != 600 || w.openCount != 3 {
		t.Fatalf("requests %d tokens %d open %d, want 3, 600, 3", w.requests(), w.tokens, w.openCount)
	}
	// One more request under a budget of 2: two must leave, the first (t0) and
	// the third (t0+2s): t0+62s.
	if d := w.requestDrain(at(12), 2); d != 50*time.Second {
		t.Fatalf("requestDrain = %s, want 50s", d)
	}
	// 400 more under 600: 400 must leave: the first and the third, t0+62s.
	if d, _ := w.tokenDrain(at(12), 400, 600); d != 50*time.Second {
		t.Fatalf("tokenDrain = %s, want 50s", d)
	}
	if n := w.requestsAfter(at(0).UnixNano() - 1); n != 3 {
		t.Fatalf("requestsAfter(just before t0) = %d, want 3", n)
	}
	// A window of 60 s whose provider counts 50 s of it: at t0+55s the first
	// and the third are in the guard's tail, skipping a's old place.
	w.inner = 50 * time.Second
	w.expire(at(55))
	if w.tail() != 400 || w.tailAfter(at(1).UnixNano()) != 300 || w.tailAfter(at(-1).UnixNano()) != 400 {
		t.Fatalf("tail %d, after t0+1s %d, after t0-1s %d; want 400, 300 and 400", w.tail(), w.tailAfter(at(1).UnixNano()), w.tailAfter(at(-1).UnixNano()))
	}
	if !w.settle(a+2, 120) || w.tokens != 520 || w.openCount != 2 {
		t.Fatalf("settling a in its new place: tokens %d open %d, want 520 and 2", w.tokens, w.openCount)
	}
	w.expire(at(65))
	if w.requests() != 1 || w.tokens != 120 || w.n != 1 {
		t.Fatalf("at t0+65s: requests %d tokens %d entries %d, want a alone", w.requests(), w.tokens, w.n)
	}
}

// A send stamped before the admission (read a moment before another caller
// took the lock), or a ticket already closed or never issued, changes nothing,
// and Sent says so.
func TestSentThatCannotMoveAnEntry(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	a := mustAdmit(t, l, t0.Add(10*time.Second), req(300))
	if at := l.Sent(t0.Add(9500*time.Millisecond), a); !at.IsZero() { // before its admission: it keeps t0+10s
		t.Fatalf("a send before the admission moved the entry to %s", at.Sub(t0))
	}
	b := mustAdmit(t, l, t0.Add(20*time.Second), req(300))
	if err := l.Settle(t0.Add(21*time.Second), b, Usage{InputTokens: 300, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	c := mustAdmit(t, l, t0.Add(22*time.Second), req(100)) // reuses b's slot
	for _, tk := range []Ticket{b, {}} {                   // b's stale ticket; a ticket without a bucket
		if at := l.Sent(t0.Add(40*time.Second), tk); !at.IsZero() {
			t.Fatalf("Sent(%+v) moved an entry to %s", tk, at.Sub(t0))
		}
	}
	// 1000 - 400 (a) - 400 (b) - 200 (c) = 0. A call of 400 waits for a, at
	// t0+70s; a call of 1000 for all three, c last, at t0+82s — t0+100s had the
	// stale ticket moved c (or b) to t0+40s.
	w := mustWait(t, l, t0.Add(23*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 300}, "tpm", 70*time.Second)
	w.Cancel(t0.Add(23 * time.Second))
	mustWait(t, l, t0.Add(23*time.Second), Request{Provider: "p", Model: "m", Session: "y", InputTokens: 900}, "tpm", 82*time.Second)
	if at := l.Sent(t0.Add(24*time.Second), c); !at.Equal(t0.Add(24 * time.Second)) {
		t.Fatalf("c's own send: %s, want t0+24s", at.Sub(t0))
	}
}

// A call sent after its entry left the gate's window (a connection that took
// a whole window) is counted again from its send; one sent after its entry
// passed the provider's window into the count guard's tail leaves the tail.
func TestSentAfterTheEntryLeft(t *testing.T) {
	c := testGate()
	c.CountGuard = 0.02 // 1.2 s of tail at a minute's window
	l, _, _ := newTestLedger(t, c)
	a := mustAdmit(t, l, t0, req(300))
	l.Sent(t0.Add(62*time.Second), a) // past the window and its guard (61.2 s)
	if st := l.BucketStatus(t0.Add(100*time.Second), "p", "m"); st.WindowTokens != 400 || st.InFlight != 1 {
		t.Fatalf("at t0+100s: %d tokens, %d in flight; want a's 400 and 1", st.WindowTokens, st.InFlight)
	}
	if err := l.Settle(t0.Add(101*time.Second), a, Usage{InputTokens: 300, OutputTokens: 20}); err != nil {
		t.Fatal(err)
	}
	if st := l.BucketStatus(t0.Add(101*time.Second), "p", "m"); st.WindowTokens != 320 {
		t.Fatalf("settled in its new entry: %d tokens, want 320", st.WindowTokens)
	}

	b := mustAdmit(t, l, t0.Add(200*time.Second), req(300))
	mustAdmit(t, l, t0.Add(200*time.Second+time.Millisecond), req(300))
	bk := l.lockedBucketFor("p", "m", t0.Add(260*time.Second+500*time.Millisecond))
	bk.expireLocked(t0.Add(260*time.Second + 500*time.Millisecond))
	tail := bk.win.tail()
	bk.mu.Unlock()
	if tail != 800 {
		t.Fatalf("in the guard's tail: %d, want both calls' 800", tail)
	}
	l.Sent(t0.Add(260*time.Second+500*time.Millisecond), b)
	bk = l.lockedBucketFor("p", "m", t0.Add(260*time.Second+500*time.Millisecond))
	tail, tokens := bk.win.tail(), bk.win.tokens
	bk.mu.Unlock()
	if tail != 400 || tokens != 800 {
		t.Fatalf("b sent: tail %d, window %d; want 400 (the other call) and 800", tail, tokens)
	}

	// The newest entry in the tail leaves it too.
	c2 := mustAdmit(t, l, t0.Add(400*time.Second), req(300))
	at := t0.Add(460*time.Second + 500*time.Millisecond)
	bk = l.lockedBucketFor("p", "m", at)
	bk.expireLocked(at)
	tail = bk.win.tail()
	bk.mu.Unlock()
	if tail != 400 {
		t.Fatalf("the newest call in the tail: %d, want 400", tail)
	}
	l.Sent(at, c2)
	bk = l.lockedBucketFor("p", "m", at)
	tail, tokens = bk.win.tail(), bk.win.tokens
	bk.mu.Unlock()
	if tail != 0 || tokens != 400 {
		t.Fatalf("the newest call sent: tail %d, window %d; want 0 and 400", tail, tokens)
	}
}

// An RPM 429 reads the requests the refused call met: not the calls admitted
// after its send, nor those admitted before it and still unsent — each once.
func TestRequestsMetLeaveOutUnsentCalls(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	sends := req(10)
	sends.Sends = true
	mustAdmit(t, l, t0, sends) // never sent
	refused := mustAdmit(t, l, t0.Add(time.Second), sends)
	sentAt := l.Sent(t0.Add(2*time.Second), refused)
	mustAdmit(t, l, t0.Add(3*time.Second), sends)   // after it, unsent
	mustAdmit(t, l, t0.Add(4*time.Second), req(10)) // after it, sent
	bk := l.lockedBucketFor("p", "m", t0.Add(5*time.Second))
	defer bk.mu.Unlock()
	if n := bk.requestsMetLocked(t0.Add(5*time.Second), sentAt); n != 1 {
		t.Fatalf("the refused call met %d requests, want 1 (itself)", n)
	}
	if n := bk.requestsMetLocked(t0.Add(5*time.Second), time.Time{}); n != 2 {
		t.Fatalf("without its time, %d requests, want 2 (the sent ones)", n)
	}
}

// A call whose caller reports its send (Request.Sends) is read at the level it
// meets at the provider: the window when it leaves, not when it was admitted.
// Read at its admission, the clean-window record would count a call that left
// the provider's window while this one waited to be sent — a level the
// provider never held, which a later trigger would keep.
func TestSentReadsTheLevelWhenTheCallLeaves(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 1000}
	l, _, _ := newTestLedger(t, c)
	x := mustAdmit(t, l, t0, req(20_000))
	if err := l.Settle(t0.Add(time.Second), x, Usage{InputTokens: 20_000, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	// Admitted while x is still in the window, sent after it left.
	cr := req(1000)
	cr.Sends = true
	call := mustAdmit(t, l, t0.Add(59*time.Second), cr)
	l.Sent(t0.Add(61*time.Second), call)
	// The served level's base is read at the send too: an empty window.
	bk := l.lockedBucketFor("p", "m", t0.Add(61*time.Second))
	base := bk.slots[call.slot].viewArrival
	bk.mu.Unlock()
	if base != 0 {
		t.Fatalf("the call's view at its send: %d, want 0 (x left; 20100 at its admission)", base)
	}
	// A window later, the next admission closes the record of the last.
	mustAdmit(t, l, t0.Add(130*time.Second), req(10))
	b := l.lockedBucketFor("p", "m", t0.Add(130*time.Second))
	clean := b.learn.cleanMax
	b.mu.Unlock()
	// What the provider held when the call arrived: the call, at its input and
	// expected output (100).
	if clean != 1100 {
		t.Fatalf("clean-window record %.0f, want 1100 (the call alone, as it met the provider; 21200 read at its admission)", clean)
	}
}

// The calls admitted and not yet sent are not in the provider's window: the
// arrival view — every reading the learner takes, a 429's among them — leaves
// them out until they are sent, while the budget still counts them.
func TestUnsentCallsAreNotInTheProviderView(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 1000}
	l, _, _ := newTestLedger(t, c)
	x := mustAdmit(t, l, t0, req(1000))
	if err := l.Settle(t0, x, Usage{InputTokens: 1000, OutputTokens: 100}); err != nil {
		t.Fatal(err) // an expected output of 100 from here on
	}
	sends := req(2000)
	sends.Sends = true
	a := mustAdmit(t, l, t0.Add(time.Second), sends)
	b := mustAdmit(t, l, t0.Add(time.Second), sends)
	var requests int // the provider's window's requests, as an RPM 429 reads them
	view := func(at time.Time) (float64, int64) {
		bk := l.lockedBucketFor("p", "m", at)
		defer bk.mu.Unlock()
		bk.expireLocked(at)
		requests = bk.providerRequestsLocked()
		return bk.arrivalViewLocked(), bk.win.tokens
	}
	// x's 1100 only: a and b (2100 each, at their expected output) are not sent.
	if v, w := view(t0.Add(time.Second)); v != 1100 || w != 1100+2*(2000+100) || requests != 1 {
		t.Fatalf("before the sends: view %.0f, window %d, %d requests; want 1100, %d and 1", v, w, requests, 1100+2*2100)
	}
	l.Sent(t0.Add(2*time.Second), a)
	if v, _ := view(t0.Add(2 * time.Second)); v != 1100+2100 || requests != 2 {
		t.Fatalf("a sent: view %.0f, %d requests; want %d and 2", v, requests, 1100+2100)
	}
	if err := l.Release(t0.Add(3*time.Second), b); err != nil { // b failed before it was written
		t.Fatal(err)
	}
	if err := l.Settle(t0.Add(3*time.Second), a, Usage{InputTokens: 2000, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	// b never reached the provider: neither its tokens nor its request count.
	if v, w := view(t0.Add(3 * time.Second)); v != 1100+2050 || w != 1100+2050 || requests != 2 {
		t.Fatalf("all closed: view %.0f, window %d, %d requests; want both %d, and 2", v, w, requests, 1100+2050)
	}
	if st := l.BucketStatus(t0.Add(3*time.Second), "p", "m"); st.WindowRequests != 2 {
		t.Fatalf("the window holds %d requests, want 2 (x and a)", st.WindowRequests)
	}
}
