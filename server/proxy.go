package server

// The proxy: OpenAI-compatible POST /v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/responses, GET /v1/models, and Anthropic-compatible
// POST /v1/messages.
//
// Each request, in order:
//
//  1. its model chooses the route (route.go): a pool name (a draw, or the
//     session's route in it), provider/model, or a bare model exactly one
//     configured route serves; anything else is a 400 listing what exists. An
//     endpoint of one protocol never reaches a provider of the other.
//  2. the ledger admits it (fair queue, X-Gate-Priority, X-Gate-Session),
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
//  6. a failure after the first byte cannot be retried: the stream ends with the
//     protocol's error event, and what was used is settled.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
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
}

var endpoints = []endpoint{
	{path: "/v1/chat/completions", kind: kindOpenAI, injectUsage: true},
	{path: "/v1/completions", kind: kindOpenAI, injectUsage: true},
	{path: "/v1/embeddings", kind: kindOpenAI, noOutput: true},
	{path: "/v1/responses", kind: kindOpenAI},
	{path: "/v1/messages", kind: kindAnthropic},
}

// registerProxy mounts the OpenAI- and Anthropic-compatible endpoints.
func (s *Server) registerProxy(mux *http.ServeMux) {
	for i := range endpoints {
		ep := &endpoints[i]
		mux.HandleFunc("POST "+ep.path, func(w http.ResponseWriter, r *http.Request) { s.proxy(w, r, ep) })
	}
	mux.HandleFunc("GET /v1/models", s.handleModels)
}

// proxyRequest is a client's request as gatectl reads it.
type proxyRequest struct {
	ep          *endpoint
	fields      map[string]json.RawMessage
	model       string
	stream      bool
	clientUsage bool // the client asked for stream_options.include_usage itself
	maxTokens   int
	size        int
	session     string
	turn        string
	priority    gate.Priority
}

// turnSeq numbers requests that name no turn: each is a turn of its own.
var turnSeq atomic.Uint64

func parseProxyRequest(ep *endpoint, body []byte, h http.Header) (*proxyRequest, string, error) {
	pr := &proxyRequest{ep: ep, size: len(body)}
	if err := json.Unmarshal(body, &pr.fields); err != nil || pr.fields == nil {
		return nil, "", errors.New("the body must be a JSON object")
	}
	if raw, ok := pr.fields["model"]; ok {
		if err := json.Unmarshal(raw, &pr.model); err != nil {
			return nil, "model", errors.New("model must be a string")
		}
	}
	if raw, ok := pr.fields["stream"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &pr.stream); err != nil {
			return nil, "stream", errors.New("stream must be a boolean")
		}
	}
	if raw, ok := pr.fields["stream_options"]; ok {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		_ = json.Unmarshal(raw, &so)
		pr.clientUsage = so.IncludeUsage
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		raw, ok := pr.fields[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n float64
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > math.MaxInt32 {
			return nil, f, fmt.Errorf("%s must be a non-negative number", f)
		}
		pr.maxTokens = max(pr.maxTokens, int(n))
	}
	if ep.noOutput {
		pr.maxTokens = 1 // embeddings write nothing: reserve (almost) no output
	}
	pr.session = strings.TrimSpace(h.Get("X-Gate-Session"))
	pr.turn = strings.TrimSpace(h.Get("X-Gate-Turn"))
	for _, hv := range []struct{ name, v string }{{"X-Gate-Session", pr.session}, {"X-Gate-Turn", pr.turn}} {
		if len(hv.v) > 256 { // names key budgets, sessions and the state file: bounded, as in the API
			return nil, hv.name, fmt.Errorf("%s is too long (%d bytes; at most 256)", hv.name, len(hv.v))
		}
	}
	if pr.turn == "" {
		pr.turn = "req-" + strconv.FormatUint(turnSeq.Add(1), 36)
	}
	switch p := strings.ToLower(strings.TrimSpace(h.Get("X-Gate-Priority"))); p {
	case "", "interactive":
		pr.priority = gate.PriorityInteractive
	case "batch":
		pr.priority = gate.PriorityBatch
	default:
		return nil, "X-Gate-Priority", fmt.Errorf("X-Gate-Priority %q is invalid; choices are [interactive batch]", p)
	}
	return pr, "", nil
}

func (s *Server) proxy(w http.ResponseWriter, r *http.Request, ep *endpoint) {
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("the request body is over %d bytes", maxRequestBody))
			return
		}
		writeError(w, http.StatusBadRequest, "", "reading the request body: "+err.Error())
		return
	}
	pr, field, err := parseProxyRequest(ep, body, r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	snap := s.snap.Current()
	res, err := s.resolveModel(r.Context(), snap, ep.kind, pr.model, pr.session)
	if err != nil {
		writeError(w, http.StatusBadRequest, "model", err.Error())
		return
	}
	x := &exchange{s: s, w: w, r: r, pr: pr, snap: snap, cfg: snap.Config, res: res, start: start}
	x.run()
	total := time.Since(start)
	s.metrics.Overhead(max(total-x.upstream-x.held, 0))
	if s.logger.IsTrace() {
		s.logger.Named("proxy").Trace("request complete", "path", ep.path, "model", pr.model, "route", res.route.String(),
			"session", pr.session, "waited", x.waited, "duration", total)
	}
}

// exchange is one proxied request through all its attempts.
type exchange struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	pr   *proxyRequest
	snap *snapshot.Snapshot
	cfg  *config.Config
	res  resolved

	start    time.Time
	upstream time.Duration // real time spent waiting on upstream
	held     time.Duration // real time spent waiting on purpose: admission, retry delays, long-term waits
	waited   time.Duration // the gate's waits on its clock, for X-Gate-Waited-Ms
	admitted time.Time     // when the current attempt was admitted, on the gate's clock
	reserved int64         // what the gate reserved for the current attempt
}

// upstreamFailure is one failed attempt: what the classifiers see, and what the
// client gets back if gatectl gives up.
type upstreamFailure struct {
	f      engine.Failure
	header http.Header // the upstream's response headers; nil for a transport error
	body   []byte      // the body to pass on; nil for a transport error
	route  engine.Route
}

func (x *exchange) run() {
	s, ctx := x.s, x.r.Context()
	route := x.res.route
	if usableRoute(x.cfg, x.pr.ep.kind, x.res.keyProvider, route) != nil {
		route = x.res.asked // the session's route is one the client's key may not reach
	}
	pol := s.planner.Policy()
	budget := pol.Rounds + pol.Mislabeled.Rounds + 8 // a backstop: the planner's budgets decide first
	var last *upstreamFailure
	var lastVerdict engine.Verdict
	for attempts := 0; ; attempts++ {
		if err := usableRoute(x.cfg, x.pr.ep.kind, x.res.keyProvider, route); err != nil {
			if last != nil {
				x.giveUp(last, lastVerdict, err.Error())
			} else {
				writeError(x.w, http.StatusBadRequest, "model", err.Error())
			}
			return
		}
		fail, done := x.attempt(ctx, route)
		if done {
			return
		}
		last = fail
		v, a := x.decide(ctx, fail, route)
		lastVerdict = v
		if ctx.Err() != nil {
			return
		}
		if a.Kind != retry.ActionWaitLongTerm && attempts+1 >= budget {
			x.giveUp(fail, v, "gatectl's attempt backstop is spent")
			return
		}
		switch a.Kind {
		case retry.ActionRetry:
			// A cooldown longer than gate.maxWait would make the next admission fail
			// open at once and send the retry into the cooldown: hand it back instead.
			if a.ViaGate {
				cd := time.Duration(s.ledger.BucketStatus(s.clock.Now(), route.Provider, route.Model).CooldownMs) * time.Millisecond
				if maxWait := s.ledger.Config().MaxWait; cd > maxWait {
					x.giveUp(fail, v, fmt.Sprintf("the model cools down for %s, longer than gate.maxWait %s", cd, maxWait))
					return
				}
			}
			if a.Delay > 0 && !x.sleep(ctx, a.Delay) {
				return
			}
		case retry.ActionFailover:
			if a.Route == nil {
				x.giveUp(fail, v, a.Reason)
				return
			}
			to := *a.Route
			if err := usableRoute(x.cfg, x.pr.ep.kind, x.res.keyProvider, to); err != nil {
				x.giveUp(fail, v, err.Error())
				return
			}
			route = to
		case retry.ActionWaitLongTerm:
			dec, _ := a.Quota.(pool.Decision)
			t0 := time.Now()
			c0 := s.clock.Now()
			err := s.quota.Wait(ctx, dec)
			x.held += time.Since(t0)
			x.waited += s.clock.Now().Sub(c0)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				x.giveUp(fail, v, err.Error())
				return
			}
		default:
			x.giveUp(fail, v, a.Reason)
			return
		}
	}
}

// sleep waits d on the server's clock; false when the client went away first.
func (x *exchange) sleep(ctx context.Context, d time.Duration) bool {
	t0, c0 := time.Now(), x.s.clock.Now()
	timer := x.s.clock.NewTimer(d)
	defer func() {
		x.held += time.Since(t0)
		x.waited += x.s.clock.Now().Sub(c0)
	}()
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		timer.Stop()
		return false
	}
}

// attempt admits and sends one try on route. done is true when the exchange is
// over (a success, a stream that started, a client that went away, or an error
// of gatectl's own already answered); otherwise fail is the failure to plan for.
func (x *exchange) attempt(ctx context.Context, route engine.Route) (fail *upstreamFailure, done bool) {
	s, pr := x.s, x.pr
	pc := x.cfg.Providers[route.Provider]
	body, err := upstreamBody(pr, route)
	if err != nil {
		writeError(x.w, http.StatusInternalServerError, "", "rewriting the request: "+err.Error())
		return nil, true
	}
	t0 := time.Now()
	t, err := s.ledger.Admit(ctx, gate.Request{Provider: route.Provider, Model: route.Model, Session: pr.session,
		Priority: pr.priority, InputBytes: pr.size, MaxTokens: pr.maxTokens})
	x.held += time.Since(t0)
	if err != nil {
		return nil, true // the client went away while waiting: nothing is held
	}
	x.waited += t.Waited
	x.admitted, x.reserved = s.clock.Now(), t.Reserved
	s.metrics.Admitted(route.Provider, route.Model, t)
	req, err := newUpstreamRequest(ctx, x.r, pr.ep, route.Provider, pc, x.res.keyProvider, body, pr.stream)
	if err != nil {
		_ = s.ledger.Release(s.clock.Now(), t)
		s.logger.Named("proxy").Error("cannot send upstream", "route", route.String(), "error", err)
		x.w.Header().Set("X-Should-Retry", "false") // gatectl's own configuration: retrying cannot help
		writeError(x.w, http.StatusBadGateway, "", err.Error())
		return nil, true
	}
	u0 := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		x.upstream += time.Since(u0)
		_ = s.ledger.Release(s.clock.Now(), t)
		if ctx.Err() != nil {
			return nil, true
		}
		s.metrics.Upstream(route.Provider, 0)
		return &upstreamFailure{route: route, f: engine.Failure{Body: transportText(err), Provider: route.Provider,
			Model: route.Model, ErrorKind: transportKind(err)}}, false
	}
	defer resp.Body.Close()
	s.metrics.Upstream(route.Provider, resp.StatusCode)
	if lim := rateLimitHeaders(resp.Header); lim.any() {
		s.ledger.Calibrate(s.clock.Now(), route.Provider, route.Model, lim.limitTokens, lim.remainingTokens, lim.limitRequests, lim.remainingRequests)
	}
	if resp.StatusCode >= 400 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		x.upstream += time.Since(u0)
		_ = s.ledger.Release(s.clock.Now(), t)
		if rerr != nil && ctx.Err() != nil {
			return nil, true
		}
		return x.httpFailure(route, resp, b), false
	}
	if isEventStream(resp.Header) {
		fail, done = x.stream(ctx, route, resp, t, u0)
		return fail, done
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	x.upstream += time.Since(u0)
	if err == nil && len(b) > maxResponseBody {
		err = fmt.Errorf("the response body is over %d bytes", maxResponseBody)
	}
	if err != nil {
		_ = s.ledger.Release(s.clock.Now(), t)
		if ctx.Err() != nil {
			return nil, true
		}
		return &upstreamFailure{route: route, f: engine.Failure{Status: resp.StatusCode, Body: transportText(err),
			Provider: route.Provider, Model: route.Model, ErrorKind: orReset(transportKind(err))}}, false
	}
	u, hasUsage, isErr := inspectBody(pr.ep.kind, b)
	if isErr {
		_ = s.ledger.Release(s.clock.Now(), t)
		return x.httpFailure(route, resp, b), false
	}
	if !hasUsage {
		u = gate.Usage{InputTokens: max(t.Reserved-t.ReservedOutput, 0)}
	}
	_ = s.ledger.Settle(s.clock.Now(), t, u)
	s.quota.OnSuccess(pr.session)
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	x.gateHeaders(h, route)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(b)
	return nil, true
}

// stream passes an event stream on. The first event is read before anything is
// sent: if it is an error, the attempt failed and can still be retried.
func (x *exchange) stream(ctx context.Context, route engine.Route, resp *http.Response, t gate.Ticket, u0 time.Time) (*upstreamFailure, bool) {
	s, pr := x.s, x.pr
	rd := newSSEReader(resp.Body)
	su := &streamUsage{kind: pr.ep.kind}
	strip := pr.ep.injectUsage && !pr.clientUsage
	ev, err := rd.next()
	if err != nil {
		x.upstream += time.Since(u0)
		_ = s.ledger.Release(s.clock.Now(), t)
		if ctx.Err() != nil {
			return nil, true
		}
		text := "the stream ended before its first event"
		if !errors.Is(err, io.EOF) {
			text = transportText(err)
		}
		return &upstreamFailure{route: route, f: engine.Failure{Status: resp.StatusCode, Body: text, Provider: route.Provider,
			Model: route.Model, ErrorKind: orReset(transportKind(err))}}, false
	}
	isErr, usageOnly := su.observe(&ev)
	if isErr {
		x.upstream += time.Since(u0)
		_ = s.ledger.Release(s.clock.Now(), t)
		return x.httpFailure(route, resp, append([]byte(nil), ev.data...)), false
	}
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	x.gateHeaders(h, route)
	h.Del("Content-Length")
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	write := func(ev *sseEvent, usageOnly bool) error {
		if usageOnly && strip {
			return nil
		}
		if _, err := x.w.Write(ev.raw); err != nil {
			return err
		}
		return rc.Flush()
	}
	clean := true
	if err := write(&ev, usageOnly); err != nil {
		clean = false
	}
	for clean {
		ev, err = rd.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			clean = false
			if ctx.Err() == nil {
				x.midStreamError(route, err.Error(), nil)
			}
			break
		}
		isErr, usageOnly := su.observe(&ev)
		if werr := write(&ev, usageOnly); werr != nil {
			clean = false
			break
		}
		if isErr {
			clean = false
			x.midStreamError(route, "", ev.data)
			break
		}
	}
	x.upstream += time.Since(u0)
	_ = s.ledger.Settle(s.clock.Now(), t, su.settleUsage(t))
	if clean {
		s.quota.OnSuccess(pr.session)
	}
	return nil, true
}

// midStreamError ends a stream that failed after its first byte: it cannot be
// retried. text is gatectl's description of a transport failure (the protocol's
// error event is written for it); upstreamErr is an error event the upstream
// sent itself (already passed on). Either way the failure is classified, so a
// rate limit still starts the model's cooldown.
func (x *exchange) midStreamError(route engine.Route, text string, upstreamErr []byte) {
	s := x.s
	if upstreamErr == nil {
		msg, _ := json.Marshal(map[string]any{"message": "gatectl: the upstream stream failed after it started: " + text, "type": "upstream_error"})
		var ev string
		if x.pr.ep.kind == kindAnthropic {
			ev = `event: error` + "\n" + `data: {"type":"error","error":` + string(msg) + "}\n\n"
		} else {
			ev = `data: {"error":` + string(msg) + "}\n\n"
		}
		_, _ = io.WriteString(x.w, ev)
		_ = http.NewResponseController(x.w).Flush()
	}
	f := engine.Failure{Status: http.StatusOK, Body: string(upstreamErr), Provider: route.Provider, Model: route.Model}
	if upstreamErr == nil {
		f.Body, f.ErrorKind = text, "reset"
	}
	v, _, _ := x.snap.Chain.Classify(context.WithoutCancel(x.r.Context()), &f)
	s.metrics.Failure(v.Class)
	if v.Class == engine.ClassRateLimit {
		var cooldown time.Duration // 0: the gate's fallback
		if hint, ok := v.RetryAfter(); ok {
			pol := s.planner.Policy()
			cooldown = pol.ClampHint(hint)
		}
		s.ledger.RateLimitedBy(s.clock.Now(), route.Provider, route.Model, engine.RateLimit{
			RetryAfter: cooldown, Axis: engine.RateLimitAxis(&f), Admitted: x.admitted, Tokens: x.reserved})
	}
	s.logger.Named("proxy").Warn("stream failed after it started", "route", route.String(), "class", v.Class, "by", v.By)
	s.bus.Publish(Event{Type: "giveup", At: s.clock.Now(), Data: map[string]any{
		"provider": route.Provider, "model": route.Model, "session": x.pr.session, "turn": x.pr.turn,
		"class": v.Class, "by": v.By, "reason": "the stream failed after its first byte: it cannot be retried", "midStream": true}})
}

// httpFailure is a failed HTTP answer (status ≥ 400, or a 200 carrying an error).
func (x *exchange) httpFailure(route engine.Route, resp *http.Response, body []byte) *upstreamFailure {
	fb := body
	if len(fb) > failureBodyMax {
		fb = fb[:failureBodyMax]
	}
	return &upstreamFailure{route: route, header: resp.Header, body: body, f: engine.Failure{Status: resp.StatusCode,
		Headers: failureHeaders(resp.Header), Body: string(fb), Provider: route.Provider, Model: route.Model}}
}

// decide classifies a failure and plans what to do about it.
func (x *exchange) decide(ctx context.Context, fail *upstreamFailure, route engine.Route) (engine.Verdict, retry.Action) {
	s := x.s
	now := s.clock.Now()
	if since, ok := s.planner.SinceCapacity(now, route.Provider); ok {
		ms := since.Milliseconds()
		fail.f.SinceCapacityMs = &ms
	}
	v, _, _ := x.snap.Chain.Classify(ctx, &fail.f)
	s.metrics.Failure(v.Class)
	a := s.planner.Plan(ctx, now, retry.Request{Verdict: v, Provider: route.Provider, Model: route.Model,
		Session: x.pr.session, Turn: x.pr.turn, Failure: &fail.f, Admitted: x.admitted, Reserved: x.reserved})
	s.metrics.Action(string(a.Kind))
	data := map[string]any{
		"provider": route.Provider, "model": route.Model, "session": x.pr.session, "turn": x.pr.turn,
		"status": fail.f.Status, "class": v.Class, "by": v.By, "action": a.Kind, "delayMs": a.Delay.Milliseconds(),
		"budget": a.Budget, "round": a.Round, "rounds": a.Rounds, "reason": a.Reason,
	}
	if a.Route != nil {
		data["to"] = a.Route.String()
	}
	if a.Kind != retry.ActionGiveUp {
		s.bus.Publish(Event{Type: "retry", At: now, Data: data})
		s.logger.Named("proxy").Debug("upstream failed; retrying", "route", route.String(), "status", fail.f.Status,
			"class", v.Class, "action", a.Kind, "delay", a.Delay, "round", a.Round)
	}
	return v, a
}

// giveUp answers the client with the last failure: the upstream's status and
// body, Retry-After no shorter than the real wait (the larger of the provider's
// hint and the model's cooldown left in the ledger), and x-should-retry.
func (x *exchange) giveUp(fail *upstreamFailure, v engine.Verdict, reason string) {
	s := x.s
	now := s.clock.Now()
	route := fail.route
	wait, _ := v.RetryAfter()
	if cd := time.Duration(s.ledger.BucketStatus(now, route.Provider, route.Model).CooldownMs) * time.Millisecond; cd > wait {
		wait = cd
	}
	retry := shouldRetry(v.Class)
	if retry && wait <= 0 {
		wait = time.Second
	}
	status := fail.f.Status
	h := x.w.Header()
	if fail.header != nil {
		copyResponseHeaders(h, fail.header)
	}
	for _, k := range []string{"Retry-After", "Retry-After-Ms", "X-Should-Retry", "Content-Length"} {
		h.Del(k)
	}
	if wait > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	h.Set("X-Should-Retry", strconv.FormatBool(retry))
	h.Set("X-Gate-Class", string(v.Class))
	x.gateHeaders(h, route)
	data := map[string]any{"provider": route.Provider, "model": route.Model, "session": x.pr.session, "turn": x.pr.turn,
		"status": status, "class": v.Class, "by": v.By, "reason": reason, "retryAfterMs": wait.Milliseconds()}
	s.bus.Publish(Event{Type: "giveup", At: now, Data: data})
	log := s.logger.Named("proxy")
	if status >= 500 || status < 400 {
		log.Warn("giving up", "route", route.String(), "status", status, "class", v.Class, "reason", reason)
	} else {
		log.Debug("giving up", "route", route.String(), "status", status, "class", v.Class, "reason", reason)
	}
	switch {
	case fail.body != nil && status >= 400:
		x.w.WriteHeader(status)
		_, _ = x.w.Write(fail.body)
	case fail.body != nil: // a 200 that carried an error: pass it on as a 502
		h.Set("Content-Type", "application/json")
		x.w.WriteHeader(http.StatusBadGateway)
		_, _ = x.w.Write(fail.body)
	default:
		code := http.StatusBadGateway
		if v.Class == engine.ClassTimeout {
			code = http.StatusGatewayTimeout
		}
		writeError(x.w, code, "", fmt.Sprintf("gatectl: upstream %s failed: %s (%s)", route, fail.f.Body, v.Class))
	}
}

// shouldRetry says whether the client may usefully retry a failure of class c
// later (x-should-retry): capacity and transient failures yes; a spent quota, a
// bad key, a bad request, an unknown failure no.
func shouldRetry(c engine.Class) bool {
	switch c {
	case engine.ClassRateLimit, engine.ClassOverloaded, engine.ClassServer, engine.ClassTimeout, engine.ClassTransport, engine.ClassMislabeled:
		return true
	}
	return false
}

// gateHeaders adds X-Gate-Waited-Ms (the time gatectl held the request on
// purpose: admission, retry delays, long-term waits) and X-Gate-Route.
func (x *exchange) gateHeaders(h http.Header, route engine.Route) {
	h.Set("X-Gate-Waited-Ms", strconv.FormatInt(x.waited.Milliseconds(), 10))
	h.Set("X-Gate-Route", route.String())
}

// dropResponseHeaders are not passed back: hop-by-hop headers and what the
// transport already undid or net/http sets.
var dropResponseHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Content-Encoding": true, "Set-Cookie": true,
}

func copyResponseHeaders(dst, src http.Header) {
	for k, vs := range src {
		if !dropResponseHeaders[k] {
			dst[k] = vs
		}
	}
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}

// transportText describes a transport error without the request URL.
func transportText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func orReset(kind string) string {
	if kind == "" {
		return "reset"
	}
	return kind
}
