package gate

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The fixed part's sums are those of the entries admitted at or after the
// current edge less the guard, whatever happens to the entries: calls added,
// settled, resized, restamped (sent later), dropped, and windows passing.
// Checked against a count over the entries after each of 20,000 random steps.
func TestFixedPartFollowsTheEntries(t *testing.T) {
	const window = time.Minute
	guards := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	w := newSlidingWindow(window + time.Second) // the longest guard
	w.inner = window
	w.setFixed(true, window, guards[1], t0)
	now := t0.Add(59 * time.Second) // a second before an edge
	var open []uint64               // the calls in flight: their sequence numbers
	for step := 0; step < 20000; step++ {
		switch r := rng.IntN(100); {
		case r == 0: // the clock steps back
			now = now.Add(-time.Duration(rng.IntN(3000)) * time.Millisecond)
		case r == 1: // the guard changes (measured delays)
			w.setFixed(true, window, guards[rng.IntN(len(guards))], now)
		case r < 4: // a long pause
			now = now.Add(time.Duration(rng.IntN(200)) * time.Second)
		default:
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		w.expire(now)
		switch op := rng.IntN(10); {
		case op < 4:
			out := int64(rng.IntN(200))
			open = append(open, w.add(now, 100+out, out, rng.IntN(4) == 0))
		case op < 6 && len(open) > 0:
			i := rng.IntN(len(open))
			w.settle(open[i], int64(50+rng.IntN(300)))
			open = append(open[:i], open[i+1:]...)
		case op < 7 && len(open) > 0:
			w.resize(open[rng.IntN(len(open))], 120, 20)
		case op < 8 && len(open) > 0:
			i := rng.IntN(len(open))
			if seq, at := w.restamp(open[i], now.Add(time.Duration(rng.IntN(50))*time.Millisecond).UnixNano()); at != 0 {
				open[i] = seq
			}
		case op < 9 && len(open) > 0:
			i := rng.IntN(len(open))
			w.drop(open[i])
			open = append(open[:i], open[i+1:]...)
		default:
			w.addOutput(now, int64(rng.IntN(100)))
		}
		checkFixedPart(t, &w, now, step)
	}
}

// checkFixedPart recounts the fixed part from the entries. An entry restamped
// after the edge counts even when its time is a little before the cutoff:
// it is the newest (a call sent now), and the part ends with the window.
func checkFixedPart(t *testing.T, w *slidingWindow, now time.Time, step int) {
	t.Helper()
	f := w.fixed
	at := now.UnixNano()
	if edge := at - at%f.window; f.edge != edge {
		t.Fatalf("step %d: edge %d, want %d", step, f.edge, edge)
	}
	var want fixedPart
	for seq := f.seq; seq < w.headSeq+uint64(w.n); seq++ {
		want.addEntry(w.entries[(w.head+int(seq-w.headSeq))%len(w.entries)])
	}
	if f.tokens != want.tokens || f.requests != want.requests || f.openCount != want.openCount || f.openOutput != want.openOutput ||
		f.askedCount != want.askedCount || f.askedOutput != want.askedOutput {
		t.Fatalf("step %d: part %+v, recounted %+v", step, f, want)
	}
	// Nothing before the part belongs in it (a clock that stepped back leaves
	// later entries before it: the part recounts from the oldest then).
	if f.seq > w.headSeq {
		if e := w.entries[(w.head+int(f.seq-1-w.headSeq))%len(w.entries)]; e.at != holeAt && e.at >= f.edge-f.guard {
			t.Fatalf("step %d: entry %d at %d is after the cutoff %d but not in the part", step, f.seq-1, e.at, f.edge-f.guard)
		}
	}
}

// Told the provider counts in fixed windows, the gate fills the current one
// and holds the next call until the edge — not until the window's first call
// leaves a sliding window, a minute after it was admitted.
func TestFixedWindowsWaitForTheEdge(t *testing.T) {
	c := testGate()
	c.Defaults.Windows = WindowsFixed
	l, _, _ := newTestLedger(t, c)
	// 400 each (300 + the 100 reserve): 800 of 1000 by 50 s.
	mustAdmit(t, l, t0.Add(40*time.Second), req(300))
	mustAdmit(t, l, t0.Add(50*time.Second), req(300))
	w := mustWait(t, l, t0.Add(55*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 300}, "tpm", 60*time.Second)
	// The new window is empty: two more go at once, 40 s before a sliding
	// window would have let the first of them in.
	// The new window is empty: the waiting call and one more go at once, 40 s
	// before a sliding window would have let the first of them in.
	if _, ok := w.Poll(t0.Add(60 * time.Second)); !ok {
		t.Fatal("the waiting call was not granted at the edge")
	}
	mustAdmit(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", Session: "y", InputTokens: 300})
	mustWait(t, l, t0.Add(63*time.Second), Request{Provider: "p", Model: "m", Session: "z", InputTokens: 300}, "tpm", 120*time.Second)
	if st := l.BucketStatus(t0.Add(63*time.Second), "p", "m"); st.Windows != WindowsFixed || st.WindowTokens != 800 {
		t.Fatalf("status: windows %q, window tokens %d; want fixed and 800 (the current window's)", st.Windows, st.WindowTokens)
	}
}

// A call admitted within the count guard before an edge may reach the
// provider after it: it counts in the window after the edge as well.
func TestFixedWindowsCountACallJustBeforeTheEdgeOnBothSides(t *testing.T) {
	c := testGate()
	c.Defaults.Windows = WindowsFixed
	c.CountGuard = 0.005 // 300 ms of a minute
	l, _, _ := newTestLedger(t, c)
	mustAdmit(t, l, t0.Add(59*time.Second+800*time.Millisecond), req(500)) // 600, 200 ms before the edge
	mustAdmit(t, l, t0.Add(60*time.Second), req(300))                      // 400: 1000 after the edge
	mustWait(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 1}, "tpm", 120*time.Second)
}

// A 429 is read in the fixed view: what the current window holds, not what
// the sliding window does (which here holds the last window's calls too).
func TestFixedWindowsRead429sInTheCurrentWindow(t *testing.T) {
	c := learnGate()
	c.Defaults.Windows = WindowsFixed
	c.Defaults.RPM = 100 // a token 429, not one at the request limit
	l, _, _ := newTestLedger(t, c)
	for i := 0; i < 2; i++ { // 200 in the first window, settled: calls of 100
		tk := mustAdmit(t, l, t0.Add(50*time.Second), req(50))
		if err := l.Settle(t0.Add(52*time.Second), tk, Usage{InputTokens: 50, OutputTokens: 50}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ { // 600 in the second, in flight at their expected output
		mustAdmit(t, l, t0.Add(61*time.Second), req(50))
	}
	l.RateLimited(t0.Add(62*time.Second), "p", "m", time.Millisecond)
	if _, trig := quota(l, t0.Add(62*time.Second)); trig != 600 {
		t.Fatalf("trigger %.0f, want 600: the current fixed window's reading (the sliding one reads 800)", trig)
	}
}

func TestConfigRefusesUnknownWindows(t *testing.T) {
	c := testGate()
	c.Models = map[string]ModelLimits{"p/m": {Windows: "tumbling"}}
	if err := c.Validate(); err == nil || err.Error() != `gate.models["p/m"].windows: must be "fixed" or "sliding" (got "tumbling")` {
		t.Fatalf("err = %v", err)
	}
}

// windowsOf is the model's windows as its status shows them ("": sliding).
func windowsOf(l *Ledger, now time.Time) string { return l.BucketStatus(now, "p", "m").Windows }

// Two 429s half a window or more apart whose stated waits end at an edge —
// what a fixed-window provider that computes its Retry-After states — switch a
// model the user said nothing about to fixed windows; a later wait shorter
// than the window that ends elsewhere switches it back.
func TestFixedWindowsLearnedFromWaitsThatEndAtEdges(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 20*time.Second) // ends at 1:00
	if got := windowsOf(l, t0.Add(41*time.Second)); got != "" {
		t.Fatalf("after one edge wait: windows %q, want sliding still", got)
	}
	l.RateLimited(t0.Add(100*time.Second+300*time.Millisecond), "p", "m", 20*time.Second) // ends at 2:00.3: whole seconds
	if got := windowsOf(l, t0.Add(101*time.Second)); got != WindowsFixed {
		t.Fatalf("after two edge waits: windows %q, want fixed", got)
	}
	learned := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "windows" {
			learned++
		}
	}
	if learned != 1 {
		t.Fatalf("%d windows events, want 1", learned)
	}
	// A wait that ends within 1.1 s of an edge, before it too, confirms it.
	l.RateLimited(t0.Add(170*time.Second), "p", "m", 9*time.Second+500*time.Millisecond) // 2:59.5
	if got := windowsOf(l, t0.Add(171*time.Second)); got != WindowsFixed {
		t.Fatalf("a wait ending half a second before an edge switched it back (%q)", got)
	}
	// Ending 1.5 s after an edge, a call admitted 600 ms before its 429: the
	// trip back, not a wait that ends elsewhere.
	l.RateLimitedBy(t0.Add(200*time.Second), "p", "m", engine.RateLimit{RetryAfter: 41*time.Second + 500*time.Millisecond, Admitted: t0.Add(199*time.Second + 400*time.Millisecond)})
	l.RateLimited(t0.Add(230*time.Second), "p", "m", 7*time.Second) // 3:57
	if got := windowsOf(l, t0.Add(231*time.Second)); got != WindowsFixed {
		t.Fatalf("one wait ending 3 s before an edge: windows %q, want fixed still (a slow trip is one 429)", got)
	}
	l.RateLimited(t0.Add(270*time.Second), "p", "m", 10*time.Second) // 4:40
	if got := windowsOf(l, t0.Add(271*time.Second)); got != "" {
		t.Fatalf("two waits ending away from an edge: windows %q, want sliding again", got)
	}
}

// What says nothing of an edge is not a vote: the 429s of one burst (one
// edge stated by each), a wait too short to tell where it began (the gate's
// own steps come a window apart, so its 429s can fall just before edges), a
// wait as long as the window (ending at the 429's own phase), no wait at all,
// and anything while the user said how the windows move.
func TestFixedWindowsNotLearnedWithoutEvidence(t *testing.T) {
	cases := []struct {
		name  string
		c     func(*Config)
		at    [2]time.Duration
		waits [2]time.Duration
	}{
		{"one burst", nil, [2]time.Duration{40 * time.Second, 40*time.Second + 5*time.Millisecond}, [2]time.Duration{20 * time.Second, 20 * time.Second}},
		{"short waits", nil, [2]time.Duration{58 * time.Second, 118 * time.Second}, [2]time.Duration{2 * time.Second, 2 * time.Second}},
		{"the window itself", nil, [2]time.Duration{60 * time.Second, 180 * time.Second}, [2]time.Duration{time.Minute, time.Minute}},
		{"no wait", func(c *Config) { c.FallbackCooldown = 20 * time.Second }, [2]time.Duration{40 * time.Second, 100 * time.Second}, [2]time.Duration{0, 0}},
		{"told sliding", func(c *Config) { c.Defaults.Windows = WindowsSliding }, [2]time.Duration{40 * time.Second, 100 * time.Second}, [2]time.Duration{20 * time.Second, 20 * time.Second}},
		{"learning off", func(c *Config) { c.Learn = false }, [2]time.Duration{40 * time.Second, 100 * time.Second}, [2]time.Duration{20 * time.Second, 20 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := learningLedger(t, tc.c)
			for i := range tc.at {
				l.RateLimited(t0.Add(tc.at[i]), "p", "m", tc.waits[i])
			}
			if got := windowsOf(l, t0.Add(tc.at[1]+time.Second)); got != "" {
				t.Fatalf("windows %q, want sliding", got)
			}
		})
	}
}

// learningLedger is a ledger on the learning test gate, with set (when given)
// applied to its config.
func learningLedger(t *testing.T, set func(*Config)) *Ledger {
	c := learnGate()
	if set != nil {
		set(&c)
	}
	l, _, _ := newTestLedger(t, c)
	return l
}

// learnFixedFromWaits has two 429s, at 0:40 and 1:40, state waits that end at
// the next edges: the model counts fixed windows from 1:40.
func learnFixedFromWaits(t *testing.T, l *Ledger) {
	t.Helper()
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 20*time.Second)
	l.RateLimited(t0.Add(100*time.Second), "p", "m", 20*time.Second)
	if got := windowsOf(l, t0.Add(101*time.Second)); got != WindowsFixed {
		t.Fatalf("after two edge waits: windows %q, want fixed", got)
	}
}

// A reset forgets learned windows with the rest.
func TestFixedWindowsLearnedAreForgottenOnReset(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	learnFixedFromWaits(t, l)
	l.Reset(t0.Add(102*time.Second), "p", "m")
	if got := windowsOf(l, t0.Add(103*time.Second)); got != "" {
		t.Fatalf("after a reset: windows %q, want sliding", got)
	}
}

// The switch reads the 429 that made it in the window current then: here an
// empty one, though the last window held 800 tokens.
func TestFixedWindowsLearnedReadTheCurrentWindow(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	l, _, _ := newTestLedger(t, c)
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 20*time.Second) // the first vote
	for i := 0; i < 4; i++ {
		mustAdmit(t, l, t0.Add(95*time.Second), req(100)) // 800 in the window before the edge at 2:00
	}
	l.RateLimited(t0.Add(121*time.Second), "p", "m", 59*time.Second) // the second, ending at 3:00
	st := l.BucketStatus(t0.Add(121*time.Second), "p", "m")
	if st.Windows != WindowsFixed || st.WindowTokens != 0 || st.Trigger == 800 {
		t.Fatalf("windows %q, window tokens %d, trigger %.0f; want fixed, 0, and no trigger at the last window's 800", st.Windows, st.WindowTokens, st.Trigger)
	}
}

// A reload that says how the windows move ends what was learned; one that
// leaves it out again learns afresh.
func TestFixedWindowsLearnedGiveWayToTheConfig(t *testing.T) {
	c := learnGate()
	l, _, _ := newTestLedger(t, c)
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 20*time.Second)
	l.RateLimited(t0.Add(100*time.Second), "p", "m", 20*time.Second)
	if got := windowsOf(l, t0.Add(101*time.Second)); got != WindowsFixed {
		t.Fatalf("windows %q, want fixed", got)
	}
	c.Defaults.Windows = WindowsSliding
	if err := l.Reconfigure(t0.Add(102*time.Second), c); err != nil {
		t.Fatal(err)
	}
	if got := windowsOf(l, t0.Add(103*time.Second)); got != "" {
		t.Fatalf("told sliding: windows %q", got)
	}
	c.Defaults.Windows = ""
	if err := l.Reconfigure(t0.Add(104*time.Second), c); err != nil {
		t.Fatal(err)
	}
	if got := windowsOf(l, t0.Add(105*time.Second)); got != "" {
		t.Fatalf("left out again: windows %q, want sliding until two more votes", got)
	}
}

// A call admitted before the part began and sent after the edge is counted
// from its send, in the current window, even when it is the newest entry and
// the part held nothing.
func TestFixedPartTakesACallSentAfterTheEdge(t *testing.T) {
	const window, guard = time.Minute, 300 * time.Millisecond
	w := newSlidingWindow(window + guard)
	w.inner = window
	w.setFixed(true, window, guard, t0)
	seq := w.add(t0.Add(50*time.Second), 400, 100, false)
	w.expire(t0.Add(61 * time.Second))
	if w.fixed.tokens != 0 {
		t.Fatalf("part %d tokens after the edge, want 0", w.fixed.tokens)
	}
	if _, at := w.restamp(seq, t0.Add(61*time.Second).UnixNano()); at == 0 {
		t.Fatal("not restamped")
	}
	if w.fixed.tokens != 400 || w.fixed.openCount != 1 || w.fixed.openOutput != 100 {
		t.Fatalf("part %+v, want the call sent after the edge in it", w.fixed)
	}
}

// In fixed windows a 429 does not vote on when the provider counts: the user
// said how it counts. The 429 that switches a sliding window's view at once
// (TestRefutedArrivalViewSwitchesAtOnce) leaves it on arrival here.
func TestFixedWindowsDoNotVoteOnTheView(t *testing.T) {
	c := learnGate()
	c.Defaults.RPM = 100
	c.Defaults.Windows = WindowsFixed
	l, _, ev := newTestLedger(t, c)
	servedThenRefused(t, l, 63*time.Second)
	if got := countModeSwitches(ev); len(got) != 0 {
		t.Fatalf("count-mode steps %v, want none", got)
	}
}

// Requests are counted in the fixed window too: the budget's tenth request
// waits for the edge, and the next window takes ten at once.
func TestFixedWindowsCountRequests(t *testing.T) {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 100_000, RPM: 10, Windows: WindowsFixed}
	l, _, _ := newTestLedger(t, c)
	for i := 0; i < 10; i++ {
		mustAdmit(t, l, t0.Add(time.Duration(50+i)*time.Second), req(10))
	}
	w := mustWait(t, l, t0.Add(59*time.Second), Request{Provider: "p", Model: "m", Session: "x", InputTokens: 10}, "rpm", 60*time.Second)
	if _, ok := w.Poll(t0.Add(60 * time.Second)); !ok {
		t.Fatal("the waiting call was not granted at the edge")
	}
	for i := 0; i < 9; i++ {
		mustAdmit(t, l, t0.Add(61*time.Second), Request{Provider: "p", Model: "m", Session: "y", InputTokens: 10})
	}
	if st := l.BucketStatus(t0.Add(61*time.Second), "p", "m"); st.WindowRequests != 10 {
		t.Fatalf("window requests %d, want 10 (the current window's)", st.WindowRequests)
	}
}

// nextEdge is the first edge of t0's minutes after at.
func nextEdge(at time.Time) time.Time { return at.Truncate(time.Minute).Add(time.Minute) }

// midWindow is an instant 20 s from the nearest edge, ahead of at by 1–41 s:
// a sliding window's reset, far from any edge.
func midWindow(at time.Time) time.Time {
	if m := nextEdge(at).Add(-20 * time.Second); m.After(at.Add(time.Second)) {
		return m
	}
	return nextEdge(at).Add(20 * time.Second)
}

// answerReset reports an answer received at now to a call sent took earlier,
// whose provider stated, stated after the send, how long until reset.
func answerReset(l *Ledger, now time.Time, took, stated time.Duration, reset time.Time) {
	sent := now.Add(-took)
	l.ObserveTokensReset(now, "p", "m", sent, engine.TokenReset{In: reset.Sub(sent.Add(stated))})
}

// windowsEvents counts the learn events that switched the windows.
func windowsEvents(ev *eventLog) int {
	n := 0
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "windows" {
			n++
		}
	}
	return n
}

// Answers whose stated token reset ends at the next edge — what a fixed-window
// provider states on every answer — switch a model the user said nothing
// about to fixed windows, six of them an eighth of a window or more apart,
// with no 429; six that end far from an edge switch it back, and one answer
// the other way starts the count again. A duration counts from the provider's
// stating, anywhere between the call's send and its answer.
func TestFixedWindowsLearnedFromResetsThatEndAtEdges(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	at := t0.Add(3 * time.Second)
	answer := func(reset func(time.Time) time.Time) {
		answerReset(l, at, 2*time.Second, 1500*time.Millisecond, reset(at)) // stated as the call's window found it, or as it left
		at = at.Add(8 * time.Second)
	}
	for i := 0; i < 5; i++ {
		answer(nextEdge)
	}
	if got := windowsOf(l, at); got != "" {
		t.Fatalf("after five resets at edges: windows %q, want sliding still", got)
	}
	answer(nextEdge)
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("after six resets at edges: windows %q, want fixed", got)
	}
	if n := windowsEvents(ev); n != 1 {
		t.Fatalf("%d windows events, want 1", n)
	}
	for i := 0; i < 5; i++ {
		answer(midWindow)
	}
	answer(nextEdge) // the count starts again
	for i := 0; i < 5; i++ {
		answer(midWindow)
	}
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("five resets away from an edge since one at it: windows %q, want fixed still", got)
	}
	answer(midWindow)
	if got := windowsOf(l, at); got != "" {
		t.Fatalf("six resets away from an edge: windows %q, want sliding again", got)
	}
}

// What says nothing of an edge is not a vote: answers closer together than
// an eighth of the window (one burst of answers reads one edge), an instant that misses the edge by more than the rounding, a call
// so long the reset's instant is not known to a sixteenth of the window, a
// figure in whole seconds 1.2 s off an edge, whole seconds at a window under a
// minute, a reset more than a window ahead, and anything while the user said
// how the windows move or learning is off.
func TestFixedWindowsNotLearnedFromResetsWithoutEvidence(t *testing.T) {
	short := func(c *Config) { c.Window = 10 * time.Second }
	edge := func(d time.Duration) func(time.Time) time.Time {
		return func(at time.Time) time.Time { return nextEdge(at).Add(d) }
	}
	cases := []struct {
		name        string
		c           func(*Config)
		every, took time.Duration
		reset       func(at time.Time) time.Time
		coarse      bool
	}{
		{"one burst", nil, 500 * time.Millisecond, 10 * time.Millisecond, nextEdge, false},
		{"late", nil, 8 * time.Second, 10 * time.Millisecond, edge(300 * time.Millisecond), false},
		{"early", nil, 8 * time.Second, 10 * time.Millisecond, edge(-300 * time.Millisecond), false},
		{"a long call", nil, 8 * time.Second, 4 * time.Second, nextEdge, false},
		{"whole seconds 1.2 s off", nil, 8 * time.Second, 10 * time.Millisecond, edge(1200 * time.Millisecond), true},
		{"whole seconds at 10 s windows", short, 2 * time.Second, 10 * time.Millisecond, func(at time.Time) time.Time { return at.Truncate(10 * time.Second).Add(10 * time.Second) }, true},
		{"more than a window ahead", nil, 8 * time.Second, 10 * time.Millisecond, edge(time.Minute), false},
		{"told sliding", func(c *Config) { c.Defaults.Windows = WindowsSliding }, 8 * time.Second, 10 * time.Millisecond, nextEdge, false},
		{"learning off", func(c *Config) { c.Learn = false }, 8 * time.Second, 10 * time.Millisecond, nextEdge, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := learningLedger(t, tc.c)
			at := t0.Add(time.Second)
			for i := 0; i < 12; i++ {
				sent := at.Add(-tc.took)
				// stated as the call arrived: the instant is the call's send plus the duration
				l.ObserveTokensReset(at, "p", "m", sent, engine.TokenReset{In: tc.reset(at).Sub(sent), Coarse: tc.coarse})
				at = at.Add(tc.every)
			}
			if got := windowsOf(l, at); got != "" {
				t.Fatalf("windows %q, want sliding", got)
			}
		})
	}
}

// Traffic locked to the clock — a burst just after the top of each minute —
// makes a sliding window's resets (its newest call leaves a window later) end
// at the edges, always from the same phase; eight such votes do not switch,
// while a fixed window's answers, pointing at the edge from three of the
// window's eighths, do.
func TestFixedWindowsNeedResetsFromAcrossTheWindow(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	at := t0.Add(2 * time.Second)
	for i := 0; i < 8; i++ {
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at)) // the burst's newest call went out at the edge before
		at = at.Add(time.Minute)
	}
	if got := windowsOf(l, at); got != "" {
		t.Fatalf("eight resets at edges from one phase: windows %q, want sliding", got)
	}
	for i := 0; i < 2; i++ {
		at = at.Add(8 * time.Second)
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at))
	}
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("resets at edges from three eighths of the window: windows %q, want fixed", got)
	}
}

// A gate that counts a sliding window against a fixed-window provider admits
// in the same third of each window: its answers, each pointing at the next
// edge, come in three of the window's eighths, and that is enough.
func TestFixedWindowsLearnedFromAnswersInAThirdOfTheWindow(t *testing.T) {
	l := learningLedger(t, func(c *Config) { c.Window = 10 * time.Second })
	edge := func(at time.Time) time.Time { return at.Truncate(10 * time.Second).Add(10 * time.Second) }
	for w := 0; w < 4; w++ {
		for ms := 200; ms < 3500; ms += 100 { // an answer every 100 ms, 0.2–3.5 s into each window
			at := t0.Add(time.Duration(w)*10*time.Second + time.Duration(ms)*time.Millisecond)
			answerReset(l, at, 20*time.Millisecond, 0, edge(at))
		}
	}
	if got := windowsOf(l, t0.Add(40*time.Second)); got != WindowsFixed {
		t.Fatalf("answers in 0.2–3.5 s of each 10 s window, each at the edge: windows %q, want fixed", got)
	}
}

// Waits and resets weigh together: a wait that says the windows are as the
// model takes them starts the resets' count again (and a reset the waits'),
// and a reset that misses the edge by less than a wait's slack is no vote, so
// a provider whose clock is half a second off, whose waits say fixed, does not
// have its resets switch the model back.
func TestFixedWindowsWaitsAndResetsWeighTogether(t *testing.T) {
	l, _, ev := newTestLedger(t, learnGate())
	learnFixedFromWaits(t, l)
	at := t0.Add(103 * time.Second)
	for i := 0; i < 20; i++ {
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at).Add(500*time.Millisecond)) // a clock half a second off
		at = at.Add(8 * time.Second)
	}
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("resets half a second off the edges: windows %q, want fixed still", got)
	}
	for i := 0; i < 5; i++ {
		answerReset(l, at, 10*time.Millisecond, 0, midWindow(at))
		at = at.Add(8 * time.Second)
	}
	l.RateLimited(at, "p", "m", nextEdge(at).Sub(at)) // a wait to the edge: as it is
	at = at.Add(8 * time.Second)
	answerReset(l, at, 10*time.Millisecond, 0, midWindow(at))
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("five resets away, a wait at the edge, one more away: windows %q, want fixed still", got)
	}
	// And the other way: a wait that ends elsewhere, an hour of answers
	// confirming the edges, then another such wait — not two in a row.
	l.RateLimited(at, "p", "m", midWindow(at).Sub(at))
	for i := 0; i < 450; i++ {
		at = at.Add(8 * time.Second)
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at))
	}
	at = at.Add(40 * time.Second)
	l.RateLimited(at, "p", "m", midWindow(at).Sub(at))
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("two waits ending elsewhere an hour apart, answers at the edges between: windows %q, want fixed still", got)
	}
	if n := windowsEvents(ev); n != 1 {
		t.Fatalf("%d windows events, want 1", n)
	}
}

// Answers that reach the gate at one instant are one vote: at four instants
// across the window, two answers each, they are four votes, not eight.
func TestFixedWindowsResetsAtOneInstantAreOneVote(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	for i := 0; i < 4; i++ {
		at := t0.Add(time.Duration(2+15*i) * time.Second)
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at))
		answerReset(l, at, 20*time.Millisecond, 0, nextEdge(at))
	}
	if got := windowsOf(l, t0.Add(time.Minute)); got != "" {
		t.Fatalf("windows %q, want sliding", got)
	}
}

// An empty window's reset is now: it says nothing of an edge, and does not
// switch fixed windows back.
func TestFixedWindowsKeptThroughEmptyWindowResets(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	at := t0.Add(3 * time.Second)
	for i := 0; i < 6; i++ {
		answerReset(l, at, 10*time.Millisecond, 0, nextEdge(at))
		at = at.Add(8 * time.Second)
	}
	for i := 0; i < 12; i++ {
		l.ObserveTokensReset(at, "p", "m", at.Add(-10*time.Millisecond), engine.TokenReset{})
		at = at.Add(8 * time.Second)
	}
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("windows %q after empty windows' resets, want fixed", got)
	}
}

// An instant in whole seconds (anthropic-ratelimit-tokens-reset without a
// fraction) counts at a window of a minute, to within 1.1 s of the edge.
func TestFixedWindowsLearnedFromCoarseResets(t *testing.T) {
	l, _, _ := newTestLedger(t, learnGate())
	at := t0.Add(2*time.Second + 300*time.Millisecond)
	for i := 0; i < 6; i++ {
		l.ObserveTokensReset(at, "p", "m", at.Add(-time.Second), engine.TokenReset{At: nextEdge(at).Add(-time.Second), Coarse: true}) // a clock a second behind
		at = at.Add(8 * time.Second)
	}
	if got := windowsOf(l, at); got != WindowsFixed {
		t.Fatalf("windows %q, want fixed", got)
	}
}
