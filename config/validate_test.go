package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// errCase is one config that must fail: want lists every expected error as
// "line: path: message" (a substring of "gatectl.yaml:line: path: message"),
// and no other error may be reported.
type errCase struct {
	name string
	src  string
	want []string
}

// checkErrs parses src as gatectl.yaml and checks its errors are exactly want.
func checkErrs(t *testing.T, src string, want []string) {
	t.Helper()
	c, err := Parse([]byte(src), "gatectl.yaml")
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected errors:\n%v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error; want:\n%s\nconfig: %+v", strings.Join(want, "\n"), c)
	}
	if c != nil {
		t.Errorf("Parse returned a config along with errors")
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not Errors: %v", err, err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false")
	}
	used := make([]bool, len(es))
	for _, w := range want {
		found := false
		for i, e := range es {
			if !used[i] && strings.Contains(e.Error(), "gatectl.yaml:"+w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing error %q", "gatectl.yaml:"+w)
		}
	}
	for i, e := range es {
		if !used[i] {
			t.Errorf("unexpected error %q", e.Error())
		}
	}
}

const twoProviders = `providers:
  deepseek:   {kind: openai, baseURL: https://api.deepseek.com/v1}
  openrouter: {kind: openai, baseURL: https://openrouter.ai/api/v1}
`

func TestValidationErrors(t *testing.T) {
	cases := []errCase{
		// strictness
		{"unknown top-level key", "listen: 127.0.0.1:1\nlisten_addr: x\n",
			[]string{`2: listen_addr: unknown key "listen_addr" (valid: listen, server, upstream, api, stateDir, log, providers, gate, retry, store, classifiers, pluginsDir, pluginLimits, pools, models, balances, quota, proxy)`}},
		{"tab", "gate:\n\twindow: 60s\n", []string{"2: found character that cannot start any token (a tab: YAML indents with spaces)"}},
		{"integer too large for maxConnections", "server:\n  maxConnections: 99999999999999999999\n", []string{"2: server.maxConnections: is too large (got 99999999999999999999)"}},
		{"unknown nested key", "gate:\n  window: 60s\n  maxwait: 120s\n",
			[]string{`3: gate.maxwait: unknown key "maxwait": did you mean "maxWait"? (valid: window, safetyFactor, countGuard, marginSigmas, pace, paceBurst, maxWait, fallbackCooldown, outputReserveTokens, learn, defaults, models, maxInFlightPerSession, maxModels)`}},
		{"unknown key in route", twoProviders + "pools:\n  p:\n    routes:\n      - {provider: deepseek, model: m, effort: high}\n",
			[]string{`7: pools.p.routes[0].effort: unknown key "effort" (valid: provider, model, reasoningEffort)`}},
		{"duplicate key", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n",
			[]string{`2: listen: duplicate key "listen"`}},
		{"section not a mapping", "gate: fast\n",
			[]string{`1: gate: must be a mapping with keys window,`}},
		{"root not a mapping", "- a\n- b\n",
			[]string{`1: must be a mapping with keys listen,`}},
		{"quoted integer", "retry: {rounds: \"8\"}\n",
			[]string{`1: retry.rounds: must be an integer, got the string "8"`}},
		{"bare number for duration", "gate: {window: 60}\n",
			[]string{`1: gate.window: must be a duration such as "60s" or "1h30m", got "60"`}},
		{"bad duration", "gate: {window: 1 minute}\n",
			[]string{`1: gate.window: must be a duration such as "60s" or "1h30m", got "1 minute"`}},
		{"yes is not a bool", "gate: {learn: yes}\n",
			[]string{`1: gate.learn: must be true or false, got the string "yes"`}},
		{"yaml syntax", "gate:\n  window: 60s\n bad: [\n",
			[]string{`2: did not find expected key`}},
		{"two documents", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n",
			[]string{`2: the file holds more than one YAML document; gatectl reads exactly one`}},

		// top level
		{"listen without port", "listen: localhost\n",
			[]string{`1: listen: must be host:port, such as 127.0.0.1:7878 (got "localhost")`}},
		{"listen bad port", "listen: 127.0.0.1:99999\n",
			[]string{`1: listen: port must be a number from 0 to 65535 (got "127.0.0.1:99999")`}},
		{"server bounds", "server: {maxConnections: 0, bodyTimeout: 0s, idleTimeout: -1s, headerTimeout: x}\n", []string{
			`1: server.maxConnections: must be at least 1 (got 0)`,
			`1: server.bodyTimeout: must be greater than 0 (got 0s)`,
			`1: server.idleTimeout: must be greater than 0 (got -1s)`,
			`1: server.headerTimeout:`}},
		{"empty stateDir", "stateDir: \"\"\n", []string{`1: stateDir: must not be empty`}},
		{"empty pluginsDir", "pluginsDir: \"\"\n", []string{`1: pluginsDir: must not be empty`}},
		{"stateDir not a string", "stateDir: [a]\n", []string{`1: stateDir: must be a string, got a list`}},
		{"log level", "log: {level: verbose, format: xml}\n", []string{
			`1: log.level: unknown value "verbose" (valid: trace, debug, info, warn, error)`,
			`1: log.format: unknown value "xml" (valid: text, json)`}},

		// providers
		{"provider kind", "providers:\n  x: {kind: gemini, baseURL: https://x.test}\n",
			[]string{`2: providers.x.kind: unknown value "gemini" (valid: openai, anthropic)`}},
		{"provider missing kind and url", "providers:\n  x: {apiKeyEnv: X_KEY}\n", []string{
			`2: providers.x.kind: is required (one of: openai, anthropic)`,
			`2: providers.x.baseURL: is required`}},
		{"provider null", "providers:\n  x:\n", []string{`2: providers.x: needs kind and baseURL`}},
		{"provider bad url", "providers:\n  x: {kind: openai, baseURL: api.x.test/v1}\n",
			[]string{`2: providers.x.baseURL: must be an absolute http:// or https:// URL (got "api.x.test/v1")`}},
		{"provider name with slash", "providers:\n  a/b: {kind: openai, baseURL: https://x.test}\n",
			[]string{`2: providers["a/b"]: provider name "a/b" must start with a letter or digit`}},
		{"apiKeyEnv holds a key", "providers:\n  x: {kind: openai, baseURL: https://x.test, apiKeyEnv: sk-live-123}\n",
			[]string{`2: providers.x.apiKeyEnv: must name an environment variable`}},
		{"literal credential header", "providers:\n  x:\n    kind: openai\n    baseURL: https://x.test\n    headers: {Authorization: Bearer sk-1, X-Ok: fine}\n",
			[]string{`5: providers.x.headers.Authorization: holds a literal credential`}},
		{"bad header name", "providers:\n  x:\n    kind: openai\n    baseURL: https://x.test\n    headers: {\"Bad Header\": v}\n",
			[]string{`5: providers.x.headers["Bad Header"]: "Bad Header" is not a valid header name`}},
		{"bad env reference", "providers:\n  x:\n    kind: openai\n    baseURL: https://x.test\n    headers: {X-Key: \"${1BAD}\"}\n",
			[]string{`5: providers.x.headers.X-Key: ${1BAD} is not a valid environment variable name`}},

		// gate
		{"safetyFactor above 1", "gate: {safetyFactor: 1.5}\n", []string{`1: gate.safetyFactor: must be in (0, 1] (got 1.5)`}},
		{"safetyFactor zero", "gate: {safetyFactor: 0}\n", []string{`1: gate.safetyFactor: must be in (0, 1] (got 0)`}},
		{"negative window", "gate: {window: -5s}\n", []string{`1: gate.window: must be greater than 0 (got -5s)`}},
		{"negative fallbackCooldown", "gate: {fallbackCooldown: -1s}\n", []string{`1: gate.fallbackCooldown: must not be negative (got -1s)`}},
		{"negative outputReserveTokens", "gate: {outputReserveTokens: -1}\n", []string{`1: gate.outputReserveTokens: must not be negative (got -1)`}},
		{"maxWait below window", "gate:\n  window: 60s\n  maxWait: 30s\n",
			[]string{`3: gate.maxWait: must be at least gate.window (1m), got 30s`}},
		{"window above default maxWait", "gate:\n  window: 5m\n",
			[]string{`2: gate.window: must not exceed gate.maxWait (2m), got 5m`}},
		{"defaults tpm zero", "gate: {defaults: {tpm: 0, rpm: -1}}\n", []string{
			`1: gate.defaults.tpm: must be greater than 0 (got 0)`,
			`1: gate.defaults.rpm: must be greater than 0 (got -1)`}},
		{"model limits", twoProviders + "gate:\n  models:\n    deepseek/chat: {tpm: 10, safetyFactor: 2, burst: 3}\n", []string{
			`6: gate.models["deepseek/chat"].safetyFactor: must be in (0, 1] (got 2)`,
			`6: gate.models["deepseek/chat"].burst: unknown key "burst" (valid: tpm, rpm, maxTpm, maxRpm, otpm, safetyFactor, countsAt, decides, windows)`}},
		{"model countsAt", twoProviders + "gate:\n  models:\n    deepseek/chat: {countsAt: sometimes}\n", []string{
			`6: gate.models["deepseek/chat"].countsAt: unknown value "sometimes" (valid: arrival, completion, learn)`}},
		{"model decides", twoProviders + "gate:\n  models:\n    deepseek/chat: {decides: everything}\n", []string{
			`6: gate.models["deepseek/chat"].decides: unknown value "everything" (valid: known, whole)`}},
		{"model windows", twoProviders + "gate:\n  models:\n    deepseek/chat: {windows: tumbling}\n", []string{
			`6: gate.models["deepseek/chat"].windows: unknown value "tumbling" (valid: fixed, sliding)`}},
		{"model key without provider", twoProviders + "gate:\n  models:\n    deepseek-chat: {rpm: 5}\n",
			[]string{`6: gate.models.deepseek-chat: model keys are provider/model`}},
		{"model key unknown provider", twoProviders + "gate:\n  models:\n    opencode/x: {rpm: 5}\n",
			[]string{`6: gate.models["opencode/x"]: no provider "opencode" is configured (have: deepseek, openrouter)`}},
		{"model key null", twoProviders + "gate:\n  models:\n    deepseek/x:\n",
			[]string{`6: gate.models["deepseek/x"]: needs at least one of tpm, rpm, maxTpm, maxRpm, otpm, safetyFactor, countsAt, decides, windows`}},

		// retry
		{"rounds above 200", "retry: {rounds: 201}\n", []string{`1: retry.rounds: must be from 0 to 200 (got 201)`}},
		{"rounds negative", "retry: {rounds: -1}\n", []string{`1: retry.rounds: must be from 0 to 200 (got -1)`}},
		{"multiplier below 1", "retry: {multiplier: 0.5}\n", []string{`1: retry.multiplier: must be at least 1 (1 = a fixed interval; got 0.5)`}},
		{"jitter above 1", "retry: {jitter: 1.2}\n", []string{`1: retry.jitter: must be in [0, 1] (got 1.2)`}},
		{"jitter negative", "retry: {jitter: -0.1}\n", []string{`1: retry.jitter: must be in [0, 1] (got -0.1)`}},
		{"negative delays", "retry: {initialDelay: -1s, maxDelay: 0s}\n", []string{
			`1: retry.initialDelay: must be greater than 0 (got -1s)`,
			`1: retry.maxDelay: must be greater than 0 (got 0s)`}},
		{"unknown class", "retry:\n  retryOn: [RATE_LIMIT, RATELIMIT, server]\n",
			[]string{`2: retry.retryOn[1]: unknown class "RATELIMIT" (valid: RATE_LIMIT, QUOTA, OVERLOADED, SERVER, TIMEOUT, TRANSPORT, AUTH, INVALID_REQUEST, CONTEXT, MISLABELED, UNKNOWN)`}},
		{"class twice", "retry:\n  retryOn: [SERVER, server]\n", []string{`2: retry.retryOn[1]: class SERVER is listed twice`}},
		{"retryOn not a list", "retry: {retryOn: RATE_LIMIT}\n", []string{`1: retry.retryOn: must be a list, got the string "RATE_LIMIT"`}},
		{"hintClamp min above max", "retry:\n  hintClamp: {min: 10s, max: 5s}\n",
			[]string{`2: retry.hintClamp: min (10s) must not exceed max (5s)`}},
		{"hintClamp min above default max", "retry:\n  hintClamp:\n    min: 10m\n",
			[]string{`3: retry.hintClamp: min (10m) must not exceed max (5m)`}},
		{"hintClamp negative", "retry:\n  hintClamp: {min: -1s}\n", []string{`2: retry.hintClamp.min: must be greater than 0 (got -1s)`}},
		// Checks the engine's Validate makes too, here with file and line.
		{"hintClamp zero", "retry:\n  hintClamp: {min: 0s}\n", []string{`2: retry.hintClamp.min: must be greater than 0 (got 0s)`}},
		{"hintlessBaseDelay zero", "retry: {hintlessBackoff: true, hintlessBaseDelay: 0s}\n",
			[]string{`1: retry.hintlessBaseDelay: must be greater than 0 (got 0s)`}},
		{"retryOn MISLABELED", "retry:\n  retryOn: [RATE_LIMIT, mislabeled]\n",
			[]string{`2: retry.retryOn[1]: MISLABELED is governed by retry.mislabeled, not retryOn`}},
		{"mislabeled rounds while enabled", "retry:\n  mislabeled:\n    rounds: 150\n",
			[]string{`3: retry.mislabeled.rounds: must be at most 100 while retry.mislabeled.enabled is true (got 150)`}},
		{"mislabeled", "retry:\n  mislabeled:\n    rounds: 500\n    evidence: -1m\n    enabled: 1\n", []string{
			`3: retry.mislabeled.rounds: must be from 0 to 200 (got 500)`,
			`4: retry.mislabeled.evidence: must be greater than 0 (got -1m)`,
			`5: retry.mislabeled.enabled: must be true or false, got the number 1`}},
		{"transport", "retry:\n  transport:\n    dns: -1\n    refused: 201\n    reset: fast\n    tcp: 1\n", []string{
			`3: retry.transport.dns: must be from 0 to 200 (or null to follow retry.rounds; got -1)`,
			`4: retry.transport.refused: must be from 0 to 200 (or null to follow retry.rounds; got 201)`,
			`5: retry.transport.reset: must be an integer, got the string "fast"`,
			`6: retry.transport.tcp: unknown key "tcp" (valid: dns, refused, reset, timeout)`}},
		{"transport not a mapping", "retry: {transport: 0}\n", []string{`1: retry.transport: must be a mapping`}},

		// classifiers
		{"classifier with both", "classifiers:\n  - {rules: a.yaml, wasm: b.wasm}\n",
			[]string{`2: classifiers[0]: has both rules and wasm; give exactly one`}},
		{"classifier with neither", "classifiers:\n  - {config: {a: 1}}\n",
			[]string{`2: classifiers[0]: needs exactly one of rules: FILE or wasm: FILE`}},
		{"classifier as string", "classifiers:\n  - rules/x.yaml\n",
			[]string{`2: classifiers[0]: must be a mapping with keys rules, wasm, config, cases, limits, got the string "rules/x.yaml"`}},
		{"classifier unknown key", "classifiers:\n  - {wasm: b.wasm, timeout: 1s}\n",
			[]string{`2: classifiers[0].timeout: unknown key "timeout" (valid: rules, wasm, config, cases, limits)`}},
		{"classifier case not a mapping", "classifiers:\n  - wasm: b.wasm\n    cases: [1]\n",
			[]string{`3: classifiers[0].cases[0]: must be a mapping, got a scalar`}},
		{"classifiers not a list", "classifiers: {rules: x.yaml}\n",
			[]string{`1: classifiers: must be a list, got a mapping`}},

		// pools
		{"reserved pool name", twoProviders + "pools:\n  off:\n    routes: [{provider: deepseek, model: m}]\n",
			[]string{`5: pools.off: pool name "off" is reserved (reserved: status, off, none, disable, disabled, default, reset, auto, error)`}},
		{"every reserved name", twoProviders + "pools:\n  status: {routes: [{provider: deepseek, model: m}]}\n  none: {routes: [{provider: deepseek, model: m}]}\n  disable: {routes: [{provider: deepseek, model: m}]}\n  disabled: {routes: [{provider: deepseek, model: m}]}\n  default: {routes: [{provider: deepseek, model: m}]}\n  reset: {routes: [{provider: deepseek, model: m}]}\n  auto: {routes: [{provider: deepseek, model: m}]}\n  error: {routes: [{provider: deepseek, model: m}]}\n", []string{
			`5: pools.status: pool name "status" is reserved`, `6: pools.none: pool name "none" is reserved`,
			`7: pools.disable: pool name "disable" is reserved`, `8: pools.disabled: pool name "disabled" is reserved`,
			`9: pools.default: pool name "default" is reserved`, `10: pools.reset: pool name "reset" is reserved`,
			`11: pools.auto: pool name "auto" is reserved`, `12: pools.error: pool name "error" is reserved`}},
		{"pool name case", twoProviders + "pools:\n  Medium:\n    routes: [{provider: deepseek, model: m}]\n",
			[]string{`5: pools.Medium: pool name "Medium" must hold only lowercase letters, digits and '-'`}},
		{"pool name underscore", twoProviders + "pools:\n  my_pool:\n    routes: [{provider: deepseek, model: m}]\n",
			[]string{`5: pools.my_pool: pool name "my_pool" must hold only lowercase letters, digits and '-'`}},
		{"pool without routes", twoProviders + "pools:\n  medium: {midSessionSwitch: false}\n",
			[]string{`5: pools.medium.routes: pool "medium" needs at least one route`}},
		{"pool with empty routes", twoProviders + "pools:\n  medium:\n    routes: []\n",
			[]string{`6: pools.medium.routes: pool "medium" needs at least one route`}},
		{"pool null", twoProviders + "pools:\n  medium:\n",
			[]string{`5: pools.medium.routes: pool "medium" needs at least one route`}},
		{"route without provider or model", twoProviders + "pools:\n  medium:\n    routes:\n      - {reasoningEffort: high}\n", []string{
			`7: pools.medium.routes[0].provider: is required`,
			`7: pools.medium.routes[0].model: is required`}},
		{"route repeated", twoProviders + "pools:\n  medium:\n    routes:\n      - {provider: deepseek, model: m}\n      - {provider: deepseek, model: m}\n",
			[]string{`8: pools.medium.routes[1]: repeats pools.medium.routes[0] (deepseek/m)`}},
		{"route undefined provider", twoProviders + "pools:\n  medium:\n    routes:\n      - {provider: deepseek, model: deepseek-chat}\n      - {provider: opencode, model: x}\n",
			[]string{`8: pools.medium.routes[1].provider: no provider "opencode" is configured (have: deepseek, openrouter); a request on that route would fail`}},
		{"undefined provider named in several places", twoProviders + "pools:\n  medium:\n    routes:\n      - {provider: opencode, model: x}\n  advice:\n    routes:\n      - {provider: opencode, model: y}\nbalances:\n  - {provider: opencode, script: [x]}\n", []string{
			`7: pools.medium.routes[0].provider: no provider "opencode" is configured (have: deepseek, openrouter); named by pools.medium.routes[0], pools.advice.routes[0], balances[0]`,
			`10: pools.advice.routes[0].provider: no provider "opencode" is configured (have: deepseek, openrouter); named by pools.medium.routes[0], pools.advice.routes[0], balances[0]`}},
		{"scoring wrong shapes", twoProviders + "pools:\n  a:\n    scoring: {wasm: s.wasm, expr: x}\n    routes: [{provider: deepseek, model: m}]\n  b:\n    scoring: 3\n    routes: [{provider: deepseek, model: m}]\n  c:\n    scoring: {}\n    routes: [{provider: deepseek, model: m}]\n", []string{
			`6: pools.a.scoring: has both wasm and expr; give exactly one`,
			`9: pools.b.scoring: must be "default", an expr string, or {wasm: FILE}, got the number 3`,
			`12: pools.c.scoring: must be "default", an expr string, or {wasm: FILE}`}},
		{"midSessionSwitch not a bool", twoProviders + "pools:\n  a:\n    midSessionSwitch: \"false\"\n    routes: [{provider: deepseek, model: m}]\n",
			[]string{`6: pools.a.midSessionSwitch: must be true or false, got the string "false"`}},

		// balances
		{"balance with no source", twoProviders + "balances:\n  - provider: deepseek\n    unit: usd\n",
			[]string{`5: balances[0]: needs exactly one source: script, http or wasm`}},
		{"balance with two sources", twoProviders + "balances:\n  - provider: deepseek\n    script: [x]\n    wasm: {module: m.wasm, url: https://x.test}\n",
			[]string{`7: balances[0]: has script and wasm; give exactly one source (script, http or wasm)`}},
		{"balance with three sources", twoProviders + "balances:\n  - provider: deepseek\n    script: [x]\n    http: {url: https://x.test, remaining: body.x}\n    wasm: {module: m.wasm, url: https://x.test}\n",
			[]string{`7: balances[0]: has script and http and wasm; give exactly one source`}},
		{"script as a string", twoProviders + "balances:\n  - provider: deepseek\n    script: python3 balance/deepseek.py\n",
			[]string{`6: balances[0].script: must be an argv list such as [python3, balance/x.py], not a string: a script never runs through a shell (got "python3 balance/deepseek.py")`}},
		{"script empty", twoProviders + "balances:\n  - provider: deepseek\n    script: []\n",
			[]string{`6: balances[0].script: must name a program`}},
		{"script null", twoProviders + "balances:\n  - provider: deepseek\n    script:\n",
			[]string{`6: balances[0].script: must name a program`}},
		{"script with a non-string", twoProviders + "balances:\n  - provider: deepseek\n    script: [python3, [x]]\n",
			[]string{`6: balances[0].script[1]: must be a string, got a list`}},
		{"balance without provider", twoProviders + "balances:\n  - script: [x]\n",
			[]string{`5: balances[0].provider: is required`}},
		{"two balances for one provider", twoProviders + "balances:\n  - {provider: deepseek, script: [a]}\n  - {provider: deepseek, script: [b]}\n",
			[]string{`6: balances[1].provider: provider "deepseek" already has a balance source at balances[0] (one per provider)`}},
		{"balance numbers", twoProviders + "balances:\n  - provider: deepseek\n    script: [x]\n    refresh: 0s\n    timeout: -1s\n    coefficients: {monthly: -1}\n    capacities: {monthly: 0}\n    capacity: -20\n    minimumRemaining: lots\n", []string{
			`7: balances[0].refresh: must be greater than 0 (got 0s)`,
			`8: balances[0].timeout: must be greater than 0 (got -1s)`,
			`9: balances[0].coefficients.monthly: must not be negative (0 drops the window from scoring; got -1)`,
			`10: balances[0].capacities.monthly: must be greater than 0 (got 0)`,
			`11: balances[0].capacity: must be greater than 0 (got -20)`,
			`12: balances[0].minimumRemaining: must be a number, got the string "lots"`}},
		{"balance env", twoProviders + "balances:\n  - provider: deepseek\n    script: [x]\n    apiKeyEnv: DS_KEY\n    env: {DS_KEY: x, \"BAD-NAME\": y}\n", []string{
			`8: balances[0].env.DS_KEY: sets DS_KEY, the apiKeyEnv variable`,
			`8: balances[0].env.BAD-NAME: "BAD-NAME" is not a valid environment variable name`}},
		{"http balance", twoProviders + "balances:\n  - provider: deepseek\n    http:\n      url: ftp://x.test\n      headers: {Authorization: Bearer sk-1}\n      remaining: \"\"\n      method: POST\n", []string{
			`7: balances[0].http.url: must be an absolute http:// or https:// URL (got "ftp://x.test")`,
			`8: balances[0].http.headers.Authorization: holds a literal credential`,
			`9: balances[0].http.remaining: must not be empty`,
			`10: balances[0].http.method: unknown key "method" (valid: url, headers, remaining, windows, resetsAt)`}},
		{"http balance missing", twoProviders + "balances:\n  - provider: deepseek\n    http: {headers: {}}\n", []string{
			`6: balances[0].http.url: is required`,
			`6: balances[0].http.remaining: is required`}},
		{"wasm balance missing", twoProviders + "balances:\n  - provider: deepseek\n    wasm: {config: {a: 1}}\n", []string{
			`6: balances[0].wasm.module: is required`,
			`6: balances[0].wasm.url: is required`}},
		{"balances not a list", twoProviders + "balances:\n  deepseek: {script: [x]}\n",
			[]string{`5: balances: must be a list, got a mapping`}},

		// odd values
		{"nan and inf", "gate: {safetyFactor: .nan}\nretry: {multiplier: .inf}\n", []string{
			`1: gate.safetyFactor: must be a finite number, got the number .nan`,
			`2: retry.multiplier: must be a finite number, got the number .inf`}},
		{"integer too large", "retry: {rounds: 99999999999999999999}\n",
			[]string{`1: retry.rounds: is too large (got 99999999999999999999)`}},
		{"float for integer", "retry: {rounds: 2.5}\n",
			[]string{`1: retry.rounds: must be an integer, got the number 2.5`}},
		{"null list items", twoProviders + "classifiers:\n  -\npools:\n  a:\n    routes:\n      -\nbalances:\n  -\n", []string{
			`5: classifiers[0]: needs rules: FILE or wasm: FILE`,
			`9: pools.a.routes[0]: needs provider and model`,
			`11: balances[0]: needs provider and one of script, http or wasm`}},
		{"empty strings", twoProviders + "classifiers:\n  - {rules: \"\"}\npools:\n  a:\n    scoring: \" \"\n    routes: [{provider: deepseek, model: \"\"}]\n", []string{
			`5: classifiers[0].rules: must not be empty`,
			`8: pools.a.scoring: must not be empty (use "default")`,
			`9: pools.a.routes[0].model: must not be empty`}},
		{"null sources", twoProviders + "balances:\n  - {provider: deepseek, http: }\n  - {provider: openrouter, wasm: }\n", []string{
			`5: balances[0].http: needs url and remaining`,
			`6: balances[1].wasm: needs module and url`}},
		{"non-string key", "gate: {[a]: 1}\n", []string{`1: gate: keys must be strings, got a list`}},
		{"bad merge", "gate:\n  <<: 3\n", []string{`2: gate: merge key << needs a mapping or a list of mappings, got the number 3`}},
		{"self merge", "gate: &a {<<: *a, window: 10s}\n", []string{`1: gate: merge key << merges a mapping into itself (an anchor that refers to itself)`}},
		{"self merge in a list", "gate: &a {<<: [*a], window: 10s}\n", []string{`1: gate: merge key << merges a mapping into itself (an anchor that refers to itself)`}},

		// quota
		{"quota", "quota:\n  longTermDelay: 0s\n  exhaustedCooldown: -1h\n  failOpen: maybe\n  nativeRetryFirstProviders: [qwen, qwen]\n", []string{
			`2: quota.longTermDelay: must be greater than 0 (got 0s)`,
			`3: quota.exhaustedCooldown: must be greater than 0 (got -1h)`,
			`4: quota.failOpen: must be true or false, got the string "maybe"`,
			`5: quota.nativeRetryFirstProviders[1]: provider "qwen" is listed twice`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkErrs(t, tc.src, tc.want) })
	}
}

func TestPluginLimitsAndSessionCap(t *testing.T) {
	c, err := Parse([]byte(`
gate: {maxInFlightPerSession: 2}
classifiers:
  - wasm: plugins/a.wasm
    limits: {timeout: 5ms, memoryPages: 64, maxBodyBytes: 4096, maxOutputBytes: 1024}
`), "gatectl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := PluginLimits{Timeout: 5 * time.Millisecond, MemoryPages: 64, MaxBodyBytes: 4096, MaxOutputBytes: 1024}
	if c.Classifiers[0].Limits != want || c.Gate.MaxInFlightPerSession != 2 {
		t.Fatalf("limits %+v cap %d", c.Classifiers[0].Limits, c.Gate.MaxInFlightPerSession)
	}
	_, err = Parse([]byte(`
gate: {maxInFlightPerSession: -1}
classifiers:
  - rules: r.yaml
    limits: {timeout: 5ms}
  - wasm: a.wasm
    limits: {memoryPages: 0, speed: 3}
`), "gatectl.yaml")
	for _, want := range []string{
		"gatectl.yaml:2: gate.maxInFlightPerSession: must not be negative",
		"gatectl.yaml:5: classifiers[0].limits: limits apply to wasm plugins only",
		"classifiers[1].limits.memoryPages",
		`classifiers[1].limits.speed: unknown key "speed" (valid: timeout, memoryPages, maxBodyBytes, maxOutputBytes)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A mapping merged through many paths (&aN {<<: [*aN-1 ×10]}, twelve deep: 10¹²
// paths in a few hundred bytes) is walked once, not once per path: without that,
// parsing this file would not end.
func TestMergeThroughManyPathsWalkedOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString("x0: &a0 {window: 10s}\n")
	for i := 1; i <= 12; i++ {
		refs := strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10)
		fmt.Fprintf(&b, "x%d: &a%d {<<: [%s]}\n", i, i, strings.TrimSuffix(refs, ", "))
	}
	b.WriteString("gate: {<<: *a12}\n")
	_, err := Parse([]byte(b.String()), "merges.yaml")
	if err == nil || !strings.Contains(err.Error(), `unknown key "x0"`) {
		t.Fatalf("err = %v, want the x… keys reported as unknown and nothing else going wrong", err)
	}
}

// A pool whose routes pass the client's own key through to two providers
// sends a client's key to whichever the draw picks: said at load (right for
// replicas that take one key, a key sent where it does not belong otherwise).
// One pass-through provider among keyed ones says nothing.
func TestPoolWithTwoPassThroughProvidersWarned(t *testing.T) {
	c := mustParse(t, `providers:
  pass:  {kind: openai, baseURL: "https://a.example/v1"}
  pass2: {kind: openai, baseURL: "https://b.example/v1"}
  keyed: {kind: openai, baseURL: "https://c.example/v1", apiKeyEnv: C_KEY}
pools:
  ok:  {routes: [{provider: pass, model: m}, {provider: keyed, model: m}]}
  duo: {routes: [{provider: pass, model: m}, {provider: keyed, model: m}, {provider: pass2, model: m}, {provider: pass2, model: n}]}
`)
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := `gatectl.yaml:7: pools.duo.routes[2].provider: pass2 and pass (pools.duo.routes[0]) both pass the client's own key through (no apiKeyEnv)`
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Fatalf("warnings %q, want one: %s", got, want)
	}
}
