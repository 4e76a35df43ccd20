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
	log := s.proxyLog
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
