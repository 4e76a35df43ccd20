package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// classifierSchema is one entry of classifiers:.
var classifierSchema = &schema[ClassifierRef]{
	path:     "classifiers[]",
	doc:      "one link of the classifier chain: exactly one of rules or wasm",
	defaults: func() ClassifierRef { return ClassifierRef{} },
	fields: []setting[ClassifierRef]{
		strField("rules", "expr rule file", nil, func(r *ClassifierRef) *string { return &r.Rules }),
		strField("wasm", "gate/v1 WebAssembly module", nil, func(r *ClassifierRef) *string { return &r.Wasm }),
		customField("config", "mapping", "handed to the module's gate_init",
			func(v *validator, n *yaml.Node, path string, r *ClassifierRef) { r.Config = v.anyMap(n, path) }),
		customField("cases", "list", "golden cases `gatectl check` runs",
			func(v *validator, n *yaml.Node, path string, r *ClassifierRef) {
				for j, cn := range v.list(n, path) {
					if m := v.anyMap(cn, index(path, j)); m != nil {
						r.Cases = append(r.Cases, m)
					} else if isNull(cn) {
						v.errorf(cn, index(path, j), "must be a mapping, got null")
					}
				}
			}),
		subField("limits", "bounds of a wasm plugin; wasm only", pluginLimitsSchema,
			func(r *ClassifierRef) *PluginLimits { return &r.Limits }),
	},
	check: func(v *validator, s section, r *ClassifierRef) {
		switch {
		case s.has("rules") && s.has("wasm"):
			v.errorf(s.node, s.path, "has both rules and wasm; give exactly one")
		case !s.has("rules") && !s.has("wasm"):
			v.errorf(s.node, s.path, "needs exactly one of rules: FILE or wasm: FILE")
		}
		if x := s.val("limits"); x != nil && !s.has("wasm") {
			v.errorf(x, s.sub("limits"), "limits apply to wasm plugins only")
		}
	},
}

// pluginLimitsSchema bounds one WebAssembly plugin; a key left out takes the host's default.
var pluginLimitsSchema = &schema[PluginLimits]{
	path:     "classifiers[].limits",
	doc:      "a key left out takes the host's default",
	defaults: func() PluginLimits { return PluginLimits{} },
	fields:   pluginLimitFields,
}

// dirPluginLimitsSchema bounds every module dropped into pluginsDir, with the same
// keys as a named plugin's limits.
var dirPluginLimitsSchema = &schema[PluginLimits]{
	path:     "pluginLimits",
	doc:      "bounds of the modules dropped into pluginsDir, not of classifiers[] entries; a key left out takes the host's default",
	defaults: func() PluginLimits { return PluginLimits{} },
	fields:   pluginLimitFields,
}

var pluginLimitFields = []setting[PluginLimits]{
	durField("timeout", "deadline of one call", positive,
		func(l *PluginLimits) *time.Duration { return &l.Timeout }),
	intField("memoryPages", "memory cap in 64 KiB pages (65536 = 4 GiB)", between(1, 65536),
		func(l *PluginLimits) *int { return &l.MemoryPages }),
	intField("maxBodyBytes", "longest failure body handed to the plugin", inherit,
		func(l *PluginLimits) *int { return &l.MaxBodyBytes }),
	intField("maxOutputBytes", "longest output the plugin may write", inherit,
		func(l *PluginLimits) *int { return &l.MaxOutputBytes }),
}

func (v *validator) classifiers(n *yaml.Node, path string) {
	items := v.list(n, path)
	v.c.Classifiers = make([]ClassifierRef, 0, len(items))
	for i, it := range items {
		p := index(path, i)
		if isNull(it) {
			v.errorf(it, p, "needs rules: FILE or wasm: FILE")
			continue
		}
		ref := classifierSchema.defaults()
		if s := classifierSchema.decode(v, it, p, &ref); s.node == nil {
			continue
		}
		v.c.Classifiers = append(v.c.Classifiers, ref)
	}
}
