package pool

import (
	"context"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// LongTermWaits lists each session in a long-term wait with its next attempt,
// the soonest first, and drops a session whose entry ended.
func TestLongTermWaitsListsOpenEntries(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	if got := f.q.LongTermWaits(); len(got) != 0 {
		t.Fatalf("LongTermWaits with no entry = %+v", got)
	}
	late := f.q.ArmLongTerm(QuotaFailure{Session: "late", Route: rX, Turn: "t1"}, 2*time.Hour)
	soon := f.q.ArmLongTerm(QuotaFailure{Session: "soon", Route: rX}, 10*time.Minute)
	if late.Action != ActionWait || soon.Action != ActionWait {
		t.Fatalf("ArmLongTerm actions %v, %v, want wait", late.Action, soon.Action)
	}
	got := f.q.LongTermWaits()
	if len(got) != 2 || got[0].Session != "soon" || got[1].Session != "late" {
		t.Fatalf("LongTermWaits = %+v, want soon then late", got)
	}
	if !got[0].Pending || !got[0].NextAttemptAt.Equal(pt0.Add(10*time.Minute)) || got[0].Provider != "x" || got[1].Turn != "t1" {
		t.Fatalf("LongTermWaits = %+v, want soon pending at +10m on provider x, late on turn t1", got)
	}
	f.q.OnSuccess("soon")
	if got := f.q.LongTermWaits(); len(got) != 1 || got[0].Session != "late" {
		t.Fatalf("after soon's success LongTermWaits = %+v, want only late", got)
	}
}

// An entry with no attempt armed (its client left mid-wait) has no next attempt
// to count down to: the Waits view lists it after every armed wait, however far
// off those are.
func TestLongTermWaitsUnarmedComeLast(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	left := f.q.ArmLongTerm(QuotaFailure{Session: "a-left", Route: rX}, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.q.Wait(ctx, left); err == nil {
		t.Fatal("Wait with a cancelled context = nil, want its error")
	}
	f.q.ArmLongTerm(QuotaFailure{Session: "z-late", Route: rX}, 3*time.Hour)
	f.q.ArmLongTerm(QuotaFailure{Session: "m-soon", Route: rX}, 5*time.Minute)
	got := f.q.LongTermWaits()
	var order []string
	for _, w := range got {
		order = append(order, w.Session)
	}
	if len(got) != 3 || order[0] != "m-soon" || order[1] != "z-late" || order[2] != "a-left" || got[2].Pending {
		t.Fatalf("LongTermWaits order = %v (%+v), want m-soon, z-late (armed, soonest first), then a-left (not armed)", order, got)
	}
}

// A mark lifted by hand (Unmark, or another instance's adopted) ends the
// long-term waits armed on that provider: their calls try again now, not at
// the end of LongTermDelay — every call of a session, and calls without one.
// Waits on another provider sleep on; so does a wait armed after the unmark,
// and one whose provider was marked after the unmark it adopted.
func TestUnmarkWakesTheWaitsOnItsProvider(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	rY := engine.Route{Provider: "y", Model: "other"} // in no pool either
	f.q.Mark("x", pt0)
	f.q.Mark("y", pt0)
	first := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rX}, time.Hour)
	second := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rX}, time.Hour) // another call of the session
	alone := f.q.ArmLongTerm(QuotaFailure{Route: rX}, time.Hour)                // a call without one
	onY := f.q.ArmLongTerm(QuotaFailure{Session: "sy", Route: rY}, time.Hour)
	f.q.Unmark("x")
	// The fake clock never moves: only the wake can end a wait. (The context
	// only keeps a missing wake from hanging the test.)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, d := range map[string]Decision{"first": first, "second": second, "alone": alone} {
		if err := f.q.Wait(ctx, d); err != nil {
			t.Fatalf("the %s wait on the unmarked provider: %v, want nil (try again now)", name, err)
		}
	}
	woken := func(d Decision) bool {
		select {
		case <-d.wake:
			return true
		default:
			return false
		}
	}
	if later := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rX}, time.Hour); woken(later) || woken(onY) {
		t.Fatalf("woken: a wait armed after the unmark %v, the wait on y %v; want neither", woken(later), woken(onY))
	}
	f.q.Mark("y", pt0.Add(time.Minute))
	f.q.AdoptUnmark("y", pt0) // older than the mark here: it stands
	if woken(onY) {
		t.Fatal("an adopted unmark older than the mark woke the wait on y")
	}
	f.q.AdoptUnmark("y", pt0.Add(2*time.Minute))
	if err := f.q.Wait(ctx, onY); err != nil {
		t.Fatalf("the wait on y after a newer adopted unmark: %v, want nil", err)
	}
}

// A long-term wait on a provider with a balance source reads the source again
// each refresh: a reading that shows a top-up — allowance, taken a refresh
// after the mark, and more than the source showed as the wait began — lifts
// the mark and ends the waits on that provider, not at the end of
// LongTermDelay. A reading that shows none, one too old, and a source that
// showed allowance all along (it disagrees with the provider's QUOTA failure)
// end nothing; a provider without a source is not read.
func TestATopUpEndsTheLongTermWait(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.read("a", 0, 0)  // spent
	f.read("b", 30, 0) // shows allowance all along
	f.q.Mark("a", pt0)
	f.q.Mark("b", pt0)
	f.q.Mark("x", pt0)
	onA := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rA}, time.Hour)
	alsoOnA := f.q.ArmLongTerm(QuotaFailure{Route: rA}, time.Hour) // armed, never slept out here
	onB := f.q.ArmLongTerm(QuotaFailure{Session: "sb", Route: rB}, time.Hour)
	onX := f.q.ArmLongTerm(QuotaFailure{Session: "sx", Route: rX}, time.Hour) // x has no balance source
	ended := make(chan string, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, d := range map[string]Decision{"a": onA, "b": onB, "x": onX} {
		go func() {
			if err := f.q.Wait(ctx, d); err == nil {
				ended <- name
			}
		}()
	}
	none := func(when string) {
		t.Helper()
		select {
		case name := <-ended:
			t.Fatalf("%s: the wait on %s ended", when, name)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Three wait timers, and a read timer each on a and b.
	waitTimers(t, f.clock, 5)
	f.clock.Advance(time.Minute)
	f.read("a", 0, 0)
	f.read("b", 30, 0)
	waitTimers(t, f.clock, 5) // read, and the next read armed
	if f.readings.refreshes() != 2 {
		t.Fatalf("%d refreshes after one refresh interval, want one each for a and b: %v", f.readings.refreshes(), f.readings.refreshed)
	}
	f.clock.Advance(time.Minute)
	waitTimers(t, f.clock, 5)
	none("a spent reading, and b's unchanged allowance")
	f.read("a", 50, 105*time.Second) // taken at pt0+15s: before a refresh had passed since the mark
	f.clock.Advance(time.Minute)
	waitTimers(t, f.clock, 5)
	none("a reading older than the mark's refresh")
	f.read("a", 50, 0) // the top-up
	f.clock.Advance(time.Minute)
	select {
	case name := <-ended:
		if name != "a" {
			t.Fatalf("the wait on %s ended, want the one on a", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait on a was still waiting after its source showed a top-up")
	}
	if _, held := f.q.Marked("a"); held {
		t.Fatal("a is still marked after its source showed a top-up")
	}
	select {
	case <-alsoOnA.wake:
	default:
		t.Fatal("the other wait armed on a was not woken with the top-up")
	}
	if st, ok := f.q.State("s"); !ok || st.Pending {
		t.Fatalf("the session's entry %+v %v: want open (the retry decides) and no longer pending", st, ok)
	}
	waitTimers(t, f.clock, 3) // b's wait and read, x's wait
	none("a's top-up")
	f.read("b", 40, 0) // b's source shows more than it did: a top-up too
	f.clock.Advance(time.Minute)
	select {
	case name := <-ended:
		if name != "b" {
			t.Fatalf("the wait on %s ended, want the one on b", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait on b was still waiting after its source showed more allowance")
	}
	none("b's top-up") // x waits on
}
