// Package engine is gatectl's deterministic core: the admission ledger (sliding
// windows of tokens and requests, reservations, cooldowns, the self-learning quota
// and the fair queue), the retry planner, and the route pools.
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
