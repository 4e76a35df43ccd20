package server

// Calls that generate nothing (Anthropic's /v1/messages/count_tokens): routed
// and keyed like the face's other calls, but sent once, outside the gate.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// passOnce sends the request once on the resolved route and passes the answer
// back. No admission and no settle: counting tokens spends no generation
// budget, and a call the gate held behind a busy model would slow the client's
// planning for nothing. Its own rate limits (the provider counts them apart)
// come back to the client as they are, in the face's shape; gatectl does not
// retry them.
func (x *exchange) passOnce() {
	s, ctx := x.s, x.r.Context()
	route := x.res.route
	if usableRoute(x.cfg, x.pr.ep.kind, x.keys(), route) != nil {
		route = x.res.asked
	}
	if err := usableRoute(x.cfg, x.pr.ep.kind, x.keys(), route); err != nil {
		if errors.Is(err, errNeedsToken) {
			x.w.Header().Set("WWW-Authenticate", `Bearer realm="gatectl"`)
			x.fail(http.StatusUnauthorized, "", err.Error())
			return
		}
		x.fail(http.StatusBadRequest, "model", err.Error())
		return
	}
	x.route, x.attempts = route, 1
	body, err := upstreamBody(x.pr, route, false) // (not a stream)
	if err != nil {
		x.fail(http.StatusInternalServerError, "", "rewriting the request: "+err.Error())
		return
	}
	actx, dl := withAttemptDeadline(ctx)
	defer dl.stop()
	dl.arm("upstream.responseTimeout", x.cfg.Upstream.ResponseTimeout, "no whole answer from the upstream")
	req, err := newUpstreamRequest(actx, x.r, x.pr.ep, route.Provider, x.cfg.Providers[route.Provider], x.res.keyProvider, body, false)
	if err != nil {
		s.proxyLog.Error("cannot send upstream", "route", route.String(), "error", err)
		x.w.Header().Set("X-Should-Retry", "false")
		x.fail(http.StatusBadGateway, "", err.Error())
		return
	}
	u0 := time.Now()
	resp, err := s.client.Do(req)
	err = dl.explain(err)
	if err != nil {
		x.upstream += time.Since(u0)
		if ctx.Err() == nil {
			x.fail(http.StatusBadGateway, "", "gatectl: upstream "+route.String()+" failed: "+transportText(err))
		}
		return
	}
	defer resp.Body.Close()
	resp.Body = &idleBody{ReadCloser: resp.Body, dl: dl}
	// Within the body budget like every other answer: concurrent calls must not
	// hold their megabyte each beyond server.maxBufferedBytes.
	res, err := s.bodies.readBudgeted(actx, bufferWait, resp.Body, resp.ContentLength, maxErrorBody, false, false, "the answer")
	defer s.bodies.release(res.charged)
	b := res.b
	x.upstream += time.Since(u0)
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(err, errBudgetFull):
		x.budgetFull()
		return
	case err != nil:
		x.fail(http.StatusBadGateway, "", "gatectl: reading the answer of "+route.String()+": "+transportText(err))
		return
	}
	rd := x.redactor() // an echo of gatectl's key goes back as [redacted]
	rd.header(resp.Header)
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	x.gateHeaders(h, route)
	code := resp.StatusCode
	if code >= 400 {
		b = rd.bytes(b)
	}
	var counted struct {
		InputTokens int64 `json:"input_tokens"`
	}
	if code < 400 && json.Unmarshal(b, &counted) == nil {
		x.usage.InputTokens = counted.InputTokens // logged only: nothing was generated
	}
	if code >= 400 {
		var rewritten bool
		code, b, rewritten = faceBody(x.pr.ep.kind, code, b, route.String())
		if rewritten {
			h.Set("Content-Type", "application/json")
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	x.w.WriteHeader(code)
	_, _ = x.w.Write(b)
}
