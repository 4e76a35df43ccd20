package engine

import (
	"context"
	"time"
)

// RouteQuota implements RetryQuotaRouter: the Planner's QUOTA failures go through
// OnQuota's rules at the planner's now. The answer's Handle is the QuotaDecision;
// hand it to Wait for a long-term wait.
func (q *QuotaRetry) RouteQuota(ctx context.Context, now time.Time, f RetryQuotaFailure) RetryQuotaAnswer {
	d := q.onQuota(ctx, now, QuotaFailure{Session: f.Session, Route: f.Route, Turn: f.Turn, Step: f.Step, Failure: f.Failure, NativeSpent: f.NativeSpent})
	a := RetryQuotaAnswer{Route: d.Route, Reason: d.Reason, Handle: d}
	switch d.Action {
	case QuotaNativeRetry:
		a.Kind = ActionRetry
	case QuotaFailover:
		a.Kind = ActionFailover
	case QuotaWait:
		a.Kind, a.Wait, a.Attempts = ActionWaitLongTerm, d.Wait, d.Attempts
	default:
		a.Kind = ActionGiveUp
	}
	return a
}

var _ RetryQuotaRouter = (*QuotaRetry)(nil)
