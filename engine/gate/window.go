package gate

import (
	"math"
	"time"
)

// slidingWindow holds the entries admitted in the last window: one per request,
// carrying its reservation until it is settled and its real usage after (and,
// told the provider decides on what it knows, one per output written past
// what the provider decided a call on: tokens, not a request; addOutput).
// Entries are appended in time order, so the oldest leave from the head.
//
// It is a ring buffer indexed by a monotonically increasing sequence number, so a
// ticket can find its entry again in O(1) while it is still in the window, and
// steady-state use allocates nothing. Not safe for concurrent use: the bucket's
// mutex guards it.
type slidingWindow struct {
	span    time.Duration
	entries []windowEntry // ring; len is the capacity
	head    int           // index of the oldest entry
	n       int           // entries, holes and output entries among them
	holes   int           // of those, places that hold nothing (see holeAt)
	headSeq uint64        // sequence number of entries[head]
	tokens  int64         // invariant: sum of entries[*].tokens
	// Calls still in flight, among the entries: how many, and the output tokens
	// they reserved (the learner's readings count them at their expected output).
	openCount  int
	openOutput int64
	// Of those, the calls that asked max_tokens: how many, and the output they
	// reserved (the arrival view counts them at the expected output instead).
	askedCount  int
	askedOutput int64
	// Entries that hold a settled call's output alone, counted from when it was
	// written (addOutput): tokens, not requests.
	outputs int
	last    int64 // latest entry time (unix nanos), to clamp a clock going backwards
	// The provider's own window (span less the count guard; 0: the same), and the
	// entries older than it that only the guard keeps: those before sequence
	// tailEnd, holding tailTokens. Kept as time moves, so reading it is O(1).
	inner      time.Duration
	tailEnd    uint64
	tailTokens int64
	// The entries a provider counting in fixed windows holds now (off unless
	// the model counts fixed windows, told or learned): fixedwindow.go.
	fixed fixedPart
}

// windowEntry is 24 bytes (unix nanos, not time.Time): the ring is scanned on
// every drain computation and should stay in few cache lines.
type windowEntry struct {
	at     int64 // holeAt: a place that holds nothing
	tokens int64
	// open is 1 + the output reserved while the call is in flight, negated for a
	// call that asked max_tokens; 0 once settled; outputOnly for an entry that
	// holds an output alone.
	open int64
}

// outputOnly is the open field of an entry that holds a settled call's output
// written after the provider decided on the call (addOutput): tokens, not a
// request. (holeAt is the same number, in the at field: a hole's open is 0.)
const outputOnly = math.MinInt64

// request says whether e is a request: not a hole, not an output alone.
func (e windowEntry) request() bool { return e.at != holeAt && e.open != outputOnly }

// holeAt marks a place that holds nothing — an entry restamp moved to the end,
// or a call drop took out — until it leaves the ring at the head.
const holeAt = math.MinInt64

func newSlidingWindow(span time.Duration) slidingWindow {
	return slidingWindow{span: span, entries: make([]windowEntry, 16)}
}

// expire drops the entries that left the window at now.
func (w *slidingWindow) expire(now time.Time) {
	defer w.advanceFixed(now)
	defer w.advanceTail(now)
	cutoff := now.UnixNano() - int64(w.span)
	for w.n > 0 {
		e := &w.entries[w.head]
		if e.at > cutoff {
			return
		}
		if w.tailEnd > w.headSeq {
			w.tailTokens -= e.tokens
		}
		if w.inFixed(w.headSeq) { // a hole at the part's start, or the guard shrank: it starts later now
			w.fixed.removeEntry(*e)
			w.fixed.seq = w.headSeq + 1
		}
		switch {
		case e.at == holeAt:
			w.holes--
		case e.open == outputOnly:
			w.outputs--
		}
		w.tokens -= e.tokens
		w.closeEntry(e)
		*e = windowEntry{}
		w.head = (w.head + 1) % len(w.entries)
		w.n--
		w.headSeq++
	}
}

// shift moves every entry's time by d nanoseconds (negative: the wall clock
// stepped back by −d), so the entries keep their ages against the new clock;
// the fixed part, counted against the clock's edges, is counted again at now.
func (w *slidingWindow) shift(d int64, now time.Time) {
	for i := 0; i < w.n; i++ {
		if e := &w.entries[(w.head+i)%len(w.entries)]; e.at != holeAt {
			e.at += d
		}
	}
	if w.last != 0 {
		w.last += d
	}
	if f := &w.fixed; f.on {
		*f = fixedPart{on: true, window: f.window, guard: f.guard, seq: w.headSeq}
		f.rebuild(w, now.UnixNano())
	}
}

// setInner sets the inner window (the provider's) to inner. Changed, the tail
// is counted again from the oldest entry: a longer window takes back entries
// the tail held, and advanceTail only ever moves forward.
func (w *slidingWindow) setInner(inner time.Duration, now time.Time) {
	if w.inner == inner {
		return
	}
	w.inner = inner
	w.tailEnd, w.tailTokens = w.headSeq, 0
	w.advanceTail(now)
}

// advanceTail moves the entries that left the inner window at now into the tail.
func (w *slidingWindow) advanceTail(now time.Time) {
	if w.tailEnd < w.headSeq {
		w.tailEnd, w.tailTokens = w.headSeq, 0
	}
	if w.inner <= 0 {
		return
	}
	cutoff := now.UnixNano() - int64(w.inner)
	for end := w.headSeq + uint64(w.n); w.tailEnd < end; w.tailEnd++ {
		e := &w.entries[(w.head+int(w.tailEnd-w.headSeq))%len(w.entries)]
		if e.at > cutoff {
			return
		}
		w.tailTokens += e.tokens
	}
}

// tail is the tokens of the entries older than the inner window: what the gate's
// window holds only through its count guard, and the provider no longer counts.
// It assumes expire(now) ran.
func (w *slidingWindow) tail() int64 { return w.tailTokens }

// tailAfter is the tokens of the tail's entries admitted after cutoff (unix
// nanos): of what only the count guard keeps, what a provider that counted at
// cutoff + the window still held. It assumes expire(now) ran; what already left
// the guard too cannot be read back.
func (w *slidingWindow) tailAfter(cutoff int64) int64 {
	var sum int64
	for seq := w.tailEnd; seq > w.headSeq; seq-- {
		e := &w.entries[(w.head+int(seq-1-w.headSeq))%len(w.entries)]
		if e.at == holeAt {
			continue
		}
		if e.at <= cutoff {
			break
		}
		sum += e.tokens
	}
	return sum
}

func (w *slidingWindow) closeEntry(e *windowEntry) {
	if e.open == 0 || e.open == outputOnly {
		return
	}
	out := max(e.open, -e.open) - 1
	w.openCount--
	w.openOutput -= out
	if e.open < 0 {
		w.askedCount--
		w.askedOutput -= out
	}
	e.open = 0
}

// add appends the entry of a call in flight (tokens reserved, output of them the
// output reserve; asked: the reserve is the call's max_tokens) and returns its
// sequence number.
func (w *slidingWindow) add(now time.Time, tokens, output int64, asked bool) uint64 {
	at := now.UnixNano()
	if at < w.last {
		at = w.last // keep entries ordered when the clock steps back
	}
	w.last = at
	if w.n == len(w.entries) {
		w.grow()
	}
	open := output + 1
	if asked {
		open = -open
		w.askedCount++
		w.askedOutput += output
	}
	w.entries[(w.head+w.n)%len(w.entries)] = windowEntry{at: at, tokens: tokens, open: open}
	if w.fixed.on {
		w.fixed.addEntry(w.entries[(w.head+w.n)%len(w.entries)])
	}
	w.n++
	w.tokens += tokens
	w.openCount++
	w.openOutput += output
	return w.headSeq + uint64(w.n) - 1
}

// addSettled appends the entry of a call that is already settled: it counts
// tokens and is not in flight.
func (w *slidingWindow) addSettled(now time.Time, tokens int64) {
	seq := w.add(now, tokens, 0, false)
	e := &w.entries[(w.head+w.n-1)%len(w.entries)]
	w.closeFixed(seq, e)
}

// addOutput appends tokens of a settled call's output, counted from now: a
// provider that decided on the call without it counts the output once
// written (in the fixed window or from the bucket current then). Tokens, not a
// request.
func (w *slidingWindow) addOutput(now time.Time, tokens int64) {
	w.addSettled(now, tokens)
	seq, e := w.headSeq+uint64(w.n)-1, &w.entries[(w.head+w.n-1)%len(w.entries)]
	in := w.inFixed(seq)
	if in {
		w.fixed.removeEntry(*e) // counted as a request until now
	}
	e.open = outputOnly
	if in {
		w.fixed.addEntry(*e)
	}
	w.outputs++
}

func (w *slidingWindow) grow() {
	next := make([]windowEntry, 2*len(w.entries))
	for i := 0; i < w.n; i++ {
		next[i] = w.entries[(w.head+i)%len(w.entries)]
	}
	w.entries, w.head = next, 0
}

// settle replaces the tokens of entry seq (a call that ended) with tokens, if it
// is still in the window. It returns false when the entry already left (its
// tokens no longer count).
func (w *slidingWindow) settle(seq uint64, tokens int64) bool {
	if seq < w.headSeq || seq >= w.headSeq+uint64(w.n) {
		return false
	}
	e := &w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)]
	if seq < w.tailEnd {
		w.tailTokens += tokens - e.tokens
	}
	in := w.inFixed(seq)
	if in {
		w.fixed.removeEntry(*e)
	}
	w.tokens += tokens - e.tokens
	e.tokens = tokens
	w.closeEntry(e)
	if in {
		w.fixed.addEntry(*e)
	}
	return true
}

// closeFixed closes entry seq (e) as closeEntry does, in the fixed part too.
func (w *slidingWindow) closeFixed(seq uint64, e *windowEntry) {
	in := w.inFixed(seq)
	if in {
		w.fixed.removeEntry(*e)
	}
	w.closeEntry(e)
	if in {
		w.fixed.addEntry(*e)
	}
}

// requests is the number of requests in the window.
func (w *slidingWindow) requests() int { return w.n - w.holes - w.outputs }

// tokensAfter is the tokens of the window's entries added after at (unix
// nanoseconds), holes aside.
func (w *slidingWindow) tokensAfter(at int64) int64 {
	var sum int64
	for i := w.n - 1; i >= 0; i-- {
		e := w.entries[(w.head+i)%len(w.entries)]
		if e.at == holeAt {
			continue
		}
		if e.at <= at {
			break
		}
		sum += e.tokens
	}
	return sum
}

// eachSettled calls fn with each settled entry's time and tokens (calls
// settled and outputs written alone; not calls in flight), oldest first.
func (w *slidingWindow) eachSettled(fn func(at, tokens int64)) {
	for i := 0; i < w.n; i++ {
		e := w.entries[(w.head+i)%len(w.entries)]
		if e.at != holeAt && (e.open == 0 || e.open == outputOnly) && e.tokens > 0 {
			fn(e.at, e.tokens)
		}
	}
}

// requestsAfter is how many of the window's requests were added after at
// (unix nanoseconds).
func (w *slidingWindow) requestsAfter(at int64) int {
	k := 0
	for i := w.n - 1; i >= 0; i-- {
		e := w.entries[(w.head+i)%len(w.entries)]
		if !e.request() {
			continue
		}
		if e.at <= at {
			break
		}
		k++
	}
	return k
}

// tokenDrain is how long from now until the window holds at most budget-need
// tokens, i.e. until a reservation of need fits under budget. It assumes expire(now)
// ran. It returns ok=false when the reservation can never fit (need > budget).
func (w *slidingWindow) tokenDrain(now time.Time, need, budget int64) (time.Duration, bool) {
	if need > budget {
		return 0, false
	}
	excess := w.tokens + need - budget
	if excess <= 0 {
		return 0, true
	}
	for i := 0; i < w.n; i++ {
		e := w.entries[(w.head+i)%len(w.entries)]
		excess -= e.tokens
		if excess <= 0 {
			return w.leaves(e, now), true
		}
	}
	return w.span, true // unreachable while tokens is the sum of entries
}

// requestDrain is how long from now until the window holds at most budget-1
// requests, so one more fits. It assumes expire(now) ran.
func (w *slidingWindow) requestDrain(now time.Time, budget int) time.Duration {
	excess := w.requests() + 1 - budget
	if excess <= 0 {
		return 0
	}
	var e windowEntry
	for i := 0; i < w.n && excess > 0; i++ { // the excess-th request from the oldest
		if e = w.entries[(w.head+i)%len(w.entries)]; e.request() {
			excess--
		}
	}
	return w.leaves(e, now)
}

// leaves is how long from now until e leaves the window.
func (w *slidingWindow) leaves(e windowEntry, now time.Time) time.Duration {
	return time.Duration(e.at + int64(w.span) - now.UnixNano())
}

// restamp moves entry seq, a call in flight, to at (unix nanos) when that is
// later, and returns its sequence number and time now (0: it did not move): the
// call left for the provider at at, so the provider counts it from then, not
// from its admission. The ring stays in time order: unless it is the newest,
// the entry moves to the end, and its old place holds nothing until it reaches
// the head. An entry that already left the window is not found (the caller
// adds the call again).
func (w *slidingWindow) restamp(seq uint64, at int64) (uint64, int64) {
	if seq < w.headSeq || seq >= w.headSeq+uint64(w.n) {
		return seq, 0
	}
	i := (w.head + int(seq-w.headSeq)) % len(w.entries)
	e := w.entries[i]
	if at <= e.at {
		return seq, 0
	}
	at = max(at, w.last) // keep entries ordered when the clock steps back
	w.last = at
	if seq == w.headSeq+uint64(w.n)-1 && seq >= w.tailEnd { // the newest: already in order
		w.entries[i].at = at
		if w.fixed.on && !w.inFixed(seq) && at >= w.fixed.edge-w.fixed.guard {
			w.fixed.seq = seq // the part was empty: it starts with this call
			w.fixed.addEntry(w.entries[i])
		}
		return seq, at
	}
	if seq < w.tailEnd { // older than the provider's window: not any more
		w.tailTokens -= e.tokens
	}
	if w.inFixed(seq) {
		w.fixed.removeEntry(e) // counted again below, at the end
	}
	w.entries[i] = windowEntry{at: holeAt}
	w.holes++
	if w.n == len(w.entries) {
		w.grow()
	}
	e.at = at
	w.entries[(w.head+w.n)%len(w.entries)] = e
	if w.fixed.on {
		w.fixed.addEntry(e)
	}
	w.n++
	return w.headSeq + uint64(w.n) - 1, at
}

// drop takes entry seq out of the window, its request with its tokens: a call
// that never reached the provider. It returns false when the entry already
// left.
func (w *slidingWindow) drop(seq uint64) bool {
	if seq < w.headSeq || seq >= w.headSeq+uint64(w.n) {
		return false
	}
	e := &w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)]
	if e.at == holeAt {
		return false
	}
	if seq < w.tailEnd {
		w.tailTokens -= e.tokens
	}
	if w.inFixed(seq) {
		w.fixed.removeEntry(*e)
	}
	w.tokens -= e.tokens
	w.closeEntry(e)
	*e = windowEntry{at: holeAt}
	w.holes++
	return true
}

// resize changes the reservation of entry seq, a call still in flight that did
// not ask max_tokens, to tokens of which output is output. It returns false when
// the entry left the window (or is not such a call).
func (w *slidingWindow) resize(seq uint64, tokens, output int64) bool {
	if seq < w.headSeq || seq >= w.headSeq+uint64(w.n) {
		return false
	}
	e := &w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)]
	if e.open <= 0 {
		return false
	}
	if seq < w.tailEnd {
		w.tailTokens += tokens - e.tokens
	}
	in := w.inFixed(seq)
	if in {
		w.fixed.removeEntry(*e)
	}
	w.tokens += tokens - e.tokens
	e.tokens = tokens
	w.openOutput += output - (e.open - 1)
	e.open = output + 1
	if in {
		w.fixed.addEntry(*e)
	}
	return true
}
