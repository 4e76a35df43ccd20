package server

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkParseProxyRequest reads an ordinary 20 KB text request: the media
// scan (proxy_media.go) must cost such a body next to nothing.
func BenchmarkParseProxyRequest(b *testing.B) {
	ep := &endpoints[4] // /v1/messages
	body := []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 4000) + `"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := parseProxyRequest(ep, body, http.Header{}); err != nil {
			b.Fatal(err)
		}
	}
}
