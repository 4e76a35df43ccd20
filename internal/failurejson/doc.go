// Package failurejson reads the two hand-written forms a failure takes outside
// the daemon, once for every reader:
//
//   - a failure object, {"status":429,"headers":{...},"body":"...","provider":"..."},
//     in JSON (Decode), or as golden cases hold it once YAML or JSON has decoded
//     it (FromValue); `gatectl classify` reads it on stdin with DecodeRecord,
//     which skips keys that are not a failure's (captured records carry their
//     own) and reads the rest the same way;
//   - a golden case, a failure and the verdict expected of it, as rule files,
//     the config's classifiers[i].cases and plugin case files write it (ParseCase,
//     then Case.Check against a classifier's answer).
//
// rules (rule files, config cases) and wasm (plugin cases) both read these
// forms, and they do not import each other; cmd/gatectl reads failures too. The
// package sits under internal/ because the forms are input syntax, not part of
// the core's model: engine keeps the value types (engine.Failure,
// engine.Verdict) and imports only the standard library, and this package
// imports only engine, so the direction cmd → rules, wasm → internal/failurejson
// → engine holds.
//
// # Decoding rules
//
// A failure is decoded strictly in its keys and leniently in its values, where
// real captures vary:
//
//   - keys: status, headers, body, provider, model, errorKind, sinceCapacityMs;
//     any other key is refused, by name (DecodeRecord skips it instead);
//   - status: a number or a numeric string, 0 or null for "no HTTP answer" (a
//     transport error), otherwise a valid HTTP status, 100 to 599;
//   - headers: a mapping of name to a string, a number, a boolean, null (""), or
//     a list of those, joined with ", " as HTTP joins repeated header values;
//   - body: a string; an object or array is kept as its compact JSON text; null
//     is "";
//   - provider, model, errorKind: strings (or null);
//   - sinceCapacityMs: a number of milliseconds >= 0, or null.
//
// Errors are lowercase and name the key ("headers[\"x-list\"]: ..."); the caller
// adds where the failure was (a case index, a line).
package failurejson
