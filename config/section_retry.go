package config

import (
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
)

// retrySchema is retry:, decoded into the engine's retry.Policy.
var retrySchema = &schema[Retry]{
	path:     "retry",
	doc:      "the retry planner: backoff curve, retried classes, wait hints",
	defaults: retry.DefaultPolicy,
	fields: []setting[Retry]{
		intField("rounds", "retries one (session, turn, provider) gets; 0: never retry", between(0, retry.MaxRounds),
			func(r *Retry) *int { return &r.Rounds }),
		durField("initialDelay", "wait of round 1; above maxDelay it is capped (a warning)", positive,
			func(r *Retry) *time.Duration { return &r.InitialDelay }),
		numField("multiplier", "growth of the wait each round", atLeast(1).withNote("1 = a fixed interval"),
			func(r *Retry) *float64 { return &r.Multiplier }),
		durField("maxDelay", "cap of every round's wait", positive,
			func(r *Retry) *time.Duration { return &r.MaxDelay }),
		numField("jitter", "each wait is spread by ±jitter", unitRange,
			func(r *Retry) *float64 { return &r.Jitter }),
		boolField("respectRetryAfter", "a provider's wait hint under maxDelay wins over the curve",
			func(r *Retry) *bool { return &r.RespectRetryAfter }),
		customField("retryOn", "list", "classes retried on the curve (MISLABELED: see retry.mislabeled)", (*validator).retryOn).
			encodedBy(func(r *Retry) (any, bool) {
				out := make([]string, len(r.RetryOn))
				for i, c := range r.RetryOn {
					out[i] = string(c)
				}
				return out, false
			}),
		subField("hintClamp", "range a provider's wait hint is trusted in", clampSchema,
			func(r *Retry) *retry.Clamp { return &r.HintClamp }),
		boolField("hintlessBackoff", "OVERLOADED and SERVER failures without a hint double from hintlessBaseDelay (each wait spread by the session's own share, at most 5 s) instead of the curve",
			func(r *Retry) *bool { return &r.HintlessBackoff }),
		durField("hintlessBaseDelay", "first wait of hintlessBackoff's schedule, clamped to hintClamp", positive,
			func(r *Retry) *time.Duration { return &r.HintlessBaseDelay }),
		roundsOrNullField("hintRounds", "retries per (session, turn, provider) whose wait is the provider's own hint (Retry-After, retry_after, \"retry after N seconds\"); they spend this budget instead of retry.rounds. null: they spend retry.rounds",
			func(r *Retry) *int { return &r.HintRounds }),
		boolField("acrossSteps", "the steps of a turn share one budget; false: each (turn, step) gets its own",
			func(r *Retry) *bool { return &r.AcrossSteps }),
		subField("mislabeled", "the separate budget for 400s that are really capacity failures", mislabeledSchema,
			func(r *Retry) *Mislabeled { return &r.Mislabeled }),
		subField("transport", "retries of a failure with no HTTP answer, by kind: DNS and refused fail fast", transportSchema,
			func(r *Retry) *retry.TransportRounds { return &r.Transport }),
	},
	check: func(v *validator, s section, r *Retry) {
		if r.InitialDelay <= r.MaxDelay {
			return
		}
		// Lowering the cap pulls the first wait down with it, so that a smaller cap
		// always means shorter waits.
		at := s.val("initialDelay")
		if at == nil {
			at = s.val("maxDelay")
		}
		v.warnf(at, s.sub("initialDelay"), "%s exceeds retry.maxDelay (%s); the first wait is capped at %s", dur(r.InitialDelay), dur(r.MaxDelay), dur(r.MaxDelay))
		r.InitialDelay = r.MaxDelay
	},
}

var clampSchema = &schema[retry.Clamp]{
	path:     "retry.hintClamp",
	doc:      "every provider wait hint is clamped into [min, max]",
	defaults: func() retry.Clamp { return retry.DefaultPolicy().HintClamp },
	fields: []setting[retry.Clamp]{
		durField("min", "shortest wait a hint may ask for", positive,
			func(c *retry.Clamp) *time.Duration { return &c.Min }),
		durField("max", "longest wait a hint may ask for", positive,
			func(c *retry.Clamp) *time.Duration { return &c.Max }),
	},
	check: func(v *validator, s section, c *retry.Clamp) {
		if c.Min <= c.Max {
			return
		}
		v.errorf(s.node, s.path, "min (%s) must not exceed max (%s)", dur(c.Min), dur(c.Max))
	},
}

var mislabeledSchema = &schema[Mislabeled]{
	path:     "retry.mislabeled",
	doc:      "400s that are really a saturated gateway get their own budget",
	defaults: func() Mislabeled { return retry.DefaultPolicy().Mislabeled },
	fields: []setting[Mislabeled]{
		boolField("enabled", "retry mislabeled 400s at all",
			func(m *Mislabeled) *bool { return &m.Enabled }),
		intField("rounds", "budget per (session, turn, provider), apart from retry.rounds; at most 100 while enabled",
			between(0, retry.MaxRounds), func(m *Mislabeled) *int { return &m.Rounds }),
		durField("initialDelay", "first wait without a hint; it doubles each round", positive,
			func(m *Mislabeled) *time.Duration { return &m.InitialDelay }),
		durField("evidence", "how long a capacity failure counts as evidence that a 400 is mislabeled", positive,
			func(m *Mislabeled) *time.Duration { return &m.Evidence }),
	},
	check: func(v *validator, s section, m *Mislabeled) {
		if m.Enabled && m.Rounds > retry.MaxMislabeledRounds {
			at := s.val("rounds")
			if at == nil {
				at = s.node
			}
			v.errorf(at, s.sub("rounds"), "must be at most %d while retry.mislabeled.enabled is true (got %d)", retry.MaxMislabeledRounds, m.Rounds)
		}
	},
}

var transportSchema = &schema[retry.TransportRounds]{
	path: "retry.transport",
	doc: "retries per (session, turn, provider) of a transport failure (no HTTP answer), by its kind; " +
		"each also spends a round of retry.rounds; null: the kind follows retry.rounds alone",
	defaults: func() retry.TransportRounds { return retry.DefaultPolicy().Transport },
	fields: []setting[retry.TransportRounds]{
		roundsOrNullField("dns", "the upstream's name does not resolve (a mistyped baseURL): 0 gives up at once",
			func(t *retry.TransportRounds) *int { return &t.DNS }),
		roundsOrNullField("refused", "nothing listens at the upstream's address: one quick retry covers a restart",
			func(t *retry.TransportRounds) *int { return &t.Refused }),
		roundsOrNullField("reset", "the connection broke mid-exchange",
			func(t *retry.TransportRounds) *int { return &t.Reset }),
		roundsOrNullField("timeout", "the upstream did not answer in time",
			func(t *retry.TransportRounds) *int { return &t.Timeout }),
	},
}

// roundsOrNullField is a number of retries 0..retry.MaxRounds, or null for
// retry.FollowRounds (the retries follow retry.rounds alone).
func roundsOrNullField[T any](key, doc string, ptr func(*T) *int) setting[T] {
	r := between(0, retry.MaxRounds).withNote("or null to follow retry.rounds")
	return setting[T]{key: key, kind: "integer or null", bounds: r.short(true) + " or null", doc: doc,
		show: func(t *T) string {
			if n := *ptr(t); n != retry.FollowRounds {
				return strconv.Itoa(n)
			}
			return "null (retry.rounds)"
		},
		encode: func(t *T) (any, bool) {
			if n := *ptr(t); n != retry.FollowRounds {
				return n, false
			}
			return nil, false
		},
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if isNull(n) {
				*ptr(t) = retry.FollowRounds
				return
			}
			if i, ok := v.integer(n, path); ok && r.check(v, n, path, float64(i), strconv.Itoa(i), true) {
				*ptr(t) = i
			}
		}}
}

// retryOn decodes the list of retried classes: known, each once, MISLABELED never.
func (v *validator) retryOn(n *yaml.Node, p string, r *Retry) {
	items := v.list(n, p)
	out := []engine.Class{}
	seen := map[engine.Class]bool{}
	for i, it := range items {
		name, ok := v.str(it, index(p, i))
		if !ok {
			continue
		}
		cl, err := engine.ParseClass(name)
		switch {
		case err != nil:
			v.errorf(it, index(p, i), "unknown class %q (valid: %s)", name, classNames())
		case seen[cl]:
			v.errorf(it, index(p, i), "class %s is listed twice", cl)
		case cl == engine.ClassMislabeled:
			v.errorf(it, index(p, i), "MISLABELED is governed by retry.mislabeled, not retryOn")
		default:
			seen[cl] = true
			out = append(out, cl)
		}
	}
	if items != nil || isNull(n) {
		r.RetryOn = out
	}
}

func classNames() string {
	s := make([]string, len(engine.Classes))
	for i, c := range engine.Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}
