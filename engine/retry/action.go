package retry

// The planner's request and answer types: Request, Action, and the QuotaRouter seam.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// ActionKind is what the planner tells the caller to do about a failure.
type ActionKind string

// The actions. Their names appear in the decision API and in logs.
const (
	// ActionRetry: send the same request to the same route after Action.Delay.
	ActionRetry ActionKind = "retry"
	// ActionFailover: send it at once to Action.Route (QUOTA with a pool).
	ActionFailover ActionKind = "failover"
	// ActionWaitLongTerm: the allowance is spent and no route has any: try the same
	// route again after Action.Delay (quota.longTermDelay), unbounded by design.
	ActionWaitLongTerm ActionKind = "wait_long_term"
	// ActionGiveUp: return the failure to the client.
	ActionGiveUp ActionKind = "give_up"
)

// The budgets an Action can spend (Action.Budget).
const (
	BudgetMain       = "retry"      // Policy.Rounds
	BudgetMislabeled = "mislabeled" // Policy.Mislabeled.Rounds
	BudgetLongTerm   = "long-term"  // unbounded
	BudgetHint       = "hint"       // Policy.HintRounds: retries that wait the provider's hint
	// BudgetTransport is a transport failure kind's own budget
	// (Policy.Transport); its retries spend the main budget too.
	BudgetTransport = "transport"
)

// Action is the planner's answer to one failure.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Delay is how long to wait before the retry (ActionRetry, ActionWaitLongTerm);
	// 0 otherwise. A RATE_LIMIT retry has Delay 0 and ViaGate set: the cooldown is in
	// the gate, and the next admission waits it.
	Delay time.Duration `json:"-"`
	// Route is where a failover goes; nil for other kinds.
	Route *engine.Route `json:"route,omitempty"`
	// Class is the verdict's class the action answers.
	Class engine.Class `json:"class"`
	// Budget names the budget the action spent or found spent; "" when none.
	Budget string `json:"budget,omitempty"`
	// Round is the 1-based round this retry is on Budget, of Rounds. For a give-up on
	// a spent budget both are the budget's size. Rounds is 0 for the unbounded
	// long-term budget.
	Round  int `json:"round,omitempty"`
	Rounds int `json:"rounds,omitempty"`
	// Exhausted marks a give-up because the budget was spent (as opposed to a class
	// that is not retried).
	Exhausted bool `json:"exhausted,omitempty"`
	// ViaGate marks a RATE_LIMIT retry whose cooldown was recorded in the gate.
	ViaGate bool `json:"viaGate,omitempty"`
	// Quota is QuotaAnswer.Handle for a failover or long-term wait: what the
	// quota runtime needs back to run the wait. nil otherwise.
	Quota any `json:"-"`
	// Reason says why, for people: logs, the decision API, `gatectl sim`.
	Reason string `json:"reason"`
}

// Spent reports a give-up after gatectl's own retrying is over: a budget of at
// least one round is spent, or the failure is a transport failure whose kind gets
// no retries (Policy.Transport), judged hopeless rather than left to the caller.
// A give-up that is not Spent is a class gatectl does not retry (retry.retryOn,
// retry.rounds 0): whoever called gatectl may still retry it.
func (a Action) Spent() bool {
	return a.Kind == ActionGiveUp && a.Exhausted && (a.Rounds > 0 || a.Budget == BudgetTransport)
}

// MarshalJSON adds delayMs to the JSON form.
func (a Action) MarshalJSON() ([]byte, error) {
	type plain Action // drops this method
	return json.Marshal(struct {
		plain
		DelayMs int64 `json:"delayMs"`
	}{plain(a), a.Delay.Milliseconds()})
}

// UnmarshalJSON reads the JSON form back, delayMs included (a client of the
// decision API, such as `gatectl stats`, decodes it).
func (a *Action) UnmarshalJSON(b []byte) error {
	type plain Action
	var v struct {
		plain
		DelayMs int64 `json:"delayMs"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*a = Action(v.plain)
	a.Delay = time.Duration(v.DelayMs) * time.Millisecond
	return nil
}

// Request is one failure to plan for: the verdict, where it happened, and the
// session state the planner cannot know itself.
type Request struct {
	Verdict  engine.Verdict
	Provider string
	Model    string
	Session  string
	Turn     string
	Step     int
	// OneShot marks a turn that is this one request (the proxy names one for a
	// request without X-Gate-Turn): its budget lives in the planner's memory
	// only, never in the BudgetStore (the request lives in this process), and
	// the caller drops it with Planner.EndTurn when the request ends.
	OneShot bool
	// Failure is the failure the verdict is about; optional. The planner reads only
	// its SinceCapacityMs (the caller's evidence for MISLABELED, added to what the
	// planner remembers itself, see SinceCapacity) and hands it on to the
	// QuotaRouter for its events.
	Failure *engine.Failure
	// Admitted is when the gate's entry for the failed call counts from (zero:
	// unknown): its admission, or when it was sent if the caller reported that
	// later (gate.Ledger.Sent). The gate measures how late the provider counts
	// from it.
	Admitted time.Time
	// Reserved is what the gate reserved for the failed call (0: unknown).
	Reserved int64
	// Pool is the pool the request named ("": a route); handed on to the
	// QuotaRouter, where it governs the failover.
	Pool string
	// Usable, when set, says which routes the caller can send the request to;
	// handed on to the QuotaRouter, which fails over only to those.
	Usable func(engine.Route) bool
}

// QuotaFailure is a QUOTA failure as the planner hands it to a QuotaRouter.
type QuotaFailure struct {
	Session string
	Turn    string
	Step    int
	Route   engine.Route    // the route the request ran on
	Failure *engine.Failure // Request.Failure; may be nil
	// NativeSpent says the quick retries on the main budget are spent for this turn,
	// or that there are none to run (retry.rounds 0, a hint past retry.maxDelay).
	NativeSpent bool
	Pool        string                  // Request.Pool
	Usable      func(engine.Route) bool // Request.Usable; nil: any route
}

// QuotaAnswer is a QuotaRouter's answer. Kind is one of:
//
//   - ActionRetry: run the quick retries first (quota.nativeRetryFirstProviders);
//     the planner retries on the main budget and asks again with NativeSpent once it
//     is spent. Only an answer to NativeSpent=false.
//   - ActionFailover: retry at once on Route.
//   - ActionWaitLongTerm: wait Wait, then retry on the same route; Attempts counts
//     the long-term attempts of the session's entry, this one included.
//   - ActionGiveUp: quota retry is off for the session (the router passes: the
//     failure goes on as if there were no pools).
type QuotaAnswer struct {
	Kind     ActionKind
	Route    engine.Route
	Wait     time.Duration
	Attempts int
	Reason   string
	// Handle is opaque to the planner and returned as Action.Quota: whatever the
	// router needs back to run the wait (the pools' pool.Decision).
	Handle any
}

// QuotaRouter is the seam to the quota runtime and its route pools:
// the session's switch, exhaustion marks, failover, long-term waits. Without one, a
// QUOTA failure is given up, or retried on the curve when retry.retryOn lists it.
type QuotaRouter interface {
	// RouteQuota is called by Planner.Plan for a QUOTA failure: first with
	// NativeSpent=false unless the quick retries are known to be spent or
	// impossible, and again with NativeSpent=true after answering ActionRetry once
	// they are spent. With RetryOn listing QUOTA it is called only once the curve's
	// budget is spent (the native policy keeps its own retries first). It is called
	// with no planner lock held, concurrently; ctx is Plan's.
	RouteQuota(ctx context.Context, now time.Time, f QuotaFailure) QuotaAnswer
}
