package config

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"gpt-*", "gpt-4o", true},
		{"gpt-*", "gpt-", true},
		{"gpt-*", "chatgpt-4o-latest", false},
		{"o3*", "o3-mini", true},
		{"o3*", "o30", true},
		{"o3*", "oo3", false},
		{"*-latest", "claude-3-5-sonnet-latest", true},
		{"claude-*-latest", "claude-3-5-sonnet-latest", true},
		{"claude-*-latest", "claude-latest", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"deepseek/*", "deepseek/deepseek-chat", true}, // '/' is an ordinary character
		{"*", "anything/at all", true},
		{"exact", "exact", true},
		{"exact", "exact2", false},
	} {
		if got := globMatch(c.pattern, c.name); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestModelAliases(t *testing.T) {
	c := mustParse(t, `
providers:
  openai: {kind: openai, baseURL: https://api.openai.com/v1}
  or:     {kind: openai, baseURL: https://openrouter.ai/api/v1}
pools:
  cheap:
    routes: [{provider: or, model: deepseek/deepseek-chat}]
models:
  gpt-*: openai/*
  gpt-4o-mini*: cheap
  fast: or/meta-llama/llama-3.1-8b
  gpt-4o: openai/gpt-4o-2024-08-06
`)
	for _, x := range []struct{ sent, pool, route string }{
		{"gpt-4o", "", "openai/gpt-4o-2024-08-06"}, // exact before pattern
		{"gpt-4o-mini", "cheap", ""},               // the most specific pattern
		{"gpt-4o-mini-2024", "cheap", ""},
		{"gpt-4.1", "", "openai/gpt-4.1"}, // provider/*: the name as sent
		{"fast", "", "or/meta-llama/llama-3.1-8b"},
	} {
		a, ok := c.Models.LookupExact(x.sent)
		if !ok {
			a, ok = c.Models.LookupPattern(x.sent)
		}
		if !ok {
			t.Errorf("%s: no alias", x.sent)
			continue
		}
		r := a.RouteFor(x.sent)
		got := ""
		if a.Pool == "" {
			got = r.Provider + "/" + r.Model
		}
		if a.Pool != x.pool || got != x.route {
			t.Errorf("%s: pool %q route %q, want pool %q route %q", x.sent, a.Pool, got, x.pool, x.route)
		}
	}
	if _, ok := c.Models.LookupPattern("claude-3"); ok {
		t.Error("claude-3 matched: the file has models: of its own, nothing is inherited")
	}
}

func TestModelAliasesInherited(t *testing.T) {
	// No models: section: the embedded default's aliases whose provider the file has.
	c := mustParse(t, "providers:\n  openai: {kind: openai, baseURL: http://127.0.0.1:1/v1}\n")
	if a, ok := c.Models.LookupPattern("gpt-4o"); !ok || a.RouteFor("gpt-4o") != (Route{Provider: "openai", Model: "gpt-4o"}) {
		t.Errorf("gpt-4o: %+v %v", a, ok)
	}
	if a, ok := c.Models.LookupPattern("claude-sonnet-4-5"); ok {
		t.Errorf("claude-sonnet-4-5 resolved to %+v without an anthropic provider", a)
	}
	// models: {} says: none.
	c = mustParse(t, "providers:\n  openai: {kind: openai, baseURL: http://127.0.0.1:1/v1}\nmodels: {}\n")
	if c.Models.Len() != 0 {
		t.Errorf("models: {} kept %d aliases", c.Models.Len())
	}
	// The embedded default routes each well-known family to its provider.
	d := Default()
	for sent, prov := range map[string]string{"gpt-4o": "openai", "o3-mini": "openai", "o4-mini": "openai", "o1": "openai",
		"chatgpt-4o-latest": "openai", "claude-3-5-sonnet-latest": "anthropic", "claude-sonnet-4-5": "anthropic",
		"deepseek-chat": "deepseek", "gemini-2.5-pro": "gemini"} {
		a, ok := d.Models.LookupPattern(sent)
		if !ok || a.RouteFor(sent) != (Route{Provider: prov, Model: sent}) {
			t.Errorf("default: %s -> %+v %v, want %s/%s", sent, a, ok, prov, sent)
		}
	}
}

func TestModelAliasErrors(t *testing.T) {
	head := `providers:
  openai: {kind: openai, baseURL: https://api.openai.com/v1}
pools:
  cheap:
    routes: [{provider: openai, model: gpt-4o-mini}]
models:
`
	for _, c := range []struct{ name, entry, want string }{
		{"unknown pool", "  mini: chaep\n", `gatectl.yaml:7: models.mini: alias "mini": no pool "chaep" is configured; a target is a pool (have: cheap), provider/model or provider/* with a provider of: openai`},
		{"unknown provider", "  gpt-*: opneai/*\n", `gatectl.yaml:7: models["gpt-*"]: alias "gpt-*": no provider "opneai" is configured`},
		{"half a route", "  x: openai/\n", `gatectl.yaml:7: models.x: alias "x": target "openai/" must be provider/model or provider/*`},
		{"star inside", "  x: openai/gpt-*\n", `gatectl.yaml:7: models.x: alias "x": target "openai/gpt-*" may hold '*' only as the whole model`},
		{"pool name", "  cheap: openai/gpt-4o\n", `gatectl.yaml:7: models.cheap: alias "cheap" is also a pool name`},
		{"provider/model", "  openai/gpt-4: openai/gpt-4o\n", `gatectl.yaml:7: models["openai/gpt-4"]: alias "openai/gpt-4" is provider/model of the configured provider "openai"`},
		{"not a string", "  x: {to: cheap}\n", `gatectl.yaml:7: models.x: must be a pool name, provider/model or provider/*, got a mapping`},
		{"empty target", "  x: \"\"\n", `gatectl.yaml:7: models.x: alias "x" has an empty target`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(head+c.entry), "gatectl.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v\nwant it to contain %s", err, c.want)
			}
		})
	}
}
