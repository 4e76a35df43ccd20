// Package wasm is gatectl's host for gate/v1 WebAssembly plugins: classifiers,
// pool scorers and balance parsers written in any language that compiles to
// WebAssembly, run sandboxed and bounded by wazero.
//
// # The ABI (gate/v1, DESIGN.md)
//
// A module exports "memory", a marker function gate_abi_v1 and one entry point,
// gate_classify, gate_score or gate_balance, each (in_len i32) -> i32. It may
// export _initialize (run once per instance) and gate_init(cfg_len i32) -> i32,
// which receives the plugin's config object. It may import only
//
//	gate.input_read(ptr i32)                 copy the call's JSON input (in_len bytes) to ptr
//	gate.output_write(ptr i32, len i32) i32  hand back the JSON result; 0 = taken
//	gate.log(level i32, ptr i32, len i32)    0 trace … 4 error, under the plugin's name
//	wasi_snapshot_preview1.*                 sandboxed, see below
//
// The entry point returns 0 (the output is the answer), 1 (abstain: the next
// classifier decides; for a scorer, unscored; for a balance parser, no reading) or
// >= 2 (error). A trap, a timeout, an error code, a missing output, an output past
// MaxOutputBytes or one the kind cannot read is an error: the call falls through.
// A second output_write in one call replaces the first.
//
//	kind      input                                               output
//	classify  the failure: {"status","headers","body",…}           {"class","retryAfterMs","window"?,"by"?}
//	score     a reading {"remaining","windows",…} plus             {"score": n | null}
//	          "capacities","coefficients","capacity"
//	balance   {"nowMs","config","fetch":{"status","headers","body"}} a reading (balance script contract)
//
// # Lifecycle
//
//  1. NewHost makes a host: one compilation cache (on disk under stateDir with
//     CacheDir, shared by every runtime the host makes) and the logger and clock.
//  2. Host.Load / LoadBytes compile a module once per sha256 (and memory cap),
//     refuse forbidden imports before anything is instantiated (an *ImportError
//     naming each), check the exports for the kind, and make one instance
//     (instantiate, _initialize, gate_init) so a broken module fails at load.
//  3. The kinds wrap the resulting Plugin: Classifier (engine.Classifier),
//     Scorer (engine.Scorer), Balance (engine.BalanceSource, also registered as
//     balance kind "wasm"). LoadDir loads every classifier of pluginsDir.
//  4. Each call takes an instance from the plugin's pool (made lazily, at most
//     MaxInstances), runs under its deadline and gives it back — or discards it
//     after any failure, or when its memory grew past RetainPages.
//  5. A reload loads again: unchanged modules (same sha256, kind, name, config,
//     limits) come back as handles on the same plugin, keeping their compiled form
//     and warm pool. Closing the old snapshot's handles tears down only what the
//     new snapshot no longer holds.
//  6. Host.Close closes everything.
//
// # Failures and quarantine
//
// Every failure in the module's fault is counted per plugin (Plugin.Stats). After
// MaxFailures (5) in a row the plugin is quarantined for Quarantine (30s, on the
// host's injected clock): its calls fail at once with ErrQuarantined, the warning
// is logged once. When the quarantine runs out the next call goes through; a
// success clears the streak, a failure quarantines again at once. Input larger
// than MaxInputBytes, a pool busy for the whole deadline and the caller's own
// cancellation are not the module's fault and are not counted.
//
// # Sandbox
//
// Modules get no preopened directories, no environment, no arguments; stdout and
// stderr go to HostOptions.Stderr (discarded by default). Time inside the sandbox
// is wazero's fake clock: clock_time_get reads a wall clock fixed at 2022-01-01
// that advances 1ms per read and a monotonic clock likewise, sleep returns at
// once, and random_get is a deterministic source. A plugin is a pure function of
// its input, which is what golden cases need; the one kind that needs the time,
// balance, gets it as nowMs. Modules cannot reach the network: a balance
// module's request is made by the host, with the key from apiKeyEnv, which the
// module never sees.
//
// # Limits (per plugin; Limits, DefaultLimits)
//
//	Timeout        2ms classify and score, 50ms balance (WithCloseOnContextDone)
//	InitTimeout    1s   instantiate + _initialize + gate_init
//	MemoryPages    512  (32 MiB) hard cap: memory.grow fails past it
//	RetainPages    256  an instance grown past it is not pooled again
//	MaxBodyBytes   16 KiB (balance 256 KiB): bodies are cut before the module sees them
//	MaxInputBytes  64 KiB (balance 512 KiB)
//	MaxOutputBytes 16 KiB
//	MaxInstances   2 × GOMAXPROCS, at least 4
//	MaxFailures    5, then Quarantine 30s
package wasm
