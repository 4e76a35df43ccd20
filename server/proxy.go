package server

// The proxy: OpenAI-compatible POST /v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/responses, GET /v1/models, and Anthropic-compatible
// POST /v1/messages and POST /v1/messages/count_tokens (passed on once, outside
// the gate: it generates nothing). Errors answer in the face's shape (faces.go).
//
// Each request, in order:
//
//  1. its model chooses the route (route.go, lookupModel): a pool name (a draw,
//     or the session's route in it), provider/model, an exact models: alias, a
//     bare model exactly one configured route serves, or a models: pattern
//     (gpt-* -> openai/*); anything else is a 400 listing what exists. An
//     endpoint of one protocol never reaches a provider of the other.
//  2. the ledger admits it (fair queue, X-Gate-Priority, X-Gate-Session, else
//     the session of the client's key or address),
//     estimated from the body's size and its max_tokens /
//     max_completion_tokens / max_output_tokens; the client's context bounds the
//     wait.
//  3. it is forwarded with the route's upstream model (and reasoning effort),
//     gatectl's key or the client's (upstream.go), and streamed back event by
//     event, each flushed; a non-streaming body is passed on whole.
//  4. the ticket is settled with the usage the provider reported (usage.go).
//  5. a failure before the first byte reached the client — status ≥ 400, a
//     transport error, or a 200 whose body or first event is an error — is
//     classified by the snapshot's chain and planned by the Planner: retried
//     (after the delay, or at once for a rate limit, whose cooldown the next
//     admission waits), failed over, waited out long-term, or given up. The
//     client sees only the latency, until a give-up: then the upstream status and
//     body, with Retry-After never shorter than the real wait and x-should-retry.
//     Every wait is visible (proxy_hold.go): a held stream gets its headers and
//     SSE comments, and then a give-up as the protocol's error event; a
//     non-streamed request is held at most proxy.maxHold, then answered 429.
//  6. a failure after the first byte cannot be retried: the stream ends with the
//     protocol's error event, and what was used is settled.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gatectl/gatectl/snapshot"
)

// Limits of the proxy.
const (
	maxRequestBody  = 32 << 20 // a request body larger than this is refused (413)
	maxResponseBody = 64 << 20 // a non-streaming response larger than this is a transport failure
	maxErrorBody    = 1 << 20  // an error body passed on to the client at most this long
	failureBodyMax  = 16 << 10 // the part of an error body the classifiers see
)

// endpoint is one proxied path.
type endpoint struct {
	path string
	kind apiKind
	// injectUsage: an OpenAI stream on this path reports usage only when asked
	// (stream_options.include_usage), so gatectl asks.
	injectUsage bool
	// embeddings write no output: reserve none.
	noOutput bool
	// defaultMaxTokens is what the API writes at most when the request gives
	// no max_tokens (0: no such default; the gate's output reserve applies).
	defaultMaxTokens int
	// notGenerated: the call generates nothing (Anthropic's count_tokens), so
	// the gate neither admits nor settles it and it is not retried; only its
	// route and key are gatectl's business (proxy_count.go).
	notGenerated bool
}

var endpoints = []endpoint{
	{path: "/v1/chat/completions", kind: kindOpenAI, injectUsage: true},
	// The legacy completions API writes 16 tokens without max_tokens: reserving
	// gate.outputReserveTokens (8192) held 500 times too much for each call.
	{path: "/v1/completions", kind: kindOpenAI, injectUsage: true, defaultMaxTokens: 16},
	{path: "/v1/embeddings", kind: kindOpenAI, noOutput: true},
	{path: "/v1/responses", kind: kindOpenAI},
	{path: "/v1/messages", kind: kindAnthropic},
	{path: "/v1/messages/count_tokens", kind: kindAnthropic, notGenerated: true},
}

// registerProxy mounts the OpenAI- and Anthropic-compatible endpoints.
func (s *Server) registerProxy(mux *http.ServeMux) {
	for i := range endpoints {
		ep := &endpoints[i]
		mux.HandleFunc("POST "+ep.path, func(w http.ResponseWriter, r *http.Request) { s.proxy(w, r, ep) })
	}
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)
	mux.HandleFunc("/v1/", s.proxyNoEndpoint)
}

// proxyNoEndpoint answers a path or method under /v1/ that gatectl does not
// proxy with a 404 (or 405 with Allow) in the face's shape: Anthropic's for
// /v1/messages… or a request carrying anthropic-version, so an SDK raises its
// own NotFoundError rather than choke on plain text.
func (s *Server) proxyNoEndpoint(w http.ResponseWriter, r *http.Request) {
	kind := requestFace(r)
	paths := make([]string, 0, len(endpoints)+2)
	for _, ep := range endpoints {
		if ep.path == r.URL.Path {
			w.Header().Set("Allow", http.MethodPost)
			writeFaceError(w, kind, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s is not allowed on %s (allowed: POST)", r.Method, r.URL.Path))
			return
		}
		paths = append(paths, "POST "+ep.path)
	}
	if r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/") {
		w.Header().Set("Allow", "GET, HEAD")
		writeFaceError(w, kind, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s is not allowed on %s (allowed: GET)", r.Method, r.URL.Path))
		return
	}
	paths = append(paths, "GET /v1/models", "GET /v1/models/{model}")
	writeFaceError(w, kind, http.StatusNotFound, "", fmt.Sprintf("gatectl does not proxy %s %s (it proxies: %s)", r.Method, r.URL.Path, strings.Join(paths, ", ")))
}

// requestFace is the face a request outside the proxied endpoints speaks:
// Anthropic's under /v1/messages or with an anthropic-version header.
func requestFace(r *http.Request) apiKind {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("Anthropic-Version") != "" {
		return kindAnthropic
	}
	return kindOpenAI
}

// readRequestBody reads the request's body within the body budget, holding room
// for it twice (as read, and the copy sent upstream each attempt) until release.
// It answers the client itself when it cannot: 413 over maxRequestBody, 503 with
// Retry-After when the budget has no room within bufferWait.
func (s *Server) readRequestBody(w http.ResponseWriter, r *http.Request, kind apiKind) (body []byte, release func(), ok bool) {
	full := func() {
		// The rest of the body is read and dropped (bodyTimeout bounds it): a
		// client still sending when the answer comes would see a reset, not the 503.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", s.spreadRetryAfter())
		writeFaceError(w, kind, http.StatusServiceUnavailable, "", fmt.Sprintf(
			"gatectl holds as many request and response bodies as it may (server.maxBufferedBytes %d); retry shortly", s.bodies.max))
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	res, err := s.bodies.readBudgeted(r.Context(), bufferWait, r.Body, r.ContentLength, maxRequestBody, true, false, "the request body")
	var tooBig *http.MaxBytesError
	var tooLarge *errTooLarge
	switch {
	case errors.As(err, &tooBig) || errors.As(err, &tooLarge):
		writeFaceError(w, kind, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("the request body is over %d bytes", maxRequestBody))
		return nil, nil, false
	case errors.Is(err, errBudgetFull):
		full()
		return nil, nil, false
	case err != nil:
		writeFaceError(w, kind, http.StatusBadRequest, "", "reading the request body: "+err.Error())
		return nil, nil, false
	}
	upstreamCopy, err := s.bodies.acquireWithin(r.Context(), bufferWait, int64(len(res.b)), true)
	if err != nil {
		s.bodies.release(res.charged)
		full()
		return nil, nil, false
	}
	return res.b, func() { s.bodies.release(res.charged + upstreamCopy) }, true
}

func (s *Server) proxy(w http.ResponseWriter, r *http.Request, ep *endpoint) {
	start := time.Now()
	snap := s.snap.Current()
	rec := &statusRecorder{ResponseWriter: w}
	pr, x := s.serveProxy(rec, r, ep, snap, start)
	if rec.status == 0 && shutDown(r.Context()) {
		// The grace ran out while the call was upstream: it may have been
		// served, but its answer will not come. Say so, rather than close
		// the connection on the client.
		rec.Header().Set("Retry-After", s.spreadRetryAfter())
		rec.Header().Set("X-Should-Retry", "true")
		writeFaceError(rec, ep.kind, http.StatusServiceUnavailable, "", "gatectl shut down before the upstream answered; send the request again")
		_ = http.NewResponseController(rec).Flush() // on the wire before the connections close
	}
	if snap.Config.Log.Access {
		s.logAccess(r, ep, rec.status, pr, x, time.Since(start))
	}
}

// serveProxy answers one proxied request. It returns the request as read and
// its exchange, each nil when the request was refused before it.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, ep *endpoint, snap *snapshot.Snapshot, start time.Time) (*proxyRequest, *exchange) {
	body, release, ok := s.readRequestBody(w, r, ep.kind)
	if !ok {
		return nil, nil
	}
	defer release()
	pr, field, err := parseProxyRequest(ep, body, r.Header)
	if err != nil {
		writeFaceError(w, ep.kind, http.StatusBadRequest, field, err.Error())
		return nil, nil
	}
	// The token, wherever a client's key goes, is taken off before anything
	// reads the key: it is never passed through, and the session a request
	// without X-Gate-Session gets is not the one every client of the token shares.
	guest := s.auth.set && !s.auth.allowsProxy(r)
	took, ownKeyLeft := s.auth.takeKey(r)
	who := clientKeys{guest: guest && !took, tokenAsKey: took && !ownKeyLeft}
	if pr.session == "" {
		pr.session = defaultSession(r.Header, r.RemoteAddr)
	}
	s.seen.note(pr.session, s.clock.Now())
	res, err := s.resolveModel(r.Context(), snap, ep.kind, pr.model, pr.session, who)
	if err != nil {
		writeFaceError(w, ep.kind, http.StatusBadRequest, "model", err.Error())
		return pr, nil
	}
	if pr.oneShot { // the request is its turn: its retry budget ends with it
		defer s.planner.EndTurn(pr.session, pr.turn)
	}
	x := &exchange{s: s, w: w, r: r, pr: pr, snap: snap, cfg: snap.Config, res: res, start: start, clockStart: s.clock.Now()}
	if ep.notGenerated {
		x.passOnce()
	} else {
		x.run()
	}
	total := time.Since(start)
	s.metrics.Overhead(max(total-x.upstream-x.held, 0))
	if s.logger.IsTrace() {
		s.proxyLog.Trace("request complete", "path", ep.path, "model", pr.model, "route", res.route.String(),
			"session", pr.session, "waited", x.waited, "duration", total)
	}
	return pr, x
}
