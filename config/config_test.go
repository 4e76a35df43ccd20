package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
)

// wellKnown are the embedded default's providers.
var wellKnown = []string{"anthropic", "deepseek", "gemini", "groq", "mistral", "moonshot", "openai", "openrouter", "qwen"}

// wantDefaults is a Config with every documented default, providers aside.
func wantDefaults() *Config {
	c := &Config{
		Listen:   "127.0.0.1:7878",
		Server:   Server{MaxConnections: 4096, HeaderTimeout: 10 * time.Second, BodyTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxBufferedBytes: 256 << 20},
		Upstream: Upstream{FirstByteTimeout: time.Minute, ResponseTimeout: 10 * time.Minute, StreamIdleTimeout: time.Minute},
		API:      API{MaxSubscribers: 256},
		Proxy:    Proxy{HoldNotice: 2 * time.Second, HoldNoticeEvery: 5 * time.Second, MaxHold: 5 * time.Minute},
		StateDir: ".gatectl",
		Log:      Log{Level: "info", Format: "text"},
		Gate: Gate{
			Window: 60 * time.Second, MaxWait: 120 * time.Second, FallbackCooldown: 60 * time.Second,
			OutputReserveTokens: 8192, Learn: true,
			Defaults: ModelLimits{TPM: 1000000, RPM: 60}, Jitter: 0.1, CountGuard: 0.005, MarginSigmas: 5, Pace: 3, PaceBurst: 0.07, MaxModels: 1000,
		},
		Retry: Retry{
			Rounds: 8, InitialDelay: 2 * time.Second, Multiplier: 2, MaxDelay: 60 * time.Second, Jitter: 0.2,
			RespectRetryAfter: true,
			RetryOn:           []engine.Class{"RATE_LIMIT", "OVERLOADED", "SERVER", "TIMEOUT", "TRANSPORT"},
			HintlessBackoff:   false,
			HintlessBaseDelay: 5 * time.Second,
			Mislabeled:        Mislabeled{Enabled: true, Rounds: 3, InitialDelay: 15 * time.Second, Evidence: 10 * time.Minute},
			Transport:         retry.TransportRounds{DNS: 0, Refused: 1, Reset: retry.FollowRounds, Timeout: 1},
			HintRounds:        5,
			AcrossSteps:       true,
		},
		Quota: Quota{DefaultEnabled: true, LongTermDelay: time.Hour, ExhaustedCooldown: time.Hour, FailOpen: true},
	}
	c.Retry.HintClamp.Min, c.Retry.HintClamp.Max = time.Second, 300*time.Second
	return c
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), "gatectl.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	// What config accepts, the engine accepts: its checks run here, with lines.
	if err := c.Gate.Validate(); err != nil {
		t.Errorf("gate.Config.Validate: %v", err)
	}
	if err := c.Retry.Validate(); err != nil {
		t.Errorf("retry.Policy.Validate: %v", err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	for name, src := range map[string]string{
		// An empty file or one of comments only is refused: see testdata/config/empty_file.yaml.
		"empty mapping":  "{}\n",
		"null sections":  "log:\ngate:\nretry:\nquota:\nclassifiers:\npools:\nbalances:\n",
		"empty sections": "log: {}\ngate: {}\nretry: {hintClamp: {}, mislabeled: {}, transport: {}}\nquota: {}\nclassifiers: []\npools: {}\nbalances: []\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := mustParse(t, src)
			if got := c.ProviderNames(); !reflect.DeepEqual(got, wellKnown) {
				t.Errorf("providers = %v, want the well-known %v", got, wellKnown)
			}
			want := wantDefaults()
			want.Path, want.Dir, want.Providers, want.DefaultProviders = c.Path, c.Dir, c.Providers, true
			// Empty and absent lists decode alike for comparison.
			want.Classifiers, want.Pools, want.PoolOrder, want.Balances = c.Classifiers, c.Pools, c.PoolOrder, c.Balances
			// With the well-known providers come the embedded default's aliases.
			want.Models = Default().Models
			if !reflect.DeepEqual(c, want) {
				t.Errorf("defaults differ:\n got %+v\nwant %+v", c, want)
			}
			if len(c.Classifiers)+len(c.Pools)+len(c.PoolOrder)+len(c.Balances) != 0 {
				t.Errorf("lists not empty: %+v", c)
			}
			if c.Quota.NativeRetryFirstProviders != nil {
				t.Errorf("nativeRetryFirstProviders = %v, want none (the engine default)", c.Quota.NativeRetryFirstProviders)
			}
			if len(c.Warnings) != 0 {
				t.Errorf("warnings: %v", c.Warnings)
			}
		})
	}
}

func TestDefaultEmbedded(t *testing.T) {
	c := Default()
	if c.Path != "" || c.Dir != "" {
		t.Errorf("Path, Dir = %q, %q; want empty", c.Path, c.Dir)
	}
	if c.Listen != "127.0.0.1:7878" {
		t.Errorf("Listen = %q", c.Listen)
	}
	if got := c.ProviderNames(); !reflect.DeepEqual(got, wellKnown) {
		t.Errorf("providers = %v, want %v", got, wellKnown)
	}
	for name, p := range c.Providers {
		if p.APIKeyEnv != "" {
			t.Errorf("%s: apiKeyEnv = %q; the default passes the client's key through", name, p.APIKeyEnv)
		}
		wantKind := "openai"
		if name == "anthropic" {
			wantKind = "anthropic"
		}
		if p.Kind != wantKind || !strings.HasPrefix(p.BaseURL, "https://") {
			t.Errorf("%s = %+v", name, p)
		}
	}
	if !strings.Contains(c.Providers["qwen"].BaseURL, "dashscope") || !strings.Contains(c.Providers["qwen"].BaseURL, "compatible-mode") {
		t.Errorf("qwen = %q, want DashScope's OpenAI-compatible endpoint", c.Providers["qwen"].BaseURL)
	}
	if !strings.HasSuffix(c.Providers["gemini"].BaseURL, "/openai") {
		t.Errorf("gemini = %q, want the OpenAI-compatible endpoint", c.Providers["gemini"].BaseURL)
	}
	if !reflect.DeepEqual(c.Quota.NativeRetryFirstProviders, []string{"qwen"}) {
		t.Errorf("nativeRetryFirstProviders = %v", c.Quota.NativeRetryFirstProviders)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	// Each call is a fresh copy: changing one (which callers must never do)
	// cannot reach another.
	c.Providers["openai"] = Provider{Kind: "x"}
	c.Retry.RetryOn[0] = "X"
	d := Default()
	if d.Providers["openai"].Kind != "openai" || d.Retry.RetryOn[0] != "RATE_LIMIT" {
		t.Errorf("Default shares state between calls")
	}
	// And a parsed file without providers gets its own copy of them.
	e := mustParse(t, "log: {level: info}\n")
	if e.Providers["openai"].Kind != "openai" {
		t.Errorf("parsed config shares providers with Default")
	}
}

func TestLoadEmptyPathIsDefault(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("Load(\"\") differs from Default()")
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want ErrNotExist", err)
	}
}

func TestLoadPathAndDir(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(p, []byte("pluginsDir: plugins\nstateDir: /var/lib/gatectl\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != p || c.Dir != dir {
		t.Errorf("Path, Dir = %q, %q", c.Path, c.Dir)
	}
	if got := c.Resolve(c.PluginsDir); got != filepath.Join(dir, "plugins") {
		t.Errorf("Resolve(pluginsDir) = %q", got)
	}
	if got := c.Resolve(c.StateDir); got != "/var/lib/gatectl" {
		t.Errorf("Resolve(absolute) = %q", got)
	}
	if got := c.Resolve(""); got != "" {
		t.Errorf("Resolve(\"\") = %q", got)
	}
	// Errors name the file as it was given.
	if err := os.WriteFile(p, []byte("gate: {window: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+":1: gate.window:") {
		t.Errorf("err = %v", err)
	}
}

func TestParseRelativeDir(t *testing.T) {
	c := mustParse(t, "listen: 127.0.0.1:7878\n")
	wd, _ := os.Getwd()
	if c.Dir != wd || c.Path != "gatectl.yaml" {
		t.Errorf("Path, Dir = %q, %q; want gatectl.yaml, %q", c.Path, c.Dir, wd)
	}
}

func TestExample(t *testing.T) {
	c, err := Load("../examples/gatectl.yaml")
	if err != nil {
		t.Fatalf("examples/gatectl.yaml: %v", err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	if !reflect.DeepEqual(c.PoolOrder, []string{"medium", "advice"}) {
		t.Errorf("PoolOrder = %v", c.PoolOrder)
	}
	if c.Pools["advice"].MidSessionSwitch || !c.Pools["medium"].MidSessionSwitch {
		t.Errorf("midSessionSwitch: %+v", c.Pools)
	}
	if len(c.Balances) == 0 || c.Balances[0].Kind() != "script" || c.Balances[1].Kind() != "http" {
		t.Errorf("balances: %+v", c.Balances)
	}
	// The example shows every default as its value: only what its comments say
	// differs may differ.
	want := wantDefaults()
	if !reflect.DeepEqual(c.Retry, want.Retry) {
		t.Errorf("example retry %+v differs from the defaults %+v", c.Retry, want.Retry)
	}
	c.Gate.Models, want.Gate.Models = nil, nil
	if !reflect.DeepEqual(c.Gate, want.Gate) {
		t.Errorf("example gate %+v differs from the defaults %+v", c.Gate, want.Gate)
	}
	c.Quota.NativeRetryFirstProviders = nil
	if !reflect.DeepEqual(c.Quota, want.Quota) || c.Listen != want.Listen || c.StateDir != want.StateDir || c.Log != want.Log {
		t.Errorf("example top level or quota differs from the defaults")
	}
}

func TestFullConfig(t *testing.T) {
	c := mustParse(t, `
listen: 0.0.0.0:9000
stateDir: /var/lib/gatectl
log: {level: debug, format: json}
providers:
  deepseek: {kind: openai, baseURL: https://api.deepseek.com/v1/, apiKeyEnv: DEEPSEEK_API_KEY}
  claude:
    kind: anthropic
    baseURL: https://api.anthropic.com
    headers: {anthropic-beta: x, X-Api-Key: "${CLAUDE_KEY}"}
gate:
  window: 30s
  safetyFactor: 1
  maxWait: 30s
  fallbackCooldown: 0s
  outputReserveTokens: 0
  learn: false
  defaults: {rpm: 100}
  models:
    deepseek/deepseek-chat: {tpm: 5000, safetyFactor: 0.5, countsAt: completion, windows: fixed}
    claude/claude-sonnet-4-5: {rpm: 10, maxTpm: 40000, maxRpm: 8}
retry:
  rounds: 0
  initialDelay: 500ms
  multiplier: 1
  maxDelay: 10s
  jitter: 0
  respectRetryAfter: false
  retryOn: [rate_limit, QUOTA]
  hintClamp: {min: 500ms, max: 10m}
  hintlessBackoff: true
  hintlessBaseDelay: 3s
  mislabeled: {enabled: false, rounds: 200, initialDelay: 1s, evidence: 1h}
  transport: {dns: null, refused: 0, reset: 2}
classifiers:
  - rules: rules/a.yaml
    cases:
      - {status: 429, expect: RATE_LIMIT}
  - wasm: /abs/b.wasm
    config: {strict: true, n: 2}
pluginsDir: plugins
pools:
  zeta:
    scoring: "reading.remaining * 2"
    routes: [{provider: deepseek, model: deepseek-chat}]
  alpha-2:
    midSessionSwitch: false
    scoring: {wasm: score.wasm}
    routes:
      - {provider: claude, model: claude-sonnet-4-5, reasoningEffort: high}
      - {provider: deepseek, model: deepseek-chat}
  beta:
    scoring: {expr: "1"}
    routes: [{provider: deepseek, model: deepseek-reasoner}]
balances:
  - provider: deepseek
    script: [python3, balance/deepseek.py, --json]
    apiKeyEnv: DEEPSEEK_API_KEY
    env: {REGION: cn, N: 3}
    unit: usd-left
    minimumRemaining: -2.5
    refresh: 30s
    timeout: 2s
    coefficients: {monthly: 0.25, daily: 0}
    capacities: {monthly: 40}
    capacity: 20
  - provider: claude
    http:
      url: https://x.test/balance
      headers: {Authorization: "Bearer ${CLAUDE_KEY}"}
      remaining: body.left
      windows: body.windows
      resetsAt: body.reset
quota:
  defaultEnabled: false
  longTermDelay: 30m
  exhaustedCooldown: 2h
  failOpen: false
  nativeRetryFirstProviders: [deepseek]
`)
	if c.Listen != "0.0.0.0:9000" || c.StateDir != "/var/lib/gatectl" || c.Log != (Log{Level: "debug", Format: "json"}) {
		t.Errorf("top level: %+v", c)
	}
	if got := c.Providers["deepseek"]; !reflect.DeepEqual(got, Provider{Kind: "openai", BaseURL: "https://api.deepseek.com/v1", APIKeyEnv: "DEEPSEEK_API_KEY"}) {
		t.Errorf("deepseek = %+v (trailing slash trimmed)", got)
	}
	if got := c.Providers["claude"]; got.Kind != "anthropic" || got.Headers["X-Api-Key"] != "${CLAUDE_KEY}" || got.Headers["anthropic-beta"] != "x" {
		t.Errorf("claude = %+v", got)
	}
	if len(c.Providers) != 2 {
		t.Errorf("providers = %v: a providers section replaces the well-known ones", c.ProviderNames())
	}
	g := c.Gate
	if g.Window != 30*time.Second || g.SafetyFactor != 1 || g.MaxWait != 30*time.Second || g.FallbackCooldown != 0 ||
		g.OutputReserveTokens != 0 || g.Learn || g.Defaults != (ModelLimits{TPM: 1000000, RPM: 100}) {
		t.Errorf("gate = %+v", g)
	}
	if got := g.Limits("deepseek/deepseek-chat"); got != (ModelLimits{TPM: 5000, RPM: 100, SafetyFactor: 0.5, CountsAt: "completion", Windows: "fixed"}) {
		t.Errorf("Limits(deepseek/deepseek-chat) = %+v", got)
	}
	// A start above a cap starts at it.
	if got := g.Limits("claude/claude-sonnet-4-5"); got != (ModelLimits{TPM: 40000, RPM: 8, SafetyFactor: 1, MaxTPM: 40000, MaxRPM: 8}) {
		t.Errorf("Limits(claude/...) = %+v", got)
	}
	if got := g.Limits("other/x"); got != (ModelLimits{TPM: 1000000, RPM: 100, SafetyFactor: 1}) {
		t.Errorf("Limits(other) = %+v", got)
	}
	r := c.Retry
	if r.Rounds != 0 || r.InitialDelay != 500*time.Millisecond || r.Multiplier != 1 || r.MaxDelay != 10*time.Second ||
		r.Jitter != 0 || r.RespectRetryAfter || !reflect.DeepEqual(r.RetryOn, []engine.Class{"RATE_LIMIT", "QUOTA"}) ||
		r.HintClamp.Min != 500*time.Millisecond || r.HintClamp.Max != 10*time.Minute || !r.HintlessBackoff ||
		r.HintlessBaseDelay != 3*time.Second ||
		r.Mislabeled != (Mislabeled{Enabled: false, Rounds: 200, InitialDelay: time.Second, Evidence: time.Hour}) ||
		r.Transport != (retry.TransportRounds{DNS: retry.FollowRounds, Refused: 0, Reset: 2, Timeout: 1}) {
		t.Errorf("retry = %+v", r)
	}
	if len(c.Classifiers) != 2 || c.Classifiers[0].Rules != "rules/a.yaml" || c.Classifiers[0].Wasm != "" ||
		c.Classifiers[0].Cases[0]["status"] != 429 || c.Classifiers[1].Wasm != "/abs/b.wasm" ||
		c.Classifiers[1].Config["strict"] != true || c.Classifiers[1].Config["n"] != 2 {
		t.Errorf("classifiers = %+v", c.Classifiers)
	}
	if c.PluginsDir != "plugins" {
		t.Errorf("pluginsDir = %q", c.PluginsDir)
	}
	if !reflect.DeepEqual(c.PoolOrder, []string{"zeta", "alpha-2", "beta"}) {
		t.Errorf("PoolOrder = %v, want declared order", c.PoolOrder)
	}
	if p := c.Pools["zeta"]; !p.MidSessionSwitch || p.Scoring != (Scoring{Expr: "reading.remaining * 2"}) {
		t.Errorf("zeta = %+v", p)
	}
	if p := c.Pools["alpha-2"]; p.MidSessionSwitch || p.Scoring != (Scoring{Wasm: "score.wasm"}) ||
		!reflect.DeepEqual(p.Routes, []Route{{"claude", "claude-sonnet-4-5", "high"}, {"deepseek", "deepseek-chat", ""}}) {
		t.Errorf("alpha-2 = %+v", p)
	}
	if p := c.Pools["beta"]; p.Scoring != (Scoring{Expr: "1"}) {
		t.Errorf("beta = %+v", p)
	}
	b := c.Balances[0]
	if b.Kind() != "script" || !reflect.DeepEqual(b.Script, []string{"python3", "balance/deepseek.py", "--json"}) ||
		b.APIKeyEnv != "DEEPSEEK_API_KEY" || !reflect.DeepEqual(b.Env, map[string]string{"REGION": "cn", "N": "3"}) ||
		b.Unit != "usd-left" || b.MinimumRemaining != -2.5 || b.Refresh != 30*time.Second || b.Timeout != 2*time.Second ||
		!reflect.DeepEqual(b.Coefficients, map[string]float64{"monthly": 0.25, "daily": 0}) ||
		!reflect.DeepEqual(b.Capacities, map[string]float64{"monthly": 40}) || b.Capacity == nil || *b.Capacity != 20 {
		t.Errorf("balances[0] = %+v", b)
	}
	b = c.Balances[1]
	if b.Kind() != "http" || !reflect.DeepEqual(*b.HTTP, HTTPBalance{URL: "https://x.test/balance", Headers: map[string]string{"Authorization": "Bearer ${CLAUDE_KEY}"}, Remaining: "body.left", Windows: "body.windows", ResetsAt: "body.reset"}) ||
		b.Refresh != 60*time.Second || b.Timeout != 5*time.Second || b.Capacity != nil {
		t.Errorf("balances[1] = %+v %+v", b, b.HTTP)
	}
	if got, ok := c.Balance("claude"); !ok || got.Provider != "claude" {
		t.Errorf("Balance(claude) = %+v, %v", got, ok)
	}
	if _, ok := c.Balance("nobody"); ok {
		t.Errorf("Balance(nobody) found")
	}
	q := c.Quota
	if q.DefaultEnabled || q.LongTermDelay != 30*time.Minute || q.ExhaustedCooldown != 2*time.Hour || q.FailOpen ||
		!reflect.DeepEqual(q.NativeRetryFirstProviders, []string{"deepseek"}) {
		t.Errorf("quota = %+v", q)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestWasmBalance(t *testing.T) {
	c := mustParse(t, `
balances:
  - provider: qwen
    wasm:
      module: plugins/bal.wasm
      url: https://x.test/b
      headers: {X-Api-Key: "${QWEN_KEY}"}
      config: {currency: CNY}
`)
	b := c.Balances[0]
	if b.Kind() != "wasm" || b.Wasm.Module != "plugins/bal.wasm" || b.Wasm.URL != "https://x.test/b" ||
		b.Wasm.Headers["X-Api-Key"] != "${QWEN_KEY}" || b.Wasm.Config["currency"] != "CNY" {
		t.Errorf("wasm balance = %+v", b.Wasm)
	}
}

func TestScoringDefaultSpellings(t *testing.T) {
	c := mustParse(t, `
pools:
  a: {routes: [{provider: openai, model: m}]}
  b: {scoring: default, routes: [{provider: openai, model: m}]}
`)
	for _, name := range c.PoolOrder {
		if c.Pools[name].Scoring != (Scoring{Default: true}) {
			t.Errorf("%s scoring = %+v", name, c.Pools[name].Scoring)
		}
	}
}

func TestWarnings(t *testing.T) {
	// A balance source naming an unknown provider only loses a reading, so it
	// is reported but does not refuse the config.
	c := mustParse(t, twoProviders+`balances:
  - {provider: opencode-go, script: [node, x.mjs]}
quota:
  nativeRetryFirstProviders: [qwen]
retry:
  initialDelay: 2m
`)
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		`gatectl.yaml:5: balances[0].provider: no provider "opencode-go" is configured (have: deepseek, openrouter); this source's readings would answer no route`,
		`gatectl.yaml:7: quota.nativeRetryFirstProviders[0]: no provider "qwen" is configured (have: deepseek, openrouter); the entry has no effect`,
		`gatectl.yaml:9: retry.initialDelay: 2m exceeds retry.maxDelay (1m); the first wait is capped at 1m`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.Retry.InitialDelay != time.Minute {
		t.Errorf("initialDelay = %s, want capped at maxDelay: lowering the cap pulls the first wait down", c.Retry.InitialDelay)
	}
}

func TestMultipleErrorsAtOnce(t *testing.T) {
	src := `listen: nowhere
gate:
  safetyFactor: 0
  window: 60s
  maxWait: 10s
retry:
  rounds: 999
  retryOn: [NOPE]
bogus: true
pools:
  off:
    routes: [{provider: ghost, model: m}]
balances:
  - {provider: openai}
`
	_, err := Parse([]byte(src), "gatectl.yaml")
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	lines := make([]int, len(es))
	for i, e := range es {
		lines[i] = e.Line
	}
	if want := []int{1, 3, 5, 7, 8, 9, 11, 12, 14}; !reflect.DeepEqual(lines, want) {
		t.Errorf("error lines = %v, want %v:\n%v", lines, want, err)
	}
	if !sort.IntsAreSorted(lines) {
		t.Errorf("errors not in line order")
	}
	// The joined text is one error a line.
	if n := strings.Count(err.Error(), "\n") + 1; n != len(es) {
		t.Errorf("Error() has %d lines for %d errors", n, len(es))
	}
	// Each is reachable through errors.As for *Error.
	var one *Error
	if !errors.As(err, &one) || one.File != "gatectl.yaml" || one.Line != 1 || one.Path != "listen" {
		t.Errorf("errors.As(*Error) = %+v", one)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "g.yaml", Line: 12, Column: 7, Path: "pools.a", Msg: "bad"}, "g.yaml:12: pools.a: bad"},
		{Error{File: "g.yaml", Path: "pools.a", Msg: "bad"}, "g.yaml: pools.a: bad"},
		{Error{File: "g.yaml", Line: 3, Msg: "bad"}, "g.yaml:3: bad"},
		{Error{Line: 3, Path: "x", Msg: "bad"}, "line 3: x: bad"},
		{Error{Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestColumns(t *testing.T) {
	_, err := Parse([]byte("gate:\n  window: 60s\n  safetyFactor: 7\n"), "g.yaml")
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 3 || es[0].Column != 17 {
		t.Errorf("err = %#v", es)
	}
}

// Secrets given by mistake are never echoed back into an error (which ends up
// in logs).
func TestSecretsNotEchoed(t *testing.T) {
	const secret = "sk-live-9f8e7d6c5b4a"
	for name, src := range map[string]string{
		"apiKeyEnv":       "providers:\n  x: {kind: openai, baseURL: https://x.test, apiKeyEnv: " + secret + "}\n",
		"balance key":     "balances:\n  - {provider: openai, script: [x], apiKeyEnv: " + secret + "}\n",
		"header":          "providers:\n  x: {kind: openai, baseURL: https://x.test, headers: {Authorization: Bearer " + secret + "}}\n",
		"x-api-key":       "providers:\n  x: {kind: anthropic, baseURL: https://x.test, headers: {x-api-key: " + secret + "}}\n",
		"http header":     "balances:\n  - provider: openai\n    http: {url: https://x.test, remaining: body.x, headers: {Authorization: " + secret + "}}\n",
		"header not str":  "providers:\n  x: {kind: openai, baseURL: https://x.test, headers: {Authorization: [" + secret + "]}}\n",
		"env not a str":   "balances:\n  - {provider: openai, script: [x], env: {K: {v: " + secret + "}}}\n",
		"header bad name": "providers:\n  x: {kind: openai, baseURL: https://x.test, headers: {\"bad name\": " + secret + "}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(src), "g.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "9f8e7d") {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	c := mustParse(t, `
providers:
  base: &p {kind: openai, baseURL: https://x.test/v1, apiKeyEnv: X_KEY}
  copy: *p
  merged:
    <<: *p
    baseURL: https://y.test/v1
pools:
  a:
    routes: &r
      - {provider: base, model: m}
  b:
    routes: *r
`)
	if !reflect.DeepEqual(c.Providers["copy"], c.Providers["base"]) || c.Providers["copy"].BaseURL != "https://x.test/v1" {
		t.Errorf("alias: %+v", c.Providers["copy"])
	}
	if m := c.Providers["merged"]; m.BaseURL != "https://y.test/v1" || m.APIKeyEnv != "X_KEY" || m.Kind != "openai" {
		t.Errorf("merge: %+v (own keys must win over merged ones)", m)
	}
	if len(c.Pools["b"].Routes) != 1 {
		t.Errorf("aliased routes: %+v", c.Pools["b"])
	}
	// A merged key that is unknown is still an error.
	checkErrs(t, "base: &b {window: 60s, maxwait: 1s}\n", []string{`1: base: unknown key "base"`})
	checkErrs(t, "x: &b {window: 60s, maxwait: 1s}\ngate:\n  <<: *b\n", []string{
		`1: x: unknown key "x"`,
		`1: gate.maxwait: unknown key "maxwait"`})
}

// Parse and Default are safe to call from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	data, err := os.ReadFile("../examples/gatectl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if _, err := Parse(data, "gatectl.yaml"); err != nil {
					t.Error(err)
					return
				}
				if _, err := Parse([]byte("retry: {rounds: -1}\n"), "x.yaml"); err == nil {
					t.Error("no error")
					return
				}
				_ = Default()
			}
		}()
	}
	wg.Wait()
}

func TestDefaultProvidersMarksTheFallback(t *testing.T) {
	if !Default().DefaultProviders {
		t.Error("Default: DefaultProviders = false")
	}
	if c := mustParse(t, "listen: 127.0.0.1:7878\n"); !c.DefaultProviders {
		t.Error("a file without providers: DefaultProviders = false")
	}
	if c := mustParse(t, "providers:\n  deepseek: {kind: openai, baseURL: \"https://api.deepseek.com/v1\"}\n"); c.DefaultProviders {
		t.Error("a file with its own providers: DefaultProviders = true")
	}
}

// streamUsage: false turns off asking an OpenAI stream for its usage; left
// out, it is asked; anything but a boolean is refused with its place.
func TestProviderStreamUsage(t *testing.T) {
	c := mustParse(t, "providers:\n  a: {kind: openai, baseURL: https://a.test}\n  b: {kind: openai, baseURL: https://b.test, streamUsage: false}\n  c: {kind: openai, baseURL: https://c.test, streamUsage: true}\n")
	if c.Providers["a"].NoStreamUsage || !c.Providers["b"].NoStreamUsage || c.Providers["c"].NoStreamUsage {
		t.Fatalf("providers %+v: want only b's stream usage off", c.Providers)
	}
	_, err := Parse([]byte("providers:\n  a: {kind: openai, baseURL: https://a.test, streamUsage: sometimes}\n"), "gatectl.yaml")
	if err == nil || !strings.Contains(err.Error(), "providers.a.streamUsage") {
		t.Fatalf("err %v, want one naming providers.a.streamUsage", err)
	}
	// On an anthropic provider it does nothing: said, not refused.
	c = mustParse(t, "providers:\n  claude: {kind: anthropic, baseURL: https://c.test, streamUsage: false}\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Error(), "providers.claude.streamUsage: has no effect on an anthropic provider") {
		t.Fatalf("warnings %v, want one that streamUsage does nothing on an anthropic provider", c.Warnings)
	}
}
