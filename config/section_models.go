package config

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ModelAlias is one entry of models:: a model name clients send, and where it
// goes. Name is an exact name, or a pattern when it holds '*' (which matches any
// run of characters, '/' included). The target is a pool (Pool set) or a route
// (Route set); a route whose Model is "*" keeps the name the client sent.
type ModelAlias struct {
	Name   string
	Target string // as written: "pool", "provider/model" or "provider/*"
	Pool   string
	Route  Route
}

// IsPattern says whether the alias matches names by pattern.
func (a ModelAlias) IsPattern() bool { return strings.Contains(a.Name, "*") }

// RouteFor is the route a request naming sent reaches through a route alias:
// the alias's route, with the model as sent when the target is provider/*.
func (a ModelAlias) RouteFor(sent string) Route {
	r := a.Route
	if r.Model == "*" {
		r.Model = sent
	}
	return r
}

// ModelAliases is the decoded models: section: exact names, and patterns
// ordered most specific first (most characters besides '*'; equals in file
// order). The zero value has no aliases. Immutable once parsed; safe to share.
type ModelAliases struct {
	exact    map[string]ModelAlias
	patterns []ModelAlias
	all      []ModelAlias // in file order
}

// LookupExact finds an alias written for exactly model (no pattern).
func (m ModelAliases) LookupExact(model string) (ModelAlias, bool) {
	a, ok := m.exact[model]
	return a, ok
}

// LookupPattern finds the most specific pattern that matches model.
func (m ModelAliases) LookupPattern(model string) (ModelAlias, bool) {
	for _, a := range m.patterns {
		if globMatch(a.Name, model) {
			return a, true
		}
	}
	return ModelAlias{}, false
}

// All returns every alias in file order (a copy).
func (m ModelAliases) All() []ModelAlias { return append([]ModelAlias(nil), m.all...) }

// Len is the number of aliases.
func (m ModelAliases) Len() int { return len(m.all) }

func newModelAliases(all []ModelAlias) ModelAliases {
	m := ModelAliases{exact: map[string]ModelAlias{}, all: all}
	for _, a := range all {
		if a.IsPattern() {
			m.patterns = append(m.patterns, a)
		} else {
			m.exact[a.Name] = a
		}
	}
	sort.SliceStable(m.patterns, func(i, j int) bool { return literalLen(m.patterns[i].Name) > literalLen(m.patterns[j].Name) })
	return m
}

func literalLen(p string) int { return len(p) - strings.Count(p, "*") }

// globMatch matches name against pattern, where '*' stands for any run of
// characters (none included) and everything else for itself. Unlike path.Match,
// '/' is an ordinary character: model names hold it (deepseek/deepseek-chat).
func globMatch(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// aliasRef is one entry of models: as decoded, checked once every section is in.
type aliasRef struct {
	name, target string
	key, val     *yaml.Node
	path         string
}

// aliases decodes models:: each key a name or pattern, each value a string.
// What the targets name is checked in checkAliases, once pools and providers
// are known.
func (v *validator) aliases(n *yaml.Node, path string) {
	v.aliasesSet = true
	for _, f := range v.entries(n, path) {
		name := f.key.Value
		p := join(path, name)
		switch {
		case strings.TrimSpace(name) == "":
			v.errorf(f.key, p, "an alias must not be empty")
			continue
		case strings.ContainsAny(name, " \t\r\n"):
			v.errorf(f.key, p, "alias %q must not hold whitespace", name)
			continue
		}
		target, ok := v.scalar(f.val, p, "a pool name, provider/model or provider/*", "!!str")
		if !ok {
			continue
		}
		v.aliasRefs = append(v.aliasRefs, aliasRef{name: name, target: strings.TrimSpace(target.Value), key: f.key, val: target, path: p})
	}
}

// checkAliases resolves every alias's target, refusing one that names no pool
// or configured provider, and one that could never apply because a pool or a
// provider/model of the same name is resolved before aliases. A file without
// models: inherits the embedded default's aliases whose targets it configures.
func (v *validator) checkAliases(fallback func() []ModelAlias) {
	c := v.c
	if !v.aliasesSet {
		if fallback == nil {
			return
		}
		var keep []ModelAlias
		for _, a := range fallback() {
			if a.Pool == "" {
				if _, ok := c.Providers[a.Route.Provider]; ok {
					keep = append(keep, a)
				}
			}
		}
		c.Models = newModelAliases(keep)
		return
	}
	var all []ModelAlias
	for _, r := range v.aliasRefs {
		a := ModelAlias{Name: r.name, Target: r.target}
		if _, ok := c.Pools[r.name]; ok {
			v.errorf(r.key, r.path, "alias %q is also a pool name: the pool is resolved first, so the alias would never apply", r.name)
			continue
		}
		if prov, _, ok := strings.Cut(r.name, "/"); ok && !a.IsPattern() {
			if _, ok := c.Providers[prov]; ok {
				v.errorf(r.key, r.path, "alias %q is provider/model of the configured provider %q: such a name goes to it directly, so the alias would never apply", r.name, prov)
				continue
			}
		}
		prov, model, hasSlash := strings.Cut(r.target, "/")
		switch {
		case r.target == "":
			v.errorf(r.val, r.path, "alias %q has an empty target; %s", r.name, v.targetChoices())
			continue
		case !hasSlash:
			if _, ok := c.Pools[r.target]; !ok {
				v.errorf(r.val, r.path, "alias %q: no pool %q is configured; %s", r.name, r.target, v.targetChoices())
				continue
			}
			a.Pool = r.target
		case prov == "" || model == "":
			v.errorf(r.val, r.path, "alias %q: target %q must be provider/model or provider/*; %s", r.name, r.target, v.targetChoices())
			continue
		default:
			if _, ok := c.Providers[prov]; !ok {
				v.errorf(r.val, r.path, "alias %q: no provider %q is configured; %s", r.name, prov, v.targetChoices())
				continue
			}
			if strings.Contains(model, "*") && model != "*" {
				v.errorf(r.val, r.path, "alias %q: target %q may hold '*' only as the whole model (provider/*: the name as sent)", r.name, r.target)
				continue
			}
			a.Route = Route{Provider: prov, Model: model}
		}
		all = append(all, a)
	}
	c.Models = newModelAliases(all)
}

// targetChoices lists what an alias may point to, for an error.
func (v *validator) targetChoices() string {
	pools := "none"
	if len(v.c.PoolOrder) > 0 {
		pools = strings.Join(v.c.PoolOrder, ", ")
	}
	provs := v.c.ProviderNames()
	if len(provs) == 0 {
		provs = []string{"none"}
	}
	return fmt.Sprintf("a target is a pool (have: %s), provider/model or provider/* with a provider of: %s", pools, strings.Join(provs, ", "))
}
