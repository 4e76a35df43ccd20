package failurejson

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

func i64(v int64) *int64 { return &v }

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    engine.Failure
		wantErr string
	}{
		{"every key", `{"status":429,"headers":{"Retry-After":"28"},"body":"x","provider":"p","model":"m","errorKind":"reset","sinceCapacityMs":5}`,
			engine.Failure{Status: 429, Headers: map[string]string{"Retry-After": "28"}, Body: "x", Provider: "p", Model: "m", ErrorKind: "reset", SinceCapacityMs: i64(5)}, ""},
		{"null status", `{"status":null,"body":"x"}`, engine.Failure{Body: "x"}, ""},
		{"string status", `{"status":"503"}`, engine.Failure{Status: 503}, ""},
		{"transport error", `{"status":0,"errorKind":"reset"}`, engine.Failure{ErrorKind: "reset"}, ""},
		{"header values", `{"headers":{"retry-after":28,"x-list":["a","b"],"x-null":null,"x-bool":true}}`,
			engine.Failure{Headers: map[string]string{"retry-after": "28", "x-list": "a, b", "x-null": "", "x-bool": "true"}}, ""},
		{"body object keeps its order", `{"body":{"z":1, "error":{"code":429}}}`, engine.Failure{Body: `{"z":1,"error":{"code":429}}`}, ""},
		{"null body", `{"body":null}`, engine.Failure{}, ""},
		{"empty headers", `{"headers":{}}`, engine.Failure{}, ""},
		{"bad status", `{"status":"abc"}`, engine.Failure{}, `status: want an HTTP status (100 to 599), or 0 or null for no HTTP answer (got "abc")`},
		{"status too big", `{"status":4290}`, engine.Failure{}, "status: want an HTTP status"},
		{"status below 100", `{"status":42}`, engine.Failure{}, "status: want an HTTP status"},
		{"status 600", `{"status":600}`, engine.Failure{}, "status: want an HTTP status"},
		{"fractional status", `{"status":429.5}`, engine.Failure{}, "status: want an HTTP status"},
		{"unknown key", `{"status":429,"expected_class":"QUOTA"}`, engine.Failure{},
			`unknown key "expected_class" (valid: status, headers, body, provider, model, errorKind, sinceCapacityMs)`},
		{"header object", `{"headers":{"x":{"a":1}}}`, engine.Failure{}, `headers["x"]: want a string, a number or a list of them (got a mapping)`},
		{"header list of lists", `{"headers":{"x":["a",["b"]]}}`, engine.Failure{}, `headers["x"][1]: want a string or a number (got a list)`},
		{"headers not a mapping", `{"headers":["a"]}`, engine.Failure{}, `headers: want a mapping`},
		{"provider not a string", `{"provider":5}`, engine.Failure{}, `provider: want a string (got a number)`},
		{"negative sinceCapacityMs", `{"sinceCapacityMs":-1}`, engine.Failure{}, `sinceCapacityMs: want a number of milliseconds >= 0`},
		{"not an object", `[1]`, engine.Failure{}, "want a JSON object with status"},
		{"null", `null`, engine.Failure{}, "want a JSON object with status"},
		{"not JSON", `nope`, engine.Failure{}, "invalid character"},
		{"trailing data", `{"status":429} {}`, engine.Failure{}, "trailing data after the failure object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode(%s) error = %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tc.in, err)
			}
			if !reflect.DeepEqual(*f, tc.want) {
				t.Errorf("Decode(%s) = %+v, want %+v", tc.in, *f, tc.want)
			}
		})
	}
}

// DecodeRecord reads the failure of a captured record and skips the rest.
func TestDecodeRecord(t *testing.T) {
	f, err := DecodeRecord([]byte(`{"provider":"openai","status":429,"body":"x","expected_class":"RATE_LIMIT","source":"https://x","note":"n"}`))
	want := engine.Failure{Status: 429, Body: "x", Provider: "openai"}
	if err != nil || !reflect.DeepEqual(*f, want) {
		t.Fatalf("DecodeRecord = %+v, %v; want %+v", f, err, want)
	}
	if _, err := DecodeRecord([]byte(`{"status":4290,"note":"n"}`)); err == nil || !strings.Contains(err.Error(), "status: want an HTTP status") {
		t.Errorf("a bad failure key is still refused: err = %v", err)
	}
}

// JSON and YAML give the same failure: numbers as json.Number or int, lists
// as []any, and map[any]any from older YAML decoders.
func TestFromValueMatchesDecode(t *testing.T) {
	fromYAML, err := FromValue(map[any]any{
		"status":  429,
		"headers": map[any]any{"retry-after": 3, "x-list": []any{"a", "b"}, "x-float": 1.5},
		"body":    map[string]any{"error": map[string]any{"code": 429}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := Decode([]byte(`{"status":429,"headers":{"retry-after":3,"x-list":["a","b"],"x-float":1.5},"body":{"error":{"code":429}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Errorf("FromValue = %+v, Decode = %+v", fromYAML, fromJSON)
	}
	if fromYAML.Headers["x-list"] != "a, b" {
		t.Errorf(`x-list = %q, want "a, b"`, fromYAML.Headers["x-list"])
	}
}

// FromValue leaves its argument as it was.
func TestFromValueDoesNotChangeInput(t *testing.T) {
	in := map[string]any{"headers": map[any]any{"a": 1}}
	if _, err := FromValue(in); err != nil {
		t.Fatal(err)
	}
	if _, ok := in["headers"].(map[any]any); !ok {
		t.Errorf("input changed: %#v", in)
	}
}
