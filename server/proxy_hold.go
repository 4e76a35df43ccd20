package server

// Holding a client visibly: while the gate holds a request (admission, a
// retry's delay, a long-term quota wait), a streamed client gets its response
// headers and SSE comment lines, so its idle timeout never fires and a person
// sees why it waits; a non-streamed client is held at most proxy.maxHold (or
// what X-Gate-Max-Wait asks), then answered 429 with Retry-After and the reason.
// See docs/waits.md.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// holdInfo describes one wait for a notice or a 429: why, when gatectl expects
// it to end, and the latest it can end (zero: not known).
type holdInfo struct {
	why    string
	until  time.Time
	atMost time.Time
}

// latest is the latest the wait can end, as far as known.
func (in holdInfo) latest() time.Time {
	if !in.atMost.IsZero() {
		return in.atMost
	}
	return in.until
}

// holdLimit is how long the exchange may hold a non-streamed request in total:
// proxy.maxHold, or what X-Gate-Max-Wait asks for, which may be longer up to
// the longest single wait gatectl plans (an admission's gate.maxWait, a
// long-term quota wait's quota.longTermDelay): enough to sit out any one wait,
// never an unbounded hold.
func (x *exchange) holdLimit() time.Duration {
	limit := x.cfg.Proxy.MaxHold
	if asked := x.pr.maxWait; asked > 0 {
		bound := max(x.s.ledger.Config().MaxWait, x.cfg.Quota.LongTermDelay, limit)
		limit = min(asked, bound)
	}
	return limit
}

// hold runs wait, one wait of the exchange described by info. wait calls
// started when it really begins to wait (an admission only once it is queued):
// from then on a stream gets its notices, and a non-streamed request is cut
// short at the hold limit (at once when the wait is expected to outlast it).
// Nothing is armed for a wait known to end in time. capped says the limit was
// reached and the client has had its 429.
func (x *exchange) hold(ctx context.Context, info func() holdInfo, wait func(ctx context.Context, started func()) error) (capped bool, err error) {
	// A shutdown ends every hold at once: the request was not sent (or its
	// retry was not), and the client is told to send it again.
	dctx, undrain := x.s.drainable(ctx)
	defer undrain()
	defer func() {
		if err != nil && ctx.Err() == nil && dctx.Err() != nil {
			x.shuttingDown()
			capped, err = true, nil
		}
	}()
	if x.pr.stream {
		var stop func()
		err = wait(dctx, func() { stop = x.startNotices(dctx, info) })
		if stop != nil {
			stop()
		}
		return false, err
	}
	clock := x.s.clock
	c0 := clock.Now()
	deadline := x.clockStart.Add(x.holdLimit())
	hctx, cancel := context.WithCancel(dctx)
	defer cancel()
	var fired atomic.Pointer[holdInfo] // what the wait looked like when the limit cut it
	done := make(chan struct{})
	var watching chan struct{}
	started := func() {
		in := info()
		if l := in.latest(); !l.IsZero() && !l.After(deadline) {
			return // it ends in time
		}
		d := deadline.Sub(clock.Now())
		if !in.until.IsZero() && in.until.After(deadline) {
			d = 0 // expected to outlast the limit: answer now rather than at the limit
		}
		timer := clock.NewTimer(max(d, 0))
		watching = make(chan struct{})
		go func() {
			defer close(watching)
			select {
			case <-timer.C():
				in := info() // read before cancelling: the wait is gone after
				fired.Store(&in)
				cancel()
			case <-done:
				timer.Stop()
			}
		}()
	}
	err = wait(hctx, started)
	close(done)
	if watching != nil {
		<-watching
	}
	if in := fired.Load(); err != nil && in != nil && dctx.Err() == nil {
		x.tooLong(*in, clock.Now().Sub(c0))
		return true, nil
	}
	return false, err
}

// shuttingDown answers a request held when the daemon's shutdown began: 503,
// come back in 1 to 4 s (to this daemon's successor, or another instance). A
// held stream gets it as its error event.
func (x *exchange) shuttingDown() {
	const msg = "gatectl is shutting down: the request was not sent (or its retry was not); send it again"
	x.s.proxyLog.Info("shutting down: answering a held request 503", "route", x.res.route.String(), "session", x.pr.session)
	if x.sseStarted {
		x.failInStream(http.StatusServiceUnavailable, msg, nil)
		return
	}
	h := x.w.Header()
	h.Set("Retry-After", x.s.spreadRetryAfter()) // every held call is answered at once
	h.Set("X-Should-Retry", "true")
	writeFaceError(x.w, x.pr.ep.kind, http.StatusServiceUnavailable, "", msg)
	_ = http.NewResponseController(x.w).Flush() // on the wire before the connections close
}

// tooLong answers a non-streamed request held past its limit: 429, Retry-After
// the expected rest of the wait, and the reason. holding is how long the wait
// that was cut had lasted: x.waited counts only the waits that ended before it.
//
// Once an attempt went upstream and failed, the wait cut is a retry's (its
// delay, its admission, a long-term wait): gatectl gives up with that failure,
// telling the client not to retry (x-should-retry: false, no Retry-After under
// a minute) — a 429 saying "retry" there was taken by the SDK as a new
// request with new budgets, and one call reached the provider twelve times.
func (x *exchange) tooLong(in holdInfo, holding time.Duration) {
	s := x.s
	now := s.clock.Now()
	if x.failed != nil {
		x.waited += holding // for X-Gate-Waited-Ms; the wait's own caller counts it after
		x.giveUp(x.failed, x.failedVerdict, fmt.Sprintf("held %s, the most this request may wait (proxy.maxHold %s, or X-Gate-Max-Wait), and the wait goes on: %s",
			now.Sub(x.clockStart).Round(time.Second), x.holdLimit(), in.why), true)
		x.waited -= holding
		return
	}
	rest := time.Duration(0)
	if !in.until.IsZero() {
		rest = in.until.Sub(now)
	}
	rest = max(rest, time.Second)
	held := now.Sub(x.clockStart).Round(time.Second)
	h := x.w.Header()
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(rest.Seconds())), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(rest.Milliseconds(), 10))
	h.Set("X-Should-Retry", "true")
	h.Set("X-Gate-Waited-Ms", strconv.FormatInt((x.waited+holding).Milliseconds(), 10))
	h.Set("X-Gate-Route", x.res.route.String()) // as on every answer of a routed request
	msg := fmt.Sprintf("gatectl: held %s, the most this request may wait (proxy.maxHold %s, or X-Gate-Max-Wait), and the wait goes on: %s, about %s more; retry after that, stream the request to wait with progress, or send X-Gate-Max-Wait to wait longer",
		held, x.holdLimit(), in.why, rest.Round(time.Second))
	s.proxyLog.Info("hold limit reached: answering 429", "route", x.res.route.String(), "session", x.pr.session,
		"held", held, "limit", x.holdLimit(), "wait", in.why, "retry_after", rest.Round(time.Second))
	s.bus.Publish(Event{Type: "giveup", At: now, Data: map[string]any{"provider": x.res.route.Provider, "model": x.res.route.Model,
		"session": x.pr.session, "turn": x.pr.turn, "status": http.StatusTooManyRequests, "reason": "hold limit: " + in.why,
		"retryAfterMs": rest.Milliseconds(), "shouldRetry": true}})
	writeFaceError(x.w, x.pr.ep.kind, http.StatusTooManyRequests, "", msg)
}

// startNotices sends the notices of a streamed request while it is held: the
// headers once it has been held proxy.holdNotice, then a comment line every
// proxy.holdNoticeEvery. stop ends them and returns once nothing more is
// written, so the caller owns the ResponseWriter again (a notice write blocked
// by a client that does not read gives up at its deadline; see notice).
func (x *exchange) startNotices(ctx context.Context, info func() holdInfo) (stop func()) {
	clock := x.s.clock
	if in := info(); !x.sseStarted && !in.latest().IsZero() && !in.latest().After(x.clockStart.Add(x.cfg.Proxy.HoldNotice)) {
		return func() {} // over before the first notice is due
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			next := x.clockStart.Add(x.cfg.Proxy.HoldNotice)
			if x.sseStarted {
				next = x.lastNotice.Add(x.cfg.Proxy.HoldNoticeEvery)
			}
			timer := clock.NewTimer(max(next.Sub(clock.Now()), 0))
			select {
			case <-done:
				timer.Stop()
				return
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C():
			}
			select { // the wait may have ended while the timer fired
			case <-done:
				return
			default:
			}
			if x.notice(info()) != nil {
				return // the client is gone; the wait ends with its context
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// notice writes one progress comment, the response headers first if they are
// not sent yet.
func (x *exchange) notice(in holdInfo) error {
	now := x.s.clock.Now()
	x.startHeldStream()
	x.lastNotice = now
	line := ": gatectl waiting " + now.Sub(x.clockStart).Round(time.Second).String() + " (" + in.why
	if !in.until.IsZero() && in.until.After(now) {
		line += ", about " + in.until.Sub(now).Round(time.Second).String() + " left"
	}
	line += ")\n\n"
	// A client that stays connected but stops reading would block this write,
	// and stop (so the admitted call) with it: the write gives up at a deadline,
	// which is lifted after so the stream that follows is not bound by it.
	rc := http.NewResponseController(x.w)
	_ = rc.SetWriteDeadline(time.Now().Add(max(x.cfg.Proxy.HoldNoticeEvery, minNoticeWriteTime)))
	defer rc.SetWriteDeadline(time.Time{})
	if _, err := io.WriteString(x.w, line); err != nil {
		return err
	}
	return rc.Flush()
}

// startHeldStream sends a held stream's headers, unless they went out: 200,
// an event stream, and X-Gate-Held. What follows is comments until the
// answer's first event (or gatectl's error event).
func (x *exchange) startHeldStream() {
	if x.sseStarted {
		return
	}
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a buffering reverse proxy would hold the notices back
	h.Set("X-Gate-Route", x.res.route.String())
	h.Set("X-Gate-Held", "true")
	x.w.WriteHeader(http.StatusOK)
	x.sseStarted = true
}

// minNoticeWriteTime is the least a notice's write may take before the client
// counts as not reading (the deadline is proxy.holdNoticeEvery when longer).
const minNoticeWriteTime = 2 * time.Second

// admissionHold describes an admission wait from the gate's waiter (nil: the
// call has not been queued yet).
func admissionHold(w *gate.Waiter, route string, maxWait time.Duration) holdInfo {
	if w == nil {
		return holdInfo{why: "admission on " + route}
	}
	h := w.Hold()
	// The gate admits (failing open) at maxWait, plus at most a second of jitter.
	return holdInfo{why: gateReasonText(h.Reason) + " on " + route, until: h.Expected, atMost: h.Since.Add(maxWait + time.Second)}
}

// gateReasonText says a gate's wait reason in words a client log reader knows.
func gateReasonText(reason string) string {
	switch reason {
	case "cooldown":
		return "rate limit"
	case "tpm":
		return "token budget (tpm)"
	case "rpm":
		return "request budget (rpm)"
	case "otpm":
		return "output token budget (otpm)"
	case "pace":
		return "pacing"
	case "session-cap":
		return "in-flight cap of the session"
	case "queue":
		return "queue"
	case "store":
		return "shared gate store (Redis)"
	}
	return "admission"
}

// failInStream delivers a failure after the held stream's headers went out, as
// the protocol's own error event: OpenAI `data: {"error":{…}}`, Anthropic
// `event: error` + `data: {"type":"error","error":{…}}`. body is the upstream's
// error body when there is one: its error object is passed on as it is.
func (x *exchange) failInStream(status int, msg string, body []byte) {
	errObj := upstreamErrorObject(body)
	if errObj == nil {
		o := map[string]any{"message": msg, "type": streamErrorType(status)}
		if x.pr.ep.kind == kindAnthropic {
			o["type"] = anthropicErrorType(status) // the type the same status gets outside a stream
		} else {
			o["code"] = status
		}
		errObj, _ = json.Marshal(o)
	}
	var ev string
	if x.pr.ep.kind == kindAnthropic {
		ev = "event: error\ndata: {\"type\":\"error\",\"error\":" + string(errObj) + "}\n\n"
	} else {
		ev = "data: {\"error\":" + string(errObj) + "}\n\n"
	}
	_, _ = io.WriteString(x.w, ev)
	_ = http.NewResponseController(x.w).Flush()
}

// upstreamErrorObject is the "error" object of an OpenAI or Anthropic error
// body, compacted to one line; nil when body has none.
func upstreamErrorObject(body []byte) []byte {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if len(body) == 0 || json.Unmarshal(body, &e) != nil || len(e.Error) == 0 || e.Error[0] != '{' {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, e.Error); err != nil {
		return nil
	}
	return b.Bytes()
}

// streamErrorType names an error by its status, in the words both protocols use.
func streamErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == 529 || status == http.StatusServiceUnavailable:
		return "overloaded_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "api_error"
}

// compactJSON is b on one line (an SSE data field cannot span lines), or b
// with its line breaks dropped when it is not JSON.
func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) == nil {
		return out.Bytes()
	}
	return bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
}
