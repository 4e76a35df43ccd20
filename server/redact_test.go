package server

import (
	"slices"

	"encoding/json"
	"fmt"
	"github.com/gatectl/gatectl/config"
	"net/http"
	"strings"
	"testing"
)

// echoAuth is an upstream that quotes the request's credentials back, in its
// error body and in a header, with status.
func echoAuth(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Debug-Auth", auth)
		w.WriteHeader(status)
		msg, _ := json.Marshal("Incorrect API key provided: " + auth + " (org " + r.Header.Get("X-Org") + ")")
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","code":"invalid_api_key"}}`, msg)
	}
}

// TestProxyRedactsConfiguredSecrets: an upstream that echoes gatectl's own key
// (apiKeyEnv) and a ${NAME} header secret in its error body, its headers or a
// stream's error event hands the client "[redacted]" instead, and neither
// reaches the log.
func TestProxyRedactsConfiguredSecrets(t *testing.T) {
	const orgSecret = "org-secret-424242"
	t.Setenv("GATECTL_TEST_KEY_CONF", pxConfKey)
	t.Setenv("GATECTL_TEST_ORG", orgSecret)
	config := func(url string) string {
		return fmt.Sprintf(`
log: {level: trace}
providers:
  conf: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_CONF, headers: {X-Org: "${GATECTL_TEST_ORG}"}}
`, url)
	}
	leaks := func(t *testing.T, where, s string) {
		t.Helper()
		for _, secret := range []string{pxConfKey, orgSecret} {
			if strings.Contains(s, secret) {
				t.Fatalf("%s holds the secret %q: %s", where, secret, s)
			}
		}
	}
	for _, status := range []int{401, 500} {
		t.Run(fmt.Sprintf("error body and headers (%d)", status), func(t *testing.T) {
			up := newFakeUpstream(t, echoAuth(status))
			f := newPxFixture(t, config(up.URL)+"retry: {rounds: 0}\n", true)
			r, body := f.call("/v1/chat/completions", chatReq("conf/m"))
			if r.StatusCode != status {
				t.Fatalf("status %d, want %d: %s", r.StatusCode, status, body)
			}
			if !strings.Contains(body, "Bearer "+redactedText) || r.Header.Get("X-Debug-Auth") != "Bearer "+redactedText {
				t.Fatalf("the echo is not redacted in place: header %q body %s", r.Header.Get("X-Debug-Auth"), body)
			}
			leaks(t, "the body", body)
			leaks(t, "the headers", fmt.Sprint(r.Header))
			leaks(t, "the log", f.logs.String())
		})
	}
	t.Run("count_tokens (passed on once)", func(t *testing.T) {
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Debug-Key", r.Header.Get("X-Api-Key"))
			w.WriteHeader(401)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key %s"}}`, r.Header.Get("X-Api-Key"))
		})
		f := newPxFixture(t, fmt.Sprintf("providers:\n  a: {kind: anthropic, baseURL: %s, apiKeyEnv: GATECTL_TEST_KEY_CONF}\n", up.URL), true)
		r, body := f.call("/v1/messages/count_tokens", map[string]any{"model": "a/m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		if r.StatusCode != 401 || !strings.Contains(body, redactedText) || r.Header.Get("X-Debug-Key") != redactedText {
			t.Fatalf("status %d header %q body %s", r.StatusCode, r.Header.Get("X-Debug-Key"), body)
		}
		leaks(t, "the body", body)
	})
	t.Run("stream error event", func(t *testing.T) {
		up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			msg, _ := json.Marshal("bad key " + r.Header.Get("Authorization"))
			sse(w, chatChunk("hi"), `data: {"error":{"message":`+string(msg)+`,"type":"server_error"}}`+"\n\n")
		})
		f := newPxFixture(t, config(up.URL), true)
		r, body := f.call("/v1/chat/completions", chatReq("conf/m", "stream", true))
		if r.StatusCode != 200 || !strings.Contains(body, "bad key Bearer "+redactedText) {
			t.Fatalf("status %d body %s", r.StatusCode, body)
		}
		leaks(t, "the stream", body)
		leaks(t, "the log", f.logs.String())
	})
}

func TestRedactorUnit(t *testing.T) {
	rd := newRedactor([]string{"abc", "", "sk-longer-secret", "sk-longer"})
	if got := string(rd.bytes([]byte("x sk-longer-secret y sk-longer z abc"))); got != "x [redacted] y [redacted] z abc" {
		t.Fatalf("got %q", got)
	}
	in := []byte("nothing here")
	if out := rd.bytes(in); &out[0] != &in[0] {
		t.Fatal("a body without secrets is copied")
	}
	var zero *redactor
	if string(zero.bytes([]byte("sk-longer"))) != "sk-longer" {
		t.Fatal("a nil redactor changed the input")
	}
}

// The API token is a secret gatectl holds like a provider key: an upstream (or a
// plugin) that somehow quotes it is redacted too.
func TestSecretEnvNamesIncludeTheAPIToken(t *testing.T) {
	cfg, err := config.Parse([]byte("api: {tokenEnv: MY_GATE_TOKEN}\nproviders:\n  conf: {kind: openai, baseURL: http://127.0.0.1:1/v1, apiKeyEnv: K}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := secretEnvNames(cfg)
	for _, want := range []string{"K", "MY_GATE_TOKEN", "GATECTL_TOKEN"} {
		if !slices.Contains(names, want) {
			t.Fatalf("secretEnvNames = %v, missing %s", names, want)
		}
	}
}
