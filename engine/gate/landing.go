package gate

import (
	"math"
	"time"
)

// Calls that complete unseen.
//
// A provider that counts a call when it completes decides on a new call with
// the calls completed in its window when the new call arrives. The gate learns
// of a completion only when the answer comes back. So when it admits a call, the
// calls that completed within the last one-way trip, and those that will
// complete before the new call arrives, are in the provider's window and not in
// the gate's: a round trip in which the gate is blind. Admitted at the edge of
// the budget, the call is refused when one of them is large. In the simulator
// (the completion-counting provider told to the gate, 5–15 ms each way, seeds
// 1–12 at the truth) nearly every 429 after the first came so — the rest were
// single very large calls: a call of 9,000–16,000 tokens had completed within
// 30 ms of the refused call's arrival, and without it the call fitted. Without
// network delay the same runs took one 429 each.
//
// So at completion the gate keeps room for what may land in that round trip:
// each call in flight completes within it with the chance round trip ÷ mean
// time in flight (completions taken as memoryless), and costs what the
// provider will count of it. The mean of that sum is reserved, and its
// variance joins the margin's. The round trip is the longest recent
// admission→429 delay (a 429 is answered at once: its delay is the trip
// there and back), the same delays that set the count guard; before any 429
// nothing is reserved.
//
// Requests land unseen too. A call admitted at the edge of the request budget
// is refused when one call in flight completed within the trip, so the
// request budget keeps the expected number free, rounded up to whole requests
// (landing.requestReserve). Requests bound by such a provider, the gate told so and
// at the truth, took 3–20 429s in half an hour in the simulator, 1–6 with it.

// landingAvgCalls is how many settled calls the mean time in flight averages.
const landingAvgCalls = 64

// landing is what the bucket knows of the calls in flight as future
// completions.
type landing struct {
	cost, costSq float64 // Σ and Σ² of the open calls' expected cost at the provider
	calls        int     // the open calls: sent, not settled
	inFlightMean float64 // seconds from send to settle, a moving mean over landingAvgCalls
}

// open adds a call in flight of expected cost c (the provider's count of it).
func (g *landing) open(c int64) {
	f := float64(c)
	g.cost += f
	g.costSq += f * f
	g.calls++
}

// close takes a call out; last says nothing is open now (no float residue).
func (g *landing) close(c int64, last bool) {
	f := float64(c)
	g.cost -= f
	g.costSq -= f * f
	g.calls--
	if last || g.cost < 0 || g.costSq < 0 {
		g.cost, g.costSq, g.calls = 0, 0, 0
	}
}

// settled records how long a settled call was in flight.
func (g *landing) settled(d time.Duration) {
	s := d.Seconds()
	if s <= 0 {
		return // a clock that stepped back says nothing
	}
	if g.inFlightMean == 0 {
		g.inFlightMean = s
		return
	}
	g.inFlightMean += (s - g.inFlightMean) / landingAvgCalls
}

// chance is the chance that a call in flight completes within trip: trip ÷
// mean time in flight, at most 1; 0 without a trip or before a time in
// flight was measured.
func (g *landing) chance(trip time.Duration) float64 {
	if trip <= 0 || g.inFlightMean <= 0 {
		return 0
	}
	return math.Min(1, trip.Seconds()/g.inFlightMean)
}

// reserve is the expected cost of the calls completing within trip, and its
// variance: each call completes within it with the chance p.
func (g *landing) reserve(trip time.Duration) (mean, variance float64) {
	if g.cost <= 0 {
		return 0, 0
	}
	p := g.chance(trip)
	return p * g.cost, p * (1 - p) * g.costSq
}

// requestReserve is how many requests to keep free at completion for the
// calls that may complete unseen within trip, under a request budget of
// budget: the expected number λ = p × the calls in flight, rounded up — when
// it is worth a request. A busy gate admits nearly every call at the edge of
// the budget, where one unseen completion refuses it: about λ × budget 429s a
// window, each cooling the model for about a window's budget, against one
// request kept free. Where λ (before rounding) × budget² is under 1, the
// request kept costs more than the 429s it spares: at a budget of three
// requests, one kept whenever anything is in flight would give up a third.
func (g *landing) requestReserve(trip time.Duration, budget int) int {
	lambda := g.chance(trip) * float64(g.calls)
	if lambda*float64(budget)*float64(budget) < 1 { // also: no trip, nothing in flight
		return 0
	}
	return int(math.Ceil(lambda))
}

// landingTripLocked is the round trip the landing is reckoned over: the
// longest recent admission→429 delay, at most 2% of the window like the count
// guard it also sets (one slow 429 must not make every call in flight land).
func (b *bucket) landingTripLocked() time.Duration {
	return min(b.roundTripLocked(), b.l.conf().Window/50)
}

// completionMarginLocked is what an admission at completion needs beyond the
// call's own cost: the margin over the call's variance v and the landing's,
// plus the landing's mean.
func (b *bucket) completionMarginLocked(v float64) int64 {
	mean, lv := b.land.reserve(b.landingTripLocked())
	return int64(math.Ceil(mean)) + b.marginOf(v+lv)
}

// unseenLandingLocked is how far a 429's reading at completion may lie below
// the provider's count: the calls that completed while the gate could not see
// it. The reserve above covers their expected sum; a 429 is the rare moment
// one large call landed, so the reading's bracket reaches the largest call in
// flight (a scan of the open tickets: at a 429, not on the admission path).
// Nothing before a round trip was measured: without network delay the gate
// sees each completion as the provider counts it.
func (b *bucket) unseenLandingLocked() int64 {
	if b.landingTripLocked() <= 0 {
		return 0
	}
	var largest int64
	for i := range b.slots {
		if s := &b.slots[i]; s.open && !s.sendPending {
			largest = max(largest, s.landing)
		}
	}
	return max(largest, b.completionMarginLocked(0))
}
