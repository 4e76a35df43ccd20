package failurejson

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

func TestParseCase(t *testing.T) {
	rl := engine.ClassRateLimit
	tests := []struct {
		name    string
		in      map[string]any
		want    Case
		wantErr string
	}{
		{"input and expect", map[string]any{"name": "n", "input": map[string]any{"status": 429}, "expect": map[string]any{"class": "rate_limit", "retryAfterMs": 3000, "window": "minute", "by": "r"}},
			Case{Name: "n", Input: engine.Failure{Status: 429}, Class: rl, CheckHint: true, Hint: i64(3000), Window: "minute", By: "r"}, ""},
		{"expectations beside input", map[string]any{"input": map[string]any{"status": 429}, "class": "RATE_LIMIT", "retryAfterMs": nil},
			Case{Input: engine.Failure{Status: 429}, Class: rl, CheckHint: true}, ""},
		{"inline failure, expect a class", map[string]any{"status": 429, "body": "slow", "expect": "RATE_LIMIT", "window": "day"},
			Case{Input: engine.Failure{Status: 429, Body: "slow"}, Class: rl, Window: "day"}, ""},
		{"abstain", map[string]any{"input": map[string]any{"status": 200}, "expect": map[string]any{"abstain": true}},
			Case{Input: engine.Failure{Status: 200}, Abstain: true}, ""},
		{"abstain beside", map[string]any{"input": map[string]any{"status": 200}, "abstain": true},
			Case{Input: engine.Failure{Status: 200}, Abstain: true}, ""},

		{"unknown case key", map[string]any{"input": map[string]any{}, "expect": "QUOTA", "colour": "red"}, Case{}, `unknown key "colour"`},
		{"unknown input key", map[string]any{"input": map[string]any{"status": 429, "bogus": 1}, "expect": "QUOTA"}, Case{}, `input: unknown key "bogus"`},
		{"unknown expect key", map[string]any{"input": map[string]any{}, "expect": map[string]any{"class": "QUOTA", "hint": 1}}, Case{}, `expect: unknown key "hint"`},
		{"input and inline", map[string]any{"input": map[string]any{}, "status": 429, "expect": "QUOTA"}, Case{}, "give the failure either under input or beside expect, not both"},
		{"no input", map[string]any{"expect": "QUOTA"}, Case{}, "missing input"},
		{"no expect", map[string]any{"status": 429}, Case{}, "missing expect"},
		{"expect both ways", map[string]any{"status": 429, "expect": map[string]any{"class": "QUOTA"}, "retryAfterMs": 5}, Case{}, "either under expect or beside it"},
		{"class both ways", map[string]any{"status": 429, "expect": "QUOTA", "class": "AUTH"}, Case{}, "either as expect or as class"},
		{"bad class", map[string]any{"status": 429, "expect": "NOPE"}, Case{}, `expect.class: unknown class "NOPE"`},
		{"bad hint", map[string]any{"status": 429, "expect": map[string]any{"class": "QUOTA", "retryAfterMs": -1}}, Case{}, "expect.retryAfterMs: want a number of milliseconds >= 0, or null (got -1)"},
		{"abstain with a class", map[string]any{"status": 429, "expect": map[string]any{"abstain": true, "class": "QUOTA"}}, Case{}, "expect.class: an abstention has no verdict"},
		{"abstain not a bool", map[string]any{"status": 429, "abstain": "yes"}, Case{}, `abstain: want true or false (got "yes")`},
		{"bad inline status", map[string]any{"status": 1, "expect": "QUOTA"}, Case{}, "status: want an HTTP status"},
		{"bad input status", map[string]any{"input": map[string]any{"status": 4290}, "expect": "QUOTA"}, Case{}, "input: status: want an HTTP status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCase(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCase error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCase: %v", err)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Errorf("ParseCase = %+v, want %+v", c, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	v := engine.Verdict{Class: engine.ClassRateLimit, RetryAfterMs: i64(5), Window: "minute", By: "set/rule"}
	tests := []struct {
		name    string
		c       Case
		v       engine.Verdict
		decided bool
		want    string
	}{
		{"agrees", Case{Class: engine.ClassRateLimit, CheckHint: true, Hint: i64(5), Window: "minute", By: "rule"}, v, true, ""},
		{"by in full", Case{Class: engine.ClassRateLimit, By: "set/rule"}, v, true, ""},
		{"abstains as expected", Case{Abstain: true}, engine.Verdict{}, false, ""},
		{"decides, want an abstention", Case{Abstain: true}, v, true, "got RATE_LIMIT by set/rule, want an abstention"},
		{"abstains", Case{Class: engine.ClassQuota}, engine.Verdict{}, false, "no rule holds, want QUOTA"},
		{"class", Case{Class: engine.ClassQuota}, v, true, "got RATE_LIMIT by set/rule, want QUOTA"},
		{"hint, want none", Case{Class: engine.ClassRateLimit, CheckHint: true}, v, true, "got retryAfterMs 5 by set/rule, want none"},
		{"no hint", Case{Class: engine.ClassRateLimit, CheckHint: true, Hint: i64(6)}, engine.Verdict{Class: engine.ClassRateLimit, By: "set/rule"}, true, "got no retryAfterMs by set/rule, want 6"},
		{"other hint", Case{Class: engine.ClassRateLimit, CheckHint: true, Hint: i64(6)}, v, true, "got retryAfterMs 5 by set/rule, want 6"},
		{"hint not checked", Case{Class: engine.ClassRateLimit}, v, true, ""},
		{"window", Case{Class: engine.ClassRateLimit, Window: "day"}, v, true, `got window "minute" by set/rule, want "day"`},
		{"by", Case{Class: engine.ClassRateLimit, By: "other"}, v, true, "decided by set/rule, want other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Check(tc.v, tc.decided, "set", "no rule holds"); got != tc.want {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
}
