package balance

import (
	"errors"
	"fmt"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
)

// SpecFromConfig turns one `balances:` entry into a Spec: the script runs in the
// config file's directory (c.Dir), and a wasm module path is resolved against it.
// The process environment, HTTP client, logger and module host stay unset (their
// defaults).
func SpecFromConfig(c *config.Config, b config.Balance) Spec {
	s := Spec{
		Provider:  b.Provider,
		Dir:       c.Dir,
		Script:    b.Script,
		APIKeyEnv: b.APIKeyEnv,
		Env:       b.Env,
		Timeout:   b.Timeout,
	}
	if h := b.HTTP; h != nil {
		s.HTTP = &HTTPSpec{URL: h.URL, Headers: h.Headers, Remaining: h.Remaining, Windows: h.Windows, ResetsAt: h.ResetsAt}
	}
	if w := b.Wasm; w != nil {
		s.Wasm = &WasmSpec{Module: c.Resolve(w.Module), URL: w.URL, Headers: w.Headers, Config: w.Config}
	}
	return s
}

// BuildOptions are what FromConfig and SetFromConfig give every source besides
// its config entry. The zero value builds the script and http kinds on the system
// clock, discarding logs.
type BuildOptions struct {
	// Clock stamps readings and times refreshes; nil: the system clock.
	Clock engine.Clock
	// Logger is the parent logger; each source logs as
	// Named("balance").With("source", provider). nil discards.
	Logger hclog.Logger
	// Modules loads the modules of "wasm" sources (see Spec.Modules); nil: a
	// "wasm" entry fails to build.
	Modules ModuleHost
}

// FromConfig builds the source of c.Balances[i], wrapped in a Cached with the
// entry's refresh and timeout. A construction error names the entry:
// "balances[2].http.remaining: compile …", and wraps ErrInvalid.
func FromConfig(c *config.Config, i int, o BuildOptions) (*Cached, error) {
	if i < 0 || i >= len(c.Balances) {
		return nil, fmt.Errorf("balance: no balances[%d] (have %d)", i, len(c.Balances))
	}
	b := c.Balances[i]
	logger := o.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("balance").With("source", b.Provider)
	spec := SpecFromConfig(c, b)
	spec.Logger = logger
	spec.Modules = o.Modules
	src, err := New(spec)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, &FieldError{Field: fmt.Sprintf("balances[%d].%s", i, fe.Field), Err: fe.Err}
		}
		return nil, fmt.Errorf("balances[%d]: %w", i, err)
	}
	return NewCached(src, CacheOptions{Refresh: b.Refresh, Timeout: spec.timeout(), Clock: o.Clock, Logger: logger}), nil
}

// SetFromConfig builds every balance source of c into a Set, reporting every entry
// that fails (errors.Join), not just the first. When one fails, those built are
// closed. Close the Set when done with it.
func SetFromConfig(c *config.Config, o BuildOptions) (*Set, error) {
	var (
		errs      []error
		providers []string
		sources   []*Cached
	)
	for i, b := range c.Balances {
		src, err := FromConfig(c, i, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		providers = append(providers, b.Provider)
		sources = append(sources, src)
	}
	if len(errs) == 0 {
		set, err := NewSet(providers, sources)
		if err == nil {
			return set, nil
		}
		errs = append(errs, err)
	}
	for _, src := range sources { // built, but never handed out
		src.Close()
	}
	return nil, errors.Join(errs...)
}
