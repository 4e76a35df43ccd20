package gate

import "time"

// Fixed windows. Many providers and gateways count in clock-aligned windows
// that restart at each multiple of the window since the Unix epoch (a minute's
// count restarts at the top of each minute) rather than in a sliding window.
// Told so (ModelLimits.Windows), the gate counts as such a provider does: in
// the current aligned window, a call admitted within the count guard before
// an edge counting in the windows on both sides of it (the provider may count
// it a few milliseconds later, after the edge). A call that does not fit
// waits for the next edge, not for the calls of the last minute to age out:
// the sliding window keeps up to two budgets of a fixed-window provider's
// quota unused across each edge, and a sliding view of its 429s reads
// anywhere between the two (so the gate cannot tell them from another
// client's traffic, and the learning does not try: the user says).

// fixedPart is the part of a window's entries that the provider's current
// fixed window holds: the entries from sequence seq on (admitted at or after
// edge less guard), with the same sums the whole window keeps. It is kept as
// the entries change, so reading it is O(1); it is rebuilt once an edge (one
// walk over the entries since the edge before).
type fixedPart struct {
	on            bool
	window, guard int64 // the provider's window and the count guard (ns)
	edge          int64 // the current window's start, unix nanos
	seq           uint64
	tokens        int64
	openCount     int
	openOutput    int64
	askedCount    int
	askedOutput   int64
}

// setFixed turns the fixed part on (window and guard: the provider's window
// and the count guard) or off. It is rebuilt at the next expire.
func (w *slidingWindow) setFixed(on bool, window, guard time.Duration) {
	if !on {
		w.fixed = fixedPart{}
		return
	}
	if w.fixed.on && w.fixed.window == int64(window) && w.fixed.guard == int64(guard) {
		return
	}
	w.fixed = fixedPart{on: true, window: int64(window), guard: int64(guard), edge: 0, seq: w.headSeq}
	w.fixed.rebuild(w, w.last)
}

// inFixed says whether entry seq is in the fixed part.
func (w *slidingWindow) inFixed(seq uint64) bool { return w.fixed.on && seq >= w.fixed.seq }

// advanceFixed moves the fixed part to the window current at now.
func (w *slidingWindow) advanceFixed(now time.Time) {
	f := &w.fixed
	if !f.on {
		return
	}
	at := now.UnixNano()
	if at >= f.edge && at < f.edge+f.window {
		return
	}
	if at < f.edge {
		f.seq = w.headSeq // the clock stepped back: recount from the oldest entry
	}
	f.rebuild(w, at)
}

// rebuild recounts the part for the window current at at: from the first
// entry admitted at or after its edge less the guard.
func (f *fixedPart) rebuild(w *slidingWindow, at int64) {
	f.edge = at - at%f.window
	cutoff := f.edge - f.guard
	f.seq = max(f.seq, w.headSeq)
	if f.seq > w.headSeq+uint64(w.n) {
		f.seq = w.headSeq + uint64(w.n)
	}
	end := w.headSeq + uint64(w.n)
	// Entries are in time order (holes aside): skip those before the cutoff.
	for ; f.seq < end; f.seq++ {
		e := w.entries[(w.head+int(f.seq-w.headSeq))%len(w.entries)]
		if e.at != holeAt && e.at >= cutoff {
			break
		}
	}
	f.tokens, f.openCount, f.openOutput, f.askedCount, f.askedOutput = 0, 0, 0, 0, 0
	for seq := f.seq; seq < end; seq++ {
		f.addEntry(w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)])
	}
}

// addEntry counts e in the part; removeEntry takes it out.
func (f *fixedPart) addEntry(e windowEntry) { f.count(e, 1) }

func (f *fixedPart) removeEntry(e windowEntry) { f.count(e, -1) }

func (f *fixedPart) count(e windowEntry, sign int64) {
	if e.at == holeAt {
		return
	}
	f.tokens += sign * e.tokens
	if e.open == 0 || e.open == outputOnly {
		return
	}
	out := max(e.open, -e.open) - 1
	f.openCount += int(sign)
	f.openOutput += sign * out
	if e.open < 0 {
		f.askedCount += int(sign)
		f.askedOutput += sign * out
	}
}

// fixedDrain is how long from now until a reservation of need fits under
// budget in the fixed window: 0, or until the next edge. It assumes expire(now)
// ran.
func (w *slidingWindow) fixedDrain(now time.Time, need, budget int64) time.Duration {
	f := &w.fixed
	if f.tokens+need <= budget {
		return 0
	}
	return time.Duration(f.edge + f.window - now.UnixNano())
}

// fixedWindowsLocked says the bucket counts in fixed windows: the user said
// the provider does (ModelLimits.Windows). Not with a shared window: its
// entries are every instance's, counted in the store's sliding window.
func (b *bucket) fixedWindowsLocked() bool {
	return b.limits.Windows == WindowsFixed && b.l.shared == nil
}

// fixedViewLocked is providerViewLocked in fixed windows: the current window's
// settled usage, and its calls in flight (on arrival) at their input and the
// output the model usually writes, as arrivalViewLocked counts them.
func (b *bucket) fixedViewLocked() float64 {
	if b.atCompletion {
		return float64(b.done.fixed.tokens)
	}
	f := &b.win.fixed
	view := f.tokens - b.unsent // the calls not yet sent are the newest: all in it
	switch {
	case b.decidesKnown():
	case b.agingLocked():
		view -= max(0, f.askedOutput-int64(f.askedCount)*b.est.meanOutput())
	default:
		if expected := b.est.meanOutput(); expected >= 0 {
			view -= max(0, f.openOutput-int64(f.openCount)*expected)
		}
	}
	return float64(max(view, 0))
}

// admitCountLocked is what the budget holds a call against: the window's
// reservations on arrival, its completed calls at completion — in fixed
// windows, those of the current one.
func (b *bucket) admitCountLocked() int64 {
	w := b.countedLocked()
	if b.fixedWindowsLocked() {
		return w.fixed.tokens
	}
	return w.tokens
}
