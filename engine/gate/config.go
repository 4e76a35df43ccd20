package gate

import (
	"errors"
	"fmt"
	"time"
)

// ModelLimits are a model's configured starting limits. A zero field inherits the
// gate's default.
type ModelLimits struct {
	TPM          int     // tokens per window: the learner's starting point, not the truth
	RPM          int     // requests per window
	SafetyFactor float64 // share of the budget the gate spends, (0, 1]
	// CountsAt is when the provider counts a call, when the user knows it:
	// CountsAtArrival or CountsAtCompletion, and the gate uses that view and
	// never switches. CountsAtLearn (or "", which inherits, down to learning)
	// has the gate learn it from where 429s fall.
	CountsAt string
	// Decides is what the provider decides a call on when it arrives, when
	// the user knows it. DecidesKnown: what it can know then — the input and
	// max_tokens (the input alone without one) — with the output counted once
	// written; the gate counts a call in flight the same way and keeps no
	// margin for outputs not yet written. DecidesWhole: the gate keeps that
	// margin, as if the provider could count an output at the call's
	// arrival. "" inherits, down to whole — unless the provider's rate-limit
	// headers show what it decides on (decides.go).
	Decides string
	// MaxTPM and MaxRPM are hard caps the user set, per window (0: none). The
	// learner starts at TPM and RPM and may probe above them — they are
	// guesses of what the provider allows — but never above a cap: a key
	// shared with other programs, or a spend the user wants bounded, is the
	// user's limit, not the provider's.
	MaxTPM int
	MaxRPM int
	// OTPM is a limit on output tokens alone, per window (Anthropic's OTPM,
	// per minute there; 0: none known). The gate holds each call's output —
	// its max_tokens while in flight, what it wrote once settled — under it,
	// apart from the token window (output.go). A limit the provider states
	// replaces it, and a 429 about the output sets one without it.
	OTPM int
	// Windows is how the provider's window moves, when the user knows it:
	// WindowsFixed, clock-aligned windows whose count restarts at each
	// multiple of the window since the Unix epoch (fixedwindow.go), or
	// WindowsSliding. "" inherits, down to sliding unless the provider's 429s
	// state waits that end at the edges (fixedwindow.go); WindowsSliding
	// turns that learning off.
	Windows string
}

// The provider's ways of counting a call (ModelLimits.CountsAt).
const (
	CountsAtArrival    = "arrival"
	CountsAtCompletion = "completion"
	CountsAtLearn      = "learn" // a model's way back to learning under defaults that set a view
)

// The ways a provider's window moves (ModelLimits.Windows).
const (
	WindowsSliding = "sliding"
	WindowsFixed   = "fixed"
)

// What the provider decides a call on at its arrival (ModelLimits.Decides).
const (
	DecidesWhole = "whole"
	DecidesKnown = "known"
)

// countView reports whether the user said how the provider counts, and whether
// it is at completion.
func (m ModelLimits) countView() (atCompletion, set bool) {
	switch m.CountsAt {
	case CountsAtArrival:
		return false, true
	case CountsAtCompletion:
		return true, true
	}
	return false, false
}

// Config configures the Ledger. The zero value is not usable: start from
// DefaultConfig.
type Config struct {
	Window              time.Duration // sliding window of the ledger (60s)
	SafetyFactor        float64       // share of the budget spent, (0, 1]; 0: derived (1% plus the pooled margin)
	MaxWait             time.Duration // longest admission wait before failing open (120s); must be ≥ Window
	FallbackCooldown    time.Duration // cooldown after a 429 without a hint (60s)
	OutputReserveTokens int           // output reserved when the request gives no max_tokens (8192)
	Learn               bool          // learn the true quota from 429 feedback
	Defaults            ModelLimits   // every model's start unless overridden (1,000,000 TPM, 60 RPM)
	Models              map[string]ModelLimits
	// MaxInFlightPerSession caps a session's admitted, unsettled requests on one
	// model; 0 means no cap.
	MaxInFlightPerSession int
	// Jitter is the largest extra fraction added to each wait, so that waiters
	// woken for the same drain time do not all retry at once (0.1).
	Jitter float64
	// CountGuard is the share of the window an entry stays in it past the window
	// (0.005), because a provider counts a call a little later than the gate
	// admits it; measured admission→429 delays raise it, up to 2% of the window.
	CountGuard float64
	// MarginSigmas is how many standard deviations of the calls in flight's
	// summed cost the budget keeps free (5). 0 keeps none.
	MarginSigmas float64
	// Pace spaces grants: tokens are granted at most at Pace × the token budget
	// per window, with a burst of PaceBurst × the budget at once (3 and 0.07).
	// Without it, the whole queue is granted in the instant the window drains,
	// while a provider that counted the previous calls a few milliseconds later
	// than the gate still holds them. Pace 0 turns pacing off.
	Pace      float64
	PaceBurst float64
	// MaxModels bounds the buckets (one per provider/model) the ledger keeps, so
	// that a client inventing model names cannot grow it without bound (1000).
	// Past it, a model the config does not list shares its provider's OtherModel
	// bucket; models listed under Models always get their own. 0: no bound.
	MaxModels int
}

// DefaultConfig returns the gate's defaults, the values of the config's gate:
// section when a key is left out. This is their one definition. SafetyFactor 0
// means the gate derives its margin (see bucket.factor and bucket.margin); a
// factor the user sets is a hard cap.
func DefaultConfig() Config {
	return Config{
		Window:              60 * time.Second,
		SafetyFactor:        0,
		CountGuard:          0.005,
		MarginSigmas:        5,
		Pace:                3,
		PaceBurst:           0.07,
		MaxWait:             120 * time.Second,
		FallbackCooldown:    60 * time.Second,
		OutputReserveTokens: 8192,
		Learn:               true,
		Defaults:            ModelLimits{TPM: DefaultTPM, RPM: DefaultRPM},
		Jitter:              0.1,
		MaxModels:           1000,
	}
}

// DefaultTPM and DefaultRPM are a model's limits when the config gives none:
// starts far above what most keys allow for tokens (the learner comes down
// from it at the first 429) and below it for requests (the probe climbs).
const (
	DefaultTPM = 1_000_000
	DefaultRPM = 60
)

// ErrMaxWaitBelowWindow is returned by Validate when MaxWait < Window: the gate
// could then never wait out one full window.
var ErrMaxWaitBelowWindow = errors.New("maxWait must be at least the window")

// Validate reports the first illegal value, naming its config key.
func (c Config) Validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("gate.window: must be positive (got %s)", c.Window)
	case c.MaxWait < c.Window:
		return fmt.Errorf("gate.maxWait: %w (maxWait %s < window %s)", ErrMaxWaitBelowWindow, c.MaxWait, c.Window)
	case c.SafetyFactor < 0 || c.SafetyFactor > 1:
		return fmt.Errorf("gate.safetyFactor: must be in (0, 1], or 0 to derive it (got %g)", c.SafetyFactor)
	case c.CountGuard < 0 || c.CountGuard > 0.02:
		return fmt.Errorf("gate.countGuard: must be in [0, 0.02] (got %g)", c.CountGuard)
	case c.MarginSigmas < 0 || c.MarginSigmas > 10:
		return fmt.Errorf("gate.marginSigmas: must be in [0, 10] (got %g)", c.MarginSigmas)
	case c.Pace < 0 || c.Pace > 10:
		return fmt.Errorf("gate.pace: must be in [0, 10], 0 for off (got %g)", c.Pace)
	case c.PaceBurst < 0 || c.PaceBurst > 1:
		return fmt.Errorf("gate.paceBurst: must be in [0, 1] (got %g)", c.PaceBurst)
	case c.FallbackCooldown < 0:
		return fmt.Errorf("gate.fallbackCooldown: must not be negative (got %s)", c.FallbackCooldown)
	case c.OutputReserveTokens < 0:
		return fmt.Errorf("gate.outputReserveTokens: must not be negative (got %d)", c.OutputReserveTokens)
	case c.Defaults.TPM <= 0 || c.Defaults.RPM <= 0:
		return fmt.Errorf("gate.defaults: tpm and rpm must be positive (got tpm %d, rpm %d)", c.Defaults.TPM, c.Defaults.RPM)
	case c.Defaults.MaxTPM < 0 || c.Defaults.MaxRPM < 0:
		return fmt.Errorf("gate.defaults: maxTpm and maxRpm must not be negative (got maxTpm %d, maxRpm %d)", c.Defaults.MaxTPM, c.Defaults.MaxRPM)
	case c.MaxInFlightPerSession < 0:
		return fmt.Errorf("gate.maxInFlightPerSession: must not be negative (got %d)", c.MaxInFlightPerSession)
	case c.MaxModels < 0:
		return fmt.Errorf("gate.maxModels: must not be negative (got %d)", c.MaxModels)
	case c.Jitter < 0 || c.Jitter > 1:
		return fmt.Errorf("gate.jitter: must be in [0, 1] (got %g)", c.Jitter)
	}
	if err := checkCountsAt("gate.defaults", c.Defaults.CountsAt); err != nil {
		return err
	}
	if err := checkDecides("gate.defaults", c.Defaults.Decides); err != nil {
		return err
	}
	if err := checkWindows("gate.defaults", c.Defaults.Windows); err != nil {
		return err
	}
	for k, m := range c.Models {
		if m.TPM < 0 || m.RPM < 0 || m.MaxTPM < 0 || m.MaxRPM < 0 || m.SafetyFactor < 0 || m.SafetyFactor > 1 {
			return fmt.Errorf("gate.models[%q]: tpm, rpm, maxTpm, maxRpm must not be negative and safetyFactor must be in (0, 1]", k)
		}
		if err := checkCountsAt(fmt.Sprintf("gate.models[%q]", k), m.CountsAt); err != nil {
			return err
		}
		if err := checkDecides(fmt.Sprintf("gate.models[%q]", k), m.Decides); err != nil {
			return err
		}
		if err := checkWindows(fmt.Sprintf("gate.models[%q]", k), m.Windows); err != nil {
			return err
		}
	}
	return nil
}

func checkCountsAt(where, v string) error {
	switch v {
	case "", CountsAtArrival, CountsAtCompletion, CountsAtLearn:
		return nil
	}
	return fmt.Errorf("%s.countsAt: must be %q, %q or %q (got %q)", where, CountsAtArrival, CountsAtCompletion, CountsAtLearn, v)
}

func checkWindows(where, v string) error {
	switch v {
	case "", WindowsSliding, WindowsFixed:
		return nil
	}
	return fmt.Errorf("%s.windows: must be %q or %q (got %q)", where, WindowsFixed, WindowsSliding, v)
}

func checkDecides(where, v string) error {
	switch v {
	case "", DecidesWhole, DecidesKnown:
		return nil
	}
	return fmt.Errorf("%s.decides: must be %q or %q (got %q)", where, DecidesKnown, DecidesWhole, v)
}

// tpmGiven reports whether model key's TPM is a figure the config gives — its
// own entry's, or defaults other than DefaultTPM — rather than the
// placeholder (a cap clamps the start, but says nothing of the provider).
func (c Config) tpmGiven(key string) bool {
	if m, ok := c.Models[key]; ok && m.TPM > 0 {
		return true
	}
	return c.Defaults.TPM != DefaultTPM
}

// Limits returns the effective limits of model key "provider/model": its entry in
// Models over Defaults over the gate's own SafetyFactor. Every field of the result
// is set. It is the one place limits are resolved; config and the ledger both use it.
func (c Config) Limits(key string) ModelLimits {
	l := c.Defaults
	if l.SafetyFactor == 0 {
		l.SafetyFactor = c.SafetyFactor
	}
	if m, ok := c.Models[key]; ok {
		if m.TPM > 0 {
			l.TPM = m.TPM
		}
		if m.RPM > 0 {
			l.RPM = m.RPM
		}
		if m.SafetyFactor > 0 {
			l.SafetyFactor = m.SafetyFactor
		}
		if m.CountsAt != "" {
			l.CountsAt = m.CountsAt
		}
		if m.Decides != "" {
			l.Decides = m.Decides
		}
		if m.Windows != "" {
			l.Windows = m.Windows
		}
		if m.MaxTPM > 0 {
			l.MaxTPM = m.MaxTPM
		}
		if m.MaxRPM > 0 {
			l.MaxRPM = m.MaxRPM
		}
		if m.OTPM > 0 {
			l.OTPM = m.OTPM
		}
	}
	// A start above a cap starts at the cap.
	if l.MaxTPM > 0 {
		l.TPM = min(l.TPM, l.MaxTPM)
	}
	if l.MaxRPM > 0 {
		l.RPM = min(l.RPM, l.MaxRPM)
	}
	return l
}
