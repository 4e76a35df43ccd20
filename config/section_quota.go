package config

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine/pool"
)

// quotaSchema is quota:, decoded into the engine's pool.Settings.
var quotaSchema = &schema[Quota]{
	path:     "quota",
	doc:      "what a QUOTA failure does",
	defaults: pool.DefaultSettings,
	fields: []setting[Quota]{
		boolField("defaultEnabled", "quota handling of a session with no setting of its own",
			func(q *Quota) *bool { return &q.DefaultEnabled }),
		durField("longTermDelay", "interval between long-term attempts", positive,
			func(q *Quota) *time.Duration { return &q.LongTermDelay }),
		durField("exhaustedCooldown", "how long a QUOTA failure keeps its provider marked", positive,
			func(q *Quota) *time.Duration { return &q.ExhaustedCooldown }),
		boolField("failOpen", "a route with no balance reading is usable",
			func(q *Quota) *bool { return &q.FailOpen }),
		customField("nativeRetryFirstProviders", "list", "providers whose own bounded retry runs before a QUOTA failure marks them",
			(*validator).nativeRetryFirst).
			encodedBy(func(q *Quota) (any, bool) {
				return append([]string{}, q.NativeRetryFirstProviders...), false
			}),
	},
}

func (v *validator) nativeRetryFirst(n *yaml.Node, p string, q *Quota) {
	seen := map[string]bool{}
	// The list replaces what the target held (a runtime setting decodes over the
	// file's list, not after it).
	q.NativeRetryFirstProviders = nil
	for i, it := range v.list(n, p) {
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
