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

// A long-term wait on a provider with a balance source reads the source as it
// begins and again each refresh: a reading that shows a top-up — allowance,
// taken a refresh after the mark, and more balance than the last reading, or
// allowance in a window the last reading showed spent — lifts the mark and
// ends the waits on that provider, not at the end of LongTermDelay. A reading
// that shows none, one too close to the mark, a balance that showed allowance
// all along and a window that only grew end nothing; a provider without a
// source is not read.
func TestATopUpEndsTheLongTermWait(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	windows := func(daily, weekly float64) []engine.WindowReading {
		return []engine.WindowReading{{Name: "daily", Remaining: daily}, {Name: "weekly", Remaining: weekly}}
	}
	readC := func(daily, weekly float64) {
		f.readings.Set("c", engine.Reading{Windows: windows(daily, weekly), TakenAt: f.clock.Now()})
	}
	f.read("a", 0, 0)  // spent
	f.read("b", 30, 0) // shows allowance all along
	readC(5, 2)        // so does c, in windows
	for _, p := range []string{"a", "b", "c", "x"} {
		f.q.Mark(p, pt0)
	}
	onA := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rA}, time.Hour)
	alsoOnA := f.q.ArmLongTerm(QuotaFailure{Route: rA}, time.Hour) // armed, never slept out here
	waits := map[string]Decision{"a": onA,
		"b": f.q.ArmLongTerm(QuotaFailure{Session: "sb", Route: rB}, time.Hour),
		"c": f.q.ArmLongTerm(QuotaFailure{Session: "sc", Route: rC}, time.Hour),
		"x": f.q.ArmLongTerm(QuotaFailure{Session: "sx", Route: rX}, time.Hour), // x has no balance source
	}
	ended := make(chan string, len(waits))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, d := range waits {
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
	endedNow := func(want ...string) {
		t.Helper()
		got := map[string]bool{}
		for range want {
			select {
			case name := <-ended:
				got[name] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("the waits that ended: %v; want %v", got, want)
			}
		}
		for _, w := range want {
			if !got[w] {
				t.Fatalf("the waits that ended: %v; want %v", got, want)
			}
		}
	}
	// Four wait timers, and the next read of a, b and c (each read once as
	// its wait began).
	waitTimers(t, f.clock, 7)
	if f.readings.refreshes() != 3 {
		t.Fatalf("%d refreshes as the waits began, want one each for a, b and c: %v", f.readings.refreshes(), f.readings.refreshed)
	}
	// Each reading is set before the clock reaches the read that takes it.
	f.clock.Advance(30 * time.Second)
	f.read("a", 0, 0)
	f.read("b", 30, 0)
	readC(8, 2) // a window grew; none was spent
	f.clock.Advance(30 * time.Second)
	waitTimers(t, f.clock, 7)
	none("a spent balance, b's unchanged one, c's windows that only grew")
	f.clock.Advance(30 * time.Second)
	readC(8, 0) // c's weekly window spent
	f.clock.Advance(30 * time.Second)
	waitTimers(t, f.clock, 7)
	none("c's spent window")
	f.readings.Set("a", engine.Reading{Remaining: pf(50), TakenAt: pt0.Add(30 * time.Second)}) // taken within a refresh of the mark
	f.clock.Advance(time.Minute)
	waitTimers(t, f.clock, 7)
	none("a reading taken within a refresh of the mark")
	f.clock.Advance(30 * time.Second)
	f.read("a", 50, 0) // the top-up
	readC(8, 3)        // c's weekly window back
	f.clock.Advance(30 * time.Second)
	endedNow("a", "c")
	for _, p := range []string{"a", "c"} {
		if _, held := f.q.Marked(p); held {
			t.Fatalf("%s is still marked after its source showed a top-up", p)
		}
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
	none("the top-ups on a and c")
	f.clock.Advance(30 * time.Second)
	f.read("b", 40, 0) // b's balance rose: paid in
	f.clock.Advance(30 * time.Second)
	endedNow("b")
	none("b's top-up") // x waits on
}

// A QUOTA failure after the wait began marks the provider again: a top-up
// read within a refresh of that mark ends nothing and leaves the mark (the
// newer failure stands); a read a refresh after it ends the wait.
func TestATopUpReadBeforeANewerMarkLeavesIt(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.read("a", 0, 0)
	f.q.Mark("a", pt0)
	d := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rA}, time.Hour)
	ended := make(chan error, 1)
	go func() { ended <- f.q.Wait(context.Background(), d) }()
	waitTimers(t, f.clock, 2) // the wait, and its next read (it read once as it began)
	f.clock.Advance(time.Minute)
	waitTimers(t, f.clock, 2) // read (still spent), and the next read armed: at +2m
	f.clock.Advance(30 * time.Second)
	newer := f.clock.Now()
	f.q.Mark("a", newer) // another call's QUOTA failure
	f.read("a", 50, 0)   // paid in, but read at the newer mark
	f.clock.Advance(30 * time.Second)
	waitTimers(t, f.clock, 2) // read at +2m, and the next armed: at +3m
	select {
	case err := <-ended:
		t.Fatalf("the wait ended (%v) on a reading within a refresh of the newer mark", err)
	case <-time.After(20 * time.Millisecond):
	}
	if at, held := f.q.Marked("a"); !held || !at.Equal(newer) {
		t.Fatalf("a's mark: %v, held %v; want the newer one, held", at, held)
	}
	f.clock.Advance(30 * time.Second)
	f.read("a", 50, 0) // a refresh after the newer mark
	f.clock.Advance(30 * time.Second)
	waitEnds(t, ended, "a refresh after the newer mark, with the top-up read")
}

// waitEnds fails unless the wait reporting on ended returned nil (try again
// now) or does within 5 s; after says what it should have ended on.
func waitEnds(t *testing.T, ended <-chan error, after string) {
	t.Helper()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the wait ended with %v after %s, want nil (try again now)", err, after)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the wait was still waiting after %s", after)
	}
}

// A source that had no reading as the wait began (its read failed) is judged
// only against its first reading: that one, allowance or not, ends nothing;
// a balance above it then does.
func TestATopUpIsReadAgainstAReading(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.q.Mark("a", pt0) // and no reading of a
	d := f.q.ArmLongTerm(QuotaFailure{Session: "s", Route: rA}, time.Hour)
	ended := make(chan error, 1)
	go func() { ended <- f.q.Wait(context.Background(), d) }()
	waitTimers(t, f.clock, 2)
	for i, remaining := range []float64{30, 30} { // its first reading, then the same
		f.clock.Advance(30 * time.Second)
		f.read("a", remaining, 0)
		f.clock.Advance(30 * time.Second)
		waitTimers(t, f.clock, 2)
		select {
		case err := <-ended:
			t.Fatalf("read %d: the wait ended (%v) on a balance of %g, no more than the first reading", i+1, err, remaining)
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.clock.Advance(30 * time.Second)
	f.read("a", 45, 0) // paid in
	f.clock.Advance(30 * time.Second)
	waitEnds(t, ended, "the balance rose above its first reading")
}

// blockingReadings is a source that does not answer: its Refresh holds until
// its context ends, and tells when it began and when it returned.
type blockingReadings struct {
	StaticReadings
	began, returned chan struct{}
}

func (b *blockingReadings) Refresh(ctx context.Context, _ []string) {
	close(b.began) // one read: the wait's first
	<-ctx.Done()
	close(b.returned)
}

// A long-term wait's read of the source ends with the wait: the request goes
// on to retry, and a source that does not answer is not left reading for it
// until its own timeout.
func TestTheSourceReadEndsWithTheWait(t *testing.T) {
	pools, err := NewPools(twoPools())
	if err != nil {
		t.Fatal(err)
	}
	br := &blockingReadings{began: make(chan struct{}), returned: make(chan struct{})}
	q := NewRouter(RouterOptions{Pools: pools, Settings: DefaultSettings(), Readings: br, Sessions: NewSessions(nil),
		Clock: engine.NewFakeClock(pt0), Rand: &seqRand{vals: []float64{0}}, Events: &quotaLog{}})
	q.Mark("a", pt0)
	d := q.ArmLongTerm(QuotaFailure{Session: "s", Route: rA}, time.Hour)
	ended := make(chan error, 1)
	go func() { ended <- q.Wait(context.Background(), d) }()
	select {
	case <-br.began:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait never read the source")
	}
	q.Unmark("a")
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the wait ended with %v, want nil (retry now)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end on the unmark")
	}
	select {
	case <-br.returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the source's read outlived the wait")
	}
}
