package config

import "sort"

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
