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
// own spend — what it cannot say is how much less — so the mean decays by
// refillQuietDecay a window, the room rises back toward the stated limit, and
// a reserve that drains again reads them anew. While it reads drawn but no
// span is long enough the mean stands (refillHoldLocked). Not when the user
// set countsAt or decides (the headers' view is not read then, and neither
// is whether they read as a refill), nor with a shared window.

const (
	refillSpan       = 1.0      // the least span a reading covers, in windows
	refillSample     = 1.0 / 16 // samples are this much of a window apart
	refillSamples    = 48       // 3 windows of them
	refillFull       = 0.995    // a reserve this full reads full
	refillQuietDecay = 0.05     // of the others' mean a window, while full
	refillStale      = 5        // windows a reading stays good; the mean's time constant, as many times a window count's
	refillVarSpan    = 50       // readings the variances of the two moments weigh
)

type refillPoint struct {
	at           int64   // unix nanos
	deficit, own float64 // the limit less the remainder; the gate's spend so far
}

// refillTrack follows the reserve at one moment of the answers.
type refillTrack struct {
	pts         [refillSamples]refillPoint
	n           int // samples held (the newest at (n-1) % refillSamples)
	seen        bool
	lastAt      int64 // the last answer read in order
	lastDeficit float64
	// The readings' moving mean and variance: the moment read is the one
	// whose readings vary less.
	movingSpread
}

// movingSpread is a moving mean and variance of readings, over about the
// last span of them.
type movingSpread struct {
	mean, variance float64
	readings       int
}

// add weighs in reading x; the first is the mean.
func (m *movingSpread) add(x float64, span int) {
	k := 1.0 / float64(span)
	if m.readings == 0 {
		m.mean, k = x, 1
	}
	dx := x - m.mean
	m.mean += k * dx
	m.variance = (1-k)*m.variance + k*dx*dx
	m.readings++
}

// varianceRead is the readings' variance, less the weight of the zero it
// started from (the moving variance's first reading is its own mean).
func (m *movingSpread) varianceRead(span int) float64 {
	switch {
	case m.readings <= 1:
		return 0
	case m.readings > 25*span:
		return m.variance // the zero's weight is about 1e-11 of it: no need for the power
	}
	return m.variance / (1 - math.Pow(1-1.0/float64(span), float64(m.readings-1)))
}

// refillReserve is the reserve followed as the answers come and as their
// calls were sent.
type refillReserve struct {
	now, sent      refillTrack
	answers, named int  // answers read, and of them those that named their send (halved past refillCounted)
	useSent        bool // the moment read: as the calls were sent
}

// refillCounted bounds the answers counted for which moment they name: the
// recent ones decide.
const refillCounted = 1000

// refillSwitch: the other moment is read once its readings vary this much
// less (a ratio of variances), so the two do not take turns on noise.
const refillSwitch = 1.5

// ownSpentLocked is the gate's spend so far: the calls in flight at what they
// are expected to cost, not their reservation.
func (b *bucket) ownSpentLocked() float64 {
	return b.spent - max(0, float64(b.reservedOpen)-b.land.cost)
}

// read adds an answer's deficit at at (own: the gate's spend then) and returns
// the others' spend a window it reads, if the span allows one.
func (t *refillTrack) read(at int64, deficit, own, stated float64, w int64) (float64, bool) {
	switch full := deficit <= (1-refillFull)*stated; {
	case !t.seen || at >= t.lastAt:
		// The reserve may have filled unseen only if that long refilled
		// the deficit last read.
		gap := !t.seen || float64(at-t.lastAt) >= t.lastDeficit/stated*float64(w)
		t.seen, t.lastAt, t.lastDeficit = true, at, deficit
		if full {
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
	case full:
		// An answer to a call sent before the last one read, the reserve
		// full then: a span across it wasted its refill.
		t.n = 0
		return 0, false
	} // else such an answer is read against the points before its send
	for i := t.n - 1; i >= max(0, t.n-refillSamples); i-- {
		p := t.pts[i%refillSamples]
		if d := at - p.at; d >= int64(refillSpan*float64(w)) {
			span := float64(d) / float64(w)
			x := (stated*span - (own - p.own) + deficit - p.deficit) / span
			t.add(x, refillVarSpan)
			return x, true
		}
	}
	return 0, false
}

// refillReadingLocked reads the others' spend a window from a bucket's
// deficit (the stated limit less the remainder, in the window's units) in an
// answer to a call sent at sent (zero: unknown), or ok is false: the reserve
// reads full, or the span is too short.
func (b *bucket) refillReadingLocked(now, sent time.Time, atSend sendReading, found bool, deficit, stated float64) (others float64, ok bool) {
	if b.outside.refill == nil {
		b.outside.refill = new(refillReserve) // 2 KiB, for the models whose answers state a limit
	}
	r := b.outside.refill
	w := int64(b.l.conf().Window)
	x, okNow := r.now.read(now.UnixNano(), deficit, b.ownSpentLocked(), stated, w)
	var y float64
	okSent := false
	if found {
		y, okSent = r.sent.read(atSend.at, deficit, atSend.own, stated, w)
	}
	if r.answers++; !sent.IsZero() {
		r.named++
	}
	if r.answers > refillCounted {
		r.answers, r.named = r.answers/2, r.named/2
	}
	// Which moment: the one whose readings vary less, once each has enough
	// of them — the answers' own alone while most do not name their send,
	// and none while most do and those have too few.
	named := 2*r.named > r.answers
	nowReady, sentReady := r.now.readings >= refillVarSpan, named && r.sent.readings >= refillVarSpan
	switch vNow, vSent := r.now.varianceRead(refillVarSpan), r.sent.varianceRead(refillVarSpan); {
	case named && !sentReady:
		return 0, false
	case !sentReady:
		r.useSent = false
	case !nowReady:
		r.useSent = true
	case r.useSent && vSent > refillSwitch*vNow:
		r.useSent = false
	case !r.useSent && vNow > refillSwitch*vSent:
		r.useSent = true
	}
	switch {
	case r.useSent && okSent:
		return y, true
	case !r.useSent && okNow && nowReady:
		return x, true
	}
	return 0, false
}

// refillHoldLocked keeps the others' mean as it is and current: the reserve
// reads drawn, but the span since it was last seen full is too short for a
// reading. Held, the mean is as of now, so the next reading moves it by the
// least step (othersMinStep) rather than by the time since the last: the
// readings come in bursts between such spans, and weighing each burst's pause
// moved the room with every burst (the matrices with headers: 387 and 332
// runs meeting every target against 395 and 341).
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
