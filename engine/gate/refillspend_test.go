package gate

import (
	"math"
	"testing"
	"time"
)

// A reserve that falls by more than the gate's spend less the refill says
// what the others spent: over a window, the refill of 1,000, the gate's 900
// and a deficit 100 deeper read 200 a window.
func TestRefillReadsTheOthersFromTheSlope(t *testing.T) {
	const stated, w = 1000.0, int64(time.Minute)
	var tr refillTrack
	at := func(s float64) int64 { return int64(s * float64(time.Second)) }
	if _, ok := tr.read(at(1), 500, 0, stated, w); ok {
		t.Fatal("one point read a spend")
	}
	// Answers every few seconds, the gate spending 15 a second and the
	// deficit growing by 100/60 a second: no fill is possible in between.
	var got float64
	var ok bool
	for s := 4.0; s <= 61; s += 3 {
		got, ok = tr.read(at(s), 500+100*(s-1)/60, 15*(s-1), stated, w)
		if s < 61 && ok {
			t.Fatalf("at %.0f s, less than a window after the first point, it read %.0f", s, got)
		}
	}
	if !ok || math.Abs(got-200) > 0.5 {
		t.Fatalf("a window on: read %.1f (%v), want 200 a window", got, ok)
	}
}

// The reserve read full wastes its refill: the span starts over there, and
// so it does when an answer comes later than the last deficit took to
// refill (the reserve may have filled unseen).
func TestRefillSpanStartsOverWhereTheReserveMayHaveFilled(t *testing.T) {
	const stated, w = 1000.0, int64(time.Minute)
	sec := func(s float64) int64 { return int64((1000 + s) * float64(time.Second)) } // (0 is no time: the track starts there)
	for _, c := range []struct {
		name   string
		break_ func(tr *refillTrack)
	}{
		// read full, then short again a tenth of a second on: within the
		// time the 2 short took to refill, so no gap starts it over
		{"read full", func(tr *refillTrack) { tr.read(sec(30), 2, 0, stated, w); tr.read(sec(30.1), 400, 0, stated, w) }},
		// 300 short refills in 18 s; the next answer 20 s later
		{"a long gap", func(tr *refillTrack) { tr.read(sec(30), 300, 0, stated, w); tr.read(sec(50), 300, 300, stated, w) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr refillTrack
			tr.read(sec(0), 400, 0, stated, w)
			c.break_(&tr)
			start := tr.lastAt
			for s := 52.0; s < 150; s += 2 {
				if _, ok := tr.read(sec(s), 400, 0, stated, w); ok && sec(s)-start < w {
					t.Fatalf("read at %.0f s, within a window of where the span started over (%.0f s)", s, float64(start)/1e9-1000)
				}
			}
		})
	}
	// Within the refill time of the deficit the span goes on.
	var tr refillTrack
	tr.read(sec(0), 600, 0, stated, w)
	tr.read(sec(30), 600, 500, stated, w) // 600 short take 36 s to refill
	if _, ok := tr.read(sec(61), 600, 1000, stated, w); !ok {
		t.Fatal("no reading a window on, though no answer came later than the deficit took to refill")
	}
}

// An answer to a call sent before the last one read (a long call's) reads
// against the points a window before its send, and adds no point; one that
// reads the reserve full then starts the span over, since a span across it
// wasted its refill.
func TestRefillOlderAnswerReadsBehind(t *testing.T) {
	const stated, w = 1000.0, int64(time.Minute)
	sec := func(s float64) int64 { return int64((1000 + s) * float64(time.Second)) }
	// The gate at 900 a window, the others 200: the deficit grows by 100 a
	// window, so a point read against the wrong one reads off by its slope.
	deficit := func(s float64) float64 { return 300 + 100*s/60 }
	own := func(s float64) float64 { return 900 * s / 60 }
	var tr refillTrack
	for s := 0.0; s <= 90; s += 2 {
		tr.read(sec(s), deficit(s), own(s), stated, w)
	}
	n, last := tr.n, tr.lastAt
	// Sent at 70 s: read against the newest point at least a window before
	// it (10 s), not the newest one (90 s).
	got, ok := tr.read(sec(70), deficit(70), own(70), stated, w)
	if !ok || math.Abs(got-200) > 0.5 || tr.n != n || tr.lastAt != last {
		t.Fatalf("an older answer: read %.1f (%v), points %d → %d, last %d → %d; want 200 and no point added", got, ok, n, tr.n, last, tr.lastAt)
	}
	if _, ok := tr.read(sec(75), 1, own(75), stated, w); ok || tr.n != 0 {
		t.Fatalf("an older answer reading the reserve full: read %v, %d points kept; want none", ok, tr.n)
	}
}

// A wall clock stepped back leaves the reserve's points in the old frame:
// they are dropped, and the reserve is read afresh.
func TestRefillForgottenOnAClockStep(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	b.outside.refill = new(refillReserve)
	b.outside.refill.now.read(t0.UnixNano(), 500, 0, 1000, int64(time.Minute))
	b.followClockLocked(t0)
	b.followClockLocked(t0.Add(-time.Hour))
	dropped := b.outside.refill == nil
	b.mu.Unlock()
	if !dropped {
		t.Fatal("the reserve's points were kept across a clock step back of an hour")
	}
}
