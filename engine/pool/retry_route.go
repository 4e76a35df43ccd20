package pool

import (
	"context"
	"github.com/gatectl/gatectl/engine/retry"
	"time"
)

// RouteQuota implements retry.QuotaRouter: the Planner's QUOTA failures go through
// OnQuota's rules at the planner's now. The answer's Handle is the Decision;
// hand it to Wait for a long-term wait.
func (q *Router) RouteQuota(ctx context.Context, now time.Time, f retry.QuotaFailure) retry.QuotaAnswer {
	d := q.onQuota(ctx, now, QuotaFailure{Session: f.Session, Route: f.Route, Turn: f.Turn, Step: f.Step, Failure: f.Failure, NativeSpent: f.NativeSpent,
		Pool: f.Pool, Usable: f.Usable})
	a := retry.QuotaAnswer{Route: d.Route, Reason: d.Reason, Handle: d}
	switch d.Action {
	case ActionNativeRetry:
		a.Kind = retry.ActionRetry
	case ActionFailover:
		a.Kind = retry.ActionFailover
	case ActionWait:
		a.Kind, a.Wait, a.Attempts = retry.ActionWaitLongTerm, d.Wait, d.Attempts
	default:
		a.Kind = retry.ActionGiveUp
	}
	return a
}

var _ retry.QuotaRouter = (*Router)(nil)
