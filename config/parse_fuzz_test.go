package config

import (
	"strings"
	"testing"
)

// FuzzParse: the config parser never panics on any bytes; it returns a config or
// an error, never both or neither, and every error names the file. Seeds:
// testdata/fuzz/FuzzParse, and the example configuration.
func FuzzParse(f *testing.F) {
	f.Add([]byte("listen: 127.0.0.1:7878\nproviders:\n  p: {kind: openai, baseURL: http://127.0.0.1:1/v1}\n"))
	f.Add([]byte("retry: {rounds: 3, transport: {timeout: null}}\nupstream: {firstByteTimeout: 1s}\n"))
	f.Add([]byte("pools:\n  a:\n    routes:\n      - {provider: p, model: m}\n"))
	f.Add([]byte("gate: {models: {p/m: {tpm: 1000}}}\n&a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if (c == nil) == (err == nil) {
			t.Fatalf("config %v and error %v", c != nil, err)
		}
		if err != nil && !strings.Contains(err.Error(), "fuzz.yaml") {
			t.Fatalf("the error does not name the file: %v", err)
		}
	})
}
