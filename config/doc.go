// Package config is gatectl's YAML schema: strict decoding, validation, defaults,
// and the embedded default config.
//
// Most callers need one call:
//
//	cfg, err := config.Load(path) // "" -> config.Default()
//	if err != nil {
//		// err is config.Errors: every problem at once, each one
//		// "file:line: path: message", e.g.
//		// gatectl.yaml:12: pools.medium.routes[1].provider: no provider "opencode" is configured (have: deepseek, openrouter)
//	}
//
// # Decoding
//
// The file is decoded through yaml.Node, never into structs directly, so every
// problem carries its line and its config path. Unknown keys are errors that list
// the valid keys of their section; so are values of the wrong type ("8" for an
// integer, a bare 60 for a duration), duplicate keys, and a second YAML document.
// Anchors, aliases and merge keys (<<) work as YAML defines them.
//
// # Defaults
//
// Every section is optional. A key left out takes its default. The gate:, retry:
// and quota: sections decode into the engine's own types, and their defaults are
// the engine's (gate.DefaultConfig, retry.DefaultPolicy, pool.DefaultSettings);
// config holds no copy of them.
//
// # Sections are tables
//
// Each section is one table of settings (section_*.go): key, kind, bounds, where
// the value goes, and a one-line doc. The valid keys, the decoding, the checks
// (with file, line and path) and the reference in docs/config.md all come from
// it, so adding a key is adding one entry. A file without a
// providers section gets the embedded default's well-known providers; a file with
// one gets exactly the providers it lists.
//
// # What is not checked here
//
// Referenced files (rules, wasm modules, balance scripts, pluginsDir) need not
// exist, and expr strings are not compiled: the components that load them check
// them (`gatectl check` runs them all). Relative paths are kept as written;
// resolve them with Config.Resolve. Balance scripts run with Config.Dir as their
// working directory, so their argv is passed through untouched.
//
// # Secrets
//
// Config never holds a secret and never expands the environment. A key is named
// by its environment variable (apiKeyEnv). A header that carries a credential
// (Authorization, X-Api-Key, …) must reference it as ${NAME}; the component that
// sends the request expands it then, and nothing else does. Error messages never
// echo header values, env values or a value given as apiKeyEnv.
//
// # Immutability
//
// A *Config returned by Load, Parse or Default is complete, validated and
// immutable: no code may change it, or any map or slice it holds, after it is
// returned. That makes it safe to share between goroutines without locks. A hot
// reload parses a new *Config beside the old one and swaps the pointer only when
// the new one loaded without errors. Default returns a fresh copy on every call.
package config
