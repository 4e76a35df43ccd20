package gate

import (
	"math"
	"time"
)

// Another client on a token bucket's key, read from the reserve's slope.
//
// A window states what it counted: the limit less the remainder is the calls
// in it, and what the gate's own view does not hold of that is the others'
// spend (outside.go). A token bucket states its reserve instead, which says
// nothing of a window's count: full while the gate keeps under the rate, it
// reads as others spending far less than nothing, and draining, as others
// spending whatever the reserve lost since it was last full. So another
// client's tenth went unread, the gate spent the whole stated rate on top of
// it, and the reserve ran dry some ten windows on: a 429, and its trigger
// read far below the rate.
//
// What a reserve gains over a span is the refill less what everyone spent:
// R(t) = R(s) + rate × (t − s) − own − others, while it is never full in
// between (a full reserve wastes its refill). So over the last refillSpan of
// a window or more the others spent rate × (t − s) − own − (R(t) − R(s)),
// with own the gate's spend (the calls in flight at what they are expected to
// cost). Once the answers read as a refill (headersview.go), each answer is
// read so, into the same moving mean of the others' spend that sets the room
// they leave. A provider may state its reserve as of the call's arrival or as
// it answers (decides.go), so the reserve is followed at both moments, and the
// one whose readings vary less is read. An answer that states the reserve
// full starts the span over, and so does one later than the last by as long
// as its deficit took to refill: the reserve may have filled unseen. While the
// reserve reads full the others spend at most what refills past the gate's
// own spend, and the mean decays by refillQuietDecay a window, so the room
// rises back toward the stated limit and a reserve that drains again reads
// them anew.

const (
	refillSpan       = 1.0      // the least span a reading covers, in windows
	refillSample     = 1.0 / 16 // samples are this much of a window apart
	refillSamples    = 48       // 3 windows of them
	refillFull       = 0.995    // a reserve this full reads full
	refillQuietDecay = 0.05     // of the others' mean a window, while full
	refillStale      = 5        // windows a reading of the reserve stays good
	refillVarSpan    = 50       // readings the variances of the two moments weigh
)

type refillPoint struct {
	at           int64   // unix nanos
	deficit, own float64 // the limit less the remainder; the gate's spend so far
}

// refillTrack follows the reserve at one moment of the answers.
type refillTrack struct {
	pts         [refillSamples]refillPoint
	n           int   // samples held (the newest at (n-1) % refillSamples)
	lastAt      int64 // the last answer read
	lastDeficit float64
	// The readings' moving mean and variance: the moment read is the one
	// whose readings vary less.
	mean, variance float64
	readings       int
}

// refillReserve is the reserve followed as the answers come and as their
// calls were sent.
type refillReserve struct {
	now, sent      refillTrack
	answers, named int // answers read, and of them those that named their send
}

// ownSpentLocked is the gate's spend so far: the calls in flight at what they
// are expected to cost, not their reservation.
func (b *bucket) ownSpentLocked() float64 {
	return b.spent - max(0, float64(b.reservedOpen)-b.land.cost)
}

// read adds an answer's deficit at at (own: the gate's spend then) and returns
// the others' spend a window it reads, if the span allows one.
func (t *refillTrack) read(at int64, deficit, own, stated float64, w int64) (float64, bool) {
	if t.lastAt == 0 || at >= t.lastAt {
		// The reserve may have filled unseen only if that long refilled
		// the deficit last read.
		gap := t.lastAt == 0 || float64(at-t.lastAt) >= t.lastDeficit/stated*float64(w)
		t.lastAt, t.lastDeficit = at, deficit
		if deficit <= (1-refillFull)*stated {
			t.n = 0
			return 0, false
		}
		if gap {
			t.n = 0
		}
		if t.n == 0 || at-t.pts[(t.n-1)%refillSamples].at >= int64(refillSample*float64(w)) {
			t.pts[t.n%refillSamples] = refillPoint{at: at, deficit: deficit, own: own}
			t.n++
		}
	} else if deficit <= (1-refillFull)*stated {
		return 0, false
	} // else an answer to a call older than the last read: read against the points before it
	for i := t.n - 1; i >= max(0, t.n-refillSamples); i-- {
		p := t.pts[i%refillSamples]
		if d := at - p.at; d >= int64(refillSpan*float64(w)) {
			span := float64(d) / float64(w)
			x := (stated*span - (own - p.own) + deficit - p.deficit) / span
			k := 1.0 / refillVarSpan
			if t.readings == 0 {
				t.mean, k = x, 1
			}
			dx := x - t.mean
			t.mean += k * dx
			t.variance = (1-k)*t.variance + k*dx*dx
			t.readings++
			return x, true
		}
	}
	return 0, false
}

// refillReadingLocked reads the others' spend a window from a bucket's
// deficit (the stated limit less the remainder, in the window's units) in an
// answer to a call sent at sent (zero: unknown), or ok is false: the reserve
// reads full, or the span is too short.
func (b *bucket) refillReadingLocked(now, sent time.Time, deficit, stated float64) (others float64, ok bool) {
	if b.outside.refill == nil {
		b.outside.refill = new(refillReserve) // 2 KiB, for the models whose answers state a reserve
	}
	r := b.outside.refill
	w := int64(b.l.conf().Window)
	x, okNow := r.now.read(now.UnixNano(), deficit, b.ownSpentLocked(), stated, w)
	var y float64
	okSent := false
	if !sent.IsZero() {
		if s, found := b.sends.near(sent.UnixNano(), int64(2*b.l.conf().Window/decidesPerWindow)); found {
			y, okSent = r.sent.read(s.at, deficit, s.own, stated, w)
		}
	}
	r.answers++
	if !sent.IsZero() {
		r.named++
	}
	// Which moment: the one whose readings vary less, once both have enough
	// of them; the answer's own when most do not name their send.
	nowReady, sentReady := r.now.readings >= refillVarSpan, r.sent.readings >= refillVarSpan
	if 2*r.named <= r.answers {
		sentReady = false
	}
	switch {
	case 2*r.named > r.answers && !sentReady:
		return 0, false
	case okSent && sentReady && (!nowReady || r.sent.variance < r.now.variance):
		return y, true
	case okNow && nowReady && (!sentReady || r.now.variance <= r.sent.variance):
		return x, true
	}
	return 0, false
}

// refillHoldLocked keeps the others' mean as it is: the reserve reads drawn,
// but the span since it was last seen full is too short for a reading.
func (b *bucket) refillHoldLocked(now time.Time) {
	if s := &b.outside.others; s.weight > 0 && now.After(s.at) {
		s.at = now
	}
}

// refillQuietLocked decays the others' mean while the reserve reads full:
// together they spend no more than refills.
func (b *bucket) refillQuietLocked(now time.Time) {
	s := &b.outside.others
	if s.weight == 0 || !now.After(s.at) {
		return
	}
	k := math.Exp(-refillQuietDecay * float64(now.Sub(s.at)) / float64(b.l.conf().Window))
	s.mean *= k
	s.variance *= k
	s.at = now
	if s.mean <= othersMinShare*b.learn.stated {
		s.on = false
	}
}
