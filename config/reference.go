package config

import (
	"fmt"
	"strings"
)

// documented is a section table that can write its part of the reference.
type documented interface {
	writeReference(b *strings.Builder)
}

// sections lists every section table, in the order the reference shows them.
var sections = []documented{
	topSchema, serverSchema, upstreamSchema, apiSchema, logSchema, providerSchema,
	gateSchema, limitsSchema, storeSchema, redisSchema,
	retrySchema, clampSchema, mislabeledSchema, transportSchema,
	classifierSchema, pluginLimitsSchema, dirPluginLimitsSchema,
	poolSchema, routeSchema,
	balanceSchema, httpBalanceSchema, wasmBalanceSchema,
	quotaSchema,
	proxySchema,
}

// reference returns the config reference (docs/config.md), generated from the
// section tables: every key with its kind, bounds, default and doc.
func reference() string {
	var b strings.Builder
	b.WriteString("# gatectl config reference\n\n")
	b.WriteString("Generated from the section tables in config/section_*.go by `go test ./config -update`; do not edit.\n")
	b.WriteString("Durations are Go duration strings (\"90s\", \"1h30m\"). Every section is optional.\n")
	for _, s := range sections {
		s.writeReference(&b)
	}
	return b.String()
}

func (sc *schema[T]) writeReference(b *strings.Builder) {
	fmt.Fprintf(b, "\n## `%s`\n\n%s.\n\n", sc.path, sc.doc)
	b.WriteString("| key | kind | bounds | default | meaning |\n|---|---|---|---|---|\n")
	d := sc.defaults()
	for _, f := range sc.fields {
		def := ""
		if f.show != nil {
			if v := f.show(&d); v != "" {
				def = "`" + v + "`"
			}
		}
		if f.required {
			def = "required"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", f.key, f.kind, cell(f.bounds), def, cell(f.doc))
	}
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
