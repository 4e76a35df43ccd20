package server

// Passing an event stream on, and ending one that fails after its first byte.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// maxLeadComments bounds the comment blocks kept from before a stream's first
// event; past it they are dropped (they dispatch nothing).
const maxLeadComments = 4 << 10

// stream passes an event stream on. The first event is read before anything is
// sent: if it is an error, the attempt failed and can still be retried.
// Comment blocks before it (keep-alives such as OpenRouter's ": OPENROUTER
// PROCESSING") dispatch no event, so they do not decide that: they wait for it
// and go out before it — or, once the request is proxy.holdNotice old (a
// reasoning model's long first token), the answer's headers go out and they
// follow as they come, so the client's idle timeouts do not fire; the stream
// is then held (its client has had only comments, as a retry still allows).
func (x *exchange) stream(ctx context.Context, route engine.Route, resp *http.Response, t gate.Ticket, u0 time.Time) (*upstreamFailure, bool) {
	s, pr := x.s, x.pr
	rd := newSSEReader(resp.Body)
	su := &streamUsage{kind: pr.ep.kind}
	strip := pr.ep.injectUsage && !pr.clientUsage
	// startResponse sends the upstream's status and headers, with gatectl's.
	startResponse := func() {
		h := x.w.Header()
		copyResponseHeaders(h, resp.Header)
		x.gateHeaders(h, route)
		h.Del("Content-Length")
		x.w.WriteHeader(resp.StatusCode)
	}
	ev, err := rd.next()
	var lead []byte
	for err == nil && ev.name == nil && ev.data == nil {
		if !x.sseStarted && s.clock.Now().Sub(x.clockStart) >= x.cfg.Proxy.HoldNotice {
			// The answer's own headers go out, and from here the stream is
			// held: a first-event error is still retried, and a give-up is
			// an error event in it (sseStarted).
			startResponse()
			x.sseStarted = true
			if _, werr := x.w.Write(lead); werr == nil {
				_ = http.NewResponseController(x.w).Flush()
			}
			lead = nil
		}
		if x.sseStarted {
			if _, werr := x.w.Write(ev.raw); werr == nil {
				_ = http.NewResponseController(x.w).Flush()
			}
		} else if len(lead)+len(ev.raw) <= maxLeadComments {
			lead = append(lead, ev.raw...)
		}
		ev, err = rd.next()
	}
	if err != nil {
		x.upstream += time.Since(u0)
		x.unanswered(t) // the provider answered: it counted the call
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
		return x.httpFailure(route, resp, append([]byte(nil), failureBodyOf(&ev)...)), false
	}
	if !x.sseStarted { // a held stream's headers are out already
		startResponse()
	}
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
	_, err = x.w.Write(lead) // (nothing when there were no comments)
	if err == nil {
		err = write(&ev, usageOnly)
	}
	clean := err == nil
	// A failure after the first byte is classified once the call is settled:
	// a rate limit reported while the call still held its reservation
	// (max_tokens) would be read as spent, a level above the refusal's.
	var failed func()
	for clean {
		ev, err = rd.next()
		if err != nil {
			if errors.Is(err, io.EOF) && su.ended {
				break
			}
			if errors.Is(err, io.EOF) {
				// The body ended cleanly, but the stream's last word never
				// came (a gateway that closed it early): the answer is cut,
				// and the client is told so, as for any failure after the
				// first byte — not a 200 that reads as complete.
				err = errStreamCut
			}
			clean = false
			if ctx.Err() == nil {
				readErr := err
				failed = func() { x.midStreamError(route, readErr, nil) }
			} else if shutDown(ctx) { // cut at the end of the grace: say so, not a silent end
				failed = func() {
					x.failInStream(http.StatusServiceUnavailable, "gatectl shut down before the stream ended; the answer is incomplete", nil)
				}
			}
			break
		}
		isErr, usageOnly := su.observe(&ev)
		if isErr { // an error event may quote gatectl's key back
			ev.raw = x.redactor().bytes(ev.raw)
			ev.data = x.redactor().bytes(ev.data)
		}
		if werr := write(&ev, usageOnly); werr != nil {
			clean = false
			break
		}
		if isErr {
			clean = false
			data := append([]byte(nil), failureBodyOf(&ev)...)
			failed = func() { x.midStreamError(route, nil, data) }
			break
		}
	}
	x.upstream += time.Since(u0)
	x.usage = su.settleUsage(t)
	_ = s.ledger.Settle(s.clock.Now(), t, x.usage)
	if failed != nil {
		failed()
	}
	if clean {
		s.quota.OnSuccess(pr.session)
	}
	return nil, true
}

// errStreamCut is a stream whose body ended without its last event ([DONE],
// a finish_reason, message_stop, a Responses terminal event).
var errStreamCut = fmt.Errorf("the stream ended before its last event: %w", io.ErrUnexpectedEOF)

// midStreamError ends a stream that failed after its first byte: it cannot be
// retried. readErr is the transport failure (gatectl writes the protocol's error
// event for it, as for any failure after the headers: 504 for a deadline, else
// 502, so the Anthropic face gets one of Anthropic's error types); upstreamErr
// is an error event the upstream sent itself (already passed on). Either way
// the failure is classified, so a rate limit still starts the model's cooldown.
func (x *exchange) midStreamError(route engine.Route, readErr error, upstreamErr []byte) {
	s := x.s
	body := upstreamErr[:min(len(upstreamErr), failureBodyMax)]
	f := engine.Failure{Status: errorStatus(http.StatusOK, body), Body: string(body), Provider: route.Provider, Model: route.Model}
	if upstreamErr == nil {
		text := transportText(readErr)
		code := http.StatusBadGateway
		if de := (*deadlineError)(nil); errors.As(readErr, &de) {
			code = http.StatusGatewayTimeout
		}
		x.failInStream(code, "gatectl: the upstream stream failed after it started: "+text, nil)
		f.Body, f.ErrorKind = text, "reset"
	}
	v, _, _ := x.snap.Chain.Classify(context.WithoutCancel(x.r.Context()), &f)
	s.metrics.Failure(v.Class)
	// No admission time: the stream ran for a while, so the time since
	// admission says nothing about how late the provider counts.
	x.gateRateLimit(route, &f, v, time.Time{}, false)
	s.proxyLog.Warn("stream failed after it started", "route", route.String(), "class", v.Class, "by", v.By)
	s.bus.Publish(Event{Type: "giveup", At: s.clock.Now(), Data: map[string]any{
		"provider": route.Provider, "model": route.Model, "session": x.pr.session, "turn": x.pr.turn,
		"class": v.Class, "by": v.By, "reason": "the stream failed after its first byte: it cannot be retried", "midStream": true}})
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}
