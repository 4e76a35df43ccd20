package server

// A call the gate lets through at gate.maxWait while the provider's pause is
// still on is not sent into the pause: it sits a short pause out, or gatectl
// answers it.

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// cooldownLeft is how long the gate still cools route's model down: its own
// cooldown or its provider's, from the provider's Retry-After (clamped) or the
// gate's fallback.
func (s *Server) cooldownLeft(now time.Time, route engine.Route) time.Duration {
	return s.ledger.CooldownLeft(now, route.Provider, route.Model)
}

// longCooldown is how long route's model still cools down when that is
// longer than gate.maxWait; 0 otherwise. The gate would admit a call then at
// once, failing open (intoCooldown): the caller answers it without asking.
func (s *Server) longCooldown(now time.Time, route engine.Route) time.Duration {
	if cd := s.cooldownLeft(now, route); cd > s.ledger.Config().MaxWait {
		return cd
	}
	return 0
}

// intoCooldown reports how long the cooldown a ticket would be sent into
// still runs: the gate admitted it failing open at gate.maxWait (its wait —
// a cooldown and the queue behind it, or a cooldown another 429 lengthened —
// ran past it) while the provider's pause is still on. 0 for any other ticket.
//
// Failing open there keeps the gate's promise that no call waits longer than
// maxWait, but sending the call keeps only the letter of it: the provider
// asked for the pause and refuses the call. In a pause longer than maxWait
// every new call went that way, each a 429 at the provider — the retry storm
// the gate exists to stop. So the caller sends nothing: it sits out a pause
// that ends within maxWait and asks again, or answers the call itself with the
// time the pause still runs (refuseIntoCooldown).
func (s *Server) intoCooldown(now time.Time, route engine.Route, t gate.Ticket) time.Duration {
	if !t.FailOpen || t.Reason != "max-wait" {
		return 0
	}
	return s.cooldownLeft(now, route)
}

// refuseIntoCooldown answers a call admitted into a cooldown (intoCooldown)
// that was never sent, after releasing its ticket. An exchange that already
// failed on this route gives up with that failure, as a retry into a long
// cooldown does; a first attempt gets a 429 of gatectl's own. Either way
// Retry-After says when the pause ends, and x-should-retry says whether
// gatectl would wait that long: an SDK told to retry comes back within
// seconds, which for a pause past maxWait is back into it.
// t is the zero Ticket when the call was not asked for (longCooldown), and
// holds only Waited when the gate refused it in the queue (gate.PauseError).
func (x *exchange) refuseIntoCooldown(route engine.Route, t gate.Ticket, cd time.Duration) {
	s := x.s
	now := s.clock.Now()
	if t.FailOpen {
		_ = s.ledger.Release(now, t)
	}
	x.waited += t.Waited
	maxWait := s.ledger.Config().MaxWait
	reason := fmt.Sprintf("the model cools down for %s more (the provider's pause), longer than gate.maxWait %s", cd.Round(time.Millisecond), maxWait)
	switch {
	case t.FailOpen:
		reason = fmt.Sprintf("the model cools down for %s more (the provider's pause), and the call waited gate.maxWait %s", cd.Round(time.Millisecond), maxWait)
	case t.Waited > 0: // refused in the queue (gate.PauseError)
		reason = fmt.Sprintf("the model cools down for %s more (the provider's pause), past what the call may still wait (gate.maxWait %s, %s waited)", cd.Round(time.Millisecond), maxWait, t.Waited.Round(time.Millisecond))
	}
	if x.failed != nil {
		x.pauseLeft = cd // after a failover, the pause is this route's, not the failed one's
		x.giveUp(x.failed, x.failedVerdict, route.String()+": "+reason, cd > maxWait)
		return
	}
	retry := cd <= maxWait
	h := x.w.Header()
	setRetryAfter(h, cd)
	h.Set("X-Should-Retry", strconv.FormatBool(retry))
	h.Set("X-Gate-Class", string(engine.ClassRateLimit))
	x.gateHeaders(h, route)
	s.bus.Publish(Event{Type: "giveup", At: now, Data: map[string]any{"provider": route.Provider, "model": route.Model,
		"session": x.pr.session, "turn": x.pr.turn, "status": http.StatusTooManyRequests, "class": engine.ClassRateLimit,
		"by": "gate", "reason": reason, "retryAfterMs": cd.Milliseconds(), "shouldRetry": retry}})
	s.proxyLog.Info("not sent into the model's cooldown", "provider", route.Provider, "model", route.Model,
		"session", x.pr.session, "cooldown_ms", cd.Milliseconds(), "waited_ms", t.Waited.Milliseconds(), "should_retry", retry)
	x.fail(http.StatusTooManyRequests, "", "gatectl: "+route.String()+" is rate limited: "+reason+"; nothing was sent")
}
