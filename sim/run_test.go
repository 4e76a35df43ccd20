package sim

import (
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/testenv"
)

// small is a quick scenario: 10 minutes, every call the same size.
func small() Scenario {
	s := DefaultScenario()
	s.Duration = Duration(10 * time.Minute)
	s.Sessions = 8
	s.Prompt = SizeSpec{Median: 1000, P99: 1000}
	s.Output = SizeSpec{Median: 100, P99: 100}
	s.MaxTokensShare = 0
	s.Provider.TPM = 40_000
	s.Provider.RPM = 1_000
	return s
}

// The network delay lies between the gate's admission and the provider's count,
// and again between the provider's answer (or 429) and the gate.
func TestNetworkDelay(t *testing.T) {
	s := small()
	s.Network = NetworkSpec{Delay: Duration(40 * time.Millisecond)}
	r, err := newRunner(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	var sess *session
	for r.step() {
		if sess = r.sessions[0]; !sess.sentAt.IsZero() {
			break
		}
	}
	sent := sess.sentAt
	at := map[int]time.Time{}
	for _, ok := at[evAnswer]; !ok && r.step(); _, ok = at[evAnswer] {
		for _, e := range r.q {
			if e.s == sess {
				if _, seen := at[e.kind]; !seen {
					at[e.kind] = e.at
				}
			}
		}
	}
	resp := s.responseTime(sess.cur.output)
	if got := at[evDone].Sub(sent); got != 40*time.Millisecond+resp {
		t.Errorf("provider finished %s after admission, want delay + response %s", got, 40*time.Millisecond+resp)
	}
	if got := at[evAnswer].Sub(at[evDone]); got != 40*time.Millisecond {
		t.Errorf("answer took %s to reach the gate, want 40ms", got)
	}
}

// A 429 reaches the gate one round trip after admission, and the gate is told
// when the call was admitted and — only when the provider names it — which limit.
func TestRefusalRoundTrip(t *testing.T) {
	s := small()
	s.Network = NetworkSpec{Delay: Duration(25 * time.Millisecond)}
	s.Demand = 3
	s.Gate.Start = 2
	r, err := newRunner(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	for r.step() && len(r.times429) == 0 {
	}
	if len(r.times429) == 0 {
		t.Fatal("no 429 at twice the truth")
	}
	var refused *session
	for _, ss := range r.sessions {
		if ss.pending.axis != axisNone {
			refused = ss
		}
	}
	if refused == nil || r.times429[0].Sub(refused.sentAt) != 50*time.Millisecond {
		t.Fatalf("429 at %v, sent at %v: want one 50ms round trip", r.times429[0], refused.sentAt)
	}
	if refused.pending.axis != axisTokens {
		t.Fatalf("refused on %s, want tokens", refused.pending.axis)
	}
}

// Utilization is what the provider served ÷ (the true limit × time), whoever
// spent it; the remaining utilization is the sessions' share of what the outside
// client left.
func TestUtilizationAgainstTheTruth(t *testing.T) {
	for _, pattern := range []string{OutsideSmooth, OutsideBursts} {
		t.Run(pattern, func(t *testing.T) {
			s := small()
			s.Outside = OutsideSpec{Share: 0.1, Pattern: pattern, CallTokens: 1000}
			r, err := newRunner(s, ModeNaive)
			if err != nil {
				t.Fatal(err)
			}
			for r.step() {
			}
			m := r.metrics()
			truth := 40_000.0 * 10
			p := r.provider
			if want := float64(p.served[fromSessions]+p.served[fromOutside]) / truth; m.Utilization != want {
				t.Errorf("utilization %v, want %v", m.Utilization, want)
			}
			if want := float64(p.served[fromSessions]) / (truth - float64(p.served[fromOutside])); m.RemainingUtilization != want {
				t.Errorf("remaining utilization %v, want %v", m.RemainingUtilization, want)
			}
			// the outside client keeps retrying: it spends its share, give or take the calls still queued at the end
			if math.Abs(m.OutsideShare-0.1) > 0.012 {
				t.Errorf("outside share %.4f, want 0.1", m.OutsideShare)
			}
			if m.Utilization > 1.0001 {
				t.Errorf("a sliding window cannot serve more than the limit: %v", m.Utilization)
			}
		})
	}
}

// A provider that sends rate-limit headers calibrates the gate to its stated
// limit on the first answer.
func TestHeadersCalibrate(t *testing.T) {
	s := small()
	s.Provider.Headers = true
	s.Gate.Start = 0.5
	r, err := newRunner(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	for r.step() && r.done == 0 {
	}
	if _, q, _ := r.gate.learned(r.clock.Now()); q != 40_000 {
		t.Fatalf("quota %v after the first answer with headers, want the stated 40000", q)
	}
}

// RPM-bound: many small calls; the requests limit refuses, and the report says so.
func TestRPMBound(t *testing.T) {
	s := small()
	s.Prompt = SizeSpec{Median: 50, P99: 50}
	s.Output = SizeSpec{Median: 20, P99: 20}
	s.Provider.RPM = 100
	r, err := RunModes(s, ModeNaive)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Modes[ModeNaive]
	if m.RateLimitedByRequests == 0 || m.RateLimitedByTokens != 0 {
		t.Fatalf("429s by tokens %d, by requests %d: want requests only", m.RateLimitedByTokens, m.RateLimitedByRequests)
	}
	if m.RequestUtilization < 0.9 || m.RequestUtilization > 1.0001 {
		t.Fatalf("request utilization %.3f", m.RequestUtilization)
	}
}

// RPM-bound, the request limit configured at twice the truth, the 429s naming
// the request limit: the gate learns the request limit. The request trigger
// relaxed back into the limit after each 429: 44 429s in the hour, 90 against
// fixed windows. (Unnamed, such a 429 comes at half the request budget and is
// still read as tokens: docs/benchmarks.md, "Workloads bound by requests".)
//
// At fixed windows the second RPM 429 sets the request ceiling at 0.93 of the
// lower count unless it came within 1% of the first's: over seeds 1–12, 0.905–0.909
// of the limit in eight runs, 0.974 in the others. Seed 1 is one of the lucky
// ones, and a change that moved nothing else (the whole first window's
// requests paced, tried) moved it to 0.909: the bound there is the ceiling's,
// not the lucky point's.
func TestRPMBoundLearnsTheRequestLimit(t *testing.T) {
	testenv.LongSimulation(t)
	for _, model := range []string{LimitSlidingArrival, LimitFixedWindow} {
		t.Run(model, func(t *testing.T) {
			floor := 0.95
			if model == LimitFixedWindow {
				floor = 0.90
			}
			s := DefaultScenario()
			s.Duration = Duration(time.Hour)
			s.Provider = ProviderSpec{Model: model, TPM: 200_000, RPM: 100, RetryAfter: s.Provider.RetryAfter, NamesLimit: true}
			s.Prompt = SizeSpec{Median: 200, P99: 400}
			s.Output = SizeSpec{Median: 50, P99: 200}
			s.Gate.Start = 2
			g := run(t, s).Modes[ModeGate]
			if g.RequestUtilization < floor || g.RateLimited > 3 || g.RateLimitedByTokens != 0 {
				t.Fatalf("request utilization %.3f, %d 429s (%d on tokens): want ≥ %.2f and ≤ 3, none on tokens",
					g.RequestUtilization, g.RateLimited, g.RateLimitedByTokens, floor)
			}
		})
	}
}

// RPM-bound, both limits configured at twice the truth, the 429s naming
// neither, calls of ~540 tokens: the request limit refuses at half the request
// budget and 0.28 of the token one, and the shares read it as tokens. The next
// 429 at the same count, with tokens that moved, is read again as requests
// (engine/gate/samecount.go). Read as tokens throughout, the token trigger
// stepped down at each 429 and the requests for the hour were 0.51–0.82 of
// the limit on a sliding window (seeds 1–6), 0.52–0.79 at completion; read
// again, 0.96–0.97 and 0.91–0.98.
func TestUnnamedRPMBoundIsReadAgainAsRequests(t *testing.T) {
	testenv.LongSimulation(t)
	for _, c := range []struct {
		model string
		floor float64
		max   int
	}{
		{LimitSlidingArrival, 0.95, 3},
		{LimitSlidingCompletion, 0.90, 5},
	} {
		t.Run(c.model, func(t *testing.T) {
			s := DefaultScenario()
			s.Duration = Duration(time.Hour)
			s.Provider = ProviderSpec{Model: c.model, TPM: 200_000, RPM: 200, RetryAfter: s.Provider.RetryAfter}
			s.Prompt = SizeSpec{Median: 300, P99: 2000}
			s.Output = SizeSpec{Median: 100, P99: 600}
			s.Gate.Start = 2
			g := run(t, s).Modes[ModeGate]
			if g.RequestUtilization < c.floor || g.RateLimited > c.max {
				t.Fatalf("request utilization %.3f, %d 429s: want ≥ %.2f and ≤ %d", g.RequestUtilization, g.RateLimited, c.floor, c.max)
			}
		})
	}
}

func TestEveryLimitModelRuns(t *testing.T) {
	for _, model := range LimitModels {
		t.Run(model, func(t *testing.T) {
			s := small()
			s.Provider.Model = model
			rep, err := RunModes(s, ModeOracle, ModeGate)
			if err != nil {
				t.Fatal(err)
			}
			for mode, m := range rep.Modes {
				if m.Completed == 0 || m.Utilization <= 0 {
					t.Errorf("%s: %+v", mode, m)
				}
			}
		})
	}
}

// Another client on the key, no headers, the gate configured at the truth:
// a 429 right after a cooldown refutes both views (the other client's calls
// fill the window) and looks like a drained bucket, but the 429s before it
// allowed a lone bucket less than its spend needs (engine/gate/rate.go,
// rateCap). Read as a bucket's rate, it held these runs at 0.557 and 0.597 of
// what the other client left for the hour.
func TestAnotherClientIsNoDrainedBucket(t *testing.T) {
	testenv.LongSimulation(t)
	for _, c := range []struct {
		model string
		seed  uint64
	}{
		{LimitSlidingArrival, 1},
		{LimitFixedWindow, 4},
	} {
		t.Run(c.model, func(t *testing.T) {
			s := DefaultScenario()
			s.Seed = c.seed
			s.Duration = Duration(time.Hour)
			s.Provider = ProviderSpec{Model: c.model, TPM: 200_000, RPM: 600, RetryAfter: s.Provider.RetryAfter}
			s.Prompt = SizeSpec{Median: 500, P99: 2000}
			s.Output = SizeSpec{Median: 150, P99: 800}
			s.Gate.Start = 1
			s.Outside.Share = 0.1
			g := run(t, s).Modes[ModeGate]
			if g.RemainingUtilization < 0.90 || g.RateLimited > 3 {
				t.Fatalf("%.3f of what remains, %d 429s: want ≥ 0.90 and ≤ 3", g.RemainingUtilization, g.RateLimited)
			}
		})
	}
}

// A gated call makes gateMaxAttempts attempts (docs/sim.md: up to 6), then
// counts as lost. Every call here is larger than the provider's limit, so every
// attempt is refused: each lost call took exactly 6 429s (the last call may
// still be retrying at the end). Counting attempts from 0, it took 7.
func TestGatedCallGivesUpAfterSixAttempts(t *testing.T) {
	s := DefaultScenario()
	s.Duration = Duration(30 * time.Minute)
	s.Sessions = 1
	s.Provider.TPM = 1000
	s.Provider.RetryAfter = Duration(time.Second) // many calls lost in the half hour
	s.Prompt = SizeSpec{Median: 2000, P99: 2000}
	s.MaxTokensShare = 0
	s.Gate.TPM = 1_000_000
	if gateMaxAttempts != 6 {
		t.Fatalf("gateMaxAttempts %d, docs/sim.md says 6", gateMaxAttempts)
	}
	r, err := RunModes(s, ModeOracle, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{ModeOracle, ModeGate} {
		x := r.Modes[m]
		t.Logf("%s: %d 429s, %d lost, %d completed", m, x.RateLimited, x.Lost, x.Completed)
		if x.Lost == 0 || x.Completed != 0 {
			t.Fatalf("%s: %d lost, %d completed: want every call lost", m, x.Lost, x.Completed)
		}
		if extra := x.RateLimited - gateMaxAttempts*x.Lost; extra < 0 || extra >= gateMaxAttempts {
			t.Errorf("%s: %d 429s for %d lost calls (%.2f each), want %d each", m, x.RateLimited, x.Lost, float64(x.RateLimited)/float64(x.Lost), gateMaxAttempts)
		}
	}
}

// After outside.until the outside client spends nothing more: the calls it
// had refused and was about to send again are given up too (docs/sim.md:
// "gives up a call refused then"), not offered once more and served.
func TestOutsideStopGivesUpRefusedCalls(t *testing.T) {
	s := DefaultScenario()
	s.Duration = Duration(10 * time.Minute)
	s.Demand = 3
	s.Outside.Share, s.Outside.Until = 0.2, Duration(5*time.Minute)
	r, err := newRunner(s, ModeNaive) // no gate: the sessions keep the window full
	if err != nil {
		t.Fatal(err)
	}
	for r.stopped.IsZero() && r.step() {
	}
	if r.stopped.IsZero() {
		t.Fatal("the outside client never stopped")
	}
	waiting := 0
	for _, e := range r.q {
		if e.kind == evOutsideCall {
			waiting++
		}
	}
	if waiting == 0 {
		t.Fatal("no refused outside call was waiting at the stop: the test proves nothing")
	}
	offered := r.provider.requests[fromOutside] + int64(r.provider.refusedOut)
	for r.step() {
	}
	if after := r.provider.requests[fromOutside] + int64(r.provider.refusedOut) - offered; after != 0 {
		t.Errorf("%d outside calls were waiting at the stop; %d were offered after it, want none", waiting, after)
	}
}

// The window sample that falls at outside.until judges the window that just
// ended, in which the outside client spent, against the capacity it left (the
// true TPM less its share), not the whole limit: the sample comes before the
// stop at that instant.
func TestSampleAtTheOutsideStopJudgesTheWindowBefore(t *testing.T) {
	s := DefaultScenario()
	s.Duration = Duration(5 * time.Minute)
	s.Outside.Share, s.Outside.Until = 0.1, Duration(2*time.Minute)
	r, err := newRunner(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	for len(r.learned) < 2 && r.step() {
	}
	if len(r.learned) < 2 {
		t.Fatal("no sample at the stop")
	}
	at := r.clock.Now()
	if want := r.start.Add(time.Duration(s.Outside.Until)); !at.Equal(want) {
		t.Fatalf("second sample at %s, want at the stop %s", at, want)
	}
	if !r.stopped.IsZero() {
		t.Error("the outside client stopped before the sample at its stop")
	}
	learned, _, _ := r.gate.learned(at)
	before := float64(s.Provider.TPM) * (1 - s.Outside.Share)
	if got := r.learned[1]; math.Abs(got*before-learned) > 1e-6*learned {
		t.Errorf("the sample at the stop reads %.4f of the capacity, want %.4f (%.0f of the %.0f the outside client left)", got, learned/before, learned, before)
	}
	for r.step() {
	}
	if r.stopped.IsZero() || len(r.learned) != 5 {
		t.Fatalf("stopped %v, %d samples: want the stop and 5", r.stopped, len(r.learned))
	}
}

// No call writes more than the output limit: one that would could never fit
// it, and no gate could save it (its 429s and its loss would say nothing of
// the gate). Without an output limit the outputs are drawn as before.
func TestOutputsCappedAtTheOutputLimit(t *testing.T) {
	s := small()
	s.Output = SizeSpec{Median: 400, P99: 3000}
	s.Provider.OTPM = 1000
	r, err := newRunner(s, ModeNaive)
	if err != nil {
		t.Fatal(err)
	}
	s.Provider.OTPM = 0
	free, err := newRunner(s, ModeNaive)
	if err != nil {
		t.Fatal(err)
	}
	capped := 0
	for range 2000 {
		j, f := r.sessions[0].trace.next(), free.sessions[0].trace.next()
		if j.output > 1000 || j.output != min(f.output, 1000) {
			t.Fatalf("an output of %d under an output limit of 1000 (%d drawn without it)", j.output, f.output)
		}
		if f.output > 1000 {
			capped++
		}
	}
	if capped == 0 {
		t.Fatal("no output above the limit was drawn: the test says nothing")
	}
}
