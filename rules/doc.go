// Package rules classifies failed LLM requests with expr rules, and reads the
// provider's wait hint out of them.
//
// # Roles
//
//   - RuleSet: a compiled rule file. It implements engine.Classifier (and
//     engine.Explainer): the first rule whose condition holds decides, with
//     Verdict.By "<set>/<rule>"; when none holds the set abstains and the
//     engine.Chain asks the next classifier.
//   - Builtin: the built-in rule set, builtin.yaml, embedded. It decides last in
//     every chain; `gatectl classify --show-builtin` prints it and
//     `gatectl classify --explain` shows which of its rules hold for a failure.
//   - ParseHint, ParseDuration, ClampHint: the hint reader the rules use through
//     hint(), for callers that want it directly.
//
// # Rule files
//
// A rule file is YAML: a list of rules, or a mapping with a name, lists of
// phrases, rules and golden cases:
//
//	name: my-gateway                 # the first half of Verdict.By (default: the file's base name)
//	lists:                           # phrase lists rules can name in has()/words()
//	  coolingDown: [cooling down, 冷却中]
//	rules:
//	  - name: cooling-down           # the second half of Verdict.By
//	    when: code() == 429 && has(coolingDown)   # an expr expression, true when the rule applies
//	    class: RATE_LIMIT            # one of the engine.Class names
//	    retryAfterMs: hint()         # optional: a number of ms; nil or negative: no hint
//	    window: minute               # optional: minute|hour|day|week|month, or an expression naming one
//	cases:                           # optional golden cases, run when the file loads
//	  - input: {status: 429, body: "pool cooling down, retry after 28 seconds"}
//	    expect: {class: RATE_LIMIT, retryAfterMs: 28000, window: minute, by: cooling-down}
//	  - {status: 503, expect: OVERLOADED}   # the short form: failure fields beside expect
//	  - {status: 200, abstain: true}        # no rule may hold
//
// Cases have the one form wasm plugin cases and config cases also have
// (internal/failurejson.Case). Keys are checked strictly, the failure's too. Every error names the file, the rule, the field and
// the line and column, e.g.
//
//	gateway.yaml:12:26: rule "cooling-down": when: unknown name coolingdown
//
// # The environment
//
// Expressions are compiled once, when the file loads, against Env (see its doc
// for every field and function). In short: status, provider, model, errorKind,
// body, text, headers, sinceCapacityMs, evidenceMs, capacityRecent; has(),
// words(), hasAll(), match(), header(), code(), hint(), hintIn(), dur(), jstr(),
// jnum(), json(), limitWindow(), requestOverLimit(); and the predefined lists
// minuteWords, minuteAbbr, hourWords, hourAbbr, dayWords, dayAbbr, weekWords,
// weekAbbr, monthWords, monthAbbr.
//
// Phrases are matched on the body lowercased with whitespace, '_' and '-'
// removed, so one phrase covers "rate limit", "rate_limit_exceeded", "RateLimit"
// and a body a terminal wrapped mid-word. All the phrases of a set are compiled
// into one automaton that reads the body once per failure, whatever their
// number; regexps are compiled once; the body is parsed as JSON (leniently:
// SDK renderings such as `Error code: 429 - {...}`, Python reprs, truncated or
// line-wrapped captures) at most once, and only when a rule asks.
//
// # Hints
//
// hint() (and ParseHint) read, in order: the headers retry-after-ms,
// x-ms-retry-after-ms, Retry-After (seconds or an HTTP date, measured from the
// Date header when there is one), x-ratelimit-reset-requests/-tokens and
// x-rate-limit-reset-* (Go durations such as "6m0s" or seconds),
// anthropic-ratelimit-*-reset (RFC 3339, minus Date), x-ratelimit-reset (seconds
// or an epoch); then body fields (retry_after_ms, retry_after_seconds,
// retry_after_sec, retryAfter, retryDelay "26s", an embedded X-RateLimit-Reset);
// then prose ("Please try again in 644ms", "retry after 28 seconds",
// "9m38.016s", "after 1500 ms", "请在 30 秒后重试", "1分30秒后"). Reset headers
// count only when their bucket is empty or the status is 429. In prose, words
// are separated by [_\s-]*, and a number with a unit is preferred to a bare one
// (which counts as seconds), so "after 1500 ms" is never 1500 s. A hint is never
// negative and is as sent: clamping to retry.hintClamp is the planner's job
// (ClampHint).
package rules
