package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// The proxy and the decision API accept the same session ids: one the API
// refuses (and so could never inspect) is refused by the proxy too, naming the
// header. A model name with a NUL never reaches a bucket or a metric label.
func TestProxyIDsValidatedLikeTheAPI(t *testing.T) {
	e := newAPIEnv(t, strings.Replace(apiTestConfig, "  rounds: 3", "  rounds: 0", 1)) // nothing listens upstream: no retries
	send := func(body string, hdr map[string]string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header[k] = []string{v}
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		field, msg := apiErrorOf(t, b)
		return resp.StatusCode, field, msg
	}
	const chat = `{"model":"alpha/m1","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct{ name, header, value, msg string }{
		{"Tab", "X-Gate-Session", "a\tb", "control characters"},
		{"InvalidUTF8", "X-Gate-Session", "s\xff\xfe", "not valid UTF-8"},
		{"TurnTab", "X-Gate-Turn", "t\t1", "control characters"},
		{"TooLong", "X-Gate-Session", strings.Repeat("s", 300), "too long"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, field, msg := send(chat, map[string]string{c.header: c.value})
			if status != http.StatusBadRequest || field != c.header || !strings.Contains(msg, c.header) || !strings.Contains(msg, c.msg) {
				t.Fatalf("%d %q %q", status, field, msg)
			}
			// The decision API refuses the same id (JSON cannot carry invalid
			// UTF-8: a decoder replaces it, so that case has no API twin).
			if c.header == "X-Gate-Session" && c.name != "InvalidUTF8" {
				st, body, _ := e.do(http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"m1","wait":false,"session":"`+jsonEscape(c.value)+`"}`)
				if st != http.StatusBadRequest {
					t.Fatalf("the API accepted the id: %d %s", st, body)
				}
			}
		})
	}
	status, field, msg := send(`{"model":"alpha/m\u0000x","messages":[]}`, nil)
	if status != http.StatusBadRequest || field != "model" || !strings.Contains(msg, "control characters") {
		t.Fatalf("NUL model: %d %q %q", status, field, msg)
	}
	if m := e.metricsText(t); strings.Contains(m, "m\x00x") {
		t.Fatal("a NUL reached /metrics")
	}
	if n := e.srv.Ledger().Buckets(); n != 0 {
		t.Fatalf("refused requests made %d buckets", n)
	}
}

// jsonEscape writes s as the inside of a JSON string, bytes as they are.
func jsonEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\t", `\t`)
	return r.Replace(s)
}

// /readyz (and status) show a reload error only while it is the latest word: a
// later reload that succeeds clears it (the failure count stays).
func TestReadyzForgetsReloadErrorAfterSuccess(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	if err := os.WriteFile(e.config, []byte(apiTestConfig+"\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Reload(context.Background()); err == nil {
		t.Fatal("a bad config reloaded")
	}
	if r := e.get("/readyz", http.StatusOK); !strings.Contains(fmt.Sprint(r["lastReloadError"]), "bogus") {
		t.Fatalf("readyz after the failure: %v", r)
	}
	if err := os.WriteFile(e.config, []byte(apiTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.get("/readyz", http.StatusOK)
	if r["lastReloadError"] != nil && r["lastReloadError"] != "" || r["reloadFailures"] != 1.0 {
		t.Fatalf("readyz after a later success: %v", r)
	}
	if st := e.get("/gate/v1/status", http.StatusOK); st["lastReloadError"] != nil {
		t.Fatalf("status after a later success: %v", st["lastReloadError"])
	}
}

// With a token, /readyz — which probes reach without one — says a reload
// failed but not why: the error quotes the file (a value typed in the wrong
// place may be a key). The token's holders, and the log, get the words.
func TestReadyzKeepsReloadErrorsForTheTokensHolders(t *testing.T) {
	t.Setenv("GATECTL_AUTH_TEST_TOKEN", "s3cret-token")
	e := newAPIEnv(t, authTestConfig)
	if err := os.WriteFile(e.config, []byte(strings.Replace(authTestConfig, "tpm: 1000000", `tpm: "sk-proj-LEAKME"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "LEAKME") {
		t.Fatalf("reload: %v, want the value quoted (the log's words)", err)
	}
	r := e.get("/readyz", http.StatusOK)
	if got := fmt.Sprint(r["lastReloadError"]); strings.Contains(got, "LEAKME") || !strings.Contains(got, "failed") {
		t.Fatalf("readyz without the token: %q, want that it failed and nothing of the file", got)
	}
	req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "LEAKME") {
		t.Fatalf("readyz with the token: %s, want the reload's error", b)
	}
}
