package server

// The exchange: one proxied request through its attempts (run, attempt, decide) and the response helpers.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/snapshot"
)

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
	// sent is when the current attempt's ledger entry counts from, once it was
	// written to the upstream (unix nanos on the gate's clock; 0: not written
	// yet; 1: written, the entry did not move), set from the transport's
	// goroutine.
	sent *atomic.Int64

	// For the access log (access.go): the last route tried, the attempts sent
	// upstream, and what the successful one was settled with.
	route    engine.Route
	attempts int
	usage    gate.Usage

	// The visible hold (proxy_hold.go): clockStart is when the exchange began on
	// the server's clock; sseStarted says a held stream's headers went out (the
	// answer continues in the stream); lastNotice is the last comment's time.
	clockStart time.Time
	sseStarted bool
	lastNotice time.Time

	// failed is the last upstream failure and its verdict, once an attempt
	// failed: a hold cut at its limit after that gives up with it (tooLong).
	failed        *upstreamFailure
	failedVerdict engine.Verdict
	// pauseLeft is the cooldown a call was not sent into, on a route other
	// than the failed one's when it failed over: the give-up tells it.
	pauseLeft time.Duration
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
	if usableRoute(x.cfg, x.pr.ep.kind, x.keys(), route) != nil {
		route = x.res.asked // the session's route is one the client's key may not reach
	}
	pol := s.planner.Policy()
	budget := pol.Rounds + max(pol.HintRounds, 0) + pol.Mislabeled.Rounds + 8 // a backstop: the planner's budgets decide first
	for attempts := 0; ; attempts++ {
		if err := usableRoute(x.cfg, x.pr.ep.kind, x.keys(), route); err != nil {
			switch {
			case x.failed != nil:
				x.giveUp(x.failed, x.failedVerdict, err.Error(), true)
			case errors.Is(err, errNeedsToken):
				x.w.Header().Set("WWW-Authenticate", `Bearer realm="gatectl"`)
				x.fail(http.StatusUnauthorized, "", err.Error())
			default:
				x.fail(http.StatusBadRequest, "model", err.Error())
			}
			return
		}
		fail, done := x.attempt(ctx, route)
		if done {
			return
		}
		v, a := x.decide(ctx, fail, route)
		x.failed, x.failedVerdict = fail, v
		if ctx.Err() != nil {
			if dec, ok := a.Quota.(pool.Decision); ok {
				s.quota.Cancel(dec) // the client left before the wait began
			}
			return
		}
		if a.Kind != retry.ActionWaitLongTerm && attempts+1 >= budget {
			x.giveUp(fail, v, "gatectl's attempt backstop is spent", true)
			return
		}
		switch a.Kind {
		case retry.ActionRetry:
			// (A retry into a cooldown longer than gate.maxWait is handed back
			// by its attempt: refuseIntoCooldown.)
			if a.Delay > 0 && !x.sleep(ctx, a.Delay, fmt.Sprintf("retry %d/%d after %s on %s", a.Round, a.Rounds, v.Class, route)) {
				return
			}
		case retry.ActionFailover:
			if a.Route == nil {
				x.giveUp(fail, v, a.Reason, true)
				return
			}
			to := *a.Route
			if err := usableRoute(x.cfg, x.pr.ep.kind, x.keys(), to); err != nil {
				x.giveUp(fail, v, err.Error(), true)
				return
			}
			route = to
		case retry.ActionWaitLongTerm:
			dec, _ := a.Quota.(pool.Decision)
			t0 := time.Now()
			c0 := s.clock.Now()
			until := c0.Add(dec.Wait)
			capped, err := x.hold(ctx, func() holdInfo {
				return holdInfo{why: "quota spent on " + route.Provider + ": long-term wait", until: until}
			}, func(ctx context.Context, started func()) error {
				started()
				return s.quota.Wait(ctx, dec)
			})
			x.held += time.Since(t0)
			x.waited += s.clock.Now().Sub(c0)
			switch {
			case capped:
				return
			case ctx.Err() != nil:
				return
			case err != nil:
				x.giveUp(fail, v, err.Error(), true)
				return
			}
		default:
			x.giveUp(fail, v, a.Reason, a.Spent())
			return
		}
	}
}

// sleep waits d on the server's clock, visibly (why says what for); false when
// the client went away first or the hold limit answered it.
func (x *exchange) sleep(ctx context.Context, d time.Duration, why string) bool {
	t0, c0 := time.Now(), x.s.clock.Now()
	defer func() {
		x.held += time.Since(t0)
		x.waited += x.s.clock.Now().Sub(c0)
	}()
	until := c0.Add(d)
	capped, err := x.hold(ctx, func() holdInfo { return holdInfo{why: why, until: until} }, func(ctx context.Context, started func()) error {
		started()
		timer := x.s.clock.NewTimer(d)
		select {
		case <-timer.C():
			return nil
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	})
	return !capped && err == nil
}

// admit asks the gate for route, holding the client as the wait needs; done
// is true when the exchange is over (the client went away, the hold limit or
// a shared store that is down answered it).
func (x *exchange) admit(ctx context.Context, route engine.Route) (t gate.Ticket, done bool) {
	s, pr := x.s, x.pr
	t0, c0 := time.Now(), s.clock.Now()
	var queued atomic.Pointer[gate.Waiter]
	maxWait := s.ledger.Config().MaxWait
	capped, err := x.hold(ctx, func() holdInfo { return admissionHold(queued.Load(), route.String(), maxWait) }, func(ctx context.Context, started func()) error {
		var err error
		t, err = s.ledger.AdmitObserved(ctx, gate.Request{Provider: route.Provider, Model: route.Model, Session: pr.session,
			Priority: pr.priority, InputBytes: pr.size, MaxTokens: pr.maxTokens, Sends: true, Pause: gate.PauseSitOut}, func(w *gate.Waiter) {
			queued.Store(w)
			started()
		})
		return err
	})
	x.held += time.Since(t0)
	if errors.Is(err, gate.ErrStoreUnavailable) {
		x.w.Header().Set("Retry-After", s.spreadRetryAfter())
		x.fail(http.StatusServiceUnavailable, "", "the shared gate store (Redis) is unavailable and store.redis.onError is failClosed")
		return t, true
	}
	var paused *gate.PauseError
	if errors.As(err, &paused) {
		// Refused while queued: a 429 started a pause the call would be
		// refused in at its maxWait deadline anyway (proxy_cooling.go).
		x.refuseIntoCooldown(route, gate.Ticket{Waited: paused.Waited}, max(paused.Until.Sub(s.clock.Now()), 0))
		return t, true
	}
	if capped || err != nil {
		// The client went away while waiting, or was answered at the hold limit:
		// nothing is held. The access log's gate_wait_ms counts the wait all the same.
		x.waited += s.clock.Now().Sub(c0)
		return t, true
	}
	return t, false
}

// attempt admits and sends one try on route. done is true when the exchange is
// over (a success, a stream that started, a client that went away, or an error
// of gatectl's own already answered); otherwise fail is the failure to plan for.
func (x *exchange) attempt(ctx context.Context, route engine.Route) (fail *upstreamFailure, done bool) {
	s, pr := x.s, x.pr
	pc := x.cfg.Providers[route.Provider]
	body, err := upstreamBody(pr, route, !pc.NoStreamUsage)
	if err != nil {
		x.fail(http.StatusInternalServerError, "", "rewriting the request: "+err.Error())
		return nil, true
	}
	if cd := s.longCooldown(s.clock.Now(), route); cd > 0 {
		x.refuseIntoCooldown(route, gate.Ticket{}, cd)
		return nil, true
	}
	t, done := x.admit(ctx, route)
	if done {
		return nil, true
	}
	if cd := s.intoCooldown(s.clock.Now(), route, t); cd > 0 {
		// Failed open at maxWait into the model's cooldown: nothing is sent.
		// A pause that ends within maxWait is sat out in the gate's queue:
		// the call asks again at once (no round is spent: nothing failed),
		// and the gate lets it through as the pause ends and the window
		// takes it — not at the pause's end with every call that sat it out,
		// all of whose next maxWait would then end together. A longer pause,
		// or a second, is answered (proxy_cooling.go).
		if cd > s.ledger.Config().MaxWait {
			x.refuseIntoCooldown(route, t, cd)
			return nil, true
		}
		_ = s.ledger.Release(s.clock.Now(), t)
		x.waited += t.Waited
		if t, done = x.admit(ctx, route); done {
			return nil, true
		}
		if cd := s.intoCooldown(s.clock.Now(), route, t); cd > 0 {
			x.refuseIntoCooldown(route, t, cd)
			return nil, true
		}
	}
	x.waited += t.Waited
	x.admitted, x.reserved = s.clock.Now(), t.Reserved
	x.route = route
	s.metrics.Admitted(route.Provider, route.Model, t)
	actx, dl := withAttemptDeadline(ctx)
	defer dl.stop()
	// The provider counts the call from when it is written, which a busy
	// machine or a new connection's handshake can make later than its
	// admission: the ledger holds its entry from then.
	sent := new(atomic.Int64)
	x.sent = sent
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err != nil {
			return // not sent whole: the attempt fails and its ticket is released
		}
		x.noteSent(sent, t)
	}})
	up := x.cfg.Upstream
	var idle time.Duration
	if pr.stream {
		dl.arm("upstream.firstByteTimeout", up.FirstByteTimeout, "no first byte from the upstream")
		idle = up.StreamIdleTimeout
	} else {
		dl.arm("upstream.responseTimeout", up.ResponseTimeout, "no whole answer from the upstream")
	}
	req, err := newUpstreamRequest(actx, x.r, pr.ep, route.Provider, pc, x.res.keyProvider, body, pr.stream)
	if err != nil {
		_ = s.ledger.Release(s.clock.Now(), t)
		s.proxyLog.Error("cannot send upstream", "route", route.String(), "error", err)
		x.w.Header().Set("X-Should-Retry", "false") // gatectl's own configuration: retrying cannot help
		x.fail(http.StatusBadGateway, "", err.Error())
		return nil, true
	}
	x.attempts++
	u0 := time.Now()
	resp, err := s.client.Do(req)
	if err == nil && sent.Load() == 0 {
		// An answer came back before the write was reported (a provider that
		// answers early): the provider had the call, so it counts from now.
		x.noteSent(sent, t)
	}
	err = dl.explain(err)
	if err != nil {
		x.upstream += time.Since(u0)
		if ctx.Err() != nil || transportKind(err) == "timeout" {
			// The client gone, or the attempt's deadline passed: the provider
			// had the call (when it was sent) and counts it.
			x.unanswered(t)
		} else {
			// Refused, reset, cut before any answer: most likely never
			// processed, and the retry sends it again.
			_ = s.ledger.Release(s.clock.Now(), t)
		}
		if ctx.Err() != nil {
			return nil, true
		}
		s.metrics.Upstream(route.Provider, 0)
		return &upstreamFailure{route: route, f: engine.Failure{Body: transportText(err), Provider: route.Provider,
			Model: route.Model, ErrorKind: transportKind(err)}}, false
	}
	defer resp.Body.Close()
	resp.Body = &idleBody{ReadCloser: resp.Body, dl: dl, idle: idle}
	s.metrics.Upstream(route.Provider, resp.StatusCode)
	// A 429's stated limits go to the gate with the 429 itself (StatedLimits),
	// adopted before it is read and without letting waiters through before its
	// cooldown (or, a 429 classified as something else, in decide); an
	// error's and a streamed answer's here, as their headers come; a whole
	// answer's right after its settling, as the simulator and the decision
	// API read them: a provider that writes its headers with the whole answer
	// may state its window with the call counted, and the gate's completion
	// view then holds it too (engine/gate/headersview.go).
	readLimits := func() {
		s.readAnswerLimits(s.clock.Now(), route.Provider, route.Model, x.admitted, x.countedFrom(), resp.Header.Get)
	}
	whole := resp.StatusCode < 400 && !isEventStream(resp.Header)
	if resp.StatusCode != http.StatusTooManyRequests && !whole {
		readLimits()
	}
	limitsRead := !whole
	defer func() {
		if !limitsRead { // a path above that did not read them: read all the same
			readLimits()
		}
	}()
	if resp.StatusCode >= 400 {
		res, rerr := s.bodies.readBudgeted(actx, bufferWait, resp.Body, resp.ContentLength, maxErrorBody, false, true, "the error body")
		defer s.bodies.release(res.charged)
		x.upstream += time.Since(u0)
		_ = s.ledger.Release(s.clock.Now(), t)
		if rerr != nil && ctx.Err() != nil {
			x.unreadRateLimit(route, resp)
			return nil, true
		}
		if errors.Is(rerr, errBudgetFull) {
			x.unreadRateLimit(route, resp)
			x.budgetFull()
			return nil, true
		}
		return x.httpFailure(route, resp, res.b), false
	}
	x.redactor().header(resp.Header) // headers echoed on a success too
	if isEventStream(resp.Header) {
		fail, done = x.stream(ctx, route, resp, t, u0)
		return fail, done
	}
	res, err := s.bodies.readBudgeted(actx, bufferWait, resp.Body, resp.ContentLength, maxResponseBody, false, false, "the upstream's answer")
	defer s.bodies.release(res.charged)
	b := res.b
	x.upstream += time.Since(u0)
	if tooLarge := (*errTooLarge)(nil); errors.As(err, &tooLarge) {
		// Another download would be as large: the failure is permanent, whatever a
		// classifier would make of a broken transfer. What was used is settled.
		_ = s.ledger.Settle(s.clock.Now(), t, gate.Usage{InputTokens: max(t.Reserved-t.ReservedOutput, 0), OutputUnseen: true})
		x.giveUp(&upstreamFailure{route: route, f: engine.Failure{Status: resp.StatusCode, Body: tooLarge.Error() +
			": it is not retried", Provider: route.Provider, Model: route.Model}},
			engine.Verdict{Class: engine.ClassUnknown, By: "gatectl/response-too-large"}, tooLarge.Error(), true)
		return nil, true
	}
	if errors.Is(err, errBudgetFull) && ctx.Err() == nil {
		// gatectl's own memory was full (even if the attempt's deadline passed
		// while it waited for room): not the upstream's failure, and not retried.
		// The provider answered: it counted the call. Its limits first, before
		// the close lets waiters through.
		readLimits()
		limitsRead = true
		x.unanswered(t)
		x.budgetFull()
		return nil, true
	}
	if err != nil {
		readLimits()
		limitsRead = true
		x.unanswered(t) // the provider answered: it counted the call
		if ctx.Err() != nil {
			return nil, true
		}
		return &upstreamFailure{route: route, f: engine.Failure{Status: resp.StatusCode, Body: transportText(err),
			Provider: route.Provider, Model: route.Model, ErrorKind: orReset(transportKind(err))}}, false
	}
	u, hasUsage, isErr := inspectBody(pr.ep.kind, b)
	if isErr { // an error's limits, as its headers came
		readLimits()
		limitsRead = true
		_ = s.ledger.Release(s.clock.Now(), t)
		return x.httpFailure(route, resp, b), false
	}
	if !hasUsage {
		u = gate.Usage{InputTokens: max(t.Reserved-t.ReservedOutput, 0), OutputUnseen: true}
	}
	_ = s.ledger.Settle(s.clock.Now(), t, u)
	readLimits()
	limitsRead = true
	x.usage = u
	s.quota.OnSuccess(pr.session)
	if x.sseStarted { // a held stream answered by a whole body: pass it on as one event
		_, _ = io.WriteString(x.w, "data: "+string(compactJSON(b))+"\n\n")
		return nil, true
	}
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	x.gateHeaders(h, route)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(b)
	return nil, true
}

// httpFailure is a failed HTTP answer (status ≥ 400, or a 200 carrying an error).
// gatectl's own secrets are redacted from its body and headers here, before the
// classifiers, the logs or the client see them.
func (x *exchange) httpFailure(route engine.Route, resp *http.Response, body []byte) *upstreamFailure {
	rd := x.redactor()
	rd.header(resp.Header)
	body = rd.bytes(body)
	fb := body
	if len(fb) > failureBodyMax {
		fb = fb[:failureBodyMax]
	}
	return &upstreamFailure{route: route, header: resp.Header, body: body, f: engine.Failure{Status: errorStatus(resp.StatusCode, fb),
		Headers: failureHeaders(resp.Header), Body: string(fb), Provider: route.Provider, Model: route.Model}}
}

// unreadRateLimit tells the gate of a 429 whose body was not read (the body
// budget was full, the client went away), which no retry plan will see: its
// status and headers carry the cooldown and the limits it states. Without it
// the model got no cooldown, and every other session kept sending into the
// limit.
func (x *exchange) unreadRateLimit(route engine.Route, resp *http.Response) {
	if resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	fail := x.httpFailure(route, resp, nil)
	v, _, _ := x.snap.Chain.Classify(context.WithoutCancel(x.r.Context()), &fail.f)
	x.s.metrics.Failure(v.Class)
	x.gateRateLimit(route, &fail.f, v, x.countedFrom(), true)
}

// gateRateLimit records a rate limit the retry planner does not see in the
// gate (the planner records those it plans for): the model's cooldown (the
// provider's hint, clamped, else the gate's fallback), the axis and the limits
// it states. admitted is when the refused call counted from (zero: unknown);
// unread, that only its status and headers were read (engine.RateLimit.Unread).
func (x *exchange) gateRateLimit(route engine.Route, f *engine.Failure, v engine.Verdict, admitted time.Time, unread bool) {
	if v.Class != engine.ClassRateLimit {
		return
	}
	var cooldown time.Duration // 0: the gate's fallback
	if hint, ok := v.RetryAfter(); ok {
		pol := x.s.planner.Policy()
		cooldown = pol.ClampHint(hint)
	}
	statedT, statedR := engine.StatedLimits(f)
	x.s.ledger.RateLimitedBy(x.s.clock.Now(), route.Provider, route.Model, engine.RateLimit{
		RetryAfter: cooldown, Axis: engine.RateLimitAxis(f), Admitted: admitted, Tokens: x.reserved,
		StatedTokens: statedT, StatedRequests: statedR, StatedOutputTokens: engine.StatedOutputLimit(f), OutputInWords: engine.OutputLimitInWords(f), Unread: unread})
}

// budgetFull answers 503 with a Retry-After (spreadRetryAfter): the body budget had no room for the
// upstream's answer within bufferWait. Retrying at once would download it again
// into the same full budget, so the client is asked to come back shortly.
func (x *exchange) budgetFull() {
	x.w.Header().Set("Retry-After", x.s.spreadRetryAfter())
	x.fail(http.StatusServiceUnavailable, "", fmt.Sprintf(
		"gatectl holds as many request and response bodies as it may (server.maxBufferedBytes %d); retry shortly", x.s.bodies.max))
}

// redactor is the redactor of the exchange's snapshot secrets.
func (x *exchange) redactor() *redactor { return x.s.redact.get(x.cfg) }

// noteSent tells the ledger t's call was written to the upstream now, and
// records in sent when its entry counts from (1 when it did not move).
func (x *exchange) noteSent(sent *atomic.Int64, t gate.Ticket) {
	v := int64(1)
	if at := x.s.ledger.Sent(x.s.clock.Now(), t); !at.IsZero() {
		v = at.UnixNano()
	}
	sent.Store(v)
}

// readAnswerLimits gives the gate the rate-limit headers of an answer (not a
// 429's: those go to the gate with the 429) to a call admitted at admitted
// and sent at sent (its admission when no send was reported), read through
// get: the stated limits and remaining tokens (CalibrateAnswer: a provider
// may state them as of the call's arrival), and the token reset. The reset's
// span starts at the admission, which comes before the provider can have seen
// the call; a send is reported once the request is written, possibly after
// the provider read it.
func (s *Server) readAnswerLimits(now time.Time, provider, model string, admitted, sent time.Time, get func(string) string) {
	if o := engine.ReadOutputLimit(get); o > 0 {
		s.ledger.StateOutputLimit(now, provider, model, o)
	}
	lim := engine.ReadRateLimitHeaders(get)
	if !lim.Any() {
		return
	}
	s.ledger.CalibrateAnswer(now, sent, provider, model, lim.LimitTokens, lim.RemainingTokens, lim.LimitRequests, lim.RemainingRequests)
	if r, ok := engine.ReadTokenReset(get); ok {
		s.ledger.ObserveTokensReset(now, provider, model, admitted, r)
	}
}

// unanswered closes the attempt's ticket when no usable answer came though
// the provider had the call (the client went away, the attempt's deadline
// passed, the answer broke after its headers): sent, it stays counted at what
// a call in flight counts, since the provider counts it all the same; never
// sent, it is released (Ledger.Abandon).
func (x *exchange) unanswered(t gate.Ticket) {
	_, _ = x.s.ledger.Abandon(x.s.clock.Now(), t)
}

// countedFrom is when the gate's entry for the current attempt counts from:
// its admission, or when it was written to the upstream if that moved it.
func (x *exchange) countedFrom() time.Time {
	if x.sent != nil {
		if at := x.sent.Load(); at > x.admitted.UnixNano() {
			return time.Unix(0, at)
		}
	}
	return x.admitted
}

// decide classifies a failure and plans what to do about it.
func (x *exchange) decide(ctx context.Context, fail *upstreamFailure, route engine.Route) (engine.Verdict, retry.Action) {
	s := x.s
	now := s.clock.Now()
	if since, ok := s.planner.SinceCapacity(now, route.Provider); ok {
		ms := since.Milliseconds()
		fail.f.SinceCapacityMs = &ms
	}
	// Not the request's context: a client gone by now must not make the
	// provider's 429 UNKNOWN, which would start no cooldown (plugins have
	// deadlines of their own).
	v, _, _ := x.snap.Chain.Classify(context.WithoutCancel(ctx), &fail.f)
	s.metrics.Failure(v.Class)
	if fail.f.Status == http.StatusTooManyRequests && v.Class != engine.ClassRateLimit {
		// Not a rate limit after all (a call larger than the limit, spent
		// quota): no 429 reaches the gate to carry its headers' limits, so
		// they are calibrated as any other answer's.
		if lim := engine.ReadRateLimitHeaders(fail.f.Header); lim.Any() {
			s.ledger.CalibrateAnswer(now, x.countedFrom(), route.Provider, route.Model, lim.LimitTokens, lim.RemainingTokens, lim.LimitRequests, lim.RemainingRequests)
		}
	}
	a := s.planner.Plan(ctx, now, retry.Request{Verdict: v, Provider: route.Provider, Model: route.Model,
		Session: x.pr.session, Turn: x.pr.turn, OneShot: x.pr.oneShot, Failure: &fail.f, Admitted: x.countedFrom(), Reserved: x.reserved,
		Pool: x.res.pool, Usable: func(to engine.Route) bool { return usableRoute(x.cfg, x.pr.ep.kind, x.keys(), to) == nil }})
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
		x.logPlan(route, fail, v, a)
	}
	return v, a
}

// logPlan writes the one info line of a planned retry, quick retry, failover
// or long-term wait, so that a client held through retries is never silent in
// the log: "retrying: … in=28000ms round=1/5". Only names and numbers: no
// body, header or key.
func (x *exchange) logPlan(route engine.Route, fail *upstreamFailure, v engine.Verdict, a retry.Action) {
	s := x.s
	wait := a.Delay
	if a.ViaGate { // the wait is the model's cooldown, which the next admission sits out
		wait = max(wait, s.cooldownLeft(s.clock.Now(), route))
	}
	args := []any{"provider", route.Provider, "model", route.Model, "session", x.pr.session, "class", v.Class,
		"status", fail.f.Status}
	if fail.f.ErrorKind != "" {
		args = append(args, "kind", fail.f.ErrorKind)
	}
	in := strconv.FormatInt(wait.Milliseconds(), 10) + "ms"
	switch a.Kind {
	case retry.ActionRetry:
		msg := "retrying"
		if v.Class == engine.ClassQuota {
			msg = "quick retry before failover"
		}
		s.proxyLog.Info(msg, append(args, "in", in, "round", strconv.Itoa(a.Round)+"/"+strconv.Itoa(a.Rounds),
			"budget", a.Budget, "reason", a.Reason)...)
	case retry.ActionFailover:
		to := ""
		if a.Route != nil {
			to = a.Route.String()
		}
		s.proxyLog.Info("failing over", append(args, "to", to, "reason", a.Reason)...)
	case retry.ActionWaitLongTerm:
		s.proxyLog.Info("waiting long-term", append(args, "in", in, "attempt", a.Round, "reason", a.Reason)...)
	}
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
	hop := connectionHeaders(src)
	for k, vs := range src {
		if !dropResponseHeaders[k] && !hop[k] {
			dst[k] = vs
		}
	}
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

// keys is with whose key the exchange may send a route (clientKeys).
func (x *exchange) keys() clientKeys { return x.res.who.meantFor(x.res.keyProvider) }
