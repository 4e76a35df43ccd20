package rules

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

func mustParse(t *testing.T, src string, opts Options) *RuleSet {
	t.Helper()
	rs, err := Parse("t.yaml", []byte(src), opts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rs
}

func classify(t *testing.T, rs *RuleSet, f engine.Failure) (engine.Verdict, bool) {
	t.Helper()
	v, ok, err := rs.Classify(context.Background(), &f)
	if err != nil {
		t.Fatalf("Classify: %v", err)
	}
	return v, ok
}

func TestLoadForms(t *testing.T) {
	list := `
- name: a
  when: status == 429
  class: rate_limit
`
	mapping := `
name: gw
description: a gateway
lists:
  slow: [slow down]
rules:
  - name: a
    when: has(slow)
    class: RATE_LIMIT
    window: minute
cases:
  - {input: {status: 429, body: "Slow Down"}, expect: {class: RATE_LIMIT, window: minute, by: a}}
`
	rs := mustParse(t, list, Options{})
	if rs.Name() != "t" {
		t.Errorf("name = %q, want the file's base name", rs.Name())
	}
	if v, ok := classify(t, rs, engine.Failure{Status: 429}); !ok || v.Class != engine.ClassRateLimit || v.By != "t/a" {
		t.Errorf("list form: %+v %v", v, ok)
	}
	if _, ok := classify(t, rs, engine.Failure{Status: 500}); ok {
		t.Errorf("list form decided a 500")
	}
	rs = mustParse(t, mapping, Options{})
	if v, _ := classify(t, rs, engine.Failure{Body: "please slow_down"}); v.By != "gw/a" || v.Window != "minute" {
		t.Errorf("mapping form: %+v", v)
	}
	if got := mustParse(t, mapping, Options{Name: "other"}).Name(); got != "other" {
		t.Errorf("Options.Name: got %q", got)
	}
	if info := rs.Rules(); len(info) != 1 || info[0].Name != "a" || info[0].Line != 7 || info[0].Class != engine.ClassRateLimit {
		t.Errorf("Rules() = %+v", info)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join("..", "testdata", "rules", "gateway.yaml")
	rs, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Name() != "my-gateway" || rs.File() != path || len(rs.Source()) == 0 {
		t.Errorf("Load: name %q file %q", rs.Name(), rs.File())
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoadErrors: every error names the file, the rule, the field, and the line
// and column of the problem.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"yaml syntax", "- name: a\n  when: [", "t.yaml: yaml:"},
		{"not a list", "42", "t.yaml:1:1: want a list of rules"},
		{"empty rules", "name: x\nrules: []", "t.yaml:2:8: rules: must be a non-empty list"},
		{"unknown top key", "nmae: x\nrules: [{name: a, when: 'true', class: QUOTA}]", `t.yaml:1:1: unknown key "nmae"`},
		{"unknown rule key", "- name: a\n  when: 'true'\n  class: QUOTA\n  retryAfter: 5", `t.yaml:4:3: rule "a": rules[0]: unknown key "retryAfter" (valid: name, description, when, class, retryAfterMs, window)`},
		{"missing name", "- when: 'true'\n  class: QUOTA", "t.yaml:1:3: rules[0]: a rule needs a name"},
		{"bad name", "- name: a/b\n  when: 'true'\n  class: QUOTA", `t.yaml:1:3: rule "a/b": name: must not contain '/'`},
		{"duplicate name", "- {name: a, when: 'true', class: QUOTA}\n- {name: a, when: 'true', class: QUOTA}", `t.yaml:2:3: rule "a": name: duplicate rule name (first at line 1)`},
		{"bad class", "- name: a\n  when: 'true'\n  class: SLOW", `t.yaml:3:10: rule "a": class: unknown class "SLOW" (have: RATE_LIMIT`},
		{"missing class", "- name: a\n  when: 'true'", `t.yaml:1:3: rule "a": class: missing (valid: RATE_LIMIT`},
		{"missing when", "- name: a\n  class: QUOTA", `t.yaml:1:3: rule "a": when: missing`},
		{"unknown name, plain", "- name: a\n  when: status == 429 && foo\n  class: QUOTA", `t.yaml:2:26: rule "a": when: unknown name foo`},
		{"unknown name, quoted", "- name: a\n  when: \"status == 429 && foo\"\n  class: QUOTA", `t.yaml:2:27: rule "a": when: unknown name foo`},
		{"unknown name, block", "- name: a\n  when: |\n    status == 429 &&\n      foo\n  class: QUOTA", `t.yaml:4:7: rule "a": when: unknown name foo`},
		{"when not bool", "- name: a\n  when: status\n  class: QUOTA", `t.yaml:2:9: rule "a": when: expected bool, but got int`},
		{"has of a computed string", "- name: a\n  when: has(provider)\n  class: QUOTA", `t.yaml:2:13: rule "a": when: has() takes constant strings`},
		{"has of nothing", "- name: a\n  when: has()\n  class: QUOTA", `t.yaml:2:9: rule "a": when: has() needs at least one phrase`},
		{"empty phrase", "- name: a\n  when: has(' _-')\n  class: QUOTA", `t.yaml:2:13: rule "a": when: phrase " _-" is empty`},
		{"bad regexp", "- name: a\n  when: match('(unclosed')\n  class: QUOTA", `t.yaml:2:15: rule "a": when: bad pattern "(unclosed"`},
		{"computed regexp", "- name: a\n  when: match(body, provider)\n  class: QUOTA", `t.yaml:2:21: rule "a": when: match() takes a constant pattern`},
		{"retryAfterMs not a number", "- name: a\n  when: 'true'\n  class: QUOTA\n  retryAfterMs: provider", `t.yaml:4:17: rule "a": retryAfterMs: must be a number of milliseconds`},
		{"retryAfterMs bad expr", "- name: a\n  when: 'true'\n  class: QUOTA\n  retryAfterMs: hint(", `t.yaml:4:`},
		{"bad window", "- name: a\n  when: 'true'\n  class: QUOTA\n  window: fortnight", `t.yaml:4:11: rule "a": window: must be one of minute, hour, day, week, month, or an expression`},
		{"list shadows env", "lists:\n  status: [x]\nrules: [{name: a, when: 'true', class: QUOTA}]", `t.yaml:2:3: lists.status: name "status" is taken`},
		{"list not strings", "lists:\n  x: 5\nrules: [{name: a, when: 'true', class: QUOTA}]", `t.yaml:2:6: lists.x: must be a non-empty list of strings`},
		{"case unknown key", "rules: [{name: a, when: 'true', class: QUOTA}]\ncases:\n  - {input: {status: 429}, expect: QUOTA, colour: red}", `t.yaml:3:5: cases[0]: unknown key "colour"`},
		{"case without input", "rules: [{name: a, when: 'true', class: QUOTA}]\ncases:\n  - {expect: QUOTA}", `t.yaml:3:5: cases[0]: missing input`},
		{"case bad class", "rules: [{name: a, when: 'true', class: QUOTA}]\ncases:\n  - {status: 429, expect: NOPE}", `cases[0]: expect.class: unknown class "NOPE"`},
		{"case fails", "rules: [{name: a, when: 'status == 429', class: QUOTA}]\ncases:\n  - {name: wrong, status: 429, expect: RATE_LIMIT}", `t.yaml:3: cases[0] (wrong): got QUOTA by t/a, want RATE_LIMIT`},
		{"case undecided", "rules: [{name: a, when: 'status == 429', class: QUOTA}]\ncases:\n  - {status: 500, expect: SERVER}", `cases[0]: no rule holds, want SERVER`},
		{"case hint", "rules: [{name: a, when: 'true', class: QUOTA, retryAfterMs: '5'}]\ncases:\n  - {status: 500, expect: {class: QUOTA, retryAfterMs: null}}", `cases[0]: got retryAfterMs 5 by t/a, want none`},
		{"case by", "rules: [{name: a, when: 'true', class: QUOTA}]\ncases:\n  - {status: 500, expect: {class: QUOTA, by: b}}", `cases[0]: decided by t/a, want b`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.src), Options{})
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n  %v\nwant it to contain:\n  %s", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrCaseFailed) {
				t.Errorf("error wraps neither ErrInvalid nor ErrCaseFailed: %v", err)
			}
		})
	}
}

func TestLoadReportsEveryError(t *testing.T) {
	_, err := Parse("t.yaml", []byte("- {name: a, when: 'foo', class: QUOTA}\n- {name: b, when: 'bar', class: NOPE}"), Options{})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`rule "a": when: unknown name foo`, `rule "b": when: unknown name bar`, `rule "b": class: unknown class`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	var e *Error
	if !errors.As(err, &e) || e.File != "t.yaml" || e.Line != 1 {
		t.Errorf("errors.As(*Error) = %+v", e)
	}
}

func TestConfigCases(t *testing.T) {
	src := "- {name: a, when: 'status == 429', class: RATE_LIMIT, retryAfterMs: hint()}"
	ok := []map[string]any{
		{"status": 429, "body": "slow down", "expect": "RATE_LIMIT"},
		{"input": map[string]any{"status": 429, "headers": map[string]any{"Retry-After": 3}}, "expect": map[string]any{"class": "rate_limit", "retryAfterMs": 3000}},
	}
	if _, err := Parse("t.yaml", []byte(src), Options{Cases: ok}); err != nil {
		t.Errorf("good config cases: %v", err)
	}
	bad := []map[string]any{{"status": 429, "expect": "QUOTA"}, {"status": 429, "input": map[string]any{}, "expect": "QUOTA"}}
	_, err := Parse("t.yaml", []byte(src), Options{Cases: bad})
	if err == nil || !strings.Contains(err.Error(), "config cases[0]: got RATE_LIMIT by t/a, want QUOTA") ||
		!strings.Contains(err.Error(), "config cases[1]: give the failure either under input or beside expect") {
		t.Errorf("bad config cases: %v", err)
	}
	if !errors.Is(err, ErrCaseFailed) {
		t.Errorf("does not wrap ErrCaseFailed: %v", err)
	}
	// The built-in set runs config cases too.
	if _, err := Builtin(Options{Cases: []map[string]any{{"status": 529, "expect": "OVERLOADED"}}}); err != nil {
		t.Errorf("Builtin with cases: %v", err)
	}
	if _, err := Builtin(Options{Cases: []map[string]any{{"status": 529, "expect": "QUOTA"}}}); !errors.Is(err, ErrCaseFailed) {
		t.Errorf("Builtin with a failing case: %v", err)
	}
}

// TestHelpers: each helper of the rule environment, through a rule.
func TestHelpers(t *testing.T) {
	recent, old := int64(1000), int64(700_000)
	tests := []struct {
		name string
		when string
		f    engine.Failure
		want bool
	}{
		{"status", `status == 429`, engine.Failure{Status: 429}, true},
		{"provider and model", `provider == "qwen" && model startsWith "qwen-"`, engine.Failure{Provider: "qwen", Model: "qwen-max"}, true},
		{"errorKind", `errorKind == "reset"`, engine.Failure{ErrorKind: "reset"}, true},
		{"body is raw", `body contains "Rate Limit"`, engine.Failure{Body: "Rate Limit"}, true},
		{"text is lowered and collapsed", `text == "rate limit: try again"`, engine.Failure{Body: "  Rate \n\t Limit:  Try again \n"}, true},
		{"headers map", `headers["X-Test"] == "1"`, engine.Failure{Headers: map[string]string{"X-Test": "1"}}, true},
		{"header case-insensitive", `header("retry-after") == "28"`, engine.Failure{Headers: map[string]string{"Retry-After": "28"}}, true},
		{"header missing", `header("x-nope") == ""`, engine.Failure{}, true},
		{"has ignores case, spaces, _ and -", `has("rate limit")`, engine.Failure{Body: "RATE_LIMIT-exceeded"}, true},
		{"has across a mid-word break", `has("insufficient quota")`, engine.Failure{Body: "insuffi\n    cient_quota"}, true},
		{"has is any-of", `has("nope", "quota")`, engine.Failure{Body: "quota"}, true},
		{"has with an array", `has(["nope", "quota"])`, engine.Failure{Body: "quota"}, true},
		{"has with a predefined list", `has(dayWords)`, engine.Failure{Body: "tokens per day"}, true},
		{"has Chinese", `has("余额不足")`, engine.Failure{Body: "账户余额不足，请充值"}, true},
		{"has misses", `has("quota")`, engine.Failure{Body: "rate"}, false},
		{"hasAll", `hasAll("quota", "exceeded")`, engine.Failure{Body: "quota was exceeded"}, true},
		{"hasAll misses one", `hasAll("quota", "exceeded")`, engine.Failure{Body: "quota"}, false},
		{"words on boundaries", `words("tpd")`, engine.Failure{Body: "organization TPD rate limit"}, true},
		{"words not inside a word", `words("tpd")`, engine.Failure{Body: "outputdata"}, false},
		{"words not across a run", `words("tpm")`, engine.Failure{Body: "http method"}, false},
		{"words after punctuation", `words("rpm")`, engine.Failure{Body: "limit (RPM): 3"}, true},
		{"words at the ends", `words("rpd")`, engine.Failure{Body: "rpd"}, true},
		{"match on text", `match("retry after \\d+ seconds")`, engine.Failure{Body: "Please RETRY after 28\n seconds"}, true},
		{"match upper-case literal still matches lowered text", `match("Retry After")`, engine.Failure{Body: "retry after"}, true},
		{"match with a subject", `match(provider, "^open")`, engine.Failure{Provider: "openai"}, true},
		{"match with a subject is case-sensitive", `match(provider, "^Open")`, engine.Failure{Provider: "openai"}, false},
		{"code is the status", `code() == 503`, engine.Failure{Status: 503}, true},
		{"code from an SDK rendering", `code() == 429`, engine.Failure{Body: "Error code: 429 - {'error': {}}"}, true},
		{"code from a 200 body", `code() == 502`, engine.Failure{Status: 200, Body: `{"error":{"code":502,"message":"x"}}`}, true},
		{"code from status code prose", `code() == 503`, engine.Failure{Body: "Request failed with status code 503"}, true},
		{"code at the start", `code() == 429`, engine.Failure{Body: "429 Too Many Requests"}, true},
		{"code ignores other numbers", `code() == 0`, engine.Failure{Body: "used 4290 tokens, id 500123"}, true},
		{"hint", `hint() == 28000`, engine.Failure{Headers: map[string]string{"retry-after": "28"}}, true},
		{"no hint", `hint() == -1`, engine.Failure{Body: "slow down"}, true},
		{"hintIn", `hintIn(jstr("error.message")) == 644`, engine.Failure{Body: `{"error":{"message":"try again in 644ms"}}`}, true},
		{"dur", `dur("6m0s") == 360000 && dur("soon") == -1`, engine.Failure{}, true},
		{"jstr path", `jstr("error.code") == "insufficient_quota"`, engine.Failure{Body: `{"error":{"code":"insufficient_quota"}}`}, true},
		{"jstr number", `jstr("error.code") == "1305"`, engine.Failure{Body: `{"error":{"code":1305}}`}, true},
		{"jstr python repr", `jstr("error.type") == "tokens"`, engine.Failure{Body: `Error code: 429 - {'error': {'type': 'tokens', 'param': None}}`}, true},
		{"jstr deep", `jstr("..reason") == "RATE_LIMIT_EXCEEDED"`, engine.Failure{Body: `{"error":{"details":[{"reason":"RATE_LIMIT_EXCEEDED"}]}}`}, true},
		{"jstr index", `jstr("error.details[1].retryDelay") == "26s"`, engine.Failure{Body: `{"error":{"details":[{},{"retryDelay":"26s"}]}}`}, true},
		{"jstr wildcard", `jstr("error.details.*.retryDelay") == "26s"`, engine.Failure{Body: `{"error":{"details":[{},{"retryDelay":"26s"}]}}`}, true},
		{"jstr missing", `jstr("error.nope") == ""`, engine.Failure{Body: `{}`}, true},
		{"jnum", `jnum("quota_limit_value") == 0`, engine.Failure{Body: `{"quota_limit_value": "0"}`}, true},
		{"jnum missing is NaN", `!(jnum("x") == 0) && !(jnum("x") != jnum("x") == false)`, engine.Failure{Body: `{}`}, true},
		{"json any", `json("error.retry") == true && json("error.n") == 2`, engine.Failure{Body: `{'error': {'retry': True, 'n': 2}}`}, true},
		{"limitWindow day", `limitWindow() == "day"`, engine.Failure{Body: "requests per day (RPD)"}, true},
		{"limitWindow longest wins", `limitWindow() == "month"`, engine.Failure{Body: "per minute and per month"}, true},
		{"limitWindow none", `limitWindow() == ""`, engine.Failure{Body: "slow down"}, true},
		{"requestOverLimit", `requestOverLimit()`, engine.Failure{Body: "Limit 7000, Used 0, Requested 12903."}, true},
		{"requestOverLimit with colons and commas", `requestOverLimit()`, engine.Failure{Body: "limit: 7,000, used: 0, requested: 12,903"}, true},
		{"requestOverLimit without used", `requestOverLimit()`, engine.Failure{Body: "Request too large (TPM): Limit 30000, Requested 50034."}, true},
		{"requestOverLimit across a line break", `requestOverLimit()`, engine.Failure{Body: "LIMIT 7000,\n  Used 0, Requested 12903"}, true},
		{"requestOverLimit a request that fits", `requestOverLimit()`, engine.Failure{Body: "Limit 240000, Used 0, Requested 1049."}, false},
		{"requestOverLimit with lakh grouping", `requestOverLimit()`, engine.Failure{Body: "Limit 1,00,000, Used 0, Requested 2,00,000."}, true},
		{"requestOverLimit with lakh grouping that fits", `requestOverLimit()`, engine.Failure{Body: "Limit 2,00,000, Used 0, Requested 1,00,000."}, false},
		{"requestOverLimit commas compare as numbers", `requestOverLimit()`, engine.Failure{Body: "limit: 12,000, used: 0, requested: 9,999"}, false},
		{"requestOverLimit equal fits", `requestOverLimit()`, engine.Failure{Body: "Limit 7000, Used 0, Requested 7000"}, false},
		{"requestOverLimit no numbers", `requestOverLimit()`, engine.Failure{Body: "rate limit reached, requested too much"}, false},
		{"sinceCapacityMs none", `sinceCapacityMs == -1 && !capacityRecent`, engine.Failure{}, true},
		{"capacityRecent", `capacityRecent && sinceCapacityMs == 1000 && evidenceMs == 600000`, engine.Failure{SinceCapacityMs: &recent}, true},
		{"capacity too old", `capacityRecent`, engine.Failure{SinceCapacityMs: &old}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := mustParse(t, "- {name: r, class: UNKNOWN, when: '"+strings.ReplaceAll(tc.when, "'", "''")+"'}", Options{Now: func() time.Time { return t0 }})
			_, got := classify(t, rs, tc.f)
			if got != tc.want {
				t.Errorf("%s on %+v = %v, want %v", tc.when, tc.f, got, tc.want)
			}
		})
	}
}

func TestEvidenceWindow(t *testing.T) {
	src := "- {name: m, when: capacityRecent, class: MISLABELED}"
	since := int64(5 * 60 * 1000)
	f := engine.Failure{Status: 400, SinceCapacityMs: &since}
	rs := mustParse(t, src, Options{})
	if _, ok := classify(t, rs, f); !ok {
		t.Errorf("5 min ago is within the default 10 min")
	}
	if _, ok := classify(t, rs.WithEvidence(2*time.Minute), f); ok {
		t.Errorf("5 min ago is outside a 2 min window")
	}
	if _, ok := classify(t, mustParse(t, src, Options{Evidence: time.Minute}), f); ok {
		t.Errorf("Options.Evidence ignored")
	}
	if rs.Evidence() != DefaultEvidence || rs.WithEvidence(time.Hour).Evidence() != time.Hour {
		t.Errorf("Evidence()")
	}
}

func TestRetryAfterAndWindowExpressions(t *testing.T) {
	tests := []struct {
		retry, window string
		f             engine.Failure
		wantHint      *int64
		wantWindow    string
	}{
		{"hint()", "", engine.Failure{Body: "try again in 2s"}, i64(2000), ""},
		{"hint()", "", engine.Failure{Body: "later"}, nil, ""},
		{"1500.6", "", engine.Failure{}, i64(1501), ""},
		{"-5", "", engine.Failure{}, nil, ""},
		{"nil", "", engine.Failure{}, nil, ""},
		{"hint() >= 0 ? hint() : 60000", "", engine.Failure{}, i64(60000), ""},
		{"jnum('reset') * 1000", "", engine.Failure{Body: `{"reset": 1.5}`}, i64(1500), ""},
		{"jnum('nope') * 1000", "", engine.Failure{Body: `{}`}, nil, ""},
		{"", "limitWindow()", engine.Failure{Body: "tokens per day"}, nil, "day"},
		{"", "'decade'", engine.Failure{}, nil, ""},
		{"", "Day", engine.Failure{}, nil, "day"},
	}
	for _, tc := range tests {
		src := "- name: r\n  when: 'true'\n  class: QUOTA\n"
		if tc.retry != "" {
			src += "  retryAfterMs: \"" + tc.retry + "\"\n"
		}
		if tc.window != "" {
			src += "  window: \"" + tc.window + "\"\n"
		}
		rs := mustParse(t, src, Options{Now: func() time.Time { return t0 }})
		v, _ := classify(t, rs, tc.f)
		if (v.RetryAfterMs == nil) != (tc.wantHint == nil) || v.RetryAfterMs != nil && *v.RetryAfterMs != *tc.wantHint {
			t.Errorf("retryAfterMs %q = %v, want %v", tc.retry, ptrStr(v.RetryAfterMs), ptrStr(tc.wantHint))
		}
		if v.Window != tc.wantWindow {
			t.Errorf("window %q = %q, want %q", tc.window, v.Window, tc.wantWindow)
		}
	}
}

func TestRunTimeErrorNamesTheRule(t *testing.T) {
	rs := mustParse(t, "- {name: boom, when: 'int(jstr(\"n\")) > 0', class: QUOTA}", Options{})
	_, ok, err := rs.Classify(context.Background(), &engine.Failure{Body: `{"n":"x"}`})
	if err == nil || ok || !strings.Contains(err.Error(), `rule "boom" (line 1): when:`) {
		t.Errorf("Classify = %v, %v", ok, err)
	}
	if got := rs.Explain(context.Background(), &engine.Failure{Body: `{"n":"x"}`}); len(got) != 1 || !strings.Contains(got[0], "boom: error:") {
		t.Errorf("Explain = %q", got)
	}
}

func TestExplain(t *testing.T) {
	rs := mustParse(t, "- {name: a, when: 'status == 429', class: RATE_LIMIT, retryAfterMs: hint(), window: minute}\n- {name: b, when: 'true', class: UNKNOWN}", Options{})
	got := rs.Explain(context.Background(), &engine.Failure{Status: 429, Headers: map[string]string{"retry-after": "1"}})
	want := []string{"t/a (line 1) → RATE_LIMIT retryAfterMs=1000 window=minute  [decides]", "t/b (line 2) → UNKNOWN"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Explain =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rs = mustParse(t, "- {name: a, when: 'false', class: QUOTA}", Options{})
	if got := rs.Explain(context.Background(), &engine.Failure{}); len(got) != 1 || got[0] != "no rule holds" {
		t.Errorf("Explain = %q", got)
	}
}

// TestRuleSetHammer: one set classifies from many goroutines at once (run
// with -race); pooled state never leaks from one failure into another.
func TestRuleSetHammer(t *testing.T) {
	rs := builtinForTest(t)
	inputs := []struct {
		f     engine.Failure
		class engine.Class
		hint  int64
	}{
		{engine.Failure{Status: 429, Body: "Please try again in 644ms."}, engine.ClassRateLimit, 644},
		{engine.Failure{Status: 429, Body: `{"error":{"code":"insufficient_quota"}}`}, engine.ClassQuota, -1},
		{engine.Failure{Status: 500, Body: "Overloaded"}, engine.ClassOverloaded, -1},
		{engine.Failure{Status: 503, Headers: map[string]string{"Retry-After": "7"}}, engine.ClassOverloaded, 7000},
		{engine.Failure{ErrorKind: "timeout"}, engine.ClassTimeout, -1},
	}
	const P, N = 8, 300
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := 0; p < P; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			<-start
			for i := 0; i < N; i++ {
				in := inputs[(p+i)%len(inputs)]
				f := in.f
				v, _, err := rs.Classify(context.Background(), &f)
				got := int64(-1)
				if v.RetryAfterMs != nil {
					got = *v.RetryAfterMs
				}
				if err != nil || v.Class != in.class || got != in.hint {
					t.Errorf("goroutine %d: %+v → %s %d %v, want %s %d", p, in.f, v.Class, got, err, in.class, in.hint)
					return
				}
			}
		}(p)
	}
	close(start)
	wg.Wait()
}

func TestToHint(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want int64
		ok   bool
	}{
		{5, 5, true}, {int64(7), 7, true}, {2.4, 2, true}, {uint(3), 3, true}, {time.Second, 1000, true},
		{-1, 0, false}, {math.NaN(), 0, false}, {"5", 0, false}, {nil, 0, false}, {math.Inf(1), maxHintMs, true},
	} {
		got, ok := toHint(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("toHint(%v) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
