package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
)

// Default values, as DESIGN.md documents them.
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

// base returns a Config holding every default but the providers. The gate,
// retry and quota defaults are the engine's own.
func base() *Config {
	return &Config{
		Listen: DefaultListen,
		Server: Server{MaxConnections: DefaultMaxConnections, HeaderTimeout: DefaultHeaderTimeout,
			BodyTimeout: DefaultBodyTimeout, IdleTimeout: DefaultIdleTimeout, MaxBufferedBytes: DefaultMaxBufferedBytes},
		Upstream: Upstream{FirstByteTimeout: DefaultFirstByteTimeout, ResponseTimeout: DefaultResponseTimeout,
			StreamIdleTimeout: DefaultStreamIdleTimeout},
		API:      API{MaxSubscribers: DefaultMaxSubscribers},
		Proxy:    Proxy{HoldNotice: DefaultHoldNotice, HoldNoticeEvery: DefaultHoldNoticeEvery, MaxHold: DefaultMaxHold},
		StateDir: DefaultStateDir,
		Log:      Log{Level: "info", Format: "text"},
		Gate:     gate.DefaultConfig(),
		Retry:    retry.DefaultPolicy(),
		Quota:    pool.DefaultSettings(),
	}
}

// defaultProviders are the embedded default's providers, parsed once.
var defaultProviders = sync.OnceValue(func() map[string]Provider {
	c, err := parseWith(defaultYAML, "", nil, nil)
	if err != nil {
		panic("config: embedded default.yaml is invalid: " + err.Error())
	}
	return c.Providers
})

// defaultAliases are the embedded default's models: entries, parsed once.
var defaultAliases = sync.OnceValue(func() []ModelAlias {
	c, err := parseWith(defaultYAML, "", nil, nil)
	if err != nil {
		panic("config: embedded default.yaml is invalid: " + err.Error())
	}
	return c.Models.All()
})

func parse(data []byte, filename string) (*Config, error) {
	return parseWith(data, filename, defaultProviders, defaultAliases)
}

// parseWith decodes and validates data. fallback supplies the providers when the
// file has no providers section (nil: none); fallbackAliases the models: entries
// when it has no models section (those whose provider it configures).
func parseWith(data []byte, filename string, fallback func() map[string]Provider, fallbackAliases func() []ModelAlias) (*Config, error) {
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
			// YAML's own words for a tab say nothing of it.
			if lines := bytes.Split(data, []byte("\n")); e.Line >= 1 && e.Line <= len(lines) && bytes.ContainsRune(lines[e.Line-1], '\t') &&
				strings.Contains(e.Msg, "cannot start any token") {
				e.Msg += " (a tab: YAML indents with spaces)"
			}
		}
		return nil, Errors{e}
	}

	if filename != "" && isNull(root) {
		// A truncated or half-written file would otherwise load as the embedded
		// default and, on a hot reload, replace every configured provider.
		return nil, Errors{{File: display, Msg: ErrEmptyFile.Error() +
			" (nothing but whitespace, comments or null): a config file must set something; to run on the embedded default, give no config file"}}
	}
	v := &validator{decoder: d, c: c}
	v.root(root)
	c.DefaultProviders = filename == "" && fallback != nil
	if !v.providersSet {
		if fallback != nil {
			c.Providers = clone(fallback())
			c.DefaultProviders = true
		} else {
			c.Providers = map[string]Provider{}
		}
	}
	v.crossCheck()
	v.checkAliases(fallbackAliases)

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

	routeRefs   []provRef // pools.*.routes[*].provider: refused when undefined
	balanceRefs []provRef // balances[*].provider: warned (a lookup key only: no request depends on it)
	nativeRefs  []provRef // quota.nativeRetryFirstProviders[*]: warned
	modelRefs   []provRef // gate.models keys: refused when undefined

	aliasesSet bool
	aliasRefs  []aliasRef // models: entries, resolved by checkAliases
}

// root decodes the whole document into c, through topSchema.
func (v *validator) root(n *yaml.Node) {
	topSchema.decode(v, n, "", v.c)
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

// crossCheck runs the checks that need more than one section: every provider the
// config names must be configured. A route or model limit naming an unknown one
// is refused (requests on it would fail, or its limits never apply); a balance
// source or native-retry entry only loses its effect, so it is a warning.
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
	// A pool whose routes pass the client's key through to two providers
	// sends it to whichever the draw picks: right when both take the same key
	// (replicas of one gateway), a key sent where it does not belong when not.
	// Said at load, where the operator can tell which.
	passFirst := map[string]provRef{} // pool -> its first pass-through route
	reported := map[string]bool{}
	for _, r := range v.routeRefs {
		pc, ok := v.c.Providers[r.name]
		i := strings.Index(r.path, ".routes[")
		if !ok || pc.OwnKey() || i < 0 {
			continue
		}
		pool := r.path[:i]
		first, seen := passFirst[pool]
		switch {
		case !seen:
			passFirst[pool] = r
		case first.name != r.name && !reported[pool]:
			reported[pool] = true
			v.warnf(r.node, r.path+".provider", "%s and %s (%s) both pass the client's own key through (no apiKeyEnv): a client's key goes to whichever the draw picks, right only if both take the same key; else give one of them apiKeyEnv, or put them in separate pools",
				r.name, first.name, first.path)
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
