package gate

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

func TestLedgerCalibrate(t *testing.T) {
	type call struct {
		at                      time.Duration // after t0
		limitTok, remTok        int64
		limitReq, remReq        int64
		rateLimitedFirst        bool // record a 429 (no hint) just before the call
		wantCut                 bool // and the 429 cuts the quota below its start
		wantQuota, wantStart    float64
		wantTrigger             float64
		wantBudget              int64
		wantRPM                 int
		wantCalibrateEventDelta int // calibrate events this call adds
	}
	cases := []struct {
		name   string
		window time.Duration
		calls  []call
	}{
		{"tokens and requests per minute", time.Minute, []call{
			{at: 0, limitTok: 600, remTok: 500, limitReq: 3, remReq: 2, wantQuota: 600, wantStart: 600, wantBudget: 600, wantRPM: 3, wantCalibrateEventDelta: 1},
			// the same limits again: nothing moves, no event
			{at: time.Second, limitTok: 600, remTok: 400, limitReq: 3, remReq: 1, wantQuota: 600, wantStart: 600, wantBudget: 600, wantRPM: 3},
			// the provider raised the limit
			{at: 2 * time.Second, limitTok: 2000, remTok: 2000, limitReq: 0, remReq: -1, wantQuota: 2000, wantStart: 2000, wantBudget: 2000, wantRPM: 3, wantCalibrateEventDelta: 1},
		}},
		{"scaled to a 30s window", 30 * time.Second, []call{
			{at: 0, limitTok: 600, remTok: 600, limitReq: 10, remReq: 10, wantQuota: 300, wantStart: 300, wantBudget: 300, wantRPM: 5, wantCalibrateEventDelta: 1},
		}},
		{"inconsistent headers are ignored", time.Minute, []call{
			{at: 0, limitTok: 600, remTok: 601, limitReq: 3, remReq: 2, wantQuota: 1000, wantStart: 1000, wantBudget: 1000, wantRPM: 10},
			{at: 0, limitTok: 600, remTok: 10, limitReq: 3, remReq: 4, wantQuota: 1000, wantStart: 1000, wantBudget: 1000, wantRPM: 10},
			{at: 0, limitTok: 0, remTok: -1, limitReq: 0, remReq: -1, wantQuota: 1000, wantStart: 1000, wantBudget: 1000, wantRPM: 10},
		}},
		{"a stated limit supersedes a learned trigger; a 429 far below it only cools down", time.Minute, []call{
			// a 429 with an empty window: nothing of the gate's caused it, a cooldown only
			{at: 0, rateLimitedFirst: true, limitTok: 800, remTok: 0, limitReq: -1, remReq: -1, wantQuota: 800, wantStart: 800, wantBudget: 800, wantRPM: 10, wantCalibrateEventDelta: 1},
			// a 429 a window later, with nothing of ours in the window: far below the
			// stated 800, it is someone else's traffic or timing — the quota stays
			{at: 2 * time.Minute, rateLimitedFirst: true, limitTok: 800, remTok: 100, limitReq: -1, remReq: -1, wantQuota: 800, wantStart: 800, wantBudget: 800, wantRPM: 10},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testGate()
			cfg.Window = tc.window
			cfg.MaxWait = 2 * tc.window
			l, _, ev := newTestLedger(t, cfg)
			events := 0
			for i, c := range tc.calls {
				now := t0.Add(c.at)
				if c.rateLimitedFirst {
					l.RateLimited(now, "p", "m", time.Second)
					if st := l.BucketStatus(now, "p", "m"); (st.Quota < st.Start) != c.wantCut {
						t.Fatalf("call %d: quota %v of start %v after the 429, want cut %v", i, st.Quota, st.Start, c.wantCut)
					}
				}
				l.Calibrate(now, "p", "m", c.limitTok, c.remTok, c.limitReq, c.remReq)
				st := l.BucketStatus(now, "p", "m")
				if st.Quota != c.wantQuota || st.Start != c.wantStart || st.Trigger != c.wantTrigger || st.TokenBudget != c.wantBudget || st.RPMBudget != c.wantRPM {
					t.Fatalf("call %d: quota %v start %v trigger %v budget %d rpm %d; want %v %v %v %d %d", i,
						st.Quota, st.Start, st.Trigger, st.TokenBudget, st.RPMBudget, c.wantQuota, c.wantStart, c.wantTrigger, c.wantBudget, c.wantRPM)
				}
				n := 0
				for _, e := range ev.kinds(EventLearn) {
					if e.Step == "calibrate" {
						n++
					}
				}
				if n-events != c.wantCalibrateEventDelta {
					t.Fatalf("call %d: %d calibrate events, want %d", i, n-events, c.wantCalibrateEventDelta)
				}
				events = n
			}
		})
	}
}

// TestLedgerCalibrateAdmission: a calibrated budget governs admission at once, and
// a raised one lets a waiter through without waiting for the window.
func TestLedgerCalibrateAdmission(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	now := clk.Now()
	l.Calibrate(now, "p", "m", 300, 300, -1, -1)
	first := mustAdmit(t, l, now, req(100)) // 100 + 100 reserve = 200 of 300
	if _, w := l.Submit(now, req(100)); w == nil {
		t.Fatal("a second call over the calibrated 300 was admitted")
	} else {
		l.Calibrate(now, "p", "m", 1000, 800, -1, -1)
		if _, ok := w.Ticket(); !ok {
			t.Fatal("the raised limit did not let the waiter through")
		}
	}
	if err := l.Settle(now, first, Usage{InputTokens: 100, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerCalibrateNoModel(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	l.Calibrate(clk.Now(), "", "m", 10, 1, 1, 1)
	l.Calibrate(clk.Now(), "p", "", 10, 1, 1, 1)
	if n := len(l.Status(clk.Now())); n != 0 {
		t.Fatalf("%d buckets created for an empty provider or model", n)
	}
}

// TestLedgerCalibrateDropsTrigger: a trigger learned from a 429 gives way to the
// provider's stated limit.
func TestLedgerCalibrateDropsTrigger(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	now := clk.Now()
	tk := mustAdmit(t, l, now, req(100))
	l.RateLimited(now, "p", "m", time.Second)
	if st := l.BucketStatus(now, "p", "m"); st.Trigger == 0 {
		t.Fatal("setup: the 429 recorded no trigger")
	}
	l.Calibrate(now, "p", "m", 800, 0, -1, -1)
	if st := l.BucketStatus(now, "p", "m"); st.Trigger != 0 || st.Quota != 800 || st.TokenBudget != 800 {
		t.Fatalf("after calibrating: trigger %v quota %v budget %d; want 0 800 800", st.Trigger, st.Quota, st.TokenBudget)
	}
	_ = l.Release(now, tk)
}

// TestCalibrateRestatedKeepsWhatA429Taught: every answer restates the limit.
// With another client on the key a 429 comes below it, and its trigger is what
// is left to the gate; restated, the same figure keeps that trigger (dropping
// it refilled the window to the limit and took the same 429 at every
// cooldown's end: 48 an hour in the simulator, 3 now). A new figure is adopted.
func TestCalibrateRestatedKeepsWhatA429Taught(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	now := clk.Now()
	l.Calibrate(now, "p", "m", 800, 800, -1, -1)
	tk := mustAdmit(t, l, now, req(600))
	now = now.Add(time.Second)
	l.RateLimited(now, "p", "m", time.Second) // refused below the stated 800: another client's spend
	st := l.BucketStatus(now, "p", "m")
	if st.Trigger == 0 || st.Trigger >= 800 {
		t.Fatalf("setup: the 429 below the stated 800 left trigger %v", st.Trigger)
	}
	trigger := st.Trigger
	_ = l.Release(now, tk)
	now = now.Add(2 * time.Second)
	l.Calibrate(now, "p", "m", 800, 300, -1, -1) // the next answer restates 800
	if st := l.BucketStatus(now, "p", "m"); st.Trigger != trigger || st.TokenBudget > int64(trigger) {
		t.Fatalf("the limit restated: trigger %v budget %d, want the trigger %v kept", st.Trigger, st.TokenBudget, trigger)
	}
	l.Calibrate(now, "p", "m", 1200, 1200, -1, -1) // the provider raised it: a new figure
	if st := l.BucketStatus(now, "p", "m"); st.Trigger != 0 || st.Quota != 1200 {
		t.Fatalf("a new limit stated: trigger %v quota %v, want 0 and 1200", st.Trigger, st.Quota)
	}
	// A trigger again, then a reload that doubles the window: what was learned
	// is converted to the new window's units with the stated limit, and the
	// same figure restated is the same limit there, which keeps the trigger.
	tk = mustAdmit(t, l, now, req(900))
	l.RateLimited(now, "p", "m", time.Second)
	_ = l.Release(now, tk)
	st = l.BucketStatus(now, "p", "m")
	if st.Trigger == 0 {
		t.Fatal("setup: no trigger before the reload")
	}
	trigger = st.Trigger
	cfg := testGate()
	cfg.Window, cfg.MaxWait = 2*time.Minute, 4*time.Minute
	if err := l.Reconfigure(now, cfg); err != nil {
		t.Fatal(err)
	}
	l.Calibrate(now, "p", "m", 1200, 1200, -1, -1)
	if st := l.BucketStatus(now, "p", "m"); st.Trigger != 2*trigger || st.Quota > 2400 {
		t.Fatalf("restated after the window doubled: trigger %v quota %v, want the trigger %v doubled, under 2400 (1200 a minute)", st.Trigger, st.Quota, trigger)
	}
}

// TestLedgerCalibrateSurvivesReconfigure: a reload (even of the same config) keeps
// the limits the provider stated; they are rescaled when the window changes.
func TestLedgerCalibrateSurvivesReconfigure(t *testing.T) {
	cases := []struct {
		name                 string
		window               time.Duration
		wantQuota, wantStart float64
		wantRPM              int
	}{
		{"same config", time.Minute, 600, 600, 3},
		{"a 30s window", 30 * time.Second, 300, 300, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk, _ := newTestLedger(t, testGate())
			now := clk.Now()
			l.Calibrate(now, "p", "m", 600, 500, 3, 2)
			cfg := testGate()
			cfg.Window = tc.window
			if err := l.Reconfigure(now.Add(time.Second), cfg); err != nil {
				t.Fatal(err)
			}
			st := l.BucketStatus(now.Add(time.Second), "p", "m")
			if st.Quota != tc.wantQuota || st.Start != tc.wantStart || st.RPMBudget != tc.wantRPM {
				t.Fatalf("after reload: quota %v start %v rpm %d; want %v %v %d (the stated limits)", st.Quota, st.Start, st.RPMBudget, tc.wantQuota, tc.wantStart, tc.wantRPM)
			}
			// The cap the learner keeps is the stated limit in the new window's
			// units too (before, it kept the old window's figure).
			b := l.bucketFor("p", "m", now)
			b.mu.Lock()
			stated := b.learn.stated
			b.mu.Unlock()
			if stated != tc.wantStart {
				t.Fatalf("after reload: the learner's stated cap %v, want %v", stated, tc.wantStart)
			}
		})
	}
}

// A limit stated in the middle of a probe step ends the step: a 429 after it is
// not the step's overshoot, and nothing reverts to the level from before it.
func TestCalibrateEndsAProbeStep(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	b.learn.preProbe, b.learn.quota, b.learn.lastRaise = 1000, 1050, t0 // a probe step 1000 → 1050, just taken
	b.mu.Unlock()
	l.Calibrate(t0.Add(time.Second), "p", "m", 900, 800, -1, -1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.learn.preProbe != 0 || b.learn.stated != 900 {
		t.Fatalf("preProbe %g stated %g after a stated limit, want 0 and 900", b.learn.preProbe, b.learn.stated)
	}
}

// A stated limit equal to the configured start is still a stated cap: no probe
// goes above it.
func TestCalibrateAtTheStartStatesTheCap(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	start := l.BucketStatus(t0, "p", "m").Start
	l.Calibrate(t0, "p", "m", int64(start), int64(start)/2, -1, -1)
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.learn.stated != start {
		t.Fatalf("stated %g after a stated limit equal to the start %g, want it recorded", b.learn.stated, start)
	}
	if _, moved := b.learn.onTokenBlocked(t0.Add(2*time.Minute), time.Minute, true); moved {
		t.Fatalf("a probe above the stated limit: quota %g", b.learn.quota)
	}
}

// TestStatedIn429: the limits a 429's wording states are adopted before the 429
// is read, so it is read against them: far below the stated limit it only
// cools down; at it, it teaches its trigger. The same figure in a later 429
// moves nothing more (no calibration that would drop that trigger); a new one
// is adopted again.
func TestStatedIn429(t *testing.T) {
	calibrations := func(ev *eventLog) (n int) {
		for _, e := range ev.kinds(EventLearn) {
			if e.Step == "calibrate" {
				n++
			}
		}
		return n
	}
	// fill puts a settled call of in+out tokens in the window at now.
	fill := func(l *Ledger, now time.Time, in, out int) {
		t.Helper()
		tk := mustAdmit(t, l, now, req(in))
		if err := l.Settle(now, tk, Usage{InputTokens: int64(in), OutputTokens: int64(out)}); err != nil {
			t.Fatal(err)
		}
	}
	stating := func(tokens, requests int64) engine.RateLimit {
		return engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens, StatedTokens: tokens, StatedRequests: requests}
	}

	t.Run("far below the stated limit", func(t *testing.T) {
		l, clk, ev := newTestLedger(t, testGate())
		now := clk.Now()
		for range 5 {
			fill(l, now, 80, 20) // 500 in the window: five ordinary calls, under 80% of the stated 700
		}
		l.RateLimitedBy(now, "p", "m", stating(700, 6))
		st := l.BucketStatus(now, "p", "m")
		if st.Stated != 700 || st.Start != 700 || st.Quota != 700 || st.Trigger != 0 || st.RPMBudget != 6 || st.CooldownMs != 1000 {
			t.Fatalf("stated %v start %v quota %v trigger %v rpm %d cooldown %dms; want 700 700 700 0 6 1000",
				st.Stated, st.Start, st.Quota, st.Trigger, st.RPMBudget, st.CooldownMs)
		}
		// Judged against the stated limit, the 429 was a suspect (another client,
		// timing); read before the limit was adopted, five calls' reading would
		// have been believed and set a trigger.
		var steps []string
		for _, e := range ev.kinds(EventLearn) {
			steps = append(steps, e.Step)
		}
		if !slices.Contains(steps, "suspect") || slices.Contains(steps, "trigger") {
			t.Fatalf("learn steps %v, want a suspect and no trigger", steps)
		}
	})

	t.Run("at the stated limit, then the same figure, then a new one", func(t *testing.T) {
		l, clk, ev := newTestLedger(t, testGate())
		now := clk.Now()
		fill(l, now, 500, 150) // 650 in the window
		l.RateLimitedBy(now, "p", "m", stating(700, 0))
		st := l.BucketStatus(now, "p", "m")
		if st.Stated != 700 || st.Trigger != 650 || st.Quota != 650 || calibrations(ev) != 1 {
			t.Fatalf("first 429: stated %v trigger %v quota %v, %d calibrations; want 700 650 650 1", st.Stated, st.Trigger, st.Quota, calibrations(ev))
		}
		now = now.Add(2 * time.Minute)
		fill(l, now, 450, 150) // 600 in the window
		l.RateLimitedBy(now, "p", "m", stating(700, 0))
		st = l.BucketStatus(now, "p", "m")
		if st.Stated != 700 || st.Trigger == 0 || calibrations(ev) != 1 {
			t.Fatalf("the same figure again: stated %v trigger %v, %d calibrations; want 700, a trigger kept, 1", st.Stated, st.Trigger, calibrations(ev))
		}
		now = now.Add(2 * time.Minute)
		l.RateLimitedBy(now, "p", "m", stating(900, 0))
		if st = l.BucketStatus(now, "p", "m"); st.Stated != 900 || st.Start != 900 || calibrations(ev) != 2 {
			t.Fatalf("a new figure: stated %v start %v, %d calibrations; want 900 900 2", st.Stated, st.Start, calibrations(ev))
		}
	})

	t.Run("forgotten when no 429 restates it, unlike an answer's headers", func(t *testing.T) {
		for _, c := range []struct {
			name            string
			state           func(l *Ledger, now time.Time)
			forget, restate bool
		}{
			{"a 429's", func(l *Ledger, now time.Time) { l.RateLimitedBy(now, "p", "m", stating(700, 6)) }, true, false},
			{"a 429's, restated by a later 429", func(l *Ledger, now time.Time) { l.RateLimitedBy(now, "p", "m", stating(700, 6)) }, false, true},
			{"the headers'", func(l *Ledger, now time.Time) { l.Calibrate(now, "p", "m", 700, 700, 6, 6) }, false, false},
			{"a 429's, then the headers'", func(l *Ledger, now time.Time) {
				l.RateLimitedBy(now, "p", "m", stating(700, 6))
				l.Calibrate(now.Add(time.Second), "p", "m", 700, 600, 6, 5)
			}, false, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				l, clk, _ := newTestLedger(t, testGate())
				now := clk.Now()
				c.state(l, now)
				if c.restate {
					l.RateLimitedBy(now.Add(90*time.Minute), "p", "m", stating(700, 6))
				}
				big := req(800) // over the whole budget: the token budget holds it
				_, _ = l.Submit(now.Add((triggerReprobeWindows-1)*time.Minute), big)
				if st := l.BucketStatus(now, "p", "m"); st.Stated != 700 {
					t.Fatalf("stated %v a window before it may be forgotten, want 700", st.Stated)
				}
				later := now.Add(triggerReprobeWindows * time.Minute)
				_, _ = l.Submit(later, big)
				st := l.BucketStatus(later, "p", "m")
				if c.forget && (st.Stated != 0 || st.Start != 1000 || st.Quota <= 700) {
					t.Fatalf("a 429's figure unrestated for %d windows: stated %v start %v quota %v; want 0, the configured 1000, a probe past 700",
						triggerReprobeWindows, st.Stated, st.Start, st.Quota)
				}
				if !c.forget && st.Stated != 700 {
					t.Fatalf("stated %v, want 700 kept", st.Stated)
				}
			})
		}
	})

	t.Run("a 429's request limit is forgotten where the request budget binds, and climbs from it", func(t *testing.T) {
		l, clk, _ := newTestLedger(t, testGate()) // configured 10 requests a minute
		now := clk.Now()
		for range 4 {
			fill(l, now, 10, 10) // four requests in the window when the provider refuses the fifth
		}
		l.RateLimitedBy(now, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisRequests, StatedRequests: 4})
		if st := l.BucketStatus(now, "p", "m"); st.RPMBudget != 4 {
			t.Fatalf("rpm %d after a 429 stating 4 requests a minute, want 4", st.RPMBudget)
		}
		later := now.Add(triggerReprobeWindows * time.Minute)
		for range 5 { // four fill the request budget; the fifth is held by it
			_, _ = l.Submit(later, req(10))
		}
		if st := l.BucketStatus(later, "p", "m"); st.RPMBudget != 5 {
			t.Fatalf("rpm %d once the 429's figure went unrestated, want 5 (4, relaxed 5%% — at least one — a window)", st.RPMBudget)
		}
	})

	t.Run("a reset forgets a 429's figure, not the headers'", func(t *testing.T) {
		l, clk, _ := newTestLedger(t, testGate())
		now := clk.Now()
		l.RateLimitedBy(now, "p", "m", stating(700, 6))
		l.Reset(now, "p", "m")
		if st := l.BucketStatus(now, "p", "m"); st.Stated != 0 || st.Start != 1000 || st.Quota != 1000 || st.RPMBudget != 10 {
			t.Fatalf("after a reset: stated %v start %v quota %v rpm %d; want 0 1000 1000 10", st.Stated, st.Start, st.Quota, st.RPMBudget)
		}
		l.RateLimitedBy(now, "p", "m", stating(700, 6))
		l.Calibrate(now, "p", "m", 700, 700, -1, -1) // the headers restate the tokens, not the requests
		l.Reset(now, "p", "m")
		if st := l.BucketStatus(now, "p", "m"); st.Stated != 700 || st.Quota != 700 || st.RPMBudget != 10 {
			t.Fatalf("after a reset, the headers restating the tokens: stated %v quota %v rpm %d; want 700 700 10", st.Stated, st.Quota, st.RPMBudget)
		}
	})

	t.Run("a figure past any real limit cannot overflow the budget", func(t *testing.T) {
		l, clk, _ := newTestLedger(t, testGate())
		now := clk.Now()
		l.RateLimitedBy(now, "p", "m", stating(math.MaxInt64, math.MaxInt64))
		if st := l.BucketStatus(now, "p", "m"); st.TokenBudget <= 0 || st.RPMBudget <= 0 || st.Quota <= 0 {
			t.Fatalf("budget %d rpm %d quota %v after a 429 stating MaxInt64", st.TokenBudget, st.RPMBudget, st.Quota)
		}
		l.Calibrate(now, "p", "m", math.MaxInt64-1, -1, -1, -1)
		if st := l.BucketStatus(now, "p", "m"); st.TokenBudget <= 0 || st.Quota <= 0 {
			t.Fatalf("budget %d quota %v after headers stating MaxInt64", st.TokenBudget, st.Quota)
		}
	})

	t.Run("a model folded into OtherModel adopts nothing", func(t *testing.T) {
		cfg := testGate()
		cfg.MaxModels = 1
		l, clk, _ := newTestLedger(t, cfg)
		now := clk.Now()
		l.RateLimitedBy(now, "p", "m", stating(700, 0))
		l.RateLimitedBy(now, "p", "other", stating(300, 0))
		if st := l.BucketStatus(now, "p", "m"); st.Stated != 700 {
			t.Fatalf("the first model: stated %v, want 700", st.Stated)
		}
		for _, st := range l.Status(now) {
			if st.Model != "m" && st.Stated != 0 {
				t.Fatalf("the folded bucket %s adopted %v", st.Model, st.Stated)
			}
		}
	})
}
