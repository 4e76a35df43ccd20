package gate

import (
	"testing"
	"time"
)

// seedViews gives b's view evidence n answers that read c and a (the stated
// count less the completion view and less the arrival view, as shares of the
// budget) now, and cs and as read against the views as their calls were sent.
// Now, the answers lie spread above and below c and a in turn, as answers
// do unless the provider states the completion view to the token.
func seedViews(b *bucket, n int, c, a, cs, as, spread float64) {
	seedEvidence(&b.byViews, &b.byViewsAtSend, n, c, a, cs, as, spread)
}

// seedEvidence adds n such answers to the pair (now, at the send).
func seedEvidence(now, atSend *viewEvidence, n int, c, a, cs, as, spread float64) {
	for i := range n {
		d := spread
		if i%2 == 1 {
			d = -spread
		}
		now.add(c+d, a+d)
		atSend.add(cs, as)
	}
}

// movedToCompletion reports whether the events hold the headers' move to
// the completion view.
func movedToCompletion(ev *eventLog) bool {
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "count-mode" && e.Reason == "at-completion" {
			return true
		}
	}
	return false
}

// The headers move the view to completion when the provider counted no more
// than the completion view holds and clearly less than the arrival view (a
// count of completions), or far less than either (a refill) — read so both
// against the views now and as the calls were sent. Not another client's
// spend, a sliding window counted on arrival, a provider that decides on what
// it knows, a view the user set, or fewer than a hundred answers. Answers
// that state the completion view to the token as they come, the arrival
// view holding more, read as a count of completions at that moment alone.
func TestHeadersMoveTheViewToCompletion(t *testing.T) {
	for _, tc := range []struct {
		name           string
		n              int
		c, a, cs, as   float64
		spread         float64
		countsAt       string
		decidesKnown   bool
		wantCompletion bool
	}{
		{"a refill (a token bucket)", 200, -0.7, -0.68, -0.7, -0.68, 0.05, "", false, true},
		{"a count of completions", 200, -0.01, -0.08, -0.01, -0.08, 0.05, "", false, true},
		{"a count of completions stated as it answers, to the token", 200, 0, -0.17, 0.11, -0.01, 0, "", false, true},
		{"the same, answers a percent or two off it", 200, 0, -0.17, 0.11, -0.01, 0.02, "", false, false},
		{"the same, too few answers", decidesMinAnswers - 2, 0, -0.17, 0.11, -0.01, 0, "", false, false},
		{"to the token, but nothing in flight", 200, 0, 0, 0.11, 0.11, 0, "", false, false},
		{"a sliding window on arrival", 200, -0.02, -0.01, -0.02, -0.01, 0.05, "", false, false},
		{"another client on the key", 200, 0.09, 0.10, 0.09, 0.10, 0.05, "", false, false},
		{"a count of completions only as the answers arrive", 200, -0.01, -0.08, -0.02, -0.01, 0.05, "", false, false},
		{"a refill only as the calls were sent", 200, 0.09, 0.10, -0.7, -0.68, 0.05, "", false, false},
		{"too few answers", decidesMinAnswers - 2, -0.7, -0.68, -0.7, -0.68, 0.05, "", false, false},
		{"the user says arrival", 200, -0.7, -0.68, -0.7, -0.68, 0.05, "arrival", false, false},
		{"the user says arrival, to the token", 200, 0, -0.17, 0.11, -0.01, 0, "arrival", false, false},
		{"it decides on what it knows", 200, -0.7, -0.68, -0.7, -0.68, 0.05, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testGate()
			cfg.Defaults.CountsAt = tc.countsAt
			l, clk, ev := newTestLedger(t, cfg)
			now := clk.Now()
			b := l.lockedBucketFor("p", "m", now)
			b.decidesLearnedKnown = tc.decidesKnown
			b.learn.trigger = 800 // read in the arrival view
			seedViews(b, tc.n, tc.c, tc.a, tc.cs, tc.as, tc.spread)
			// One more answer, as the window stands (empty: it reads 0 against
			// both views now), its call sent when the views read as the case.
			budget := float64(b.learnedTokenBudget())
			b.observeViewsLocked(now, 0, sendReading{done: -tc.cs * budget, arrival: -tc.as * budget}, false)
			b.mu.Unlock()
			st := l.BucketStatus(now, "p", "m")
			moved := movedToCompletion(ev)
			if got := st.CountsAt == "completion"; got != tc.wantCompletion || moved != tc.wantCompletion {
				t.Fatalf("view %q, event %v; want completion %v", st.CountsAt, moved, tc.wantCompletion)
			}
			if tc.wantCompletion && st.Trigger != 0 {
				t.Fatalf("trigger %v read in the arrival view kept", st.Trigger)
			}
		})
	}
}

// While the headers read as a count of completions or a refill, 429s that
// vote for the arrival view do not take it; without that reading they do. A
// reset forgets the reading.
func TestHeadersKeepTheVotesFromTakingTheArrivalView(t *testing.T) {
	for _, headersSay := range []bool{false, true} {
		l, clk, _ := newTestLedger(t, testGate())
		now := clk.Now()
		b := l.lockedBucketFor("p", "m", now)
		b.atCompletion = true
		if headersSay {
			seedViews(b, 200, -0.7, -0.68, -0.7, -0.68, 0.05)
			b.firstViews.add(-0.1, -0.3)
			b.firstViewsAtSend.add(0, -0.1)
		}
		b.modeVotes = -switchVotes
		b.countVotesLocked(now)
		if b.atCompletion != headersSay {
			t.Fatalf("headers read as a refill: %v; at completion %v", headersSay, b.atCompletion)
		}
		b.mu.Unlock()
		if headersSay {
			l.Reset(now.Add(time.Second), "p", "m")
			b = l.lockedBucketFor("p", "m", now.Add(time.Second))
			if b.byViews.n != 0 || b.byViewsAtSend.n != 0 || b.firstViews.n != 0 || b.firstViewsAtSend.n != 0 || b.headersSayCompletionLocked() {
				t.Fatalf("a reset kept the headers' reading: %+v %+v", b.byViews, b.byViewsAtSend)
			}
			b.mu.Unlock()
		}
	}
}

// The answers are read for the view through CalibrateAnswer, against the
// reading taken as the call was sent — also when the user set `decides:
// whole`, not when `decides: known`.
func TestAnswersReadForTheView(t *testing.T) {
	for _, tc := range []struct {
		decides        string
		wantCompletion bool
	}{{"", true}, {DecidesWhole, true}, {DecidesKnown, false}} {
		cfg := testGate()
		cfg.Defaults.Decides = tc.decides
		l, clk, _ := newTestLedger(t, cfg)
		now := clk.Now()
		tk := mustAdmit(t, l, now, req(10))
		if err := l.Settle(now, tk, Usage{InputTokens: 10, OutputTokens: 5}); err != nil { // an output seen
			t.Fatal(err)
		}
		now = now.Add(3 * time.Minute)
		sent := now.Add(-2 * time.Second)
		b := l.lockedBucketFor("p", "m", now)
		b.decides.since = now.Add(-2 * time.Minute)
		seedViews(b, 200, -0.7, -0.68, -0.7, -0.68, 0.05)
		b.sends = &sendReadings{}
		b.sends.add(sendReading{at: sent.UnixNano()})
		b.mu.Unlock()
		l.CalibrateAnswer(now, sent, "p", "m", 1000, 1000, -1, -1) // all of it left: a full bucket
		if st := l.BucketStatus(now, "p", "m"); (st.CountsAt == "completion") != tc.wantCompletion {
			t.Fatalf("decides %q: view %q, want completion %v", tc.decides, st.CountsAt, tc.wantCompletion)
		}
	}
}

// What the answers read for the view goes when it no longer describes the
// provider — fixed windows learned, `decides: known` learned, the headers
// reading the arrival view back — and no longer holds the votes off then; a
// reload that keeps `decides: whole` keeps it, one that sets `known` does not.
func TestHeadersViewReadingGoesWithWhatItWasReadIn(t *testing.T) {
	refill := func(b *bucket) { seedViews(b, 200, -0.7, -0.68, -0.7, -0.68, 0.05) }
	for _, tc := range []struct {
		name     string
		decides  string
		change   func(l *Ledger, b *bucket, now time.Time) // b locked
		wantHeld bool
	}{
		{"nothing changed", "", func(*Ledger, *bucket, time.Time) {}, true},
		{"fixed windows learned", "", func(_ *Ledger, b *bucket, now time.Time) { b.switchWindowsLocked(now, true, false) }, false},
		{"known learned", "", func(_ *Ledger, b *bucket, now time.Time) { b.switchDecidesLocked(now, true, 0) }, false},
		{"the arrival view read back", "", func(_ *Ledger, b *bucket, now time.Time) { b.arrivalByHeadersLocked(now) }, false},
		{"a reload keeping decides: whole", DecidesWhole, reloadTo(t, DecidesWhole), true},
		{"a reload to decides: known", DecidesWhole, reloadTo(t, DecidesKnown), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testGate()
			cfg.Defaults.Decides = tc.decides
			l, clk, _ := newTestLedger(t, cfg)
			now := clk.Now()
			b := l.lockedBucketFor("p", "m", now)
			refill(b)
			tc.change(l, b, now)
			b.atCompletion = true
			b.modeVotes = -switchVotes
			b.countVotesLocked(now)
			held := b.atCompletion
			b.mu.Unlock()
			if held != tc.wantHeld {
				t.Fatalf("the votes for arrival held off: %v, want %v", held, tc.wantHeld)
			}
		})
	}
}

// reloadTo is a change that reloads the configuration with decides set; the
// bucket stays locked around it.
func reloadTo(t *testing.T, decides string) func(l *Ledger, b *bucket, now time.Time) {
	return func(l *Ledger, b *bucket, now time.Time) {
		cfg := testGate()
		cfg.Defaults.Decides = decides
		b.mu.Unlock()
		defer b.mu.Lock()
		if err := l.Reconfigure(now, cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// While the decides fit reads the answers as a sliding window counting the
// calls in flight (headersSayArrivalLocked), the view reading does not take
// the completion view.
func TestHeadersReadingArrivalKeepTheViewReadingOff(t *testing.T) {
	for _, fitSays := range []bool{false, true} {
		l, clk, _ := newTestLedger(t, testGate())
		now := clk.Now()
		b := l.lockedBucketFor("p", "m", now)
		if fitSays {
			b.headersFitAt = now
		}
		seedViews(b, 200, -0.7, -0.68, -0.7, -0.68, 0.05)
		budget := float64(b.learnedTokenBudget())
		b.observeViewsLocked(now, 0, sendReading{done: 0.7 * budget, arrival: 0.68 * budget}, false)
		got := b.atCompletion
		b.mu.Unlock()
		if got == fitSays {
			t.Fatalf("the fit read a sliding window counting the calls in flight: %v; at completion %v", fitSays, got)
		}
	}
}

// The first window's answers move the view when, at the moment the provider
// stated its figures, they match the completion view (within 1% of the
// budget) and both moments read as a count of completions: a provider that
// counts at completion and states as of the call's arrival. Not a sliding
// window counted on arrival (far over the completion view as it states), nor
// fixed windows after an edge (far under both), nor before 20 answers. Or
// when, answer by answer, they state the completion view to the token as they
// come: a provider that counts at completion and states as it answers; not a
// window counted on arrival whose answers lie near it only on average. They
// hold no vote off.
func TestFirstWindowReadsACountOfCompletions(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n            int
		c, a, cs, as float64
		spread       float64
		want         bool
	}{
		{"counted at completion, stated at arrival", 25, -0.17, -0.36, 0.0005, -0.17, 0.08, true},
		{"the same, 19 answers", 19, -0.17, -0.36, 0.0005, -0.17, 0.08, false},
		{"the stated moment off the completion view", 25, -0.17, -0.36, -0.02, -0.19, 0.08, false},
		{"counted at completion, stated as it answers", 25, 0, -0.17, 0.11, -0.01, 0, true},
		{"the same, 19 answers", 19, 0, -0.17, 0.11, -0.01, 0, false},
		{"counted on arrival, stated at arrival", 25, 0.005, -0.05, 0.12, 0.0, 0.07, false},
		{"the same, answers nearer the completion view", 25, 0.005, -0.05, 0.12, 0.0, 0.015, false},
		{"counted on arrival, stated as it answers", 25, 0.10, 0.0, 0.15, 0.04, 0.07, false},
		{"fixed windows after an edge", 25, -0.4, -0.45, -0.35, -0.4, 0.07, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, clk, ev := newTestLedger(t, testGate())
			now := clk.Now()
			b := l.lockedBucketFor("p", "m", now)
			seedEvidence(&b.firstViews, &b.firstViewsAtSend, tc.n-1, tc.c, tc.a, tc.cs, tc.as, tc.spread)
			// The last answer, as the window stands (empty: it reads 0 against
			// both views now, which moves the means a little), sent when the
			// views read as the case.
			budget := float64(b.learnedTokenBudget())
			b.observeViewsLocked(now, 0, sendReading{done: -tc.cs * budget, arrival: -tc.as * budget}, true)
			got := b.atCompletion
			// The first window's reading holds no vote off.
			b.modeVotes = -switchVotes
			b.countVotesLocked(now)
			after := b.atCompletion
			b.mu.Unlock()
			moved := movedToCompletion(ev)
			if got != tc.want || moved != tc.want {
				t.Fatalf("at completion %v (event %v), want %v", got, moved, tc.want)
			}
			if after {
				t.Fatal("a vote for arrival was held off by the first window's reading")
			}
		})
	}
}
