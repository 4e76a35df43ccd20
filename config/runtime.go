package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// The runtime settings API (GET/PUT /gate/v1/settings/{section}) changes the
// gate:, retry: and quota: sections of a running server. It speaks the file's
// own keys and validates through the same section tables, so a value refused in
// the file is refused at runtime with the same message, and one accepted there
// means the same thing here.

// RuntimeSections are the sections the runtime settings API can change, in the
// order it lists them.
var RuntimeSections = []string{"retry", "gate", "quota"}

// runtimeSection reaches one section's table and its place in a Config.
type runtimeSection struct {
	encode func(c *Config) map[string]any
	decode func(v *validator, n *yaml.Node, c *Config)
}

var runtimeSections = map[string]runtimeSection{
	"retry": {
		encode: func(c *Config) map[string]any { return retrySchema.encode(&c.Retry) },
		decode: func(v *validator, n *yaml.Node, c *Config) { retrySchema.decode(v, n, "retry", &c.Retry) },
	},
	"gate": {
		encode: func(c *Config) map[string]any { return gateSchema.encode(&c.Gate) },
		decode: func(v *validator, n *yaml.Node, c *Config) { gateSchema.decode(v, n, "gate", &c.Gate) },
	},
	"quota": {
		encode: func(c *Config) map[string]any { return quotaSchema.encode(&c.Quota) },
		decode: func(v *validator, n *yaml.Node, c *Config) { quotaSchema.decode(v, n, "quota", &c.Quota) },
	},
}

// checkSection names the valid sections in its error.
func checkSection(section string) (runtimeSection, error) {
	rs, ok := runtimeSections[section]
	if !ok {
		return rs, fmt.Errorf("unknown settings section %q (sections: %s)", section, strings.Join(RuntimeSections, ", "))
	}
	return rs, nil
}

// SectionObject returns section of c as an object of the file's keys, as JSON
// carries it: durations as strings ("2s"), nested sections as objects, lists as
// arrays. A key whose value the file could not have written (a zero meaning
// "not set", such as gate.safetyFactor 0: derived) is left out. Decoding the
// object with WithSection gives the section back unchanged.
func SectionObject(c *Config, section string) (map[string]any, error) {
	rs, err := checkSection(section)
	if err != nil {
		return nil, err
	}
	return rs.encode(c), nil
}

// WithSection returns a copy of c with partial (an object of the section's
// keys, as PUT /gate/v1/settings/{section} takes it) decoded over the section: a
// key left out keeps c's value, a nested section given in part keeps the rest.
// It checks partial exactly as a config file's section is checked, cross-checks
// included (a gate.models key must name a configured provider). Problems come back
// as Errors without a file or line (Path says where: "retry.multiplier");
// warnings, such as a first wait above the cap, come back beside the copy, whose
// Warnings holds c's and these. c is not changed.
func WithSection(c *Config, section string, partial map[string]any) (*Config, Errors, error) {
	rs, err := checkSection(section)
	if err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(partial)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", section, err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", section, err)
	}
	out := *c
	d := &decoder{}
	v := &validator{decoder: d, c: &out}
	rs.decode(v, doc.Content[0], &out)
	v.crossCheck()
	if len(d.errs) > 0 {
		return nil, nil, withoutLines(d.errs)
	}
	warns := withoutLines(d.warn)
	out.Warnings = append(append([]*Error(nil), c.Warnings...), warns...)
	return &out, warns, nil
}

// withoutLines drops the line numbers the decoder gave es: they count lines of
// the object encoded for it ("line 1"), which nobody wrote.
func withoutLines(es Errors) Errors {
	if len(es) == 0 {
		return es
	}
	out := make(Errors, len(es))
	for i, e := range es {
		c := *e
		c.Line = 0
		out[i] = &c
	}
	return out
}
