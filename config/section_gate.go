package config

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine/gate"
)

// gateSchema is gate:, decoded into the engine's gate.Config.
var gateSchema = &schema[Gate]{
	path:     "gate",
	doc:      "admission against per-model TPM/RPM budgets",
	defaults: gate.DefaultConfig,
	fields: []setting[Gate]{
		durField("window", "sliding window of the ledger", positive,
			func(g *Gate) *time.Duration { return &g.Window }),
		unsetZero(numField("safetyFactor", "share of each budget the gate spends, in place of the 0.99 it spends when this is left out: a hard cap you chose. The margin for what the calls in flight will cost (marginSigmas) is kept either way", safetyFactor,
			func(g *Gate) *float64 { return &g.SafetyFactor })),
		numField("countGuard", "share of the window a call stays counted past it, for a provider that counts late; measured delays raise it, and the first window of sent traffic keeps four times it (at most 0.02)", between(0, 0.02),
			func(g *Gate) *float64 { return &g.CountGuard }),
		numField("marginSigmas", "standard deviations of the calls in flight's summed cost kept free", between(0, 10),
			func(g *Gate) *float64 { return &g.MarginSigmas }),
		numField("pace", "grants are spaced at this multiple of the budget per window, so a drained window does not release the whole queue at once; 0 turns pacing off. With `store.redis`, each of the N instances competing for a model paces at 1/N of it and of `paceBurst`, never under 1/pace ([redis.md](redis.md))", between(0, 10),
			func(g *Gate) *float64 { return &g.Pace }),
		numField("paceBurst", "share of the budget the pacer grants at once", unitRange,
			func(g *Gate) *float64 { return &g.PaceBurst }),
		durField("maxWait", "longest admission wait before failing open (a queued call in its last tenth, spread; never into a 429's pause: docs/gate.md); at least window", positive,
			func(g *Gate) *time.Duration { return &g.MaxWait }),
		durField("fallbackCooldown", "cooldown after a 429 without a wait hint", nonNegative,
			func(g *Gate) *time.Duration { return &g.FallbackCooldown }),
		intField("outputReserveTokens", "output tokens reserved when a request gives no max_tokens", nonNegative,
			func(g *Gate) *int { return &g.OutputReserveTokens }),
		boolField("learn", "learn the true quota from 429 feedback",
			func(g *Gate) *bool { return &g.Learn }),
		subField("defaults", "every model's limits unless overridden", limitsSchema,
			func(g *Gate) *ModelLimits { return &g.Defaults }),
		customField("models", "mapping", `"provider/model" -> limits over defaults`, (*validator).models).
			encodedBy(func(g *Gate) (any, bool) {
				out := make(map[string]any, len(g.Models))
				for k, l := range g.Models {
					out[k] = limitsSchema.encode(&l)
				}
				return out, false
			}),
		intField("maxInFlightPerSession", "admitted, unsettled calls one session may hold on one model",
			nonNegative.withNote("0 means no cap"),
			func(g *Gate) *int { return &g.MaxInFlightPerSession }),
		intField("maxModels", "provider/model buckets the gate keeps; past it, a model not listed under gate.models shares its provider's \"(other)\" bucket, so invented model names cannot grow the gate without bound. Idle empty buckets are dropped",
			nonNegative.withNote("0 means no bound"),
			func(g *Gate) *int { return &g.MaxModels }),
	},
	check: func(v *validator, s section, g *Gate) {
		if g.Window <= 0 || g.MaxWait <= 0 || g.MaxWait >= g.Window {
			return
		}
		if x := s.val("maxWait"); x != nil {
			v.errorf(x, s.sub("maxWait"), "must be at least gate.window (%s), got %s: the gate could never wait out a full window", dur(g.Window), dur(g.MaxWait))
		} else {
			v.errorf(s.val("window"), s.sub("window"), "must not exceed gate.maxWait (%s), got %s: the gate could never wait out a full window", dur(g.MaxWait), dur(g.Window))
		}
	},
}

// capRange bounds maxTpm and maxRpm: 0, like a key left out, inherits — a
// model cannot remove a cap gate.defaults sets, only set its own.
var capRange = rng{lo: 0, hasLo: true, tail: "; 0 or left out inherits (none by default)"}

// limitsSchema is gate.defaults and each entry of gate.models. A key left out
// inherits: see gate.Config.Limits, the one place limits are resolved.
var limitsSchema = &schema[ModelLimits]{
	path:     "gate.models.<provider/model>",
	doc:      "per-model limits (also gate.defaults); a key left out inherits",
	defaults: func() ModelLimits { return gate.DefaultConfig().Defaults },
	fields: []setting[ModelLimits]{
		intField("tpm", "tokens per window: the learner's starting point", inherit,
			func(l *ModelLimits) *int { return &l.TPM }),
		intField("rpm", "requests per window: the learner's starting point, like tpm", inherit,
			func(l *ModelLimits) *int { return &l.RPM }),
		intField("maxTpm", "a hard cap on tokens per window (0 or left out: gate.defaults', none by default): the learner never goes above it, whatever the provider allows (a key other programs share, a spend you bound); a tpm above it starts at it, and a call larger than it waits for an empty window", capRange,
			func(l *ModelLimits) *int { return &l.MaxTPM }),
		intField("maxRpm", "a hard cap on requests per window, as maxTpm", capRange,
			func(l *ModelLimits) *int { return &l.MaxRPM }),
		intField("otpm", "output tokens per window, when the provider limits them apart (Anthropic's OTPM): each call's output — its max_tokens while in flight, what it wrote once done — is held under it, beside tpm; a limit the provider states (anthropic-ratelimit-output-tokens-limit) replaces it, and a 429 about the output teaches one without it", capRange,
			func(l *ModelLimits) *int { return &l.OTPM }),
		unsetZero(numField("safetyFactor", "overrides gate.safetyFactor for the model (left out: gate.defaults' safetyFactor, else gate.safetyFactor, else 0.99)", unitFactor.withTail("; leave it out to inherit"),
			func(l *ModelLimits) *float64 { return &l.SafetyFactor })),
		choiceField("countsAt", "when the provider counts a call, if you know it: arrival, or completion (a call in flight is not in its window until it ends); learn (a model's way back under defaults that set one), or left out: the gate learns it from where 429s fall",
			[]string{gate.CountsAtArrival, gate.CountsAtCompletion, gate.CountsAtLearn}, func(l *ModelLimits) *string { return &l.CountsAt }),
		choiceField("decides", "what the provider decides a call on when it arrives, if you know it: known (its input and max_tokens — its input alone without one — with the output counted once written): the gate counts calls in flight the same way, keeps no margin for outputs not yet written, and counts an output from when it was written (with its call's arrival when countsAt is arrival — a sliding window that books it in the call's entry — or on a shared window); whole: it keeps that margin, as if the provider could count an output before it is written; left out: that margin too, unless the provider's rate-limit headers (x-ratelimit-remaining-tokens) show it counts the calls in flight at what it knows (read on a sliding window counted on arrival; the status then says known)",
			[]string{gate.DecidesKnown, gate.DecidesWhole}, func(l *ModelLimits) *string { return &l.Decides }),
		choiceField("windows", "how the provider's window moves, if you know it: fixed (clock-aligned windows whose count restarts at each multiple of the window, at the top of each minute for 60s): the gate counts the current one, a call that does not fit waits for the next edge, and one admitted just before an edge counts on both sides of it; sliding: a sliding window, always; left out: sliding, unless six answers over most of a window state a token reset (x-ratelimit-reset-tokens, anthropic-ratelimit-tokens-reset) at the window's next edge, or two 429s half a window apart state waits (Retry-After) that end at its edges, as a fixed-window provider does, or two 429s half a window apart come below a level the provider served a moment before in a sliding window while the current fixed window explains them (the status then says windows: fixed)",
			[]string{gate.WindowsFixed, gate.WindowsSliding}, func(l *ModelLimits) *string { return &l.Windows }),
	},
}

// models decodes gate.models: provider/model keys, each naming a configured provider.
func (v *validator) models(n *yaml.Node, path string, g *Gate) {
	fs := v.entries(n, path)
	g.Models = make(map[string]ModelLimits, len(fs))
	for _, f := range fs {
		key := f.key.Value
		p := join(path, key)
		prov, model, ok := strings.Cut(key, "/")
		if !ok || prov == "" || model == "" {
			v.errorf(f.key, p, "model keys are provider/model, such as deepseek/deepseek-chat (got %q)", key)
		} else {
			v.modelRefs = append(v.modelRefs, provRef{prov, f.key, p})
		}
		if isNull(f.val) {
			v.errorf(f.key, p, "needs at least one of %s", strings.Join(limitsSchema.keys(), ", "))
			continue
		}
		var l ModelLimits
		limitsSchema.decode(v, f.val, p, &l)
		g.Models[key] = l
	}
}
