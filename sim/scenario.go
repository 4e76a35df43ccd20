// Package sim drives the real admission engine on a virtual clock against a
// simulated provider with a hidden TPM/RPM limit, and reports it against an oracle
// and a naive-retry baseline. Two simulated hours take well under a second: it is a
// discrete-event simulation, nothing sleeps.
package sim

import (
	"bytes"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Scenario describes one simulated run. Zero fields take DefaultScenario's values.
type Scenario struct {
	Seed     uint64   `yaml:"seed" json:"seed"`
	Duration Duration `yaml:"duration" json:"duration"`
	Window   Duration `yaml:"window" json:"window"`
	Sessions int      `yaml:"sessions" json:"sessions"`
	// Demand is the offered load ÷ the true limit: 1.5 offers half again what the
	// provider allows.
	Demand   float64      `yaml:"demand" json:"demand"`
	Provider ProviderSpec `yaml:"provider" json:"provider"`
	Gate     GateSpec     `yaml:"gate" json:"gate"`
	Prompt   SizeSpec     `yaml:"promptTokens" json:"promptTokens"`
	Output   SizeSpec     `yaml:"outputTokens" json:"outputTokens"`
}

// ProviderSpec is the simulated provider's hidden truth.
type ProviderSpec struct {
	TPM        int      `yaml:"tpm" json:"tpm"`
	RPM        int      `yaml:"rpm" json:"rpm"`
	RetryAfter Duration `yaml:"retryAfter" json:"retryAfter"`
}

// GateSpec is the gate's configured start, possibly wrong.
type GateSpec struct {
	TPM          int     `yaml:"tpm" json:"tpm"`
	RPM          int     `yaml:"rpm" json:"rpm"`
	SafetyFactor float64 `yaml:"safetyFactor" json:"safetyFactor"`
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
// hours, the gate configured at the truth.
func DefaultScenario() Scenario {
	return Scenario{
		Seed:     1,
		Duration: Duration(2 * time.Hour),
		Window:   Duration(time.Minute),
		Sessions: 32,
		Demand:   1.5,
		Provider: ProviderSpec{TPM: 200_000, RPM: 600, RetryAfter: Duration(60 * time.Second)},
		Gate:     GateSpec{TPM: 200_000, RPM: 600, SafetyFactor: 0.85},
		Prompt:   SizeSpec{Median: 3000, P99: 20000},
		Output:   SizeSpec{Median: 400, P99: 3000},
	}
}

// ParseScenario reads a YAML scenario strictly (unknown keys are errors) over the
// defaults.
func ParseScenario(data []byte) (Scenario, error) {
	s := DefaultScenario()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	return s, s.Validate()
}

// Validate names the first illegal value.
func (s Scenario) Validate() error {
	switch {
	case s.Duration <= 0:
		return fmt.Errorf("scenario.duration: must be positive")
	case s.Window <= 0:
		return fmt.Errorf("scenario.window: must be positive")
	case s.Sessions <= 0:
		return fmt.Errorf("scenario.sessions: must be positive (got %d)", s.Sessions)
	case s.Demand <= 0:
		return fmt.Errorf("scenario.demand: must be positive (got %g)", s.Demand)
	case s.Provider.TPM <= 0 || s.Provider.RPM <= 0:
		return fmt.Errorf("scenario.provider: tpm and rpm must be positive")
	case s.Gate.TPM <= 0 || s.Gate.RPM <= 0:
		return fmt.Errorf("scenario.gate: tpm and rpm must be positive")
	case s.Gate.SafetyFactor <= 0 || s.Gate.SafetyFactor > 1:
		return fmt.Errorf("scenario.gate.safetyFactor: must be in (0, 1] (got %g)", s.Gate.SafetyFactor)
	case s.Prompt.Median <= 0 || s.Prompt.P99 < s.Prompt.Median:
		return fmt.Errorf("scenario.promptTokens: need 0 < median ≤ p99")
	case s.Output.Median <= 0 || s.Output.P99 < s.Output.Median:
		return fmt.Errorf("scenario.outputTokens: need 0 < median ≤ p99")
	case time.Duration(s.Duration) > 30*24*time.Hour:
		return fmt.Errorf("scenario.duration: at most 720h (got %s)", time.Duration(s.Duration))
	}
	return nil
}
