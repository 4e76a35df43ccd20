package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gatectl/gatectl/server/ui"
)

// The decision API and the console can change what the gate does (reset a
// model, settle tickets, change settings), so when the daemon is reachable from
// other machines they need a token (config api.tokenEnv names the variable
// holding it). /healthz, /readyz and /metrics are not guarded: probes and
// scrapers carry no token. The proxy face needs it only where gatectl pays:
// a route sent with gatectl's own provider key (clientKeys); a pass-through
// route spends the key the client sent.

// tokenCookie is the cookie the console keeps the token in.
const tokenCookie = "gatectl_token"

// apiAuth guards the decision API and the console with one token. The zero
// value (no token) lets everything through.
type apiAuth struct {
	// sum is the SHA-256 of the token: comparing fixed-size digests in constant
	// time hides the token's length as well as its bytes.
	sum [sha256.Size]byte
	set bool
	n   int // the token's length, for the check beyond loopback
}

// minExposedToken is the shortest token the daemon accepts beyond loopback:
// anyone who can reach it may guess, and 401s are not slowed down.
const minExposedToken = 16

func newAPIAuth(token string) apiAuth {
	if token == "" {
		return apiAuth{}
	}
	return apiAuth{sum: sha256.Sum256([]byte(token)), set: true, n: len(token)}
}

// guarded reports whether path needs the token: /gate/v1/* and /ui, /ui/*.
func guarded(path string) bool {
	return strings.HasPrefix(path, apiPrefix) || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// wrap returns h behind the token check.
func (a apiAuth) wrap(h http.Handler) http.Handler {
	if !a.set {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if guarded(r.URL.Path) && !a.allows(r) {
			if ui.WantsPage(r) {
				ui.Login(w, r) // a person opening the console: the page that asks for the token
				return
			}
			writeUnauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// is reports whether v is the token (digests compared in constant time).
func (a apiAuth) is(v string) bool {
	sum := sha256.Sum256([]byte(v))
	return subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1
}

// bearer is the credential of an Authorization: Bearer header, or "". The
// scheme's name is case-insensitive (RFC 9110 §11.1): "bearer" works too.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// allows reports whether r carries the token in any of the accepted places.
// (Each place is compared, found or not, so the time says nothing of which.)
func (a apiAuth) allows(r *http.Request) bool {
	ok := false
	if v := bearer(r); v != "" {
		ok = a.is(v) || ok
	}
	if v := r.Header.Get("X-Gate-Token"); v != "" {
		ok = a.is(v) || ok
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		ok = a.is(c.Value) || ok
	}
	return ok
}

// allowsProxy reports whether a proxied request carries the token: as the API
// key an SDK sends (Authorization: Bearer, or Anthropic's x-api-key), or as
// X-Gate-Token beside a key of the client's own.
func (a apiAuth) allowsProxy(r *http.Request) bool {
	if a.allows(r) {
		return true
	}
	v := r.Header.Get("X-Api-Key")
	return v != "" && a.is(v)
}

// takeKey removes the token from every header a client's own key goes in
// (passThroughHeaders: Authorization: Bearer, x-api-key, api-key, …, every
// value): sent as the SDK's key, it is never passed through to a provider.
// took says it was there; ownKeyLeft, that a key of the client's own is left.
func (a apiAuth) takeKey(r *http.Request) (took, ownKeyLeft bool) {
	if !a.set {
		return false, false
	}
	for _, k := range passThroughHeaders {
		vs := r.Header.Values(k)
		if len(vs) == 0 {
			continue
		}
		kept := vs[:0:0]
		for _, v := range vs {
			cred := v
			if k == "Authorization" && len(v) > 7 && strings.EqualFold(v[:7], "Bearer ") {
				cred = strings.TrimSpace(v[7:])
			}
			if a.is(cred) {
				took = true
				continue
			}
			kept = append(kept, v)
		}
		if len(kept) == 0 {
			r.Header.Del(k)
			continue
		}
		r.Header[http.CanonicalHeaderKey(k)] = kept
		if k != "Openai-Organization" && k != "Openai-Project" {
			ownKeyLeft = true
		}
	}
	return took, ownKeyLeft
}

// writeUnauthorized answers 401 without a word about the token it expected.
func writeUnauthorized(w http.ResponseWriter) {
	var e apiError
	e.Error.Message = "this endpoint needs the API token: send Authorization: Bearer <token>, X-Gate-Token: <token> or the gatectl_token cookie (the token is in the variable config api.tokenEnv names)"
	e.Error.Type = "unauthorized"
	w.Header().Set("WWW-Authenticate", `Bearer realm="gatectl"`)
	writeJSON(w, http.StatusUnauthorized, e)
}

// CheckListen refuses to listen on addr (host:port) beyond loopback without an
// API token, before anything is bound; Serve checks its listener again.
func (s *Server) CheckListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: listen address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	a := &net.TCPAddr{IP: ip}
	if err := checkExposure(a, s.auth, s.snap.Current().Config.API.TokenEnv); err != nil {
		// name the address as it was written (a host name has no IP to show)
		return errors.New(strings.Replace(err.Error(), a.String(), net.JoinHostPort(host, port), 1))
	}
	return nil
}

// errNoToken says how to configure the missing token.
func errNoToken(tokenEnv string) error {
	if tokenEnv == "" {
		return errors.New("set api.tokenEnv to the name of an environment variable holding one, or listen on 127.0.0.1")
	}
	return fmt.Errorf("%s (api.tokenEnv) is unset or empty", tokenEnv)
}

// checkExposure refuses to serve an unguarded decision API beyond loopback:
// anyone who can reach it could reset models and settle other callers' tickets.
func checkExposure(addr net.Addr, auth apiAuth, tokenEnv string) error {
	switch {
	case isLoopback(addr):
		return nil
	case !auth.set:
		return fmt.Errorf("server: listening on %s (beyond loopback) needs an API token: %w", addr, errNoToken(tokenEnv))
	case auth.n < minExposedToken:
		return fmt.Errorf("server: listening on %s (beyond loopback) needs an API token of at least %d characters: %s (api.tokenEnv) holds %d", addr, minExposedToken, tokenEnv, auth.n)
	}
	return nil
}

// isLoopback reports whether addr is reachable only from this machine. An
// unspecified address (0.0.0.0, ::) listens on every interface: not loopback.
func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
