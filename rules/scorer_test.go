package rules

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
)

func f(v float64) *float64 { return &v }

// The expr form of the default rule and pool.DefaultScorer agree on every reading.
func TestDefaultScoreExprMatchesEngine(t *testing.T) {
	sc, err := NewScorer(DefaultScoreExpr)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"weekly", "monthly", "daily", ""}
	for i := 0; i < 2000; i++ {
		var r engine.Reading
		if rng.IntN(2) == 0 {
			r.Remaining = f(float64(rng.IntN(100)))
		}
		for j := rng.IntN(4); j > 0; j-- {
			w := engine.WindowReading{Name: names[rng.IntN(len(names))], Remaining: float64(rng.IntN(50) - 5)}
			if rng.IntN(2) == 0 {
				w.Capacity = f(float64(rng.IntN(60)))
			}
			r.Windows = append(r.Windows, w)
		}
		caps := map[string]float64{}
		if rng.IntN(2) == 0 {
			caps["monthly"] = float64(rng.IntN(80))
		}
		coefs := map[string]float64{}
		if rng.IntN(2) == 0 {
			coefs["monthly"] = []float64{0, 0.25, 1}[rng.IntN(3)]
		}
		var capacity *float64
		if rng.IntN(2) == 0 {
			capacity = f(float64(rng.IntN(40)))
		}
		want, wok, _ := pool.DefaultScorer{}.Score(context.Background(), r, caps, coefs, capacity)
		got, gok, err := sc.Score(context.Background(), r, caps, coefs, capacity)
		if err != nil || gok != wok || (wok && got != want) {
			t.Fatalf("reading %+v caps %v coefs %v capacity %v: expr (%g,%v,%v), engine (%g,%v)", r, caps, coefs, capacity, got, gok, err, want, wok)
		}
	}
}

func TestScorerExpressions(t *testing.T) {
	r := engine.Reading{Remaining: f(30), Windows: []engine.WindowReading{{Name: "weekly", Remaining: 5, Capacity: f(10)}}}
	for _, tc := range []struct {
		src    string
		score  float64
		scored bool
		err    bool
	}{
		{"remaining", 30, true, false},
		{"remaining / 2 + windows[0].remaining", 20, true, false},
		{"nil", 0, false, false},
		{`"high"`, 0, false, true},
	} {
		sc, err := NewScorer(tc.src)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		s, ok, err := sc.Score(context.Background(), r, nil, nil, nil)
		if (err != nil) != tc.err || ok != tc.scored || s != tc.score {
			t.Errorf("%s: (%g, %v, %v)", tc.src, s, ok, err)
		}
	}
	if _, err := NewScorer("remaining +"); err == nil {
		t.Fatal("a broken expression compiled")
	}
}
