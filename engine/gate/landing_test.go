package gate

import (
	"math"
	"testing"
	"time"
)

// The landing's sums and its reserve: each call in flight completes within
// the round trip with the chance trip ÷ mean time in flight, at most 1.
func TestLandingReserve(t *testing.T) {
	var g landing
	if m, v := g.reserve(time.Second); m != 0 || v != 0 {
		t.Fatalf("nothing open: reserve %v ± %v", m, v)
	}
	g.open(1000)
	g.open(3000)
	if m, v := g.reserve(time.Second); m != 0 || v != 0 {
		t.Fatalf("no time in flight measured yet: reserve %v ± %v", m, v)
	}
	g.settled(-time.Second) // a clock that stepped back
	g.settled(2 * time.Second)
	if g.inFlightMean != 2 {
		t.Fatalf("mean time in flight %v, want 2", g.inFlightMean)
	}
	if m, v := g.reserve(0); m != 0 || v != 0 {
		t.Fatalf("no round trip measured: reserve %v ± %v", m, v)
	}
	m, v := g.reserve(200 * time.Millisecond) // p = 0.1
	if math.Abs(m-400) > 1e-9 || math.Abs(v-0.1*0.9*(1e6+9e6)) > 1e-6 {
		t.Fatalf("p = 0.1: reserve %v, variance %v; want 400, 900000", m, v)
	}
	if m, v := g.reserve(5 * time.Second); m != 4000 || v != 0 {
		t.Fatalf("a trip longer than a call: every call lands, got %v ± %v", m, v)
	}
	g.settled(4 * time.Second)
	if want := 2 + 2.0/landingAvgCalls; math.Abs(g.inFlightMean-want) > 1e-12 {
		t.Fatalf("moving mean %v, want %v", g.inFlightMean, want)
	}
	g.close(1000, false)
	if g.cost != 3000 || g.costSq != 9e6 {
		t.Fatalf("after one close: %v, %v", g.cost, g.costSq)
	}
	g.close(3000, true)
	if g.cost != 0 || g.costSq != 0 {
		t.Fatalf("nothing open: %v, %v", g.cost, g.costSq)
	}
}

// landingLedger is a model counted at completion (c's limits) whose mean time
// in flight is one second: a call of 400 admitted at t0 and settled at t1 =
// t0+1s, so the window at completion holds 400 from t1. Then the calls of
// inputs in go in flight at t1 (each reserving the 100-token output reserve).
func landingLedger(t *testing.T, c Config, inputs ...int) (*Ledger, time.Time) {
	t.Helper()
	l, _, _ := newTestLedger(t, c)
	a := mustAdmit(t, l, t0, req(300))
	t1 := t0.Add(time.Second)
	if err := l.Settle(t1, a, Usage{InputTokens: 300, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		mustAdmit(t, l, t1, req(in))
	}
	return l, t1
}

// At completion, a call admitted at the edge of the budget leaves room for the
// calls in flight that may complete within the round trip: the provider counts
// them when the call arrives, the gate hears of them a trip later. Before any
// 429 measured the trip, nothing is kept. In fixed windows counted at
// completion as in a sliding window.
func TestCompletionAdmissionKeepsRoomForLandings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		windows string
		trip    time.Duration // the longest recent admission→429 delay (0: none)
		wait    time.Duration // until (0: admitted)
	}{
		{"no round trip measured", "", 0, 0},
		// the settled call leaves the window a minute after it settled, plus the count guard (1.5 × the trip)
		{"a quarter of the time in flight", "", 250 * time.Millisecond, 61*time.Second + 375*time.Millisecond},
		{"fixed windows, no round trip measured", WindowsFixed, 0, 0},
		{"fixed windows, a quarter of the time in flight", WindowsFixed, 250 * time.Millisecond, time.Minute}, // the next edge
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Defaults.RPM = 1000
			c.Models = map[string]ModelLimits{"p/m": {CountsAt: CountsAtCompletion, Windows: tc.windows}}
			l, t1 := landingLedger(t, c, 100, 100) // two calls in flight, 200 each at the provider
			b := l.bucketFor("p", "m", t1)
			b.mu.Lock()
			if tc.trip > 0 {
				b.delays[0], b.nDelay = tc.trip, 1
				b.setSpanLocked(t1, l.conf())
			}
			if b.land.cost != 400 {
				t.Errorf("in flight at the provider: %v, want 400", b.land.cost)
			}
			b.mu.Unlock()
			// 400 settled + 550: fits 1000 by itself. With a quarter of the
			// 400 in flight landing (100), it waits: for the settled call to
			// leave the sliding window, or for the next fixed window.
			next := Request{Provider: "p", Model: "m", Session: "x", InputTokens: 450}
			if tc.wait == 0 {
				mustAdmit(t, l, t1, next)
				return
			}
			mustWait(t, l, t1, next, "tpm", tc.wait)
		})
	}
}

// A 429's reading at completion may lack one call that completed unseen: the
// bracket above the reading reaches the largest call in flight once a round
// trip was measured (not a call admitted and not yet sent, which cannot have
// completed), and nothing before.
func TestUnseenLandingBracketsA429(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 10_000, RPM: 1000, CountsAt: CountsAtCompletion}
	l, t1 := landingLedger(t, c, 900, 200) // 1000 and 300 at the provider
	r := req(4000)                         // the largest, but not sent yet
	r.Sends = true
	mustAdmit(t, l, t1, r)
	b := l.bucketFor("p", "m", t1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if got := b.unseenLandingLocked(); got != 0 {
		t.Fatalf("no round trip measured: %d, want 0", got)
	}
	b.delays[0], b.nDelay = 10*time.Millisecond, 1
	if got := b.unseenLandingLocked(); got != 1000 {
		t.Fatalf("the largest call sent: %d, want 1000", got)
	}
	b.delays[0] = 10 * time.Second // every call lands within the trip: the reserve is all of them
	if got, want := b.unseenLandingLocked(), b.completionMarginLocked(0); got != want || want != 1300 {
		t.Fatalf("a trip longer than the calls: %d, want the reserve %d (1300: the calls sent)", got, want)
	}
}

// What the bucket says a 429's reading may lack (learner.unseen) widens the
// bracket the clean record is looked for in, and only that: the trigger is
// the record when it lies within reach, the reading when it does not, and the
// one step above a first trigger is armed by the slack alone.
func TestUnseenWidensOnlyTheCleanBracket(t *testing.T) {
	span := time.Minute
	for _, tc := range []struct {
		unseen, want float64
	}{{0, 860}, {100, 950}} {
		l := newLearner(1000, true, t0)
		l.trigger, l.quota, l.cleanMax = 1000, 1000, 950
		l.unseen = tc.unseen
		l.on429(t0.Add(10*time.Second), 860, 30, false, false, span)
		if l.trigger != tc.want {
			t.Fatalf("unseen %g: trigger %g, want %g", tc.unseen, l.trigger, tc.want)
		}
	}
	// A first trigger: a slack under one step (5% of the reading) arms no
	// step, however much the reading may lack.
	l := newLearner(1000, true, t0)
	l.unseen = 500
	l.on429(t0.Add(10*time.Second), 900, 30, false, false, span)
	if l.firstProbe == firstProbeArmed {
		t.Fatal("the unseen landing armed the step above the first trigger")
	}
}

// The landing's variance joins the margin's pooled variance: MarginSigmas
// standard deviations of the call's and the landing's variance together.
func TestLandingVarianceJoinsTheMargin(t *testing.T) {
	c := testGate()
	c.MarginSigmas = 2
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 1000, CountsAt: CountsAtCompletion}
	l, t1 := landingLedger(t, c, 900, 200)
	b := l.bucketFor("p", "m", t1)
	b.mu.Lock()
	defer b.mu.Unlock()
	const v = 10_000.0 // a call's own variance
	if got, want := b.completionMarginLocked(v), b.marginOf(v); got != want {
		t.Fatalf("no round trip: %d, want the call's own margin %d", got, want)
	}
	b.delays[0], b.nDelay = 100*time.Millisecond, 1 // p = 0.1 of calls 1000 and 300 at the provider
	mean, lv := 0.1*1300, 0.1*0.9*(1000*1000+300*300)
	want := int64(math.Ceil(mean)) + int64(math.Ceil(2*math.Sqrt(v+lv)))
	if got := b.completionMarginLocked(v); got != want {
		t.Fatalf("with the landing: %d, want %d", got, want)
	}
}

// The requests kept free for the calls that may complete unseen: the
// expected number within the trip, rounded up, and none where a request kept
// free costs more than the 429s it spares (λ × budget² under 1) or before a
// trip and a time in flight were measured.
func TestLandingRequestReserve(t *testing.T) {
	var g landing
	if got := g.requestReserve(time.Second, 20); got != 0 {
		t.Fatalf("nothing open: %d", got)
	}
	for range 4 {
		g.open(1000)
	}
	if got := g.requestReserve(time.Second, 20); got != 0 {
		t.Fatalf("no time in flight measured yet: %d", got)
	}
	g.settled(2 * time.Second)
	for _, tc := range []struct {
		trip   time.Duration
		budget int
		want   int
	}{
		{0, 20, 0},                      // no round trip measured
		{10 * time.Millisecond, 20, 1},  // λ = 4 × 0.005 = 0.02, λ × 400 = 8
		{10 * time.Millisecond, 7, 0},   // λ × 49 = 0.98
		{10 * time.Millisecond, 8, 1},   // λ × 64 = 1.28
		{600 * time.Millisecond, 20, 2}, // λ = 1.2
		{10 * time.Second, 20, 4},       // every call lands within the trip
	} {
		if got := g.requestReserve(tc.trip, tc.budget); got != tc.want {
			t.Errorf("trip %v, budget %d: %d requests kept, want %d", tc.trip, tc.budget, got, tc.want)
		}
	}
	g.close(1000, false)
	if g.calls != 3 {
		t.Fatalf("after one close: %d calls", g.calls)
	}
	g.close(1000, true)
	if g.calls != 0 {
		t.Fatalf("nothing open: %d calls", g.calls)
	}
}

// At completion the request budget keeps room for the calls in flight that
// may complete within the round trip, as the token budget does: nine calls
// completed in the window and one in flight (a second in flight each), a
// tenth request fits a budget of ten — until a 429 measured a trip of a
// quarter of the time in flight, after which it waits for the first
// completion to leave the window. Not at a budget where the one request kept
// free would cost more than the 429s it spares, and not on arrival, where the
// calls in flight are counted already (eight completed and one in flight: the
// tenth fits). In fixed windows counted at completion as in a sliding window:
// there it waits for the next edge.
func TestCompletionRequestsKeepRoomForLandings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rpm     int
		trip    time.Duration
		wait    time.Duration // 0: admitted
		arrival bool
		windows string
	}{
		{name: "on arrival, a quarter of the time in flight", rpm: 10, trip: 250 * time.Millisecond, arrival: true},
		{name: "fixed windows, no round trip measured", rpm: 10, windows: WindowsFixed},
		{name: "fixed windows, a quarter of the time in flight", rpm: 10, trip: 250 * time.Millisecond, wait: time.Minute, windows: WindowsFixed}, // the next edge
		{name: "no round trip measured", rpm: 10},
		// the completions leave a minute after they settled (t0 + 1 s), plus the count guard (1.5 × the trip)
		{name: "a quarter of the time in flight", rpm: 10, trip: 250 * time.Millisecond, wait: 61*time.Second + 375*time.Millisecond},
		{name: "a budget of three, a tenth of the time in flight", rpm: 3, trip: 100 * time.Millisecond}, // λ × 9 = 0.9
		{name: "a budget of three, a quarter of the time in flight", rpm: 3, trip: 250 * time.Millisecond, wait: 61*time.Second + 375*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Defaults = ModelLimits{TPM: 1_000_000, RPM: tc.rpm, CountsAt: CountsAtCompletion, Windows: tc.windows}
			completed := tc.rpm - 1
			if tc.arrival {
				c.Defaults.CountsAt, completed = CountsAtArrival, tc.rpm-2
			}
			l, _, _ := newTestLedger(t, c)
			t1 := t0.Add(time.Second)
			for range completed {
				a := mustAdmit(t, l, t0, req(100))
				if err := l.Settle(t1, a, Usage{InputTokens: 100, OutputTokens: 10}); err != nil {
					t.Fatal(err)
				}
			}
			mustAdmit(t, l, t1, req(100)) // in flight
			b := l.bucketFor("p", "m", t1)
			b.mu.Lock()
			if b.rpm != tc.rpm {
				t.Errorf("request budget %d, want %d", b.rpm, tc.rpm)
			}
			if tc.trip > 0 {
				b.delays[0], b.nDelay = tc.trip, 1
				b.setSpanLocked(t1, l.conf())
			}
			b.mu.Unlock()
			if tc.wait == 0 {
				mustAdmit(t, l, t1, req(100))
				return
			}
			mustWait(t, l, t1, req(100), "rpm", tc.wait)
		})
	}
}
