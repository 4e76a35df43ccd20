package server

import (
	"slices"
	"strconv"
	"testing"
)

// seqRand draws its values in turn.
type seqRand struct {
	v []float64
	i int
}

func (r *seqRand) Float64() float64 { f := r.v[r.i%len(r.v)]; r.i++; return f }

// fixedRand draws the same value every time.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// validSpreadRetryAfter says whether v is a Retry-After spreadRetryAfter draws.
func validSpreadRetryAfter(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= 1 && n <= spreadRetryMax
}

// The calls a down store or a full body budget refuses are told to come back
// over several seconds, not all in the same one.
func TestSpreadRetryAfter(t *testing.T) {
	s := &Server{rnd: &seqRand{v: []float64{0, 0.26, 0.51, 0.76, 0.999999}}}
	var got []string
	for range 5 {
		got = append(got, s.spreadRetryAfter())
	}
	if want := []string{"1", "2", "3", "4", "4"}; !slices.Equal(got, want) {
		t.Fatalf("Retry-After %v, want %v", got, want)
	}
}
