package gate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// countModeSwitches returns the count-mode steps the ledger emitted.
func countModeSwitches(ev *eventLog) []string {
	var out []string
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "count-mode" {
			out = append(out, e.Reason)
		}
	}
	return out
}

// servedThenRefused builds the history the refutation rule reads: one call
// served early (it seeds the expected output), three more admitted at 2 s and
// served, settling at 50 s, one of 500 admitted a second before refusedAt and
// still in flight, and a refused call of 200 at refusedAt. The three were
// admitted with the arrival view at 200, 400 and 600 and the completion view at
// 200: the provider accepted 800 in the arrival view and 400 in the completion
// view.
func servedThenRefused(t *testing.T, l *Ledger, refusedAt time.Duration) {
	t.Helper()
	servedThenRefusedWith(t, l, refusedAt, nil)
}

// servedThenRefusedWith is servedThenRefused with beforeThe429 run just before
// the 429 is reported.
func servedThenRefusedWith(t *testing.T, l *Ledger, refusedAt time.Duration, beforeThe429 func()) {
	t.Helper()
	call := func(s string) Request {
		return Request{Provider: "p", Model: "m", Session: s, InputTokens: 100, MaxTokens: 100}
	}
	first := mustAdmit(t, l, t0, call("a"))
	if err := l.Settle(t0.Add(time.Second), first, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	var tks []Ticket
	for _, s := range []string{"b", "c", "d"} {
		tks = append(tks, mustAdmit(t, l, t0.Add(2*time.Second), call(s)))
	}
	for _, tk := range tks {
		if err := l.Settle(t0.Add(50*time.Second), tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	// One call of 500 in flight since just before the 429, so that the
	// completion view (600) does not read 25% above the arrival view (500): the
	// strong vote stays out of it, and only the refutation can switch. (With the
	// view configured as completion it does not fit, and is withdrawn.)
	at := t0.Add(refusedAt)
	if _, w := l.Submit(at.Add(-time.Second), Request{Provider: "p", Model: "m", Session: "f", InputTokens: 400, MaxTokens: 100}); w != nil {
		w.Cancel(at.Add(-time.Second))
	}
	refused := mustAdmit(t, l, at, call("e"))
	_ = l.Release(at, refused)
	if beforeThe429 != nil {
		beforeThe429()
	}
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: refused.Reserved})
}

// One 429 that the arrival view cannot explain — the provider refused 200 on an
// arrival window of 500 after serving 800 in it — while the completion view can
// (600 settled + 200 over a limit it served 400 under) switches the view at once.
// The weak vote alone (completion reads ≥ 5% more) needs two such 429s, and
// 600 ÷ 500 is short of the strong vote's 1.25.
func TestRefutedArrivalViewSwitchesAtOnce(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	// At 63 s the arrival window holds only the call of 500 admitted at 62 s (the
	// others were admitted at 0 and 2 s); the completion window holds the three
	// settled at 50 s.
	servedThenRefused(t, l, 63*time.Second)
	if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
		t.Fatalf("count-mode steps %v, want one switch to at-completion", got)
	}
	if st := l.BucketStatus(t0.Add(63*time.Second), "p", "m"); st.CountsAt != "completion" {
		t.Fatalf("counts at %q, want completion", st.CountsAt)
	}
}

// A 429 that refutes the arrival view but that the completion view reads far
// below the gate's level (as outside traffic on the key looks) does not switch:
// the new view would have to explain the 429 as the gate's own excess.
func TestRefutationNeedsAPlausibleOtherView(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	c.Defaults.TPM = 2000 // the level: 0.8 × 2000 = 1600, far above 600 + 200
	l, _, ev := newTestLedger(t, c)
	servedThenRefused(t, l, 63*time.Second)
	if got := countModeSwitches(ev); len(got) != 0 {
		t.Fatalf("count-mode steps %v, want none", got)
	}
}

// When the completion view was refuted within the last refuteMemory windows —
// the provider served a level there and later refused below it, as a token
// bucket or fixed windows do — a later refutation of the arrival view does not
// switch to it.
func TestRecentlyRefutedCompletionViewIsNotAdopted(t *testing.T) {
	for _, tc := range []struct {
		name         string
		refuteDone   bool
		arrivalAgain bool
		aloneBefore  bool // one arrival-alone refutation counted before the first 429
		want         int  // count-mode switches
	}{
		{"Refuted", true, false, false, 0},
		{"NotRefuted", false, false, false, 1},
		// The arrival view refuted alone again, a window or more later, with
		// nothing refuting the completion view alone in between: the arrival
		// view is the wrong one, whatever refuted both before.
		{"RefutedThenArrivalTwice", true, true, false, 1},
		// An arrival-alone refutation from before the completion view was
		// refuted does not count toward lifting that refutation's memory.
		{"ArrivalAloneBeforeTheRefutation", true, false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := learnGate()
			c.Defaults.RPM = 100
			l, _, ev := newTestLedger(t, c)
			call := func(s string) Request {
				return Request{Provider: "p", Model: "m", Session: s, InputTokens: 100, MaxTokens: 100}
			}
			settle := func(at time.Duration, tk Ticket) {
				t.Helper()
				if err := l.Settle(t0.Add(at), tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
					t.Fatal(err)
				}
			}
			// 800 settled at 1 s.
			for _, s := range []string{"a", "b", "c", "d"} {
				settle(time.Second, mustAdmit(t, l, t0, call(s)))
			}
			// Served at 30 s with 800 settled: the completion view accepted 1000.
			settle(31*time.Second, mustAdmit(t, l, t0.Add(30*time.Second), call("x")))
			// Three calls in flight from 61.5 s: the arrival view holds 800 (the
			// call of 30 s and these), the completion view 200.
			at := t0.Add(61500 * time.Millisecond)
			var open []Ticket
			for _, s := range []string{"e", "f", "g"} {
				open = append(open, mustAdmit(t, l, at, call(s)))
			}
			if tc.aloneBefore {
				b := l.bucketFor("p", "m", t0)
				b.mu.Lock()
				b.arrivalAlone, b.arrivalAloneAt = 1, t0
				b.mu.Unlock()
			}
			if tc.refuteDone {
				// Refused 200 on 200 settled: below the 1000 the completion view
				// served. On 800 in the arrival view it is plausible there.
				l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: 200})
			}
			for _, tk := range open {
				settle(150*time.Second, tk)
			}
			// At 182 s the arrival window is empty (it served 800 at 61.5 s), the
			// completion window holds the 600 settled at 150 s: refused 200 here
			// refutes the arrival view, and the completion view explains it.
			at = t0.Add(182 * time.Second)
			l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: 200})
			if tc.arrivalAgain {
				// The same again two windows on: three calls admitted at 190 s
				// and settled at 280 s, then 200 refused at 311 s on an empty
				// arrival window and the 600 settled in the completion one.
				open = open[:0]
				for _, s := range []string{"e2", "f2", "g2"} {
					open = append(open, mustAdmit(t, l, t0.Add(190*time.Second), call(s)))
				}
				for _, tk := range open {
					settle(280*time.Second, tk)
				}
				at = t0.Add(311 * time.Second)
				l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: 200})
			}
			if got := countModeSwitches(ev); len(got) != tc.want {
				t.Fatalf("count-mode steps %v, want %d", got, tc.want)
			}
		})
	}
}

// The guard keeps entries past the provider's window; the views the count-mode
// vote compares leave them out. The tail follows settlements and expiry.
func TestWindowTailIsWhatOnlyTheGuardHolds(t *testing.T) {
	w := newSlidingWindow(61 * time.Second)
	w.inner = 60 * time.Second
	a := w.add(t0, 100, 50, false)
	w.add(t0.Add(500*time.Millisecond), 10, 0, false)
	w.add(t0.Add(2*time.Second), 1, 0, false)
	w.expire(t0.Add(60 * time.Second))
	if got := w.tail(); got != 100 {
		t.Fatalf("tail %d at 60 s, want the entry of 0 s (100)", got)
	}
	w.settle(a, 70)
	w.expire(t0.Add(60600 * time.Millisecond))
	if got := w.tail(); got != 80 {
		t.Fatalf("tail %d at 60.6 s, want 70 (settled) + 10", got)
	}
	w.expire(t0.Add(61200 * time.Millisecond)) // the entry of 0 s leaves the guard too
	if got, tokens := w.tail(), w.tokens; got != 10 || tokens != 11 {
		t.Fatalf("tail %d of %d at 61.2 s, want 10 of 11", got, tokens)
	}
}

// A 429 that refutes the view in use — the provider refused below a level it
// served within two windows, as a token bucket does once the reserve a cooldown
// refilled is spent — also drops the clean record to the new trigger: the clean
// windows above it were that reserve, and relaxing back up to them would cost
// the next 429 burst. So does a 429 read within a tenth of the clean record.
func TestRefuting429HoldsTheTriggerDown(t *testing.T) {
	span := time.Minute
	for _, tc := range []struct {
		name    string
		reading float64
		refuted bool
		relax   bool
	}{
		{"Refuted", 850, true, false},
		{"Consistent", 850, false, true},
		// Within a tenth of the clean record: the record overstated.
		{"NearTheCleanRecord", 920, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLearner(1000, true, t0)
			l.cleanMax = 1000 // a window at 1000 passed clean
			l.on429(t0.Add(10*time.Second), tc.reading, 0, tc.refuted, false, span)
			if l.trigger != tc.reading {
				t.Fatalf("trigger %v, want the reading %v", l.trigger, tc.reading)
			}
			_, moved := l.onTokenBlocked(t0.Add(10*time.Second+span+span/2), span, true)
			if moved != tc.relax {
				t.Fatalf("relaxed %v (trigger %v, clean record %v), want %v", moved, l.trigger, l.cleanMax, tc.relax)
			}
		})
	}
}

// The first trigger (here from a start at twice the truth) is one reading and
// reads low; once it has bound the budget for two windows without a 429 it
// gets one step up. A 429 answering the step takes it back, and there is no
// second fast step: only the slow re-probe moves a trigger after that.
func TestFirstTriggerGetsOneProbe(t *testing.T) {
	span := time.Minute
	l := newLearner(2000, true, t0)
	// The first trigger; the refused call reached 100 above it.
	l.on429(t0.Add(30*time.Second), 900, 100, false, false, span)
	if l.trigger != 900 || l.quota != 900 {
		t.Fatalf("trigger %v quota %v, want both at the reading 900", l.trigger, l.quota)
	}
	// A window after it: too soon.
	if _, moved := l.onTokenBlocked(t0.Add(30*time.Second+span), span, true); moved {
		t.Fatalf("probed a window after the first trigger (trigger %v)", l.trigger)
	}
	// Two windows after it: one step.
	at := t0.Add(30*time.Second + 2*span)
	if st, moved := l.onTokenBlocked(at, span, true); !moved || l.trigger != 945 {
		t.Fatalf("step %+v moved %v, trigger %v: want one step to 945", st, moved, l.trigger)
	}
	// Refused within the step's two windows: back to 900.
	l.on429(at.Add(10*time.Second), 930, 0, false, false, span)
	if l.trigger != 900 {
		t.Fatalf("trigger %v after the step was refused, want 900", l.trigger)
	}
	// No second fast step, however long it binds.
	for w := 3; w < 20; w++ {
		if _, moved := l.onTokenBlocked(at.Add(time.Duration(w)*span), span, true); moved {
			t.Fatalf("window %d: probed again (trigger %v)", w, l.trigger)
		}
	}
}

// A first trigger whose bracket is narrow — the refused call and the reading's
// spread reach less than one step above it — is already as close as a step
// would get: no fast step.
func TestNarrowFirstTriggerGetsNoStep(t *testing.T) {
	span := time.Minute
	l := newLearner(2000, true, t0)
	l.on429(t0.Add(30*time.Second), 900, 40, false, false, span) // 40 < 5% of 900
	for w := 1; w < 20; w++ {
		if st, moved := l.onTokenBlocked(t0.Add(30*time.Second+time.Duration(w)*span), span, true); moved {
			t.Fatalf("window %d: the trigger moved (%+v)", w, st)
		}
	}
}

// The 429 that switches the view to completion reads the provider's count of
// completions, and its trigger is the bottom of the bracket [reading, reading
// + the refused call] (or a level served inside it): in the simulator the
// completion-counting provider at the truth ended the hour 4–10% under its
// limit in 8 of 24 runs. So that trigger gets the first trigger's one step too
// (the bucket reopens it for the switching 429: TestSwitchToCompletionReopensTheStep)
// — only from a level the provider served in that view (such a provider decides
// on the completions alone and may hold more than its limit once the calls in
// flight complete, so a reading above every served level is no floor), and
// only when the step stays inside the bracket (past it, the refused call's
// estimate says the provider refuses; the same holds for any first trigger).
// A later 429 in the new view gets no step.
func TestSwitchTriggerGetsOneStepFromAServedLevel(t *testing.T) {
	span := time.Minute
	const (
		atThis  = iota + 1 // this 429 switched the view to completion
		earlier            // another 429 did (a request 429's vote): this one is a later 429 in the new view
	)
	for _, tc := range []struct {
		name                    string
		switched                int // 0: no switch (the learner's first trigger)
		reading, slack, served  float64
		clean                   float64 // a clean window's reading (0: none)
		wantTrigger, wantStepTo float64 // wantStepTo 0: no step
	}{
		{"served at the reading, the step inside the bracket", atThis, 900, 100, 900, 0, 900, 945},
		{"read above every level served", atThis, 900, 100, 850, 0, 900, 0},
		{"a served level whose step leaves the bracket", atThis, 900, 100, 960, 0, 960, 0},
		{"narrow bracket", atThis, 900, 40, 900, 0, 900, 0},
		{"a later 429 after another switched the view", earlier, 900, 100, 0, 0, 900, 0},
		// Not switched: the first trigger's own rule, and the bracket's top bounds it too.
		{"first trigger, the step inside the bracket", 0, 900, 100, 0, 0, 900, 945},
		{"first trigger lifted by the clean record past one step under the top", 0, 900, 100, 0, 990, 990, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLearner(1000, true, t0) // a switch keeps 900 of it as the clean record: nothing to relax toward
			if tc.switched > 0 {
				l.forgetReadings()
			}
			if tc.switched == atThis { // as switchViewLocked and rateLimitedLocked set them
				l.toCompletion, l.stepAtSwitch, l.servedInView = true, true, tc.served
			}
			if tc.clean > 0 {
				l.cleanMax = tc.clean
			}
			l.on429(t0.Add(30*time.Second), tc.reading, tc.slack, false, false, span)
			l.toCompletion, l.stepAtSwitch, l.servedInView = false, false, 0 // they describe this 429 only
			if l.trigger != tc.wantTrigger {
				t.Fatalf("trigger %v, want %v", l.trigger, tc.wantTrigger)
			}
			at := t0.Add(30*time.Second + 2*span)
			st, moved := l.onTokenBlocked(at, span, true)
			switch {
			case tc.wantStepTo == 0 && moved:
				t.Fatalf("stepped: %+v", st)
			case tc.wantStepTo > 0 && (!moved || math.Abs(l.trigger-tc.wantStepTo) > 1e-9):
				t.Fatalf("step %+v (moved %v), trigger %v: want one step to %v", st, moved, l.trigger, tc.wantStepTo)
			}
		})
	}
}

// A switch to completion reopens the first trigger's one step (used, most
// often, by the arrival view's first 429) for the switching 429 alone: its
// trigger is a reading of the new view (TestSwitchTriggerGetsOneStepFromAServedLevel).
// Not on a switch back to arrival, and not while another client is read
// spending the key: its calls land inside the bracket too (with rate-limit
// headers, over 36 seeds of the matrix, the step without this condition took
// 37 more 429s in the completion model's runs with another client).
func TestSwitchToCompletionReopensTheStep(t *testing.T) {
	for _, tc := range []struct {
		name         string
		toCompletion bool
		others       bool
		wantStep     bool
	}{
		{"to completion", true, false, true},
		{"to arrival", false, false, false},
		{"to completion, another client spending", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTestLedger(t, learnGate())
			now := t0.Add(time.Minute)
			b := l.bucketFor("p", "m", now)
			b.mu.Lock()
			defer b.mu.Unlock()
			b.learn.firstUsed, b.atCompletion = true, !tc.toCompletion
			if tc.others {
				b.learn.stated = 10000
				b.outside.others = othersSpend{mean: 1000, variance: 100, weight: 1, on: true, at: now}
				if !b.othersSpendingLocked(now) {
					t.Fatal("the fixture's other client is not read as spending")
				}
			}
			b.switchViewLocked(now, tc.toCompletion)
			if b.learn.stepAtSwitch != tc.wantStep || !b.learn.firstUsed {
				t.Fatalf("after the switch: stepAtSwitch %v (want %v), firstUsed %v (want true: the step is this 429's only)", b.learn.stepAtSwitch, tc.wantStep, b.learn.firstUsed)
			}
		})
	}
}

// slowStart takes n probe steps of a learner's slow start, one a window from t0
// + span: 1,000 → 1,050 → 1,158 → 1,340 from a start of 1,000.
func slowStart(t *testing.T, l *learner, n int, span time.Duration) {
	t.Helper()
	for w := 1; w <= n; w++ {
		if st, moved := l.onTokenBlocked(t0.Add(time.Duration(w)*span), span, true); !moved || st.Kind != "probe" {
			t.Fatalf("no probe: %+v", st)
		}
	}
}

// A first trigger set when a probe of the quota was refused is no single
// reading (the level below the step passed): it gets no fast step — unless its
// bracket is a tenth of the reading or wider (revertProbeBracket), where the
// refused call says little of where above the reading the limit lies, and the
// step stays in the bracket and clearly under the refused level (revertMayStep).
func TestProbeRevertTriggerGetsAStepOnlyOnAWideBracket(t *testing.T) {
	for _, tc := range []struct {
		probes         int     // the slow start's steps before the 429: 1,000 → 1,050 → 1,158 → 1,340
		clean          float64 // the clean record, which lifts the trigger inside the bracket
		reading, slack float64
		steps          int // relax steps of the trigger over the next 17 windows
	}{
		{2, 0, 1000, 60, 0},  // 60 < 10% of 1,000
		{2, 0, 1000, 500, 1}, // wide, and 1,000 × 1.05 under 0.97 of the refused 1,158
		{2, 0, 1110, 500, 0}, // wide, but 1,110 × 1.05 is above the refused level
		// Wide, under the refused 1,340, but the trigger (the clean record, 1,100)
		// × 1.05 is above the bracket's top, 1,110.
		{3, 1100, 1000, 110, 0},
		// Started at the truth: the step to 1,050 is refused, the trigger is the
		// start that held, and a step from it is the refused level again.
		{1, 0, 990, 500, 0},
	} {
		span := time.Minute
		l := newLearner(1000, true, t0)
		l.cleanMax = tc.clean
		slowStart(t, &l, tc.probes, span) // 1,000 → 1,050 → 1,158
		at := time.Duration(tc.probes)*span + 10*time.Second
		l.on429(t0.Add(at), tc.reading, tc.slack, false, false, span)
		steps := 0
		for w := 3; w < 20; w++ {
			if st, moved := l.onTokenBlocked(t0.Add(time.Duration(w)*span+10*time.Second), span, true); moved && st.Kind == "relax" {
				steps++
			}
		}
		if steps != tc.steps {
			t.Fatalf("%d probes, bracket %.0f over a reading of %.0f: %d steps of the trigger (%.0f), want %d", tc.probes, tc.slack, tc.reading, steps, l.trigger, tc.steps)
		}
	}
}

// A user who knows how the provider counts says so (countsAt): the bucket uses
// that view from its first call, and 429s never switch it — not even one that
// refutes it, which would switch a learning bucket at once. A reset keeps it.
func TestConfiguredCountView(t *testing.T) {
	for _, tc := range []struct {
		countsAt string
		want     string // the view after the refuting 429 and after a reset
		switches int
	}{
		{"", "completion", 1}, // learned: the refutation switches it
		{CountsAtArrival, "arrival", 0},
		{CountsAtCompletion, "completion", 0},
	} {
		t.Run("countsAt="+tc.countsAt, func(t *testing.T) {
			c := learnGate()
			c.Defaults.RPM = 100
			c.Models = map[string]ModelLimits{"p/m": {CountsAt: tc.countsAt}}
			l, _, ev := newTestLedger(t, c)
			first := "arrival"
			if tc.countsAt == CountsAtCompletion {
				first = "completion"
			}
			if st := l.BucketStatus(t0, "p", "m"); st.CountsAt != first {
				t.Fatalf("counts at %q before any 429, want %q", st.CountsAt, first)
			}
			servedThenRefused(t, l, 63*time.Second) // refutes the arrival view
			if got := countModeSwitches(ev); len(got) != tc.switches {
				t.Fatalf("count-mode steps %v, want %d", got, tc.switches)
			}
			at := t0.Add(63 * time.Second)
			if st := l.BucketStatus(at, "p", "m"); st.CountsAt != tc.want {
				t.Fatalf("counts at %q after the 429, want %q", st.CountsAt, tc.want)
			}
			l.Reset(at, "p", "m")
			want := first // a reset forgets a learned view, not a configured one
			if st := l.BucketStatus(at, "p", "m"); st.CountsAt != want {
				t.Fatalf("counts at %q after a reset, want %q", st.CountsAt, want)
			}
		})
	}
}

// A configured completion view leaves the calls in flight out of the window: a
// call is admitted while another of the whole budget is still in flight.
func TestConfiguredCompletionViewAdmitsPastCallsInFlight(t *testing.T) {
	c := testGate()
	c.Defaults.RPM = 100
	c.Defaults.CountsAt = CountsAtCompletion
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 900, MaxTokens: 100}) // the whole 1000, in flight
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 400, MaxTokens: 100})
}

func TestConfigRefusesAnUnknownCountView(t *testing.T) {
	c := testGate()
	c.Models = map[string]ModelLimits{"p/m": {CountsAt: "sometimes"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `gate.models["p/m"].countsAt`) {
		t.Fatalf("err = %v, want one naming gate.models[\"p/m\"].countsAt", err)
	}
}

// A reload that sets the view the bucket does not use switches it and forgets
// the readings of the old one (they measured the other thing); a model's
// countsAt: learn takes it back to learning under defaults that set a view.
func TestReloadedCountView(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	mustAdmit(t, l, t0, req(500))
	l.RateLimited(t0, "p", "m", time.Millisecond) // a trigger, read in the arrival view
	if _, trig := quota(l, t0); trig <= 0 {
		t.Fatal("no trigger to forget")
	}
	c.Defaults.CountsAt = CountsAtCompletion
	if err := l.Reconfigure(t0, c); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	if st := l.BucketStatus(at, "p", "m"); st.CountsAt != "completion" || st.Trigger != 0 {
		t.Fatalf("after the reload: counts at %q, trigger %v; want completion and the arrival reading forgotten", st.CountsAt, st.Trigger)
	}
	// A model that opts back into learning keeps the view it has, and votes
	// again: a fresh ledger with the same config switches on a refutation.
	c.Models = map[string]ModelLimits{"p/m": {CountsAt: CountsAtLearn}}
	if err := l.Reconfigure(at, c); err != nil {
		t.Fatal(err)
	}
	if st := l.BucketStatus(at, "p", "m"); st.CountsAt != "completion" {
		t.Fatalf("after countsAt: learn, counts at %q, want the completion view it had", st.CountsAt)
	}
	if got := countModeSwitches(ev); len(got) != 0 {
		t.Fatalf("count-mode steps %v: a configured view is not a learned switch", got)
	}
	l2, _, ev2 := newTestLedger(t, c)
	servedThenRefused(t, l2, 63*time.Second)
	if got := countModeSwitches(ev2); len(got) != 1 {
		t.Fatalf("count-mode steps %v under countsAt: learn, want the refutation's switch", got)
	}
}

// Two 429s that the completion view reads 7.5% above the arrival view, neither
// refuted, switch the view: a weak vote needs 5% (weakVoteRatio), and two net
// votes switch (switchVotes). With 10% and three votes, as before, these cast
// none and the view stayed.
func TestTwoWeakVotesSwitch(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	settle := func(at time.Duration, tk Ticket, in, out int64) {
		t.Helper()
		if err := l.Settle(t0.Add(at), tk, Usage{InputTokens: in, OutputTokens: out}); err != nil {
			t.Fatal(err)
		}
	}
	call := func(s string) Request {
		return Request{Provider: "p", Model: "m", Session: s, InputTokens: 100, MaxTokens: 100}
	}
	// 60 admitted at 0 s and settled at 55 s: in the completion window at 61 s,
	// not in the arrival one.
	settle(55*time.Second, mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 10, MaxTokens: 50}), 10, 50)
	// 800 admitted at 30 s and settled at 31 s: in both.
	for _, s := range []string{"b", "c", "d", "e"} {
		settle(31*time.Second, mustAdmit(t, l, t0.Add(30*time.Second), call(s)), 100, 100)
	}
	for i := 0; i < 2; i++ {
		at := t0.Add(time.Duration(61+i) * time.Second)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: 200})
	}
	if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
		t.Fatalf("count-mode steps %v, want one switch to at-completion", got)
	}
}

// A 429 that the completion view reads 25% or more above the arrival view
// switches at once (strongVoteRatio); at 20% it is one weak vote, and one 429
// leaves the view. Each case: a call of extra tokens admitted at 0 s and
// settled at 55 s (in the completion window at 61 s, not the arrival one), 800
// admitted at 30 s and settled at 31 s (in both), and one 429 at 61 s. Its
// refused call (400) keeps the arrival view from being refuted (it served 1,100
// there, at most 800 + 400 now), and lets the completion view explain the 429 as
// the gate's own excess (800 + extra + 400 is over 0.8 × the 1,500 budget).
func TestStrongVoteSwitchesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		extra    int64 // completion reads (800 + extra) ÷ 800 of arrival
		switches int
	}{{300, 1}, {160, 0}} {
		c := learnGate()
		c.Defaults.TPM, c.Defaults.RPM = 1500, 100
		l, _, ev := newTestLedger(t, c)
		settle := func(at time.Duration, tk Ticket, in, out int64) {
			t.Helper()
			if err := l.Settle(t0.Add(at), tk, Usage{InputTokens: in, OutputTokens: out}); err != nil {
				t.Fatal(err)
			}
		}
		first := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 10, MaxTokens: int(tc.extra - 10)})
		var tks []Ticket
		for _, s := range []string{"b", "c", "d", "e"} {
			tks = append(tks, mustAdmit(t, l, t0.Add(30*time.Second), Request{Provider: "p", Model: "m", Session: s, InputTokens: 100, MaxTokens: 100}))
		}
		for _, tk := range tks {
			settle(31*time.Second, tk, 100, 100)
		}
		settle(55*time.Second, first, 10, tc.extra-10)
		at := t0.Add(61 * time.Second)
		l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: 400})
		if got := countModeSwitches(ev); len(got) != tc.switches {
			t.Fatalf("completion %d over arrival 800: count-mode steps %v, want %d", 800+tc.extra, got, tc.switches)
		}
	}
}

// In the completion view a level the provider served inside a 429's bracket
// [reading, reading + refused call] is the trigger, not the reading: a large
// refused call says little of where the limit lies above the reading. Not in
// the arrival view (calls in flight are estimates there, and on a bucket a
// served level is a lent reserve), and not above the bracket (such a 429
// refutes the view).
func TestServedLevelInTheBracketIsTheTrigger(t *testing.T) {
	for _, tc := range []struct {
		name     string
		countsAt string
		refused  int64
		want     float64
	}{
		{"completion view, in the bracket", CountsAtCompletion, 5000, 8000},
		{"arrival view", CountsAtArrival, 5000, 3200}, // admitted at 12–19 s: 3,200 in the arrival window
		{"above the bracket", CountsAtCompletion, 1000, 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := learnGate()
			c.Defaults.TPM, c.Defaults.RPM = 10000, 1000
			c.Defaults.CountsAt = tc.countsAt
			l, _, _ := newTestLedger(t, c)
			// Twenty calls of 400, each settled a second after it was admitted: the
			// provider served the level up to 8,000 in both views.
			settledCalls(t, l, t0, 20, 400)
			// 51 s on, the first eleven have left the window (3,600 remain), and a
			// call of 5,000 is refused: the limit lies in [3,600, 8,600], and 8,000
			// was served. The clean record, which would say as much, is set aside
			// (a view switch keeps only 0.9 of the level that held as its record).
			at := t0.Add(71 * time.Second)
			b := l.bucketFor("p", "m", at)
			b.mu.Lock()
			b.learn.cleanMax, b.learn.curWindowMax = 0, 0
			b.mu.Unlock()
			l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: tc.refused})
			if st := l.BucketStatus(at, "p", "m"); st.Trigger != tc.want {
				t.Fatalf("trigger %.0f, want %.0f", st.Trigger, tc.want)
			}
		})
	}
}

// The provider decides on the refused call's whole cost, output included, and
// the gate knows only its estimate: the bracket reaches the estimate plus the
// output's spread (MarginSigmas of it) above the reading. In the simulator a
// completion-counting provider's 429 read 185,684 with a refused call of
// 12,805 estimated and 14,334 real; the level of 199,073 the provider had
// served lay just past the estimate, and the trigger sat at the reading, 7%
// under the limit, for the hour.
func TestRefusedCallsSpreadWidensTheBracket(t *testing.T) {
	const spread = 200 // MarginSigmas (2) × the outputs' standard deviation (100)
	for _, tc := range []struct {
		name string
		// refused is the refused call's reservation, from the served level and
		// the reading.
		refused    func(served, reading float64) int64
		wantServed bool // else the reading
	}{
		{"served within the spread", func(s, r float64) int64 { return int64(s-r) - spread/2 }, true},
		{"served past the spread", func(s, r float64) int64 { return int64(s-r) - spread - 10 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := learnGate()
			c.Defaults.TPM, c.Defaults.RPM = 10000, 1000
			c.Defaults.CountsAt = CountsAtCompletion
			c.MarginSigmas = 2
			l, _, _ := newTestLedger(t, c)
			// Twenty calls of 300 in and 0 or 200 out (no max_tokens: their outputs
			// teach the spread), each settled a second after it was admitted.
			now := t0
			for i := 0; i < 20; i++ {
				tk := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 300})
				now = now.Add(time.Second)
				if err := l.Settle(now, tk, Usage{InputTokens: 300, OutputTokens: int64(200 * (i % 2))}); err != nil {
					t.Fatal(err)
				}
			}
			at := t0.Add(71 * time.Second)
			b := l.bucketFor("p", "m", at)
			b.mu.Lock()
			b.learn.cleanMax, b.learn.curWindowMax = 0, 0 // as in TestServedLevelInTheBracketIsTheTrigger
			b.expireLocked(at)
			served, reading := float64(b.servedDone.max(at, c.Window)), b.providerViewLocked()
			if got := b.marginOf(b.est.outputVariance(false, b.agingLocked())); got != spread {
				t.Fatalf("fixture: the outputs' spread is %d, want %d", got, spread)
			}
			b.mu.Unlock()
			if served <= reading+spread {
				t.Fatalf("fixture: served %.0f, reading %.0f", served, reading)
			}
			refused := tc.refused(served, reading)
			l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: at, Tokens: refused})
			want := reading
			if tc.wantServed {
				want = served
			}
			if st := l.BucketStatus(at, "p", "m"); st.Trigger != want {
				t.Fatalf("trigger %.0f, want %.0f (reading %.0f, refused %d, served %.0f)", st.Trigger, want, reading, refused, served)
			}
		})
	}
}

// A probe step refused at the 429 that switched the view to completion goes
// back to the larger of the level before the step and stepDown below the trigger
// read at that 429: the level before was held in the arrival view, which reads
// such a provider low. The result may lie above the level refused (1,158 here),
// which was counted in the other view. Without a switch, the revert is to the
// level before the step.
func TestRevertAtASwitchToCompletionKeepsItsReading(t *testing.T) {
	for _, tc := range []struct {
		name     string
		switched bool
		reading  float64
		want     float64
	}{
		{"switched", true, 1300, stepDown * 1300},
		{"not switched", false, 1300, 1050},
		{"switched, read below the level before the step", true, 1050, 1050},
	} {
		t.Run(tc.name, func(t *testing.T) {
			span := time.Minute
			l := newLearner(1000, true, t0)
			slowStart(t, &l, 2, span) // 1,000 → 1,050 → 1,158
			at := t0.Add(2*span + 10*time.Second)
			if tc.switched { // as voteLocked does at the 429
				l.forgetReadings()
				l.toCompletion = true
			}
			steps := l.on429(at, tc.reading, 100, false, false, span)
			last := steps[len(steps)-1]
			if last.Kind != "revert" || math.Abs(l.quota-tc.want) > 1e-9 {
				t.Fatalf("%s to %.1f, want a revert to %.1f (trigger %.0f)", last.Kind, l.quota, tc.want, l.trigger)
			}
		})
	}
}

// The bucket tells the learner of a switch to completion for the switching 429
// only. At that 429 the completion view reads 600 with a refused call of 200, and
// the clean record the switch keeps from the arrival view (0.9 of the level held,
// 700) lies in that bracket and is the trigger: the refused probe step goes back
// to stepDown below it, not to the 550 it started from. The flag is gone after.
func TestSwitchToCompletionReachesTheRevertOfThatProbeOnly(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	at := t0.Add(63 * time.Second)
	b := l.bucketFor("p", "m", at)
	servedThenRefusedWith(t, l, 63*time.Second, func() {
		b.mu.Lock()
		// A probe step from 550 to 700, tried since 53 s.
		b.learn.preProbe, b.learn.quota, b.learn.lastRaise = 550, 700, at.Add(-10*time.Second)
		b.mu.Unlock()
	})
	if got := countModeSwitches(ev); len(got) != 1 {
		t.Fatalf("count-mode steps %v, want one switch", got)
	}
	q, trig := quota(l, at)
	if trig != 630 || math.Abs(q-stepDown*630) > 1e-9 {
		t.Fatalf("quota %.1f trigger %.1f after the switching 429: want the trigger 630 and the quota stepDown below it (the level before the step: 550)", q, trig)
	}
	b.mu.Lock()
	switched := b.learn.toCompletion
	b.mu.Unlock()
	if switched {
		t.Fatal("toCompletion outlived its 429")
	}
}

// A second 429 within two windows of the first that reads lower sets a trigger
// the clean record may no longer lift (the repeat clamps it), so without a step
// it would stand until the slow re-probe, hours on. It gets the first trigger's
// one step — even when it refutes the view — after two windows without a 429;
// a 429 answering the step takes it back, and the next such trigger within
// againProbeWindows gets none.
func TestTriggerLoweredAgainGetsOneProbe(t *testing.T) {
	span := time.Minute
	// The first 429 a window and a half before: trigger 1,000, its one step
	// already used; the clean record from before both.
	lowered := func() *learner {
		l := newLearner(2000, true, t0)
		l.trigger, l.quota, l.cleanMax, l.firstUsed = 1000, 1000, 1100, true
		l.prevCut, l.burstStart, l.last429, l.lastProbe = t0, t0, t0, t0
		return &l
	}
	at := t0.Add(span + span/2)
	l := lowered()
	l.on429(at, 850, 150, true, false, span)
	if l.trigger != 850 || l.cleanMax != 850 {
		t.Fatalf("trigger %v clean record %v, want both at the reading 850", l.trigger, l.cleanMax)
	}
	if _, moved := l.onTokenBlocked(at.Add(span), span, true); moved {
		t.Fatalf("stepped a window after the 429 (trigger %v)", l.trigger)
	}
	step := at.Add(2 * span)
	if st, moved := l.onTokenBlocked(step, span, true); !moved || math.Abs(l.trigger-892.5) > 1e-9 {
		t.Fatalf("step %+v moved %v, trigger %v: want one step to 892.5", st, moved, l.trigger)
	}
	// Refused within the step's two windows: back to 850, and no more steps.
	l.on429(step.Add(10*time.Second), 880, 150, false, false, span)
	if l.trigger != 850 {
		t.Fatalf("trigger %v after the step was refused, want 850", l.trigger)
	}
	for w := 1; w < 40; w++ {
		if st, moved := l.onTokenBlocked(step.Add(10*time.Second+time.Duration(w)*span), span, true); moved {
			t.Fatalf("window %d: moved again (%+v)", w, st)
		}
	}
	// Within againProbeWindows of the last such step, a trigger lowered again
	// gets none; from then on, one gets it again.
	within := at.Add(59 * span) // againProbeWindows (60) less one
	l.prevCut, l.burstStart = within.Add(-span-span/2), within.Add(-span-span/2)
	l.on429(within, 700, 90, false, false, span)
	if l.trigger != 700 {
		t.Fatalf("trigger %v, want the reading 700", l.trigger)
	}
	if _, moved := l.onTokenBlocked(within.Add(span/2), span, true); moved {
		t.Fatalf("a lowered trigger within againProbeWindows moved (trigger %v)", l.trigger)
	}
	past := within.Add(span + span/2) // againProbeWindows and a half after the first step's 429
	l.on429(past, 600, 90, false, false, span)
	if l.trigger != 600 {
		t.Fatalf("trigger %v, want the reading 600", l.trigger)
	}
	if st, moved := l.onTokenBlocked(past.Add(2*span), span, true); !moved || math.Abs(l.trigger-630) > 1e-9 {
		t.Fatalf("step %+v moved %v, trigger %v: want a step to 630 past againProbeWindows", st, moved, l.trigger)
	}

	for _, tc := range []struct {
		name    string
		at      time.Duration // after the first 429
		reading float64
		slack   float64
		probing bool // a probe step of the quota was being tried
	}{
		{"not within two windows", 3 * span, 850, 150, false},
		{"a probe step refused", span + span/2, 850, 150, true},   // reverted, not stepped
		{"a narrow bracket", span + span/2, 850, 40, false},       // 40 < 5% of 850, not read on arrival (see TestTriggerLoweredAgainAtTheRefillEdge)
		{"at the level refused", span + span/2, 1000, 150, false}, // steps down to 970: a step would go above 1,000
		{"not clearly lower", span + span/2, 930, 150, false},     // 930 × 1.05 is above 0.97 × 1,000
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lowered()
			at := t0.Add(tc.at)
			if tc.probing {
				l.preProbe, l.lastRaise = 900, at.Add(-10*time.Second)
			}
			l.on429(at, tc.reading, tc.slack, true, false, span)
			for w := 1; w < 10; w++ {
				if st, moved := l.onTokenBlocked(at.Add(time.Duration(w)*span), span, true); moved {
					t.Fatalf("window %d: moved (%+v), trigger %v", w, st, l.trigger)
				}
			}
		})
	}
}

// A trigger lowered again at the refill edge, counted on arrival: the second
// 429 comes as the gate refills the window its cooldown drained, with another
// client's backlog landing at the same edge. Its bracket is that edge, not the
// refused call and the spread, so a narrow one (a refused call of 30 tokens on
// a reading of 760) still gets the one step two windows on. Counted at
// completion the same readings get none: a narrow bracket there is narrow.
func TestTriggerLoweredAgainAtTheRefillEdge(t *testing.T) {
	for _, view := range []string{CountsAtArrival, CountsAtCompletion} {
		t.Run(view, func(t *testing.T) {
			c := learnGate()
			c.Defaults.CountsAt = view
			l, _, _ := newTestLedger(t, c)
			withOutputHistory(t, l)
			served := func(at time.Time, calls int) { // calls of 90 + 100 tokens
				for range calls {
					tk := mustAdmit(t, l, at, req(90))
					if view == CountsAtCompletion {
						if err := l.Settle(at, tk, Usage{InputTokens: 90, OutputTokens: 100}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			refused := func(at time.Time) {
				l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Tokens: 30, Axis: engine.AxisTokens})
			}
			first := t0.Add(61 * time.Second)
			served(first, 5)
			refused(first) // reading 950
			second := first.Add(75 * time.Second)
			served(second, 4)
			refused(second) // within two windows, reading 760: 760 × 1.05 stays under 0.97 × 950
			if _, trig := quota(l, second); trig != 760 {
				t.Fatalf("trigger %v after the second 429, want its reading 760", trig)
			}
			blocked := Request{Provider: "p", Model: "m", Session: "b", InputTokens: 900, MaxTokens: 1}
			heldBack(l, second.Add(61*time.Second), blocked) // a window on: not yet
			if _, trig := quota(l, second.Add(61*time.Second)); trig != 760 {
				t.Fatalf("trigger %v a window after the 429, want 760", trig)
			}
			at := second.Add(121 * time.Second)
			heldBack(l, at, blocked)
			_, trig := quota(l, at)
			want := 760.0
			if view == CountsAtArrival {
				want = 760 * learnProbeFactor
			}
			if math.Abs(trig-want) > 1e-9 {
				t.Fatalf("trigger %v two windows after the second 429, want %v", trig, want)
			}
		})
	}
}

// The request budget counts in the bucket's view. Ten calls admitted together
// and answered 5 s later leave the arrival view a window after they were
// admitted; a provider that counts at completion holds them a window after they
// completed, and the completion view holds the next call until then — released
// at the arrival view's drain, the queue would meet a full window.
func TestRequestBudgetCountsInTheView(t *testing.T) {
	for _, view := range []string{CountsAtArrival, CountsAtCompletion} {
		t.Run(view, func(t *testing.T) {
			c := testGate()
			c.Defaults.CountsAt = view
			c.Learn = false // a window after the bucket's birth the request limit would be probed
			l, _, _ := newTestLedger(t, c)
			r := Request{Provider: "p", Model: "m", InputTokens: 10, MaxTokens: 10}
			var tks []Ticket
			for i := range 10 { // the whole request budget of 10
				r.Session = fmt.Sprint("s", i)
				tks = append(tks, mustAdmit(t, l, t0, r))
			}
			for _, tk := range tks {
				if err := l.Settle(t0.Add(5*time.Second), tk, Usage{InputTokens: 10, OutputTokens: 10}); err != nil {
					t.Fatal(err)
				}
			}
			r.Session = "next"
			w := c.Window
			if view == CountsAtArrival {
				mustAdmit(t, l, t0.Add(w), r)
				return
			}
			mustWait(t, l, t0.Add(w), r, "rpm", 5*time.Second+w)
		})
	}
}

// A 429 whose call was admitted just before a cohort left the window is read
// in the arrival view as the provider held it when that call arrived: with the
// cohort the count guard still keeps. Read without it, the arrival view holds
// nothing at a 429 far below what it served, and the bucket switched an
// arrival-counting provider to completion at a probe's 429 (over real HTTP, at
// the truth: a second 429 and a third of the learned windows lost).
func TestVoteReadsTheWindowTheRefusedCallMet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		admitted time.Duration // of the refused call, from t0
		switches int
	}{
		{"admitted while the cohort was in the window", time.Minute - 5*time.Millisecond, 0},
		{"admitted after it left", time.Minute + time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := learnGate()
			c.Defaults.RPM = 1000
			c.CountGuard = 0.01 // 600 ms past the window
			l, _, ev := newTestLedger(t, c)
			a := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 400})
			b := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 400})
			for _, tk := range []Ticket{a, b} {
				if err := l.Settle(t0.Add(time.Second), tk, Usage{InputTokens: 300, OutputTokens: 100}); err != nil {
					t.Fatal(err)
				}
			}
			now := t0.Add(time.Minute + 5*time.Millisecond) // the cohort is in the guard only
			l.RateLimitedBy(now, "p", "m", engine.RateLimit{RetryAfter: time.Millisecond, Axis: engine.AxisTokens, Admitted: t0.Add(tc.admitted), Tokens: 400})
			if got := countModeSwitches(ev); len(got) != tc.switches {
				t.Fatalf("count-mode steps %v, want %d", got, tc.switches)
			}
		})
	}
}

// The others' spend read in the arrival view is no reading of it in the
// completion view (the gate's own part of the count differs): a switch of
// view starts the moving mean over, as it starts the windows of readings over.
func TestViewSwitchStartsTheOthersSpendOver(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, ev := newTestLedger(t, c)
	at := t0.Add(63 * time.Second)
	servedThenRefusedWith(t, l, 63*time.Second, func() {
		b := l.bucketFor("p", "m", at)
		b.mu.Lock()
		b.outside.others = othersSpend{mean: 150, variance: 100, weight: 5, on: true, at: at}
		b.mu.Unlock()
	})
	if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
		t.Fatalf("setup: count-mode steps %v, want one switch to at-completion", got)
	}
	b := l.bucketFor("p", "m", at)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outside.others != (othersSpend{}) {
		t.Fatalf("others' spend after the switch of view: %+v, want it started over", b.outside.others)
	}
}

// A reload that lengthens the window takes back into it the entries the tail
// held: the tail is counted again, not left at what the shorter window read.
func TestWindowTailCountedAgainWhenTheWindowLengthens(t *testing.T) {
	w := newSlidingWindow(61 * time.Second)
	w.inner = 60 * time.Second
	w.add(t0, 500, 0, false)
	now := t0.Add(60500 * time.Millisecond)
	w.expire(now)
	if got := w.tail(); got != 500 {
		t.Fatalf("tail %d at 60.5 s, want 500", got)
	}
	w.span = 122 * time.Second
	w.setInner(120*time.Second, now)
	w.expire(now)
	if got := w.tail(); got != 0 {
		t.Errorf("tail %d after the window grew to 120 s, want 0", got)
	}
	w.setInner(30*time.Second, now) // and a shorter one puts it back
	if got := w.tail(); got != 500 {
		t.Errorf("tail %d after the window shrank to 30 s, want 500", got)
	}
}
