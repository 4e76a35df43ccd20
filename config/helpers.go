package config

import "sort"

// Limits returns the effective limits of model key "provider/model": its entry in
// Models over Defaults over the gate's own SafetyFactor. Every field of the result
// is set.
func (g *Gate) Limits(key string) ModelLimits {
	l := g.Defaults
	if m, ok := g.Models[key]; ok {
		if m.TPM > 0 {
			l.TPM = m.TPM
		}
		if m.RPM > 0 {
			l.RPM = m.RPM
		}
		if m.SafetyFactor > 0 {
			l.SafetyFactor = m.SafetyFactor
		}
	}
	if l.SafetyFactor == 0 {
		l.SafetyFactor = g.SafetyFactor
	}
	return l
}

// Kind names a balance source's kind: "script", "http" or "wasm".
func (b *Balance) Kind() string {
	switch {
	case b.HTTP != nil:
		return "http"
	case b.Wasm != nil:
		return "wasm"
	default:
		return "script"
	}
}

// ProviderNames returns the configured provider names, sorted.
func (c *Config) ProviderNames() []string {
	names := make([]string, 0, len(c.Providers))
	for n := range c.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Balance returns the balance source of provider, if one is configured.
func (c *Config) Balance(provider string) (Balance, bool) {
	for _, b := range c.Balances {
		if b.Provider == provider {
			return b, true
		}
	}
	return Balance{}, false
}
