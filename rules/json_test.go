package rules

import (
	"strings"
	"testing"
)

func TestParseLoose(t *testing.T) {
	tests := []struct {
		name, body, path, want string
	}{
		{"plain json", `{"error":{"code":"rate_limit_exceeded"}}`, "error.code", "rate_limit_exceeded"},
		{"SDK rendering", `Error code: 429 - {"error": {"message": "slow"}}`, "error.message", "slow"},
		{"python repr", `Error code: 429 - {'error': {'message': 'slow', 'param': None, 'ok': True}}`, "error.ok", "true"},
		{"python repr with a double-quoted string", `{'error': {'message': "This model's maximum", 'type': 'x'}}`, "error.message", "This model's maximum"},
		{"escaped quote in single quotes", `{'m': 'it\'s'}`, "m", "it's"},
		{"raw newlines in a string", "{\"error\":{\"message\":\"This request requires more credits, or fewer max_tokens. You requested\n      up to 32000\"}}", "error.message", "This request requires more credits, or fewer max_tokens. You requested\n      up to 32000"},
		{"unicode escape", `{"m":"\u6b20\u8d39"}`, "m", "欠费"},
		{"bare keys (util.inspect)", `{ error: { status: 429, message: 'x' } }`, "error.status", "429"},
		{"truncated", `{"Error": {"Message": "Too many tokens", "Code": "Throttl`, "Error.Code", "Throttl"},
		{"case-insensitive key", `{"Error": {"Code": "ThrottlingException"}}`, "error.code", "ThrottlingException"},
		{"trailing commas", `{"a": [1, 2, ], "b": 3,}`, "b", "3"},
		{"array index", `{"d":[{"r":"a"},{"r":"b"}]}`, "d[1].r", "b"},
		{"negative index", `{"d":[{"r":"a"},{"r":"b"}]}`, "d.-1.r", "b"},
		{"wildcard", `{"d":[{"x":1},{"r":"b"}]}`, "d.*.r", "b"},
		{"deep", `{"a":{"b":[{"c":{"reason":"R"}}]}}`, "..reason", "R"},
		{"deep with tail", `{"a":{"details":{"retry":{"delay":"2s"}}}}`, "..retry.delay", "2s"},
		{"sse data line", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}", "error.type", "overloaded_error"},
		{"skips an empty object", `{} then {"a":"b"}`, "a", "b"},
		{"number formatting", `{"n": 1.5e3}`, "n", "1500"},
		{"missing", `{"a":1}`, "b", ""},
		{"not json", `plain text`, "a", ""},
		{"html", `<html><body>502 Bad Gateway</body></html>`, "a", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := lookup(parseLoose(tc.body), tc.path)
			if got := scalarString(v); got != tc.want {
				t.Errorf("jstr(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func TestParseLooseHostile(t *testing.T) {
	// Deep nesting, garbage and unterminated strings terminate without panics.
	for _, body := range []string{
		strings.Repeat("[", 100000),
		strings.Repeat(`{"a":`, 10000),
		`{"a": "unterminated`,
		`{'a': }}}}]]]`,
		`{:::}`,
		`{"a" "b" "c"}`,
		"{\x00\xff\xfe}",
		`[,,,]`,
		`{"a": -}`,
	} {
		v := parseLoose(body)
		lookup(v, "..a")
		lookup(v, "a.*.b")
	}
}
