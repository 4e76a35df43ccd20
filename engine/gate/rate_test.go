package gate

import (
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// settledCalls grants n calls of size tokens (100 of them output) on model
// p/m, one a second from now, each settled at that cost a second after it was
// granted; it returns the time after the last.
func settledCalls(t *testing.T, l *Ledger, now time.Time, n, size int) time.Time {
	t.Helper()
	for i := 0; i < n; i++ {
		tk := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: size - 100, MaxTokens: 100})
		now = now.Add(time.Second)
		if err := l.Settle(now, tk, Usage{InputTokens: int64(size - 100), OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	return now
}

// spendAt drives a bucket's spend record: res tokens granted every step from
// start for n steps, settled at once at what they reserved.
func spendAt(b *bucket, start time.Time, step time.Duration, n int, res float64) time.Time {
	now := start
	for i := 0; i < n; i++ {
		b.noteSpentLocked(now, res)
		now = now.Add(step)
	}
	return now
}

func TestRateSpentIsTheDrainedReservesRate(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate()) // 60 s window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.rateSpentLocked(t0.Add(30 * time.Second)); ok {
		t.Fatal("a rate before a window of spend")
	}
	// A bucket of 1,000 a window refilled at 1,000 a window, full at t0, spent at
	// 1,500 a window: empty after two windows, when 3,000 were spent.
	now := spendAt(b, t0, time.Second, 120, 25)
	rate, ok := b.rateSpentLocked(now)
	if !ok || math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f (ok %v), want 1,000 a window", rate, ok)
	}
}

func TestRateSpentTakesTheLastFullReserve(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	// Five windows at 600 a window: a bucket refilling 1,000 a window stays full
	// (what it refills past full is lost). Then 1,500 a window for two windows
	// empties it: only the spend since it was last full tells the rate.
	now := spendAt(b, t0, time.Second, 300, 10)
	now = spendAt(b, now, time.Second, 120, 25)
	rate, _ := b.rateSpentLocked(now)
	if math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f, want 1,000: the spend before the reserve was last full counts for nothing", rate)
	}
	// For a sliding window of 1,000 spent at its limit it never reads above it.
	l2, _, _ := newTestLedger(t, testGate())
	b2 := l2.bucketFor("p", "m", t0)
	b2.mu.Lock()
	defer b2.mu.Unlock()
	now = spendAt(b2, t0, time.Second, 600, 1000.0/60)
	if rate, _ := b2.rateSpentLocked(now); rate > 1000 {
		t.Fatalf("rate %.0f above a sliding limit of 1,000 that was never exceeded", rate)
	}
}

func TestRateSpentNeedsTwoWindowsAfterA429(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate()) // 60 s window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	// A window and a half of spend: enough at the first 429, where the start is
	// where any reserve was last full.
	now := spendAt(b, t0, time.Second, 90, 25)
	if _, ok := b.rateSpentLocked(now); !ok {
		t.Fatal("no rate from a window and a half of spend at the first 429")
	}
	// After a 429 — even one whose trigger a view switch has since forgotten —
	// a window spent at its limit reads about half of it over so short a span:
	// no figure until two windows of spend.
	b.learn.last429 = now.Add(-30 * time.Second)
	b.learn.trigger = 0
	if rate, ok := b.rateSpentLocked(now); ok {
		t.Fatalf("rate %.0f from a window and a half of spend after a 429", rate)
	}
	now = spendAt(b, now, time.Second, 30, 25)
	if rate, ok := b.rateSpentLocked(now); !ok || math.Abs(rate-1000) > 15 {
		t.Fatalf("rate %.0f (ok %v) after two windows, want 1,000", rate, ok)
	}
}

// relaxedBeforeADrainedReserve is a bucket that spent 30k a window for four
// windows (the rate figure: 30k × 4 ÷ 5 = 24k), whose trigger was raised 30 s
// ago, and whose provider served 90k a window within the last two in both views
// (so the next 429 refutes both). The trigger was relaxed toward the clean
// record since the last 429; relaxed says whether the last raise was that
// relax, or a probe step or re-probe after it.
func relaxedBeforeADrainedReserve(t *testing.T, relaxed bool) (*Ledger, *eventLog, time.Time) {
	t.Helper()
	return relaxedBeforeADrainedReserveWith(t, relaxed, nil)
}

// relaxedBeforeADrainedReserveWith is relaxedBeforeADrainedReserve with the
// model's limits set by limits first.
func relaxedBeforeADrainedReserveWith(t *testing.T, relaxed bool, limits func(*ModelLimits)) (*Ledger, *eventLog, time.Time) {
	t.Helper()
	c := testGate()
	c.Defaults.TPM, c.Defaults.RPM = 100000, 1<<20
	c.Learn = true
	if limits != nil {
		limits(&c.Defaults)
	}
	l, _, ev := newTestLedger(t, c)
	now := settledCalls(t, l, t0, 240, 500)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.learn.last429 = t0.Add(30 * time.Second) // an earlier 429: two windows of history count
	b.learn.trigger, b.learn.quota = 40000, 40000
	b.learn.lastRaise = now.Add(-30 * time.Second)
	b.learn.relaxed, b.learn.raisedByRelax = true, relaxed // relaxed since the last 429 either way
	b.servedArrival = servedLevel{cur: 90000, curStart: now.Add(-time.Second)}
	b.servedDone = servedLevel{cur: 90000, curStart: now.Add(-time.Second)}
	return l, ev, now
}

// A relax toward the clean record is not the gate's own step above a level it
// held: when the 429 after it refutes both views, the record was a reserve the
// provider lent, and the spend tells the rate. (Without this, a bucket met from
// half its rate relaxed back toward the lent reserve after each 429 and came
// down one reading at a time: seed 1's run took 31 windows and 7 429s; now 14
// and 3.)
func TestRelaxedTriggerRefusedReadsTheRate(t *testing.T) {
	l, ev, now := relaxedBeforeADrainedReserve(t, true)
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	rate := false
	for _, e := range ev.kinds(EventLearn) {
		t.Logf("learn %s %.0f → %.0f", e.Step, e.From, e.To)
		rate = rate || e.Step == "rate"
	}
	st := l.BucketStatus(now, "p", "m")
	if !rate || math.Abs(st.Trigger-24000) > 500 {
		t.Fatalf("trigger %.0f (rate step %v), want the rate the spend implies, 24,000", st.Trigger, rate)
	}

	// A probe's raise (or a re-probe after the relax) is the gate's own
	// overshoot: read by the window.
	l, ev, now = relaxedBeforeADrainedReserve(t, false)
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "rate" {
			t.Fatalf("a 429 within a window of a probe step was read by the rate (%.0f)", e.To)
		}
	}
}

// A 429 read by the rate says the provider is a lone token bucket, whose limit
// is a rate: the gate counts at completion from then on, where the calls in
// flight and the margin for their outputs no longer hold back what the reserve
// absorbs. Not when the user set the view, nor when the provider decides on
// what it knows (the arrival view books that exactly).
func TestARateMovesTheViewToCompletion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits func(*ModelLimits)
		want   string
	}{
		{"learned", nil, CountsAtCompletion},
		{"told arrival", func(m *ModelLimits) { m.CountsAt = CountsAtArrival }, CountsAtArrival},
		{"decides known", func(m *ModelLimits) { m.Decides = DecidesKnown }, CountsAtArrival},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev, now := relaxedBeforeADrainedReserveWith(t, true, tc.limits)
			l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
			if got := rateSteps(ev); len(got) != 1 {
				t.Fatalf("rate steps %v, want one", got)
			}
			st := l.BucketStatus(now, "p", "m")
			if st.CountsAt != tc.want {
				t.Fatalf("counts at %q after the rate, want %q", st.CountsAt, tc.want)
			}
			if math.Abs(st.Trigger-24000) > 500 {
				t.Fatalf("trigger %.0f, want the rate, 24,000, in either view", st.Trigger)
			}
		})
	}
}

// The completion view a rate moved to holds while a rate bound stands: a later
// drain that refutes it (the bucket served more than it now reads: a reserve
// it lent) does not vote the arrival view back. Past rateCapWindows it may.
func TestARatesViewHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		want  string
	}{
		{"within", 5 * time.Minute, CountsAtCompletion},
		{"past rateCapWindows", (rateCapWindows + 1) * time.Minute, CountsAtArrival},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, now := relaxedBeforeADrainedReserve(t, true)
			l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
			later := settledCalls(t, l, now.Add(tc.after-30*time.Second), 20, 1000) // 20k in both views
			b := l.bucketFor("p", "m", later)
			b.mu.Lock()
			b.servedDone = servedLevel{cur: 90000, curStart: later.Add(-time.Second)} // far above the window now
			b.mu.Unlock()
			l.RateLimitedBy(later, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
			if got := l.BucketStatus(later, "p", "m").CountsAt; got != tc.want {
				t.Fatalf("counts at %q after a 429 that refutes the completion view %v on, want %q", got, later.Sub(now), tc.want)
			}
		})
	}
}

// The hold is the votes' (token and request votes alike go through
// countVotesLocked), each rate read renews it, and a run of 429s read again as
// requests takes back the view its rate moved.
func TestARatesViewHoldEdges(t *testing.T) {
	l, _, now := relaxedBeforeADrainedReserve(t, true)
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	span := b.l.conf().Window
	if !b.atCompletion || !b.rateViewAt.Equal(now) {
		t.Fatalf("after the rate: at completion %v, held since %v", b.atCompletion, b.rateViewAt)
	}
	renewed := now.Add(50 * span)
	b.rateViewLocked(renewed) // a later rate read, the view completion already
	if !b.rateViewAt.Equal(renewed) {
		t.Fatalf("a later rate read left the hold at %v", b.rateViewAt)
	}
	b.modeVotes = -switchVotes // a request vote for arrival, say
	b.countVotesLocked(now.Add(100 * span))
	if !b.atCompletion || b.modeVotes != 0 {
		t.Fatalf("a vote moved the view within the renewed hold (at completion %v, votes %d)", b.atCompletion, b.modeVotes)
	}
	b.modeVotes = -switchVotes
	b.countVotesLocked(renewed.Add((rateCapWindows + 1) * span))
	if b.atCompletion || !b.rateViewAt.IsZero() {
		t.Fatalf("past the hold: at completion %v, held since %v; want arrival and no hold", b.atCompletion, b.rateViewAt)
	}

	// Read again as requests, a run whose rate moved the view takes it back.
	b.tokenRead = tokenReadCount{firstAt: now, before: b.learn, atCompletion: false}
	b.switchViewLocked(now, true)
	b.rateViewAt = now
	b.rereadAsRequestsLocked(now)
	if b.atCompletion || !b.rateViewAt.IsZero() {
		t.Fatalf("read again as requests: at completion %v, held since %v; want the view before the run", b.atCompletion, b.rateViewAt)
	}
}

// A rate read at a second 429 within two windows of the first is no count at
// the refill edge: it is what the gate spent between two drains, and nothing
// brackets it. It gets no step, however much lower than the trigger before it
// (the step a window count read again there gets: countview_test.go,
// TestTriggerLoweredAgainAtTheRefillEdge).
func TestRateReadAgainGetsNoStep(t *testing.T) {
	// Told the arrival view: a rate read in it stays there (rateViewLocked).
	l, _, now := relaxedBeforeADrainedReserveWith(t, true, func(m *ModelLimits) { m.CountsAt = CountsAtArrival })
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	b.learn.prevCut, b.learn.burstStart = now.Add(-90*time.Second), now.Add(-90*time.Second) // the first 429, a window and a half before
	b.mu.Unlock()
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	_, rate := quota(l, now)
	if math.Abs(rate-24000) > 500 {
		t.Fatalf("trigger %.0f, want the rate the spend implies, 24,000", rate)
	}
	for w := 1; w <= 4; w++ { // each window loaded under the rate, and a call held back
		at := now.Add(time.Duration(w)*time.Minute + time.Second)
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 20000, MaxTokens: 1})
		heldBack(l, at, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 10000, MaxTokens: 1})
		if _, trig := quota(l, at); trig != rate {
			t.Fatalf("window %d after the 429: trigger %.0f, want the rate %.0f", w, trig, rate)
		}
	}
}

// phase is calls of size tokens, one a second, each settled a second later.
type phase struct{ calls, size int }

// afterAPause drives a bucket through a spend, a window with no grant (a
// cooldown as long as the window), and the phases after it, then sets it up so
// that the next 429 refutes both views at a level held for a window.
func afterAPause(t *testing.T, before phase, after ...phase) (*Ledger, *eventLog, time.Time) {
	t.Helper()
	l, _, ev := newTestLedger(t, rateGate())
	now := settledCalls(t, l, t0, before.calls, before.size)
	now = now.Add(time.Minute) // the pause: nothing granted for a window
	for _, p := range after {
		now = settledCalls(t, l, now, p.calls, p.size)
	}
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.learn.last429 = t0.Add(10 * time.Second)
	b.learn.trigger, b.learn.quota = 90000, 90000
	b.learn.lastRaise = t0
	b.servedArrival = servedLevel{cur: 95000, curStart: now.Add(-time.Second)}
	b.servedDone = servedLevel{cur: 95000, curStart: now.Add(-time.Second)}
	return l, ev, now
}

// rateGate is the configuration the rate rule's tests run: learning on, a
// token start far above what they spend, requests unbounded.
func rateGate() Config {
	c := testGate()
	c.Defaults.TPM, c.Defaults.RPM = 100000, 1<<20
	c.Learn = true
	return c
}

// boundAfterA429 spends 30 calls of 1,500 on l's model p/m from from, one a
// second (45k over 30 s), takes a 429 of sig then, and returns the lone
// bucket's rate bound it left and the time.
func boundAfterA429(t *testing.T, l *Ledger, from time.Time, sig engine.RateLimit) (float64, time.Time) {
	t.Helper()
	now := settledCalls(t, l, from, 30, 1500)
	l.RateLimitedBy(now, "p", "m", sig)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rateCap.rate, now
}

func rateSteps(ev *eventLog) (to []float64) {
	for _, e := range ev.kinds(EventLearn) {
		if e.Step == "rate" {
			to = append(to, e.To)
		}
	}
	return to
}

// A reserve a window's pause refilled bounds the rate from above: a 429 soon
// after the pause, at a spend since it far under what the figure from before it
// implies, is no drained reserve (another client's calls on a sliding window
// refute both views too) and is read by the window, not the rate.
func TestRefilledReserveBoundsTheRate(t *testing.T) {
	// 42k a window for three windows, the pause, then 30 s at 60k a window
	// (30k, the reading): the figure over all of it is (126k + 30k) ÷ 5.5
	// windows ≈ 28k, but a reserve of 28k, full after the pause and refilling
	// 14k while the 30k were spent, still holds about 12k when the 429 comes: it
	// was not empty.
	l, ev, now := afterAPause(t, phase{180, 700}, phase{30, 1000})
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 1000})
	if got := rateSteps(ev); len(got) != 0 {
		t.Fatalf("read the rate %v from the spend before a pause that refilled any reserve", got)
	}

	// A bucket: after the pause, 45k a window for two windows empties a reserve
	// of 30k a window (30k + 2 × 30k refilled = 90k spent): the figure is the
	// rate, the replay runs dry, and it is read.
	l, ev, now = afterAPause(t, phase{60, 750}, phase{120, 750})
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 750})
	if got := rateSteps(ev); len(got) != 1 || math.Abs(got[0]-30000) > 1000 {
		t.Fatalf("rate steps %v, want the drained bucket's rate, 30,000", got)
	}

	// The same bucket after a quiet stretch: ten windows at 10k a window keep its
	// reserve full (what refills past full is lost), then two windows at 45k
	// empty it. Counted without the cap, the spend since the pause (190k over 13
	// windows) would bound the rate at 14.7k and keep the rate of 30k from being
	// read, for as long as no second pause came.
	l, ev, now = afterAPause(t, phase{60, 750}, phase{600, 167}, phase{120, 750})
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 750})
	if got := rateSteps(ev); len(got) != 1 || math.Abs(got[0]-30000) > 1000 {
		t.Fatalf("rate steps %v after a quiet stretch, want the drained bucket's rate, 30,000", got)
	}
}

// A probe step the trigger clipped to within 2% of the level before it moved
// the budget by less than a reading's spread: the level held, and a 429 within
// the window that refutes both views is a drained reserve all the same. (A
// token bucket met at its rate lends its reserve to the slow start's climb; in
// one run of token-bucket-1x.yaml every raise after the climb was such a step
// up to the trigger, the rate was never read, and the hour took ten 429s.)
func TestClippedStepRefusedReadsTheRate(t *testing.T) {
	l, ev, now := relaxedBeforeADrainedReserve(t, false)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	b.learn.raisedLittle = true
	b.mu.Unlock()
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	rate := false
	for _, e := range ev.kinds(EventLearn) {
		rate = rate || e.Step == "rate"
	}
	if st := l.BucketStatus(now, "p", "m"); !rate || math.Abs(st.Trigger-24000) > 500 {
		t.Fatalf("trigger %.0f (rate step %v), want the rate the spend implies, 24,000", st.Trigger, rate)
	}
}

// A lone bucket's 429s bound its rate from above; the spend since its reserve
// was last full bounds it from below. A 429 whose spend needs more than an
// earlier 429 allowed is no lone bucket's, and the rate is not read from it.
func TestEarlier429sBoundTheRate(t *testing.T) {
	// first: the model's first calls (its reserve full), then a 429 after
	// them; then a window with no grant, then after, then a 429 that refutes
	// both views at a level held for a window.
	run := func(first phase, after phase, open int, age time.Duration) []float64 {
		t.Helper()
		l, _, ev := newTestLedger(t, rateGate())
		now := settledCalls(t, l, t0, first.calls, first.size)
		l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: int64(first.size)})
		b := l.bucketFor("p", "m", now)
		b.mu.Lock()
		b.learn.trigger, b.learn.quota = 90000, 90000 // (what it learned does not hold the calls after)
		b.rateCap.at = b.rateCap.at.Add(-age)
		b.mu.Unlock()
		now = now.Add(time.Minute) // the cooldown: nothing granted for a window
		now = settledCalls(t, l, now, after.calls, after.size)
		for i := 0; i < open; i++ { // in flight, each reserving far more than it costs
			mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: after.size - 100, MaxTokens: 4000})
			now = now.Add(time.Second)
		}
		b.mu.Lock()
		b.learn.trigger, b.learn.quota = 90000, 90000
		b.learn.lastRaise, b.learn.rateAt = t0, time.Time{}
		b.servedArrival = servedLevel{cur: 95000, curStart: now.Add(-time.Second)}
		b.servedDone = servedLevel{cur: 95000, curStart: now.Add(-time.Second)}
		b.mu.Unlock()
		l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: int64(after.size)})
		return rateSteps(ev)
	}

	// Another client on a sliding window: a minute of 42k from the start is
	// turned away (a bucket's rate at most 42.7k ÷ 2 windows ≈ 21.4k), and
	// after the cooldown 45k in 30 s meet the other client's calls (a
	// bucket's rate at least 45k ÷ 1.5 windows = 30k). The spend since the
	// start says 24.9k, and the replay after the pause runs dry at it: without
	// the bound it is read, at 0.55 of the window's reading.
	if got := run(phase{60, 700}, phase{30, 1500}, 0, 0); len(got) != 0 {
		t.Fatalf("read the rate %v after a 429 that allowed a bucket at most 21.4k a window", got)
	}
	// A bound over 60 windows old no longer stands: the provider may have raised
	// its limit since. (59 minutes back from its 429, which came 90 s before
	// the last: 60.5 windows.)
	if got := run(phase{60, 700}, phase{30, 1500}, 0, 59*time.Minute); len(got) != 1 {
		t.Fatalf("rate steps %v with the bound over 60 windows old, want the rate read", got)
	}

	// A bucket of 30k a window: full at the start, 45k in 30 s empty it (30k +
	// 15k refilled), so its first 429 allows at most 31k; refilled by the
	// cooldown, 90k over two minutes empty it again, and the rate is read.
	if got := run(phase{30, 1500}, phase{120, 750}, 0, 0); len(got) != 1 || math.Abs(got[0]-30000) > 1000 {
		t.Fatalf("rate steps %v, want the drained bucket's rate, 30,000", got)
	}

	// Another client again, the burst after the cooldown with ten calls
	// still in flight: 30k settled and 15k in flight at what they cost over
	// 30 s need 30k a window. Counted at nothing (or at their reservation of
	// 5,400 each, which the rate figure does) the bound is misjudged.
	if got := run(phase{60, 700}, phase{20, 1500}, 10, 0); len(got) != 0 {
		t.Fatalf("read the rate %v with the calls in flight left out of what the spend needs", got)
	}

	// The same bucket with its last ten calls in flight, each reserving
	// max_tokens 4,000 where it writes about 100: the bucket took them at
	// about 750 each. Counted at their reservation they would need a rate of
	// 43k; at what they cost, 30k, and the rate is read.
	if got := run(phase{30, 1500}, phase{110, 750}, 10, 0); len(got) != 1 {
		t.Fatalf("rate steps %v, want the drained bucket's rate read", got)
	}
}

// The bound is the reserve's since it was known full: a reset forgets it (the
// reserve may be anywhere after one), and a model whose state was restored
// from the store had been busy, so its first grant is no full reserve.
func TestRateBoundForgottenWithTheReserve(t *testing.T) {
	c := rateGate()
	store := &MemoryLearnedStore{}
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	sig := engine.RateLimit{Axis: engine.AxisTokens, Tokens: 1500}
	bound, now := boundAfterA429(t, l, t0, sig)
	if math.Abs(bound-31000) > 500 {
		t.Fatalf("bound %.0f after the first 429, want 46.5k ÷ 1.5 windows = 31k", bound)
	}
	other, err := NewLedger(c, engine.NewFakeClock(now), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if restored, _ := boundAfterA429(t, other, now, sig); restored != 0 {
		t.Fatalf("bound %.0f from a restored model's first grant, want none", restored)
	}
	l.Reset(now, "p", "m")
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	if b.rateCap.rate != 0 {
		t.Fatalf("bound %.0f after a reset, want none", b.rateCap.rate)
	}
	b.rateCap.rate, b.spentFromIdle = 31000, true
	b.mu.Unlock()
	// A window of another length: a reserve of the old one says nothing.
	c2 := c
	c2.Window = 2 * c.Window
	if err := l.Reconfigure(now, c2); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rateCap.rate != 0 || b.spentFromIdle {
		t.Fatalf("bound %.0f (first grant full: %v) after the window changed, want none", b.rateCap.rate, b.spentFromIdle)
	}
}

// Only a 429 that may be a lone bucket's bounds its rate: not one about
// requests, not with learning off, not in fixed windows, not while the
// headers say another client spends the key.
func TestOnlyALoneBucketsTokens429sBoundTheRate(t *testing.T) {
	for _, c := range []struct {
		name   string
		config func(*Config)
		bucket func(*bucket)
		axis   engine.Axis
		want   bool
	}{
		{"tokens", nil, nil, engine.AxisTokens, true},
		{"requests", nil, nil, engine.AxisRequests, false},
		{"learning off", func(c *Config) { c.Learn = false }, nil, engine.AxisTokens, false},
		{"fixed windows", func(c *Config) { c.Defaults.Windows = WindowsFixed }, nil, engine.AxisTokens, false},
		{"another client", nil, func(b *bucket) {
			b.learn.stated = 100000
			b.outside.others = othersSpend{mean: 10000, weight: 4, at: t0.Add(29 * time.Second)}
		}, engine.AxisTokens, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := rateGate()
			if c.config != nil {
				c.config(&cfg)
			}
			l, _, _ := newTestLedger(t, cfg)
			if c.bucket != nil {
				b := l.bucketFor("p", "m", t0)
				b.mu.Lock()
				c.bucket(b)
				b.mu.Unlock()
			}
			if bound, _ := boundAfterA429(t, l, t0, engine.RateLimit{Axis: c.axis, Tokens: 1500}); (bound > 0) != c.want {
				t.Fatalf("bound %.0f, want one: %v", bound, c.want)
			}
		})
	}
}

// The bounds' arithmetic. From below, every sample counts (a reserve never
// holds more than a window's rate); from above, only those from the last
// moment the reserve is known full (the model's first grant, or the first
// after a window without any); and the bound from above only ever falls.
func TestRateBounds(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate()) // 60 s window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	// 5k, 5k, 5k and 40k at 0, 15, 30 and 45 s, read at 60 s: the spend since
	// 45 s needs the most, 40k ÷ 1.25 windows = 32k; with a refused call of
	// 1k, 41k ÷ 1.25 = 32.8k at most.
	for i, res := range []float64{5000, 5000, 5000, 40000} {
		b.noteSpentLocked(t0.Add(time.Duration(i)*15*time.Second), res)
	}
	lb, ub, full := b.rateBoundsLocked(t0.Add(time.Minute), 1000)
	if !full || math.Abs(lb-32000) > 1 || math.Abs(ub-32800) > 1 {
		t.Fatalf("lb %.0f ub %.0f (full %v), want 32,000 and 32,800 from the last sample", lb, ub, full)
	}
	// A pause of a window, a grant of 1k at 120 s (the reserve full again),
	// read at 130 s: from below the spend since the first grant still needs
	// 56k ÷ (130 s + a window) ≈ 17.7k; from above only the 1k since the pause
	// and the refused 1k count, ÷ (10 s + a window).
	b.noteSpentLocked(t0.Add(120*time.Second), 1000)
	lb, ub, full = b.rateBoundsLocked(t0.Add(130*time.Second), 1000)
	if !full || math.Abs(lb-56000*60/190.0) > 1 || math.Abs(ub-2000*60/70.0) > 1 {
		t.Fatalf("lb %.0f ub %.0f (full %v) after the pause, want %.0f and %.0f", lb, ub, full, 56000*60/190.0, 2000*60/70.0)
	}
	b.lowerRateCapLocked(t0, 29000, 30000, 0.2)
	b.lowerRateCapLocked(t0, 34000, 35000, 0.5)
	if b.rateCap != (rateBound{rate: 30000, at: t0, lb: 29000, refill: 0.2}) {
		t.Fatalf("bound %+v, want the lower one, 30,000 (from 29,000, 0.20 refilled)", b.rateCap)
	}
	b.lowerRateCapLocked(t0, 19000, 20000, 0.6)
	if b.rateCap != (rateBound{rate: 20000, at: t0, lb: 19000, refill: 0.6}) {
		t.Fatalf("bound %+v, want it lowered to 20,000 (from 19,000, 0.60 refilled)", b.rateCap)
	}

	// Steady spend with no pause for longer than the samples reach: the first
	// grant has left them, and nothing is known full.
	l2, _, _ := newTestLedger(t, testGate())
	b2 := l2.bucketFor("p", "m", t0)
	b2.mu.Lock()
	defer b2.mu.Unlock()
	now := spendAt(b2, t0, 15*time.Second, spentSamples+2, 1000)
	if _, ub, full := b2.rateBoundsLocked(now, 1000); full || ub != 0 {
		t.Fatalf("ub %.0f (full %v) after the first grant left the samples, want none", ub, full)
	}
}

// A 429 whose caller did not say what the refused call asked bounds the rate
// with an ordinary call's cost: the bucket could not fit at least that much.
func TestRateBoundCountsAnOrdinaryRefusedCall(t *testing.T) {
	l, _, _ := newTestLedger(t, rateGate())
	// 45k spent and an ordinary call of 1,500, over 30 s and a window.
	if bound, _ := boundAfterA429(t, l, t0, engine.RateLimit{Axis: engine.AxisTokens}); math.Abs(bound-46500*60/90.0) > 50 {
		t.Fatalf("bound %.0f, want %.0f", bound, 46500*60/90.0)
	}
}

// tokenBucket is a provider's token bucket: a reserve of rate tokens, full at
// first, refilled continuously at rate a window.
type tokenBucket struct {
	rate, level float64
	window      time.Duration
	at          time.Time
}

// take spends cost at now if the reserve holds it.
func (p *tokenBucket) take(now time.Time, cost float64) bool {
	p.level = math.Min(p.rate, p.level+p.rate*float64(now.Sub(p.at))/float64(p.window))
	p.at = now
	if p.level < cost {
		return false
	}
	p.level -= cost
	return true
}

// againstABucket offers calls of 1,000 tokens to model p/m every 250 ms for
// d from t0 (far more than the bucket's 40,000 a window), each sent to the
// bucket as the gate admits it and settled at once; a refused call is released
// and reported as a token 429 with a window's cooldown. It returns the 429s'
// times. The gate starts at twice the bucket's rate, with its pacing on.
// afterEach, when not nil, runs after each 429 on the model's bucket (locked).
func againstABucket(t *testing.T, d time.Duration, afterEach func(*bucket)) (*Ledger, *eventLog, []time.Duration) {
	t.Helper()
	c := rateGate()
	c.Defaults.TPM = 80000
	c.Pace, c.PaceBurst = DefaultConfig().Pace, DefaultConfig().PaceBurst
	l, _, ev := newTestLedger(t, c)
	prov := &tokenBucket{rate: 40000, level: 40000, window: c.Window, at: t0}
	var refused []time.Duration
	for now := t0; now.Before(t0.Add(d)); now = now.Add(250 * time.Millisecond) {
		tk, w := l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 900, MaxTokens: 100})
		if w != nil {
			w.Cancel(now)
			continue
		}
		if prov.take(now, 1000) {
			if err := l.Settle(now, tk, Usage{InputTokens: 900, OutputTokens: 100}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := l.Release(now, tk); err != nil {
			t.Fatal(err)
		}
		l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 1000, RetryAfter: c.Window, Admitted: now})
		refused = append(refused, now.Sub(t0))
		if afterEach != nil {
			b := l.bucketFor("p", "m", now)
			b.mu.Lock()
			afterEach(b)
			b.mu.Unlock()
		}
	}
	return l, ev, refused
}

// A bucket met from idle far above its rate runs dry within a fifth of a
// window: a sliding window at what was spent would refuse there too, and the
// gate takes the window. It drains again at the gate's level, refuting neither
// view, but its figures agree with the first drain's over a span that refilled
// far more: that is the bucket's rate, and no third 429 follows.
func TestTwoDrainsThatAgreeReadTheRate(t *testing.T) {
	var first rateBound // what the first drain left
	l, ev, refused := againstABucket(t, 30*time.Minute, func(b *bucket) {
		if first.rate == 0 {
			first = b.rateCap
		}
	})
	t.Logf("429s at %v; rate steps %v; the first drain's bound %+v", refused, rateSteps(ev), first)
	// Run dry 11.75 s after its first grant (a minute's window): 0.164 of what
	// it spent had refilled, and both bounds are about the rate.
	if math.Abs(first.refill-11.75/71.75) > 0.01 || math.Abs(first.lb-40000) > 0.03*40000 || math.Abs(first.rate-40000) > 0.03*40000 {
		t.Fatalf("the first drain's bound %+v, want 0.164 refilled and both bounds within 3%% of 40,000", first)
	}
	if len(refused) != 2 {
		t.Fatalf("429s at %v, want two: the first drain, and the second that tells the rate", refused)
	}
	if got := rateSteps(ev); len(got) != 1 || math.Abs(got[0]-40000) > 0.03*40000 {
		t.Fatalf("rate steps %v, want the bucket's rate, 40,000 (within 3%%)", got)
	}
	if st := l.BucketStatus(t0.Add(30*time.Minute), "p", "m"); st.Trigger > 40000*1.03 {
		t.Fatalf("trigger %.0f after 30 windows, want at most 3%% above the rate, 40,000", st.Trigger)
	}

	// Nor once the provider stated its limit (its headers read since).
	_, ev, refused = againstABucket(t, 30*time.Minute, func(b *bucket) {
		b.learn.stated = 48000
	})
	if got := rateSteps(ev); len(got) != 0 || len(refused) < 3 {
		t.Fatalf("rate steps %v, 429s at %v: two drains read against a stated limit", got, refused)
	}

	// A bound that no longer stands (older than rateCapWindows) is no earlier
	// drain to agree with.
	_, ev, refused = againstABucket(t, 30*time.Minute, func(b *bucket) {
		b.rateCap.at = b.rateCap.at.Add(-rateCapWindows * b.l.conf().Window)
	})
	if got := rateSteps(ev); len(got) != 0 || len(refused) < 3 {
		t.Fatalf("rate steps %v, 429s at %v: read against a bound that no longer stands", got, refused)
	}
}

func TestDrainsAgree(t *testing.T) {
	first := rateBound{rate: 40300, at: t0, lb: 39400, refill: 0.2} // met 2.5 s after a full reserve of a 10 s window
	for _, c := range []struct {
		name           string
		was            rateBound
		lb, ub, refill float64
		want           bool
	}{
		{"a bucket's second drain", first, 39900, 40500, 0.6, true},
		{"its own bound the lower", first, 39900, 40100, 0.6, true},
		{"no earlier bound", rateBound{}, 39900, 40500, 0.6, false},
		{"no earlier bound, nothing spent", rateBound{}, 0, 0, 0.6, false},
		{"more spent than the bound allows", first, 40400, 40500, 0.6, false},
		{"more spent than its own bound allows", first, 39900, 39800, 0.6, false},
		{"the bound far above what was spent", first, 38500, 40500, 0.6, false},
		{"over a like span", first, 39900, 40500, 0.35, false},
		{"over a span a little shorter", first, 39900, 40500, 0.05, false},
		{"over a span far shorter", rateBound{rate: 40300, at: t0, lb: 39400, refill: 0.3}, 39900, 40500, 0.05, true},
		{"the first mostly refilled", rateBound{rate: 40300, at: t0, lb: 39400, refill: 0.5}, 39900, 40500, 0.8, false},
		// Another client on a sliding window: each drain's own figures close
		// together, but the first needs a rate no later one allows.
		{"the earlier drain needing more", rateBound{rate: 31036, at: t0, lb: 28648, refill: 0.2}, 26744, 27097, 0.59, false},
	} {
		if got := drainsAgree(c.was, c.lb, c.ub, c.refill); got != c.want {
			t.Errorf("%s: drainsAgree = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRefillShare(t *testing.T) {
	l, _, _ := newTestLedger(t, rateGate()) // a minute's window
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if got := b.refillShareLocked(t0); got != 0 {
		t.Fatalf("refilled share %.2f with no known-full point, want 0", got)
	}
	spendAt(b, t0, time.Second, 10, 100) // the model's first grants: full at t0
	if got := b.refillShareLocked(t0.Add(15 * time.Second)); math.Abs(got-0.2) > 1e-9 {
		t.Fatalf("refilled share %.3f a quarter window after the reserve was full, want 0.2", got)
	}
	spendAt(b, t0.Add(2*time.Minute), time.Second, 1, 100) // after a window without a grant: full again
	if got := b.refillShareLocked(t0.Add(3 * time.Minute)); math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("refilled share %.3f a window after the reserve refilled, want 0.5", got)
	}
}
