package retry

// Plan's rules per class (rate limit, curve, mislabeled, quota) and the give-up answers.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine"
)

func (p *Planner) planRateLimit(now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	var cooldown time.Duration // 0: the gate's fallback
	if hint, ok := req.Verdict.RetryAfter(); ok && pol.RespectRetryAfter {
		cooldown = pol.ClampHint(hint)
	}
	var a Action
	switch {
	case !pol.Retries(engine.ClassRateLimit):
		a = retryNotRetried(engine.ClassRateLimit, "RATE_LIMIT is not retried (retry.retryOn)")
	case p.sink == nil:
		a = p.planCurve(now, c, req, "", false)
	case pol.Rounds == 0: // "never retry" holds for hinted rate limits too
		a = retryExhausted(BudgetMain, 0, req.Provider)
	default:
		budget, field, limit := retryBudgetFor(pol, cooldown > 0)
		round, ok := p.take(now, pol, req, field, limit)
		if !ok {
			a = retryExhausted(budget, limit, req.Provider)
			break
		}
		a = Action{Kind: ActionRetry, Budget: budget, Round: round, Rounds: limit, ViaGate: true,
			Reason: "cooldown recorded in the gate"}
		if cooldown > 0 {
			a.Reason = "cooldown recorded in the gate (" + cooldown.String() + " from the provider's hint)"
		} else {
			a.Reason = "cooldown recorded in the gate (no usable hint: the gate's fallback cooldown)"
		}
	}
	// Every rate limit starts the model's cooldown, whatever this session's budget:
	// the gate holds back every session on the model, and the learner learns from it.
	// It is recorded after the budget is saved, so the wait starts after the record.
	if p.sink != nil {
		statedT, statedR := engine.StatedLimits(req.Failure)
		p.sink.RateLimitedBy(now, req.Provider, req.Model, engine.RateLimit{
			RetryAfter: cooldown, Axis: engine.RateLimitAxis(req.Failure), Admitted: req.Admitted, Tokens: req.Reserved,
			StatedTokens: statedT, StatedRequests: statedR, StatedOutputTokens: engine.StatedOutputLimit(req.Failure), OutputInWords: engine.OutputLimitInWords(req.Failure)})
	}
	return a
}

// retryBudgetFor picks the budget a retry spends: the hint budget when the wait is
// the provider's own hint and Policy.HintRounds does not follow Rounds, else the
// main budget.
func retryBudgetFor(pol *Policy, hintDriven bool) (name string, field retryBudgetField, limit int) {
	if hintDriven && pol.HintRounds != FollowRounds {
		return BudgetHint, retryBudgetHint, pol.HintRounds
	}
	return BudgetMain, retryBudgetMain, pol.Rounds
}

// planCurve plans a retry on the main budget (or, for a wait that is the
// provider's hint, the hint budget): the hint, the hintless schedule or the
// jittered curve. prefix, when set, starts the reason. mainOnly keeps a hinted
// retry on the main budget (the quick retries of QUOTA, which the quota runtime
// counts on the main budget).
func (p *Planner) planCurve(now time.Time, c *retryConf, req *Request, prefix string, mainOnly bool) Action {
	pol := &c.policy
	cls := req.Verdict.Class
	if pol.Rounds == 0 {
		return retryNotRetried(cls, "retry.rounds is 0: gatectl does not retry")
	}
	_, hinted := req.Verdict.RetryAfter()
	budget, field, limit := retryBudgetFor(pol, hinted && pol.RespectRetryAfter && !mainOnly)
	round, ok := p.take(now, pol, req, field, limit)
	if !ok {
		return retryExhausted(budget, limit, req.Provider)
	}
	d, why := p.curveWait(pol, req, round)
	if prefix == "" {
		prefix = retryClassName(cls)
	}
	return Action{Kind: ActionRetry, Delay: d, Budget: budget, Round: round, Rounds: limit,
		Reason: retryReason(prefix, req.Provider, round, limit, d, why)}
}

// curveWait is the wait of a retry on round of the main budget, and why: the
// provider's hint, the hintless schedule or the jittered curve.
func (p *Planner) curveWait(pol *Policy, req *Request, round int) (d time.Duration, why string) {
	cls := req.Verdict.Class
	hint, hinted := req.Verdict.RetryAfter()
	switch {
	case hinted && pol.RespectRetryAfter:
		var capped bool
		d, capped = pol.hintWait(hint)
		why = "the provider's hint"
		if capped {
			why = fmt.Sprintf("the provider's hint %s, capped at retry.maxDelay", hint)
		} else {
			d = spreadHint(pol, req, round, d, pol.MaxDelay)
		}
	case !hinted && pol.HintlessBackoff && (cls == engine.ClassOverloaded || cls == engine.ClassServer):
		d = spreadSchedule(pol, req, round, pol.doublingWait(pol.HintlessBaseDelay, round), pol.HintClamp.Max)
		why = "no hint: hintless backoff"
	default:
		d = p.jittered(pol, round)
		why = "backoff curve"
	}
	return d, why
}

// planTransport plans a retry of a transport failure whose kind has a budget of its
// own (Policy.Transport): limit retries of that kind at most, each also spending a
// round of the main budget and waiting on the curve. A limit of 0 gives up at once.
func (p *Planner) planTransport(now time.Time, c *retryConf, req *Request, kind string, limit int) Action {
	pol := &c.policy
	cls := req.Verdict.Class
	if pol.Rounds == 0 {
		return retryNotRetried(cls, "retry.rounds is 0: gatectl does not retry")
	}
	what := transportKindName(kind)
	if limit == 0 {
		return Action{Kind: ActionGiveUp, Budget: BudgetTransport, Exhausted: true,
			Reason: fmt.Sprintf("%s on %s: retry.transport.%s is 0: giving up at once", what, req.Provider, kind)}
	}
	round, kindRound, ok, kindSpent := p.takeTransport(now, pol, req, kind, limit)
	switch {
	case !ok && kindSpent:
		return Action{Kind: ActionGiveUp, Budget: BudgetTransport, Round: limit, Rounds: limit, Exhausted: true,
			Reason: fmt.Sprintf("%s on %s: retry.transport.%s spent: %d of %d retries this turn", what, req.Provider, kind, limit, limit)}
	case !ok:
		return retryExhausted(BudgetMain, pol.Rounds, req.Provider)
	}
	d, why := p.curveWait(pol, req, round)
	rounds := min(limit, kindRound+pol.Rounds-round) // what is left of the tighter budget, plus what was spent
	return Action{Kind: ActionRetry, Delay: d, Budget: BudgetTransport, Round: kindRound, Rounds: rounds,
		Reason: retryReason(retryClassName(cls)+" ("+what+")", req.Provider, kindRound, rounds, d, why+", retry.transport."+kind)}
}

// transportKindName names a transport failure kind for reasons.
func transportKindName(kind string) string {
	switch kind {
	case "dns":
		return "DNS failure"
	case "refused":
		return "connection refused"
	case "reset":
		return "connection reset"
	case "timeout":
		return "timeout"
	}
	return kind
}

// retryReason renders "PREFIX on PROVIDER: retry N/M in D (WHY)" without fmt's
// boxing: this is the planner's hot path.
func retryReason(prefix, provider string, round, rounds int, d time.Duration, why string) string {
	var buf [128]byte
	b := append(buf[:0], prefix...)
	b = append(b, " on "...)
	b = append(b, provider...)
	b = append(b, ": retry "...)
	b = strconv.AppendInt(b, int64(round), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(rounds), 10)
	b = append(b, " in "...)
	b = append(b, d.String()...)
	b = append(b, " ("...)
	b = append(b, why...)
	b = append(b, ')')
	return string(b)
}

func (p *Planner) planMislabeled(now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	m := pol.Mislabeled
	if !m.Enabled {
		return retryNotRetried(engine.ClassMislabeled, "a 400 that may be mislabeled, but retry.mislabeled is off: treated as INVALID_REQUEST")
	}
	since, ok := p.sinceCapacity(now, req)
	if !ok || since > m.Evidence {
		return retryNotRetried(engine.ClassMislabeled, fmt.Sprintf(
			"no capacity failure on %s within retry.mislabeled.evidence %s: a real INVALID_REQUEST", req.Provider, m.Evidence))
	}
	if m.Rounds == 0 {
		return retryExhausted(BudgetMislabeled, 0, req.Provider)
	}
	round, ok := p.take(now, pol, req, retryBudgetMislabeled, m.Rounds)
	if !ok {
		return retryExhausted(BudgetMislabeled, m.Rounds, req.Provider)
	}
	var d time.Duration
	why := "circuit replay backoff"
	// The sessions a saturated gateway refused together come back apart.
	if hint, ok := req.Verdict.RetryAfter(); ok && pol.RespectRetryAfter {
		d = spreadHint(pol, req, round, pol.ClampHint(hint), pol.HintClamp.Max)
		why = "the replay's own hint"
	} else {
		d = spreadSchedule(pol, req, round, pol.doublingWait(m.InitialDelay, round), pol.HintClamp.Max)
	}
	return Action{Kind: ActionRetry, Delay: d, Budget: BudgetMislabeled, Round: round, Rounds: m.Rounds,
		Reason: fmt.Sprintf("mislabeled 400 on %s (capacity failure %s ago): retry %d/%d in %s (%s)",
			req.Provider, since.Round(time.Second), round, m.Rounds, d, why)}
}

func (p *Planner) planQuota(ctx context.Context, now time.Time, c *retryConf, req *Request) Action {
	pol := &c.policy
	hint, hinted := req.Verdict.RetryAfter()
	// A hint over the cap asks for a longer pause than a quick retry may take: the
	// failure is handed to the quota runtime, not retried.
	noQuick := pol.Rounds == 0 || (hinted && pol.RespectRetryAfter && pol.ClampHint(hint) > pol.MaxDelay)
	spent := false // the quick retries were tried and their budget is spent
	quick := func() (Action, bool) {
		if noQuick {
			return Action{}, false
		}
		a := p.planCurve(now, c, req, "QUOTA (quick retry)", true)
		spent = a.Exhausted
		return a, a.Kind == ActionRetry
	}
	// A user who lists QUOTA in retryOn asked for the curve first: its retries run
	// before the quota runtime wakes.
	if pol.Retries(engine.ClassQuota) {
		if a, ok := quick(); ok {
			return a
		}
	}
	if p.quota == nil {
		return p.quotaGiveUp(pol, req, spent, "no quota runtime (pools) to fail over or wait")
	}
	f := QuotaFailure{Session: req.Session, Turn: req.Turn, Step: req.Step, Failure: req.Failure,
		Route: engine.Route{Provider: req.Provider, Model: req.Model}, NativeSpent: noQuick || spent, Pool: req.Pool, Usable: req.Usable}
	ans := p.quota.RouteQuota(ctx, now, f)
	if ans.Kind == ActionRetry && !f.NativeSpent {
		if a, ok := quick(); ok {
			return a
		}
		f.NativeSpent = true
		ans = p.quota.RouteQuota(ctx, now, f)
	}
	switch ans.Kind {
	case ActionFailover:
		to := ans.Route
		return Action{Kind: ActionFailover, Route: &to, Quota: ans.Handle,
			Reason: fmt.Sprintf("QUOTA: the allowance on %s is spent: failing over to %s (%s)", req.Provider, to, ans.Reason)}
	case ActionWaitLongTerm:
		n, _ := p.take(now, pol, req, retryBudgetLongTerm, -1) // persist before wait
		return Action{Kind: ActionWaitLongTerm, Delay: ans.Wait, Budget: BudgetLongTerm, Round: max(ans.Attempts, n), Quota: ans.Handle,
			Reason: fmt.Sprintf("QUOTA: the allowance on %s is spent: long-term attempt %d in %s (%s)", req.Provider, max(ans.Attempts, n), ans.Wait, ans.Reason)}
	default: // ActionGiveUp ("pass"), or an ActionRetry the quick budget cannot serve
		why := ans.Reason
		if why == "" {
			why = "the quota runtime passed"
		}
		return p.quotaGiveUp(pol, req, spent, why)
	}
}

func (p *Planner) quotaGiveUp(pol *Policy, req *Request, spent bool, why string) Action {
	if spent {
		a := retryExhausted(BudgetMain, pol.Rounds, req.Provider)
		a.Reason += "; " + why
		return a
	}
	return retryNotRetried(engine.ClassQuota, fmt.Sprintf("QUOTA: the allowance on %s is spent; %s", req.Provider, why))
}

func retryNotRetried(c engine.Class, reason string) Action {
	return Action{Kind: ActionGiveUp, Class: c, Reason: reason}
}

func retryExhausted(budget string, rounds int, provider string) Action {
	what := "retry budget"
	switch budget {
	case BudgetMislabeled:
		what = "mislabeled-400 budget"
	case BudgetHint:
		what = "hint budget (retry.hintRounds)"
	}
	return Action{Kind: ActionGiveUp, Budget: budget, Round: rounds, Rounds: rounds, Exhausted: true,
		Reason: fmt.Sprintf("%s spent: %d of %d rounds on %s this turn", what, rounds, rounds, provider)}
}

func retryClassName(c engine.Class) string {
	if c == "" {
		return "unclassified failure"
	}
	return string(c)
}
