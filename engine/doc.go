// Package engine is gatectl's deterministic core. Its subpackages each do one
// job: gate (admission: the per-model ledger, its learned quota and fair queue),
// retry (what to do after a failure) and pool (where a session runs). This
// package holds what they share: the clock, the classifier chain, and the plain
// data types that cross package lines.
//
// engine imports only the standard library. It defines the small interfaces it needs
// (Clock, Classifier, Scorer, BalanceSource, Store) and the plain data types that
// cross them (Failure, Verdict, Reading, Route); the rules, wasm and balance packages
// implement them, and config wires them into an immutable snapshot.
//
// Time and randomness are inputs: every method that depends on time takes `now`
// (or reads an injected Clock), and every draw takes an injected random source, so
// each rule can be tested exactly, without sleeping.
package engine
