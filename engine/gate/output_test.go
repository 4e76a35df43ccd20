package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The output axis (output.go): a limit on output tokens alone, held apart from
// the token window.

// outGate is testGate with a token limit far above anything the tests spend:
// whatever holds a call back is the output axis.
func outGate(otpm int) Config {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 1000, OTPM: otpm}
	return c
}

// outReq is a call of 10 input tokens asking max_tokens out.
func outReq(session string, out int) Request {
	return Request{Provider: "p", Model: "m", Session: session, InputTokens: 10, MaxTokens: out}
}

func TestOutputLimitHoldsTheOutput(t *testing.T) {
	l, _, _ := newTestLedger(t, outGate(1000))
	a := mustAdmit(t, l, t0, outReq("a", 400))
	mustAdmit(t, l, t0.Add(time.Second), outReq("b", 400))
	// 800 of 1,000 reserved: a third max_tokens of 400 waits for the first to
	// leave the window, though the token window is nearly empty.
	w := mustWait(t, l, t0.Add(2*time.Second), outReq("c", 400), "otpm", 60*time.Second)
	if st := l.BucketStatus(t0.Add(2*time.Second), "p", "m"); st.OutputLimit != 1000 || st.OutputWindow != 800 || st.OutputBudget != 1000 || st.OTPM != 1000 {
		t.Fatalf("status %+v, want the output limit 1000, 800 of it in the window", st)
	}
	// The first call wrote 100 of its 400: the provider corrects it at the
	// end, and so does the window — the third goes now.
	if err := l.Settle(t0.Add(3*time.Second), a, Usage{InputTokens: 10, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if !w.granted {
		t.Fatalf("the third call still waits after the first settled at 100 of 400 (window %d)", l.BucketStatus(t0.Add(3*time.Second), "p", "m").OutputWindow)
	}

	t.Run("NoLimitNoAxis", func(t *testing.T) {
		l, _, _ := newTestLedger(t, outGate(0))
		for i := range 10 {
			mustAdmit(t, l, t0, outReq("s", 4000+i))
		}
		if st := l.BucketStatus(t0, "p", "m"); st.OutputLimit != 0 || st.OutputBudget != 0 {
			t.Fatalf("status %+v, want no output axis without a limit", st)
		}
	})
	t.Run("ACallLargerThanTheLimitGoes", func(t *testing.T) {
		// The over-budget rule: it could never fit, so it goes at once
		// rather than wait forever.
		l, _, _ := newTestLedger(t, outGate(1000))
		mustAdmit(t, l, t0, outReq("a", 500))
		mustAdmit(t, l, t0, outReq("b", 4096))
	})
	t.Run("ReleasedAndAbandoned", func(t *testing.T) {
		l, _, _ := newTestLedger(t, outGate(1000))
		r := mustAdmit(t, l, t0, outReq("a", 400))
		k := mustAdmit(t, l, t0, outReq("b", 400))
		if err := l.Release(t0.Add(time.Second), r); err != nil { // refused: nothing written
			t.Fatal(err)
		}
		if _, err := l.Abandon(t0.Add(time.Second), k); err != nil { // its client left: the provider still counts it
			t.Fatal(err)
		}
		if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputWindow; got != 400 {
			t.Fatalf("output window %d, want 400: the released call's reserve back, the abandoned one's kept", got)
		}
	})
}

func TestOutput429TeachesTheOutputAxisAlone(t *testing.T) {
	// The token limit is stated (as Anthropic's input-tokens-* headers state
	// it) and far from reached; the 429s are about the output.
	l, _, ev := newTestLedger(t, outGate(0))
	l.Calibrate(t0, "p", "m", 100_000, 100_000, -1, -1)
	for i := range 3 {
		mustAdmit(t, l, t0, outReq(string(rune('a'+i)), 400))
	}
	before := l.BucketStatus(t0, "p", "m")
	l.RateLimitedBy(t0.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: 5 * time.Second, Axis: engine.AxisOutputTokens})
	st := l.BucketStatus(t0.Add(time.Second), "p", "m")
	if st.Trigger != before.Trigger || st.Quota != before.Quota || st.TokenBudget != before.TokenBudget {
		t.Fatalf("the token window moved on a 429 about the output: trigger %g → %g, quota %g → %g, budget %d → %d",
			before.Trigger, st.Trigger, before.Quota, st.Quota, before.TokenBudget, st.TokenBudget)
	}
	if st.OutputTrigger != 1164 || st.OutputLimit != 1164 || st.CooldownMs != 5000 {
		t.Fatalf("status %+v, want the output trigger and limit stepDown below the reading 1200 (1164) and a 5 s cooldown", st)
	}
	if got := ev.kinds(EventRateLimited); len(got) != 1 || got[0].Reason != "output-tokens" {
		t.Fatalf("rate-limited events %+v, want one about the output tokens", got)
	}
	// After the cooldown the output window still holds the three calls: a
	// fourth waits for it, not for the token window.
	mustWait(t, l, t0.Add(6*time.Second), outReq("d", 400), "otpm", 60*time.Second)
}

func TestStatedOutputLimit(t *testing.T) {
	c := outGate(500)
	c.Window = 10 * time.Second
	c.MaxWait = 20 * time.Second
	l, _, ev := newTestLedger(t, c)
	l.StateOutputLimit(t0, "p", "m", 12_000) // per minute: 2,000 a 10 s window, replacing the configured 500
	if st := l.BucketStatus(t0, "p", "m"); st.OutputStated != 2000 || st.OutputLimit != 2000 {
		t.Fatalf("status %+v, want the stated 12,000 a minute as 2,000 a window", st)
	}
	if got := ev.kinds(EventLearn); len(got) != 1 || got[0].Step != "output-stated" || got[0].To != 2000 {
		t.Fatalf("learn events %+v, want one output-stated to 2000", got)
	}
	// A 429 about the output below it (another client's spend): the trigger
	// is what is left, and it steps back up once outputRelaxWindows passed,
	// a step a window while it holds calls back, never above the stated limit.
	mustAdmit(t, l, t0, outReq("a", 1000))
	l.RateLimitedBy(t0.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputLimit; got != 970 {
		t.Fatalf("output limit %g after the 429, want stepDown below the reading 1000", got)
	}
	l.StateOutputLimit(t0.Add(2*time.Second), "p", "m", 12_000) // restated: the trigger stands
	if got := l.BucketStatus(t0.Add(2*time.Second), "p", "m").OutputLimit; got != 970 {
		t.Fatalf("output limit %g after the figure was restated, want the trigger 970 to stand", got)
	}
	at := t0.Add(time.Second)
	var limits []float64
	for range 30 {
		at = at.Add(c.Window)
		mustAdmit(t, l, at, outReq("a", int(l.BucketStatus(at, "p", "m").OutputBudget)))
		heldBack(l, at, outReq("b", 100))
		limits = append(limits, l.BucketStatus(at, "p", "m").OutputLimit)
	}
	if limits[7] != 970 {
		t.Fatalf("output limits %v: stepped up within outputRelaxWindows of the 429", limits)
	}
	if limits[len(limits)-1] != 2000 || limits[12] <= 970 || limits[12] >= 2000 {
		t.Fatalf("output limits %v: want steps of ×1.05 from window 10 up to the stated 2000", limits)
	}

	t.Run("AResetForgetsTheTrigger", func(t *testing.T) {
		l, _, _ := newTestLedger(t, outGate(1000))
		mustAdmit(t, l, t0, outReq("a", 300))
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
		if got := l.BucketStatus(t0, "p", "m").OutputLimit; got != 291 {
			t.Fatalf("output limit %g, want stepDown below the reading 300", got)
		}
		l.Reset(t0, "p", "m")
		if st := l.BucketStatus(t0, "p", "m"); st.OutputLimit != 1000 || st.OutputTrigger != 0 {
			t.Fatalf("after a reset: %+v, want the configured 1000 and no trigger", st)
		}
	})
	t.Run("AFloorBelowTheLimit", func(t *testing.T) {
		// A 429 read while the window held nothing cannot stop the model.
		l, _, _ := newTestLedger(t, outGate(16_000))
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
		if got := l.BucketStatus(t0, "p", "m").OutputLimit; got != 1000 {
			t.Fatalf("output limit %g after a 429 read at 0, want the floor 16,000 ÷ 16", got)
		}
	})
}

func TestOutputTriggerKeptAndConverted(t *testing.T) {
	store := &MemoryLearnedStore{}
	c := outGate(0)
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, l, t0, outReq("a", 600))
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	// Another instance (or this one after a restart) on the same store.
	l2, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if got := l2.BucketStatus(t0, "p", "m").OutputTrigger; got != 582 {
		t.Fatalf("output trigger %g from the store, want 582 (stepDown below the reading 600)", got)
	}
	// A reload to a 30 s window: the same rate, half the tokens a window.
	c.Window, c.MaxWait = 30*time.Second, 60*time.Second
	if err := l2.Reconfigure(t0, c); err != nil {
		t.Fatal(err)
	}
	if got := l2.BucketStatus(t0, "p", "m").OutputTrigger; got != 291 {
		t.Fatalf("output trigger %g in a 30 s window, want 291", got)
	}
}

func TestOutputCountsFromTheSend(t *testing.T) {
	// A call sent half a window after its admission is in the provider's
	// output window from its send: it leaves the gate's a window after that.
	l, _, _ := newTestLedger(t, outGate(1000))
	r := outReq("a", 600)
	r.Sends = true
	tk := mustAdmit(t, l, t0, r)
	l.Sent(t0.Add(30*time.Second), tk)
	if got := l.BucketStatus(t0.Add(70*time.Second), "p", "m").OutputWindow; got != 600 {
		t.Fatalf("output window %d at 70 s, want the call sent at 30 s still in it (600)", got)
	}
	if got := l.BucketStatus(t0.Add(91*time.Second), "p", "m").OutputWindow; got != 0 {
		t.Fatalf("output window %d at 91 s, want it gone a window after its send", got)
	}
	// Sent a whole window after its admission: counted again from the send.
	tk2 := mustAdmit(t, l, t0.Add(100*time.Second), r)
	l.Sent(t0.Add(170*time.Second), tk2)
	if got := l.BucketStatus(t0.Add(171*time.Second), "p", "m").OutputWindow; got != 600 {
		t.Fatalf("output window %d just after a send a window late, want 600", got)
	}
	if err := l.Settle(t0.Add(172*time.Second), tk2, Usage{InputTokens: 10, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(172*time.Second), "p", "m").OutputWindow; got != 50 {
		t.Fatalf("output window %d after it settled at 50, want 50", got)
	}
}

func TestOutput429sReadTheBurstsFirst(t *testing.T) {
	l, _, _ := newTestLedger(t, outGate(0))
	var tks []Ticket
	for i := range 4 {
		tks = append(tks, mustAdmit(t, l, t0, outReq(string(rune('a'+i)), 400)))
	}
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	// Another call refused with it, released as a refused call is before its
	// 429 is told: it reads a window the refusal emptied. The first reading
	// stands.
	if err := l.Release(t0.Add(time.Millisecond), tks[3]); err != nil {
		t.Fatal(err)
	}
	l.RateLimitedBy(t0.Add(time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if got := l.BucketStatus(t0.Add(time.Millisecond), "p", "m").OutputTrigger; got != 1552 {
		t.Fatalf("output trigger %g after a second 429 in the burst, want the first reading's 1552", got)
	}
	// The next burst reads it again, up as well as down: a trigger kept from
	// a burst read over a nearly empty window would hold every later call
	// over budget (they go at once, none waits to step it back up).
	at := t0.Add(61 * time.Second)
	mustAdmit(t, l, at, outReq("big", 3000))
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if got := l.BucketStatus(at, "p", "m").OutputTrigger; got != 2910 {
		t.Fatalf("output trigger %g after the next burst read at 3000, want 2910", got)
	}
	at = at.Add(61 * time.Second)
	mustAdmit(t, l, at, outReq("a", 1000))
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	if got := l.BucketStatus(at, "p", "m").OutputTrigger; got != 970 {
		t.Fatalf("output trigger %g after a later burst read at 1000, want 970", got)
	}
}

func TestOutputUnseenKeepsTheReserve(t *testing.T) {
	// An answer without usage: its output is unknown, so the window keeps
	// its reserve.
	l, _, _ := newTestLedger(t, outGate(1000))
	tk := mustAdmit(t, l, t0, outReq("a", 400))
	if err := l.Settle(t0.Add(time.Second), tk, Usage{InputTokens: 10, OutputUnseen: true}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputWindow; got != 400 {
		t.Fatalf("output window %d after an answer without usage, want the reserve 400", got)
	}
	tk = mustAdmit(t, l, t0, outReq("b", 300))
	if err := l.Settle(t0.Add(time.Second), tk, Usage{InputTokens: 10, OutputTokens: 0}); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputWindow; got != 400 {
		t.Fatalf("output window %d after an answer that wrote nothing, want 400 (the first call's)", got)
	}
}

func TestOutputLimitSurvivesEviction(t *testing.T) {
	// A stated output limit is what the provider said: the bucket that holds
	// it is not dropped as idle.
	l, _, _ := newTestLedger(t, outGate(0))
	l.StateOutputLimit(t0, "p", "m", 6000)
	if got := l.Evict(t0.Add(time.Hour), time.Minute); len(got) != 0 {
		t.Fatalf("evicted %v, want the bucket with a stated output limit kept", got)
	}
	if got := l.BucketStatus(t0.Add(time.Hour), "p", "m").OutputStated; got != 6000 {
		t.Fatalf("stated output %g after the idle hour, want 6000", got)
	}
}

func TestStatedOutputFollowsTheWindow(t *testing.T) {
	// Stated per minute, read in the bucket's window: a reload to a 30 s
	// window halves it, once.
	c := outGate(0)
	l, _, _ := newTestLedger(t, c)
	l.StateOutputLimit(t0, "p", "m", 8000)
	c.Window, c.MaxWait = 30*time.Second, 60*time.Second
	if err := l.Reconfigure(t0, c); err != nil {
		t.Fatal(err)
	}
	l.StateOutputLimit(t0, "p", "m", 8000) // restated after the reload
	if got := l.BucketStatus(t0, "p", "m").OutputStated; got != 4000 {
		t.Fatalf("stated output %g in a 30 s window, want 4000", got)
	}
}

func TestOutput429ReadAsTheRefusedCallMetIt(t *testing.T) {
	// The 429 comes back a round trip after its call was admitted; the calls
	// admitted meanwhile were not in the provider's count when it refused.
	l, _, _ := newTestLedger(t, outGate(0))
	for i := range 3 {
		mustAdmit(t, l, t0, outReq(string(rune('a'+i)), 400))
	}
	refused := mustAdmit(t, l, t0.Add(time.Millisecond), outReq("x", 400))
	mustAdmit(t, l, t0.Add(2*time.Millisecond), outReq("d", 400))
	mustAdmit(t, l, t0.Add(2*time.Millisecond), outReq("e", 400))
	if err := l.Release(t0.Add(3*time.Millisecond), refused); err != nil {
		t.Fatal(err)
	}
	l.RateLimitedBy(t0.Add(3*time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens, Admitted: t0.Add(time.Millisecond)})
	if got := l.BucketStatus(t0.Add(3*time.Millisecond), "p", "m").OutputTrigger; got != 1164 {
		t.Fatalf("output trigger %g, want 1164: stepDown below the window the refused call met (1200), without the two admitted after it", got)
	}
}

func TestOutput429LeavesOutWhatOnlyTheGuardKeeps(t *testing.T) {
	// The count guard keeps a call a little past the window; the provider had
	// dropped it when it refused, and the reading leaves it out.
	c := outGate(4000)  // above what the test spends: the status shows the window
	c.CountGuard = 0.01 // 600 ms at 60 s
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, outReq("a", 400))
	at := t0.Add(60*time.Second + 300*time.Millisecond)
	mustAdmit(t, l, at, outReq("b", 400))
	if got := l.BucketStatus(at, "p", "m").OutputWindow; got != 800 {
		t.Fatalf("output window %d, want the guard still keeping the first call (800)", got)
	}
	l.RateLimitedBy(at.Add(10*time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens, Admitted: at.Add(5 * time.Millisecond)})
	if got := l.BucketStatus(at.Add(10*time.Millisecond), "p", "m").OutputTrigger; got != 388 {
		t.Fatalf("output trigger %g, want 388: stepDown below the second call alone (400)", got)
	}
}

func TestOutputWindowFollowsTheCallsAge(t *testing.T) {
	// A call without max_tokens reserves the plain mean output; one still
	// running long after most have ended has written at least what its age
	// says, in the output window as in the token window (aging.go).
	l, trained := agingLedger(t, func(c *Config) { c.Defaults.OTPM = 1 << 30 })
	now := trained.Add(2 * time.Minute) // the training calls have left the window
	fresh := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10})
	if got := l.BucketStatus(now, "p", "m").OutputWindow; got != fresh.ReservedOutput {
		t.Fatalf("output window %d, want the fresh call's reserve %d", got, fresh.ReservedOutput)
	}
	later := now.Add(30500 * time.Millisecond)
	l.Submit(later, Request{Provider: "p", Model: "m", InputTokens: 10}) // any admission ages the calls in flight
	if got := l.BucketStatus(later, "p", "m").OutputWindow; got < 3000+400 {
		t.Fatalf("output window %d after 30.5 s in flight, want the first call above 3,000", got)
	}
}

func TestOutputKeepsTheReserveSettledElsewhere(t *testing.T) {
	// Another instance settled the call with its whole cost: no output share
	// can be told from it, and the reserve stays.
	l, _, _ := newTestLedger(t, outGate(1000))
	tk := mustAdmit(t, l, t0, outReq("a", 400))
	if err := l.SettledElsewhere(t0.Add(time.Second), tk, 100); err != nil {
		t.Fatal(err)
	}
	if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputWindow; got != 400 {
		t.Fatalf("output window %d after a settle elsewhere at 100 tokens, want the reserve 400", got)
	}
}

func TestOutputRelaxWaitsOutACooldown(t *testing.T) {
	c := outGate(2000)
	c.Window, c.MaxWait = 10*time.Second, 200*time.Second
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, outReq("a", 1000))
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	at := t0.Add(11 * c.Window) // past outputRelaxWindows
	mustAdmit(t, l, at, outReq("b", 900))
	// A 429 about tokens cools the model for 60 s: a call the output budget
	// holds meanwhile does not step the trigger (it would, outside one).
	l.RateLimitedBy(at.Add(time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: 60 * time.Second, Axis: engine.AxisTokens})
	heldBack(l, at.Add(2*time.Second), outReq("c", 500))
	if got := l.BucketStatus(at.Add(2*time.Second), "p", "m").OutputLimit; got != 970 {
		t.Fatalf("output limit %g in a cooldown, want the trigger 970 unmoved", got)
	}
}

// refutedOTPM is the configured output limit the model's record says a 429
// refuted (0: none).
func refutedOTPM(l *Ledger, now time.Time) int {
	b := l.lockedBucketFor("p", "m", now)
	defer b.mu.Unlock()
	return b.out.refutedOTPM
}

// A configured output limit the provider refuses at a step toward it, where
// the gate had filled the window to the level it held, is wrong, not another
// client's spend: the trigger read there is re-probed as the token trigger is,
// once per triggerReprobeWindows, rather than stepped back up toward the
// configured figure from outputRelaxWindows on — which met the limit again
// each time (a configured otpm twice the truth, in the simulator: 11–13 429s
// an hour, 3–5 now). A first 429 may be another client's: its trigger still
// steps back up from window 10 (so does one under a stated limit:
// TestStatedOutputLimit). The record keeps the figure refuted, and a reload to
// another figure steps toward it again.
func TestOutputTriggerRefutedAtAStepIsNotRelaxed(t *testing.T) {
	c := outGate(2000)
	c.Window, c.MaxWait = 10*time.Second, 200*time.Second
	store := &MemoryLearnedStore{}
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	at := t0
	windows := func(n int) (limits []float64) {
		for range n {
			at = at.Add(c.Window)
			mustAdmit(t, l, at, outReq("a", int(l.BucketStatus(at, "p", "m").OutputBudget)))
			heldBack(l, at, outReq("b", 100))
			limits = append(limits, l.BucketStatus(at, "p", "m").OutputLimit)
		}
		return limits
	}
	refused := func() {
		at = at.Add(time.Second)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
	}
	mustAdmit(t, l, at, outReq("a", 1900))
	refused() // 1,900 of 2,000: the gate's own level, but no step of its own refused
	first := windows(11)
	if first[7] != 1843 || first[10] <= 1843 {
		t.Fatalf("output limits %v after a first 429 at 1,900: want 0.97 × 1,900 stepped back up from window 10", first)
	}
	refused() // a second of the step: the window filled to it
	trig := l.BucketStatus(at, "p", "m").OutputLimit
	if later := windows(2); later[1] != trig {
		t.Fatalf("output limits %v after the step was refused at %g: want it to stand", later, trig)
	}
	refused() // a later 429, no step to answer: read again, the figure still refuted
	trig = l.BucketStatus(at, "p", "m").OutputLimit
	if later := windows(30); later[0] != trig || later[29] != trig {
		t.Fatalf("output limits %v after a later 429 read %g: want it to stand for 30 windows", later, trig)
	}
	l2, err := NewLedger(c, engine.NewFakeClock(at), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if restored := refutedOTPM(l2, at); restored != 2000 {
		t.Fatalf("restored from the learned store, the figure refuted is %d, want the configured 2000", restored)
	}
	c.Defaults.OTPM = 3000 // the user's new figure: stepped toward from window 10 again
	if err := l.Reconfigure(at, c); err != nil {
		t.Fatal(err)
	}
	if again := windows(12); again[11] <= trig {
		t.Fatalf("output limits %v after a reload to otpm 3000: want steps up from %g", again, trig)
	}

	// stepped is a ledger on c with otpm 2,000 whose first 429 came at 1,000,
	// each window then filled to its budget and a call held back a
	// millisecond later: at window 10 (at), a step up.
	stepped := func(t *testing.T) (l *Ledger, at time.Time) {
		t.Helper()
		c := c
		c.Defaults.OTPM = 2000
		l, _, _ = newTestLedger(t, c)
		mustAdmit(t, l, t0, outReq("a", 1000))
		l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens})
		at = t0
		for range 10 {
			at = at.Add(c.Window)
			mustAdmit(t, l, at, outReq("a", int(l.BucketStatus(at, "p", "m").OutputBudget))) // the window full
			heldBack(l, at.Add(time.Millisecond), outReq("b", 100))
		}
		if got := l.BucketStatus(at, "p", "m").OutputLimit; got <= 970 {
			t.Fatalf("output limit %g: the test wants a step up at window 10", got)
		}
		return l, at
	}
	t.Run("AStepAnsweredOverAnEmptyWindow", func(t *testing.T) {
		// Refused after a step, for a call admitted after it — but into a
		// window that held little: the gate's level was not what the
		// provider refused. It steps back up again.
		l, at := stepped(t)
		late := at.Add(c.Window).Add(500 * time.Microsecond) // the window's fill has left; the step was 9.9995 s ago
		mustAdmit(t, l, late, outReq("c", 100))
		l.RateLimitedBy(late.Add(300*time.Microsecond), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens, Admitted: late})
		if got := refutedOTPM(l, at); got != 0 {
			t.Fatalf("a 429 read over a window holding 100 refuted the configured figure (%d)", got)
		}
	})
	t.Run("ACallAdmittedBeforeTheStep", func(t *testing.T) {
		// Refused right after a step, the window full — but the refused
		// call was admitted before the step, at the level that held: the
		// step let nothing into the provider's count, and the 429 says what
		// a first one says. It steps back up again.
		l, at := stepped(t)
		l.RateLimitedBy(at.Add(50*time.Millisecond), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisOutputTokens, Admitted: at})
		if got := refutedOTPM(l, at); got != 0 {
			t.Fatalf("a 429 for a call admitted before the step refuted the configured figure (%d)", got)
		}
	})
}

// A call without max_tokens reserves the output it is expected to write, and
// the provider counts what it writes: the output window keeps room for the
// spread of those in flight, one margin for all of them as the token window
// does. A call that reserved its max_tokens adds no spread of its own. (In the
// simulator, 32 sessions without max_tokens under an output limit: the oracle,
// told the limit, 36 429s an hour without the margin, none with; seed 1.)
func TestOutputKeepsRoomForTheSpreadOfExpectedOutputs(t *testing.T) {
	c := outGate(3000)
	c.MarginSigmas = 2
	c.Window, c.MaxWait = 10*time.Second, 20*time.Second
	l, _, _ := newTestLedger(t, c)
	free := func(s string) Request { return Request{Provider: "p", Model: "m", Session: s, InputTokens: 10} }
	// Outputs of 100 and 900 in turn, one a window: a mean of 500, a spread
	// of 400.
	for i := range 16 {
		at := t0.Add(time.Duration(i) * c.Window)
		tk := mustAdmit(t, l, at, free("warm"))
		if err := l.Settle(at.Add(time.Millisecond), tk, Usage{InputTokens: 10, OutputTokens: int64(100 + 800*(i%2))}); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(20 * c.Window) // the window is empty again
	if st := l.BucketStatus(at, "p", "m"); st.OutputReserve != 500 {
		t.Fatalf("a call without max_tokens reserves %d, want the mean output 500", st.OutputReserve)
	}
	// The k-th call needs its 500 and 2σ of k outputs' spread (800√k): the
	// fourth, 500 + 1,600 beside the 1,500 in the window, waits — without
	// the margin, six would go.
	for _, s := range []string{"a", "b", "c"} {
		mustAdmit(t, l, at, free(s))
	}
	if _, w := l.Submit(at, free("d")); w == nil || w.reason != "otpm" {
		t.Fatalf("a fourth call without max_tokens went, or waited for something else (%v)", w)
	} else {
		w.Cancel(at)
	}
	// 100 of max_tokens and the three in flight's margin (800√3 = 1,386)
	// fit the 1,500 left; with a spread of its own (800√4) they would not.
	mustAdmit(t, l, at, outReq("e", 100))

	t.Run("AnInputEstimateAddsNone", func(t *testing.T) {
		// Inputs estimated from the body's size carry a spread too, in the
		// token window's margin; the output window's leaves it out.
		c := outGate(2000)
		c.MarginSigmas = 2
		l, _, _ := newTestLedger(t, c)
		sized := func(s string, out int) Request {
			return Request{Provider: "p", Model: "m", Session: s, InputBytes: 4000, MaxTokens: out}
		}
		for i := range 16 { // inputs off by 40% either way
			at := t0.Add(time.Duration(i) * c.Window)
			tk := mustAdmit(t, l, at, sized("warm", 10))
			real := tk.Reserved - 10
			real += real * int64(40-80*(i%2)) / 100
			if err := l.Settle(at.Add(time.Millisecond), tk, Usage{InputTokens: real, OutputTokens: 10}); err != nil {
				t.Fatal(err)
			}
		}
		at := t0.Add(20 * c.Window)
		mustAdmit(t, l, at, sized("a", 1000))
		mustAdmit(t, l, at, sized("b", 1000)) // exactly the output budget: no margin for an input's spread
	})
}

// A 429 whose words name the output limit is read at no more than that
// figure: the gate's window counts calls whose answers it has not read yet at
// their max_tokens, and read as it is, the trigger lies above the limit. A
// reading below the figure (what another client leaves) stands.
func TestOutputLimitInWordsCapsTheReading(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inFlight int     // max_tokens held in flight when the 429 comes
		want     float64 // the output limit after it
	}{
		{"ReadingAboveTheFigure", 1200, 1000}, // 1,000 a minute: the 60 s window
		{"ReadingBelowIt", 600, 582},          // stepDown below the reading of 600
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTestLedger(t, outGate(0))
			mustAdmit(t, l, t0, outReq("a", tc.inFlight))
			l.RateLimitedBy(t0.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Second,
				Axis: engine.AxisOutputTokens, OutputInWords: 1_000})
			if got := l.BucketStatus(t0.Add(time.Second), "p", "m").OutputLimit; got != tc.want {
				t.Fatalf("output limit %g after the 429, want %g", got, tc.want)
			}
		})
	}
}
