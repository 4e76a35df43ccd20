package retry

import (
	"errors"
	"github.com/gatectl/gatectl/engine"
	"math"
	"strings"
	"testing"
	"time"
)

// retrySeqRand returns its values in turn, round and round. Not safe for
// concurrent use (the planner serialises its draws).
type retrySeqRand struct {
	vals []float64
	i    int
}

func (r *retrySeqRand) Float64() float64 {
	v := r.vals[r.i%len(r.vals)]
	r.i++
	return v
}

func TestRetryPolicyDefaults(t *testing.T) {
	p := DefaultPolicy()
	if err := p.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	want := Policy{
		Rounds: 8, InitialDelay: 2 * time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: 0.2,
		RespectRetryAfter: true, HintClamp: Clamp{time.Second, 300 * time.Second},
		HintlessBaseDelay: 5 * time.Second,
		Mislabeled:        Mislabeled{Enabled: true, Rounds: 3, InitialDelay: 15 * time.Second, Evidence: 10 * time.Minute},
	}
	got := p
	got.RetryOn = nil
	if got.Rounds != want.Rounds || got.InitialDelay != want.InitialDelay || got.Multiplier != want.Multiplier ||
		got.MaxDelay != want.MaxDelay || got.Jitter != want.Jitter || got.RespectRetryAfter != want.RespectRetryAfter ||
		got.HintClamp != want.HintClamp || got.HintlessBackoff || got.HintlessBaseDelay != want.HintlessBaseDelay ||
		got.Mislabeled != want.Mislabeled || !got.AcrossSteps || got.HintRounds != 5 ||
		got.Transport != (TransportRounds{DNS: 0, Refused: 1, Reset: FollowRounds, Timeout: 1}) {
		t.Errorf("DefaultPolicy() = %+v, want %+v", got, want)
	}
	for _, c := range engine.Classes {
		retried := c == engine.ClassRateLimit || c == engine.ClassOverloaded || c == engine.ClassServer || c == engine.ClassTimeout || c == engine.ClassTransport
		if p.Retries(c) != retried {
			t.Errorf("Retries(%s) = %v, want %v", c, p.Retries(c), retried)
		}
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Policy)
		want []string // substrings, one per expected error; none = valid
	}{
		{"default", func(p *Policy) {}, nil},
		{"rounds 0 is valid", func(p *Policy) { p.Rounds = 0 }, nil},
		{"rounds 200 is valid", func(p *Policy) { p.Rounds = 200 }, nil},
		{"rounds 201", func(p *Policy) { p.Rounds = 201 }, []string{"retry.rounds: must be between 0 and 200 (got 201)"}},
		{"rounds -1", func(p *Policy) { p.Rounds = -1 }, []string{"retry.rounds: must be between 0 and 200 (got -1)"}},
		{"initialDelay 0", func(p *Policy) { p.InitialDelay = 0 }, []string{"retry.initialDelay: must be > 0 (got 0s)"}},
		{"initialDelay above maxDelay is valid", func(p *Policy) { p.InitialDelay = 2 * time.Minute }, nil},
		{"multiplier 1 is valid", func(p *Policy) { p.Multiplier = 1 }, nil},
		{"multiplier 0.5", func(p *Policy) { p.Multiplier = 0.5 }, []string{"retry.multiplier: must be a finite number >= 1 (got 0.5)"}},
		{"multiplier NaN", func(p *Policy) { p.Multiplier = math.NaN() }, []string{"retry.multiplier"}},
		{"multiplier Inf", func(p *Policy) { p.Multiplier = math.Inf(1) }, []string{"retry.multiplier"}},
		{"maxDelay 0", func(p *Policy) { p.MaxDelay = 0 }, []string{"retry.maxDelay: must be > 0"}},
		{"jitter 0 is valid", func(p *Policy) { p.Jitter = 0 }, nil},
		{"jitter 1 is valid", func(p *Policy) { p.Jitter = 1 }, nil},
		{"jitter 1.5", func(p *Policy) { p.Jitter = 1.5 }, []string{"retry.jitter: must be between 0 and 1 (got 1.5)"}},
		{"jitter -0.1", func(p *Policy) { p.Jitter = -0.1 }, []string{"retry.jitter"}},
		{"jitter NaN", func(p *Policy) { p.Jitter = math.NaN() }, []string{"retry.jitter"}},
		{"retryOn unknown", func(p *Policy) { p.RetryOn = []engine.Class{engine.ClassAuth, "BOGUS"} }, []string{`retry.retryOn[1]: unknown class "BOGUS"`}},
		{"retryOn lower case", func(p *Policy) { p.RetryOn = []engine.Class{"rate_limit"} }, []string{`retry.retryOn[0]: unknown class "rate_limit"`}},
		{"retryOn MISLABELED", func(p *Policy) { p.RetryOn = []engine.Class{engine.ClassMislabeled} }, []string{"retry.retryOn[0]: MISLABELED is governed by retry.mislabeled"}},
		{"retryOn empty is valid", func(p *Policy) { p.RetryOn = nil }, nil},
		{"hintClamp.min 0", func(p *Policy) { p.HintClamp.Min = 0 }, []string{"retry.hintClamp.min: must be > 0"}},
		{"hintClamp reversed", func(p *Policy) { p.HintClamp = Clamp{Min: time.Minute, Max: time.Second} },
			[]string{"retry.hintClamp.max: must be >= hintClamp.min 1m0s (got 1s)"}},
		{"hintlessBaseDelay 0", func(p *Policy) { p.HintlessBaseDelay = 0 }, []string{"retry.hintlessBaseDelay: must be > 0"}},
		{"mislabeled rounds 101", func(p *Policy) { p.Mislabeled.Rounds = 101 }, []string{"retry.mislabeled.rounds: must be between 0 and 100 (got 101)"}},
		{"mislabeled initialDelay 0", func(p *Policy) { p.Mislabeled.InitialDelay = 0 }, []string{"retry.mislabeled.initialDelay: must be > 0"}},
		{"mislabeled evidence 0", func(p *Policy) { p.Mislabeled.Evidence = 0 }, []string{"retry.mislabeled.evidence: must be > 0"}},
		{"mislabeled off ignores its fields", func(p *Policy) { p.Mislabeled = Mislabeled{Rounds: -5} }, nil},
		{"transport at FollowRounds is valid", func(p *Policy) { p.Transport.DNS = FollowRounds }, nil},
		{"transport dns -2", func(p *Policy) { p.Transport.DNS = -2 }, []string{"retry.transport.dns: must be between 0 and 200, or -1 to follow retry.rounds (got -2)"}},
		{"transport reset 201", func(p *Policy) { p.Transport.Reset = 201 }, []string{"retry.transport.reset: must be between 0 and 200"}},
		{"every error at once", func(p *Policy) { p.Rounds = 300; p.Jitter = 2; p.MaxDelay = -1 },
			[]string{"retry.rounds", "retry.maxDelay", "retry.jitter"}},
		{"zero value", func(p *Policy) { *p = Policy{} },
			[]string{"retry.initialDelay", "retry.multiplier", "retry.maxDelay", "retry.hintClamp.min", "retry.hintlessBaseDelay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.want)
			}
			if !errors.Is(err, ErrPolicy) {
				t.Errorf("errors.Is(err, ErrPolicy) = false for %v", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestRetryPolicyBaseDelay(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		edit  func(p *Policy)
		round int
		want  time.Duration
	}{
		{"round 0", nil, 0, 0},
		{"round -3", nil, -3, 0},
		{"round 1 is initialDelay", nil, 1, 2 * s},
		{"round 2", nil, 2, 4 * s},
		{"round 5", nil, 5, 32 * s},
		{"round 6 hits the cap", nil, 6, 60 * s},
		{"round 200 stays at the cap", nil, 200, 60 * s},
		{"multiplier 1 is a fixed interval", func(p *Policy) { p.Multiplier = 1 }, 37, 2 * s},
		{"multiplier 1.5", func(p *Policy) { p.Multiplier = 1.5 }, 3, 4500 * time.Millisecond},
		{"initialDelay above the cap follows it down", func(p *Policy) { p.InitialDelay = 5 * time.Minute }, 1, 60 * s},
		{"huge multiplier does not overflow", func(p *Policy) { p.Multiplier = 1e300 }, 200, 60 * s},
		{"huge cap does not overflow", func(p *Policy) { p.MaxDelay = math.MaxInt64 }, 200, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			if tt.edit != nil {
				tt.edit(&p)
			}
			if got := p.BaseDelay(tt.round); got != tt.want {
				t.Errorf("BaseDelay(%d) = %s, want %s", tt.round, got, tt.want)
			}
			if got := p.Delay(tt.round, nil); got != tt.want {
				t.Errorf("Delay(%d, nil) = %s, want %s", tt.round, got, tt.want)
			}
		})
	}
}

func TestRetryPolicyDelayJitter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		jitter float64
		round  int
		u      float64
		want   time.Duration
	}{
		{"low end is -20%", 0.2, 1, 0, 1600 * ms},
		{"middle is the base", 0.2, 1, 0.5, 2000 * ms},
		{"quarter", 0.2, 2, 0.25, 3600 * ms},
		{"near the top is +20%", 0.2, 1, 0.999999, 2399999200 * time.Nanosecond},
		{"at the cap jitter only goes down", 0.2, 6, 0, 48000 * ms},
		// Clipped, half the draws at the cap landed on it exactly: they spread below it.
		{"at the cap the draws spread below it", 0.2, 6, 0.9, 58800 * ms},
		{"at the cap the middle draw is under it", 0.2, 6, 0.5, 54000 * ms},
		{"round 5 near the top", 0.2, 5, 0.999, 38387200 * time.Microsecond},
		{"jitter 0 ignores the draw", 0, 3, 0.9, 8000 * ms},
		{"jitter 1 can wait 0", 1, 1, 0, 0},
		{"round 0 waits 0 whatever the draw", 0.2, 0, 0.9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			p.Jitter = tt.jitter
			r := &retrySeqRand{vals: []float64{tt.u}}
			if got := p.Delay(tt.round, r); got != tt.want {
				t.Errorf("Delay(%d) with u=%v = %s, want %s", tt.round, tt.u, got, tt.want)
			}
			if got := p.Delay(tt.round, r); got > p.MaxDelay {
				t.Errorf("Delay(%d) = %s exceeds maxDelay %s", tt.round, got, p.MaxDelay)
			}
		})
	}
}

func TestRetryPolicyCurve(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	p := DefaultPolicy()
	got := p.Curve()
	want := []CurvePoint{
		{1, 2 * s, 2 * s, 2400 * ms, 2400 * ms},
		{2, 4 * s, 6 * s, 4800 * ms, 7200 * ms},
		{3, 8 * s, 14 * s, 9600 * ms, 16800 * ms},
		{4, 16 * s, 30 * s, 19200 * ms, 36000 * ms},
		{5, 32 * s, 62 * s, 38400 * ms, 74400 * ms},
		{6, 60 * s, 122 * s, 60 * s, 134400 * ms},
		{7, 60 * s, 182 * s, 60 * s, 194400 * ms},
		{8, 60 * s, 242 * s, 60 * s, 254400 * ms},
	}
	if len(got) != len(want) {
		t.Fatalf("Curve() has %d points, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Curve()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}

	t.Run("rounds 0 draws nothing", func(t *testing.T) {
		p := DefaultPolicy()
		p.Rounds = 0
		if c := p.Curve(); len(c) != 0 {
			t.Errorf("Curve() = %v, want none", c)
		}
	})
	t.Run("no jitter: longest is the delay", func(t *testing.T) {
		p := DefaultPolicy()
		p.Jitter = 0
		c := p.Curve()
		if last := c[len(c)-1]; last.CumulativeLongest != last.Cumulative || last.Cumulative != 242*s {
			t.Errorf("last point = %+v, want both sums 242s", last)
		}
	})
	t.Run("200 rounds", func(t *testing.T) {
		p := DefaultPolicy()
		p.Rounds = 200
		c := p.Curve()
		if len(c) != 200 || c[199].Cumulative != 62*s+195*60*s {
			t.Errorf("200-round curve ends at %+v", c[len(c)-1])
		}
	})
}

func TestRetryPolicyHints(t *testing.T) {
	s := time.Second
	p := DefaultPolicy()
	clamp := []struct{ in, want time.Duration }{
		{-5 * s, s}, {0, s}, {6 * time.Millisecond, s}, {s, s}, {28 * s, 28 * s},
		{300 * s, 300 * s}, {9 * time.Hour, 300 * s},
	}
	for _, c := range clamp {
		if got := p.ClampHint(c.in); got != c.want {
			t.Errorf("ClampHint(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	waits := []struct {
		in, want time.Duration
		capped   bool
	}{
		{500 * time.Millisecond, s, false}, {12 * s, 12 * s, false}, {60 * s, 60 * s, false},
		{61 * s, 60 * s, true}, {9 * time.Hour, 60 * s, true},
	}
	for _, w := range waits {
		if got, capped := p.hintWait(w.in); got != w.want || capped != w.capped {
			t.Errorf("hintWait(%s) = %s, %v, want %s, %v", w.in, got, capped, w.want, w.capped)
		}
	}
	doubling := []struct {
		base  time.Duration
		round int
		want  time.Duration
	}{
		{5 * s, 1, 5 * s}, {5 * s, 2, 10 * s}, {5 * s, 4, 40 * s}, {5 * s, 7, 300 * s}, {5 * s, 199, 300 * s},
		{15 * s, 0, 15 * s}, {15 * s, 3, 60 * s}, {100 * time.Millisecond, 1, s},
	}
	for _, d := range doubling {
		if got := p.doublingWait(d.base, d.round); got != d.want {
			t.Errorf("doublingWait(%s, %d) = %s, want %s", d.base, d.round, got, d.want)
		}
	}
}
