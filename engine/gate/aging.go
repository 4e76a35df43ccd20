package gate

import (
	"math"
	"time"
)

// Reservations that follow a call's age.
//
// A model writes at a steady pace, so a call that has run for τ has already
// written about (τ − base) ÷ perToken tokens and will end with at least that
// many. For each call in flight without max_tokens the gate reserves the
// expected output given that floor, E[X | X > k], and counts Var[X | X > k] in
// the pooled margin. A call just admitted reserves the plain mean; one still
// running long after most have ended reserves a long answer.
//
// Without ages, every call has to reserve the mean output of calls caught in
// flight — a long answer's mean, since long calls are in flight longer — and the
// margin has to cover that whole spread for every call, however far along it
// is. With them, the spread the margin covers is a residual's: on lognormal
// outputs (median 400, p99 3,000) the standard deviation per call in flight
// falls from about 1,260 tokens to 780.
//
// Both moments come from a lognormal fitted to recent outputs; base and
// perToken from a line fitted to (output, time in flight) of recent calls.
// When that line explains little (the duration hardly grows with the output:
// a provider that buffers whole answers, or outputs all alike), or the
// lognormal does not describe the outputs (agingFitRatio), ages say nothing and
// calls reserve the latency-weighted mean as before. With a shared window the
// reservations on the store are fixed at admission, so ages are not used there
// either.

// ageRefresh is how often, at most, the reservations of the calls in flight
// are brought up to their age: each pass is O(calls in flight).
const ageRefresh = 100 * time.Millisecond

// agingMinCorrelation is the least correlation of time in flight with output
// for the pace line to be used; agingMinPerToken the least time per token it
// may say (a million tokens a second), so a floor never runs away.
const (
	agingMinCorrelation = 0.5
	agingMinPerToken    = 1e-6
)

// agingFitRatio bounds how far the lognormal's mean may lie from the outputs'
// own (either way), and agingFitVar how far above their variance its variance
// may lie, for the lognormal to be trusted with the tail: a mix of very short
// and long outputs (classifications and essays) spreads ln(output) so wide that
// its lognormal mean is several times the real one.
const (
	agingFitRatio = 1.5
	agingFitVar   = 10
)

// outputModel fits outputs (of calls without max_tokens) and their pace. The
// fits are exponentially weighted over about outputModelSamples calls; the
// first few calls weigh equally.
type outputModel struct {
	lnMean, lnSq     float64 // of ln(output)
	n                int64
	mo, md, moo, mod float64 // of output o, time in flight d (s), o², o·d
	mdd              float64 // of d²

	// What the admission path reads, refreshed on each observation: whether
	// ages are used (the pace line explains the durations and the lognormal
	// describes the outputs), the pace line, and the plain mean and variance of
	// an output (a fresh call's).
	agesOK           bool
	base, perToken   float64
	mean0, variance0 float64
}

const outputModelSamples = 64

func (m *outputModel) observe(output int64, inFlight float64) {
	o := math.Max(1, float64(output))
	l := math.Log(o)
	a := 1.0 / outputModelSamples
	if m.n < outputModelSamples {
		a = 1 / float64(m.n+1)
	}
	m.lnMean += a * (l - m.lnMean)
	m.lnSq += a * (l*l - m.lnSq)
	m.mo += a * (o - m.mo)
	m.md += a * (inFlight - m.md)
	m.moo += a * (o*o - m.moo)
	m.mod += a * (o*inFlight - m.mod)
	m.mdd += a * (inFlight*inFlight - m.mdd)
	m.n++
	m.base, m.perToken, m.agesOK = m.fitPace()
	m.mean0, m.variance0 = m.moments(0)
	if ev := m.moo - m.mo*m.mo; m.mean0 > agingFitRatio*m.mo || m.mean0*agingFitRatio < m.mo || m.variance0 > agingFitVar*ev+1 {
		m.agesOK = false
	}
}

// fitPace is the fitted base time and time per output token (seconds); ok is
// false before reserveMinSamples calls, or when the line explains little.
func (m *outputModel) fitPace() (base, perToken float64, ok bool) {
	if m.n < reserveMinSamples {
		return 0, 0, false
	}
	vo, vd := m.moo-m.mo*m.mo, m.mdd-m.md*m.md
	cov := m.mod - m.mo*m.md
	if vo <= 0 || vd <= 0 || cov <= 0 || cov < agingMinCorrelation*math.Sqrt(vo*vd) {
		return 0, 0, false
	}
	perToken = cov / vo
	if perToken < agingMinPerToken {
		return 0, 0, false
	}
	return math.Max(0, m.md-perToken*m.mo), perToken, true
}

// floorAt is the output a call in flight for age seconds has written at least.
func (m *outputModel) floorAt(age float64) float64 {
	if !m.agesOK || age <= m.base {
		return 0
	}
	return (age - m.base) / m.perToken
}

// moments are E[X | X > k] and Var[X | X > k] under the fitted lognormal
// (k ≤ 1: the plain mean and variance).
func (m *outputModel) moments(k float64) (mean, variance float64) {
	mu := m.lnMean
	s := math.Sqrt(math.Max(m.lnSq-mu*mu, 1e-6))
	m1 := math.Exp(mu + s*s/2)
	m2 := math.Exp(2*mu + 2*s*s)
	if k <= 1 {
		return m1, math.Max(0, m2-m1*m1)
	}
	z := (math.Log(k) - mu) / s
	p := upperTail(z)
	if p < 1e-9 {
		// Far past anything the fit has seen: at least k, spread like its size.
		return math.Min(1.5*k, maxReservation), math.Min(k*k/4, maxReservation)
	}
	mean = math.Min(math.Max(k, m1*upperTail(z-s)/p), maxReservation)
	return mean, math.Min(math.Max(0, m2*upperTail(z-2*s)/p-mean*mean), maxReservation)
}

// upperTail is P(Z > z) for a standard normal Z.
func upperTail(z float64) float64 { return 0.5 * math.Erfc(z/math.Sqrt2) }

// agingLocked says whether reservations follow the calls' age.
func (b *bucket) agingLocked() bool {
	return b.l.shared == nil && b.est.model.agesOK && !b.decidesKnown()
}

// ageLocked brings the reservation of every call in flight without max_tokens
// up to its age, at most once per ageRefresh.
func (b *bucket) ageLocked(now time.Time) {
	at := now.UnixNano()
	if b.inFlight == 0 || (at >= b.agedAt && at-b.agedAt < int64(ageRefresh)) || !b.agingLocked() {
		return
	}
	b.agedAt = at
	for i := range b.slots {
		s := &b.slots[i]
		if !s.open || s.asked || s.sendPending {
			continue // an unsent call writes nothing yet, and its share of the view is fixed
		}
		mean, v := b.est.model.moments(b.est.model.floorAt(float64(at-s.admitted) / 1e9))
		if out := int64(math.Ceil(mean)); out != s.output {
			d := out - s.output
			b.win.resize(s.seq, s.reserved+d, out)
			b.out.win.resize(s.outSeq, out, 0) // the output window too: it has written at least that
			b.reservedOpen += d
			b.spent += float64(d)
			s.reserved += d
			s.output = out
		}
		v += s.inputVar // the input estimate's error stays what it was
		b.openVar += v - s.variance
		s.variance = v
	}
	b.openVar = max(b.openVar, 0)
}
