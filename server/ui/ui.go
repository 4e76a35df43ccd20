// Package ui is gatectl's web console: a few static files (HTML, CSS, vanilla JS
// modules) embedded in the binary and served at /ui. The page reads the decision
// API (/gate/v1/status, waits, routes, sessions, settings, stats, failures) and
// follows /gate/v1/events; it holds no state the server does not have, beyond a
// bounded client-side history for its charts.
//
// Nothing is built at run time and nothing is fetched from elsewhere: what the
// binary carries is what the browser runs.
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/ui"

// Handler serves the console: /ui (and /ui/) is the page, /ui/<file> its assets.
// Access control is the caller's: the API token guards /ui like /gate/v1/.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		setHeaders(w)
		name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, Prefix), "/")
		if name == "" || name == "index.html" {
			// Always the page itself (no redirect to /ui/index.html): its relative
			// asset URLs resolve against /ui/ either way.
			serveIndex(w, r, sub)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

// Login answers a request for the console that lacks the API token: a 401 whose
// body is the page asking for it. The page stores the token in the gatectl_token
// cookie, which every later request (the event stream included) carries.
//
// Without the token nothing under /ui is served, so the page carries its style
// and script inline, allowed by their hashes and nothing else.
func Login(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", login.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	if r.Method != http.MethodHead {
		_, _ = w.Write(login.page)
	}
}

var login = loadLogin()

type loginPage struct {
	page []byte
	csp  string
}

var inlineBlock = regexp.MustCompile(`(?s)<(style|script)[^>]*>(.*?)</(?:style|script)>`)

// loadLogin reads the login page and builds its CSP from the hashes of its
// inline blocks, so that only these blocks run.
func loadLogin() loginPage {
	b, err := assets.ReadFile("assets/login.html")
	if err != nil {
		panic(err) // embedded above
	}
	var scripts, styles []string
	for _, m := range inlineBlock.FindAllSubmatch(b, -1) {
		sum := sha256.Sum256(m[2])
		src := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if string(m[1]) == "script" {
			scripts = append(scripts, src)
		} else {
			styles = append(styles, src)
		}
	}
	return loginPage{page: b, csp: "default-src 'none'; img-src data:; connect-src 'self'; script-src " + strings.Join(scripts, " ") +
		"; style-src " + strings.Join(styles, " ") + "; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"}
}

// WantsPage reports whether r is a browser asking for the console page: a GET
// of /ui that accepts HTML. It decides between the login page and the JSON 401
// every other client (and every asset) gets.
func WantsPage(r *http.Request) bool {
	p := r.URL.Path
	return (p == Prefix || p == Prefix+"/" || p == Prefix+"/index.html") && r.Method == http.MethodGet &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

func serveIndex(w http.ResponseWriter, r *http.Request, sub fs.FS) {
	b, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		http.Error(w, "console page missing from the build", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// setHeaders keeps the console to its own origin: no script, style or
// connection anywhere else, and no framing by another site.
func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}
