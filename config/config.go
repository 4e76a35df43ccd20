package config

import (
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
)

// Config is one complete, validated configuration: the file's values over the
// defaults. It is immutable once returned by Load, Parse or Default (never change
// it or anything it holds), and therefore safe to share between goroutines.
// Relative paths are kept as written; Resolve turns them into paths under Dir.
type Config struct {
	Path string // file it came from; "" for the embedded default
	Dir  string // directory relative paths resolve against (the config file's dir)

	Listen   string
	Server   Server
	Upstream Upstream
	API      API
	Proxy    Proxy
	StateDir string
	Log      Log

	Providers map[string]Provider
	// DefaultProviders: Providers are the embedded default's well-known ones —
	// this is the embedded default, or its file has no providers section. A hot
	// reload that would turn a file's own providers into these is refused (see
	// snapshot.Manager.Reload).
	DefaultProviders bool

	Gate  Gate
	Retry Retry
	Store Store

	Classifiers  []ClassifierRef // in order; the built-in rules always decide last
	PluginsDir   string
	PluginLimits PluginLimits // bounds of every module dropped into PluginsDir; zero fields take the host's defaults

	Pools     map[string]Pool
	PoolOrder []string // pool names in declared order

	Balances []Balance
	Quota    Quota

	// Models are the names clients may send besides pools and provider/model
	// (models:); a file without the section inherits the embedded default's
	// aliases whose providers it configures.
	Models ModelAliases

	// Warnings are problems that do not refuse the config: a balance source
	// naming an unknown provider only loses its readings, and no request depends
	// on it, so refusing the whole file would cost more than it saves. `gatectl check`
	// prints them; the daemon logs them once.
	Warnings []*Error
}

// Log configures the root logger.
type Log struct {
	Level  string // trace | debug | info | warn | error
	Format string // text | json
	Access bool   // one info line per proxied call (never keys or bodies)
}

// OwnKey reports whether gatectl authenticates to the provider itself, with
// APIKeyEnv or a credential header under Headers; else the client's own key is
// passed through to it.
func (p Provider) OwnKey() bool {
	if p.APIKeyEnv != "" {
		return true
	}
	for k := range p.Headers {
		switch http.CanonicalHeaderKey(k) {
		case "Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key":
			return true
		}
	}
	return false
}

// Provider is one upstream. APIKeyEnv names the environment variable holding the
// key; "" means the client's own key is passed through. Header values may
// reference the environment as ${NAME}, expanded by the sender, never here.
type Provider struct {
	Kind      string // openai | anthropic
	BaseURL   string
	APIKeyEnv string
	Headers   map[string]string
	// NoStreamUsage (streamUsage: false): gatectl does not ask an OpenAI
	// stream for its usage (stream_options.include_usage), for an upstream
	// that refuses the parameter.
	NoStreamUsage bool
}

// The gate:, retry: and quota: sections decode straight into the engine's own
// types, so the engine packages are the one place their fields and defaults are
// defined (gate.DefaultConfig, retry.DefaultPolicy, pool.DefaultSettings) and a
// key added to a section's table reaches the engine with no copy in between.
// Fields without a key (gate's Jitter) keep the engine's default.
type (
	// Gate configures admission: the ledger's window, budgets and waits.
	// Gate.Limits resolves a model's effective limits.
	Gate = gate.Config
	// ModelLimits are per-model budgets. A zero field means "inherit": a model's
	// entry inherits from Gate.Defaults, whose SafetyFactor (0 by default)
	// inherits Gate.SafetyFactor.
	ModelLimits = gate.ModelLimits
	// Retry configures the retry planner. RetryOn holds upper-case engine.Class
	// names; InitialDelay is never above MaxDelay (the file's value is capped,
	// with a warning).
	Retry = retry.Policy
	// Mislabeled configures the separate budget for 400s that are really
	// capacity failures.
	Mislabeled = retry.Mislabeled
	// Quota configures what a QUOTA failure does. The embedded default lists qwen
	// in NativeRetryFirstProviders; the engine's default lists none.
	Quota = pool.Settings
)

// ClassifierRef is one entry of the classifier chain: exactly one of Rules or Wasm
// is set (a path as written; see Config.Resolve). Config is handed to a wasm
// module's gate_init; Cases are golden cases `gatectl check` runs, as decoded
// from YAML (their schema belongs to the component that runs them).
type ClassifierRef struct {
	Rules  string
	Wasm   string
	Config map[string]any
	Cases  []map[string]any
	Limits PluginLimits // wasm only; zero fields take the host's defaults
}

// PluginLimits bound one WebAssembly plugin (`limits:` of a wasm entry). Zero
// fields take the defaults: timeout 2ms (50ms for balance parsers), memoryPages
// 512 (32 MiB), maxBodyBytes 16 KiB (256 KiB for balance), maxOutputBytes 16 KiB.
type PluginLimits struct {
	Timeout        time.Duration
	MemoryPages    int
	MaxBodyBytes   int
	MaxOutputBytes int
}

// Route is one provider/model pair of a pool.
type Route struct {
	Provider, Model, ReasoningEffort string
}

// Pool is a named, ordered set of interchangeable routes. Its name matches
// [a-z0-9-]+ and is none of pool.ReservedPoolNames (the session commands answer
// those words themselves, so such a pool could never be selected); it has at
// least one route, each naming a configured provider. MidSessionSwitch defaults
// to true.
type Pool struct {
	MidSessionSwitch bool
	Scoring          Scoring
	Routes           []Route
}

// Scoring is how a pool scores its routes: exactly one of Default (the built-in
// rule, the default), Expr (an expr string, compiled by rules/) or Wasm (a module
// path). In YAML: `default`, an expr string, {expr: STRING} or {wasm: FILE}.
type Scoring struct {
	Default bool
	Expr    string
	Wasm    string
}

// Balance is one balance source: exactly one of Script, HTTP or Wasm is
// set (Kind tells which), at most one per provider. Script is an argv list run
// without a shell, from Config.Dir. Env holds literal entries only; the key comes
// from the variable APIKeyEnv names. Refresh defaults to
// pool.DefaultBalanceRefresh, Timeout to pool.DefaultBalanceTimeout; Capacity is
// nil when not given. Coefficients are >= 0, Capacities and Capacity are > 0.
type Balance struct {
	Provider         string
	Script           []string // argv, never a shell
	HTTP             *HTTPBalance
	Wasm             *WasmBalance
	APIKeyEnv        string
	Env              map[string]string
	Unit             string
	MinimumRemaining float64
	Refresh, Timeout time.Duration
	Coefficients     map[string]float64
	Capacities       map[string]float64
	Capacity         *float64
}

// HTTPBalance fetches URL and evaluates expr strings over `body`.
type HTTPBalance struct {
	URL       string
	Headers   map[string]string
	Remaining string
	Windows   string
	ResetsAt  string
}

// WasmBalance fetches URL and hands the response to a gate/v1 balance module.
type WasmBalance struct {
	Module  string
	URL     string
	Headers map[string]string
	Config  map[string]any
}

//go:embed default.yaml
var defaultYAML []byte

// Load reads and validates the config file at path; "" returns Default(). Every
// problem in the file comes back at once, as Errors.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes and validates data. filename names it in errors and sets Path and
// Dir (its directory, made absolute). Problems come back as Errors, ordered by line.
// A file (filename not "") that holds no document — empty, or only whitespace,
// comments or null — is refused ("the file is empty", ErrEmptyFile): only "no file at all" means
// the embedded default.
func Parse(data []byte, filename string) (*Config, error) {
	return parse(data, filename)
}

// Default returns the embedded default config (default.yaml): well-known
// providers passing the client's key through, every other setting at its
// default, listening on 127.0.0.1:7878. Each call returns a fresh copy.
func Default() *Config {
	c, err := parse(defaultYAML, "")
	if err != nil {
		panic("config: embedded default.yaml is invalid: " + err.Error())
	}
	return c
}

// Resolve returns p unchanged when absolute or empty, else joined under c.Dir.
func (c *Config) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// ErrInvalid is the sentinel every *Error wraps.
var ErrInvalid = errors.New("invalid config")

// ErrEmptyFile's text starts the message of the *Error a config file holding no
// document gets (that error wraps ErrInvalid, like every other).
var ErrEmptyFile = errors.New("the file is empty")

// Error is one problem in a config file. Path is the config path of the bad value
// ("pools.medium.routes[1].provider"); Line and Column are 1-based, 0 when
// unknown. It wraps ErrInvalid. Its text is "file:line: path: msg".
type Error struct {
	File   string
	Line   int
	Column int
	Path   string
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is every problem found in one config, ordered by line; Load and Parse
// return it as their error. errors.Is(err, ErrInvalid) holds for it.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
