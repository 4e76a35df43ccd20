package server

// Giving up: the last failure to the client with Retry-After, X-Should-Retry, X-Gate-Class, and the giveup event.

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// longRetryAfter is the shortest Retry-After a client is told after gatectl has
// spent its own retries: anything shorter invites the retry storm gatectl just
// sat through (see docs/RATIONALE.md, "Why does gatectl tell the client not to
// retry after it gave up?"). The OpenAI and Anthropic SDKs do not honour a
// Retry-After above 60 s either, so a longer one reaches only people and
// schedulers, as the truthful time the wait ends.
const longRetryAfter = time.Minute

// giveUp answers the client with the last failure: the upstream's status and
// body, X-Gate-Class, x-should-retry and Retry-After.
//
// spent says gatectl's own retrying is over (a spent budget, the attempt
// backstop, a cooldown it will not wait, a transport failure judged hopeless):
// the client is told not to retry (x-should-retry: false), and Retry-After is
// only sent when the real wait (the larger of the provider's hint and the
// model's cooldown left in the ledger) is at least longRetryAfter. Otherwise
// gatectl did not retry the class by policy (retry.retryOn, retry.rounds 0) and
// leaves it to the client: x-should-retry follows the class, with Retry-After no
// shorter than the real wait, and none when there is none to tell: a fixed
// second told to every client the failure met put them in step, where the
// SDKs' own backoff, jittered, keeps them apart.
func (x *exchange) giveUp(fail *upstreamFailure, v engine.Verdict, reason string, spent bool) {
	s := x.s
	now := s.clock.Now()
	route := fail.route
	wait, _ := v.RetryAfter()
	if cd := s.cooldownLeft(now, route); cd > wait {
		wait = cd
	}
	wait = max(wait, x.pauseLeft) // the pause of the route it was not sent to (refuseIntoCooldown)
	retry := shouldRetry(v.Class)
	if spent {
		retry = false
		if wait < longRetryAfter {
			wait = 0
		}
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
		setRetryAfter(h, wait)
	}
	h.Set("X-Should-Retry", strconv.FormatBool(retry))
	h.Set("X-Gate-Class", string(v.Class))
	x.gateHeaders(h, route)
	data := map[string]any{"provider": route.Provider, "model": route.Model, "session": x.pr.session, "turn": x.pr.turn,
		"status": status, "class": v.Class, "by": v.By, "reason": reason, "retryAfterMs": wait.Milliseconds(), "shouldRetry": retry}
	s.bus.Publish(Event{Type: "giveup", At: now, Data: data})
	// One line a give-up: Warn when the upstream failed (a 5xx, no HTTP answer),
	// Info for a 4xx, which is the request's or the account's business.
	log := s.proxyLog.Info
	if status >= 500 || status < 400 {
		log = s.proxyLog.Warn
	}
	log("giving up", "provider", route.Provider, "model", route.Model, "session", x.pr.session, "status", status,
		"class", v.Class, "kind", fail.f.ErrorKind, "should_retry", retry, "reason", reason)
	if x.sseStarted { // a held stream: the failure is its error event
		code := status
		if code < 400 { // no HTTP answer: the code the same failure gets outside a stream
			code = http.StatusBadGateway
			if v.Class == engine.ClassTimeout {
				code = http.StatusGatewayTimeout
			}
		}
		x.failInStream(code, fmt.Sprintf("gatectl: upstream %s failed: %s (%s); %s", route, failureText(fail), v.Class, reason), fail.body)
		return
	}
	switch {
	case fail.body != nil:
		// The upstream's body, in the face's shape; a 200 that carried an error
		// becomes an error status (a stream's error event: JSON, not a stream).
		code, body, rewritten := faceBody(x.pr.ep.kind, status, fail.body, route.String())
		if rewritten || status < 400 || isEventStream(fail.header) {
			h.Set("Content-Type", "application/json")
		}
		x.w.WriteHeader(code)
		_, _ = x.w.Write(body)
	default:
		code := http.StatusBadGateway
		if v.Class == engine.ClassTimeout {
			code = http.StatusGatewayTimeout
		}
		x.fail(code, "", fmt.Sprintf("gatectl: upstream %s failed: %s (%s)", route, fail.f.Body, v.Class))
	}
}

// shouldRetry says whether the client may usefully retry a failure of class c
// later (x-should-retry): capacity and transient failures yes; a spent quota, a
// bad key, a bad request, an unknown failure no. A MISLABELED failure handed
// back unretried is one gatectl treated as the bad request it says it is
// (retry.mislabeled off): the SDK, which honours x-should-retry even on a 400,
// must not retry it either.
func shouldRetry(c engine.Class) bool {
	switch c {
	case engine.ClassRateLimit, engine.ClassOverloaded, engine.ClassServer, engine.ClassTimeout, engine.ClassTransport:
		return true
	}
	return false
}

// failureText is a failure's text for a message: gatectl's description of a
// transport failure, or the upstream's status.
func failureText(fail *upstreamFailure) string {
	if fail.body == nil {
		return fail.f.Body
	}
	return "status " + strconv.Itoa(fail.f.Status)
}

// setRetryAfter tells a wait in Retry-After (whole seconds, rounded up) and
// Retry-After-Ms, which the OpenAI SDKs read first.
func setRetryAfter(h http.Header, wait time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
}
