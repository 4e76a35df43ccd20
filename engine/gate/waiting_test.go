package gate

import (
	"testing"
	"time"
)

// Held lists each held call with its reason and expected admission, in the
// order the queue will admit them, and looking changes nothing.
func TestHeldListsQueuedCallsWithoutDispatching(t *testing.T) {
	l, _, _ := newTestLedger(t, fairGate())
	if got := l.Held(t0); len(got) != 0 {
		t.Fatalf("Held on an empty ledger = %+v, want none", got)
	}
	first := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "x", InputTokens: 900})
	_, wb := l.Submit(t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", Priority: PriorityBatch, InputTokens: 800})
	_, wa := l.Submit(t0.Add(2*time.Second), Request{Provider: "p", Model: "m", Session: "a", InputTokens: 800})
	if wa == nil || wb == nil {
		t.Fatal("the calls behind a full window were admitted")
	}
	now := t0.Add(10 * time.Second)
	got := l.Held(now)
	if len(got) != 2 {
		t.Fatalf("Held = %+v, want 2 calls", got)
	}
	// Interactive before batch, whatever the arrival.
	a, b := got[0], got[1]
	if a.Session != "a" || a.Priority != "interactive" || a.Position != 1 || b.Session != "b" || b.Priority != "batch" || b.Position != 2 {
		t.Fatalf("Held order = %+v, want session a (interactive) then b (batch)", got)
	}
	if a.Reason != "tpm" || a.Provider != "p" || a.Model != "m" || a.Tokens != wa.reserved {
		t.Fatalf("held call = %+v, want reason tpm on p/m reserving %d", a, wa.reserved)
	}
	if !a.Since.Equal(t0.Add(2*time.Second)) || a.WaitedMs != 8000 {
		t.Fatalf("since %s waited %d ms, want queued at t0+2s and 8000 ms", a.Since.Sub(t0), a.WaitedMs)
	}
	if !a.ExpectedAt.Equal(wa.Next()) || a.ExpectedInMs != wa.Next().Sub(now).Milliseconds() || a.ExpectedInMs <= 0 {
		t.Fatalf("expected at %s in %d ms, want the waiter's next poll %s", a.ExpectedAt.Sub(t0), a.ExpectedInMs, wa.Next().Sub(t0))
	}
	// Reading the queue long after the drain time admits nobody: only dispatch does.
	late := t0.Add(5 * time.Minute)
	if got := l.Held(late); len(got) != 2 || got[0].ExpectedInMs != 0 {
		t.Fatalf("Held past the drain time = %+v, want both still held, expected in 0 ms", got)
	}
	if _, ok := wa.Ticket(); ok {
		t.Fatal("Held admitted a waiter")
	}
	// Once admitted (the window drains), a call leaves the list.
	if err := l.Release(t0.Add(61*time.Second), first); err != nil {
		t.Fatal(err)
	}
	wa.Poll(t0.Add(61 * time.Second))
	got = l.Held(t0.Add(61 * time.Second))
	if len(got) != 1 || got[0].Session != "b" || got[0].Position != 1 {
		t.Fatalf("after a's admission Held = %+v, want only b, first in line", got)
	}
	wb.Cancel(t0.Add(62 * time.Second))
	if got := l.Held(t0.Add(62 * time.Second)); len(got) != 0 {
		t.Fatalf("after b cancelled Held = %+v, want none", got)
	}
}
