package gate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// agingLedger is a ledger whose limits never bind, tuned by tune (nil: none),
// after 200 outputs of the sim's distribution (agingOutputs): ages are on.
func agingLedger(t *testing.T, tune func(*Config)) (*Ledger, time.Time) {
	t.Helper()
	c := testGate()
	c.Defaults.TPM, c.Defaults.RPM = 1<<30, 1<<20
	if tune != nil {
		tune(&c)
	}
	l, _, _ := newTestLedger(t, c)
	return l, agingOutputs(t, l, t0, 200)
}

// agingOutputs trains l on calls whose outputs are lognormal (median 400, p99
// 3,000) and whose time in flight is 0.5 s + 10 ms per output token, as a model
// writing at a steady pace does. It returns the time after the last settle.
func agingOutputs(t *testing.T, l *Ledger, now time.Time, n int) time.Time {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 7))
	sigma := math.Log(3000.0/400) / 2.326
	for i := 0; i < n; i++ {
		out := int64(math.Exp(math.Log(400) + sigma*r.NormFloat64()))
		tk := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10})
		now = now.Add(500*time.Millisecond + time.Duration(out)*10*time.Millisecond)
		if err := l.Settle(now, tk, Usage{InputTokens: 10, OutputTokens: out}); err != nil {
			t.Fatal(err)
		}
	}
	return now
}

func TestAgingReservationFollowsTheCallsAge(t *testing.T) {
	l, now := agingLedger(t, nil)

	// A fresh call reserves the plain mean output, not the mean of calls caught in
	// flight (a long answer's mean: about twice it on these outputs).
	fresh := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10})
	if fresh.ReservedOutput < 400 || fresh.ReservedOutput > 800 {
		t.Fatalf("a fresh call reserved %d output tokens, want the plain mean (~580)", fresh.ReservedOutput)
	}
	// 30.5 s later it has written at least 3,000 tokens: it reserves more than that.
	later := now.Add(30500 * time.Millisecond)
	l.Submit(later, Request{Provider: "p", Model: "m", InputTokens: 10}) // any admission ages the calls in flight
	st := l.BucketStatus(later, "p", "m")
	if st.Reserved < 10+3000+10+400 {
		t.Fatalf("after 30.5 s in flight the reservations hold %d, want the first above 3,010", st.Reserved)
	}
	// settling it replaces the aged reservation by what it really cost
	if err := l.Settle(later, fresh, Usage{InputTokens: 10, OutputTokens: 3100}); err != nil {
		t.Fatal(err)
	}
	b := l.bucketFor("p", "m", later)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.win.askedCount != 0 || b.inFlight != 1 {
		t.Fatalf("in flight %d, asked %d after the settle", b.inFlight, b.win.askedCount)
	}
}

func TestAgingMarginCoversAResidual(t *testing.T) {
	l, now := agingLedger(t, nil)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	_, plainVar := b.est.model.moments(0)
	if b.est.outVar < 2*plainVar {
		t.Fatalf("latency-weighted variance %.0f vs plain %.0f: the fixture lost its long tail", b.est.outVar, plainVar)
	}
	// Halfway through a typical answer, what is left to write spreads less than a
	// fresh call's output.
	_, mid := b.est.model.moments(b.est.model.floorAt(0.5 + 4.0))
	if mid >= b.est.outVar {
		t.Fatalf("variance given 400 written %.0f, not below the latency-weighted %.0f", mid, b.est.outVar)
	}
	_ = now
}

func TestAgingPaceFit(t *testing.T) {
	var m outputModel
	for i := 0; i < 100; i++ {
		o := int64(100 + 37*(i%50))
		m.observe(o, 0.25+0.02*float64(o))
	}
	base, per, ok := m.base, m.perToken, m.agesOK
	if !ok || math.Abs(base-0.25) > 1e-6 || math.Abs(per-0.02) > 1e-9 {
		t.Fatalf("pace fit base %g per token %g ok %v, want 0.25 and 0.02", base, per, ok)
	}
	if k := m.floorAt(0.25 + 0.02*1000); math.Abs(k-1000) > 1e-6 {
		t.Fatalf("floor after 1,000 tokens' time: %g", k)
	}
	// A provider that answers in the same time whatever it writes: ages say nothing.
	var flat outputModel
	for i := 0; i < 100; i++ {
		flat.observe(int64(100+37*(i%50)), 2+0.1*float64(i%3))
	}
	if flat.agesOK {
		t.Fatal("a duration unrelated to the output was taken for a pace")
	}
}

func TestAgingMomentsOfTheLognormal(t *testing.T) {
	var m outputModel
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 5000; i++ {
		m.observe(int64(math.Exp(6+0.8*r.NormFloat64())), 1)
	}
	mean, _ := m.moments(0)
	if want := math.Exp(6 + 0.32); math.Abs(mean-want)/want > 0.1 {
		t.Fatalf("plain mean %g, want ≈ %g", mean, want)
	}
	prev := mean
	for _, k := range []float64{200, 400, 1000, 3000, 1e5} {
		cm, cv := m.moments(k)
		if cm < k || cm < prev || cv < 0 || math.IsNaN(cv) {
			t.Fatalf("E[X | X > %g] = %g (var %g): must be ≥ k, grow with k, and have a variance", k, cm, cv)
		}
		prev = cm
	}
}

func TestAgingOffWithASharedWindow(t *testing.T) {
	l, now := agingLedger(t, nil)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	aging := b.agingLocked()
	l.shared = nopShared{}
	shared := b.agingLocked()
	reserve := b.est.outputReserve(0, shared)
	b.mu.Unlock()
	l.shared = nil
	if !aging || shared {
		t.Fatalf("aging %v alone, %v with a shared window: want on, off", aging, shared)
	}
	if float64(reserve) < b.est.outMean-1 {
		t.Fatalf("with a shared window a call reserves %d, below the latency-weighted mean %.0f", reserve, b.est.outMean)
	}
	_ = now
}

// nopShared is a SharedWindow that is never asked: the test only looks at
// whether the bucket would use ages with one.
type nopShared struct{}

func (nopShared) Reserve(SharedReserve) (SharedGrant, error)        { return SharedGrant{}, nil }
func (nopShared) Settle(string, string, string, int64, int64) error { return nil }
func (nopShared) Cooldown(string, string, time.Time, time.Time, time.Duration) (int64, error) {
	return 0, nil
}
func (nopShared) Available() error { return nil }

// A call's age counts from its send: the provider starts it then. Until it is
// sent it writes nothing, and aging leaves its reservation as admitted.
func TestAgingCountsACallsAgeFromItsSend(t *testing.T) {
	l, now := agingLedger(t, nil)
	late := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", InputTokens: 10, Sends: true})
	reservedOf := func(at time.Time) int64 {
		t.Helper()
		// any admission ages the calls in flight; the probe's own reservation is taken off
		probe := mustAdmit(t, l, at, Request{Provider: "p", Model: "m", InputTokens: 10})
		res := l.BucketStatus(at, "p", "m").Reserved - probe.Reserved
		if err := l.Release(at, probe); err != nil {
			t.Fatal(err)
		}
		return res
	}
	// 15 s after its admission, not sent: still its reservation as admitted.
	if got := reservedOf(now.Add(15 * time.Second)); got != late.Reserved {
		t.Fatalf("unsent for 15 s, the call holds %d; want its admission's %d", got, late.Reserved)
	}
	// Sent 20 s after its admission, seen 10.5 s later: it has written at least
	// 1,000 tokens (10 s at 10 ms a token), not the 3,000 of 30.5 s.
	l.Sent(now.Add(20*time.Second), late)
	if got := reservedOf(now.Add(30500 * time.Millisecond)); got < 10+1000 || got >= 10+3000 {
		t.Fatalf("10.5 s after its send (30.5 s after its admission) the call holds %d; want above 1,010 and under 3,010", got)
	}
}
