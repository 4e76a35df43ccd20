package config

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine/pool"
)

// poolSchema is one entry of pools:. Its name is checked by pools.
var poolSchema = &schema[Pool]{
	path:     "pools.<name>",
	doc:      "a named, ordered set of interchangeable routes",
	defaults: func() Pool { return Pool{MidSessionSwitch: true, Scoring: Scoring{Default: true}} },
	fields: []setting[Pool]{
		boolField("midSessionSwitch", "a session may move to another route when its provider's allowance is spent",
			func(p *Pool) *bool { return &p.MidSessionSwitch }),
		customField("scoring", "string or mapping", `"default", an expr string, {expr: STRING} or {wasm: FILE}`,
			func(v *validator, n *yaml.Node, path string, p *Pool) { p.Scoring = v.scoring(n, path) }),
		customField("routes", "list", "the routes, at least one", (*validator).routes),
	},
}

// routeSchema is one entry of pools.<name>.routes.
var routeSchema = &schema[Route]{
	path:     "pools.<name>.routes[]",
	doc:      "one provider/model pair",
	defaults: func() Route { return Route{} },
	fields: []setting[Route]{
		customField("provider", "string", "a configured provider",
			func(v *validator, n *yaml.Node, path string, r *Route) {
				if pr, ok := v.nonEmpty(n, path); ok {
					r.Provider = pr
					v.routeRefs = append(v.routeRefs, provRef{pr, n, strings.TrimSuffix(path, ".provider")})
				}
			}).req(""),
		strField("model", "the provider's model name", nil, func(r *Route) *string { return &r.Model }).req(""),
		strField("reasoningEffort", "passed to the provider with each request", nil,
			func(r *Route) *string { return &r.ReasoningEffort }),
	},
}

func (v *validator) pools(n *yaml.Node, path string) {
	fs := v.entries(n, path)
	v.c.Pools = make(map[string]Pool, len(fs))
	v.c.PoolOrder = make([]string, 0, len(fs))
	for _, f := range fs {
		name := f.key.Value
		p := join(path, name)
		switch {
		case contains(pool.ReservedPoolNames, name):
			v.errorf(f.key, p, "pool name %q is reserved (reserved: %s)", name, strings.Join(pool.ReservedPoolNames, ", "))
		case !poolNameRe.MatchString(name):
			v.errorf(f.key, p, "pool name %q must hold only lowercase letters, digits and '-'", name)
		}
		pl := poolSchema.defaults()
		s := poolSchema.decode(v, f.val, p, &pl)
		if s.node == nil && !isNull(f.val) {
			continue // not a mapping: reported
		}
		if x := s.val("routes"); x == nil || isNull(x) || (deref(x).Kind == yaml.SequenceNode && len(deref(x).Content) == 0) {
			at := s.node
			if at == nil {
				at = f.key
			}
			if x != nil {
				at = x
			}
			v.errorf(at, s.sub("routes"), "pool %q needs at least one route", name)
		}
		v.c.Pools[name] = pl
		v.c.PoolOrder = append(v.c.PoolOrder, name)
	}
}

// routes decodes a pool's routes; a route listed twice is an error.
func (v *validator) routes(n *yaml.Node, rp string, pl *Pool) {
	seen := map[Route]int{}
	for i, rn := range v.list(n, rp) {
		p := index(rp, i)
		if isNull(rn) {
			v.errorf(rn, p, "needs provider and model")
			continue
		}
		var r Route
		rs := routeSchema.decode(v, rn, p, &r)
		if rs.node == nil {
			continue
		}
		if j, dup := seen[r]; dup && r.Provider != "" && r.Model != "" {
			v.errorf(rs.node, p, "repeats %s[%d] (%s/%s)", rp, j, r.Provider, r.Model)
		} else {
			seen[r] = i
		}
		pl.Routes = append(pl.Routes, r)
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

// scoringKeys are the keys of scoring's mapping form, of which exactly one is given.
var scoringKeys = []string{"expr", "wasm"}
