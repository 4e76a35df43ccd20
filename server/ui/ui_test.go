package ui

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func serve(h http.Handler, method, path, accept string) *http.Response {
	r := httptest.NewRequest(method, path, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestHandlerServesThePageAndItsAssets(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/ui", "text/html", `<script type="module" src="/ui/app.js">`},
		{"/ui/", "text/html", `<main id="view"`},
		{"/ui/index.html", "text/html", `<nav id="nav"`},
		{"/ui/app.js", "javascript", "EventSource"},
		{"/ui/app.css", "text/css", "@media (max-width: 720px)"},
		{"/ui/curve.js", "javascript", "export function curve"},
	} {
		resp := serve(h, http.MethodGet, tc.path, "")
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(b), tc.contains) {
			t.Errorf("GET %s: %d %q, want 200 %s containing %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.ctype, tc.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: CSP %q, want same-origin only, nothing unsafe", tc.path, csp)
		}
	}
	if resp := serve(h, http.MethodGet, "/ui/missing.js", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a missing asset: %d, want 404", resp.StatusCode)
	}
	if resp := serve(h, http.MethodPost, "/ui", ""); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ui: %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// The login page is served without the token, so everything it runs is inline,
// and its CSP allows exactly those blocks by hash.
func TestLoginPageAllowsOnlyItsInlineBlocks(t *testing.T) {
	resp := serve(http.HandlerFunc(Login), http.MethodGet, "/ui", "text/html")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `id="login"`) {
		t.Fatalf("Login: %d, want 401 with the form", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if strings.Contains(csp, "'self' 'unsafe") || strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("login CSP %q lets more than its own inline blocks run", csp)
	}
	for _, m := range inlineBlock.FindAllSubmatch(b, -1) {
		sum := sha256.Sum256(m[2])
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
			t.Errorf("the inline %s block's hash %s is not in the CSP %q", m[1], h, csp)
		}
	}
	if strings.Contains(string(b), ` src="/ui/`) || strings.Contains(string(b), ` href="/ui/`) {
		t.Error("the login page loads an asset under /ui, which needs the token it asks for")
	}
}

func TestWantsPage(t *testing.T) {
	for _, tc := range []struct {
		method, path, accept string
		want                 bool
	}{
		{"GET", "/ui", "text/html,application/xhtml+xml,*/*;q=0.8", true},
		{"GET", "/ui/", "text/html", true},
		{"GET", "/ui", "", false},                 // an API client: the JSON 401
		{"GET", "/ui", "application/json", false}, // likewise
		{"GET", "/ui/app.js", "text/html", false}, // an asset
		{"POST", "/ui", "text/html", false},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		r.Header.Set("Accept", tc.accept)
		if got := WantsPage(r); got != tc.want {
			t.Errorf("WantsPage(%s %s, Accept %q) = %v, want %v", tc.method, tc.path, tc.accept, got, tc.want)
		}
	}
}
