package rules

import (
	"errors"
	"strings"
	"testing"
)

// The golden cases of rule files and of the config read failures as wasm
// plugin cases and `gatectl classify` do (internal/failurejson); these are the
// points where the two readers used to differ.
func TestCaseFailureDecoding(t *testing.T) {
	const set = "rules:\n  - {name: a, when: 'status == 429', class: RATE_LIMIT}\n" +
		"  - {name: listed, when: 'headers[\"x-list\"] == \"a, b\"', class: QUOTA}\n"
	for _, tc := range []struct {
		name, cases, want string
	}{
		// Rule files used to skip unknown keys of a case's input.
		{"unknown input key", "  - {input: {status: 429, bdoy: x}, expect: RATE_LIMIT}",
			`t.yaml:5:5: cases[0]: input: unknown key "bdoy" (valid: status, headers, body, provider, model, errorKind, sinceCapacityMs)`},
		{"unknown inline key", "  - {status: 429, bdoy: x, expect: RATE_LIMIT}", `t.yaml:5:5: cases[0]: unknown key "bdoy"`},
		// Rule files used to take any status up to 999.
		{"status below 100", "  - {status: 42, expect: RATE_LIMIT}", `t.yaml:5:5: cases[0]: status: want an HTTP status (100 to 599), or 0 or null for no HTTP answer (got 42)`},
		{"status above 599", "  - {input: {status: 700}, expect: RATE_LIMIT}", `cases[0]: input: status: want an HTTP status`},
		{"header of an object", "  - {input: {status: 429, headers: {x: {a: 1}}}, expect: RATE_LIMIT}", `cases[0]: input: headers["x"]: want a string, a number or a list of them`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(set+"cases:\n"+tc.cases+"\n"), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if errors.Is(err, ErrCaseFailed) {
				t.Errorf("a case that does not read is not a failing case: %v", err)
			}
		})
	}
	// What still reads: a transport error's status 0, a header list joined as
	// HTTP joins repeated values, an abstention.
	good := "  - {status: 0, errorKind: reset, abstain: true}\n" +
		"  - {input: {status: 500, headers: {x-list: [a, b]}}, expect: {class: QUOTA, by: listed}}\n" +
		"  - {status: 429, expect: RATE_LIMIT}\n"
	if _, err := Parse("t.yaml", []byte(set+"cases:\n"+good), Options{}); err != nil {
		t.Fatalf("good cases: %v", err)
	}
	// Config cases read the same way.
	_, err := Parse("t.yaml", []byte(set), Options{Cases: []map[string]any{{"input": map[string]any{"status": 429, "colour": "red"}, "expect": "RATE_LIMIT"}}})
	if err == nil || !strings.Contains(err.Error(), `config cases[0]: input: unknown key "colour"`) {
		t.Errorf("config case with an unknown input key: err = %v", err)
	}
}

// A rule set abstains when no rule holds; a case may expect that.
func TestCaseAbstain(t *testing.T) {
	const set = "rules:\n  - {name: a, when: 'status == 429', class: RATE_LIMIT}\ncases:\n"
	if _, err := Parse("t.yaml", []byte(set+"  - {status: 500, abstain: true}\n"), Options{}); err != nil {
		t.Errorf("expected abstention: %v", err)
	}
	_, err := Parse("t.yaml", []byte(set+"  - {status: 429, expect: {abstain: true}}\n"), Options{})
	if !errors.Is(err, ErrCaseFailed) || !strings.Contains(err.Error(), "cases[0]: got RATE_LIMIT by t/a, want an abstention") {
		t.Errorf("err = %v", err)
	}
}
