package rules

import "testing"

// FuzzParseLoose: the lenient JSON reader never panics, never recurses past
// maxJSONDepth, returns only the value kinds it documents, and lookups on what it
// returns never panic. Seeds: testdata/fuzz/FuzzParseLoose.
func FuzzParseLoose(f *testing.F) {
	f.Add(`Error code: 429 - {'error': {'message': 'Rate limit', 'code': None, 'retry': True,}}`)
	f.Add(`{"error":{"message":"quota","details":[{"retryDelay":"26s"}]}}`)
	f.Add(`[[[[{"a":`)
	f.Add(`{a: 'b\'c', "d": -1.5e3, e: [1,2,], }`)
	f.Fuzz(func(t *testing.T, s string) {
		v := parseLoose(s)
		if d := depthOf(v); d > maxJSONDepth+1 {
			t.Fatalf("depth %d over %d", d, maxJSONDepth)
		}
		for _, path := range []string{"error.message", "error.details.0.retryDelay", "a", "0"} {
			_, _ = lookup(v, path)
		}
		_, _ = deepFind(v, "message", "", 0)
		_ = scalarString(v)
	})
}

// depthOf is the nesting of a parsed value; it fails the fuzz target on a kind
// parseLoose does not document.
func depthOf(v any) int {
	switch x := v.(type) {
	case nil, string, float64, bool:
		return 0
	case map[string]any:
		d := 0
		for _, c := range x {
			d = max(d, depthOf(c))
		}
		return d + 1
	case []any:
		d := 0
		for _, c := range x {
			d = max(d, depthOf(c))
		}
		return d + 1
	}
	panic("parseLoose returned an undocumented kind")
}
