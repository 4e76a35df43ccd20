// Package sim drives the real admission engine on a virtual clock against a
// simulated provider with a hidden TPM/RPM limit (one of four limit models, with
// network delay, other clients on the same key and optional rate-limit headers),
// and reports it against an oracle and a naive-retry baseline. docs/sim.md
// describes the model and every scenario key. Two simulated hours take well under a second: it is a
// discrete-event simulation, nothing sleeps.
package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/gate"

	"gopkg.in/yaml.v3"
)

// Scenario describes one simulated run. Keys a file leaves out keep
// DefaultScenario's values. Every key, with its default:
//
//	seed: 1                  # one seed draws every session's calls, identically in every mode
//	duration: 2h             # simulated time (at most 720h)
//	window: 60s              # the provider's limit window, and the gate's
//	sessions: 32             # closed-loop sessions: think, call, wait for the answer, think …
//	demand: 1.5              # offered load ÷ the binding true limit (TPM, RPM or OTPM, whichever binds first)
//	provider:                # the hidden truth
//	  model: sliding-arrival # sliding-arrival | sliding-completion | token-bucket | fixed-window (see LimitModels)
//	  tpm: 200000            # tokens per window (input + output, the whole cost of a call)
//	  rpm: 600               # requests per window
//	  otpm: 0                # output tokens per window (Anthropic's OTPM; 0: none), in a sliding window
//	                         #   of their own: a call's max_tokens when it arrives (without one, its
//	                         #   output as the provider knows it: all deciding whole, none deciding
//	                         #   known), corrected to what it wrote once answered; checked before tpm
//	                         #   and rpm, and its 429s name it, as Anthropic's do
//	  retryAfter: 60s        # the Retry-After a 429 carries
//	  computeRetryAfter: false # true: Retry-After is the real time until the refused call would fit,
//	                         #   rounded up to whole seconds (≥ 1 s); retryAfter when it never fits
//	  headers: false         # true: each successful answer carries x-ratelimit-limit/remaining-tokens/-requests
//	                         #   (per minute); the gate calibrates from them as the proxy does
//	  headersAt: completion  # or arrival: the figures are stated as the call completes, or as the
//	                         #   provider admits it (OpenAI's reservation), carried back with the answer
//	  namesLimit: false      # true: a 429 says which limit refused (tokens or requests); false: the gate
//	                         #   is told nothing about the axis
//	  statesLimit: false     # true: a 429 states the limit that refused, per minute, in OpenAI's words;
//	                         #   the gate adopts it as a stated limit
//	  decides: whole         # or known: a call is decided on its input and max_tokens at arrival, its
//	                         #   output counted once written (whole: on its whole cost, output included)
//	network:                 # each one-way trip between gate and provider takes delay + U[0, jitter)
//	  delay: 5ms             #   admission → the provider's count, and the answer or 429 → the gate
//	  jitter: 10ms
//	response:                # time the provider takes to answer a call: base + perOutputToken × output
//	  base: 500ms
//	  perOutputToken: 10ms
//	outside:                 # another client spending the same key, not through the gate
//	  share: 0               # fraction of the true TPM it spends (0 = none), in calls of callTokens
//	  pattern: smooth        # smooth: one call every callTokens ÷ (share × tpm) of a window;
//	                         #   bursts: every `every`, all that span's calls at the same instant
//	  callTokens: 2000       # the size of each outside call, at most tpm; at most one call a
//	                         #   millisecond, and fewer calls a window than rpm
//	  every: 60s             # bursts only: the burst period (default: the window), at least 1ms,
//	                         #   each burst at least 1 token
//	                         # a refused outside call is sent again 1 s later until it passes
//	  warm: false            # true: it was already spending before the run, so the provider's
//	                         #   window starts with its last window of calls (not counted as served)
//	  until: 0s              # it stops spending this long into the run (0: never); from then on
//	                         #   the capacity left to the gate is the whole limit
//	  outputShare: 0         # the fraction of provider.otpm its calls write (0: none), a part of
//	                         #   each call's tokens: at most share × tpm ÷ otpm
//	gate:                    # the gate's configured start, possibly wrong
//	  start: 1.0             # a multiple of the truth for both tpm and rpm (when tpm/rpm are not given);
//	                         #   positive (0 in a Scenario value means unset: 1.0)
//	  tpm: 0                 # absolute start in tokens per window; overrides start
//	  rpm: 0                 # absolute start in requests per window; overrides start
//	  safetyFactor: 0        # a hard cap on the share of the budget spent, in (0, 1]; 0: the gate
//	                         #   derives its margin
//	  pace: 3                # the admission's settings, as in the config's gate: section
//	  paceBurst: 0.07        #   (unset: the gate's defaults)
//	  marginSigmas: 5
//	  countsAt: learn        # or arrival / completion: tell the gate how the provider counts (the
//	                         #   oracle is told the truth either way)
//	  decides: whole         # or known: tell the gate the provider decides a call on its input and
//	                         #   max_tokens (the oracle is told provider.decides either way)
//	  windows: sliding       # or fixed: tell the gate the provider counts in clock-aligned windows
//	                         #   (the oracle is told the truth either way)
//	  otpm: 0                # the output limit per window the gate is told, as a model's otpm in the
//	                         #   config (0: not told; it learns one from the 429s about the output,
//	                         #   or from the headers; the oracle is told provider.otpm)
//	promptTokens: {median: 3000, p99: 20000}  # lognormal input size
//	outputTokens: {median: 400, p99: 3000}    # lognormal output size
//	maxTokensShare: 0.1      # share of calls that send max_tokens (the gate reserves it; the output is
//	                         #   the drawn size capped at maxTokens)
//	maxTokens: 4096          # the max_tokens those calls send
//
// The provider counts a call's input plus its real output (not max_tokens).
// Utilization is reported against the true limit; see Metrics.
type Scenario struct {
	// Trace, when set, receives one line per gate event that moves what the
	// gate learned (429s, learner steps, count-mode switches) in gate mode. Not
	// a scenario key: `gatectl sim --trace` sets it.
	Trace io.Writer `yaml:"-" json:"-"`

	Seed     uint64   `yaml:"seed" json:"seed"`
	Duration Duration `yaml:"duration" json:"duration"`
	Window   Duration `yaml:"window" json:"window"`
	Sessions int      `yaml:"sessions" json:"sessions"`
	// Demand is the offered load ÷ the binding true limit: 1.5 offers half again
	// what the provider allows.
	Demand         float64      `yaml:"demand" json:"demand"`
	Provider       ProviderSpec `yaml:"provider" json:"provider"`
	Network        NetworkSpec  `yaml:"network" json:"network"`
	Response       ResponseSpec `yaml:"response" json:"response"`
	Outside        OutsideSpec  `yaml:"outside" json:"outside"`
	Gate           GateSpec     `yaml:"gate" json:"gate"`
	Prompt         SizeSpec     `yaml:"promptTokens" json:"promptTokens"`
	Output         SizeSpec     `yaml:"outputTokens" json:"outputTokens"`
	MaxTokensShare float64      `yaml:"maxTokensShare" json:"maxTokensShare"`
	MaxTokens      int          `yaml:"maxTokens" json:"maxTokens"`
}

// ProviderSpec is the simulated provider's hidden truth and how it answers.
type ProviderSpec struct {
	Model string `yaml:"model" json:"model"`
	TPM   int    `yaml:"tpm" json:"tpm"`
	RPM   int    `yaml:"rpm" json:"rpm"`
	// OTPM is the output limit per window (0: none): see the key's comment
	// above and provider.out.
	OTPM              int      `yaml:"otpm" json:"otpm,omitempty"`
	RetryAfter        Duration `yaml:"retryAfter" json:"retryAfter"`
	ComputeRetryAfter bool     `yaml:"computeRetryAfter" json:"computeRetryAfter"`
	Headers           bool     `yaml:"headers" json:"headers"`
	NamesLimit        bool     `yaml:"namesLimit" json:"namesLimit"`
	StatesLimit       bool     `yaml:"statesLimit" json:"statesLimit"`
	// HeadersAt is when the headers' figures are stated: HeadersAtCompletion
	// ("") or HeadersAtArrival.
	HeadersAt string `yaml:"headersAt" json:"headersAt,omitempty"`
	// Decides is what decides a call at arrival: DecidesWhole (""; its whole
	// cost) or DecidesKnown (its input and max_tokens).
	Decides string `yaml:"decides" json:"decides,omitempty"`
}

// NetworkSpec is the one-way delay between the gate and the provider.
type NetworkSpec struct {
	Delay  Duration `yaml:"delay" json:"delay"`
	Jitter Duration `yaml:"jitter" json:"jitter"`
}

// ResponseSpec is how long the provider takes to answer a call.
type ResponseSpec struct {
	Base           Duration `yaml:"base" json:"base"`
	PerOutputToken Duration `yaml:"perOutputToken" json:"perOutputToken"`
}

// Outside patterns.
const (
	OutsideSmooth = "smooth"
	OutsideBursts = "bursts"
)

// OutsideSpec is another client spending the same key without the gate.
type OutsideSpec struct {
	Share      float64  `yaml:"share" json:"share"`
	Pattern    string   `yaml:"pattern" json:"pattern"`
	CallTokens int      `yaml:"callTokens" json:"callTokens"`
	Every      Duration `yaml:"every" json:"every"`
	// Warm: the client was already spending when the run starts, so the
	// provider's window holds its last window of calls at the start (else it
	// starts with the run, and its share of the window fills during the first).
	Warm bool `yaml:"warm" json:"warm"`
	// Until: the client stops spending this long into the run (0: never), so
	// the capacity left to the gate is the whole limit from then on.
	Until Duration `yaml:"until" json:"until"`
	// OutputShare: the fraction of provider.otpm the client's calls write
	// (0: none), a part of each call's tokens.
	OutputShare float64 `yaml:"outputShare" json:"outputShare,omitempty"`
}

// GateSpec is the gate's configured start, possibly wrong.
type GateSpec struct {
	Start        float64 `yaml:"start" json:"start"`
	TPM          int     `yaml:"tpm" json:"tpm"`
	RPM          int     `yaml:"rpm" json:"rpm"`
	SafetyFactor float64 `yaml:"safetyFactor" json:"safetyFactor"`
	// The admission's own settings, as in the config's gate: section; unset
	// keeps the gate's defaults. For trying a setting before changing it in
	// the config (and for measuring what each costs).
	Pace         *float64 `yaml:"pace,omitempty" json:"pace,omitempty"`
	PaceBurst    *float64 `yaml:"paceBurst,omitempty" json:"paceBurst,omitempty"`
	MarginSigmas *float64 `yaml:"marginSigmas,omitempty" json:"marginSigmas,omitempty"`
	// CountsAt tells the gate when the provider counts a call, as a model's
	// countsAt in the config does: "arrival" or "completion" (unset or "learn":
	// the gate learns it). The oracle is told the truth either way.
	CountsAt string `yaml:"countsAt,omitempty" json:"countsAt,omitempty"`
	// Decides tells the gate what the provider decides a call on, as a
	// model's decides in the config does: "known" (its input and max_tokens)
	// or "whole" (unset: the gate keeps a margin for the outputs in flight).
	// The oracle is told the truth (provider.decides) either way.
	Decides string `yaml:"decides,omitempty" json:"decides,omitempty"`
	// Windows tells the gate how the provider's window moves, as a model's
	// windows in the config does: "fixed" (clock-aligned windows) or
	// "sliding" (unset: sliding, unless the 429s' computed waits end at the
	// edges, provider.computeRetryAfter). The oracle is told the truth either
	// way.
	Windows string `yaml:"windows,omitempty" json:"windows,omitempty"`
	// OTPM is the output limit per window the gate is told, as a model's otpm
	// in the config does (0: not told). The oracle is told provider.otpm.
	OTPM int `yaml:"otpm,omitempty" json:"otpm,omitempty"`
}

// applyAdmission sets the admission settings the scenario gives on cfg.
func (g GateSpec) applyAdmission(cfg *gate.Config) {
	if g.Pace != nil {
		cfg.Pace = *g.Pace
	}
	if g.PaceBurst != nil {
		cfg.PaceBurst = *g.PaceBurst
	}
	if g.MarginSigmas != nil {
		cfg.MarginSigmas = *g.MarginSigmas
	}
}

// StartTPM is the gate's configured TPM: tpm when given, else start × the truth.
func (s Scenario) StartTPM() int {
	if s.Gate.TPM > 0 {
		return s.Gate.TPM
	}
	return max(1, int(math.Round(s.gateStart()*float64(s.Provider.TPM))))
}

// StartRPM is the gate's configured RPM: rpm when given, else start × the truth.
func (s Scenario) StartRPM() int {
	if s.Gate.RPM > 0 {
		return s.Gate.RPM
	}
	return max(1, int(math.Round(s.gateStart()*float64(s.Provider.RPM))))
}

func (s Scenario) gateStart() float64 {
	if s.Gate.Start > 0 {
		return s.Gate.Start
	}
	return 1
}

// outsidePeriod is the outside client's schedule step: one call (smooth) or one
// burst (Validate keeps it at least minOutsidePeriod).
func (s Scenario) outsidePeriod() time.Duration {
	o := s.Outside
	if o.Pattern == OutsideBursts {
		if o.Every > 0 {
			return time.Duration(o.Every)
		}
		return time.Duration(s.Window)
	}
	return time.Duration(s.smoothOutsidePeriod())
}

// smoothOutsidePeriod is the time between two smooth outside calls, in
// nanoseconds: callTokens ÷ (share × tpm) of a window.
func (s Scenario) smoothOutsidePeriod() float64 {
	perWindow := s.Outside.Share * float64(s.Provider.TPM) / float64(s.Outside.CallTokens)
	return float64(s.Window) / perWindow
}

// outsideBurstTokens is what one outside burst spends: share × tpm × every ÷
// window, rounded.
func (s Scenario) outsideBurstTokens() int64 {
	return int64(math.Round(s.Outside.Share * float64(s.Provider.TPM) * float64(s.outsidePeriod()) / float64(s.Window)))
}

// minOutsidePeriod is the shortest step Validate lets the outside client's
// schedule take: a call (smooth) or a burst at most every millisecond.
const minOutsidePeriod = time.Millisecond

// validateOutside names the outside client's keys that would make it send
// nothing, or calls too fast to simulate: its schedule steps at least
// minOutsidePeriod apart, each burst at least a token, and a burst's calls
// no more than one a millisecond.
func (s Scenario) validateOutside() error {
	o := s.Outside
	if o.Share == 0 {
		return nil
	}
	if o.Pattern != OutsideBursts {
		switch p := s.smoothOutsidePeriod(); {
		case p < float64(minOutsidePeriod):
			least := int(math.Ceil(float64(minOutsidePeriod) * o.Share * float64(s.Provider.TPM) / float64(s.Window)))
			return fmt.Errorf("scenario.outside.callTokens: the outside client would send %.3g calls a millisecond (share × tpm ÷ callTokens a window), more than one: callTokens must be at least %d (got %d)",
				float64(minOutsidePeriod)/p, least, o.CallTokens)
		case p >= math.MaxInt64:
			return fmt.Errorf("scenario.outside.share: %g is too small: the outside client would send a call every %.3g hours", o.Share, p/float64(time.Hour))
		}
		return s.validateOutsideRequests()
	}
	period := s.outsidePeriod()
	if period < minOutsidePeriod {
		return fmt.Errorf("scenario.outside.every: the burst period (unset: the window) must be at least %s (got %s)", minOutsidePeriod, period)
	}
	burst := s.outsideBurstTokens()
	if burst < 1 {
		return fmt.Errorf("scenario.outside.every: each burst must spend at least 1 token (share × tpm × every ÷ window rounds to %d with every %s)", burst, period)
	}
	if calls := (burst + int64(o.CallTokens) - 1) / int64(o.CallTokens); calls > int64(period/minOutsidePeriod) {
		least := (burst + int64(period/minOutsidePeriod) - 1) / int64(period/minOutsidePeriod)
		return fmt.Errorf("scenario.outside.callTokens: each burst would send %d calls in %s, more than one a millisecond: callTokens must be at least %d (got %d)",
			calls, period, least, o.CallTokens)
	}
	return s.validateOutsideRequests()
}

// validateOutsideRequests refuses an outside client that would take every
// request the provider allows: its refused calls would come back every second
// and pile up without end, and the oracle would be left no request.
func (s Scenario) validateOutsideRequests() error {
	perWindow := s.Outside.Share * float64(s.Provider.TPM) / float64(s.Outside.CallTokens)
	if math.Ceil(perWindow) >= float64(s.Provider.RPM) {
		return fmt.Errorf("scenario.outside.callTokens: the outside client would send %.4g calls a window (share × tpm ÷ callTokens), leaving the sessions none of provider.rpm (%d) (got %d)",
			perWindow, s.Provider.RPM, s.Outside.CallTokens)
	}
	return nil
}

// outputLeft is the output limit less what the outside client writes of it:
// the most a session call can write and still fit.
func (s Scenario) outputLeft() int64 {
	return int64(float64(s.Provider.OTPM) * (1 - s.Outside.OutputShare))
}

// outsideCallOutput is the output an outside call of tokens writes.
func (s Scenario) outsideCallOutput(tokens float64) float64 {
	return tokens * s.Outside.OutputShare * float64(s.Provider.OTPM) / (s.Outside.Share * float64(s.Provider.TPM))
}

// SizeSpec is a lognormal size given by its median and 99th percentile.
type SizeSpec struct {
	Median float64 `yaml:"median" json:"median"`
	P99    float64 `yaml:"p99" json:"p99"`
}

// Duration is a time.Duration written as a Go duration string ("2h", "60s").
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 60s, 2h): %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// DefaultScenario: 32 sessions offering 1.5× a 200k TPM / 600 RPM limit for two
// hours on a sliding window counted at arrival, with 5–15 ms of network delay each
// way, 10% of calls sending max_tokens, no rate-limit headers, the gate configured
// at the truth.
func DefaultScenario() Scenario {
	return Scenario{
		Seed:     1,
		Duration: Duration(2 * time.Hour),
		Window:   Duration(time.Minute),
		Sessions: 32,
		Demand:   1.5,
		Provider: ProviderSpec{Model: LimitSlidingArrival, TPM: 200_000, RPM: 600, RetryAfter: Duration(60 * time.Second)},
		Network:  NetworkSpec{Delay: Duration(5 * time.Millisecond), Jitter: Duration(10 * time.Millisecond)},
		Response: ResponseSpec{Base: Duration(500 * time.Millisecond), PerOutputToken: Duration(10 * time.Millisecond)},
		Outside:  OutsideSpec{Pattern: OutsideSmooth, CallTokens: 2000},
		Gate:     GateSpec{},
		Prompt:   SizeSpec{Median: 3000, P99: 20000},
		Output:   SizeSpec{Median: 400, P99: 3000},

		MaxTokensShare: 0.1,
		MaxTokens:      4096,
	}
}

// ParseScenario reads a YAML scenario strictly (unknown keys are errors) over the
// defaults.
func ParseScenario(data []byte) (Scenario, error) {
	s := DefaultScenario()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	if len(root.Content) == 0 {
		return s, fmt.Errorf("scenario: the file holds no keys (an empty scenario is the built-in one: leave --scenario out)")
	}
	// yaml.v3 decodes 3.99 into an int as 3: a count that is not whole is a
	// mistake to name, not to round.
	if err := wholeCounts(root.Content[0], reflect.TypeOf(s), "scenario"); err != nil {
		return s, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	// A Scenario holds an unset gate.start as 0 (the truth, 1.0): a file that
	// writes 0 means something else, and is told so.
	if n := mappingValue(root.Content[0], "gate", "start"); n != nil && s.Gate.Start == 0 {
		return s, fmt.Errorf("scenario: line %d: scenario.gate.start: must be positive (got %s); leave it out to start at the truth (1.0)", n.Line, n.Value)
	}
	return s, s.Validate()
}

// mappingValue is the node at path in the mapping n, or nil.
func mappingValue(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// wholeCounts refuses a number with a fraction where t, the type n decodes
// into, wants an integer, naming its path and line.
func wholeCounts(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
		return nil // decodes itself (a Duration)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32, reflect.Uint:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!float" {
			return fmt.Errorf("scenario: line %d: %s: must be a whole number (got %s)", n.Line, path, n.Value)
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // the decoder names the mismatch
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			for j := range t.NumField() {
				f := t.Field(j)
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
					if err := wholeCounts(n.Content[i+1], f.Type, path+"."+key); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// MaxSessions bounds scenario.sessions: each session is a few hundred bytes
// of state, and a hundred million of them ran the simulator out of memory
// instead of answering.
const MaxSessions = 100000

// Validate names the first illegal value.
func (s Scenario) Validate() error {
	switch {
	case s.Duration <= 0:
		return fmt.Errorf("scenario.duration: must be positive")
	case s.Window <= 0:
		return fmt.Errorf("scenario.window: must be positive")
	case s.Sessions <= 0 || s.Sessions > MaxSessions:
		return fmt.Errorf("scenario.sessions: must be in [1, %d] (got %d)", MaxSessions, s.Sessions)
	case s.Demand <= 0:
		return fmt.Errorf("scenario.demand: must be positive (got %g)", s.Demand)
	case s.Provider.Model == "":
		return fmt.Errorf("scenario.provider.model: must be set; choices are %v", LimitModels)
	case s.Provider.TPM <= 0 || s.Provider.RPM <= 0:
		return fmt.Errorf("scenario.provider: tpm and rpm must be positive")
	case s.Provider.OTPM < 0 || s.Gate.OTPM < 0:
		return fmt.Errorf("scenario: provider.otpm and gate.otpm must not be negative (0: none)")
	case s.Provider.OTPM > 0 && s.MaxTokensShare > 0 && int64(s.MaxTokens) > s.outputLeft():
		return fmt.Errorf("scenario.maxTokens: %d is more than the output limit leaves the sessions (%d: provider.otpm less outside.outputShare): a call sending it could never fit", s.MaxTokens, s.outputLeft())
	case s.Provider.RetryAfter < 0:
		return fmt.Errorf("scenario.provider.retryAfter: must not be negative")
	case s.Gate.TPM < 0 || s.Gate.RPM < 0 || s.Gate.Start < 0:
		return fmt.Errorf("scenario.gate: start, tpm and rpm must not be negative")
	case s.Gate.SafetyFactor < 0 || s.Gate.SafetyFactor > 1:
		return fmt.Errorf("scenario.gate.safetyFactor: must be in (0, 1], or 0 to let the gate derive its margin (got %g)", s.Gate.SafetyFactor)
	case s.Network.Delay < 0 || s.Network.Jitter < 0:
		return fmt.Errorf("scenario.network: delay and jitter must not be negative")
	case s.Response.Base < 0 || s.Response.PerOutputToken < 0:
		return fmt.Errorf("scenario.response: base and perOutputToken must not be negative")
	case s.Outside.Share < 0 || s.Outside.Share >= 1:
		return fmt.Errorf("scenario.outside.share: must be in [0, 1) (got %g)", s.Outside.Share)
	case s.Outside.Pattern != OutsideSmooth && s.Outside.Pattern != OutsideBursts:
		return fmt.Errorf("scenario.outside.pattern: %q is invalid; choices are [%s %s]", s.Outside.Pattern, OutsideSmooth, OutsideBursts)
	case s.Outside.Share > 0 && (s.Outside.CallTokens <= 0 || s.Outside.CallTokens > s.Provider.TPM):
		return fmt.Errorf("scenario.outside.callTokens: must be in [1, provider.tpm] (got %d)", s.Outside.CallTokens)
	case s.Outside.Every < 0:
		return fmt.Errorf("scenario.outside.every: must not be negative")
	case s.Outside.Until < 0:
		return fmt.Errorf("scenario.outside.until: must not be negative (got %s)", time.Duration(s.Outside.Until))
	case s.Outside.Until > 0 && s.Outside.Share == 0:
		return fmt.Errorf("scenario.outside.until: there is no outside client to stop (outside.share is 0)")
	case s.Outside.OutputShare < 0 || s.Outside.OutputShare >= 1:
		return fmt.Errorf("scenario.outside.outputShare: must be in [0, 1) (got %g)", s.Outside.OutputShare)
	case s.Outside.OutputShare > 0 && (s.Outside.Share == 0 || s.Provider.OTPM == 0):
		return fmt.Errorf("scenario.outside.outputShare: needs an outside client (outside.share) and an output limit (provider.otpm)")
	case s.Outside.OutputShare*float64(s.Provider.OTPM) > s.Outside.Share*float64(s.Provider.TPM):
		return fmt.Errorf("scenario.outside.outputShare: the client would write more output (%g × otpm) than it spends tokens (%g × tpm): at most %.4g",
			s.Outside.OutputShare, s.Outside.Share, s.Outside.Share*float64(s.Provider.TPM)/float64(s.Provider.OTPM))
	case s.Outside.OutputShare > 0 && s.outsideCallOutput(float64(s.Outside.CallTokens)) < 10:
		return fmt.Errorf("scenario.outside.outputShare: each outside call would write %.3g output tokens (callTokens × outputShare × otpm ÷ (share × tpm)), rounded per call: at least 10 (raise callTokens or outputShare)",
			s.outsideCallOutput(float64(s.Outside.CallTokens)))
	case s.MaxTokensShare < 0 || s.MaxTokensShare > 1:
		return fmt.Errorf("scenario.maxTokensShare: must be in [0, 1] (got %g)", s.MaxTokensShare)
	case s.MaxTokensShare > 0 && s.MaxTokens <= 0:
		return fmt.Errorf("scenario.maxTokens: must be positive when maxTokensShare > 0 (got %d)", s.MaxTokens)
	case s.Prompt.Median <= 0 || s.Prompt.P99 < s.Prompt.Median:
		return fmt.Errorf("scenario.promptTokens: need 0 < median ≤ p99")
	case s.Output.Median <= 0 || s.Output.P99 < s.Output.Median:
		return fmt.Errorf("scenario.outputTokens: need 0 < median ≤ p99")
	case s.Gate.CountsAt != "" && s.Gate.CountsAt != gate.CountsAtArrival && s.Gate.CountsAt != gate.CountsAtCompletion && s.Gate.CountsAt != gate.CountsAtLearn:
		return fmt.Errorf("scenario.gate.countsAt: %q is invalid; choices are [%s %s %s]", s.Gate.CountsAt, gate.CountsAtArrival, gate.CountsAtCompletion, gate.CountsAtLearn)
	case s.Gate.Windows != "" && s.Gate.Windows != gate.WindowsSliding && s.Gate.Windows != gate.WindowsFixed:
		return fmt.Errorf("scenario.gate.windows: %q is invalid; choices are [%s %s]", s.Gate.Windows, gate.WindowsFixed, gate.WindowsSliding)
	case s.Gate.Decides != "" && s.Gate.Decides != gate.DecidesWhole && s.Gate.Decides != gate.DecidesKnown:
		return fmt.Errorf("scenario.gate.decides: %q is invalid; choices are [%s %s]", s.Gate.Decides, gate.DecidesKnown, gate.DecidesWhole)
	case s.Provider.Decides != "" && s.Provider.Decides != DecidesWhole && s.Provider.Decides != DecidesKnown:
		return fmt.Errorf("scenario.provider.decides: %q is invalid; choices are [%s %s]", s.Provider.Decides, DecidesWhole, DecidesKnown)
	case s.Provider.HeadersAt != "" && s.Provider.HeadersAt != HeadersAtCompletion && s.Provider.HeadersAt != HeadersAtArrival:
		return fmt.Errorf("scenario.provider.headersAt: %q is invalid; choices are [%s %s]", s.Provider.HeadersAt, HeadersAtCompletion, HeadersAtArrival)
	case time.Duration(s.Duration) > 30*24*time.Hour:
		return fmt.Errorf("scenario.duration: at most 720h (got %s)", time.Duration(s.Duration))
	}
	if err := s.validateOutside(); err != nil {
		return err
	}
	cfg := gate.DefaultConfig()
	s.Gate.applyAdmission(&cfg)
	if err := cfg.Validate(); err != nil { // the gate's own ranges, named by the scenario's key
		return fmt.Errorf("scenario.%w", err)
	}
	if _, err := newLimiter(s.Provider.Model, 1, 1, time.Minute); err != nil {
		return err
	}
	return nil
}
