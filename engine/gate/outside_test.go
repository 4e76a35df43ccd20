package gate

import (
	"testing"
	"time"
)

// outsideRig drives one model through answers whose rate-limit headers state a
// limit and what is left of it, with another client's spend on the key added
// to what the gate sent itself.
type outsideRig struct {
	t      *testing.T
	l      *Ledger
	ev     *eventLog
	now    time.Time
	stated int64
}

const outsideTick = 2 * time.Second // 30 answers a window of testGate's minute

func newOutsideRig(t *testing.T, stated int64, opts ...func(*Config)) *outsideRig {
	t.Helper()
	cfg := testGate()
	cfg.Defaults.RPM = 1000 // tokens bind, not requests
	for _, o := range opts {
		o(&cfg)
	}
	l, clk, ev := newTestLedger(t, cfg)
	r := &outsideRig{t: t, l: l, ev: ev, now: clk.Now(), stated: stated}
	l.Calibrate(r.now, "p", "m", stated, stated, -1, -1)
	return r
}

// answer admits and settles one call of size tokens and reads its answer's
// headers: the provider counted the gate's window and others more. Fixed, the
// count restarts at each minute's edge, as a fixed window's does.
func (r *outsideRig) answer(size, others int64, fixed bool) {
	r.t.Helper()
	r.now = r.now.Add(outsideTick)
	tk := mustAdmit(r.t, r.l, r.now, Request{Provider: "p", Model: "m", Session: "s", InputTokens: int(size - 1), MaxTokens: 1})
	if err := r.l.Settle(r.now, tk, Usage{InputTokens: size - 1, OutputTokens: 1}); err != nil {
		r.t.Fatal(err)
	}
	counted := r.l.BucketStatus(r.now, "p", "m").WindowTokens + others
	if fixed {
		counted = counted * int64(r.now.Sub(t0)%time.Minute) / int64(time.Minute)
	}
	r.l.Calibrate(r.now, "p", "m", r.stated, max(0, r.stated-counted), -1, -1)
}

// answers runs n answers.
func (r *outsideRig) answers(n int, size, others int64, fixed bool) {
	r.t.Helper()
	for range n {
		r.answer(size, others, fixed)
	}
}

func (r *outsideRig) trigger() float64 { return r.l.BucketStatus(r.now, "p", "m").Trigger }

// setTrigger fills the window to about 660 of the stated 800 while another
// client spends others, and takes a 429 there: the trigger it sets is what the
// others left (or, with none, the gate's own excess).
func (r *outsideRig) setTrigger(others int64) float64 {
	r.t.Helper()
	return r.setTriggerAt(22, others)
}

// setTriggerAt is setTrigger with the window filled by calls of size.
func (r *outsideRig) setTriggerAt(size, others int64) float64 {
	r.t.Helper()
	r.answers(60, size, others, false)
	r.now = r.now.Add(time.Second)
	r.l.RateLimited(r.now, "p", "m", time.Second)
	tr := r.trigger()
	if tr == 0 || tr > float64(r.stated)*(1-outsideMinRoom) {
		r.t.Fatalf("setup: the 429 below the stated %d set trigger %v", r.stated, tr)
	}
	return tr
}

// untilLift answers with nobody else spending, for up to windows windows,
// until the trigger is lifted.
func (r *outsideRig) untilLift(windows int) {
	r.t.Helper()
	for range windows * 30 {
		r.answer(20, 0, false)
		if r.lifts() > 0 {
			return
		}
	}
}

func (r *outsideRig) lifts() int {
	n := 0
	for _, e := range r.ev.kinds(EventLearn) {
		if e.Step == "outside" {
			n++
		}
	}
	return n
}

// TestOutsideSpendStoppedLiftsTheTrigger: a trigger another client's spend set
// below the stated limit stays while the headers show it spending, and rises
// to the stated limit within a few windows of it stopping — where, kept, it
// would wait hours for the re-probe.
func TestOutsideSpendStoppedLiftsTheTrigger(t *testing.T) {
	r := newOutsideRig(t, 800)
	tr := r.setTrigger(110)
	r.answers(4*30, 20, 110, false) // still spending: four windows
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("with the other client still spending 110: trigger %v (was %v), %d lifts; want it kept", got, tr, r.lifts())
	}
	stopped := r.now
	r.untilLift(5)
	if r.lifts() != 1 {
		t.Fatalf("five windows after the other client stopped: trigger %v, no lift", r.trigger())
	}
	if took := r.now.Sub(stopped); took > 3*time.Minute+outsideTick {
		t.Errorf("lifted %s after the other client stopped, want within three windows", took)
	}
	if got := r.trigger(); got < 790 || got > 800 {
		t.Fatalf("lifted to %v, want the stated 800 less what the headers read (nothing)", got)
	}
	st := r.l.BucketStatus(r.now, "p", "m")
	if st.Quota < st.Trigger {
		t.Fatalf("quota %v under the lifted trigger %v", st.Quota, st.Trigger)
	}
}

// TestOutsideLiftRefutedByA429: a 429 within two windows of a lift refutes
// it; the trigger that 429 sets is not lifted again for
// triggerReprobeWindows windows, however quiet the headers read.
func TestOutsideLiftRefutedByA429(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.setTrigger(110)
	r.untilLift(6)
	if r.lifts() != 1 {
		t.Fatal("setup: no lift after the other client stopped")
	}
	// The other client is back within two windows, and the provider refuses
	// where the trigger read before: the lift went too far.
	r.answers(30, 22, 110, false)
	r.now = r.now.Add(time.Second)
	r.l.RateLimited(r.now, "p", "m", time.Second)
	if tr := r.trigger(); tr == 0 || tr >= 800*(1-outsideMinRoom) {
		t.Fatalf("setup: the 429 after the lift set trigger %v, within the room no lift takes", tr)
	}
	r.answers(6*30, 20, 0, false) // and gone again: the readings would allow a lift
	if r.lifts() != 1 {
		t.Fatalf("%d lifts: a lift a 429 refuted was tried again within %d windows", r.lifts(), triggerReprobeWindows)
	}
	// Readings forgotten (a switch of view or of what the provider decides
	// on), and a trigger the others set again: the refused rise stays refused.
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	b.forgetReadingsLocked()
	b.mu.Unlock()
	r.setTrigger(110)
	r.answers(6*30, 20, 0, false)
	if r.lifts() != 1 {
		t.Fatalf("%d lifts: forgetting the readings forgot the refusal", r.lifts())
	}
}

// TestOutsideNoLiftOfTheGatesOwnTrigger: a 429 with nobody else spending is
// the gate's own excess: the headers reading nobody else afterwards do not
// lift its trigger to the stated limit (the restated limit keeps it, as
// adoptStatedLocked says).
func TestOutsideNoLiftOfTheGatesOwnTrigger(t *testing.T) {
	r := newOutsideRig(t, 800)
	tr := r.setTrigger(0)
	r.answers(6*30, 20, 0, false)
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("trigger %v (was %v), %d lifts; want the gate's own trigger kept", got, tr, r.lifts())
	}
}

// TestOutsideNoLiftFromReadingsThatVary: at fixed windows the remaining
// tokens restart at each edge, and the readings say nothing plain of the
// others' spend: no lift, though the highest of them (at 60 of the others'
// 110, with the gate's calls from before the edge in its own window) reads
// under half of what the trigger holds back.
func TestOutsideNoLiftFromReadingsThatVary(t *testing.T) {
	r := newOutsideRig(t, 800)
	tr := r.setTrigger(110)
	r.answers(6*30, 20, 60, true)
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("trigger %v (was %v), %d lifts; want it kept", got, tr, r.lifts())
	}
}

// TestOutsideResetForgetsTheReadings: a reset starts the readings over.
func TestOutsideResetForgetsTheReadings(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.setTrigger(110)
	r.answers(30, 20, 110, false)
	r.l.Reset(r.now, "p", "m")
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	o := b.outside
	b.mu.Unlock()
	if o != (outsideSpend{}) {
		t.Fatalf("after a reset the readings are %+v, want none", o)
	}
}

// TestOutsideNoLiftForOneQuietWindow: the other client pausing for two
// minutes less one answer — one whole window of readings, however they fall
// — is not the other client gone: a lift takes two quiet windows in a row.
func TestOutsideNoLiftForOneQuietWindow(t *testing.T) {
	r := newOutsideRig(t, 800)
	tr := r.setTrigger(110)
	r.answers(2*30, 20, 110, false)
	r.answers(59, 20, 0, false) // 118 s: one whole window of readings (30 answers) wherever they fall, never two
	r.answers(3*30, 20, 110, false)
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("trigger %v (was %v), %d lifts; want it kept through a pause", got, tr, r.lifts())
	}
}

// TestOutsideNoLiftNearTheStatedLimit: a trigger within outsideMinRoom of the
// stated limit is the gate's own, read at the limit (a 429 there sets it a
// step below the level refused), whatever the readings' noise said of others
// at its 429: it is not lifted back to where the provider refused.
func TestOutsideNoLiftNearTheStatedLimit(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.answers(60, 26, 15, false) // 780 of the gate's and 15 of noise: about the limit
	r.now = r.now.Add(time.Second)
	r.l.RateLimited(r.now, "p", "m", time.Second)
	tr := r.trigger()
	if tr == 0 || tr >= 800 || tr < 800*(1-outsideMinRoom) {
		t.Fatalf("setup: the 429 at the limit set trigger %v", tr)
	}
	r.answers(6*30, 20, 0, false)
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("trigger %v (was %v), %d lifts; want the trigger read at the limit kept", got, tr, r.lifts())
	}
}

// TestOutsideLiftStaysUnderTheCap: under a maxTpm below the stated limit, a
// lift goes to the cap, and the room is the stated limit's: the others'
// spend is read against the key's limit, not the user's.
func TestOutsideLiftStaysUnderTheCap(t *testing.T) {
	r := newOutsideRig(t, 800, func(c *Config) { c.Defaults.MaxTPM = 760 })
	r.setTrigger(110)
	r.untilLift(6)
	if got := r.trigger(); r.lifts() != 1 || got != 760 {
		t.Fatalf("%d lifts to trigger %v, want one to the cap 760", r.lifts(), got)
	}
}

// TestOutsideReadingsGoWithAWindowChange: a reload that changes the window
// drops the readings, in the old window's units.
func TestOutsideReadingsGoWithAWindowChange(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.setTrigger(110)
	r.answers(30, 20, 110, false)
	cfg := testGate()
	cfg.Defaults.RPM = 1000
	cfg.Window, cfg.MaxWait = 2*time.Minute, 4*time.Minute
	if err := r.l.Reconfigure(r.now, cfg); err != nil {
		t.Fatal(err)
	}
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	o := b.outside
	b.mu.Unlock()
	if o != (outsideSpend{}) {
		t.Fatalf("after the window changed the readings are %+v, want none", o)
	}
}

// TestOutsideLiftAfterA429ThatMovedNothing: a 429 that leaves the trigger as
// it was (one far below what the provider carries: a cooldown only) does not
// say whose the trigger is: it still rises once the others stopped.
func TestOutsideLiftAfterA429ThatMovedNothing(t *testing.T) {
	r := newOutsideRig(t, 800)
	tr := r.setTrigger(110)
	r.answers(30, 20, 0, false) // the others stopped
	r.now = r.now.Add(55 * time.Second)
	r.l.RateLimited(r.now, "p", "m", time.Second) // the window holds two calls: not the limit
	if got := r.trigger(); got != tr || r.lifts() != 0 {
		t.Fatalf("setup: the 429 with two calls in the window moved the trigger %v → %v, or a lift came first", tr, got)
	}
	r.untilLift(6)
	if r.lifts() != 1 {
		t.Fatalf("trigger %v: no lift after a 429 that moved nothing", r.trigger())
	}
}

// TestOutsideAfterAViewSwitchTheNextWindowSays: when the 429 that set the
// trigger also switched the view (the gate learned the provider counts at
// completion), the readings before it were taken in the wrong view; the first
// window of readings after it says whose the trigger is.
func TestOutsideAfterAViewSwitchTheNextWindowSays(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.viewSwitchLift(t, nil)
}

// viewSwitchLift sets a trigger at a 429 that also switched the view, with
// the readings before it saying nobody else spent (the wrong view's), runs
// then on the bucket, and checks that a whole window of the others' spend
// read after it, then their stop, lifts the trigger.
func (r *outsideRig) viewSwitchLift(t *testing.T, then func(b *bucket)) {
	t.Helper()
	r.setTrigger(110)
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	b.outside.before429 = 0 // what the wrong view read: nobody else
	b.outsideTriggerSetLocked(true)
	if then != nil {
		then(b)
	}
	b.mu.Unlock()
	r.answers(45, 20, 110, false) // the others, read in the right view: a whole window of them
	r.untilLift(6)
	if r.lifts() != 1 {
		t.Fatalf("trigger %v: no lift once the others stopped", r.trigger())
	}
}

// TestOutsideViewSwitchSurvivesTheBurst: a second 429 of the burst that
// switched the view, moving the trigger again, does not take the others'
// spend from the readings before it: the first whole window after still
// says.
func TestOutsideViewSwitchSurvivesTheBurst(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.viewSwitchLift(t, func(b *bucket) {
		b.outside429Locked(r.now.Add(time.Second)) // the burst's next 429, moving the trigger again
		b.outsideTriggerSetLocked(false)
	})
}

// TestOutsideSpendAtThe429IsTheLatest: another client that began spending
// late in the window of readings — 150 of the stated 800 for its last sixth,
// as one that starts with the gate fills its share — is read at the 429 by
// the moving mean (about 95), not by the window's mean (25, under half of
// the 140 the trigger holds back): the trigger is theirs, and it rises once
// they stop.
func TestOutsideSpendAtThe429IsTheLatest(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.answers(55, 22, 0, false)
	r.answers(5, 22, 150, false)
	r.now = r.now.Add(time.Second)
	r.l.RateLimited(r.now, "p", "m", time.Second)
	tr := r.trigger()
	if tr == 0 || tr > 800*(1-outsideMinRoom) {
		t.Fatalf("setup: the 429 with the other client spending set trigger %v", tr)
	}
	r.untilLift(6)
	if r.lifts() != 1 || r.trigger() <= tr {
		t.Fatalf("%d lifts, trigger %v from %v: the other client's spend at the 429 was read as the gate's own", r.lifts(), r.trigger(), tr)
	}
}
