package gate

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Regression tests from a review of the aging and rate rules, each a defect it
// found.

// A call that asked max_tokens and outlives the window: its entry left
// win.tokens, so its excess over the expected output must not be subtracted from
// the arrival view any more (it was, when asked calls were counted per ticket).
func TestAgingRegressionAskedCallPastTheWindowUnderreadsArrival(t *testing.T) {
	l, now := agingLedger(t, nil)
	mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10, MaxTokens: 32000})
	now = now.Add(61 * time.Second) // the asked call is still streaming; its entry left the 60 s window
	small := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 1000})
	_ = small
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(now)
	if !b.agingLocked() {
		t.Fatal("fixture: aging off")
	}
	view := b.arrivalViewLocked()
	t.Logf("win.tokens %d, openCount %d, asked %d (%d output), meanOutput %d, arrival view %.0f",
		b.win.tokens, b.win.openCount, b.win.askedCount, b.win.askedOutput, b.est.meanOutput(), view)
	if view < 1000 {
		t.Fatalf("arrival view %.0f with a 1,000+ token call in the window: the asked call that left the window is still discounted", view)
	}
}

// ageLocked replaces s.variance (output + input-estimate variance) by the
// output's conditional variance alone.
func TestAgingRegressionAgingDropsTheInputVariance(t *testing.T) {
	l, now := agingLedger(t, nil)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	b.est.inErrSq, b.est.nInErr = 0.04, 1                             // input estimates off by 20% (rms)
	b.est.ratioBytes[0], b.est.ratioTokens[0], b.est.nRatio = 4, 1, 1 // 4 bytes a token
	b.mu.Unlock()
	tk := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputBytes: 40000}) // ~10k input tokens, guessed
	_ = tk
	b.mu.Lock()
	before := b.openVar
	b.mu.Unlock()
	now = now.Add(200 * time.Millisecond) // age 0.2 s < base: the output's moments are unchanged
	l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 10, MaxTokens: 1})
	b.mu.Lock()
	after := b.openVar
	b.mu.Unlock()
	t.Logf("openVar at grant %.0f, after an aging pass %.0f", before, after)
	if after < before*0.9 {
		t.Fatalf("openVar fell from %.0f to %.0f on an aging pass that changed no output moment: the input estimate's variance was dropped", before, after)
	}
}

// The plain mean/variance of the lognormal fit on bimodal outputs (short
// classifications and long answers, both streamed at a steady pace): the
// lognormal does not describe them, and ages must not be used.
func TestAgingRegressionLognormalOnBimodalOutputs(t *testing.T) {
	var m outputModel
	var e estimator
	sum := 0.0
	for i := 0; i < 200; i++ {
		o := int64(5)
		if i%2 == 1 {
			o = 2000
		}
		sum += float64(o)
		d := 0.3 + 0.01*float64(o)
		m.observe(o, d)
		e.observeOutput(o, d, false)
	}
	mean, v := m.moments(0)
	t.Logf("agesOK %v; lognormal mean %.0f sd %.0f; true mean %.0f; latency-weighted outMean %.0f sd %.0f",
		m.agesOK, mean, math.Sqrt(v), sum/200, e.outMean, math.Sqrt(e.outVar))
	if m.agesOK && mean > 3*sum/200 {
		t.Fatalf("a fresh call reserves %.0f output tokens, %.1f× the true mean %.0f; margin sd %.0f per call", mean, mean/(sum/200), sum/200, math.Sqrt(v))
	}
}

// Window sums stay consistent under aging with a count guard, settles,
// releases, and the clock stepping back.
func TestAgingRegressionAgingKeepsWindowSums(t *testing.T) {
	l, now := agingLedger(t, func(c *Config) { c.CountGuard = 0.02 })
	r := rand.New(rand.NewPCG(1, 2))
	var open []Ticket
	for i := 0; i < 3000; i++ {
		step := time.Duration(r.IntN(2000)) * time.Millisecond
		if r.IntN(50) == 0 {
			step = -3 * time.Second // clock steps back
		}
		now = now.Add(step)
		switch {
		case len(open) > 0 && r.IntN(3) == 0:
			j := r.IntN(len(open))
			if r.IntN(4) == 0 {
				_ = l.Release(now, open[j])
			} else {
				_ = l.Settle(now, open[j], Usage{InputTokens: 10, OutputTokens: int64(r.IntN(3000))})
			}
			open = append(open[:j], open[j+1:]...)
		default:
			mt := 0
			if r.IntN(4) == 0 {
				mt = 1 + r.IntN(4000)
			}
			tk, w := l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 10, MaxTokens: mt})
			if w != nil {
				t.Fatal("waiter")
			}
			open = append(open, tk)
		}
		b := l.bucketFor("p", "m", now)
		b.mu.Lock()
		w := &b.win
		var tok, oo, tail, an, aout int64
		oc := 0
		for k := 0; k < w.n; k++ {
			e := w.entries[(w.head+k)%len(w.entries)]
			tok += e.tokens
			if e.open != 0 {
				oc++
				oo += max(e.open, -e.open) - 1
			}
			if e.open < 0 {
				an++
				aout += -e.open - 1
			}
			if w.headSeq+uint64(k) < w.tailEnd {
				tail += e.tokens
			}
		}
		var res int64
		for _, s := range b.slots {
			if s.open {
				res += s.reserved
			}
		}
		ok := tok == w.tokens && oo == w.openOutput && oc == w.openCount && tail == w.tailTokens &&
			res == b.reservedOpen && an == int64(w.askedCount) && aout == w.askedOutput
		b.mu.Unlock()
		if !ok {
			t.Fatalf("step %d: sums diverge: tokens %d/%d openOutput %d/%d openCount %d/%d tail %d/%d reserved %d/%d asked %d/%d %d/%d",
				i, tok, w.tokens, oo, w.openOutput, oc, w.openCount, tail, w.tailTokens, res, b.reservedOpen, an, w.askedCount, aout, w.askedOutput)
		}
	}
}

// End to end: bimodal outputs (5 or 2,000 tokens, streamed at 10 ms a token),
// default marginSigmas 5, 200k TPM. With 1 call in flight a second small call
// must wait for an empty window.
func TestAgingRegressionBimodalOutputsSerializeTheGate(t *testing.T) {
	c := testGate()
	c.Defaults.TPM, c.Defaults.RPM = 200000, 1<<20
	c.MarginSigmas = 5
	l, _, _ := newTestLedger(t, c)
	now := t0
	for i := 0; i < 200; i++ {
		o := int64(5)
		if i%2 == 1 {
			o = 2000
		}
		tk, w := l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 10})
		if w != nil {
			st := l.BucketStatus(now, "p", "m")
			t.Fatalf("call %d, alone (nothing in flight, %d tokens in the window, budget %d), waits %s until +%s",
				i, st.WindowTokens, st.TokenBudget, w.reason, w.Next().Sub(now))
		}
		now = now.Add(300*time.Millisecond + time.Duration(o)*10*time.Millisecond)
		if err := l.Settle(now, tk, Usage{InputTokens: 10, OutputTokens: o}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2 * time.Minute) // an empty window
	first := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10})
	_, w := l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 10})
	st := l.BucketStatus(now, "p", "m")
	t.Logf("first reserved %d (output %d); budget %d; second waits: %v", first.Reserved, first.ReservedOutput, st.TokenBudget, w != nil)
	if w != nil {
		t.Fatalf("with one call of %d tokens in flight under a %d budget a second call waits (%s until +%s)", first.Reserved, st.TokenBudget, w.reason, w.Next().Sub(now))
	}
}

// With a shared window the 429's reading holds every instance's tokens but
// rateSpentLocked only this instance's spend: byRate replaces the global
// reading by one instance's share.
func TestAgingRegressionRateWithASharedWindowReadsOneInstance(t *testing.T) {
	c := testGate()
	c.Defaults.TPM, c.Defaults.RPM = 100000, 1<<20
	c.Learn = true
	l, _, ev := newTestLedger(t, c)
	l.shared = grantAllShared{}
	// 3 windows at 30k a window from this instance (the other instances hold ~70k).
	now := settledCalls(t, l, t0, 180, 500)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	b.sharedOthers = 70000
	// this instance served at a higher local level a window ago (the load moved between instances)
	b.servedArrival = servedLevel{cur: 90000, curStart: now.Add(-time.Second)}
	b.servedDone = servedLevel{cur: 90000, curStart: now.Add(-time.Second)}
	reading := b.providerViewLocked()
	b.mu.Unlock()
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	st := l.BucketStatus(now, "p", "m")
	for _, e := range ev.kinds(EventLearn) {
		t.Logf("learn %s %.0f → %.0f", e.Step, e.From, e.To)
	}
	t.Logf("reading %.0f (local %d + others 70,000); trigger after the 429 %.0f", reading, st.WindowTokens, st.Trigger)
	if st.Trigger < 0.8*reading {
		t.Fatalf("the shared trigger fell to %.0f, one instance's rate, from a global reading of %.0f", st.Trigger, reading)
	}
}

type grantAllShared struct{}

func (grantAllShared) Reserve(SharedReserve) (SharedGrant, error)        { return SharedGrant{ID: "x"}, nil }
func (grantAllShared) Settle(string, string, string, int64, int64) error { return nil }
func (grantAllShared) Cooldown(string, string, time.Time, time.Time, time.Duration) (int64, error) {
	return 0, errors.New("no read")
}
func (grantAllShared) Available() error { return nil }
