package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
)

// apiFailureRequest is the body of POST /gate/v1/failure: one failed call.
type apiFailureRequest struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Session  string `json:"session"`
	Turn     string `json:"turn"`
	Step     int    `json:"step"`
	// Status is the HTTP status; 0 for a transport error (then errorKind says which).
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	// ErrorKind names a transport failure: timeout, reset, refused, dns.
	ErrorKind string `json:"errorKind"`
	// Ticket, when given, is released: the failed call's reservation goes back.
	Ticket string `json:"ticket"`
}

// apiFailureResponse is the answer of POST /gate/v1/failure: the verdict and the plan.
type apiFailureResponse struct {
	Class        engine.Class `json:"class"`
	By           string       `json:"by"`
	RetryAfterMs *int64       `json:"retryAfterMs"`
	Window       string       `json:"window,omitempty"`
	// Action is retry, failover, wait (long-term: the allowance is spent) or giveup.
	Action string `json:"action"`
	// DelayMs is how long to wait before the retry (retry, wait); 0 otherwise. A
	// RATE_LIMIT retry answers 0 with viaGate: the next admit waits the cooldown.
	DelayMs int64 `json:"delayMs"`
	// Route is where the next attempt goes: the new route on failover, else the same.
	Route engine.Route `json:"route"`
	// Attempt is the 1-based round this retry (or long-term wait) is on Budget; for
	// a give-up on a spent budget, the budget's size; 0 when no budget is involved.
	Attempt int `json:"attempt"`
	// Budget names the budget spent: retry, mislabeled or long-term.
	Budget string `json:"budget,omitempty"`
	Rounds int    `json:"rounds,omitempty"`
	// BudgetLeft is the rounds left on that budget (the main one when none was
	// spent) in this turn; null for the unbounded long-term budget.
	BudgetLeft *int   `json:"budgetLeft"`
	Exhausted  bool   `json:"exhausted,omitempty"`
	ViaGate    bool   `json:"viaGate,omitempty"`
	Reason     string `json:"reason"`
	// TicketReleased says the request's ticket was released.
	TicketReleased bool `json:"ticketReleased,omitempty"`
}

// apiActionNames maps the planner's action kinds to the decision API's words.
var apiActionNames = map[retry.ActionKind]string{
	retry.ActionRetry:        "retry",
	retry.ActionFailover:     "failover",
	retry.ActionWaitLongTerm: "wait",
	retry.ActionGiveUp:       "giveup",
}

var apiErrorKinds = []string{"", "timeout", "reset", "refused", "dns"}

func (a *api) handleFailure(w http.ResponseWriter, r *http.Request) {
	var req apiFailureRequest
	if !apiDecode(w, r, &req) {
		return
	}
	if err := apiFirstErr(apiCheckName("provider", req.Provider), apiCheckName("model", req.Model),
		apiCheckName("session", req.Session), apiCheckName("turn", req.Turn)); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if req.Session != "" {
		a.s.seen.note(req.Session, a.s.clock.Now()) // in use: its settings' record stays (janitor.go)
	}
	switch {
	case req.Provider == "":
		writeError(w, http.StatusBadRequest, "provider", "provider is required")
		return
	case a.checkProvider("provider", req.Provider) != nil:
		apiFail(w, http.StatusBadRequest, a.checkProvider("provider", req.Provider))
		return
	case req.Status != 0 && (req.Status < 100 || req.Status > 599):
		writeError(w, http.StatusBadRequest, "status", fmt.Sprintf("status must be an HTTP status, or 0 for a transport error (got %d)", req.Status))
		return
	case req.Step < 0:
		writeError(w, http.StatusBadRequest, "step", fmt.Sprintf("step must not be negative (got %d)", req.Step))
		return
	}
	found := false
	for _, k := range apiErrorKinds {
		found = found || req.ErrorKind == k
	}
	if !found {
		writeError(w, http.StatusBadRequest, "errorKind", fmt.Sprintf("errorKind %q: choices are timeout, reset, refused, dns (or none)", req.ErrorKind))
		return
	}
	if req.Status == 0 && req.ErrorKind == "" {
		writeError(w, http.StatusBadRequest, "status", "give the HTTP status, or errorKind for a failure with no HTTP answer")
		return
	}

	now := a.s.clock.Now()
	a.sweepTickets(now)
	resp := apiFailureResponse{}
	// What the ticket knows of the refused call: when it counted from (its
	// send, when the harness reported it) and what it reserved — for the
	// gate's measured count delay and its reading of the 429.
	var admitted time.Time
	var reserved int64
	if req.Ticket != "" {
		tk := a.tickets.take(req.Ticket)
		switch {
		case tk != nil:
			_ = a.s.ledger.Release(now, tk.t)
			resp.TicketReleased = true
			admitted, reserved = tk.issued, tk.t.Reserved
			if !tk.sentAt.IsZero() {
				admitted = tk.sentAt
			}
		default:
			// Another instance's ticket (a load balancer sent the report
			// here): its entry on the shared window is released through the
			// store, as a settle of it would be. The failure is classified
			// and planned here either way once the ticket is known to be open
			// — a store that cannot answer must not cost the harness its
			// retry plan — and the issuing instance closes its own record when
			// the store tells it.
			released, open, err := a.releaseElsewhere(req.Ticket)
			if !open {
				writeError(w, http.StatusNotFound, "ticket", fmt.Sprintf("ticket %q is unknown, expired or already settled", req.Ticket))
				return
			}
			if err != nil {
				a.s.apiLog.Warn("failure report: the shared gate store (Redis) could not release another instance's ticket; the failure is classified anyway", "ticket", req.Ticket, "error", err)
			}
			resp.TicketReleased, reserved = err == nil, released
		}
	}

	f := &engine.Failure{Status: req.Status, Headers: req.Headers, Body: req.Body, Provider: req.Provider, Model: req.Model, ErrorKind: req.ErrorKind}
	if since, ok := a.s.planner.SinceCapacity(now, req.Provider); ok {
		ms := since.Milliseconds()
		f.SinceCapacityMs = &ms
	}
	v, _, err := a.s.snap.Current().Chain.Classify(r.Context(), f)
	if err != nil { // the client went away mid-classification
		writeError(w, http.StatusServiceUnavailable, "", "classification interrupted: "+err.Error())
		return
	}
	act := a.s.planner.Plan(r.Context(), now, retry.Request{Verdict: v, Provider: req.Provider, Model: req.Model,
		Session: req.Session, Turn: req.Turn, Step: req.Step, Failure: f, Admitted: admitted, Reserved: reserved})
	a.s.metrics.Upstream(req.Provider, req.Status)
	a.s.metrics.Failure(v.Class)
	a.s.metrics.Action(string(act.Kind))

	resp.Class, resp.By, resp.RetryAfterMs, resp.Window = v.Class, v.By, v.RetryAfterMs, v.Window
	resp.Action = apiActionNames[act.Kind]
	if resp.Action == "" {
		resp.Action = strings.ReplaceAll(string(act.Kind), "_", "")
	}
	resp.DelayMs = act.Delay.Milliseconds()
	resp.Route = engine.Route{Provider: req.Provider, Model: req.Model}
	if act.Route != nil {
		resp.Route = *act.Route
	}
	resp.Budget, resp.Rounds, resp.Attempt = act.Budget, act.Rounds, act.Round
	resp.Exhausted, resp.ViaGate, resp.Reason = act.Exhausted, act.ViaGate, act.Reason
	resp.BudgetLeft = a.budgetLeft(act, req.Session, req.Turn, req.Provider)
	writeJSON(w, http.StatusOK, resp)
}

// budgetLeft is the rounds left on the budget the action is about (the main one
// when it spent none) in the session's turn; nil for the unbounded long-term one.
func (a *api) budgetLeft(act retry.Action, session, turn, provider string) *int {
	switch act.Budget {
	case retry.BudgetLongTerm:
		return nil
	case retry.BudgetMain, retry.BudgetMislabeled, retry.BudgetTransport, retry.BudgetHint:
		left := max(act.Rounds-act.Round, 0)
		if act.Exhausted {
			left = 0
		}
		return &left
	}
	rounds := a.s.planner.Policy().Rounds
	used := 0
	if b, ok := a.s.planner.Budget(retry.BudgetKey{Session: session, Provider: provider, Turn: turn}); ok && b.Turn == turn {
		used = b.Rounds
	}
	left := max(rounds-used, 0)
	return &left
}

// apiSuccessRequest is the body of POST /gate/v1/success: a call that succeeded.
type apiSuccessRequest struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Session  string `json:"session"`
	// Status is the upstream's status (default 200), for the metrics.
	Status int `json:"status"`
}

// apiSuccessResponse is the answer of POST /gate/v1/success.
type apiSuccessResponse struct {
	// Recovered says the session was in a long-term wait, which this success ended.
	Recovered bool `json:"recovered"`
}

func (a *api) handleSuccess(w http.ResponseWriter, r *http.Request) {
	var req apiSuccessRequest
	if !apiDecode(w, r, &req) {
		return
	}
	if err := apiFirstErr(apiCheckName("provider", req.Provider), apiCheckName("model", req.Model), apiCheckName("session", req.Session)); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if req.Provider == "" {
		writeError(w, http.StatusBadRequest, "provider", "provider is required")
		return
	}
	if err := a.checkProvider("provider", req.Provider); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if req.Status == 0 {
		req.Status = http.StatusOK
	}
	if req.Status < 100 || req.Status > 399 {
		writeError(w, http.StatusBadRequest, "status", fmt.Sprintf("status of a success must be 1xx-3xx (got %d): report a failure instead", req.Status))
		return
	}
	a.sweepTickets(a.s.clock.Now())
	recovered := req.Session != "" && a.s.quota.IsRetrying(req.Session)
	a.s.quota.OnSuccess(req.Session)
	a.s.metrics.Upstream(req.Provider, req.Status)
	writeJSON(w, http.StatusOK, apiSuccessResponse{Recovered: recovered})
}
