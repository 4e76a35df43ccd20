// Package balance implements gatectl's balance sources: the programs and endpoints
// that report how much allowance a provider has left, and the refresh cache that
// decides when to ask them again.
//
// # Sources
//
// A source implements engine.BalanceSource. Two kinds are built in, and more join
// through Register (the wasm package adds "wasm"):
//
//   - "script" (Script): runs an argv — never a shell — in the config's directory,
//     with an environment holding only PATH, HOME, the literal `env` entries and the
//     key named by `apiKeyEnv`. Its stdout is one JSON object, the balance script
//     contract of DESIGN.md (see ParseReading). A non-zero exit, a timeout (the whole
//     process group is killed) or any other output is a missing reading.
//   - "http" (HTTP): GETs a URL whose headers may carry the key (`${NAME}`, NAME
//     being the apiKeyEnv variable, is the only reference expanded) and maps the JSON
//     response with expr expressions over `body`, compiled once at construction.
//
// The wasm package adds "wasm", whose module is loaded on the host the caller
// names in Spec.Modules (BuildOptions.Modules for FromConfig): there is no
// process-wide default host.
//
// New builds a source of the kind a Spec describes; FromConfig builds one from a
// `balances[i]` entry of the config, already wrapped in a Cached, and SetFromConfig
// builds them all into a Set, the pool.Readings the pools draw with.
//
// # Refresh
//
// Cached wraps a source: a reading answers for `refresh`; Get waits only when the
// source is due, for at most the source's `timeout`, and concurrent callers of a due
// source share one read. A failed read answers (as a missing reading) for refresh
// too, so a broken script starts at most once per refresh. Cached is itself an
// engine.BalanceSource; Set holds one per provider and implements pool.Readings
// (Refresh the due ones, then Last without blocking).
//
// # Secrets
//
// A script's stdout is never logged, at any level, and no error carries any of it
// (nor of its stderr, nor of an HTTP response body): errors say what went wrong
// (exit status, timeout, "not a JSON object", a byte count), never what was printed.
// Parsed readings are not logged either; their counts are, at debug level.
package balance
