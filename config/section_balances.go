package config

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine/pool"
)

// balanceSources are the keys of which a balance entry gives exactly one.
var balanceSources = []string{"script", "http", "wasm"}

// balanceSchema is one entry of balances:.
var balanceSchema = &schema[Balance]{
	path: "balances[]",
	doc:  "one balance source: exactly one of script, http or wasm",
	defaults: func() Balance {
		return Balance{Refresh: pool.DefaultBalanceRefresh, Timeout: pool.DefaultBalanceTimeout}
	},
	fields: []setting[Balance]{
		customField("provider", "string", "the configured provider it reports on; one source per provider",
			func(v *validator, n *yaml.Node, path string, b *Balance) {
				if pr, ok := v.nonEmpty(n, path); ok {
					b.Provider = pr
					v.balanceRefs = append(v.balanceRefs, provRef{pr, n, strings.TrimSuffix(path, ".provider")})
				}
			}).req(""),
		customField("script", "list", "argv of a program printing one JSON reading; never run through a shell",
			func(v *validator, n *yaml.Node, path string, b *Balance) { b.Script = v.script(n, path) }),
		optSubField("http", "GET a URL and map the JSON body with expr", "needs url and remaining", httpBalanceSchema,
			func(b *Balance) **HTTPBalance { return &b.HTTP }),
		optSubField("wasm", "GET a URL and hand the response to a gate/v1 balance module", "needs module and url", wasmBalanceSchema,
			func(b *Balance) **WasmBalance { return &b.Wasm }),
		customField("apiKeyEnv", "string", "environment variable holding the key; a script gets it under the same name",
			func(v *validator, n *yaml.Node, path string, b *Balance) { b.APIKeyEnv = v.envName(n, path) }),
		customField("env", "mapping", "literal environment entries a script receives; never a secret", (*validator).balanceEnv),
		strField("unit", "what remaining counts, for reports", nil, func(b *Balance) *string { return &b.Unit }),
		numField("minimumRemaining", "a reading below it (or at 0 or less) makes the provider's routes unusable for a draw", rng{},
			func(b *Balance) *float64 { return &b.MinimumRemaining }),
		durField("refresh", "how long a reading answers; also how often a call in a long-term wait on the provider reads it again", positive,
			func(b *Balance) *time.Duration { return &b.Refresh }),
		durField("timeout", "how long one read may take", positive,
			func(b *Balance) *time.Duration { return &b.Timeout }),
		customField("coefficients", "mapping", "window name -> weight (>= 0; 0 drops the window from scoring)",
			func(v *validator, n *yaml.Node, path string, b *Balance) {
				b.Coefficients = v.numMap(n, path, nonNegative.withNote("0 drops the window from scoring"))
			}),
		customField("capacities", "mapping", "window name -> full amount (> 0), when the reading gives none",
			func(v *validator, n *yaml.Node, path string, b *Balance) { b.Capacities = v.numMap(n, path, positive) }),
		customField("capacity", "number", "full amount of the whole reading (> 0)",
			func(v *validator, n *yaml.Node, path string, b *Balance) {
				if f, ok := v.number(n, path); ok && positive.check(v, n, path, f, num(f), false) {
					b.Capacity = &f
				}
			}),
	},
	check: func(v *validator, s section, b *Balance) {
		var kinds []string
		for _, k := range balanceSources {
			if s.has(k) {
				kinds = append(kinds, k)
			}
		}
		switch len(kinds) {
		case 0:
			v.errorf(s.node, s.path, "needs exactly one source: script, http or wasm")
		case 1:
		default:
			v.errorf(s.fields[kinds[1]].key, s.path, "has %s; give exactly one source (script, http or wasm)", strings.Join(kinds, " and "))
		}
	},
}

var httpBalanceSchema = &schema[HTTPBalance]{
	path:     "balances[].http",
	doc:      "GET url and evaluate expr strings over `body`",
	defaults: func() HTTPBalance { return HTTPBalance{} },
	fields: []setting[HTTPBalance]{
		customField("url", "string", "absolute http(s) URL",
			func(v *validator, n *yaml.Node, path string, h *HTTPBalance) { h.URL = v.url(n, path) }).req(""),
		customField("headers", "mapping", "request headers; a credential must be written as ${NAME}",
			func(v *validator, n *yaml.Node, path string, h *HTTPBalance) { h.Headers = v.headers(n, path) }),
		strField("remaining", "expr over body giving what is left", nil,
			func(h *HTTPBalance) *string { return &h.Remaining }).req(": an expr over body, such as body.balance_infos[0].total_balance"),
		strField("windows", "expr over body giving the windows", nil, func(h *HTTPBalance) *string { return &h.Windows }),
		strField("resetsAt", "expr over body giving when the allowance resets", nil, func(h *HTTPBalance) *string { return &h.ResetsAt }),
	},
}

var wasmBalanceSchema = &schema[WasmBalance]{
	path:     "balances[].wasm",
	doc:      "GET url and hand the response to a gate/v1 balance module",
	defaults: func() WasmBalance { return WasmBalance{} },
	fields: []setting[WasmBalance]{
		strField("module", "the gate/v1 balance module", nil, func(w *WasmBalance) *string { return &w.Module }).req(""),
		customField("url", "string", "absolute http(s) URL",
			func(v *validator, n *yaml.Node, path string, w *WasmBalance) { w.URL = v.url(n, path) }).req(""),
		customField("headers", "mapping", "request headers; a credential must be written as ${NAME}",
			func(v *validator, n *yaml.Node, path string, w *WasmBalance) { w.Headers = v.headers(n, path) }),
		customField("config", "mapping", "handed to the module with each call",
			func(v *validator, n *yaml.Node, path string, w *WasmBalance) { w.Config = v.anyMap(n, path) }),
	},
}

func (v *validator) balances(n *yaml.Node, path string) {
	items := v.list(n, path)
	v.c.Balances = make([]Balance, 0, len(items))
	byProvider := map[string]string{}
	for i, it := range items {
		p := index(path, i)
		if isNull(it) {
			v.errorf(it, p, "needs provider and one of script, http or wasm")
			continue
		}
		b := balanceSchema.defaults()
		s := balanceSchema.decode(v, it, p, &b)
		if s.node == nil {
			continue
		}
		if b.Provider != "" {
			if prev, dup := byProvider[b.Provider]; dup {
				v.errorf(s.val("provider"), s.sub("provider"), "provider %q already has a balance source at %s (one per provider)", b.Provider, prev)
			} else {
				byProvider[b.Provider] = p
			}
		}
		v.c.Balances = append(v.c.Balances, b)
	}
}

// balanceEnv decodes a script's literal environment: valid names, never the key.
func (v *validator) balanceEnv(n *yaml.Node, path string, b *Balance) {
	b.Env = v.strMap(n, path)
	for _, f := range v.entriesQuiet(n) {
		if !envNameRe.MatchString(f.key.Value) {
			v.errorf(f.key, join(path, f.key.Value), "%q is not a valid environment variable name", f.key.Value)
		} else if b.APIKeyEnv != "" && f.key.Value == b.APIKeyEnv {
			v.errorf(f.key, join(path, f.key.Value), "sets %s, the apiKeyEnv variable: the key comes from the environment, never from env", f.key.Value)
		}
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
