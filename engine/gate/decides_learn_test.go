package gate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The fit behind learning what a provider decides on (decides.go): what the
// provider counted past the known count, r, against D and I. Deciding on the
// whole cost, r follows D; on what it knows, it does not; a provider that
// counts at completion leaves the calls in flight out (here I's slope −1; the
// simulator's reads about −0.5, its calls in flight partly written). Another
// client's spend, moving with neither, is the intercept.
func TestDecidesFitReadsTheSlopes(t *testing.T) {
	cases := []struct {
		name           string
		r              func(d, i, noise float64) float64
		wantD, wantI   float64
		wantResidUnder float64 // of the budget
	}{
		{"whole cost", func(d, i, n float64) float64 { return 20000 + d + n }, 1, 0, 0.02},
		{"what it knows", func(d, i, n float64) float64 { return 20000 + n }, 0, 0, 0.02},
		{"at completion", func(d, i, n float64) float64 { return 20000 - i + n }, 0, -1, 0.02},
	}
	const budget = 200000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var e decidesEvidence
			for range 400 {
				n := float64(rng.IntN(20)) // calls in flight
				d := n*600 + rng.NormFloat64()*1500
				i := n*4000 + rng.NormFloat64()*6000
				e.add(d, i, tc.r(d, i, rng.NormFloat64()*2000))
			}
			sd, si, resid, ok := e.slopes(decidesMinSpread * budget)
			if !ok || math.Abs(sd-tc.wantD) > 0.15 || math.Abs(si-tc.wantI) > 0.15 || resid > tc.wantResidUnder*budget {
				t.Fatalf("slopes D %.2f I %.2f, residual %.0f, ok %v; want D %.0f, I %.0f, residual under %.0f",
					sd, si, resid, ok, tc.wantD, tc.wantI, tc.wantResidUnder*budget)
			}
		})
	}
	// D that never moved says nothing.
	var e decidesEvidence
	for range 200 {
		e.add(3000, 4000, 20000)
	}
	if _, _, _, ok := e.slopes(decidesMinSpread * budget); ok {
		t.Fatal("a D that never moved fitted a slope")
	}
}

// What the headers taught goes with a reset, and a `decides` the user set
// stands over it.
func TestDecidesLearnedGoesWithAResetAndYieldsToTheUser(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	now := clk.Now()
	b := l.lockedBucketFor("p", "m", now)
	b.decidesLearnedKnown = true
	b.mu.Unlock()
	if st := l.BucketStatus(now, "p", "m"); st.Decides != DecidesKnown {
		t.Fatalf("learned known: status says %q", st.Decides)
	}
	l.Reset(now, "p", "m")
	if st := l.BucketStatus(now, "p", "m"); st.Decides != DecidesWhole {
		t.Fatalf("after a reset: status says %q, want %q", st.Decides, DecidesWhole)
	}
	cfg := testGate()
	cfg.Defaults.Decides = DecidesWhole
	if err := l.Reconfigure(now, cfg); err != nil {
		t.Fatal(err)
	}
	b = l.lockedBucketFor("p", "m", now)
	b.decidesLearnedKnown = true
	b.mu.Unlock()
	if st := l.BucketStatus(now, "p", "m"); st.Decides != DecidesWhole {
		t.Fatalf("the user said whole: status says %q", st.Decides)
	}
}

// TestHeadersTakeTheArrivalViewBack: the 429s voted the completion view in,
// but the remaining tokens read as a sliding window that counts the calls in
// flight (the fit leaves little, I's slope near 0): the arrival view comes
// back, and its readings in the completion view go. A fit that leaves as much
// as a provider counting at completion does (9–15% of the budget in the
// simulator) moves nothing. The user's countsAt stands over both.
func TestHeadersTakeTheArrivalViewBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noise     float64 // the fit's residual, about
		slopeD    float64 // what r follows of D
		slopeI    float64 // and of I
		countsAt  string  // configured
		wantView  string
		wantEvent bool
	}{
		{"a sliding window on arrival", 5, 0, 0, "", "arrival", true},
		{"what a completion provider leaves", 120, 0, 0, "", "completion", false},
		{"the calls in flight left out, plainly", 5, 0, -1, "", "completion", false},
		{"a D slope of neither way to decide", 5, 2, 0, "", "completion", false},
		{"the user says completion", 5, 0, 0, "completion", "completion", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testGate()
			cfg.Defaults.CountsAt = tc.countsAt
			l, clk, ev := newTestLedger(t, cfg)
			b, now := answersRead(t, l, clk.Now(), tc.slopeD, tc.slopeI, tc.noise)
			b.atCompletion, b.learn.trigger = true, 500 // voted in; a trigger read there
			b.mu.Unlock()
			l.Calibrate(now, "p", "m", 1000, 1000-30, -1, -1)
			st := l.BucketStatus(now, "p", "m")
			moved := false
			for _, e := range ev.kinds(EventLearn) {
				moved = moved || (e.Step == "count-mode" && e.Reason == "on-arrival")
			}
			if st.CountsAt != tc.wantView || moved != tc.wantEvent {
				t.Fatalf("view %q, event %v; want %q, %v", st.CountsAt, moved, tc.wantView, tc.wantEvent)
			}
			if tc.wantEvent && st.Trigger != 0 {
				t.Fatalf("trigger %v read in the completion view kept", st.Trigger)
			}
		})
	}
}

// TestHeadersKeepTheVotesFromTakingTheCompletionView: while the remaining
// tokens read as a sliding window that counts the calls in flight, a 429 that
// reads far higher in the completion view (calls admitted over a window ago,
// completed just now) does not take it; without that reading it does.
func TestHeadersKeepTheVotesFromTakingTheCompletionView(t *testing.T) {
	for _, headersSay := range []bool{false, true} {
		cfg := testGate()
		cfg.Defaults.RPM = 1000
		l, clk, _ := newTestLedger(t, cfg)
		now := clk.Now()
		var tks []Ticket
		for range 5 {
			tks = append(tks, mustAdmit(t, l, now, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 180, MaxTokens: 1}))
		}
		now = now.Add(61 * time.Second) // out of the arrival window, completing now
		for _, tk := range tks {
			if err := l.Settle(now, tk, Usage{InputTokens: 180, OutputTokens: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if headersSay {
			b := l.lockedBucketFor("p", "m", now)
			b.headersFitAt = now
			b.mu.Unlock()
		}
		l.RateLimited(now.Add(time.Second), "p", "m", time.Second)
		want := "completion"
		if headersSay {
			want = "arrival"
		}
		if st := l.BucketStatus(now.Add(time.Second), "p", "m"); st.CountsAt != want {
			t.Fatalf("headers read as a window counting the calls in flight: %v; view %q, want %q", headersSay, st.CountsAt, want)
		}
	}
}

// The readings taken as calls were sent: an answer finds the one nearest its
// call's send within the gap, across the ring's wrap, and none once the
// readings of that time were written over.
func TestSendReadingsNear(t *testing.T) {
	var s sendReadings
	for i := range 300 { // wraps: the first 44 are written over
		s.add(sendReading{at: int64(i) * 100, known: float64(i)})
	}
	for _, tc := range []struct {
		at, gap int64
		want    float64
		ok      bool
	}{
		{29_940, 100, 299, true}, // the newest
		{15_030, 100, 150, true}, // nearest: 15,000, not 15,100
		{15_070, 100, 151, true},
		{15_050, 10, 0, false},  // none within 10
		{4_400, 100, 44, true},  // the oldest held
		{4_200, 100, 0, false},  // written over
		{40_000, 100, 0, false}, // after them all
	} {
		r, ok := s.near(tc.at, tc.gap)
		if ok != tc.ok || (ok && r.known != tc.want) {
			t.Errorf("near(%d, %d) = %v, %v; want %v, %v", tc.at, tc.gap, r.known, ok, tc.want, tc.ok)
		}
	}
	var none *sendReadings
	if _, ok := none.near(0, 100); ok {
		t.Error("no readings kept: found one")
	}
}

// While most answers name their call's send and too few of them found the
// window's reading then, the fit as the answers arrive does not decide alone:
// figures stated at the arrival make it swing. Answers that name no send
// (a library caller) are read as they arrive, as before.
func TestDecidesWaitsForTheFitAtTheSend(t *testing.T) {
	for _, named := range []bool{false, true} {
		l, clk, _ := newTestLedger(t, testGate())
		b, now := answersRead(t, l, clk.Now(), 0, 0, 5) // what the provider counted past the known count follows neither D nor I: known
		if named {
			b.decides.withSent = b.decides.n // and none found its reading (decidesAtSend.n is 0)
		}
		b.mu.Unlock()
		l.Calibrate(now, "p", "m", 1000, 1000-30, -1, -1)
		want := DecidesKnown
		if named {
			want = DecidesWhole
		}
		if st := l.BucketStatus(now, "p", "m"); st.Decides != want {
			t.Fatalf("answers named their sends: %v; decides %q, want %q", named, st.Decides, want)
		}
	}
}

// answersRead gives model p/m of l an output seen at now and, three minutes
// on, 200 answers read as they arrived: what the provider counted past the
// known count is 30 + slopeD·D + slopeI·I + noise. It returns the bucket,
// locked, and the time then.
func answersRead(t *testing.T, l *Ledger, now time.Time, slopeD, slopeI, noise float64) (*bucket, time.Time) {
	t.Helper()
	tk := mustAdmit(t, l, now, req(10))
	if err := l.Settle(now, tk, Usage{InputTokens: 10, OutputTokens: 5}); err != nil { // an output seen
		t.Fatal(err)
	}
	now = now.Add(3 * time.Minute)
	b := l.lockedBucketFor("p", "m", now)
	b.decides.since = now.Add(-2 * time.Minute)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := float64(rng.IntN(20))
		d := n*6 + rng.NormFloat64()*15
		i := n*40 + rng.NormFloat64()*60
		b.decides.add(d, i, 30+slopeD*d+slopeI*i+rng.NormFloat64()*noise)
	}
	return b, now
}
