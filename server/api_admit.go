package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// apiMaxCount bounds every token and byte count of a request (the proxy bounds
// max_tokens the same way): the ledger adds them up in int64, and a sum that
// overflows would make a reservation or a usage negative.
const apiMaxCount = math.MaxInt32

// apiAdmitRequest is the body of POST /gate/v1/admit.
type apiAdmitRequest struct {
	Provider        string `json:"provider"`
	Model           string `json:"model"`
	ReasoningEffort string `json:"reasoningEffort"`
	Pool            string `json:"pool"`
	Route           string `json:"route"`
	Session         string `json:"session"`
	Turn            string `json:"turn"`
	// Priority is "interactive" (the default) or "batch".
	Priority    string `json:"priority"`
	InputTokens int    `json:"inputTokens"`
	InputBytes  int    `json:"inputBytes"`
	MaxTokens   int    `json:"maxTokens"`
	// MaxWaitMs bounds the wait; absent: the gate's maxWait (past which the gate
	// fails open and admits). 0 answers at once, like wait:false.
	MaxWaitMs *int64 `json:"maxWaitMs"`
	// Wait false answers at once: a ticket when the call may go now, else the wait
	// it would take, holding nothing.
	Wait *bool `json:"wait"`
}

// apiAdmitResponse is the answer of POST /gate/v1/admit.
type apiAdmitResponse struct {
	// Ticket is the admission's handle for settle; "" when not admitted.
	Ticket   string `json:"ticket,omitempty"`
	Admitted bool   `json:"admitted"`
	// WaitedMs is how long this call was held.
	WaitedMs int64 `json:"waitedMs"`
	// WaitMs is, when not admitted, how much longer the call would have to wait
	// (the gate's estimate); 0 when admitted.
	WaitMs int64 `json:"waitMs"`
	// Reason is why the call waited, failed open or was not admitted: cooldown, tpm,
	// rpm, otpm, pace, session-cap, queue, store, over-budget, max-wait, no-bucket, internal; "" when
	// it went straight through.
	Reason   string `json:"reason"`
	FailOpen bool   `json:"failOpen"`
	// ReservedTokens is the reservation held until settle: input estimate + output reserve.
	ReservedTokens       int64 `json:"reservedTokens"`
	ReservedOutputTokens int64 `json:"reservedOutputTokens"`
	apiTarget
	// ExpiresAt is when an unsettled ticket is released.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

func (a *api) handleAdmit(w http.ResponseWriter, r *http.Request) {
	var req apiAdmitRequest
	if !apiDecode(w, r, &req) {
		return
	}
	er, wait, maxWait, err := a.admitRequest(&req)
	if err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if err := a.s.ledger.StoreAvailable(); err != nil {
		a.storeUnavailable(w, err.Error())
		return
	}
	a.sweepTickets(a.s.clock.Now())
	tgt, err := a.target(r.Context(), apiAsk{Provider: req.Provider, Model: req.Model, ReasoningEffort: req.ReasoningEffort,
		Pool: req.Pool, Route: req.Route, Session: req.Session})
	if err != nil {
		apiFail(w, http.StatusInternalServerError, err)
		return
	}
	er.Provider, er.Model = tgt.Route.Provider, tgt.Route.Model
	if err := a.checkReservation(a.s.clock.Now(), er); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}

	start := a.s.clock.Now()
	if cd := a.s.longCooldown(start, tgt.Route); cd > 0 {
		notIntoCooldown(w, tgt, 0, cd)
		return
	}
	t, waiter := a.s.ledger.Submit(start, er)
	if waiter != nil {
		var res apiWaitResult
		if !wait {
			res = apiGiveUpWaiting(a.s.clock.Now(), waiter)
		} else {
			// A shutdown ends the wait at once, as it does the proxy's (drain.go).
			dctx, undrain := a.s.drainable(r.Context())
			res = a.wait(dctx, waiter, start, maxWait)
			undrain()
			if res.err != nil && r.Context().Err() == nil {
				w.Header().Set("Retry-After", a.s.spreadRetryAfter())
				apiFail(w, http.StatusServiceUnavailable, errors.New("gatectl is shutting down: nothing was admitted; ask again"))
				return
			}
		}
		if res.err != nil { // the client went away: nothing is held
			return
		}
		if res.storeErr != nil {
			a.storeUnavailable(w, res.storeErr.Error())
			return
		}
		if !res.admitted {
			resp := apiAdmitResponse{WaitedMs: res.waited.Milliseconds(), WaitMs: apiMs(res.left), Reason: res.reason, apiTarget: tgt}
			w.Header().Set("Retry-After", strconv.FormatInt(int64((res.left+time.Second-1)/time.Second), 10))
			writeJSON(w, http.StatusOK, resp)
			return
		}
		t = res.ticket
	}
	now := a.s.clock.Now()
	if r.Context().Err() != nil { // admitted, but nobody is there to use it
		_ = a.s.ledger.Release(now, t)
		return
	}
	if cd := a.s.intoCooldown(now, tgt.Route, t); cd > 0 {
		_ = a.s.ledger.Release(now, t)
		notIntoCooldown(w, tgt, t.Waited, cd)
		return
	}
	tk, evicted := a.tickets.add(now, t, er.Provider, er.Model, er.Session)
	for _, old := range evicted {
		a.dropTicket(now, old, "evicted")
	}
	a.s.metrics.Admitted(er.Provider, er.Model, t)
	writeJSON(w, http.StatusOK, apiAdmitResponse{
		Ticket: tk.id, Admitted: true, WaitedMs: t.Waited.Milliseconds(), Reason: t.Reason, FailOpen: t.FailOpen,
		ReservedTokens: t.Reserved, ReservedOutputTokens: t.ReservedOutput, apiTarget: tgt, ExpiresAt: &tk.expires,
	})
}

// notIntoCooldown answers an admission the gate would grant failing open into
// the provider's pause (a cooldown longer than gate.maxWait, or one that
// outlasted the call's maxWait): not admitted, with the time the pause still
// runs, as the proxy sends no such call (proxy_cooling.go).
func notIntoCooldown(w http.ResponseWriter, tgt apiTarget, waited, cd time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64((cd+time.Second-1)/time.Second), 10))
	writeJSON(w, http.StatusOK, apiAdmitResponse{WaitedMs: waited.Milliseconds(), WaitMs: apiMs(cd), Reason: "cooldown", apiTarget: tgt})
}

// admitRequest validates an admit body and turns it into the ledger's request.
func (a *api) admitRequest(req *apiAdmitRequest) (er gate.Request, wait bool, maxWait time.Duration, err error) {
	er = gate.Request{Session: req.Session, InputTokens: req.InputTokens, InputBytes: req.InputBytes, MaxTokens: req.MaxTokens,
		Pause: gate.PauseAnswer} // the API admits no call into the pause (notIntoCooldown)
	switch req.Priority {
	case "", "interactive":
		er.Priority = gate.PriorityInteractive
	case "batch":
		er.Priority = gate.PriorityBatch
	default:
		return er, false, 0, apiFieldError{"priority", fmt.Sprintf("priority %q: choices are interactive, batch", req.Priority)}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"inputTokens", req.InputTokens}, {"inputBytes", req.InputBytes}, {"maxTokens", req.MaxTokens}} {
		if f.v < 0 {
			return er, false, 0, apiFieldError{f.name, fmt.Sprintf("%s must not be negative (got %d)", f.name, f.v)}
		}
		if f.v > apiMaxCount {
			return er, false, 0, apiFieldError{f.name, fmt.Sprintf("%s must be at most %d (got %d)", f.name, apiMaxCount, f.v)}
		}
	}
	if err := apiCheckName("turn", req.Turn); err != nil {
		return er, false, 0, err
	}
	wait = req.Wait == nil || *req.Wait
	maxWait = -1 // the gate's maxWait
	if req.MaxWaitMs != nil {
		ms := *req.MaxWaitMs
		if ms < 0 {
			return er, false, 0, apiFieldError{"maxWaitMs", fmt.Sprintf("maxWaitMs must not be negative (got %d)", ms)}
		}
		if ms > int64(24*time.Hour/time.Millisecond) {
			return er, false, 0, apiFieldError{"maxWaitMs", fmt.Sprintf("maxWaitMs must be at most a day (got %d)", ms)}
		}
		maxWait = time.Duration(ms) * time.Millisecond
		if maxWait == 0 {
			wait = false
		}
	}
	return er, wait, maxWait, nil
}

// checkReservation refuses a call whose declared tokens exceed the model's whole
// configured budget (tpm): such a reservation could never fit in a window, and
// admitting it (as the proxy admits a real call that large, at once, rather than
// fail it) would hold every other caller of the model until it is settled or its
// ticket expires. The proxy may do that for a request it is about to send; a
// harness that only declares numbers gets told instead. The configured budget,
// not the learned one, is the bound: a learner that lowers a model's quota must
// not start refusing calls the operator said fit.
//
// A call that gives inputBytes instead of inputTokens is bounded by the input
// the gate estimates from them, as the reservation would hold it.
func (a *api) checkReservation(now time.Time, er gate.Request) error {
	budget := int64(a.s.ledger.Config().Limits(er.Provider + "/" + er.Model).TPM)
	in, out := int64(er.InputTokens), int64(er.MaxTokens)
	if in == 0 && er.InputBytes > 0 && in+out <= budget {
		if est := a.s.ledger.EstimatedInput(now, er); est+out > budget {
			return apiFieldError{"inputBytes", fmt.Sprintf("inputBytes %d (about %d tokens) + maxTokens %d exceeds the whole budget of %s/%s (%d tokens a window): it could never fit, and reserving it would hold every other caller",
				er.InputBytes, est, out, er.Provider, er.Model, budget)}
		}
	}
	switch {
	case in+out <= budget:
		return nil
	case out == 0:
		return apiFieldError{"inputTokens", fmt.Sprintf("inputTokens %d exceeds the whole budget of %s/%s (%d tokens a window): it could never fit, and reserving it would hold every other caller",
			in, er.Provider, er.Model, budget)}
	case in == 0:
		return apiFieldError{"maxTokens", fmt.Sprintf("maxTokens %d exceeds the whole budget of %s/%s (%d tokens a window): it could never fit, and reserving it would hold every other caller; ask for at most %d",
			out, er.Provider, er.Model, budget, budget)}
	}
	return apiFieldError{"maxTokens", fmt.Sprintf("inputTokens %d + maxTokens %d exceeds the whole budget of %s/%s (%d tokens a window): it could never fit, and reserving it would hold every other caller; ask for at most %d",
		in, out, er.Provider, er.Model, budget, max(budget-in, 0))}
}

// apiWaitResult is how a wait in the queue ended.
type apiWaitResult struct {
	admitted bool
	ticket   gate.Ticket
	waited   time.Duration // how long this call waited
	left     time.Duration // not admitted: the wait still ahead, as the gate estimates it
	reason   string        // not admitted: why it is held back
	err      error         // the request's context ended
	storeErr error         // the shared store went down under failClosed: answer 503
}

// apiGiveUpWaiting leaves the queue at now, holding nothing, and reports the wait
// that was ahead.
func apiGiveUpWaiting(now time.Time, w *gate.Waiter) apiWaitResult {
	if until, ok := w.Refused(); ok {
		return apiWaitResult{left: max(until.Sub(now), 0), reason: "cooldown"}
	}
	left := max(w.Next().Sub(now), 0)
	reason := w.Reason()
	w.Cancel(now) // releases the grant too, if it came meanwhile
	return apiWaitResult{left: left, reason: reason}
}

// wait holds a queued call until it is granted, maxWait passes (maxWait < 0: no
// bound but the gate's own maxWait, where it fails open) or ctx ends. It sleeps
// on the server's clock, so tests drive it with a fake one. It is the ledger's
// Admit loop with a deadline of the caller's.
func (a *api) wait(ctx context.Context, w *gate.Waiter, start time.Time, maxWait time.Duration) apiWaitResult {
	clock := a.s.clock
	deadline := start.Add(maxWait)
	for {
		if t, ok := w.Ticket(); ok {
			return apiWaitResult{admitted: true, ticket: t}
		}
		if until, ok := w.Refused(); ok { // refused in a pause it would outlast (gate.PauseError)
			now := clock.Now()
			return apiWaitResult{waited: now.Sub(start), left: max(until.Sub(now), 0), reason: "cooldown"}
		}
		if err := a.s.ledger.StoreAvailable(); err != nil {
			w.Cancel(clock.Now())
			return apiWaitResult{storeErr: err}
		}
		now := clock.Now()
		if maxWait >= 0 && !now.Before(deadline) {
			if t, ok := w.Poll(now); ok {
				return apiWaitResult{admitted: true, ticket: t}
			}
			res := apiGiveUpWaiting(now, w)
			res.waited = now.Sub(start)
			return res
		}
		next := w.Next()
		if maxWait >= 0 && deadline.Before(next) {
			next = deadline
		}
		timer := clock.NewTimer(max(next.Sub(now), 0))
		select {
		case <-w.Ready():
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			w.Cancel(clock.Now())
			return apiWaitResult{err: ctx.Err()}
		case <-timer.C():
			w.Poll(clock.Now())
		}
	}
}

// apiSettleRequest is the body of POST /gate/v1/settle: usage, release or
// abandon; and, optionally, the headers of the provider's answer (not a 429: those go
// to /gate/v1/failure), whose rate-limit headers the gate reads as the proxy
// reads them (x-ratelimit-*, anthropic-ratelimit-*: the stated limits, the
// remaining tokens, the token reset).
type apiSettleRequest struct {
	Ticket  string    `json:"ticket"`
	Usage   *apiUsage `json:"usage"`
	Release bool      `json:"release"`
	// Abandon: the call was sent, and no usable answer came (the harness
	// cancelled it, its deadline passed, the connection broke after the
	// send). The provider had it, so it stays counted as a call in flight
	// (Ledger.Abandon); release would let the waiters into a window the
	// provider still holds.
	Abandon bool              `json:"abandon"`
	Headers map[string]string `json:"headers"`
}

// apiUsage is what the provider reported for a call. Cache reads and writes count
// against the window.
type apiUsage struct {
	InputTokens      int64 `json:"inputTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	OutputTokens     int64 `json:"outputTokens"`
}

// apiSettleResponse is the answer of POST /gate/v1/settle.
type apiSettleResponse struct {
	Ticket    string `json:"ticket"`
	Settled   bool   `json:"settled"`   // usage recorded
	Released  bool   `json:"released"`  // reservation given back whole
	Abandoned bool   `json:"abandoned"` // kept counted as a call in flight
	// ReservedTokens was held; UsedTokens replaces it in the window (0 on
	// release; on abandon, what the provider is expected to count of it, or 0
	// when it was admitted a window ago or more).
	ReservedTokens int64  `json:"reservedTokens"`
	UsedTokens     int64  `json:"usedTokens"`
	Provider       string `json:"provider"`
	Model          string `json:"model"`
}

// settleKind is how a settle request closes its ticket.
type settleKind uint8

const (
	settleUsage   settleKind = iota // the real usage replaces the reservation
	settleRelease                   // given back whole
	settleAbandon                   // kept counted as a call in flight
)

func closing(req apiSettleRequest) settleKind {
	switch {
	case req.Release:
		return settleRelease
	case req.Abandon:
		return settleAbandon
	}
	return settleUsage
}

func (a *api) handleSettle(w http.ResponseWriter, r *http.Request) {
	var req apiSettleRequest
	if !apiDecode(w, r, &req) {
		return
	}
	switch {
	case req.Ticket == "":
		writeError(w, http.StatusBadRequest, "ticket", "ticket is required")
		return
	case req.Usage == nil && !req.Release && !req.Abandon:
		writeError(w, http.StatusBadRequest, "usage", "give usage, release: true or abandon: true")
		return
	case req.Usage != nil && req.Release && req.Abandon:
		writeError(w, http.StatusBadRequest, "abandon", "give one of usage, release: true or abandon: true")
		return
	case req.Usage != nil && req.Release, req.Usage != nil && req.Abandon:
		field := "release"
		if req.Abandon {
			field = "abandon"
		}
		writeError(w, http.StatusBadRequest, field, fmt.Sprintf("give usage or %s: true, not both", field))
		return
	case req.Release && req.Abandon:
		writeError(w, http.StatusBadRequest, "abandon", "give release: true (never reached the provider) or abandon: true (sent, no answer), not both")
		return
	}
	var u gate.Usage
	if req.Usage != nil {
		u = gate.Usage{InputTokens: req.Usage.InputTokens, CacheReadTokens: req.Usage.CacheReadTokens,
			CacheWriteTokens: req.Usage.CacheWriteTokens, OutputTokens: req.Usage.OutputTokens}
		for _, f := range []struct {
			name string
			v    int64
		}{{"usage.inputTokens", u.InputTokens}, {"usage.cacheReadTokens", u.CacheReadTokens},
			{"usage.cacheWriteTokens", u.CacheWriteTokens}, {"usage.outputTokens", u.OutputTokens}} {
			if f.v < 0 {
				writeError(w, http.StatusBadRequest, f.name, fmt.Sprintf("%s must not be negative (got %d)", f.name, f.v))
				return
			}
			if f.v > apiMaxCount {
				writeError(w, http.StatusBadRequest, f.name, fmt.Sprintf("%s must be at most %d (got %d)", f.name, apiMaxCount, f.v))
				return
			}
		}
	}
	now := a.s.clock.Now()
	a.sweepTickets(now)
	tk := a.tickets.take(req.Ticket)
	if tk == nil && a.settleElsewhere(w, req.Ticket, u.Total(), u.OutputTokens, closing(req)) {
		return
	}
	if tk == nil {
		writeError(w, http.StatusNotFound, "ticket", fmt.Sprintf("ticket %q is unknown, expired (unsettled tickets are released after %s) or already settled", req.Ticket, a.tickets.ttl))
		return
	}
	resp := apiSettleResponse{Ticket: tk.id, ReservedTokens: tk.t.Reserved, Provider: tk.provider, Model: tk.model}
	// The rate-limit headers of the answer, read as the proxy reads its own:
	// a settled or abandoned call's right after it closes (it stays in the
	// window), a released one's before the release lets waiters through.
	get := (&engine.Failure{Headers: req.Headers}).Header // one value each, looked up case-insensitively
	sent := tk.issued
	if !tk.sentAt.IsZero() { // taken from the table: no send is marked after
		sent = tk.sentAt
	}
	var err error
	switch {
	case req.Release:
		if len(req.Headers) > 0 { // before the release lets waiters through
			a.s.readAnswerLimits(now, tk.provider, tk.model, tk.issued, sent, get)
		}
		err, resp.Released = a.s.ledger.Release(now, tk.t), true
	case req.Abandon:
		resp.UsedTokens, err = a.s.ledger.Abandon(now, tk.t)
		resp.Abandoned = true
		if err == nil && len(req.Headers) > 0 {
			a.s.readAnswerLimits(now, tk.provider, tk.model, tk.issued, sent, get)
		}
	default:
		err, resp.Settled, resp.UsedTokens = a.s.ledger.Settle(now, tk.t, u), true, u.Total()
		if err == nil && len(req.Headers) > 0 {
			a.s.readAnswerLimits(now, tk.provider, tk.model, tk.issued, sent, get)
		}
	}
	if err != nil { // the table hands each ticket out once: the ledger refusing it is a bug
		a.s.apiLog.Error("the ledger refused a ticket", "provider", tk.provider, "model", tk.model, "error", err)
		writeError(w, http.StatusConflict, "ticket", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// apiSentRequest is the body of POST /gate/v1/sent.
type apiSentRequest struct {
	Ticket string `json:"ticket"`
}

// apiSentResponse is the answer of POST /gate/v1/sent.
type apiSentResponse struct {
	Ticket string `json:"ticket"`
	// Moved says the ticket's entry now counts from the send: it was sent
	// after the time its entry counted from. False for a call sent when it
	// was admitted, for a send reported again (the first report stands), and
	// for a ticket another instance admitted (its entry on the shared store
	// keeps the admission's time).
	Moved bool `json:"moved"`
	// CountsFrom is when the entry counts from now that it moved.
	CountsFrom *time.Time `json:"countsFrom,omitempty"`
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
}

// handleSent records that a ticket's call left for the provider now. The
// provider counts a call from when it arrives; a harness that sends it well
// after its admission (a queue of its own, a new connection's handshake) says
// so, and the gate's window holds the call from then, as the proxy does with
// the calls it writes itself. Reporting is optional: without it, a ticket
// counts from its admission.
func (a *api) handleSent(w http.ResponseWriter, r *http.Request) {
	var req apiSentRequest
	if !apiDecode(w, r, &req) {
		return
	}
	if req.Ticket == "" {
		writeError(w, http.StatusBadRequest, "ticket", "ticket is required")
		return
	}
	now := a.s.clock.Now()
	a.sweepTickets(now)
	tk, first := a.tickets.markSent(now, req.Ticket)
	if tk == nil && a.sentElsewhere(w, now, req.Ticket) {
		return
	}
	if tk == nil {
		writeError(w, http.StatusNotFound, "ticket", fmt.Sprintf("ticket %q is unknown, expired (unsettled tickets are released after %s) or already settled", req.Ticket, a.tickets.ttl))
		return
	}
	resp := apiSentResponse{Ticket: tk.id, Provider: tk.provider, Model: tk.model}
	if !first {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	if at := a.s.ledger.Sent(now, tk.t); !at.IsZero() {
		resp.Moved, resp.CountsFrom = true, &at
	}
	writeJSON(w, http.StatusOK, resp)
}
