package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/testenv"
)

func loadScenario(t *testing.T, name string) Scenario {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "sim", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runGate runs the gate mode alone and returns its metrics.
func runGate(t *testing.T, s Scenario) Metrics {
	t.Helper()
	r, err := RunModes(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	return r.Modes[ModeGate]
}

func run(t *testing.T, s Scenario) Report {
	t.Helper()
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Modes {
		x := r.Modes[m]
		t.Logf("%-6s utilization %.3f  429s %d  lost %d  completed %d  wait p50 %dms p99 %dms  fairness %.3f", m, x.Utilization, x.RateLimited, x.Lost, x.Completed, x.WaitP50Ms, x.WaitP99Ms, x.Fairness)
	}
	return r
}

// The gate on the shipped scenarios, against the true limit. The simulation is
// seeded and runs on a virtual clock: these are exact, repeatable outcomes, not
// timings. The floors are today's figures, a guard against regressions; the
// targets they fall short of (≥ 93% of the true TPM) and the whole matrix are in
// docs/benchmarks.md.
func TestStartAtTruth(t *testing.T) {
	testenv.LongSimulation(t)
	r := run(t, loadScenario(t, "start-at-truth.yaml"))
	g, n := r.Modes[ModeGate], r.Modes[ModeNaive]
	if g.Utilization < 0.88 {
		t.Errorf("gate utilization %.3f of the true limit, want ≥ 0.88", g.Utilization)
	}
	if g.Lost != 0 {
		t.Errorf("gate lost %d: want nothing lost", g.Lost)
	}
	if g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 3 || *g.RateLimitedPerHourAfterConvergence > 1 {
		t.Errorf("converged after %v windows, %v 429s an hour since: want ≤ 3 and ≤ 1", g.ConvergedAfterWindows, g.RateLimitedPerHourAfterConvergence)
	}
	if n.RateLimited < 100*max(1, g.RateLimited) || n.Lost == 0 {
		t.Errorf("naive baseline: %d 429s, %d lost — the comparison lost its point", n.RateLimited, n.Lost)
	}
	if g.Fairness < 0.95 {
		t.Errorf("fairness %.3f", g.Fairness)
	}
}

func TestStartTwiceTheTruth(t *testing.T) {
	testenv.LongSimulation(t)
	r := run(t, loadScenario(t, "start-2x.yaml"))
	g := r.Modes[ModeGate]
	if g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 3 {
		t.Fatalf("converged after %s windows, want ≤ 3", windows(g.ConvergedAfterWindows))
	}
	if g.RateLimited > 3 || g.Lost != 0 {
		t.Fatalf("%d 429s, %d lost: want ≤ 3 and none", g.RateLimited, g.Lost)
	}
	if g.Utilization < 0.88 {
		t.Errorf("gate utilization %.3f of the true limit, want ≥ 0.88", g.Utilization)
	}
}

// Starting at half the truth the quota climbs in a slow start (each step 5%
// larger than the last) and is within 5% of the truth by window 10.
func TestStartHalfTheTruth(t *testing.T) {
	testenv.LongSimulation(t)
	r := run(t, loadScenario(t, "start-half.yaml"))
	g := r.Modes[ModeGate]
	if g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 10 {
		t.Fatalf("converged after %s windows, want ≤ 10", windows(g.ConvergedAfterWindows))
	}
	if g.RateLimited > 3 || g.Lost != 0 {
		t.Fatalf("%d 429s, %d lost", g.RateLimited, g.Lost)
	}
}

func TestDeterministic(t *testing.T) {
	s := DefaultScenario()
	s.Duration = Duration(20 * 60 * 1e9)
	a, _ := Run(s)
	b, _ := Run(s)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of one seed differ")
	}
	s.Seed = 2
	c, _ := Run(s)
	if reflect.DeepEqual(a.Modes, c.Modes) {
		t.Fatal("another seed gave the same result")
	}
}

func TestParseScenario(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"UnknownKey", "sesions: 3\n", "field sesions not found"},
		{"BadDuration", "duration: 2 hours\n", "is not a duration"},
		{"ZeroSessions", "sessions: 0\n", "scenario.sessions"},
		{"TooManySessions", "sessions: 100000000\n", "scenario.sessions: must be in [1, 100000]"},
		{"FractionalCount", "sessions: 3.99\n", "scenario: line 1: scenario.sessions: must be a whole number (got 3.99)"},
		{"FractionalNestedCount", "demand: 1.5\nprovider:\n  tpm: 1500.7\n", "line 3: scenario.provider.tpm: must be a whole number"},
		{"Empty", "# nothing\n", "the file holds no keys"},
		{"SafetyFactor", "gate: {tpm: 1, rpm: 1, safetyFactor: 1.5}\n", "scenario.gate.safetyFactor"},
		{"Pace", "gate: {pace: 11}\n", "scenario.gate.pace:"},
		{"PaceBurst", "gate: {paceBurst: -0.1}\n", "scenario.gate.paceBurst:"},
		{"MarginSigmas", "gate: {marginSigmas: 12}\n", "scenario.gate.marginSigmas:"},
		{"CountsAt", "gate: {countsAt: later}\n", "scenario.gate.countsAt:"},
		{"Decides", "gate: {decides: everything}\n", "scenario.gate.decides:"},
		{"Windows", "gate: {windows: tumbling}\n", "scenario.gate.windows:"},
		{"Sizes", "promptTokens: {median: 10, p99: 5}\n", "scenario.promptTokens"},
		{"LimitModel", "provider: {model: leaky}\n", "choices are [sliding-arrival"},
		{"Decides", "provider: {decides: later}\n", "scenario.provider.decides:"},
		{"HeadersAt", "provider: {headers: true, headersAt: later}\n", "scenario.provider.headersAt: \"later\" is invalid; choices are [completion arrival]"},
		{"OutsidePattern", "outside: {share: 0.1, pattern: waves}\n", "scenario.outside.pattern"},
		{"OutsideShare", "outside: {share: 1}\n", "scenario.outside.share"},
		{"OutsideUntil", "outside: {share: 0.1, until: -1m}\n", "scenario.outside.until"},
		{"OutsideUntilNoShare", "outside: {until: 10m}\n", "scenario.outside.until"},
		// an outside period that truncated to 0 divided by zero (warm) or hung
		{"OutsideCallsTooFast", "provider: {tpm: 1000000000000}\noutside: {share: 0.5, callTokens: 1}\n",
			"scenario.outside.callTokens: the outside client would send 8.33e+06 calls a millisecond (share × tpm ÷ callTokens a window), more than one: callTokens must be at least 8333334 (got 1)"},
		{"OutsideCallsTooFastWarm", "provider: {tpm: 1000000000000}\noutside: {share: 0.5, callTokens: 1, warm: true}\n", "scenario.outside.callTokens: the outside client would send 8.33e+06 calls a millisecond"},
		{"OutsideShareTooSmall", "outside: {share: 1e-20}\n", "scenario.outside.share: 1e-20 is too small"},
		{"OutsideBurstsTooFast", "outside: {share: 0.1, pattern: bursts, every: 1us}\n", "scenario.outside.every: the burst period (unset: the window) must be at least 1ms (got 1µs)"},
		{"OutsideBurstsOfNothing", "outside: {share: 0.1, pattern: bursts, every: 1ms}\n", "scenario.outside.every: each burst must spend at least 1 token (share × tpm × every ÷ window rounds to 0 with every 1ms)"},
		{"OutsideCallsOverTheRPM", "outside: {share: 0.1, callTokens: 10}\n", "scenario.outside.callTokens: the outside client would send 2000 calls a window (share × tpm ÷ callTokens), leaving the sessions none of provider.rpm (600) (got 10)"},
		{"OutsideBurstsOverTheRPM", "outside: {share: 0.1, pattern: bursts, callTokens: 33}\n", "scenario.outside.callTokens: the outside client would send 606.1 calls a window"},
		{"OutsideBurstsOfTooManyCalls", "provider: {tpm: 1000000000000}\noutside: {share: 0.5, pattern: bursts, callTokens: 1000}\n",
			"scenario.outside.callTokens: each burst would send 500000000 calls in 1m0s, more than one a millisecond: callTokens must be at least 8333334 (got 1000)"},
		{"GateStart", "gate: {start: -1}\n", "scenario.gate"},
		// 0 is how a Scenario holds an unset start (1.0): written, it is refused
		{"GateStartZero", "gate: {start: 0}\n", "scenario: line 1: scenario.gate.start: must be positive (got 0); leave it out to start at the truth (1.0)"},
		{"GateStartZeroWithLimits", "gate:\n  tpm: 1000\n  start: 0.0\n", "scenario: line 3: scenario.gate.start: must be positive (got 0.0)"},
		{"GateStartNull", "gate: {start: ~}\n", "scenario.gate.start: must be positive (got ~)"},
		{"LimitModelEmpty", "provider: {model: \"\"}\n", "scenario.provider.model: must be set; choices are [sliding-arrival"},
		{"MaxTokens", "maxTokensShare: 0.5\nmaxTokens: 0\n", "scenario.maxTokens"},
		{"OTPMNegative", "provider: {otpm: -1}\n", "scenario: provider.otpm and gate.otpm must not be negative"},
		{"GateOTPMNegative", "gate: {otpm: -1}\n", "scenario: provider.otpm and gate.otpm must not be negative"},
		{"MaxTokensOverOTPM", "provider: {otpm: 1000}\n", "scenario.maxTokens: 4096 is more than the output limit leaves the sessions (1000: provider.otpm less outside.outputShare): a call sending it could never fit"},
		{"MaxTokensOverWhatTheOthersLeave", "provider: {otpm: 4500}\noutside: {share: 0.1, outputShare: 0.1}\n", "scenario.maxTokens: 4096 is more than the output limit leaves the sessions (4050"},
		{"OutsideOutputTooFine", "provider: {otpm: 100000}\noutside: {share: 0.1, callTokens: 100, outputShare: 0.01}\n", "scenario.outside.outputShare: each outside call would write 5 output tokens"},
		{"OutsideOutputOverItsTokens", "provider: {otpm: 100000}\noutside: {share: 0.1, outputShare: 0.5}\n", "scenario.outside.outputShare: the client would write more output"},
		{"OutsideOutputNoLimit", "outside: {share: 0.1, outputShare: 0.1}\n", "scenario.outside.outputShare: needs an outside client"},
		{"Overrides", "sessions: 4\ndemand: 2\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseScenario([]byte(tc.yaml))
			if tc.err == "" {
				if err != nil || s.Sessions != 4 || s.Demand != 2 || s.Provider.TPM != DefaultScenario().Provider.TPM {
					t.Fatalf("%+v %v", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
}

// The admission's settings in a scenario reach the ledger of both the oracle and
// the gate: set to what the gate defaults to, nothing moves; pacing off lets the
// oracle serve more (the pacer holds grants back the window would allow).
func TestScenarioAdmissionSettings(t *testing.T) {
	testenv.LongSimulation(t)
	s := DefaultScenario()
	s.Duration = Duration(30 * time.Minute)
	base, err := RunModes(s, ModeOracle, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	def := gate.DefaultConfig()
	same := s
	same.Gate.Pace, same.Gate.PaceBurst, same.Gate.MarginSigmas = &def.Pace, &def.PaceBurst, &def.MarginSigmas
	if rep, err := RunModes(same, ModeOracle, ModeGate); err != nil || !reflect.DeepEqual(rep.Modes, base.Modes) {
		t.Fatalf("the defaults set explicitly changed the run (%v)", err)
	}
	off := 0.0
	unpaced := s
	unpaced.Gate.Pace = &off
	rep, err := RunModes(unpaced, ModeOracle, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	if o, b := rep.Modes[ModeOracle].Utilization, base.Modes[ModeOracle].Utilization; o <= b {
		t.Fatalf("oracle unpaced %.4f, paced %.4f: want more without the pacer", o, b)
	}
	if reflect.DeepEqual(rep.Modes[ModeGate], base.Modes[ModeGate]) {
		t.Fatal("the gate ran the same unpaced: the setting did not reach it")
	}
	noMargin := s
	noMargin.Gate.MarginSigmas = &off
	if rep, err = RunModes(noMargin, ModeOracle); err != nil || rep.Modes[ModeOracle].RateLimited <= base.Modes[ModeOracle].RateLimited {
		t.Fatalf("oracle without a margin: %d 429s, with one %d (%v): want more", rep.Modes[ModeOracle].RateLimited, base.Modes[ModeOracle].RateLimited, err)
	}
}

// A setting of 0 is a setting (pacing off, no margin), not the default, and the
// report's echo of the scenario says so; an unset key stays out of it.
func TestScenarioAdmissionZeroIsSet(t *testing.T) {
	s, err := ParseScenario([]byte("gate: {pace: 0, marginSigmas: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Gate.Pace == nil || *s.Gate.Pace != 0 || s.Gate.MarginSigmas == nil || *s.Gate.MarginSigmas != 0 || s.Gate.PaceBurst != nil {
		t.Fatalf("parsed %+v", s.Gate)
	}
	echo, err := json.Marshal(s.Gate)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(echo); !strings.Contains(got, `"pace":0`) || !strings.Contains(got, `"marginSigmas":0`) || strings.Contains(got, "paceBurst") {
		t.Fatalf("echo %s", got)
	}
}

// Every shipped example parses and runs.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "sim", "*.yaml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("%d examples, %v", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := loadScenario(t, filepath.Base(f))
			s.Duration = Duration(3 * time.Minute)
			if _, err := Run(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A token bucket refuses only once its reserve is spent, at a sliding reading
// far above its rate; the gate started at twice the rate learns the rate from
// what it spent since the reserve was full, in one 429, instead of stepping
// down one reading at a time (seven 429s and 17 windows without it).
func TestTokenBucketFromTwiceTheRate(t *testing.T) {
	testenv.LongSimulation(t)
	r := run(t, loadScenario(t, "token-bucket-2x.yaml"))
	g := r.Modes[ModeGate]
	if g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 3 {
		t.Errorf("converged after %s windows, want ≤ 3", windows(g.ConvergedAfterWindows))
	}
	if g.RateLimited > 3 || g.Lost != 0 {
		t.Errorf("%d 429s, %d lost: want ≤ 3 and none", g.RateLimited, g.Lost)
	}
	if g.Utilization < 0.9 {
		t.Errorf("gate utilization %.3f of the bucket's rate, want ≥ 0.9", g.Utilization)
	}
}

// Fixed windows with another client on the key, the gate started at twice the
// limit: the second 429 refutes both views of a sliding window less than two
// windows in. Read as a drained reserve's rate, that little spend held the gate
// at 0.66–0.79 of the capacity left to it for the hour (seeds 2, 3, 5, 6; mean
// 0.806 of what remains over seeds 1–8). The rate now waits for two windows of
// spend after the first 429: mean 0.878, and the one run left below 0.80
// (seed 6) is a view switch, not the rate.
func TestShortSpendIsNoRate(t *testing.T) {
	testenv.LongSimulation(t)
	base := loadScenario(t, "fixed-window-2x-outside.yaml")
	mean, low := 0.0, 0
	for seed := uint64(1); seed <= 8; seed++ {
		s := base
		s.Seed = seed
		g := run(t, s).Modes[ModeGate]
		t.Logf("seed %d: %.3f of what remains, %d 429s, lowest trigger %.3f", seed, g.RemainingUtilization, g.RateLimited, g.LowestTrigger)
		mean += g.RemainingUtilization / 8
		if g.RemainingUtilization < 0.8 {
			low++
		}
		if g.RateLimited > 6 || g.Lost != 0 {
			t.Errorf("seed %d: %d 429s, %d lost; want ≤ 6 and none", seed, g.RateLimited, g.Lost)
		}
	}
	if mean < 0.85 || low > 1 {
		t.Errorf("mean %.3f of the capacity left, %d runs below 0.80; want ≥ 0.85 and at most one", mean, low)
	}
}

// Started at the bucket's rate, the gate's probes pass on the lent reserve and
// its trigger comes to bind; the 429 that drains the reserve comes at a level
// the gate had held, and it reads the rate there. Before, a window in which the
// trigger held calls back counted as a probe, so the rate was never read once a
// trigger bound: over seeds 1–8, 41 429s, two runs that never converged and four
// that took 26–54 windows. Now 25 429s, every run within 15 windows.
//
// Seeds 9–24 must converge within the hour: runs that never did came from two
// readings of the clean record where it describes the lent reserve — a 429 at
// the trigger the previous one set, lifted back to the clean record each time
// (seeds 3 and 12), and a rate read from the spend replaced by it (seed 24).
func TestTokenBucketAtTheRate(t *testing.T) {
	testenv.LongSimulation(t)
	base := loadScenario(t, "token-bucket-1x.yaml")
	total := 0
	for seed := uint64(1); seed <= 24; seed++ {
		s := base
		s.Seed = seed
		r, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		g := r.Modes[ModeGate]
		t.Logf("seed %d: %d 429s, converged after %s windows, utilization %.3f", seed, g.RateLimited, windows(g.ConvergedAfterWindows), g.Utilization)
		switch {
		case g.ConvergedAfterWindows == nil:
			t.Errorf("seed %d: never converged", seed)
		case seed <= 8 && *g.ConvergedAfterWindows > 20:
			t.Errorf("seed %d: converged after %d windows, want ≤ 20", seed, *g.ConvergedAfterWindows)
		}
		if g.Lost != 0 {
			t.Errorf("seed %d: %d calls lost", seed, g.Lost)
		}
		if seed <= 8 {
			total += g.RateLimited
		}
	}
	if total > 34 {
		t.Errorf("%d 429s over eight seeds, want ≤ 34", total)
	}
}

// A provider that counts a call when it completes, met first in the arrival
// view: its 429s read low there, and before the view switched (three votes) a
// trigger read at 0.77 of the limit pulled the clean record down with it, so it
// never relaxed: 0.692 of the limit for the hour. The clean record now stays
// while the votes lean to completion (0.826).
func TestCompletionTriggerRelaxesWhileTheViewIsInDoubt(t *testing.T) {
	testenv.LongSimulation(t)
	s := DefaultScenario()
	s.Seed, s.Sessions, s.Demand = 2, 31, 1.6
	s.Provider.Model = LimitSlidingCompletion
	s.Duration = Duration(time.Hour)
	r := run(t, s)
	if g := r.Modes[ModeGate]; g.Utilization < 0.78 || g.Lost != 0 {
		t.Errorf("gate utilization %.3f of the true limit, %d lost: want ≥ 0.78 and none", g.Utilization, g.Lost)
	}
}

// windows prints a convergence window, or "never".
func windows(w *int) string {
	if w == nil {
		return "never"
	}
	return strconv.Itoa(*w)
}

// A 429 in the window where the quota converged counts only when the quota was
// in the band already: the one that brought it there ended the discovery.
func TestRateLimitedSinceConvergence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := time.Minute
	from := t0.Add(8 * w)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	times := []time.Time{
		at(7*w + 30*time.Second), // before the window: never
		at(8*w + 51*time.Second), // in it, the quota still out of the band: the converging 429
		at(8*w + 55*time.Second), // in it, the quota in the band: counts
		at(9 * w),                // the next window on: counts
		at(30 * w),
	}
	settled := []bool{false, false, true, false, false}
	if n := rateLimitedSince(times, settled, from, w); n != 3 {
		t.Fatalf("counted %d 429s after convergence, want 3", n)
	}
	if n := rateLimitedSince(times, []bool{true, true, true, true, true}, from, w); n != 4 {
		t.Fatalf("all settled: counted %d, want 4 (the one before the window never counts)", n)
	}
}

// A warm outside client was already spending before the run: the provider's
// window starts with its last window of calls, which are not counted as served.
func TestOutsideWarm(t *testing.T) {
	for _, warm := range []bool{false, true} {
		s := DefaultScenario()
		s.Outside.Share, s.Outside.Warm = 0.1, warm
		r, err := newRunner(s, ModeGate)
		if err != nil {
			t.Fatal(err)
		}
		left, _ := r.provider.lim.remaining(r.start)
		held := int64(s.Provider.TPM) - left
		want := int64(0)
		if warm {
			want = int64(0.1 * float64(s.Provider.TPM)) // 20,000: ten 2,000-token calls
		}
		if held != want {
			t.Errorf("warm %v: the provider's window holds %d tokens at the start, want %d", warm, held, want)
		}
		if r.provider.served[fromOutside] != 0 {
			t.Errorf("warm %v: %d outside tokens counted as served before the run", warm, r.provider.served[fromOutside])
		}
	}
}

// The oracle is the gate told the truth, and how the provider counts is part of
// it: against a provider that counts a call when it completes it uses the
// completion view, which it could not learn (learning is off). In the arrival
// view it read 0.50–0.58 of the limit with dozens of 429s an hour, a reference
// the gate beat by 60–80%.
func TestOracleKnowsHowTheProviderCounts(t *testing.T) {
	testenv.LongSimulation(t)
	s := DefaultScenario()
	s.Duration = Duration(time.Hour)
	s.Provider.Model = LimitSlidingCompletion
	o := run(t, s).Modes[ModeOracle]
	if o.RateLimited > 1 || o.Utilization < 0.9 {
		t.Fatalf("oracle: %d 429s, utilization %.3f; want ≤ 1 and ≥ 0.9", o.RateLimited, o.Utilization)
	}
}

// provider.statesLimit: the 429s state the limit that refused, and the gate
// adopts it. From twice the truth, the first 429 tells the limit: the quota
// starts over at it and no probe goes past it (learning it instead, the gate
// ends with a trigger above the truth in this run).
func TestScenarioStatesLimit(t *testing.T) {
	s := DefaultScenario()
	s.Duration = Duration(30 * time.Minute)
	s.Provider.Model = LimitSlidingArrival
	s.Gate.Start = 2
	learning, err := RunModes(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	s.Provider.StatesLimit = true
	stated, err := RunModes(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	l, g := learning.Modes[ModeGate], stated.Modes[ModeGate]
	truth := float64(s.Provider.TPM)
	if g.FinalQuota != truth || g.FinalTrigger != truth || g.RateLimited > l.RateLimited || g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 1 {
		t.Fatalf("with the limit stated: final quota %.0f trigger %.0f (the truth %.0f), %d 429s (%d learning it), converged after %v windows; want the truth, no more 429s, within a window",
			g.FinalQuota, g.FinalTrigger, truth, g.RateLimited, l.RateLimited, g.ConvergedAfterWindows)
	}
	if l.FinalTrigger == truth {
		t.Fatalf("learning the limit, the trigger is exactly the truth %.0f: the scenario does not tell the two apart", truth)
	}
}

// gate.countsAt tells the gate how the provider counts, as a model's countsAt
// in the config does. At a provider that counts at completion, started at the
// truth, the gate told so never has to learn the view: over three seeds it
// takes fewer 429s than the gate that learns it and serves more (one 429 fewer
// is the view's cost: docs/benchmarks.md, "The gate's eleventh round"). One
// seed alone can tie: a learning run spared a late 429 by chance.
func TestScenarioCountsAt(t *testing.T) {
	testenv.LongSimulation(t)
	var learned, told struct {
		rateLimited int
		util        float64
	}
	for seed := uint64(1); seed <= 3; seed++ {
		s := DefaultScenario()
		s.Seed, s.Duration = seed, Duration(30*time.Minute)
		s.Provider.Model = LimitSlidingCompletion
		l := runGate(t, s)
		s.Gate.CountsAt = gate.CountsAtCompletion
		g := runGate(t, s)
		t.Logf("seed %d: told the view %d 429s, utilization %.3f; learning it %d, %.3f", seed, g.RateLimited, g.Utilization, l.RateLimited, l.Utilization)
		learned.rateLimited += l.RateLimited
		learned.util += l.Utilization
		told.rateLimited += g.RateLimited
		told.util += g.Utilization
	}
	if told.rateLimited >= learned.rateLimited || told.util <= learned.util {
		t.Fatalf("told the view: %d 429s, utilization %.3f; learning it: %d, %.3f (summed over seeds 1–3); want fewer 429s and more served",
			told.rateLimited, told.util, learned.rateLimited, learned.util)
	}
	s := DefaultScenario()
	s.Duration = Duration(30 * time.Minute)
	s.Provider.Model = LimitSlidingCompletion
	unset, err := RunModes(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	s.Gate.CountsAt = gate.CountsAtLearn
	if same, err := RunModes(s, ModeGate); err != nil || !reflect.DeepEqual(same.Modes, unset.Modes) {
		t.Fatalf("countsAt: learn ran differently from unset (%v)", err)
	}
}

// A provider that counts at completion decides on a call with the calls
// completed when it arrives; the gate hears of a completion a one-way trip
// later, so a call admitted at the budget's edge is refused when a large call
// completed unseen in between. With the round trip its 429s measured, the gate
// keeps room for what may complete in it (engine/gate/landing.go). The
// matrix's completion rows with latency at the truth, told the view, seeds
// 1–12: 25 429s without it, 19 with it. (Twelve hours of simulation: not under
// the race detector, which slows the simulator forty times.)
func TestCompletionKeepsRoomForUnseenCompletions(t *testing.T) {
	testenv.LongSimulation(t) // twelve simulated hours
	total := 0
	for seed := uint64(1); seed <= 12; seed++ {
		base := DefaultScenario()
		base.Seed, base.Duration = seed, Duration(time.Hour)
		base.Gate.CountsAt = gate.CountsAtCompletion
		scens, rows := matrixRuns(base)
		for i, r := range rows {
			if r.Model != LimitSlidingCompletion || !r.Latency || r.Start != 1 || r.Outside != 0 {
				continue
			}
			g := runGate(t, scens[i])
			t.Logf("seed %d: %d 429s, %.3f of the limit", seed, g.RateLimited, g.Utilization)
			total += g.RateLimited
		}
	}
	if total > 21 {
		t.Errorf("%d 429s over the twelve runs, want ≤ 21 (25 without the room)", total)
	}
}

// The same for requests: a workload bound by requests (30 sessions, demand
// 3×, calls of about 1,000 tokens answered in about 1.3 s, 5–10 ms each way),
// the provider counting calls when they complete, 20 a 10 s window, the gate
// told so and configured at the truth. Admitted at the edge of the request
// budget, a call is refused when one call in flight completed within the
// round trip the gate cannot see: without the requests kept free for them,
// 14, 15 and 20 429s in half an hour on these seeds, each cooling the model
// for a window; with them, 2, 6 and 2, for the same requests served (1.2 of
// the limit: calls in flight are not counted).
func TestCompletionKeepsRequestsForUnseenCompletions(t *testing.T) {
	testenv.LongSimulation(t)
	total := 0
	for _, seed := range []uint64{4, 8, 11} {
		s := DefaultScenario()
		s.Seed, s.Window, s.Duration = seed, Duration(10*time.Second), Duration(30*time.Minute)
		s.Sessions, s.Demand = 30, 3
		s.Provider = ProviderSpec{Model: LimitSlidingCompletion, TPM: 40_000, RPM: 20, RetryAfter: Duration(10 * time.Second), NamesLimit: true}
		s.Prompt, s.Output = SizeSpec{Median: 900, P99: 1100}, SizeSpec{Median: 130, P99: 290}
		s.Response = ResponseSpec{Base: Duration(time.Millisecond), PerOutputToken: Duration(10 * time.Millisecond)}
		s.MaxTokensShare, s.MaxTokens = 1, 400
		s.Network = NetworkSpec{Delay: Duration(5 * time.Millisecond), Jitter: Duration(5 * time.Millisecond)}
		s.Gate.CountsAt = gate.CountsAtCompletion
		g := runGate(t, s)
		t.Logf("seed %d: %d 429s, %.3f of the requests", seed, g.RateLimited, g.RequestUtilization)
		total += g.RateLimited
		if g.RequestUtilization < 1.1 {
			t.Errorf("seed %d: %.3f of the requests served, want ≥ 1.1", seed, g.RequestUtilization)
		}
	}
	if total > 15 {
		t.Errorf("%d 429s over three half hours, want ≤ 15 (49 without the requests kept free)", total)
	}
}

// A provider counting in fixed windows, the gate configured at the truth (the
// built-in scenario, seeds 1–4, an hour): told so, the gate fills each window
// and waits for the edge, and serves as much as the oracle (0.956–0.968 of the
// true limit over seeds 1–6, against 0.775–0.925 counting a sliding window,
// which never lets a minute straddling an edge hold more than one budget).
func TestScenarioFixedWindows(t *testing.T) {
	testenv.LongSimulation(t)
	seeds := []uint64{1, 2, 3, 4}
	if testenv.RaceEnabled {
		seeds = seeds[:1] // the race detector slows the simulator forty times
	}
	for _, seed := range seeds {
		s := DefaultScenario()
		s.Seed, s.Duration = seed, Duration(time.Hour)
		s.Provider.Model = LimitFixedWindow
		sl := runGate(t, s)
		s.Gate.Windows = gate.WindowsFixed
		g := runGate(t, s)
		t.Logf("seed %d: told %.3f of the limit, %d 429s; sliding %.3f, %d", seed, g.Utilization, g.RateLimited, sl.Utilization, sl.RateLimited)
		if g.Utilization < 0.95 || g.RateLimited > 2 || g.Lost != 0 || g.Utilization < sl.Utilization+0.03 {
			t.Errorf("seed %d: told fixed windows %.3f of the limit, %d 429s, %d lost; want ≥ 0.95, ≤ 2, none, and 3 points over sliding (%.3f)",
				seed, g.Utilization, g.RateLimited, g.Lost, sl.Utilization)
		}
	}
}

// A fixed-window provider that states the real wait in its 429s (until its
// window restarts: provider.computeRetryAfter) tells the gate its edges: not
// told, the gate counts fixed windows by the end of the hour (the 2× start,
// the other client on the key, seeds 1–4). The other providers' computed
// waits end wherever their calls leave or refill, and the gate keeps the
// sliding window there. (One seed under the race detector, which slows the
// simulator forty times.)
func TestFixedWindowsLearnedFromStatedWaits(t *testing.T) {
	testenv.LongSimulation(t)
	onlyFixedLearnsFixed(t, func(s *Scenario) {
		s.Provider.ComputeRetryAfter = true
		s.Gate.Start, s.Outside.Share = 2, 0.1
	}, nil)
}

// onlyFixedLearnsFixed runs the gate against every provider model, seeds 1–4
// (one under the race detector, which slows the simulator forty times), an
// hour each of the built-in scenario with set applied, and checks that only
// the fixed-window provider's gate ends counting fixed windows; check, when
// given, looks further at each run.
func onlyFixedLearnsFixed(t *testing.T, set func(*Scenario), check func(t *testing.T, model string, seed uint64, g Metrics)) {
	t.Helper()
	seeds := []uint64{1, 2, 3, 4}
	if testenv.RaceEnabled {
		seeds = seeds[:1]
	}
	for _, model := range LimitModels {
		for _, seed := range seeds {
			s := DefaultScenario()
			s.Seed, s.Duration = seed, Duration(time.Hour)
			s.Provider.Model = model
			set(&s)
			g := runGate(t, s)
			want := ""
			if model == LimitFixedWindow {
				want = gate.WindowsFixed
			}
			if g.FinalWindows != want {
				t.Errorf("%s, seed %d: windows %q at the end, want %q (%d 429s)", model, seed, g.FinalWindows, want, g.RateLimited)
			}
			if check != nil {
				check(t, model, seed, g)
			}
		}
	}
}

// A fixed-window provider that sends rate-limit headers states on every
// answer when its token count restarts: the next edge. Not told, the gate
// counts fixed windows from the answers, before any 429, and at the truth
// uses the limit as the gate told fixed windows does (0.95 or more, at most
// two 429s). The other providers' resets end wherever their calls leave or
// refill, and the gate keeps the sliding window there (seeds 1–4; one under
// the race detector).
func TestFixedWindowsLearnedFromStatedResets(t *testing.T) {
	testenv.LongSimulation(t)
	onlyFixedLearnsFixed(t, func(s *Scenario) { s.Provider.Headers = true }, func(t *testing.T, model string, seed uint64, g Metrics) {
		if model == LimitFixedWindow && (g.Utilization < 0.95 || g.RateLimited > 2 || g.Lost != 0) {
			t.Errorf("seed %d: fixed windows from the resets %.3f of the limit, %d 429s, %d lost; want ≥ 0.95, ≤ 2, none", seed, g.Utilization, g.RateLimited, g.Lost)
		}
	})
}

// Another client on the key, the gate started at twice the truth (the
// matrix's sliding-arrival row with latency): the first 429 reads the window
// before the other client's share has filled it; the second, right after the
// cooldown, reads 0.91–0.94 of what remains, while the other client's calls
// refused meanwhile land at the same edge. Refused twice within two windows,
// that trigger stood for the hour (0.84–0.86 of what remains, never within 5%
// of it); with the step a trigger lowered again gets, these runs converge in
// three or four windows.
func TestTriggerLoweredAgainRecovers(t *testing.T) {
	testenv.LongSimulation(t)
	for _, seed := range []uint64{1, 3, 6, 12} {
		base := DefaultScenario()
		base.Seed, base.Duration = seed, Duration(MatrixDuration)
		scens, rows := matrixRuns(base)
		i := slices.IndexFunc(rows, func(r MatrixRow) bool {
			return r.Model == LimitSlidingArrival && r.Latency && r.Start == 2 && r.Outside == 0.1
		})
		rep, err := RunModes(scens[i], ModeGate)
		if err != nil {
			t.Fatal(err)
		}
		g := rep.Modes[ModeGate]
		t.Logf("seed %d: %d 429s, converged after %s windows, %.3f of what remains", seed, g.RateLimited, windows(g.ConvergedAfterWindows), g.RemainingUtilization)
		if c := g.ConvergedAfterWindows; c == nil || *c > 5 || g.RemainingUtilization < 0.87 || g.RateLimited > 3 {
			t.Errorf("seed %d: converged after %s windows, %.3f of what remains, %d 429s; want ≤ 5, ≥ 0.87, ≤ 3", seed, windows(c), g.RemainingUtilization, g.RateLimited)
		}
	}
}

// gate.decides tells the gate what the provider decides a call on, as a
// model's decides in the config does. At a provider that decides on what it
// knows (input and max_tokens, the output counted once written), the gate told
// so counts the calls in flight as the provider does and keeps no margin for
// their outputs: at the truth it uses what the margin held back, at no more
// 429s. Told that alone, it counts an output from when it was written, a
// little longer than this sliding window (which books it in the call's entry)
// does; told that too (gate.countsAt: arrival), as long. The oracle is told
// provider.decides, and how the provider counts, either way.
func TestGateToldTheProviderDecidesOnWhatItKnows(t *testing.T) {
	testenv.LongSimulation(t)
	s := DefaultScenario()
	s.Duration = Duration(time.Hour)
	s.Provider.Decides = DecidesKnown
	untold := run(t, s)
	s.Gate.Decides = gate.DecidesKnown
	told := run(t, s)
	s.Gate.CountsAt = gate.CountsAtArrival
	toldAll := run(t, s)
	u, g, a, o := untold.Modes[ModeGate], told.Modes[ModeGate], toldAll.Modes[ModeGate], told.Modes[ModeOracle]
	if g.Utilization < 0.95 || g.RateLimited > 1 || g.Lost > 0 || g.Utilization < u.Utilization+0.03 {
		t.Fatalf("told: utilization %.3f, %d 429s, %d lost (untold: %.3f, %d 429s); want ≥ 0.95 and 3 points above untold, ≤ 1 429, none lost",
			g.Utilization, g.RateLimited, g.Lost, u.Utilization, u.RateLimited)
	}
	if a.Utilization < 0.97 || a.RateLimited > 1 || a.Lost > 0 {
		t.Fatalf("told it counts on arrival too: utilization %.3f, %d 429s, %d lost; want ≥ 0.97, ≤ 1 429, none lost", a.Utilization, a.RateLimited, a.Lost)
	}
	if o.Utilization < 0.97 || o.RateLimited > 0 {
		t.Fatalf("oracle: %.3f, %d 429s; want ≥ 0.97 and none", o.Utilization, o.RateLimited)
	}
}

// A fixed window counts an output in the window current when it is written,
// which may be the next one after its call's: the gate told the provider
// decides on what it knows counts the output from then, and even the oracle,
// which knows the limit, took 429s when it counted the output with its call.
func TestGateToldKnownCountsAnOutputFromWhenItWasWritten(t *testing.T) {
	testenv.LongSimulation(t)
	s := DefaultScenario()
	s.Duration = Duration(time.Hour)
	s.Provider.Model = LimitFixedWindow
	s.Provider.Decides = DecidesKnown
	s.Gate.Decides = gate.DecidesKnown
	rep := run(t, s)
	g, o := rep.Modes[ModeGate], rep.Modes[ModeOracle]
	if o.RateLimited > 0 || o.Utilization < 0.95 {
		t.Fatalf("oracle: %.3f, %d 429s; want ≥ 0.95 and none", o.Utilization, o.RateLimited)
	}
	if g.RateLimited > 2 || g.Lost > 0 || g.Utilization < 0.93 {
		t.Fatalf("gate: %.3f, %d 429s, %d lost; want ≥ 0.93, ≤ 2, none lost", g.Utilization, g.RateLimited, g.Lost)
	}
}

// A provider that states what is left of its limit on each answer says what it
// counted of the calls in flight: the gate not told what it decides a call on
// reads it from the headers. Deciding on what it knows, the gate takes the
// known count (0.926 of the limit over six seeds not told; learned 0.961, told 0.967);
// deciding on the whole cost (the simulator's default), it keeps the margin.
// Over the matrix with headers only the sliding window counted on arrival
// decides (docs/gate.md): the others keep the safe default.
func TestGateLearnsFromHeadersWhatTheProviderDecidesOn(t *testing.T) {
	testenv.LongSimulation(t)
	for _, seed := range []uint64{1, 2, 3} {
		s := DefaultScenario()
		s.Seed = seed
		s.Duration = Duration(time.Hour)
		s.Provider.Headers = true
		whole := run(t, s).Modes[ModeGate]
		s.Provider.Decides = DecidesKnown
		known := run(t, s).Modes[ModeGate]
		s.Gate.Decides = gate.DecidesKnown
		told := run(t, s).Modes[ModeGate]
		s.Gate.Decides = gate.DecidesWhole
		if said := run(t, s).Modes[ModeGate]; said.FinalDecides != gate.DecidesWhole {
			t.Errorf("seed %d: the user said %q, the gate took %q", seed, gate.DecidesWhole, said.FinalDecides)
		}
		if whole.FinalDecides != gate.DecidesWhole || whole.RateLimited > 1 || whole.Lost > 0 {
			t.Errorf("seed %d, a provider deciding on the whole cost: took it for %q, %d 429s, %d lost; want %q, ≤ 1, none",
				seed, whole.FinalDecides, whole.RateLimited, whole.Lost, gate.DecidesWhole)
		}
		if known.FinalDecides != gate.DecidesKnown || known.RateLimited > 1 || known.Lost > 0 || known.Utilization < told.Utilization-0.02 {
			t.Errorf("seed %d, a provider deciding on what it knows: took it for %q, %d 429s, %d lost, %.3f of the limit (told: %.3f); want %q, ≤ 1, none, within two points of told (a 429's cooldown is 1.7)",
				seed, known.FinalDecides, known.RateLimited, known.Lost, known.Utilization, told.Utilization, gate.DecidesKnown)
		}
		if known.Utilization < whole.Utilization+0.02 {
			t.Errorf("seed %d: learned known %.3f, whole %.3f; want 2 points gained", seed, known.Utilization, whole.Utilization)
		}
	}
}

// A provider may state what is left as of a call's arrival (OpenAI reserves a
// call's tokens when it creates the response and states the limits reflecting
// that), carried back with the answer a whole call later. Read against the
// window as the answer arrives, such figures missed the calls admitted and
// settled in between, and the fit swung: known, whole and back ten or eleven
// times in the hour, ending on whole for seeds 2 and 4 (0.937–0.943 of the
// limit). Read against the window as each call was sent, it decides once, as
// it does when the figures are stated at completion.
func TestDecidesReadFromHeadersStatedAtArrival(t *testing.T) {
	testenv.LongSimulation(t)
	for _, seed := range []uint64{1, 2, 3, 4} {
		s := DefaultScenario()
		s.Seed, s.Duration = seed, Duration(time.Hour)
		s.Provider.Headers, s.Provider.Decides = true, DecidesKnown
		atCompletion := run(t, s).Modes[ModeGate]
		s.Provider.HeadersAt = HeadersAtArrival
		var trace strings.Builder
		s.Trace = &trace
		atArrival := run(t, s).Modes[ModeGate]
		switches := 0
		for _, line := range strings.Split(trace.String(), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[1] == "learn" && f[2] == "decides" {
				switches++
			}
		}
		if atArrival.FinalDecides != gate.DecidesKnown || switches != 1 || atArrival.Utilization < atCompletion.Utilization-0.01 {
			t.Errorf("seed %d, stated at arrival: took %q after %d switches, %.3f of the limit (stated at completion: %.3f); want %q after one, within a point",
				seed, atArrival.FinalDecides, switches, atArrival.Utilization, atCompletion.Utilization, gate.DecidesKnown)
		}
	}
}

// TestGateTakesBackWhatAnotherClientStoppedSpending: another client spends a
// tenth of the key for the first half hour, and its spend sets the gate's
// trigger below the limit the headers state. After it stops, the gate reads
// from the remaining tokens that nobody else spends and lifts the trigger:
// kept there, it served 0.780–0.799 of the limit for the next 90 minutes.
// AfterOutside is what the sessions were served from the stop on.
//
// At a provider that counts at completion the 429 that sets the trigger is
// often the one that switches the gate to that view, and the first window of
// readings after it says whose the trigger is (the readings before it were
// taken on arrival): kept, seeds 2 and 3 read 0.871 and 0.832 there.
func TestGateTakesBackWhatAnotherClientStoppedSpending(t *testing.T) {
	testenv.LongSimulation(t)
	for _, tc := range []struct {
		model   string
		max429s int
	}{{LimitSlidingArrival, 4}, {LimitSlidingCompletion, 6}} {
		for _, seed := range []uint64{1, 2, 3} {
			s := DefaultScenario()
			s.Seed = seed
			s.Duration = Duration(2 * time.Hour)
			s.Provider.Model, s.Provider.Headers = tc.model, true
			s.Outside.Share, s.Outside.Until = 0.1, Duration(30*time.Minute)
			r, err := RunModes(s, ModeGate)
			if err != nil {
				t.Fatal(err)
			}
			g := r.Modes[ModeGate]
			t.Logf("%s seed %d: %.3f of the limit after the other client stopped, %d 429s, trigger %.0f", tc.model, seed, g.AfterOutside, g.RateLimited, g.FinalTrigger)
			if g.AfterOutside < 0.87 || g.RateLimited > tc.max429s || g.Lost > 0 {
				t.Errorf("%s seed %d: %.3f of the limit after the other client stopped, %d 429s, %d lost; want ≥ 0.87, ≤ %d, none",
					tc.model, seed, g.AfterOutside, g.RateLimited, g.Lost, tc.max429s)
			}
			// The last window's learned level, against the whole limit.
			if w := g.LearnedPerWindow; len(w) < 40 || w[len(w)-1] < 0.95 {
				t.Errorf("%s seed %d: learned %v of the whole limit at the window ends, want ≥ 0.95 at the last", tc.model, seed, w)
			}
		}
	}
}

// TestGateTakesTheArrivalViewBackFromTheHeaders: a fifth of the key spent
// elsewhere, seed 2 — the 429s vote the completion view in at a provider that
// counts on arrival (the other client's calls refute the arrival view as the
// gate's own would), and a trigger read there holds the gate to half the
// limit: 0.648 of what the other client leaves over the hour. The remaining
// tokens read as a sliding window that counts the calls in flight, and the
// arrival view comes back (decides.go): 0.828. Seeds 1 and 3–12 never take the
// completion view and are unchanged.
func TestGateTakesTheArrivalViewBackFromTheHeaders(t *testing.T) {
	s := DefaultScenario()
	s.Seed = 2
	s.Duration = Duration(time.Hour)
	s.Provider.Headers = true
	s.Outside.Share = 0.2
	r, err := RunModes(s, ModeGate)
	if err != nil {
		t.Fatal(err)
	}
	if g := r.Modes[ModeGate]; g.RemainingUtilization < 0.8 || g.RateLimited > 6 || g.Lost > 0 {
		t.Errorf("%.3f of what the other client left, %d 429s, %d lost; want ≥ 0.8, ≤ 6, none", g.RemainingUtilization, g.RateLimited, g.Lost)
	}
}

// From half the limit the slow start's later steps come a sixth of a window
// apart once its first two held (engine/gate/learner.go, fastProbeAfter): a
// provider that counts at completion, whose first 429s come in the arrival
// view, is found within ten windows in every seed (at one step a window, seeds
// 2 and 7 never settled within ±5% and seed 6 took 13 windows). Seed 8 takes a
// 429 at minute 43 whose reading lacks a call that completed unseen: read as it
// is, the trigger held the gate at 0.947 of the limit to the end (see
// engine/gate/landing.go, unseenLandingLocked).
func TestSlowStartFromHalfTheLimit(t *testing.T) {
	testenv.LongSimulation(t)
	for seed := uint64(1); seed <= 8; seed++ {
		s := DefaultScenario()
		s.Seed, s.Duration = seed, Duration(time.Hour)
		s.Provider.Model = LimitSlidingCompletion
		s.Gate.Start = 0.5
		g := run(t, s).Modes[ModeGate]
		t.Logf("seed %d: converged after %s windows, %d 429s, utilization %.3f", seed, windows(g.ConvergedAfterWindows), g.RateLimited, g.Utilization)
		if c := g.ConvergedAfterWindows; c == nil || *c > 10 {
			t.Errorf("seed %d: converged after %s windows, want ≤ 10", seed, windows(c))
		}
	}
}

// Another client on the key, a provider that states its limit and what is
// left (the matrix's sliding-arrival rows at the truth, with headers): the
// remaining tokens say what the other client spends, and the budget keeps
// under the room it leaves before the 429s teach it. Seeds 1–4 with and
// without latency took 22 429s before; 17 with the room at the others' mean,
// 7 with it half a deviation under the mean.
func TestOthersRoomSparesThe429s(t *testing.T) {
	testenv.LongSimulation(t)
	total, runs := 0, 0
	for _, seed := range []uint64{1, 2, 3, 4} {
		base := DefaultScenario()
		base.Seed, base.Duration = seed, Duration(MatrixDuration)
		base.Provider.Headers = true
		scens, rows := matrixRuns(base)
		for i, r := range rows {
			if r.Model != LimitSlidingArrival || r.Start != 1 || r.Outside != 0.1 {
				continue
			}
			rep, err := RunModes(scens[i], ModeGate)
			if err != nil {
				t.Fatal(err)
			}
			g := rep.Modes[ModeGate]
			t.Logf("seed %d, latency %v: %d 429s, %.3f of what remains", seed, r.Latency, g.RateLimited, g.RemainingUtilization)
			total, runs = total+g.RateLimited, runs+1
			if g.RemainingUtilization < 0.87 || g.Lost != 0 {
				t.Errorf("seed %d, latency %v: %.3f of what remains, %d lost; want ≥ 0.87, none", seed, r.Latency, g.RemainingUtilization, g.Lost)
			}
		}
	}
	if runs != 8 {
		t.Fatalf("%d runs matched the rows, want 8 (with and without latency, seeds 1–4)", runs)
	}
	if total > 10 {
		t.Errorf("%d 429s over the eight runs, want ≤ 10", total)
	}
}

// A token bucket that states what is left on every answer, the gate started at
// its stated rate: no 429 comes, so no rate is read, and in the arrival view
// the gate held back a twentieth of the limit for the calls in flight (0.924–
// 0.929 over seeds 1–6). The remaining tokens, far above what either view
// holds, say the provider refills: the gate counts at completion and uses
// 0.951–0.969, still without a 429.
func TestBucketHeadersMoveTheViewToCompletion(t *testing.T) {
	testenv.LongSimulation(t)
	for _, seed := range []uint64{1, 3} {
		s := DefaultScenario()
		s.Seed = seed
		s.Provider.Model, s.Provider.Headers = LimitTokenBucket, true
		s.Duration = Duration(time.Hour)
		r := run(t, s)
		if g := r.Modes[ModeGate]; g.Utilization < 0.945 || g.RateLimited != 0 || g.Lost != 0 {
			t.Errorf("seed %d: gate utilization %.3f of the true limit, %d 429s, %d lost: want ≥ 0.945 and none", seed, g.Utilization, g.RateLimited, g.Lost)
		}
	}
}

// A provider that counts a call when it completes and states what is left as
// of the call's arrival (a streamed answer's headers come at its first byte):
// in the first window its stated count is the completion view at the send,
// while the arrival view holds the calls in flight. The gate counts at
// completion from then on, before the cohort of the first window's end meets
// the arrival view's reading: over seeds 1–6, 0.883–0.921 of the limit with
// 2–4 429s before; 0.952–0.970 with 0–2 now. Stating as it answers, this call
// counted, it states the completion view to the token, answer by answer:
// 0.883–0.921 with 2–4 429s before, 0.952–0.970 with 0–2 now.
func TestFirstWindowHeadersTakeTheCompletionView(t *testing.T) {
	testenv.LongSimulation(t)
	for _, at := range []string{HeadersAtArrival, HeadersAtCompletion} {
		for _, seed := range []uint64{1, 2} {
			r := run(t, headersHour(seed, LimitSlidingCompletion, at))
			if g := r.Modes[ModeGate]; g.Utilization < 0.94 || g.RateLimited > 1 || g.Lost != 0 {
				t.Errorf("headers at %s, seed %d: gate utilization %.3f of the true limit, %d 429s, %d lost: want ≥ 0.94, ≤ 1, none", at, seed, g.Utilization, g.RateLimited, g.Lost)
			}
		}
	}
}

// A token bucket that states its reserve, another client spending a tenth of
// it: the gate reads that client's spend from how the reserve falls (engine/
// gate/refillspend.go) and keeps its budget under what the client leaves.
// Read as a window's count, the reserve said nothing of it: the gate spent
// the whole stated rate on top, the reserve ran dry some ten windows on, and
// the 429 there (one to five an hour) set a trigger below what was left.
func TestBucketReadsTheOthersFromItsReserve(t *testing.T) {
	testenv.LongSimulation(t)
	for _, at := range []string{HeadersAtCompletion, HeadersAtArrival} {
		for _, seed := range []uint64{1, 4} {
			s := headersHour(seed, LimitTokenBucket, at)
			s.Outside.Share = 0.1
			g := run(t, s).Modes[ModeGate]
			if g.RateLimited != 0 || g.ConvergedAfterWindows == nil || *g.ConvergedAfterWindows > 10 || g.RemainingUtilization < 0.93 || g.Lost != 0 {
				t.Errorf("headers at %s, seed %d: %d 429s, converged after %s windows, %.3f of what the other client left, %d lost: want none, ≤ 10, ≥ 0.93, none",
					at, seed, g.RateLimited, windows(g.ConvergedAfterWindows), g.RemainingUtilization, g.Lost)
			}
		}
	}
}

// headersHour is the default scenario for an hour against the limit model,
// its rate-limit headers stated at at.
func headersHour(seed uint64, model, at string) Scenario {
	s := DefaultScenario()
	s.Seed, s.Duration = seed, Duration(time.Hour)
	s.Provider.Model, s.Provider.Headers, s.Provider.HeadersAt = model, true, at
	return s
}

// A warm outside client's window holds every tick of the window before the
// start, at the times its ticks would have sent them (start + period/2 −
// k·period), also when the window is not a whole number of periods: the
// oldest tick still inside it was left out whenever window ÷ period had a
// fraction of a half or more.
func TestOutsideWarmFillsTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		share      float64
		pattern    string
		every      time.Duration
		callTokens int
		want       int64
	}{
		// one burst of 0.3 × 200k × 1.5 = 90,000 tokens, at −45 s
		{"bursts every 90s", 0.3, OutsideBursts, 90 * time.Second, 2000, 90_000},
		// one burst of 100,000 tokens, at −50 s
		{"bursts every 100s", 0.3, OutsideBursts, 100 * time.Second, 2000, 100_000},
		// 2.6 calls a window, one every 23.08 s: at −11.5, −34.6 and −57.7 s
		{"smooth, 2.6 calls a window", 0.13, OutsideSmooth, 0, 10_000, 30_000},
		// 10 calls a window, one every 6 s: at −3, −9, … −57 s
		{"smooth, 10 calls a window", 0.1, OutsideSmooth, 0, 2000, 20_000},
		// two bursts of 30,000 tokens, at −15 and −45 s
		{"bursts every 30s", 0.3, OutsideBursts, 30 * time.Second, 2000, 60_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultScenario()
			s.Outside = OutsideSpec{Share: tc.share, Pattern: tc.pattern, Every: Duration(tc.every), CallTokens: tc.callTokens, Warm: true}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			r, err := newRunner(s, ModeGate)
			if err != nil {
				t.Fatal(err)
			}
			left, _ := r.provider.lim.remaining(r.start)
			if held := int64(s.Provider.TPM) - left; held != tc.want {
				t.Errorf("the provider's window holds %d outside tokens at the start, want %d", held, tc.want)
			}
		})
	}
}

// With an output limit (Anthropic's OTPM) binding far under the token limit
// and every call sending max_tokens: naive retries meet it tens of thousands
// of times an hour; the oracle, told it, holds to it without a 429; the gate
// not told learns it from the 429s that name it — one — and serves over 90%
// of the output the oracle does; told, it does what the oracle does; told
// twice the truth, it takes 3. Without max_tokens, each call reserving the
// output it is expected to write, neither takes more than a few. The token
// and request limits refuse nothing.
func TestOutputLimit(t *testing.T) {
	testenv.LongSimulation(t)
	s := loadScenario(t, "output-limit.yaml")
	rep := run(t, s)
	o, g, n := rep.Modes[ModeOracle], rep.Modes[ModeGate], rep.Modes[ModeNaive]
	for m, x := range map[string]Metrics{ModeOracle: o, ModeGate: g, ModeNaive: n} {
		t.Logf("%-6s output %.3f  429s %d (output %d)", m, x.OutputUtilization, x.RateLimited, x.RateLimitedByOutput)
		if x.RateLimitedByTokens+x.RateLimitedByRequests > 0 || x.RateLimitedByOutput != x.RateLimited {
			t.Fatalf("%s: %d 429s, %d of them about the output; want all about the output", m, x.RateLimited, x.RateLimitedByOutput)
		}
	}
	if n.RateLimited < 10000 || n.Lost == 0 {
		t.Fatalf("naive: %d 429s, %d lost; want the output limit met over and over", n.RateLimited, n.Lost)
	}
	if o.RateLimited > 0 || o.OutputUtilization < 0.75 {
		t.Fatalf("oracle: %d 429s, %.3f of the output limit; want none and ≥ 0.75", o.RateLimited, o.OutputUtilization)
	}
	if g.RateLimited > 1 || g.Lost > 0 || g.OutputUtilization < 0.9*o.OutputUtilization {
		t.Fatalf("gate not told: %d 429s, %d lost, %.3f of the output limit (oracle %.3f); want ≤ 1, none lost, ≥ 90%% of the oracle's",
			g.RateLimited, g.Lost, g.OutputUtilization, o.OutputUtilization)
	}
	s.Gate.OTPM = s.Provider.OTPM
	told := runGate(t, s)
	if told.RateLimited > 0 || told.OutputUtilization < 0.99*o.OutputUtilization {
		t.Fatalf("gate told: %d 429s, %.3f of the output limit (oracle %.3f); want none and the oracle's", told.RateLimited, told.OutputUtilization, o.OutputUtilization)
	}
	// Told twice the truth: the 429 at its own level refutes the figure,
	// and the trigger is not stepped back up toward it every ten windows
	// (11 429s an hour before).
	s.Gate.OTPM = 2 * s.Provider.OTPM
	if twice := runGate(t, s); twice.RateLimited > 3 || twice.OutputUtilization < 0.9*o.OutputUtilization {
		t.Fatalf("gate told twice the output limit: %d 429s, %.3f of it (oracle %.3f); want ≤ 3 and ≥ 90%% of the oracle's", twice.RateLimited, twice.OutputUtilization, o.OutputUtilization)
	}
	// No call sends max_tokens: each reserves the output it is expected to
	// write, and the window keeps room for their spread (the oracle took 36
	// 429s an hour without it, and served 0.647 of the output limit).
	s.Gate.OTPM, s.MaxTokensShare = 0, 0
	free := run(t, s)
	if o, g := free.Modes[ModeOracle], free.Modes[ModeGate]; o.RateLimited > 1 || o.OutputUtilization < 0.85 || g.RateLimited > 3 || g.OutputUtilization < 0.95*o.OutputUtilization {
		t.Fatalf("without max_tokens: oracle %d 429s and %.3f of the output limit, gate %d and %.3f; want the oracle ≤ 1 and ≥ 0.85, the gate ≤ 3 and ≥ 95%% of it",
			o.RateLimited, o.OutputUtilization, g.RateLimited, g.OutputUtilization)
	}
}

// Another client on the key writes a tenth of its output limit, known when
// its calls arrive. The gate not told the limit learns what is left to it: no
// output limit held far below that, a few 429s, and at least 90% of the output
// the oracle — told the limit less the other's share — is served of what
// remains.
func TestOutputLimitWithAnotherClient(t *testing.T) {
	testenv.LongSimulation(t)
	s := loadScenario(t, "output-limit.yaml")
	s.Outside = OutsideSpec{Share: 0.05, Pattern: OutsideSmooth, CallTokens: 2000, OutputShare: 0.1}
	rep := run(t, s)
	o, g := rep.Modes[ModeOracle], rep.Modes[ModeGate]
	t.Logf("oracle: %d 429s, %.3f of what remains; gate: %d 429s, %.3f, final limit %.0f", o.RateLimited, o.RemainingOutputUtilization, g.RateLimited, g.RemainingOutputUtilization, g.FinalOutputLimit)
	left := 0.9 * float64(s.Provider.OTPM)
	if o.RateLimited > 0 || o.RemainingOutputUtilization < 0.7 {
		t.Fatalf("oracle: %d 429s, %.3f of the output left to it; want none and ≥ 0.7", o.RateLimited, o.RemainingOutputUtilization)
	}
	if g.RateLimited > 3 || g.Lost > 0 || g.RemainingOutputUtilization < 0.9*o.RemainingOutputUtilization || g.FinalOutputLimit < 0.9*left || g.FinalOutputLimit > 1.05*left {
		t.Fatalf("gate: %d 429s, %d lost, %.3f of the output left (oracle %.3f), holding %.0f at the end; want ≤ 3, none lost, ≥ 90%% of the oracle's, within −10%%/+5%% of the %.0f left",
			g.RateLimited, g.Lost, g.RemainingOutputUtilization, o.RemainingOutputUtilization, g.FinalOutputLimit, left)
	}
}
