package server

import (
	"net/http"
	"testing"
)

// /v1/completions without max_tokens writes at most the API's default of 16
// tokens: that is what it reserves, not gate.outputReserveTokens (8192).
func TestCompletionsDefaultMaxTokens(t *testing.T) {
	ep := func(path string) *endpoint {
		for i := range endpoints {
			if endpoints[i].path == path {
				return &endpoints[i]
			}
		}
		t.Fatalf("no endpoint %s", path)
		return nil
	}
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/v1/completions", `{"model":"m","prompt":"hi"}`, 16},
		{"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":null}`, 16},
		{"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":300}`, 300},
		{"/v1/chat/completions", `{"model":"m","messages":[]}`, 0},
	} {
		pr, _, err := parseProxyRequest(ep(c.path), []byte(c.body), http.Header{})
		if err != nil || pr.maxTokens != c.want {
			t.Errorf("%s %s: maxTokens %d (%v), want %d", c.path, c.body, pr.maxTokens, err, c.want)
		}
	}
}
