package gate

import (
	"math"
	"math/rand/v2"
	"testing"
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
