package gate

import "time"

// The rate a refilling reserve implies.
//
// A provider that describes its limit as a token bucket (a reserve of one
// window's limit, refilled continuously at the limit per window) refuses once
// the reserve is empty — which may be long after the gate went above its rate,
// and at a sliding-window reading far above it. The sliding reading then says
// little; what was spent says more. If the reserve was full at s and is empty
// now, at t, then limit × (t − s + window) = what was spent in between. The
// gate does not know when the reserve was last full, but for any s the spend
// over [s, t] ÷ (t − s + window) is at most the rate, and equals it at the
// last time it was full: the largest such figure over the last windows is the
// estimate. For a sliding or fixed window it is about a lower bound on the limit
// too (nothing spends more than the limit in a window; the spend counts calls in
// flight at their reservation until they settle), and the rule that uses it
// only ever lowers a reading with it.

// spentSamples is how many samples of the spend are kept, one per
// window ÷ spentPerWindow at most: at least 16 windows of history in 1 KiB.
const (
	spentSamples   = 64
	spentPerWindow = 4
)

type spentSample struct {
	at    int64 // unix nanos
	spent float64
}

// noteSpentLocked adds a grant's reservation to the spend and samples it.
func (b *bucket) noteSpentLocked(now time.Time, res float64) {
	at := now.UnixNano()
	if n := b.nSpent; n == 0 || at-b.spentAt[(n-1)%spentSamples].at >= int64(b.l.conf().Window)/spentPerWindow {
		b.spentAt[n%spentSamples] = spentSample{at: at, spent: b.spent}
		b.nSpent++
	}
	b.spent += res
}

// rateSpentLocked is the largest spend over [s, now] ÷ (now − s + window) over
// the samples s; ok is false before a window of samples.
func (b *bucket) rateSpentLocked(now time.Time) (rate float64, ok bool) {
	w := float64(b.l.conf().Window)
	at := now.UnixNano()
	for i := 0; i < min(b.nSpent, spentSamples); i++ {
		s := b.spentAt[i]
		d := float64(at - s.at)
		if d < w {
			continue
		}
		ok = true
		rate = max(rate, (b.spent-s.spent)*w/(d+w))
	}
	return rate, ok
}
