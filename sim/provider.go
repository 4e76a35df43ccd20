package sim

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Provider limit models (scenario key provider.model).
const (
	// LimitSlidingArrival counts a call's whole cost on a sliding window at the
	// instant it arrives at the provider.
	LimitSlidingArrival = "sliding-arrival"
	// LimitSlidingCompletion counts a call when it completes; a call is refused at
	// arrival when the completed calls in the window plus its own cost are over the
	// limit (calls still running are not counted yet).
	LimitSlidingCompletion = "sliding-completion"
	// LimitTokenBucket refills continuously at limit ÷ window up to a capacity of
	// one limit; a call takes its cost from the bucket when it arrives. OpenAI
	// describes its limits this way.
	LimitTokenBucket = "token-bucket"
	// LimitFixedWindow counts calls at arrival in clock-aligned windows (multiples
	// of the window since the Unix epoch) that reset at each boundary.
	LimitFixedWindow = "fixed-window"
)

// What decides a call at arrival (scenario key provider.decides).
const (
	// DecidesWhole: the call's whole cost, its output included, as if the
	// provider knew at arrival what the model will write.
	DecidesWhole = "whole"
	// DecidesKnown: what the provider knows at arrival — the call's input and
	// its max_tokens. A call in flight counts that much until it completes;
	// then the rest of its whole cost is counted: in its sliding-window entry
	// (at its arrival), from the bucket's level, or in the fixed window current
	// at completion.
	DecidesKnown = "known"
)

// When an answer's rate-limit headers are stated (scenario key
// provider.headersAt); the answer carries them back either way.
const (
	// HeadersAtCompletion: as the call completes.
	HeadersAtCompletion = "completion"
	// HeadersAtArrival: as the provider admits the call, this call counted —
	// OpenAI reserves a call's tokens when it creates the response and states
	// the limits reflecting that reservation.
	HeadersAtArrival = "arrival"
)

// cost is a call's cost to a limiter: decide is what the provider knows when
// it arrives, whole what it costs once answered. They are equal unless the
// provider decides on what it knows. outDecide and outWhole are the same for
// its output alone, which an output limit (provider.otpm) counts: at arrival
// its max_tokens when it sent one, corrected to what it wrote once answered.
type cost struct{ decide, whole, outDecide, outWhole int64 }

// whole is a cost known in full at arrival.
func whole(tokens int64) cost { return cost{decide: tokens, whole: tokens} }

// held identifies what a limiter counted for an accepted call, so its
// completion can settle the count to the whole cost: the sliding window's
// entry, or the fixed window it was counted in. The zero value settles nothing
// in a sliding window.
type held struct {
	seq    uint64
	window time.Time
	outSeq uint64 // the output window's entry (provider.otpm); 0: none
}

// LimitModels lists the provider limit models in report order.
var LimitModels = []string{LimitSlidingArrival, LimitSlidingCompletion, LimitTokenBucket, LimitFixedWindow}

// axis is the limit a refusal was about.
type axis uint8

const (
	axisNone     axis = iota // accepted; as a 429's axis: the provider did not say
	axisTokens               // tokens per window (TPM)
	axisRequests             // requests per window (RPM)
	axisOutput               // output tokens per window (OTPM)
)

func (a axis) String() string {
	switch a {
	case axisTokens:
		return "tokens"
	case axisRequests:
		return "requests"
	case axisOutput:
		return "output"
	}
	return "none"
}

// limiter is one provider limit model: both the token and the request limit of
// one key. Calls reach it in time order.
type limiter interface {
	// offer is a call of cost c arriving at now, decided on c.decide. It
	// returns axisNone when the call is accepted (and what it counted), else
	// the limit that refused it (tokens when both would) and how long until
	// the same call would first fit (0: never, or unknown).
	offer(now time.Time, c cost) (axis, time.Duration, held)
	// done tells the limiter that a call it accepted (h) has completed at now:
	// its count settles from c.decide to c.whole.
	done(now time.Time, c cost, h held)
	// remaining is what is left of each limit at now, as rate-limit headers say.
	remaining(now time.Time) (tokens, requests int64)
	// tokensReset is how long from now until the token limit is whole again,
	// as x-ratelimit-reset-tokens says: the sliding window's newest call
	// leaves, the bucket is full, the fixed window ends (0: whole now).
	tokensReset(now time.Time) time.Duration
	// countsOnDone: a call is counted (served) at done rather than at offer.
	countsOnDone() bool
}

func newLimiter(model string, tpm, rpm int64, window time.Duration) (limiter, error) {
	switch model {
	case LimitSlidingArrival, "":
		return &slidingLimiter{tpm: tpm, rpm: rpm, w: slidingWindow{window: window}}, nil
	case LimitSlidingCompletion:
		return &slidingLimiter{tpm: tpm, rpm: rpm, w: slidingWindow{window: window}, onDone: true}, nil
	case LimitTokenBucket:
		return &bucketLimiter{tpm: float64(tpm), rpm: float64(rpm), window: window, tokens: float64(tpm), requests: float64(rpm)}, nil
	case LimitFixedWindow:
		return &fixedLimiter{tpm: tpm, rpm: rpm, window: window}, nil
	}
	return nil, fmt.Errorf("scenario.provider.model: %q is not a limit model; choices are %v", model, LimitModels)
}

// slidingWindow holds counted calls for one window span.
type slidingWindow struct {
	window  time.Duration
	entries []provEntry // in time order; each counts until at + window (exclusive)
	tokens  int64       // sum of entries' tokens
	seq     uint64      // the last entry's sequence number
}

type provEntry struct {
	at     time.Time
	tokens int64
	seq    uint64
}

func (w *slidingWindow) expire(now time.Time) {
	cutoff := now.Add(-w.window)
	i := 0
	for i < len(w.entries) && !w.entries[i].at.After(cutoff) {
		w.tokens -= w.entries[i].tokens
		i++
	}
	w.entries = w.entries[i:]
}

func (w *slidingWindow) add(now time.Time, tokens int64) uint64 {
	w.seq++
	w.entries = append(w.entries, provEntry{now, tokens, w.seq})
	w.tokens += tokens
	return w.seq
}

// settle adds delta to the entry seq, if it is still in the window.
func (w *slidingWindow) settle(seq uint64, delta int64) {
	i := sort.Search(len(w.entries), func(i int) bool { return w.entries[i].seq >= seq })
	if i < len(w.entries) && w.entries[i].seq == seq {
		w.entries[i].tokens += delta
		w.tokens += delta
	}
}

// check reports whether a call of cost tokens fits now (expire first), and if
// not, which limit refuses and when it would first fit as entries leave.
func (w *slidingWindow) check(now time.Time, tokens, tpm, rpm int64) (axis, time.Duration) {
	overT := w.tokens+tokens > tpm
	overR := int64(len(w.entries))+1 > rpm
	if !overT && !overR {
		return axisNone, 0
	}
	ax := axisRequests
	if overT {
		ax = axisTokens
	}
	if tokens > tpm {
		return ax, 0 // never fits
	}
	left, n := w.tokens, int64(len(w.entries))
	for _, e := range w.entries {
		left -= e.tokens
		n--
		if left+tokens <= tpm && n+1 <= rpm {
			return ax, e.at.Add(w.window).Sub(now)
		}
	}
	return ax, 0
}

// slidingLimiter is sliding-arrival, or sliding-completion when onDone.
type slidingLimiter struct {
	tpm, rpm int64
	w        slidingWindow
	onDone   bool
}

func (l *slidingLimiter) offer(now time.Time, c cost) (axis, time.Duration, held) {
	l.w.expire(now)
	ax, ra := l.w.check(now, c.decide, l.tpm, l.rpm)
	var h held
	if ax == axisNone && !l.onDone {
		h.seq = l.w.add(now, c.decide)
	}
	return ax, ra, h
}

func (l *slidingLimiter) done(now time.Time, c cost, h held) {
	if l.onDone {
		l.w.expire(now)
		l.w.add(now, c.whole)
		return
	}
	if c.whole != c.decide && h.seq != 0 {
		l.w.expire(now)
		l.w.settle(h.seq, c.whole-c.decide)
	}
}

func (l *slidingLimiter) remaining(now time.Time) (int64, int64) {
	l.w.expire(now)
	return l.tpm - l.w.tokens, l.rpm - int64(len(l.w.entries))
}

func (l *slidingLimiter) countsOnDone() bool { return l.onDone }

func (l *slidingLimiter) tokensReset(now time.Time) time.Duration {
	l.w.expire(now)
	if len(l.w.entries) == 0 {
		return 0
	}
	return l.w.entries[len(l.w.entries)-1].at.Add(l.w.window).Sub(now)
}

// bucketLimiter is two token buckets (tokens and requests), each refilling
// continuously at limit ÷ window up to one limit.
type bucketLimiter struct {
	tpm, rpm         float64
	window           time.Duration
	tokens, requests float64   // levels; at most tpm and rpm
	last             time.Time // when the levels were last refilled
}

func (l *bucketLimiter) refill(now time.Time) {
	if !l.last.IsZero() && now.After(l.last) {
		dt := float64(now.Sub(l.last)) / float64(l.window)
		l.tokens = math.Min(l.tpm, l.tokens+dt*l.tpm)
		l.requests = math.Min(l.rpm, l.requests+dt*l.rpm)
	}
	if l.last.IsZero() || now.After(l.last) {
		l.last = now
	}
}

func (l *bucketLimiter) offer(now time.Time, c cost) (axis, time.Duration, held) {
	l.refill(now)
	need := float64(c.decide)
	switch {
	case need > l.tokens:
		if need > l.tpm {
			return axisTokens, 0, held{}
		}
		return axisTokens, l.until(need-l.tokens, l.tpm, max(0, 1-l.requests), l.rpm), held{}
	case l.requests < 1:
		return axisRequests, l.until(0, l.tpm, 1-l.requests, l.rpm), held{}
	}
	l.tokens -= need
	l.requests--
	return axisNone, 0, held{}
}

// until is how long both deficits take to refill.
func (l *bucketLimiter) until(tokDeficit, tpm, reqDeficit, rpm float64) time.Duration {
	f := math.Max(tokDeficit/tpm, reqDeficit/rpm)
	return time.Duration(math.Ceil(f * float64(l.window)))
}

// done takes the rest of the whole cost from the bucket (or gives back what
// the call did not write): the level may go below zero, a debt the refill pays.
func (l *bucketLimiter) done(now time.Time, c cost, _ held) {
	if c.whole == c.decide {
		return
	}
	l.refill(now)
	l.tokens = math.Min(l.tpm, l.tokens-float64(c.whole-c.decide))
}

func (l *bucketLimiter) remaining(now time.Time) (int64, int64) {
	l.refill(now)
	return int64(l.tokens), int64(l.requests)
}

func (l *bucketLimiter) countsOnDone() bool { return false }

func (l *bucketLimiter) tokensReset(now time.Time) time.Duration {
	l.refill(now)
	return l.until(math.Max(0, l.tpm-l.tokens), l.tpm, 0, l.rpm)
}

// fixedLimiter counts in clock-aligned windows that reset at each boundary.
type fixedLimiter struct {
	tpm, rpm         int64
	window           time.Duration
	start            time.Time // the current window's start; a multiple of window since the Unix epoch
	tokens, requests int64     // counted in the current window
}

func (l *fixedLimiter) roll(now time.Time) {
	if s := edgeBefore(now, l.window); s.After(l.start) {
		l.start, l.tokens, l.requests = s, 0, 0
	}
}

// edgeBefore is the window's edge at or before now: a multiple of window since
// the Unix epoch, as the gate counts fixed windows (time.Truncate counts from
// year 1, which agrees only for windows that divide 62,135,596,800 s).
func edgeBefore(now time.Time, window time.Duration) time.Time {
	ns := now.UnixNano()
	return time.Unix(0, ns-ns%int64(window)).In(now.Location())
}

func (l *fixedLimiter) offer(now time.Time, c cost) (axis, time.Duration, held) {
	l.roll(now)
	overT := l.tokens+c.decide > l.tpm
	if !overT && l.requests+1 <= l.rpm {
		l.tokens += c.decide
		l.requests++
		return axisNone, 0, held{window: l.start}
	}
	ax := axisRequests
	if overT {
		ax = axisTokens
	}
	if c.decide > l.tpm {
		return ax, 0, held{}
	}
	return ax, l.start.Add(l.window).Sub(now), held{}
}

// done settles the call's count in the window current at completion: the one
// it arrived in, unless the call ran past its end. Output beyond what was
// counted lands there either way (an ended window counts nothing more, and the
// provider loses nothing); what a call did not write is given back only to the
// window that counted it.
func (l *fixedLimiter) done(now time.Time, c cost, h held) {
	delta := c.whole - c.decide
	if delta == 0 {
		return
	}
	l.roll(now)
	if delta < 0 && !l.start.Equal(h.window) {
		return
	}
	l.tokens += delta
}

func (l *fixedLimiter) remaining(now time.Time) (int64, int64) {
	l.roll(now)
	return l.tpm - l.tokens, l.rpm - l.requests
}

func (l *fixedLimiter) countsOnDone() bool { return false }

func (l *fixedLimiter) tokensReset(now time.Time) time.Duration {
	l.roll(now)
	if l.tokens == 0 {
		return 0
	}
	return edgeBefore(now, l.window).Add(l.window).Sub(now)
}

// source tells the gate's (or naive) traffic from the outside client's.
type source uint8

const (
	fromSessions source = iota
	fromOutside
)

// provider is the simulated provider: a limiter, the Retry-After and headers it
// answers with, and what it served.
type provider struct {
	lim        limiter
	spec       ProviderSpec
	window     time.Duration
	served     [2]int64 // tokens counted, by source
	requests   [2]int64 // requests counted, by source
	refusedBy  [4]int   // refusals of session calls, by axis
	refusedOut int      // refusals of outside calls
	// The output limit (provider.otpm; nil without one): a sliding window of
	// the sessions' output, as Anthropic counts OTPM — a call's max_tokens
	// when it arrives (or, without one, what the provider knows of its
	// output: all of it deciding on the whole cost, none deciding on what it
	// knows), corrected to what it wrote when it completes. The outside
	// client's calls write outside.outputShare of it, known at arrival.
	// outServed is the output written, by source.
	out       *slidingWindow
	outServed [2]int64
}

func newProvider(p ProviderSpec, window time.Duration) (*provider, error) {
	lim, err := newLimiter(p.Model, int64(p.TPM), int64(p.RPM), window)
	if err != nil {
		return nil, err
	}
	pr := &provider{lim: lim, spec: p, window: window}
	if p.OTPM > 0 {
		pr.out = &slidingWindow{window: window}
	}
	return pr, nil
}

// refusal is a 429 as the provider sends it.
type refusal struct {
	axis       axis          // the limit that refused; axisNone: accepted
	retryAfter time.Duration // the Retry-After header
}

// offer is a call arriving at now. The output limit is checked first: a call
// it refuses is not offered to the token and request limits.
func (p *provider) offer(now time.Time, c cost, src source) (refusal, held) {
	var ax axis
	var fit time.Duration
	var h held
	if p.out != nil {
		p.out.expire(now)
		ax, fit = p.out.check(now, c.outDecide, int64(p.spec.OTPM), math.MaxInt64)
		if ax == axisTokens {
			ax = axisOutput
		}
	}
	if ax == axisNone {
		ax, fit, h = p.lim.offer(now, c)
	}
	if ax == axisNone {
		if !p.lim.countsOnDone() {
			p.count(c.whole, src)
		}
		if p.out != nil && c.outDecide > 0 {
			h.outSeq = p.out.add(now, c.outDecide)
		}
		return refusal{}, h
	}
	if src == fromOutside {
		p.refusedOut++
	} else {
		p.refusedBy[ax]++
	}
	ra := time.Duration(p.spec.RetryAfter)
	if p.spec.ComputeRetryAfter && fit > 0 {
		// the header carries whole seconds
		ra = max(time.Second, (fit+time.Second-1)/time.Second*time.Second)
	}
	return refusal{axis: ax, retryAfter: ra}, held{}
}

// done is an accepted call completing at now.
func (p *provider) done(now time.Time, c cost, h held, src source) {
	p.lim.done(now, c, h)
	if p.lim.countsOnDone() {
		p.count(c.whole, src)
	}
	if p.out == nil {
		return
	}
	p.out.expire(now)
	switch {
	case h.outSeq != 0:
		p.out.settle(h.outSeq, c.outWhole-c.outDecide) // (gone from the window: nothing to correct)
	case c.outDecide == 0 && c.outWhole > 0:
		p.out.add(now, c.outWhole) // nothing counted at arrival: counted as written
	}
	p.outServed[src] += c.outWhole
}

func (p *provider) count(tokens int64, src source) {
	p.served[src] += tokens
	p.requests[src]++
}

// headers are the x-ratelimit-* figures, per minute as providers state them.
type headers struct {
	limitTokens, remainingTokens, limitRequests, remainingRequests int64
	// tokensReset is how long from the stating until the token limit is whole
	// again, as x-ratelimit-reset-tokens says (0: it is whole now). The gate
	// reads it from when the answer reaches it, a one-way trip late.
	tokensReset time.Duration
	// limitOutput is the output limit, per minute, as Anthropic's
	// anthropic-ratelimit-output-tokens-limit states it (0: none).
	limitOutput int64
}

func (p *provider) headers(now time.Time) headers {
	rt, rr := p.lim.remaining(now)
	scale := func(v int64) int64 {
		return int64(math.Round(float64(v) * float64(time.Minute) / float64(p.window)))
	}
	h := headers{
		limitTokens: scale(int64(p.spec.TPM)), remainingTokens: scale(max(0, rt)),
		limitRequests: scale(int64(p.spec.RPM)), remainingRequests: scale(max(0, rr)),
	}
	h.tokensReset = p.lim.tokensReset(now)
	if p.out != nil {
		h.limitOutput = scale(int64(p.spec.OTPM))
	}
	return h
}
