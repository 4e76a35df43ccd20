package server

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A web page the operator opens can send requests to the daemon: a form or a
// no-cors fetch reaches 127.0.0.1 from any site, and carries the console's
// cookie from a page on another port of the same host. Such a request could
// mark providers exhausted, reset models and settings, or spend a provider key
// through the proxy. Browsers say where a request comes from (Origin,
// Sec-Fetch-Site); programs send neither. So a request that changes something
// (any method but GET, HEAD and OPTIONS) is refused when a browser says it
// comes from another origin. Reads need no such check: without CORS headers
// the page cannot read the answer.
//
// DNS rebinding goes further: a name the attacker controls is pointed at
// 127.0.0.1, and the page's requests are then same-origin — to its own name.
// Without a token the daemon listens on loopback only, so it answers only the
// names loopback has (localhost, 127.0.0.0/8, ::1): a request naming another
// host did not come from this machine's own clients (hostGuard, in Serve).

// refuseCrossSite answers 403 to a state-changing request a browser sent from
// another origin, and passes everything else to h.
func refuseCrossSite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if changes(r.Method) && fromElsewhere(r) {
			writeForbidden(w, r, "a browser sent this request from another site ("+describeOrigin(r)+"): gatectl refuses requests that change state or spend a key from pages it did not serve")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func changes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// fromElsewhere: the browser said the request comes from another origin.
func fromElsewhere(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	case "same-origin", "none":
		// The browser's own word, which a reverse proxy does not change —
		// it may change the Host the Origin would be compared with.
		return false
	}
	o := r.Header.Get("Origin") // a browser that sends no Sec-Fetch-Site
	if o == "" {
		return false // not a browser, or a browser's same-origin GET
	}
	u, err := url.Parse(o)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}

func describeOrigin(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		return "Origin " + o
	}
	return "Sec-Fetch-Site " + r.Header.Get("Sec-Fetch-Site")
}

// hostGuard, without an API token, answers only requests that name this
// machine's loopback (DNS rebinding: see above).
func hostGuard(h http.Handler, auth apiAuth) http.Handler {
	if auth.set {
		return h // the token guards what matters, from any name
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			writeForbidden(w, r, "this gatectl has no API token and answers only loopback names (localhost, 127.0.0.1, [::1]); the request named "+r.Host+" — behind a reverse proxy, forward the Host as 127.0.0.1 or set api.tokenEnv")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackHost: host (a Host header, maybe with a port) names loopback, or
// nothing at all (HTTP/1.0).
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(host), "."), "]")
	host = strings.TrimPrefix(host, "[")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeForbidden answers 403 in the shape of the face the path belongs to.
func writeForbidden(w http.ResponseWriter, r *http.Request, msg string) {
	var e apiError
	e.Error.Message = msg
	e.Error.Type = "forbidden"
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		writeJSON(w, http.StatusForbidden, map[string]any{"type": "error", "error": map[string]any{"type": "permission_error", "message": msg}})
		return
	}
	writeJSON(w, http.StatusForbidden, e)
}
