package retry

import (
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"math"
	"time"
)

// Limits of a Policy, so that a slip in the config cannot make one turn retry
// almost without end.
const (
	MaxRounds           = 200
	MaxMislabeledRounds = 100
)

// ErrPolicy is the sentinel every Policy.Validate error wraps.
var ErrPolicy = errors.New("invalid retry policy")

// Clamp is the range a provider's wait hint is trusted in (retry.hintClamp).
type Clamp struct {
	Min, Max time.Duration
}

// Mislabeled is the separate budget for 400s that are really a saturated
// gateway replaying its client-error circuit (retry.mislabeled; see
// docs/RATIONALE.md, "Why retry a 400 at all?").
type Mislabeled struct {
	Enabled bool
	// Rounds is the mislabeled budget per (session, turn, provider), apart from Rounds
	// of the policy: waiting out a circuit must not eat the 429 budget, nor the reverse.
	Rounds int
	// InitialDelay is the first wait when the replayed error carries no hint; it
	// doubles each round, each wait spread by the session's own share
	// (spreadSchedule), as a replay's hint is (spreadHint).
	InitialDelay time.Duration
	// Evidence is how long a capacity failure on the provider (RATE_LIMIT,
	// OVERLOADED) still counts as evidence that a 400 is mislabeled.
	Evidence time.Duration
}

// FollowRounds in a TransportRounds field: the kind has no budget of its own and
// retries on the main budget (Policy.Rounds) alone.
const FollowRounds = -1

// TransportKinds are the kinds of transport failure (engine.Failure.ErrorKind)
// TransportRounds has a setting for, in the config's order.
var TransportKinds = []string{"dns", "refused", "reset", "timeout"}

// TransportRounds is how many retries a transport failure (no HTTP answer) gets,
// by its kind (retry.transport; see docs/RATIONALE.md, "Why do a DNS failure and a
// refused connection fail fast?"). A kind with a number n gets at most n retries
// per (session, turn, provider), counted apart from the other kinds; each retry
// spends a round of the main budget as well, so Rounds still bounds them all. A
// kind at FollowRounds, and a failure of no kind, retry on the main budget alone.
type TransportRounds struct {
	// DNS: the upstream's name does not resolve. Default 0: a mistyped baseURL or a
	// missing DNS record does not fix itself within a retry's wait.
	DNS int
	// Refused: nothing listens at the address. Default 1: one quick retry covers an
	// upstream that is restarting.
	Refused int
	// Reset: the connection broke mid-exchange. Default FollowRounds.
	Reset int
	// Timeout: the upstream did not answer in time. Default 1: each timed-out
	// attempt already cost a whole deadline (upstream.firstByteTimeout or
	// responseTimeout), so an upstream that never answers must not cost eight.
	Timeout int
}

// For returns the setting for kind and whether it bounds the kind: ok is false for
// FollowRounds and for a kind TransportRounds has no setting for ("" included).
func (t *TransportRounds) For(kind string) (rounds int, ok bool) {
	switch kind {
	case "dns":
		rounds = t.DNS
	case "refused":
		rounds = t.Refused
	case "reset":
		rounds = t.Reset
	case "timeout":
		rounds = t.Timeout
	default:
		return 0, false
	}
	return rounds, rounds != FollowRounds
}

// Policy is the retry: section of the config as engine values: the backoff
// curve, which classes are retried, how provider hints are trusted, and the
// hintless and mislabeled rules.
//
// A Policy is a plain value; the Planner copies it, so changing one after
// NewPlanner or SetPolicy has no effect. Its zero value is not valid (InitialDelay,
// MaxDelay, the clamp and HintlessBaseDelay must be set): start from
// DefaultPolicy and override fields.
//
// Defaults (DefaultPolicy):
//
//	Rounds: 8, InitialDelay: 2s, Multiplier: 2, MaxDelay: 60s, Jitter: 0.2,
//	RespectRetryAfter: true,
//	RetryOn: RATE_LIMIT, OVERLOADED, SERVER, TIMEOUT, TRANSPORT,
//	HintClamp: [1s, 300s], HintlessBackoff: false, HintlessBaseDelay: 5s,
//	Mislabeled: {Enabled: true, Rounds: 3, InitialDelay: 15s, Evidence: 10m},
//	Transport: {DNS: 0, Refused: 1, Reset: FollowRounds, Timeout: 1},
//	HintRounds: 5, AcrossSteps: true (the steps of a turn share one budget).
type Policy struct {
	// Rounds is how many retries one (session, turn, provider) gets; 0 means gatectl
	// never retries (the pools may still move a QUOTA failure). At most MaxRounds.
	Rounds int
	// InitialDelay is the wait of round 1. A value above MaxDelay follows the cap
	// down: lowering the cap lowers the first wait with it.
	InitialDelay time.Duration
	// Multiplier scales the wait each round; 1 is a fixed interval.
	Multiplier float64
	// MaxDelay caps every round of the curve: no round waits longer.
	MaxDelay time.Duration
	// Jitter spreads each curve wait by ±Jitter (0.2 = ±20%) so that sessions
	// failing together do not retry together. The jittered wait is still capped by
	// MaxDelay. In [0, 1].
	Jitter float64
	// RespectRetryAfter makes a provider's wait hint win over the local curve when
	// the hint is under MaxDelay: the provider knows its own pause better than the
	// curve does. Off, hints are ignored everywhere: the
	// curve decides, and a rate limit's cooldown is the gate's fallback.
	RespectRetryAfter bool
	// RetryOn lists the classes retried on the curve. MISLABELED is not listed here:
	// Mislabeled.Enabled governs it.
	RetryOn []engine.Class
	// HintClamp bounds every provider hint before it is used (1 s–300 s by default),
	// so a misread or absurd hint can neither spin a turn nor stall it.
	HintClamp Clamp
	// HintlessBackoff makes OVERLOADED and SERVER failures without a hint wait
	// a doubling schedule of its own, HintlessBaseDelay·2ⁿ⁻¹ clamped to HintClamp
	// and spread by the session's own share (spreadSchedule), instead of the
	// curve. Off by default: without a hint, a capacity failure looks the same
	// as capacity that is not coming back, so retrying it is a policy choice.
	HintlessBackoff   bool
	HintlessBaseDelay time.Duration
	Mislabeled        Mislabeled
	// Transport bounds the retries of a transport failure by its kind: a name that
	// does not resolve fails at once, a refused connection after one retry.
	Transport TransportRounds
	// HintRounds is the budget of hint-driven retries per (session, turn,
	// provider): a failure whose wait is the provider's own hint (Retry-After, a
	// retry_after field, "retry after 28 seconds" in the body) spends a round of
	// it instead of a round of Rounds. The provider said how long to wait, so
	// waiting it out is the patient retry, and it must not use up the curve
	// that blind failures need. FollowRounds: hinted retries spend Rounds like
	// any other. At most MaxRounds.
	HintRounds int
	// AcrossSteps shares one budget across the steps of a turn (true, the
	// default): otherwise a turn that meets the same cooldown at every step would
	// get a fresh budget at each. false gives each (turn, step) its own budget.
	AcrossSteps bool
}

// DefaultPolicy returns the defaults listed on Policy.
func DefaultPolicy() Policy {
	return Policy{
		Rounds:            8,
		InitialDelay:      2 * time.Second,
		Multiplier:        2,
		MaxDelay:          60 * time.Second,
		Jitter:            0.2,
		RespectRetryAfter: true,
		RetryOn:           []engine.Class{engine.ClassRateLimit, engine.ClassOverloaded, engine.ClassServer, engine.ClassTimeout, engine.ClassTransport},
		HintClamp:         Clamp{Min: time.Second, Max: 300 * time.Second},
		HintlessBackoff:   false,
		HintlessBaseDelay: 5 * time.Second,
		Mislabeled: Mislabeled{
			Enabled:      true,
			Rounds:       3,
			InitialDelay: 15 * time.Second,
			Evidence:     10 * time.Minute,
		},
		Transport:   TransportRounds{DNS: 0, Refused: 1, Reset: FollowRounds, Timeout: 1},
		HintRounds:  5,
		AcrossSteps: true,
	}
}

// Validate reports every problem of p, each naming its config path
// ("retry.rounds: ...") and wrapping ErrPolicy. It returns nil for a valid
// policy. Out-of-range values are errors, never silently replaced: a deployment
// with a typo refuses to start rather than run on a default it did not ask for.
func (p Policy) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("retry.%s: %s: %w", path, fmt.Sprintf(format, args...), ErrPolicy))
	}
	if p.Rounds < 0 || p.Rounds > MaxRounds {
		bad("rounds", "must be between 0 and %d (got %d)", MaxRounds, p.Rounds)
	}
	if p.InitialDelay <= 0 {
		bad("initialDelay", "must be > 0 (got %s)", p.InitialDelay)
	}
	if math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1 {
		bad("multiplier", "must be a finite number >= 1 (got %v)", p.Multiplier)
	}
	if p.MaxDelay <= 0 {
		bad("maxDelay", "must be > 0 (got %s)", p.MaxDelay)
	}
	if math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1 {
		bad("jitter", "must be between 0 and 1 (got %v)", p.Jitter)
	}
	for i, c := range p.RetryOn {
		if pc, err := engine.ParseClass(string(c)); err != nil || pc != c {
			bad(fmt.Sprintf("retryOn[%d]", i), "unknown class %q", c)
			continue
		}
		if c == engine.ClassMislabeled {
			bad(fmt.Sprintf("retryOn[%d]", i), "MISLABELED is governed by retry.mislabeled, not retryOn")
		}
	}
	if p.HintClamp.Min <= 0 {
		bad("hintClamp.min", "must be > 0 (got %s)", p.HintClamp.Min)
	}
	if p.HintClamp.Max < p.HintClamp.Min {
		bad("hintClamp.max", "must be >= hintClamp.min %s (got %s)", p.HintClamp.Min, p.HintClamp.Max)
	}
	if p.HintlessBaseDelay <= 0 {
		bad("hintlessBaseDelay", "must be > 0 (got %s)", p.HintlessBaseDelay)
	}
	if m := p.Mislabeled; m.Enabled {
		if m.Rounds < 0 || m.Rounds > MaxMislabeledRounds {
			bad("mislabeled.rounds", "must be between 0 and %d (got %d)", MaxMislabeledRounds, m.Rounds)
		}
		if m.InitialDelay <= 0 {
			bad("mislabeled.initialDelay", "must be > 0 (got %s)", m.InitialDelay)
		}
		if m.Evidence <= 0 {
			bad("mislabeled.evidence", "must be > 0 (got %s)", m.Evidence)
		}
	}
	if p.HintRounds < FollowRounds || p.HintRounds > MaxRounds {
		bad("hintRounds", "must be between 0 and %d, or %d to follow retry.rounds (got %d)", MaxRounds, FollowRounds, p.HintRounds)
	}
	for _, kind := range TransportKinds {
		if n, _ := p.Transport.For(kind); n < FollowRounds || n > MaxRounds {
			bad("transport."+kind, "must be between 0 and %d, or %d to follow retry.rounds (got %d)", MaxRounds, FollowRounds, n)
		}
	}
	return errors.Join(errs...)
}

// Retries reports whether class c is in RetryOn.
func (p *Policy) Retries(c engine.Class) bool {
	for _, x := range p.RetryOn {
		if x == c {
			return true
		}
	}
	return false
}

// BaseDelay is the un-jittered wait of round (1-based) on the curve:
// min(InitialDelay·Multiplierʳᵒᵘⁿᵈ⁻¹, MaxDelay). Round 0 or less waits 0. It never
// overflows, however deep the round.
func (p *Policy) BaseDelay(round int) time.Duration {
	if round <= 0 {
		return 0
	}
	return retryGrow(p.InitialDelay, p.Multiplier, round, p.MaxDelay)
}

// Delay is the wait of round (1-based) on the curve, jittered by ±Jitter with a draw
// from r, and capped by MaxDelay. A nil r draws no jitter (the base delay).
func (p *Policy) Delay(round int, r engine.Rand) time.Duration {
	base := p.BaseDelay(round)
	if base == 0 || r == nil || p.Jitter == 0 {
		return base
	}
	return p.jitter(base, r.Float64())
}

// jitter spreads base by ±Jitter with u in [0, 1): u=0 is the low end, u→1 the
// high. The spread stays under MaxDelay rather than being clipped to it: from
// the round whose base reaches the cap, clipping put half of the draws on
// MaxDelay exactly, and the sessions refused together came back together.
func (p *Policy) jitter(base time.Duration, u float64) time.Duration {
	b := float64(min(base, p.MaxDelay))
	lo, hi := b*(1-p.Jitter), min(b*(1+p.Jitter), float64(p.MaxDelay))
	return max(time.Duration(lo+(hi-lo)*u), 0)
}

// CurvePoint is one round of the curve as Curve draws it.
type CurvePoint struct {
	Round int `json:"round"`
	// Delay is the round's un-jittered wait; Cumulative sums Delay over rounds 1..Round.
	Delay      time.Duration `json:"-"`
	Cumulative time.Duration `json:"-"`
	// Longest is the round's longest wait with jitter (Delay·(1+Jitter), capped);
	// CumulativeLongest sums it: the longest a turn can wait through Round.
	Longest           time.Duration `json:"-"`
	CumulativeLongest time.Duration `json:"-"`
}

// Curve returns one point per round 1..Rounds: the wait of each round without
// jitter and with jitter's upper bound, and their running sums. It is what
// `gatectl backoff` draws. It ignores hints, which only the provider knows.
func (p *Policy) Curve() []CurvePoint {
	pts := make([]CurvePoint, 0, max(p.Rounds, 0))
	var cum, cumLong time.Duration
	for n := 1; n <= p.Rounds; n++ {
		d := p.BaseDelay(n)
		long := d
		if p.Jitter > 0 {
			long = p.jitter(d, 1) // the supremum of the draw, capped like every draw
		}
		cum += d
		cumLong += long
		pts = append(pts, CurvePoint{Round: n, Delay: d, Cumulative: cum, Longest: long, CumulativeLongest: cumLong})
	}
	return pts
}

// ClampHint bounds a provider's wait hint to HintClamp.
func (p *Policy) ClampHint(d time.Duration) time.Duration {
	return min(max(d, p.HintClamp.Min), p.HintClamp.Max)
}

// hintWait is the wait for a hinted failure on the curve: the clamped hint when it is
// under MaxDelay (the provider's wait wins under the cap), otherwise the
// cap itself: no round waits longer than MaxDelay, and the cap is the closest the
// policy allows to what the provider asked. capped reports the second case.
func (p *Policy) hintWait(hint time.Duration) (d time.Duration, capped bool) {
	d = p.ClampHint(hint)
	if d > p.MaxDelay {
		return p.MaxDelay, true
	}
	return d, false
}

// doublingWait is base·2ʳᵒᵘⁿᵈ⁻¹ clamped to HintClamp: the schedule for
// hintless capacity failures and for mislabeled 400s.
func (p *Policy) doublingWait(base time.Duration, round int) time.Duration {
	return p.ClampHint(retryGrow(base, 2, max(round, 1), p.HintClamp.Max))
}

// retryGrow returns min(base·mᵏ⁻¹, limit) without overflowing for any k ≥ 1.
func retryGrow(base time.Duration, m float64, k int, limit time.Duration) time.Duration {
	f := float64(base) * math.Pow(m, float64(k-1))
	if math.IsNaN(f) || f >= float64(limit) {
		return limit
	}
	return time.Duration(f)
}
