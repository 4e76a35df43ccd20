package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
)

// Default values, from the seeds and DESIGN.md.
const (
	DefaultListen   = "127.0.0.1:7878"
	DefaultStateDir = ".gatectl"
)

// Valid choices of the enumerated keys.
var (
	LogLevels     = []string{"trace", "debug", "info", "warn", "error"}
	LogFormats    = []string{"text", "json"}
	ProviderKinds = []string{"openai", "anthropic"}
)

var (
	poolNameRe     = regexp.MustCompile(`^[a-z0-9-]+$`)
	providerNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envNameRe      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRe   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	yamlLineRe     = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

// Key lists of each section, in the order the docs present them.
var (
	topKeys         = []string{"listen", "stateDir", "log", "providers", "gate", "retry", "classifiers", "pluginsDir", "pools", "balances", "quota"}
	logKeys         = []string{"level", "format"}
	providerKeys    = []string{"kind", "baseURL", "apiKeyEnv", "headers"}
	gateKeys        = []string{"window", "safetyFactor", "maxWait", "fallbackCooldown", "outputReserveTokens", "learn", "defaults", "models", "maxInFlightPerSession"}
	limitKeys       = []string{"tpm", "rpm", "safetyFactor"}
	retryKeys       = []string{"rounds", "initialDelay", "multiplier", "maxDelay", "jitter", "respectRetryAfter", "retryOn", "hintClamp", "hintlessBackoff", "mislabeled"}
	clampKeys       = []string{"min", "max"}
	mislabeledKeys  = []string{"enabled", "rounds", "initialDelay", "evidence"}
	classifierKeys  = []string{"rules", "wasm", "config", "cases", "limits"}
	pluginLimitKeys = []string{"timeout", "memoryPages", "maxBodyBytes", "maxOutputBytes"}
	poolKeys        = []string{"midSessionSwitch", "scoring", "routes"}
	scoringKeys     = []string{"expr", "wasm"}
	routeKeys       = []string{"provider", "model", "reasoningEffort"}
	balanceKeys     = []string{"provider", "script", "http", "wasm", "apiKeyEnv", "env", "unit", "minimumRemaining", "refresh", "timeout", "coefficients", "capacities", "capacity"}
	httpKeys        = []string{"url", "headers", "remaining", "windows", "resetsAt"}
	wasmBalKeys     = []string{"module", "url", "headers", "config"}
	quotaKeys       = []string{"defaultEnabled", "longTermDelay", "exhaustedCooldown", "failOpen", "nativeRetryFirstProviders"}
)

// base returns a Config holding every default but the providers. The gate,
// retry and quota defaults are the engine's own.
func base() *Config {
	return &Config{
		Listen:   DefaultListen,
		StateDir: DefaultStateDir,
		Log:      Log{Level: "info", Format: "text"},
		Gate:     gate.DefaultConfig(),
		Retry:    retry.DefaultPolicy(),
		Quota:    pool.DefaultSettings(),
	}
}

// defaultProviders are the embedded default's providers, parsed once.
var defaultProviders = sync.OnceValue(func() map[string]Provider {
	c, err := parseWith(defaultYAML, "", nil)
	if err != nil {
		panic("config: embedded default.yaml is invalid: " + err.Error())
	}
	return c.Providers
})

func parse(data []byte, filename string) (*Config, error) {
	return parseWith(data, filename, defaultProviders)
}

// parseWith decodes and validates data. fallback supplies the providers when the
// file has no providers section (nil: none).
func parseWith(data []byte, filename string, fallback func() map[string]Provider) (*Config, error) {
	display := filename
	if display == "" {
		display = "(embedded default)"
	}
	d := &decoder{file: display}
	c := base()
	c.Path = filename
	if filename != "" {
		dir := filepath.Dir(filename)
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		c.Dir = dir
	}

	root, err := document(data)
	if err != nil {
		e := &Error{File: display, Msg: err.Error()}
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = m[2]
		}
		return nil, Errors{e}
	}

	v := &validator{decoder: d, c: c}
	v.root(root)
	if !v.providersSet {
		if fallback != nil {
			c.Providers = clone(fallback())
		} else {
			c.Providers = map[string]Provider{}
		}
	}
	v.crossCheck()

	sortErrs(d.errs)
	sortErrs(d.warn)
	c.Warnings = d.warn
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return c, nil
}

// document returns the root node of data's single YAML document (nil when empty).
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("yaml: line %d: the file holds more than one YAML document; gatectl reads exactly one", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		return doc.Content[0], nil
	}
	return nil, nil
}

func clone(m map[string]Provider) map[string]Provider {
	out := make(map[string]Provider, len(m))
	for k, p := range m {
		if p.Headers != nil {
			h := make(map[string]string, len(p.Headers))
			for hk, hv := range p.Headers {
				h[hk] = hv
			}
			p.Headers = h
		}
		out[k] = p
	}
	return out
}

// provRef is one place the config names a provider.
type provRef struct {
	name string
	node *yaml.Node
	path string // e.g. pools.medium.routes[0]
}

// validator fills c from the document, section by section.
type validator struct {
	*decoder
	c *Config

	providersSet bool
	providersAt  *yaml.Node

	routeRefs   []provRef // pools.*.routes[*].provider: refused when undefined
	balanceRefs []provRef // balances[*].provider: warned (seed 004: a lookup key only)
	nativeRefs  []provRef // quota.nativeRetryFirstProviders[*]: warned
	modelRefs   []provRef // gate.models keys: refused when undefined

	window, maxWait *yaml.Node
}

func (v *validator) root(n *yaml.Node) {
	s := v.object(n, "", topKeys...)
	c := v.c
	if x := s.val("listen"); x != nil {
		if l, ok := v.nonEmpty(x, "listen"); ok {
			if msg := checkListen(l); msg != "" {
				v.errorf(x, "listen", "%s (got %q)", msg, l)
			} else {
				c.Listen = l
			}
		}
	}
	if x := s.val("stateDir"); x != nil {
		if sd, ok := v.nonEmpty(x, "stateDir"); ok {
			c.StateDir = sd
		}
	}
	if s.has("log") {
		v.log(s.val("log"))
	}
	if s.has("providers") {
		v.providersSet = true
		v.providersAt = s.fields["providers"].key
		v.providers(s.val("providers"))
	}
	if s.has("gate") {
		v.gate(s.val("gate"))
	}
	if s.has("retry") {
		v.retry(s.val("retry"))
	}
	if s.has("classifiers") {
		v.classifiers(s.val("classifiers"))
	}
	if x := s.val("pluginsDir"); x != nil {
		if pd, ok := v.nonEmpty(x, "pluginsDir"); ok {
			c.PluginsDir = pd
		}
	}
	if s.has("pools") {
		v.pools(s.val("pools"))
	}
	if s.has("balances") {
		v.balances(s.val("balances"))
	}
	if s.has("quota") {
		v.quota(s.val("quota"))
	}
}

func checkListen(l string) string {
	host, port, err := net.SplitHostPort(l)
	if err != nil {
		return "must be host:port, such as 127.0.0.1:7878"
	}
	_ = host
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "port must be a number from 0 to 65535"
	}
	return ""
}

func (v *validator) oneOf(n *yaml.Node, path string, choices []string) (string, bool) {
	s, ok := v.str(n, path)
	if !ok {
		return "", false
	}
	if !contains(choices, s) {
		v.errorf(n, path, "unknown value %q (valid: %s)", s, strings.Join(choices, ", "))
		return "", false
	}
	return s, true
}

func (v *validator) log(n *yaml.Node) {
	s := v.object(n, "log", logKeys...)
	if x := s.val("level"); x != nil {
		if l, ok := v.oneOf(x, "log.level", LogLevels); ok {
			v.c.Log.Level = l
		}
	}
	if x := s.val("format"); x != nil {
		if f, ok := v.oneOf(x, "log.format", LogFormats); ok {
			v.c.Log.Format = f
		}
	}
}

func (v *validator) providers(n *yaml.Node) {
	v.c.Providers = map[string]Provider{}
	for _, f := range v.entries(n, "providers") {
		name := f.key.Value
		path := join("providers", name)
		if !providerNameRe.MatchString(name) {
			v.errorf(f.key, path, "provider name %q must start with a letter or digit and hold only letters, digits, '.', '_' and '-' (no '/': routes write provider/model)", name)
		}
		s := v.object(f.val, path, providerKeys...)
		if s.node == nil && isNull(f.val) {
			v.errorf(f.key, path, "needs kind and baseURL")
			continue
		}
		var p Provider
		if x := s.val("kind"); x != nil {
			p.Kind, _ = v.oneOf(x, s.sub("kind"), ProviderKinds)
		} else if s.node != nil {
			v.errorf(s.node, s.sub("kind"), "is required (one of: %s)", strings.Join(ProviderKinds, ", "))
		}
		if x := s.val("baseURL"); x != nil {
			if u, ok := v.nonEmpty(x, s.sub("baseURL")); ok {
				if msg := checkURL(u); msg != "" {
					v.errorf(x, s.sub("baseURL"), "%s (got %q)", msg, u)
				} else {
					p.BaseURL = strings.TrimRight(u, "/")
				}
			}
		} else if s.node != nil {
			v.errorf(s.node, s.sub("baseURL"), "is required")
		}
		if x := s.val("apiKeyEnv"); x != nil {
			p.APIKeyEnv = v.envName(x, s.sub("apiKeyEnv"))
		}
		if x := s.val("headers"); x != nil {
			p.Headers = v.headers(x, s.sub("headers"))
		}
		v.c.Providers[name] = p
	}
}

func checkURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http:// or https:// URL"
	}
	return ""
}

// envName decodes the name of an environment variable. The value is never echoed:
// a user who pasted the key itself here must not see it in logs.
func (v *validator) envName(n *yaml.Node, path string) string {
	s, ok := v.str(n, path)
	if !ok {
		return ""
	}
	if !envNameRe.MatchString(s) {
		v.errorf(n, path, "must name an environment variable (letters, digits and '_', not starting with a digit), never hold the key itself")
		return ""
	}
	return s
}

// secretHeaders carry credentials; their values must come from the environment.
var secretHeaders = []string{"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}

// headers decodes request headers. A credential header must reference the
// environment (${NAME}) rather than hold a literal secret; values are never echoed.
func (v *validator) headers(n *yaml.Node, path string) map[string]string {
	h := v.strMap(n, path)
	for _, f := range v.entriesQuiet(n) {
		k := f.key.Value
		p := join(path, k)
		if !headerNameRe.MatchString(k) {
			v.errorf(f.key, p, "%q is not a valid header name", k)
			delete(h, k)
			continue
		}
		val, ok := h[k]
		if !ok {
			continue
		}
		if contains(secretHeaders, strings.ToLower(k)) && !strings.Contains(val, "${") {
			v.errorf(f.val, p, "holds a literal credential: reference an environment variable instead (%s: \"Bearer ${MY_KEY}\"), or use apiKeyEnv", k)
			delete(h, k)
		}
		for _, ref := range envRefRe.FindAllStringSubmatch(val, -1) {
			if !envNameRe.MatchString(ref[1]) {
				v.errorf(f.val, p, "${%s} is not a valid environment variable name", ref[1])
			}
		}
	}
	return h
}

var envRefRe = regexp.MustCompile(`\$\{([^}]*)\}`)

// entriesQuiet lists a mapping's pairs without reporting anything (strMap did).
func (v *validator) entriesQuiet(n *yaml.Node) []field {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	quiet := &decoder{file: v.file}
	return quiet.pairs(n, "")
}

func (v *validator) gate(n *yaml.Node) {
	s := v.object(n, "gate", gateKeys...)
	g := &v.c.Gate
	if x := s.val("window"); x != nil {
		v.window = x
		if d, ok := v.durPos(x, s.sub("window")); ok {
			g.Window = d
		}
	}
	if x := s.val("maxWait"); x != nil {
		v.maxWait = x
		if d, ok := v.durPos(x, s.sub("maxWait")); ok {
			g.MaxWait = d
		}
	}
	if x := s.val("fallbackCooldown"); x != nil {
		if d, ok := v.durNonNeg(x, s.sub("fallbackCooldown")); ok {
			g.FallbackCooldown = d
		}
	}
	if x := s.val("safetyFactor"); x != nil {
		if f, ok := v.factor(x, s.sub("safetyFactor")); ok {
			g.SafetyFactor = f
		}
	}
	if x := s.val("outputReserveTokens"); x != nil {
		if i, ok := v.integer(x, s.sub("outputReserveTokens")); ok {
			if i < 0 {
				v.errorf(x, s.sub("outputReserveTokens"), "must not be negative (got %d)", i)
			} else {
				g.OutputReserveTokens = i
			}
		}
	}
	if x := s.val("learn"); x != nil {
		if b, ok := v.boolean(x, s.sub("learn")); ok {
			g.Learn = b
		}
	}
	if x := s.val("maxInFlightPerSession"); x != nil {
		if i, ok := v.integer(x, s.sub("maxInFlightPerSession")); ok {
			if i < 0 {
				v.errorf(x, s.sub("maxInFlightPerSession"), "must not be negative (got %d; 0 means no cap)", i)
			} else {
				g.MaxInFlightPerSession = i
			}
		}
	}
	if s.has("defaults") {
		g.Defaults = v.limits(s.val("defaults"), s.sub("defaults"), g.Defaults)
	}
	if s.has("models") {
		fs := v.entries(s.val("models"), s.sub("models"))
		g.Models = make(map[string]ModelLimits, len(fs))
		for _, f := range fs {
			key := f.key.Value
			p := join(s.sub("models"), key)
			prov, model, ok := strings.Cut(key, "/")
			if !ok || prov == "" || model == "" {
				v.errorf(f.key, p, "model keys are provider/model, such as deepseek/deepseek-chat (got %q)", key)
			} else {
				v.modelRefs = append(v.modelRefs, provRef{prov, f.key, p})
			}
			if isNull(f.val) {
				v.errorf(f.key, p, "needs at least one of %s", strings.Join(limitKeys, ", "))
				continue
			}
			g.Models[key] = v.limits(f.val, p, ModelLimits{})
		}
	}
	if g.Window > 0 && g.MaxWait > 0 && g.MaxWait < g.Window {
		if v.maxWait != nil {
			v.errorf(v.maxWait, "gate.maxWait", "must be at least gate.window (%s), got %s: the gate could never wait out a full window", dur(g.Window), dur(g.MaxWait))
		} else {
			v.errorf(v.window, "gate.window", "must not exceed gate.maxWait (%s), got %s: the gate could never wait out a full window", dur(g.MaxWait), dur(g.Window))
		}
	}
}

// limits decodes tpm/rpm/safetyFactor over start; a key left out keeps start's value.
func (v *validator) limits(n *yaml.Node, path string, start ModelLimits) ModelLimits {
	s := v.object(n, path, limitKeys...)
	l := start
	if x := s.val("tpm"); x != nil {
		if i, ok := v.positiveInt(x, s.sub("tpm")); ok {
			l.TPM = i
		}
	}
	if x := s.val("rpm"); x != nil {
		if i, ok := v.positiveInt(x, s.sub("rpm")); ok {
			l.RPM = i
		}
	}
	if x := s.val("safetyFactor"); x != nil {
		if f, ok := v.factor(x, s.sub("safetyFactor")); ok {
			l.SafetyFactor = f
		}
	}
	return l
}

func (v *validator) positiveInt(n *yaml.Node, path string) (int, bool) {
	i, ok := v.integer(n, path)
	if ok && i <= 0 {
		v.errorf(n, path, "must be greater than 0 (got %d); leave it out to inherit", i)
		return 0, false
	}
	return i, ok
}

// factor decodes a number in (0, 1].
func (v *validator) factor(n *yaml.Node, path string) (float64, bool) {
	f, ok := v.number(n, path)
	if ok && (f <= 0 || f > 1) {
		v.errorf(n, path, "must be in (0, 1] (got %v)", f)
		return 0, false
	}
	return f, ok
}

func (v *validator) durPos(n *yaml.Node, path string) (time.Duration, bool) {
	d, ok := v.duration(n, path)
	if ok && d <= 0 {
		v.errorf(n, path, "must be greater than 0 (got %s)", dur(d))
		return 0, false
	}
	return d, ok
}

func (v *validator) durNonNeg(n *yaml.Node, path string) (time.Duration, bool) {
	d, ok := v.duration(n, path)
	if ok && d < 0 {
		v.errorf(n, path, "must not be negative (got %s)", dur(d))
		return 0, false
	}
	return d, ok
}

func (v *validator) rounds(n *yaml.Node, path string) (int, bool) {
	i, ok := v.integer(n, path)
	if ok && (i < 0 || i > retry.MaxRounds) {
		v.errorf(n, path, "must be from 0 to %d (got %d)", retry.MaxRounds, i)
		return 0, false
	}
	return i, ok
}

func (v *validator) retry(n *yaml.Node) {
	s := v.object(n, "retry", retryKeys...)
	r := &v.c.Retry
	if x := s.val("rounds"); x != nil {
		if i, ok := v.rounds(x, s.sub("rounds")); ok {
			r.Rounds = i
		}
	}
	var initialAt *yaml.Node
	if x := s.val("initialDelay"); x != nil {
		initialAt = x
		if d, ok := v.durPos(x, s.sub("initialDelay")); ok {
			r.InitialDelay = d
		}
	}
	if x := s.val("multiplier"); x != nil {
		if f, ok := v.number(x, s.sub("multiplier")); ok {
			if f < 1 {
				v.errorf(x, s.sub("multiplier"), "must be at least 1 (1 = a fixed interval; got %v)", f)
			} else {
				r.Multiplier = f
			}
		}
	}
	if x := s.val("maxDelay"); x != nil {
		if d, ok := v.durPos(x, s.sub("maxDelay")); ok {
			r.MaxDelay = d
		}
	}
	if r.InitialDelay > r.MaxDelay {
		// Seed 003: lowering the cap pulls the first wait down with it.
		at := initialAt
		if at == nil {
			at = s.val("maxDelay")
		}
		v.warnf(at, s.sub("initialDelay"), "%s exceeds retry.maxDelay (%s); the first wait is capped at %s", dur(r.InitialDelay), dur(r.MaxDelay), dur(r.MaxDelay))
		r.InitialDelay = r.MaxDelay
	}
	if x := s.val("jitter"); x != nil {
		if f, ok := v.number(x, s.sub("jitter")); ok {
			if f < 0 || f > 1 {
				v.errorf(x, s.sub("jitter"), "must be in [0, 1] (got %v)", f)
			} else {
				r.Jitter = f
			}
		}
	}
	if x := s.val("respectRetryAfter"); x != nil {
		if b, ok := v.boolean(x, s.sub("respectRetryAfter")); ok {
			r.RespectRetryAfter = b
		}
	}
	if x := s.val("retryOn"); x != nil {
		p := s.sub("retryOn")
		items := v.list(x, p)
		out := []engine.Class{}
		seen := map[engine.Class]bool{}
		for i, it := range items {
			name, ok := v.str(it, index(p, i))
			if !ok {
				continue
			}
			cl, err := engine.ParseClass(name)
			if err != nil {
				v.errorf(it, index(p, i), "unknown class %q (valid: %s)", name, classNames())
				continue
			}
			if seen[cl] {
				v.errorf(it, index(p, i), "class %s is listed twice", cl)
				continue
			}
			seen[cl] = true
			out = append(out, cl)
		}
		if items != nil || isNull(x) {
			r.RetryOn = out
		}
	}
	if s.has("hintClamp") {
		cs := v.object(s.val("hintClamp"), s.sub("hintClamp"), clampKeys...)
		if x := cs.val("min"); x != nil {
			if d, ok := v.durNonNeg(x, cs.sub("min")); ok {
				r.HintClamp.Min = d
			}
		}
		if x := cs.val("max"); x != nil {
			if d, ok := v.durPos(x, cs.sub("max")); ok {
				r.HintClamp.Max = d
			}
		}
		if r.HintClamp.Min > r.HintClamp.Max {
			at := cs.node
			if at == nil {
				at = s.fields["hintClamp"].key
			}
			v.errorf(at, s.sub("hintClamp"), "min (%s) must not exceed max (%s)", dur(r.HintClamp.Min), dur(r.HintClamp.Max))
		}
	}
	if x := s.val("hintlessBackoff"); x != nil {
		if b, ok := v.boolean(x, s.sub("hintlessBackoff")); ok {
			r.HintlessBackoff = b
		}
	}
	if s.has("mislabeled") {
		ms := v.object(s.val("mislabeled"), s.sub("mislabeled"), mislabeledKeys...)
		m := &r.Mislabeled
		if x := ms.val("enabled"); x != nil {
			if b, ok := v.boolean(x, ms.sub("enabled")); ok {
				m.Enabled = b
			}
		}
		if x := ms.val("rounds"); x != nil {
			if i, ok := v.rounds(x, ms.sub("rounds")); ok {
				m.Rounds = i
			}
		}
		if x := ms.val("initialDelay"); x != nil {
			if d, ok := v.durPos(x, ms.sub("initialDelay")); ok {
				m.InitialDelay = d
			}
		}
		if x := ms.val("evidence"); x != nil {
			if d, ok := v.durPos(x, ms.sub("evidence")); ok {
				m.Evidence = d
			}
		}
	}
}

func classNames() string {
	s := make([]string, len(engine.Classes))
	for i, c := range engine.Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

func (v *validator) classifiers(n *yaml.Node) {
	items := v.list(n, "classifiers")
	v.c.Classifiers = make([]ClassifierRef, 0, len(items))
	for i, it := range items {
		p := index("classifiers", i)
		s := v.object(it, p, classifierKeys...)
		if s.node == nil {
			if isNull(it) {
				v.errorf(it, p, "needs rules: FILE or wasm: FILE")
			}
			continue
		}
		var ref ClassifierRef
		if x := s.val("rules"); x != nil {
			ref.Rules, _ = v.nonEmpty(x, s.sub("rules"))
		}
		if x := s.val("wasm"); x != nil {
			ref.Wasm, _ = v.nonEmpty(x, s.sub("wasm"))
		}
		switch {
		case s.has("rules") && s.has("wasm"):
			v.errorf(s.node, p, "has both rules and wasm; give exactly one")
		case !s.has("rules") && !s.has("wasm"):
			v.errorf(s.node, p, "needs exactly one of rules: FILE or wasm: FILE")
		}
		if x := s.val("config"); x != nil {
			ref.Config = v.anyMap(x, s.sub("config"))
		}
		if x := s.val("limits"); x != nil {
			if !s.has("wasm") {
				v.errorf(x, s.sub("limits"), "limits apply to wasm plugins only")
			}
			ref.Limits = v.pluginLimits(x, s.sub("limits"))
		}
		if x := s.val("cases"); x != nil {
			cp := s.sub("cases")
			for j, cn := range v.list(x, cp) {
				if m := v.anyMap(cn, index(cp, j)); m != nil {
					ref.Cases = append(ref.Cases, m)
				} else if isNull(cn) {
					v.errorf(cn, index(cp, j), "must be a mapping, got null")
				}
			}
		}
		v.c.Classifiers = append(v.c.Classifiers, ref)
	}
}

// pluginLimits reads a wasm plugin's `limits:`; every value must be positive.
func (v *validator) pluginLimits(n *yaml.Node, path string) PluginLimits {
	s := v.object(n, path, pluginLimitKeys...)
	var l PluginLimits
	if x := s.val("timeout"); x != nil {
		if d, ok := v.durPos(x, s.sub("timeout")); ok {
			l.Timeout = d
		}
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"memoryPages", &l.MemoryPages}, {"maxBodyBytes", &l.MaxBodyBytes}, {"maxOutputBytes", &l.MaxOutputBytes}} {
		if x := s.val(f.key); x != nil {
			if i, ok := v.positiveInt(x, s.sub(f.key)); ok {
				*f.dst = i
			}
		}
	}
	if l.MemoryPages > 65536 {
		v.errorf(s.val("memoryPages"), s.sub("memoryPages"), "at most 65536 (4 GiB) (got %d)", l.MemoryPages)
		l.MemoryPages = 0
	}
	return l
}

func (v *validator) pools(n *yaml.Node) {
	fs := v.entries(n, "pools")
	v.c.Pools = make(map[string]Pool, len(fs))
	v.c.PoolOrder = make([]string, 0, len(fs))
	for _, f := range fs {
		name := f.key.Value
		path := join("pools", name)
		switch {
		case contains(pool.ReservedPoolNames, name):
			v.errorf(f.key, path, "pool name %q is reserved (reserved: %s)", name, strings.Join(pool.ReservedPoolNames, ", "))
		case !poolNameRe.MatchString(name):
			v.errorf(f.key, path, "pool name %q must hold only lowercase letters, digits and '-'", name)
		}
		s := v.object(f.val, path, poolKeys...)
		if s.node == nil && !isNull(f.val) {
			continue // not a mapping: reported
		}
		pool := Pool{MidSessionSwitch: true, Scoring: Scoring{Default: true}}
		if x := s.val("midSessionSwitch"); x != nil {
			if b, ok := v.boolean(x, s.sub("midSessionSwitch")); ok {
				pool.MidSessionSwitch = b
			}
		}
		if x := s.val("scoring"); x != nil {
			pool.Scoring = v.scoring(x, s.sub("scoring"))
		}
		rp := s.sub("routes")
		routes := v.list(s.val("routes"), rp)
		if len(routes) == 0 && (s.val("routes") == nil || isNull(s.val("routes")) || deref(s.val("routes")).Kind == yaml.SequenceNode) {
			at := s.node
			if at == nil {
				at = f.key
			}
			if x := s.val("routes"); x != nil {
				at = x
			}
			v.errorf(at, rp, "pool %q needs at least one route", name)
		}
		seen := map[Route]int{}
		for i, rn := range routes {
			p := index(rp, i)
			rs := v.object(rn, p, routeKeys...)
			if rs.node == nil {
				if isNull(rn) {
					v.errorf(rn, p, "needs provider and model")
				}
				continue
			}
			var r Route
			if x := rs.val("provider"); x != nil {
				if pr, ok := v.nonEmpty(x, rs.sub("provider")); ok {
					r.Provider = pr
					v.routeRefs = append(v.routeRefs, provRef{pr, x, p})
				}
			} else {
				v.errorf(rs.node, rs.sub("provider"), "is required")
			}
			if x := rs.val("model"); x != nil {
				r.Model, _ = v.nonEmpty(x, rs.sub("model"))
			} else {
				v.errorf(rs.node, rs.sub("model"), "is required")
			}
			if x := rs.val("reasoningEffort"); x != nil {
				r.ReasoningEffort, _ = v.nonEmpty(x, rs.sub("reasoningEffort"))
			}
			if j, dup := seen[r]; dup && r.Provider != "" && r.Model != "" {
				v.errorf(rs.node, p, "repeats %s[%d] (%s/%s)", rp, j, r.Provider, r.Model)
			} else {
				seen[r] = i
			}
			pool.Routes = append(pool.Routes, r)
		}
		v.c.Pools[name] = pool
		v.c.PoolOrder = append(v.c.PoolOrder, name)
	}
}

// scoring decodes "default", an expr string, or {wasm: FILE} / {expr: STRING}.
func (v *validator) scoring(n *yaml.Node, path string) Scoring {
	m := deref(n)
	if m != nil && m.Kind == yaml.MappingNode {
		s := v.object(m, path, scoringKeys...)
		var sc Scoring
		switch {
		case s.has("wasm") && s.has("expr"):
			v.errorf(m, path, "has both wasm and expr; give exactly one")
		case s.has("wasm"):
			sc.Wasm, _ = v.nonEmpty(s.val("wasm"), s.sub("wasm"))
		case s.has("expr"):
			sc.Expr, _ = v.nonEmpty(s.val("expr"), s.sub("expr"))
		default:
			v.errorf(m, path, `must be "default", an expr string, or {wasm: FILE}`)
		}
		return sc
	}
	str, ok := v.scalar(n, path, `"default", an expr string, or {wasm: FILE}`, "!!str")
	if !ok {
		return Scoring{Default: true}
	}
	switch strings.TrimSpace(str.Value) {
	case "default":
		return Scoring{Default: true}
	case "":
		v.errorf(n, path, `must not be empty (use "default")`)
		return Scoring{Default: true}
	}
	return Scoring{Expr: str.Value}
}

func (v *validator) balances(n *yaml.Node) {
	items := v.list(n, "balances")
	v.c.Balances = make([]Balance, 0, len(items))
	byProvider := map[string]string{}
	for i, it := range items {
		p := index("balances", i)
		s := v.object(it, p, balanceKeys...)
		if s.node == nil {
			if isNull(it) {
				v.errorf(it, p, "needs provider and one of script, http or wasm")
			}
			continue
		}
		b := Balance{Refresh: pool.DefaultBalanceRefresh, Timeout: pool.DefaultBalanceTimeout}
		if x := s.val("provider"); x != nil {
			if pr, ok := v.nonEmpty(x, s.sub("provider")); ok {
				b.Provider = pr
				v.balanceRefs = append(v.balanceRefs, provRef{pr, x, p})
				if prev, dup := byProvider[pr]; dup {
					v.errorf(x, s.sub("provider"), "provider %q already has a balance source at %s (one per provider)", pr, prev)
				} else {
					byProvider[pr] = p
				}
			}
		} else {
			v.errorf(s.node, s.sub("provider"), "is required")
		}
		var kinds []string
		for _, k := range []string{"script", "http", "wasm"} {
			if s.has(k) {
				kinds = append(kinds, k)
			}
		}
		switch len(kinds) {
		case 0:
			v.errorf(s.node, p, "needs exactly one source: script, http or wasm")
		case 1:
		default:
			v.errorf(s.fields[kinds[1]].key, p, "has %s; give exactly one source (script, http or wasm)", strings.Join(kinds, " and "))
		}
		if x := s.val("script"); x != nil {
			b.Script = v.script(x, s.sub("script"))
		}
		if x := s.val("http"); x != nil {
			b.HTTP = v.httpBalance(x, s.sub("http"))
		}
		if x := s.val("wasm"); x != nil {
			b.Wasm = v.wasmBalance(x, s.sub("wasm"))
		}
		if x := s.val("apiKeyEnv"); x != nil {
			b.APIKeyEnv = v.envName(x, s.sub("apiKeyEnv"))
		}
		if x := s.val("env"); x != nil {
			ep := s.sub("env")
			b.Env = v.strMap(x, ep)
			for _, f := range v.entriesQuiet(x) {
				if !envNameRe.MatchString(f.key.Value) {
					v.errorf(f.key, join(ep, f.key.Value), "%q is not a valid environment variable name", f.key.Value)
				} else if b.APIKeyEnv != "" && f.key.Value == b.APIKeyEnv {
					v.errorf(f.key, join(ep, f.key.Value), "sets %s, the apiKeyEnv variable: the key comes from the environment, never from env", f.key.Value)
				}
			}
		}
		if x := s.val("unit"); x != nil {
			b.Unit, _ = v.nonEmpty(x, s.sub("unit"))
		}
		if x := s.val("minimumRemaining"); x != nil {
			b.MinimumRemaining, _ = v.number(x, s.sub("minimumRemaining"))
		}
		if x := s.val("refresh"); x != nil {
			if d, ok := v.durPos(x, s.sub("refresh")); ok {
				b.Refresh = d
			}
		}
		if x := s.val("timeout"); x != nil {
			if d, ok := v.durPos(x, s.sub("timeout")); ok {
				b.Timeout = d
			}
		}
		if x := s.val("coefficients"); x != nil {
			b.Coefficients = v.numMap(x, s.sub("coefficients"), func(f float64) string {
				if f < 0 {
					return "must not be negative (0 drops the window from scoring)"
				}
				return ""
			})
		}
		if x := s.val("capacities"); x != nil {
			b.Capacities = v.numMap(x, s.sub("capacities"), func(f float64) string {
				if f <= 0 {
					return "must be greater than 0"
				}
				return ""
			})
		}
		if x := s.val("capacity"); x != nil {
			if f, ok := v.number(x, s.sub("capacity")); ok {
				if f <= 0 {
					v.errorf(x, s.sub("capacity"), "must be greater than 0 (got %v)", f)
				} else {
					b.Capacity = &f
				}
			}
		}
		v.c.Balances = append(v.c.Balances, b)
	}
}

// script decodes an argv list; a string is refused, since a script never runs in a shell.
func (v *validator) script(n *yaml.Node, path string) []string {
	if isNull(n) {
		v.errorf(n, path, "must name a program: an argv list such as [python3, balance/x.py]")
		return nil
	}
	if m := deref(n); m != nil && m.Kind == yaml.ScalarNode && m.Tag == "!!str" {
		v.errorf(m, path, "must be an argv list such as [python3, balance/x.py], not a string: a script never runs through a shell (got %q)", m.Value)
		return nil
	}
	argv, ok := v.strList(n, path)
	if !ok {
		return nil
	}
	if len(argv) == 0 {
		v.errorf(n, path, "must name a program: an argv list such as [python3, balance/x.py]")
		return nil
	}
	if strings.TrimSpace(argv[0]) == "" {
		v.errorf(deref(n).Content[0], index(path, 0), "the program name must not be empty")
		return nil
	}
	return argv
}

func (v *validator) urlField(s section, k string) string {
	x := s.val(k)
	if x == nil {
		v.errorf(s.node, s.sub(k), "is required")
		return ""
	}
	u, ok := v.nonEmpty(x, s.sub(k))
	if !ok {
		return ""
	}
	if msg := checkURL(u); msg != "" {
		v.errorf(x, s.sub(k), "%s (got %q)", msg, u)
		return ""
	}
	return u
}

func (v *validator) httpBalance(n *yaml.Node, path string) *HTTPBalance {
	s := v.object(n, path, httpKeys...)
	if s.node == nil {
		if isNull(n) {
			v.errorf(n, path, "needs url and remaining")
		}
		return nil
	}
	h := &HTTPBalance{URL: v.urlField(s, "url")}
	if x := s.val("headers"); x != nil {
		h.Headers = v.headers(x, s.sub("headers"))
	}
	if x := s.val("remaining"); x != nil {
		h.Remaining, _ = v.nonEmpty(x, s.sub("remaining"))
	} else {
		v.errorf(s.node, s.sub("remaining"), "is required: an expr over body, such as body.balance_infos[0].total_balance")
	}
	if x := s.val("windows"); x != nil {
		h.Windows, _ = v.nonEmpty(x, s.sub("windows"))
	}
	if x := s.val("resetsAt"); x != nil {
		h.ResetsAt, _ = v.nonEmpty(x, s.sub("resetsAt"))
	}
	return h
}

func (v *validator) wasmBalance(n *yaml.Node, path string) *WasmBalance {
	s := v.object(n, path, wasmBalKeys...)
	if s.node == nil {
		if isNull(n) {
			v.errorf(n, path, "needs module and url")
		}
		return nil
	}
	w := &WasmBalance{}
	if x := s.val("module"); x != nil {
		w.Module, _ = v.nonEmpty(x, s.sub("module"))
	} else {
		v.errorf(s.node, s.sub("module"), "is required")
	}
	w.URL = v.urlField(s, "url")
	if x := s.val("headers"); x != nil {
		w.Headers = v.headers(x, s.sub("headers"))
	}
	if x := s.val("config"); x != nil {
		w.Config = v.anyMap(x, s.sub("config"))
	}
	return w
}

func (v *validator) quota(n *yaml.Node) {
	s := v.object(n, "quota", quotaKeys...)
	q := &v.c.Quota
	if x := s.val("defaultEnabled"); x != nil {
		if b, ok := v.boolean(x, s.sub("defaultEnabled")); ok {
			q.DefaultEnabled = b
		}
	}
	if x := s.val("longTermDelay"); x != nil {
		if d, ok := v.durPos(x, s.sub("longTermDelay")); ok {
			q.LongTermDelay = d
		}
	}
	if x := s.val("exhaustedCooldown"); x != nil {
		if d, ok := v.durPos(x, s.sub("exhaustedCooldown")); ok {
			q.ExhaustedCooldown = d
		}
	}
	if x := s.val("failOpen"); x != nil {
		if b, ok := v.boolean(x, s.sub("failOpen")); ok {
			q.FailOpen = b
		}
	}
	if x := s.val("nativeRetryFirstProviders"); x != nil {
		p := s.sub("nativeRetryFirstProviders")
		seen := map[string]bool{}
		for i, it := range v.list(x, p) {
			name, ok := v.nonEmpty(it, index(p, i))
			if !ok {
				continue
			}
			if seen[name] {
				v.errorf(it, index(p, i), "provider %q is listed twice", name)
				continue
			}
			seen[name] = true
			q.NativeRetryFirstProviders = append(q.NativeRetryFirstProviders, name)
			v.nativeRefs = append(v.nativeRefs, provRef{name, it, index(p, i)})
		}
	}
}

// crossCheck runs the checks that need more than one section: the provider check
// of seed 004.
func (v *validator) crossCheck() {
	have := make([]string, 0, len(v.c.Providers))
	for name := range v.c.Providers {
		have = append(have, name)
	}
	sort.Strings(have)
	haveList := strings.Join(have, ", ")
	if haveList == "" {
		haveList = "none"
	}
	// Every place that names each undefined provider, in document order.
	named := map[string][]string{}
	all := append(append(append(append([]provRef{}, v.routeRefs...), v.balanceRefs...), v.nativeRefs...), v.modelRefs...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].node.Line < all[j].node.Line })
	for _, r := range all {
		if _, ok := v.c.Providers[r.name]; !ok {
			named[r.name] = append(named[r.name], r.path)
		}
	}
	msg := func(name string) string {
		m := fmt.Sprintf("no provider %q is configured (have: %s)", name, haveList)
		if len(named[name]) > 1 {
			m += "; named by " + strings.Join(named[name], ", ")
		}
		return m
	}
	for _, r := range v.routeRefs {
		if _, ok := v.c.Providers[r.name]; !ok {
			v.errorf(r.node, r.path+".provider", "%s; a request on that route would fail", msg(r.name))
		}
	}
	for _, r := range v.modelRefs {
		if _, ok := v.c.Providers[r.name]; !ok {
			v.errorf(r.node, r.path, "%s; these limits would never apply", msg(r.name))
		}
	}
	for _, r := range v.balanceRefs {
		if _, ok := v.c.Providers[r.name]; !ok {
			v.warnf(r.node, r.path+".provider", "%s; this source's readings would answer no route", msg(r.name))
		}
	}
	for _, r := range v.nativeRefs {
		if _, ok := v.c.Providers[r.name]; !ok {
			v.warnf(r.node, r.path, "%s; the entry has no effect", msg(r.name))
		}
	}
}
