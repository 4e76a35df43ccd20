package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
)

// Keys (the rule, also in the README):
//
//   - A provider with apiKeyEnv gets gatectl's key from that variable
//     (Authorization: Bearer for openai kind, x-api-key for anthropic kind); one
//     whose headers set Authorization, x-api-key, api-key or x-goog-api-key counts
//     as keyed too. The client's Authorization, x-api-key, api-key, x-goog-api-key,
//     OpenAI-Organization and OpenAI-Project are dropped: they belong to the
//     client's account, not ours.
//   - A provider without one is pass-through: the client's own key goes to it —
//     but only to the provider the key is meant for (resolved.keyProvider: the
//     provider the client named, a bare model's provider, or the route a pool
//     request started on). A retry or long-term wait stays on that provider; a
//     failover may go to another provider only when that provider has a
//     configured key. A failover that would carry the client's key to another
//     pass-through provider is not taken: the failure goes back to the client.
//   - Header values under providers.*.headers expand ${NAME} from gatectl's
//     environment only, never from the request.
//   - No key, whoever's, is ever logged: the proxy logs provider, model, route,
//     status and class, never headers.

// clientKeys says with whose key a request may be sent: the client's own, to
// provider only; gatectl's, unless an API token is set and the request did not
// carry it (guest) — the token is what stands between anyone who can reach
// the daemon and the operator's provider keys.
type clientKeys struct {
	provider string // the provider the client's own key is meant for
	guest    bool
	// tokenAsKey: the request's API key is gatectl's token, not a key of its
	// own (serveProxy takes it off the request): nothing to pass through.
	tokenAsKey bool
}

// meantFor is k with the client's own key meant for provider.
func (k clientKeys) meantFor(provider string) clientKeys { k.provider = provider; return k }

// errNeedsToken: a request without the API token on a route gatectl pays for.
var errNeedsToken = errors.New("this route is sent with gatectl's own provider key, which needs the API token")

// usableRoute says whether a request of kind, with keys, may be sent on route
// (nil), or why not.
func usableRoute(cfg *config.Config, kind apiKind, keys clientKeys, route engine.Route) error {
	if err := kindMatches(cfg, kind, route.Provider); err != nil {
		return err
	}
	own := cfg.Providers[route.Provider].OwnKey()
	if own && keys.guest {
		return fmt.Errorf("route %s: %w: send it as the API key (Authorization: Bearer, x-api-key) or in X-Gate-Token (the token is in the variable config api.tokenEnv names)", route, errNeedsToken)
	}
	if !own && keys.tokenAsKey {
		return fmt.Errorf("route %s passes the client's own key through, and this request's key is gatectl's API token, which is never sent to a provider: send the provider's key (and the token in X-Gate-Token, if a route needs it)", route)
	}
	if !own && route.Provider != keys.provider {
		return fmt.Errorf("route %s passes the client's key through, and that key is meant for provider %q: gatectl does not send it to another provider (configure providers.%s.apiKeyEnv to fail over there)",
			route, keys.provider, route.Provider)
	}
	return nil
}

// upstreamURL joins the provider's base URL and the endpoint. OpenAI-kind base
// URLs end at the API version (…/v1, …/v1beta/openai); Anthropic's is the host,
// with or without /v1.
func upstreamURL(pc config.Provider, ep *endpoint, rawQuery string) string {
	base := strings.TrimRight(pc.BaseURL, "/")
	var u string
	switch {
	case ep.kind == kindAnthropic && !strings.HasSuffix(base, "/v1"):
		u = base + ep.path
	default:
		u = base + strings.TrimPrefix(ep.path, "/v1")
	}
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	return u
}

// dropRequestHeaders are never forwarded: hop-by-hop headers, what the transport
// sets, gatectl's own, the client's credentials (added back only for a
// pass-through provider), and what would reveal the client's network.
var dropRequestHeaders = map[string]bool{
	"Authorization": true, "X-Api-Key": true, "Api-Key": true, "X-Goog-Api-Key": true, "Openai-Organization": true, "Openai-Project": true,
	"Cookie": true, "Host": true, "Content-Length": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Accept-Encoding": true, "Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
	"X-Forwarded-Proto": true, "X-Real-Ip": true, "Expect": true, // the body is in hand: nothing to continue
}

// connectionHeaders are the headers h's Connection header names: hop-by-hop
// for this message, which a proxy must not forward (RFC 9110 §7.6.1), in
// canonical form. nil when there are none.
func connectionHeaders(h http.Header) map[string]bool {
	var hop map[string]bool
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if hop == nil {
					hop = map[string]bool{}
				}
				hop[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return hop
}

// passThroughHeaders are the client's credentials, forwarded only to the
// pass-through provider its key is meant for.
var passThroughHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Openai-Organization", "Openai-Project"}

// errKeyNotSet: a provider's apiKeyEnv names a variable that is empty.
var errKeyNotSet = errors.New("key variable not set")

// newUpstreamRequest builds the request for one attempt on route.
func newUpstreamRequest(ctx context.Context, in *http.Request, ep *endpoint, name string, pc config.Provider, keyProvider string, body []byte, stream bool) (*http.Request, error) {
	query := "" // the client's query (Azure's api-version, say) goes only to the provider it named
	if name == keyProvider {
		query = in.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstreamURL(pc, ep, query), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	hop := connectionHeaders(in.Header)
	for k, vs := range in.Header {
		if dropRequestHeaders[k] || hop[k] || strings.HasPrefix(k, "X-Gate-") {
			continue
		}
		h[k] = vs
	}
	h.Set("Content-Type", "application/json")
	if stream {
		h.Set("Accept", "text/event-stream")
	}
	switch {
	case pc.APIKeyEnv != "":
		key := os.Getenv(pc.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("provider %q: %w: %s", name, errKeyNotSet, pc.APIKeyEnv)
		}
		if pc.Kind == string(kindAnthropic) {
			h.Set("X-Api-Key", key)
		} else {
			h.Set("Authorization", "Bearer "+key)
		}
	case name == keyProvider && !pc.OwnKey():
		for _, k := range passThroughHeaders {
			if vs := in.Header.Values(k); len(vs) > 0 {
				h[k] = vs
			}
		}
	}
	if pc.Kind == string(kindAnthropic) && h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", "2023-06-01")
	}
	for k, v := range pc.Headers {
		h.Set(k, expandEnv(v))
	}
	return req, nil
}

// expandEnv replaces ${NAME} with the variable's value from gatectl's
// environment; anything else (a lone $, $NAME) stays as written.
func expandEnv(v string) string {
	if !strings.Contains(v, "${") {
		return v
	}
	var b strings.Builder
	for {
		i := strings.Index(v, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(v[i:], '}')
		if j < 0 {
			break
		}
		b.WriteString(v[:i])
		b.WriteString(os.Getenv(v[i+2 : i+j]))
		v = v[i+j+1:]
	}
	b.WriteString(v)
	return b.String()
}

// upstreamBody is the client's body rewritten for route: model replaced, the
// route's reasoning effort where the API has the field, and for an OpenAI stream
// stream_options.include_usage set (so gatectl can settle with real usage),
// unless askUsage is false (the provider's streamUsage: false).
func upstreamBody(pr *proxyRequest, route engine.Route, askUsage bool) ([]byte, error) {
	fields := make(map[string]json.RawMessage, len(pr.fields)+2)
	for k, v := range pr.fields {
		fields[k] = v
	}
	m, _ := json.Marshal(route.Model)
	fields["model"] = m
	if e := route.ReasoningEffort; e != "" {
		switch pr.ep.path {
		case "/v1/chat/completions":
			fields["reasoning_effort"], _ = json.Marshal(e)
		case "/v1/responses":
			var reasoning map[string]json.RawMessage
			if raw, ok := pr.fields["reasoning"]; ok {
				_ = json.Unmarshal(raw, &reasoning)
			}
			if reasoning == nil { // absent, null, or not an object
				reasoning = map[string]json.RawMessage{}
			}
			reasoning["effort"], _ = json.Marshal(e)
			fields["reasoning"], _ = json.Marshal(reasoning)
		}
	}
	if pr.stream && pr.ep.injectUsage && !askUsage {
		// The upstream refuses the parameter (streamUsage: false): not even
		// the client's own goes, and no usage chunk comes back.
		delete(fields, "stream_options")
	}
	if pr.stream && pr.ep.injectUsage && !pr.clientUsage && askUsage {
		var opts map[string]json.RawMessage
		if raw, ok := pr.fields["stream_options"]; ok {
			_ = json.Unmarshal(raw, &opts)
		}
		if opts == nil { // absent, null (which unmarshals to a nil map), or not an object
			opts = map[string]json.RawMessage{}
		}
		opts["include_usage"] = json.RawMessage("true")
		fields["stream_options"], _ = json.Marshal(opts)
	}
	return json.Marshal(fields)
}

// transportKind names a transport error for Failure.ErrorKind: "timeout",
// "reset", "refused", "dns" or "".
func transportKind(err error) string {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr):
		return "dns"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, syscall.EPIPE):
		return "reset"
	}
	return ""
}

// failureHeaders flattens response headers for a Failure (one value each).
func failureHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			out[strings.ToLower(k)] = vs[0]
		}
	}
	return out
}
