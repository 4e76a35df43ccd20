package retry

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var retryT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func retryMs(ms int64) *int64 { return &ms }

// retrySinkCall is one RateLimited call.
type retrySinkCall struct {
	at              time.Time
	provider, model string
	retryAfter      time.Duration
}

// retrySink records RateLimited calls. onCall, when set, runs inside each call.
type retrySink struct {
	mu     sync.Mutex
	calls  []retrySinkCall
	onCall func(retrySinkCall)
}

func (s *retrySink) RateLimitedBy(now time.Time, provider, model string, sig engine.RateLimit) {
	c := retrySinkCall{now, provider, model, sig.RetryAfter}
	if s.onCall != nil {
		s.onCall(c)
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// retryRouter answers QUOTA failures from a script: answer(f) decides; every call is
// recorded.
type retryRouter struct {
	mu     sync.Mutex
	calls  []QuotaFailure
	answer func(f QuotaFailure) QuotaAnswer
}

func (r *retryRouter) RouteQuota(ctx context.Context, now time.Time, f QuotaFailure) QuotaAnswer {
	r.mu.Lock()
	r.calls = append(r.calls, f)
	r.mu.Unlock()
	return r.answer(f)
}

// retryReq builds a request in session s1, turn t1, step 1 on provider p, model m.
func retryReq(c engine.Class, hintMs *int64, edits ...func(*Request)) Request {
	r := Request{Verdict: engine.Verdict{Class: c, RetryAfterMs: hintMs, By: "test"},
		Provider: "p", Model: "m", Session: "s1", Turn: "t1", Step: 1}
	for _, e := range edits {
		e(&r)
	}
	return r
}

func retryOn(provider string) func(*Request) {
	return func(r *Request) { r.Provider = provider }
}
func retryTurn(turn string, step int) func(*Request) {
	return func(r *Request) { r.Turn, r.Step = turn, step }
}
func retrySession(s string) func(*Request) { return func(r *Request) { r.Session = s } }

// retryStep is one failure fed to the planner at t0+at and what it must answer.
type retryStep struct {
	at        time.Duration
	req       Request
	kind      ActionKind
	delay     time.Duration
	round     int
	rounds    int
	budget    string
	exhausted bool
	viaGate   bool
	reason    string // substring of the reason
}

type retryCase struct {
	name   string
	policy func(p *Policy)
	noSink bool
	rand   []float64 // jitter draws; nil: no Rand
	router func(f QuotaFailure) QuotaAnswer
	steps  []retryStep
	// sink, when not nil, is every RateLimited call expected, in order.
	sink []retrySinkCall
	// routerCalls, when not nil, is every RouteQuota call expected (NativeSpent only).
	routerCalls []bool
	// spender runs the case on a store that spends rounds itself (BudgetSpender).
	spender bool
}

// spendingStore is a MemoryBudgetStore that spends rounds itself, the way a
// store shared by several processes does (BudgetSpend.Apply under its lock).
type spendingStore struct {
	MemoryBudgetStore
	mu     sync.Mutex
	spends int
}

func (s *spendingStore) Spend(k BudgetKey, sp BudgetSpend) (Budget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spends++
	cur, found, _ := s.Load(k)
	b, ok := sp.Apply(cur, found)
	if ok {
		_ = s.Save(k, b)
	}
	return b, ok, nil
}

func runRetryCase(t *testing.T, tc retryCase) {
	t.Helper()
	pol := DefaultPolicy()
	// The case tables count hinted retries on the main budget unless a case turns
	// the hint budget on (TestPlannerHintBudget).
	pol.HintRounds = FollowRounds
	if tc.policy != nil {
		tc.policy(&pol)
	}
	sink := &retrySink{}
	opts := PlannerOptions{Sink: sink}
	if tc.noSink {
		opts.Sink = nil
	}
	var spender *spendingStore
	if tc.spender {
		spender = &spendingStore{}
		opts.Store = spender
	}
	if tc.rand != nil {
		opts.Rand = &retrySeqRand{vals: tc.rand}
	}
	var router *retryRouter
	if tc.router != nil {
		router = &retryRouter{answer: tc.router}
		opts.Quota = router
	}
	pl, err := NewPlanner(pol, opts)
	if err != nil {
		t.Fatalf("NewPlanner: %v", err)
	}
	for i, st := range tc.steps {
		a := pl.Plan(context.Background(), retryT0.Add(st.at), st.req)
		// A table gives a hinted wait as the hint, and a hintless or replay
		// backoff as its schedule; the plan spreads it past that by the
		// request's own share (spreadHint, checked on its own in
		// TestHintedRetriesSpread and TestMislabeledRetriesSpread).
		var spread time.Duration
		switch {
		case strings.HasSuffix(a.Reason, "(the provider's hint)"):
			spread = spreadHint(&pol, &st.req, st.round, st.delay, pol.MaxDelay)
		case strings.HasSuffix(a.Reason, "(the replay's own hint)"):
			spread = spreadHint(&pol, &st.req, st.round, st.delay, pol.HintClamp.Max)
		case strings.HasSuffix(a.Reason, "(no hint: hintless backoff)"), strings.HasSuffix(a.Reason, "(circuit replay backoff)"):
			spread = spreadSchedule(&pol, &st.req, st.round, st.delay, pol.HintClamp.Max)
		}
		if spread != 0 {
			st.reason = strings.Replace(st.reason, "in "+st.delay.String(), "in "+spread.String(), 1)
			st.delay = spread
		}
		if a.Kind != st.kind || a.Delay != st.delay || a.Round != st.round || a.Rounds != st.rounds ||
			a.Budget != st.budget || a.Exhausted != st.exhausted || a.ViaGate != st.viaGate || a.Class != st.req.Verdict.Class {
			t.Errorf("step %d (%s): got %s delay=%s round=%d/%d budget=%q exhausted=%v viaGate=%v class=%s\n"+
				"                 want %s delay=%s round=%d/%d budget=%q exhausted=%v viaGate=%v\n  reason: %s",
				i, st.req.Verdict.Class, a.Kind, a.Delay, a.Round, a.Rounds, a.Budget, a.Exhausted, a.ViaGate, a.Class,
				st.kind, st.delay, st.round, st.rounds, st.budget, st.exhausted, st.viaGate, a.Reason)
		}
		if !strings.Contains(a.Reason, st.reason) {
			t.Errorf("step %d: reason %q does not contain %q", i, a.Reason, st.reason)
		}
	}
	if spender != nil && spender.spends == 0 && slices.ContainsFunc(tc.steps, func(st retryStep) bool { return st.kind == ActionRetry }) {
		t.Error("the planner never spent through the store's Spend")
	}
	if tc.sink != nil {
		if len(sink.calls) != len(tc.sink) {
			t.Fatalf("sink got %d calls %+v, want %d %+v", len(sink.calls), sink.calls, len(tc.sink), tc.sink)
		}
		for i := range tc.sink {
			if sink.calls[i] != tc.sink[i] {
				t.Errorf("sink call %d = %+v, want %+v", i, sink.calls[i], tc.sink[i])
			}
		}
	}
	if tc.routerCalls != nil {
		var got []bool
		for _, c := range router.calls {
			got = append(got, c.NativeSpent)
		}
		if len(got) != len(tc.routerCalls) {
			t.Fatalf("router calls (NativeSpent) = %v, want %v", got, tc.routerCalls)
		}
		for i := range got {
			if got[i] != tc.routerCalls[i] {
				t.Errorf("router calls (NativeSpent) = %v, want %v", got, tc.routerCalls)
				break
			}
		}
	}
}

func TestPlannerRateLimit(t *testing.T) {
	s := time.Second
	rl := engine.ClassRateLimit
	gate := "cooldown recorded in the gate"
	tests := []retryCase{
		{
			name:  "hint goes to the gate, retry now",
			steps: []retryStep{{req: retryReq(rl, retryMs(28000)), kind: ActionRetry, round: 1, rounds: 8, budget: "retry", viaGate: true, reason: gate + " (28s from the provider's hint)"}},
			sink:  []retrySinkCall{{retryT0, "p", "m", 28 * s}},
		},
		{
			name:  "no hint: 0 for the gate's fallback",
			steps: []retryStep{{req: retryReq(rl, nil), kind: ActionRetry, round: 1, rounds: 8, budget: "retry", viaGate: true, reason: "fallback cooldown"}},
			sink:  []retrySinkCall{{retryT0, "p", "m", 0}},
		},
		{
			name: "hints are clamped to [1s, 300s]",
			steps: []retryStep{
				{req: retryReq(rl, retryMs(6)), kind: ActionRetry, round: 1, rounds: 8, budget: "retry", viaGate: true, reason: gate},
				{at: s, req: retryReq(rl, retryMs(3_600_000)), kind: ActionRetry, round: 2, rounds: 8, budget: "retry", viaGate: true, reason: gate},
				{at: 2 * s, req: retryReq(rl, retryMs(-5)), kind: ActionRetry, round: 3, rounds: 8, budget: "retry", viaGate: true, reason: gate},
			},
			sink: []retrySinkCall{{retryT0, "p", "m", s}, {retryT0.Add(s), "p", "m", 300 * s}, {retryT0.Add(2 * s), "p", "m", s}},
		},
		{
			name:   "respectRetryAfter off: the gate's fallback",
			policy: func(p *Policy) { p.RespectRetryAfter = false },
			steps:  []retryStep{{req: retryReq(rl, retryMs(28000)), kind: ActionRetry, round: 1, rounds: 8, budget: "retry", viaGate: true, reason: gate}},
			sink:   []retrySinkCall{{retryT0, "p", "m", 0}},
		},
		{
			name:   "budget spent: give up, but the gate still hears of it",
			policy: func(p *Policy) { p.Rounds = 2 },
			steps: []retryStep{
				{req: retryReq(rl, retryMs(1000)), kind: ActionRetry, round: 1, rounds: 2, budget: "retry", viaGate: true, reason: gate},
				{req: retryReq(rl, retryMs(1000)), kind: ActionRetry, round: 2, rounds: 2, budget: "retry", viaGate: true, reason: gate},
				{req: retryReq(rl, retryMs(1000)), kind: ActionGiveUp, round: 2, rounds: 2, budget: "retry", exhausted: true, reason: "retry budget spent: 2 of 2 rounds on p this turn"},
			},
			sink: []retrySinkCall{{retryT0, "p", "m", s}, {retryT0, "p", "m", s}, {retryT0, "p", "m", s}},
		},
		{
			name:   "not in retryOn: give up, the gate still hears of it",
			policy: func(p *Policy) { p.RetryOn = []engine.Class{engine.ClassServer} },
			steps:  []retryStep{{req: retryReq(rl, retryMs(5000)), kind: ActionGiveUp, reason: "RATE_LIMIT is not retried (retry.retryOn)"}},
			sink:   []retrySinkCall{{retryT0, "p", "m", 5 * s}},
		},
		{
			name:   "no sink: waits on the curve like the others",
			noSink: true,
			steps: []retryStep{
				{req: retryReq(rl, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry", reason: "RATE_LIMIT on p: retry 1/8 in 2s (backoff curve)"},
				{req: retryReq(rl, retryMs(12000)), kind: ActionRetry, delay: 12 * s, round: 2, rounds: 8, budget: "retry", reason: "provider's hint"},
			},
		},
		{
			name: "empty model passes through: the provider cools down",
			steps: []retryStep{{req: retryReq(rl, retryMs(2000), func(r *Request) { r.Model = "" }),
				kind: ActionRetry, round: 1, rounds: 8, budget: "retry", viaGate: true, reason: gate}},
			sink: []retrySinkCall{{retryT0, "p", "", 2 * s}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
	}
}

func TestPlannerCurve(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	tests := []retryCase{
		{
			name: "hint under the cap wins",
			steps: []retryStep{
				{req: retryReq(engine.ClassOverloaded, retryMs(12000)), kind: ActionRetry, delay: 12 * s, round: 1, rounds: 8, budget: "retry", reason: "OVERLOADED on p: retry 1/8 in 12s (the provider's hint)"},
				{req: retryReq(engine.ClassServer, retryMs(60000)), kind: ActionRetry, delay: 60 * s, round: 2, rounds: 8, budget: "retry", reason: "the provider's hint"},
			},
		},
		{
			name: "hint over the cap waits the cap",
			steps: []retryStep{{req: retryReq(engine.ClassOverloaded, retryMs(120000)), kind: ActionRetry, delay: 60 * s, round: 1, rounds: 8, budget: "retry",
				reason: "retry 1/8 in 1m0s (the provider's hint 2m0s, capped at retry.maxDelay)"}},
		},
		{
			name:  "short hint is clamped up to 1s",
			steps: []retryStep{{req: retryReq(engine.ClassTimeout, retryMs(6)), kind: ActionRetry, delay: s, round: 1, rounds: 8, budget: "retry"}},
		},
		{
			name:   "respectRetryAfter off: the curve",
			policy: func(p *Policy) { p.RespectRetryAfter = false },
			steps:  []retryStep{{req: retryReq(engine.ClassOverloaded, retryMs(12000)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry", reason: "backoff curve"}},
		},
		{
			name: "no hint: the jittered curve, draws in order",
			rand: []float64{0, 0.5, 0.75, 0.999999},
			steps: []retryStep{
				{req: retryReq(engine.ClassTransport, nil), kind: ActionRetry, delay: 1600 * ms, round: 1, rounds: 8, budget: "retry", reason: "TRANSPORT on p: retry 1/8 in 1.6s (backoff curve)"},
				{req: retryReq(engine.ClassTimeout, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassTransport, nil), kind: ActionRetry, delay: 8800 * ms, round: 3, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassTransport, retryMs(3000)), kind: ActionRetry, delay: 3 * s, round: 4, rounds: 8, budget: "retry"}, // hints draw nothing
				{req: retryReq(engine.ClassTransport, nil), kind: ActionRetry, delay: 38399987200 * time.Nanosecond, round: 5, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassTransport, nil), kind: ActionRetry, delay: 48 * s, round: 6, rounds: 8, budget: "retry"}, // draw 0 at the cap
			},
		},
		{
			name: "hintless capacity failures with hintlessBackoff off: the curve",
			steps: []retryStep{
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry", reason: "backoff curve"},
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry", reason: "backoff curve"},
			},
		},
		{
			name:   "hintlessBackoff on: 5s·2ⁿ⁻¹ for OVERLOADED and SERVER, not for TIMEOUT",
			policy: func(p *Policy) { p.HintlessBackoff = true; p.Rounds = 10 },
			rand:   []float64{0.5},
			steps: []retryStep{
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 5 * s, round: 1, rounds: 10, budget: "retry", reason: "no hint: hintless backoff"},
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 10 * s, round: 2, rounds: 10, budget: "retry", reason: "hintless"},
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 20 * s, round: 3, rounds: 10, budget: "retry"},
				{req: retryReq(engine.ClassTimeout, nil), kind: ActionRetry, delay: 16 * s, round: 4, rounds: 10, budget: "retry", reason: "backoff curve"},
				{req: retryReq(engine.ClassOverloaded, retryMs(7000)), kind: ActionRetry, delay: 7 * s, round: 5, rounds: 10, budget: "retry", reason: "hint"},
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 160 * s, round: 6, rounds: 10, budget: "retry"}, // over maxDelay: the cooldown-retry design's own range
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 300 * s, round: 7, rounds: 10, budget: "retry"}, // clamped to hintClamp.max
			},
		},
		{
			name: "never retried by default",
			steps: []retryStep{
				{req: retryReq(engine.ClassAuth, nil), kind: ActionGiveUp, reason: "AUTH is not retried (retry.retryOn)"},
				{req: retryReq(engine.ClassInvalidRequest, retryMs(1000)), kind: ActionGiveUp, reason: "INVALID_REQUEST is not retried"},
				{req: retryReq(engine.ClassContext, nil), kind: ActionGiveUp, reason: "CONTEXT is not retried"},
				{req: retryReq(engine.ClassUnknown, nil), kind: ActionGiveUp, reason: "UNKNOWN is not retried"},
				{req: retryReq("", nil), kind: ActionGiveUp, reason: "unclassified failure is not retried"},
				{req: retryReq(engine.ClassQuota, nil), kind: ActionGiveUp, reason: "QUOTA: the allowance on p is spent; no quota runtime"},
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"}, // none of the above spent a round
			},
		},
		{
			name:   "a class the user added is retried",
			policy: func(p *Policy) { p.RetryOn = append(p.RetryOn, engine.ClassAuth, engine.ClassUnknown) },
			steps: []retryStep{
				{req: retryReq(engine.ClassAuth, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry", reason: "AUTH on p"},
				{req: retryReq(engine.ClassUnknown, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
			},
		},
		{
			name:   "a class the user removed is not",
			policy: func(p *Policy) { p.RetryOn = []engine.Class{engine.ClassRateLimit} },
			steps:  []retryStep{{req: retryReq(engine.ClassServer, nil), kind: ActionGiveUp, reason: "SERVER is not retried"}},
		},
		{
			name:   "rounds 0: never retries",
			policy: func(p *Policy) { p.Rounds = 0 },
			steps: []retryStep{
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionGiveUp, reason: "retry.rounds is 0"},
				{req: retryReq(engine.ClassRateLimit, nil), kind: ActionGiveUp, budget: "retry", exhausted: true, reason: "0 of 0"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
	}
}

func TestPlannerBudgets(t *testing.T) {
	s := time.Second
	tests := []retryCase{
		{
			name:   "shared across the turn's steps, spent, reset on a new turn",
			policy: func(p *Policy) { p.Rounds = 3 },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 3, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 1)), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 3, budget: "retry"},
				{req: retryReq(engine.ClassTimeout, nil, retryTurn("t1", 2)), kind: ActionRetry, delay: 8 * s, round: 3, rounds: 3, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 3)), kind: ActionGiveUp, round: 3, rounds: 3, budget: "retry", exhausted: true, reason: "retry budget spent: 3 of 3 rounds on p this turn"},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t2", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 3, budget: "retry"},
			},
		},
		{
			name:   "per provider and per session",
			policy: func(p *Policy) { p.Rounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true},
				{req: retryReq(engine.ClassServer, nil, retryOn("q")), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, retrySession("s2")), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, func(r *Request) { r.Model = "other" }), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true}, // models of a provider share it
			},
		},
		{
			name:   "acrossSteps false: a new step starts afresh",
			policy: func(p *Policy) { p.Rounds = 1; p.AcrossSteps = false },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 1)), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 2)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
			},
		},
		{
			name:   "a going-back turn id is a new turn too",
			policy: func(p *Policy) { p.Rounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, nil, retryTurn("t2", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil, retryTurn("t1", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
		// The same answers from a store that spends rounds itself (shared by several processes).
		tc.spender = true
		t.Run(tc.name+" (BudgetSpender)", func(t *testing.T) { runRetryCase(t, tc) })
	}
}

// TestPlannerTransport: a transport failure's kind bounds its retries
// (retry.transport): a name that does not resolve is given up at once, a refused
// connection after one retry, a reset follows the curve.
func TestPlannerTransport(t *testing.T) {
	s := time.Second
	tr := engine.ClassTransport
	kind := func(k string) func(*Request) {
		return func(r *Request) { r.Failure = &engine.Failure{ErrorKind: k} }
	}
	req := func(k string) Request { return retryReq(tr, nil, kind(k)) }
	tests := []retryCase{
		{
			name: "dns: given up at once",
			steps: []retryStep{{req: req("dns"), kind: ActionGiveUp, budget: "transport", exhausted: true,
				reason: "DNS failure on p: retry.transport.dns is 0: giving up at once"}},
		},
		{
			name: "refused: one retry on the curve, then given up",
			steps: []retryStep{
				{req: req("refused"), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "transport",
					reason: "TRANSPORT (connection refused) on p: retry 1/1 in 2s (backoff curve, retry.transport.refused)"},
				{at: 2 * s, req: req("refused"), kind: ActionGiveUp, round: 1, rounds: 1, budget: "transport", exhausted: true,
					reason: "connection refused on p: retry.transport.refused spent: 1 of 1 retries this turn"},
				// the refused retry spent a main round too
				{at: 3 * s, req: req("reset"), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
			},
		},
		{
			name:   "reset: the whole curve",
			policy: func(p *Policy) { p.Rounds = 3 },
			steps: []retryStep{
				{req: req("reset"), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 3, budget: "retry"},
				{req: req("reset"), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 3, budget: "retry"},
				{req: req("reset"), kind: ActionRetry, delay: 8 * s, round: 3, rounds: 3, budget: "retry"},
				{req: req("reset"), kind: ActionGiveUp, round: 3, rounds: 3, budget: "retry", exhausted: true},
			},
		},
		{
			name: "a TIMEOUT of kind timeout gets one retry by default; no kind follows the curve",
			steps: []retryStep{
				{req: retryReq(engine.ClassTimeout, nil, kind("timeout")), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "transport"},
				{req: retryReq(engine.ClassTimeout, nil, kind("timeout")), kind: ActionGiveUp, round: 1, rounds: 1, budget: "transport", exhausted: true},
				{req: retryReq(tr, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
			},
		},
		{
			name:   "a TIMEOUT at retry.transport.timeout follow follows the curve",
			policy: func(p *Policy) { p.Transport.Timeout = FollowRounds },
			steps: []retryStep{
				{req: retryReq(engine.ClassTimeout, nil, kind("timeout")), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"},
				{req: retryReq(tr, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
			},
		},
		{
			name:   "the main budget bounds a kind's: spent main, kind left",
			policy: func(p *Policy) { p.Rounds = 1; p.Transport.Refused = 3 },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: req("refused"), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true},
			},
		},
		{
			name:   "a kind's budget is counted apart and shows what is left of the tighter one",
			policy: func(p *Policy) { p.Rounds = 3; p.Transport.Refused = 5 },
			steps: []retryStep{
				{req: req("reset"), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 3, budget: "retry"},
				{req: req("refused"), kind: ActionRetry, delay: 4 * s, round: 1, rounds: 2, budget: "transport"},
				{req: req("refused"), kind: ActionRetry, delay: 8 * s, round: 2, rounds: 2, budget: "transport"},
				{req: req("refused"), kind: ActionGiveUp, round: 3, rounds: 3, budget: "retry", exhausted: true},
			},
		},
		{
			name:   "a new turn starts the kind's budget afresh",
			policy: func(p *Policy) { p.Transport.Refused = 1 },
			steps: []retryStep{
				{req: req("refused"), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "transport"},
				{req: req("refused"), kind: ActionGiveUp, round: 1, rounds: 1, budget: "transport", exhausted: true},
				{req: retryReq(tr, nil, kind("refused"), retryTurn("t2", 1)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "transport"},
			},
		},
		{
			name:   "dns at FollowRounds: the curve",
			policy: func(p *Policy) { p.Transport.DNS = FollowRounds },
			steps:  []retryStep{{req: req("dns"), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"}},
		},
		{
			name:   "retry.rounds 0: not retried, not a spent budget",
			policy: func(p *Policy) { p.Rounds = 0 },
			steps:  []retryStep{{req: req("refused"), kind: ActionGiveUp, reason: "retry.rounds is 0"}},
		},
		{
			name:   "a class not in retryOn is not retried, whatever its kind",
			policy: func(p *Policy) { p.RetryOn = []engine.Class{engine.ClassServer} },
			steps:  []retryStep{{req: req("refused"), kind: ActionGiveUp, reason: "TRANSPORT is not retried"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
		// The same answers from a store that spends rounds itself (shared by several processes).
		tc.spender = true
		t.Run(tc.name+" (BudgetSpender)", func(t *testing.T) { runRetryCase(t, tc) })
	}
}

func TestPlannerMislabeled(t *testing.T) {
	s := time.Second
	ml := engine.ClassMislabeled
	since := func(d time.Duration) func(*Request) {
		return func(r *Request) { r.Failure = &engine.Failure{Status: 400, SinceCapacityMs: retryMs(d.Milliseconds())} }
	}
	rl := func(at time.Duration, provider string, round ...int) retryStep {
		r := 1
		if len(round) > 0 {
			r = round[0]
		}
		return retryStep{at: at, req: retryReq(engine.ClassRateLimit, retryMs(1000), retryOn(provider)), kind: ActionRetry, round: r, rounds: 8, budget: "retry", viaGate: true}
	}
	tests := []retryCase{
		{
			name:  "no capacity failure on record: a real INVALID_REQUEST",
			steps: []retryStep{{req: retryReq(ml, nil), kind: ActionGiveUp, reason: "no capacity failure on p within retry.mislabeled.evidence 10m0s: a real INVALID_REQUEST"}},
		},
		{
			name: "after a rate limit: its own budget, 15s doubling, then spent",
			steps: []retryStep{
				rl(0, "p"),
				{at: time.Minute, req: retryReq(ml, nil), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled",
					reason: "mislabeled 400 on p (capacity failure 1m0s ago): retry 1/3 in 15s (circuit replay backoff)"},
				{at: 2 * time.Minute, req: retryReq(ml, nil), kind: ActionRetry, delay: 30 * s, round: 2, rounds: 3, budget: "mislabeled"},
				{at: 3 * time.Minute, req: retryReq(ml, nil), kind: ActionRetry, delay: 60 * s, round: 3, rounds: 3, budget: "mislabeled"},
				{at: 4 * time.Minute, req: retryReq(ml, nil), kind: ActionGiveUp, round: 3, rounds: 3, budget: "mislabeled", exhausted: true, reason: "mislabeled-400 budget spent: 3 of 3"},
				// the main budget was not touched by the mislabeled rounds
				{at: 5 * time.Minute, req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
			},
		},
		{
			name: "its own hint wins, clamped",
			steps: []retryStep{
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"},
				{req: retryReq(ml, retryMs(42000)), kind: ActionRetry, delay: 42 * s, round: 1, rounds: 3, budget: "mislabeled", reason: "the replay's own hint"},
				{req: retryReq(ml, retryMs(900_000)), kind: ActionRetry, delay: 300 * s, round: 2, rounds: 3, budget: "mislabeled"},
			},
		},
		{
			name:   "respectRetryAfter off ignores its hint",
			policy: func(p *Policy) { p.RespectRetryAfter = false },
			steps: []retryStep{
				rl(0, "p"),
				{req: retryReq(ml, retryMs(42000)), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled"},
			},
		},
		{
			name: "the evidence window: 10m inclusive",
			steps: []retryStep{
				rl(0, "p"),
				{at: 10 * time.Minute, req: retryReq(ml, nil), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled"},
				{at: 10*time.Minute + time.Millisecond, req: retryReq(ml, nil), kind: ActionGiveUp, reason: "a real INVALID_REQUEST"},
			},
		},
		{
			name: "a new capacity failure renews the evidence",
			steps: []retryStep{
				rl(0, "p"),
				rl(9*time.Minute, "p", 2),
				{at: 15 * time.Minute, req: retryReq(ml, nil), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled", reason: "(capacity failure 6m0s ago)"},
			},
		},
		{
			name: "evidence is per provider",
			steps: []retryStep{
				rl(0, "q"),
				{at: s, req: retryReq(ml, nil), kind: ActionGiveUp, reason: "no capacity failure on p"},
			},
		},
		{
			name: "SERVER, TIMEOUT and QUOTA are not capacity evidence",
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, retryMs(1000)), kind: ActionRetry, delay: s, round: 1, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassTimeout, nil), kind: ActionRetry, delay: 4 * s, round: 2, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassQuota, nil), kind: ActionGiveUp},
				{req: retryReq(ml, nil), kind: ActionGiveUp, reason: "a real INVALID_REQUEST"},
			},
		},
		{
			name:  "a failure without evidence is no evidence",
			steps: []retryStep{{req: retryReq(ml, nil, func(r *Request) { r.Failure = &engine.Failure{Status: 400} }), kind: ActionGiveUp, reason: "a real INVALID_REQUEST"}},
		},
		{
			name: "the caller's evidence counts",
			steps: []retryStep{
				{req: retryReq(ml, nil, since(2*time.Minute)), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled", reason: "(capacity failure 2m0s ago)"},
				{req: retryReq(ml, nil, since(11*time.Minute)), kind: ActionGiveUp, reason: "a real INVALID_REQUEST"},
				{req: retryReq(ml, nil, since(-time.Minute)), kind: ActionRetry, delay: 30 * s, round: 2, rounds: 3, budget: "mislabeled", reason: "(capacity failure 0s ago)"},
			},
		},
		{
			name: "the freshest evidence wins",
			steps: []retryStep{
				rl(0, "p"),
				{at: 20 * time.Minute, req: retryReq(ml, nil, since(time.Minute)), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled", reason: "1m0s ago"},
				{at: 5 * time.Minute, req: retryReq(ml, nil, since(time.Hour)), kind: ActionRetry, delay: 30 * s, round: 2, rounds: 3, budget: "mislabeled", reason: "5m0s ago"},
			},
		},
		{
			name: "a clock gone back reads as fresh evidence",
			steps: []retryStep{
				rl(time.Hour, "p"),
				{at: 0, req: retryReq(ml, nil), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 3, budget: "mislabeled", reason: "0s ago"},
			},
		},
		{
			name:   "mislabeled off: a real INVALID_REQUEST",
			policy: func(p *Policy) { p.Mislabeled.Enabled = false },
			steps: []retryStep{
				rl(0, "p"),
				{req: retryReq(ml, nil), kind: ActionGiveUp, reason: "retry.mislabeled is off"},
			},
		},
		{
			name:   "mislabeled rounds 0",
			policy: func(p *Policy) { p.Mislabeled.Rounds = 0 },
			steps: []retryStep{
				rl(0, "p"),
				{req: retryReq(ml, nil), kind: ActionGiveUp, budget: "mislabeled", exhausted: true, reason: "0 of 0"},
			},
		},
		{
			name: "reset on a new turn",
			policy: func(p *Policy) {
				p.Mislabeled.Rounds = 1
			},
			steps: []retryStep{
				rl(0, "p"),
				{req: retryReq(ml, nil), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 1, budget: "mislabeled"},
				{req: retryReq(ml, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "mislabeled", exhausted: true},
				{req: retryReq(ml, nil, retryTurn("t2", 1)), kind: ActionRetry, delay: 15 * s, round: 1, rounds: 1, budget: "mislabeled"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
	}
}

// Sessions a saturated gateway refused together, each told the same schedule
// (or the same hint), come back apart: each wait lies within Jitter of it, at
// most maxHintSpread past it, and never before it.
func TestMislabeledRetriesSpread(t *testing.T) {
	pol := DefaultPolicy()
	p, err := NewPlanner(pol, PlannerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Plan(ctx, retryT0, retryReq(engine.ClassRateLimit, retryMs(1000)))
	for _, hint := range []*int64{nil, retryMs(20_000)} {
		want := pol.Mislabeled.InitialDelay
		if hint != nil {
			want = 20 * time.Second
		}
		seen := map[time.Duration]bool{}
		for i := range 20 {
			a := p.Plan(ctx, retryT0.Add(time.Second), retryReq(engine.ClassMislabeled, hint, retrySession(fmt.Sprint("s", i))))
			if a.Kind != ActionRetry || a.Delay < want || a.Delay > want+min(time.Duration(pol.Jitter*float64(want)), maxHintSpread) {
				t.Fatalf("session %d: %s %s, want a retry in [%s, %s + its spread]", i, a.Kind, a.Delay, want, want)
			}
			seen[a.Delay] = true
		}
		if len(seen) < 10 {
			t.Fatalf("hint %v: 20 sessions came back at %d distinct times, want them apart", hint, len(seen))
		}
	}
}

// A spread reaching its ceiling is scaled into the room under it, never piled
// on it: clipped, the sessions whose share reached the ceiling all waited
// exactly the ceiling (half of them on a 50 s hint under a 60 s maxDelay, all
// of them on the hintless doubling's 300 s). A hint is never shortened; a
// schedule of gatectl's own at its ceiling spreads below it.
func TestSpreadsAreNotPiledAtTheirCeiling(t *testing.T) {
	pol := DefaultPolicy()
	for _, tc := range []struct {
		name       string
		d, ceiling time.Duration
		schedule   bool
		lo, hi     time.Duration
	}{
		{"a hint near maxDelay", 50 * time.Second, pol.MaxDelay, false, 50 * time.Second, pol.MaxDelay},
		{"a hint just under maxDelay", 58 * time.Second, pol.MaxDelay, false, 58 * time.Second, pol.MaxDelay},
		{"the hintless doubling's round 4", 40 * time.Second, pol.HintClamp.Max, true, 40 * time.Second, 45 * time.Second},
		{"a mislabeled replay's round 3, at maxDelay", 60 * time.Second, pol.HintClamp.Max, true, 60 * time.Second, 65 * time.Second},
		{"the hintless doubling at hintClamp.max", pol.HintClamp.Max, pol.HintClamp.Max, true, pol.HintClamp.Max - maxHintSpread, pol.HintClamp.Max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := map[time.Duration]int{}
			for i := range 200 {
				req := &Request{Session: fmt.Sprint("s", i), Turn: "t", Provider: "p"}
				d := spreadHint(&pol, req, 3, tc.d, tc.ceiling)
				if tc.schedule {
					d = spreadSchedule(&pol, req, 3, tc.d, tc.ceiling)
				}
				if d < tc.lo || d > tc.hi {
					t.Fatalf("session %d waits %s, want within [%s, %s]", i, d, tc.lo, tc.hi)
				}
				count[d]++
			}
			for d, n := range count {
				if n > 10 {
					t.Fatalf("%d of 200 sessions wait exactly %s: piled, not spread", n, d)
				}
			}
		})
	}
}

func TestPlannerQuota(t *testing.T) {
	s := time.Second
	q := engine.ClassQuota
	other := engine.Route{Provider: "o", Model: "om"}
	failover := func(f QuotaFailure) QuotaAnswer {
		return QuotaAnswer{Kind: ActionFailover, Route: other, Reason: "pool medium has o/om", Handle: "h"}
	}
	wait := func(f QuotaFailure) QuotaAnswer {
		return QuotaAnswer{Kind: ActionWaitLongTerm, Wait: time.Hour, Attempts: 1, Reason: "no pool governs the session"}
	}
	pass := func(f QuotaFailure) QuotaAnswer {
		return QuotaAnswer{Kind: ActionGiveUp, Reason: "quota retry is off for the session"}
	}
	// nativeFirst asks for quick retries until they are spent, then fails over.
	nativeFirst := func(f QuotaFailure) QuotaAnswer {
		if !f.NativeSpent {
			return QuotaAnswer{Kind: ActionRetry, Reason: "native first"}
		}
		return failover(f)
	}
	tests := []retryCase{
		{
			name:        "failover",
			router:      failover,
			steps:       []retryStep{{req: retryReq(q, nil), kind: ActionFailover, reason: "QUOTA: the allowance on p is spent: failing over to o/om (pool medium has o/om)"}},
			routerCalls: []bool{false},
		},
		{
			name:   "long-term wait, persisted, counted",
			router: wait,
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionWaitLongTerm, delay: time.Hour, round: 1, budget: "long-term", reason: "long-term attempt 1 in 1h0m0s (no pool governs the session)"},
				{at: time.Hour, req: retryReq(q, nil), kind: ActionWaitLongTerm, delay: time.Hour, round: 2, budget: "long-term", reason: "long-term attempt 2"},
			},
		},
		{
			name:        "pass: give up",
			router:      pass,
			steps:       []retryStep{{req: retryReq(q, nil), kind: ActionGiveUp, reason: "QUOTA: the allowance on p is spent; quota retry is off for the session"}},
			routerCalls: []bool{false},
		},
		{
			name:   "native first: quick retries on the main budget, then failover",
			policy: func(p *Policy) { p.Rounds = 2 },
			router: nativeFirst,
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 2, budget: "retry", reason: "QUOTA (quick retry) on p: retry 1/2 in 2s"},
				{req: retryReq(q, retryMs(5000)), kind: ActionRetry, delay: 5 * s, round: 2, rounds: 2, budget: "retry", reason: "the provider's hint"},
				{req: retryReq(q, nil), kind: ActionFailover},
			},
			routerCalls: []bool{false, false, false, true},
		},
		{
			name:        "native first with a hint over the cap: handed over at once",
			router:      nativeFirst,
			steps:       []retryStep{{req: retryReq(q, retryMs(120_000)), kind: ActionFailover}},
			routerCalls: []bool{true},
		},
		{
			name:        "native first with rounds 0: handed over at once",
			policy:      func(p *Policy) { p.Rounds = 0 },
			router:      nativeFirst,
			steps:       []retryStep{{req: retryReq(q, nil), kind: ActionFailover}},
			routerCalls: []bool{true},
		},
		{
			name:   "native first, spent, router passes: give up as spent",
			policy: func(p *Policy) { p.Rounds = 1 },
			router: func(f QuotaFailure) QuotaAnswer {
				if !f.NativeSpent {
					return QuotaAnswer{Kind: ActionRetry}
				}
				return pass(f)
			},
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(q, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true, reason: "retry budget spent: 1 of 1 rounds on p this turn; quota retry is off"},
			},
			routerCalls: []bool{false, false, true},
		},
		{
			name:   "a router that keeps asking for quick retries once they are spent: give up",
			policy: func(p *Policy) { p.Rounds = 1 },
			router: func(f QuotaFailure) QuotaAnswer { return QuotaAnswer{Kind: ActionRetry} },
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(q, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true, reason: "the quota runtime passed"},
			},
		},
		{
			name:   "QUOTA in retryOn without a router: the curve, then spent",
			policy: func(p *Policy) { p.Rounds = 1; p.RetryOn = append(p.RetryOn, engine.ClassQuota) },
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry", reason: "QUOTA (quick retry)"},
				{req: retryReq(q, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true, reason: "no quota runtime"},
			},
		},
		{
			name:   "QUOTA in retryOn with a router: the curve first, then the router with NativeSpent",
			policy: func(p *Policy) { p.Rounds = 1; p.RetryOn = append(p.RetryOn, engine.ClassQuota) },
			router: nativeFirst,
			steps: []retryStep{
				{req: retryReq(q, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(q, nil), kind: ActionFailover},
			},
			routerCalls: []bool{true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
	}

	t.Run("the router sees the failure and its handle comes back", func(t *testing.T) {
		r := &retryRouter{answer: failover}
		pl, err := NewPlanner(DefaultPolicy(), PlannerOptions{Quota: r})
		if err != nil {
			t.Fatal(err)
		}
		f := &engine.Failure{Status: 429, Body: "insufficient_quota"}
		usable := func(to engine.Route) bool { return to == other }
		a := pl.Plan(context.Background(), retryT0, retryReq(q, nil, retryTurn("t9", 4), func(r *Request) {
			r.Failure, r.Pool, r.Usable = f, "pool1", usable
		}))
		if a.Route == nil || *a.Route != other || a.Quota != "h" {
			t.Errorf("action = %+v, want route %v and handle h", a, other)
		}
		want := QuotaFailure{Session: "s1", Turn: "t9", Step: 4, Route: engine.Route{Provider: "p", Model: "m"}, Failure: f, Pool: "pool1"}
		if len(r.calls) != 1 || r.calls[0].Usable == nil || !r.calls[0].Usable(other) {
			t.Fatalf("router calls = %+v, want the request's Usable handed on", r.calls)
		}
		if got := r.calls[0]; got.Session != want.Session || got.Turn != want.Turn || got.Step != want.Step ||
			got.Route != want.Route || got.Failure != want.Failure || got.Pool != want.Pool || got.NativeSpent != want.NativeSpent {
			t.Errorf("router calls = %+v, want [%+v]", r.calls, want)
		}
	})
	t.Run("a long-term wait is saved before Plan returns", func(t *testing.T) {
		store := NewMemoryBudgetStore()
		pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Quota: &retryRouter{answer: wait}, Store: store})
		pl.Plan(context.Background(), retryT0, retryReq(q, nil, retryTurn("t1", 3)))
		b, ok, _ := store.Load(BudgetKey{Session: "s1", Provider: "p", Turn: "t1"})
		if !ok || b.LongTerm != 1 || b.Rounds != 0 || b.Turn != "t1" || b.Step != 3 || !b.UpdatedAt.Equal(retryT0) {
			t.Errorf("stored budget = %+v, %v; want one long-term attempt in t1 step 3", b, ok)
		}
	})
}

func TestPlannerSetPolicy(t *testing.T) {
	pol := DefaultPolicy()
	pol.Rounds = 3
	pl, err := NewPlanner(pol, PlannerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol.RetryOn[0] = engine.ClassAuth // the planner holds its own copy
	if got := pl.Policy(); got.RetryOn[0] != engine.ClassRateLimit {
		t.Errorf("policy changed through the caller's slice: %v", got.RetryOn)
	}
	ctx := context.Background()
	for range 2 {
		pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil))
	}
	lower := DefaultPolicy()
	lower.Rounds = 1
	if err := pl.SetPolicy(lower); err != nil {
		t.Fatal(err)
	}
	if a := pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil)); a.Kind != ActionGiveUp || !a.Exhausted || a.Round != 1 {
		t.Errorf("after lowering rounds to 1 with 2 spent: %+v, want give up", a)
	}
	bad := DefaultPolicy()
	bad.Rounds = 999
	if err := pl.SetPolicy(bad); err == nil {
		t.Error("SetPolicy accepted rounds 999")
	}
	if got := pl.Policy().Rounds; got != 1 {
		t.Errorf("a failed SetPolicy changed the policy: rounds %d", got)
	}
	if _, err := NewPlanner(bad, PlannerOptions{}); err == nil {
		t.Error("NewPlanner accepted rounds 999")
	}
}

func TestPlannerActionJSON(t *testing.T) {
	a := Action{Kind: ActionFailover, Delay: 1500 * time.Millisecond, Route: &engine.Route{Provider: "o", Model: "m"}, Class: engine.ClassQuota,
		Reason: "r", Quota: "opaque"}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"failover","route":{"provider":"o","model":"m"},"class":"QUOTA","reason":"r","delayMs":1500}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
}

// TestPlannerHammer plans from many goroutines at once: one hot (session,
// provider) whose budget must be spent exactly, many cold ones, shared jitter.
func TestPlannerHammer(t *testing.T) {
	const P, N = 8, 200
	pol := DefaultPolicy()
	pol.Rounds = 100
	sink := &retrySink{}
	pl, err := NewPlanner(pol, PlannerOptions{Sink: sink, Rand: &retrySeqRand{vals: []float64{0.1, 0.9, 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	var retried, gaveUp [P]int
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range N {
				now := retryT0.Add(time.Duration(i) * time.Millisecond)
				a := pl.Plan(context.Background(), now, retryReq(engine.ClassOverloaded, nil, retrySession("hot")))
				switch a.Kind {
				case ActionRetry:
					retried[g]++
				case ActionGiveUp:
					gaveUp[g]++
				}
				pl.Plan(context.Background(), now, retryReq(engine.ClassRateLimit, nil, retrySession(fmt.Sprintf("cold-%d-%d", g, i))))
				if i%50 == 0 {
					_ = pl.Stats()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	var r, g int
	for i := range P {
		r += retried[i]
		g += gaveUp[i]
	}
	if r != 100 || g != P*N-100 {
		t.Errorf("hot budget: %d retries, %d give-ups; want 100, %d", r, g, P*N-100)
	}
	if len(sink.calls) != P*N {
		t.Errorf("sink calls = %d, want %d", len(sink.calls), P*N)
	}
	st := pl.Stats()
	if st.Lifetime.Retries != 100+P*N || st.Lifetime.GaveUp != int64(P*N-100) {
		t.Errorf("lifetime stats = %+v", st.Lifetime)
	}
}

func TestPlannerSinceCapacity(t *testing.T) {
	pl, _ := NewPlanner(DefaultPolicy(), PlannerOptions{Sink: &retrySink{}})
	ctx := context.Background()
	if _, ok := pl.SinceCapacity(retryT0, "p"); ok {
		t.Error("evidence before any failure")
	}
	steps := []struct {
		at       time.Duration
		class    engine.Class
		since    time.Duration // asked at at+time.Minute
		evidence bool
	}{
		{0, engine.ClassServer, 0, false},
		{0, engine.ClassTimeout, 0, false},
		{0, engine.ClassRateLimit, time.Minute, true},
		{time.Hour, engine.ClassOverloaded, time.Minute, true},
		{0, engine.ClassOverloaded, time.Minute, true}, // an older failure does not move it back
	}
	for i, st := range steps {
		pl.Plan(ctx, retryT0.Add(st.at), retryReq(st.class, nil))
		at := retryT0.Add(st.at).Add(time.Minute)
		if i == len(steps)-1 {
			at = retryT0.Add(time.Hour + time.Minute)
		}
		got, ok := pl.SinceCapacity(at, "p")
		if ok != st.evidence || got != st.since {
			t.Errorf("step %d (%s): SinceCapacity = %s, %v; want %s, %v", i, st.class, got, ok, st.since, st.evidence)
		}
	}
	if got, ok := pl.SinceCapacity(retryT0, "p"); !ok || got != 0 {
		t.Errorf("clock gone back: %s, %v; want 0, true", got, ok)
	}
}

// OVERLOADED is the provider's (or a gateway's) capacity, not this key's limit:
// it must never reach the gate's RateLimitSink, whatever its hint, so it never
// moves a trigger or halves a learned quota. Only RATE_LIMIT does.
func TestOverloadedNeverTeachesTheSink(t *testing.T) {
	sink := &retrySink{}
	pl, err := NewPlanner(DefaultPolicy(), PlannerOptions{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, hint := range []*int64{nil, retryMs(0), retryMs(20000), retryMs(86400000)} {
		act := pl.Plan(context.Background(), now, retryReq(engine.ClassOverloaded, hint, retrySession(fmt.Sprintf("s%d", i))))
		if act.Kind != ActionRetry || act.ViaGate {
			t.Errorf("OVERLOADED (hint %v): %+v, want a plain retry", hint, act)
		}
	}
	if len(sink.calls) != 0 {
		t.Fatalf("OVERLOADED reached the sink: %+v", sink.calls)
	}
	pl.Plan(context.Background(), now, retryReq(engine.ClassRateLimit, retryMs(20000), retrySession("rl")))
	if len(sink.calls) != 1 {
		t.Fatalf("RATE_LIMIT must reach the sink once: %+v", sink.calls)
	}
}

// TestPlannerHintBudget: a wait that is the provider's own hint spends
// retry.hintRounds, not a round of the curve, so a patient wait-out of a cooldown
// leaves the curve whole for blind failures, and the reverse.
func TestPlannerHintBudget(t *testing.T) {
	const s = time.Second
	tests := []retryCase{
		{
			name:   "hinted rate limits spend the hint budget, the curve stays whole",
			policy: func(p *Policy) { p.HintRounds = 2; p.Rounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassRateLimit, retryMs(28000)), kind: ActionRetry, round: 1, rounds: 2, budget: "hint", viaGate: true, reason: "28s from the provider's hint"},
				{req: retryReq(engine.ClassRateLimit, retryMs(28000)), kind: ActionRetry, round: 2, rounds: 2, budget: "hint", viaGate: true},
				{req: retryReq(engine.ClassRateLimit, retryMs(28000)), kind: ActionGiveUp, round: 2, rounds: 2, budget: "hint", exhausted: true, reason: "hint budget (retry.hintRounds) spent"},
				// the curve's single round is still there for a hintless failure
				{req: retryReq(engine.ClassServer, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 1, budget: "retry"},
				{req: retryReq(engine.ClassServer, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true},
			},
		},
		{
			name:   "a hinted SERVER failure waits its hint on the hint budget",
			policy: func(p *Policy) { p.HintRounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, retryMs(7000)), kind: ActionRetry, delay: 7 * s, round: 1, rounds: 1, budget: "hint", reason: "retry 1/1 in 7s (the provider's hint)"},
				{req: retryReq(engine.ClassOverloaded, retryMs(7000)), kind: ActionGiveUp, round: 1, rounds: 1, budget: "hint", exhausted: true},
				{req: retryReq(engine.ClassOverloaded, nil), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"},
			},
		},
		{
			name:   "hints ignored (respectRetryAfter false): the curve's budget",
			policy: func(p *Policy) { p.HintRounds = 1; p.RespectRetryAfter = false },
			steps: []retryStep{
				{req: retryReq(engine.ClassServer, retryMs(7000)), kind: ActionRetry, delay: 2 * s, round: 1, rounds: 8, budget: "retry"},
				{req: retryReq(engine.ClassRateLimit, retryMs(7000)), kind: ActionRetry, round: 2, rounds: 8, budget: "retry", viaGate: true},
			},
		},
		{
			name:   "hintRounds null follows retry.rounds",
			policy: func(p *Policy) { p.HintRounds = FollowRounds; p.Rounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassRateLimit, retryMs(28000)), kind: ActionRetry, round: 1, rounds: 1, budget: "retry", viaGate: true},
				{req: retryReq(engine.ClassServer, nil), kind: ActionGiveUp, round: 1, rounds: 1, budget: "retry", exhausted: true},
			},
		},
		{
			name:   "rounds 0 still never retries, hinted or not",
			policy: func(p *Policy) { p.Rounds = 0 },
			steps: []retryStep{
				{req: retryReq(engine.ClassRateLimit, retryMs(28000)), kind: ActionGiveUp, budget: "retry", exhausted: true},
				{req: retryReq(engine.ClassServer, retryMs(7000)), kind: ActionGiveUp},
			},
		},
		{
			name:   "the hint budget is per turn and, with acrossSteps false, per step",
			policy: func(p *Policy) { p.HintRounds = 1; p.AcrossSteps = false },
			steps: []retryStep{
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t1", 1)), kind: ActionRetry, round: 1, rounds: 1, budget: "hint", viaGate: true},
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t1", 1)), kind: ActionGiveUp, round: 1, rounds: 1, budget: "hint", exhausted: true},
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t1", 2)), kind: ActionRetry, round: 1, rounds: 1, budget: "hint", viaGate: true},
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t2", 1)), kind: ActionRetry, round: 1, rounds: 1, budget: "hint", viaGate: true},
			},
		},
		{
			name:   "acrossSteps true (default): the steps share the hint budget",
			policy: func(p *Policy) { p.HintRounds = 1 },
			steps: []retryStep{
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t1", 1)), kind: ActionRetry, round: 1, rounds: 1, budget: "hint", viaGate: true},
				{req: retryReq(engine.ClassRateLimit, retryMs(5000), retryTurn("t1", 2)), kind: ActionGiveUp, round: 1, rounds: 1, budget: "hint", exhausted: true},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runRetryCase(t, tc) })
	}
}

func TestPolicyHintRoundsBounds(t *testing.T) {
	for _, n := range []int{FollowRounds - 1, MaxRounds + 1} {
		p := DefaultPolicy()
		p.HintRounds = n
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "retry.hintRounds") {
			t.Errorf("HintRounds %d: err = %v, want a retry.hintRounds error", n, err)
		}
	}
}

// A hinted retry waits at least the hint and at most Jitter more (capped at
// maxHintSpread and retry.maxDelay), by a share of its own: sessions refused
// together with one hint come back spread, not as one burst.
func TestHintedRetriesSpread(t *testing.T) {
	pol := DefaultPolicy()
	hint := 2 * time.Second
	seen := map[time.Duration]bool{}
	lo, hi := time.Hour, time.Duration(0)
	for i := range 40 {
		req := retryReq(engine.ClassOverloaded, retryMs(2000), retrySession(fmt.Sprintf("s%d", i)))
		d := spreadHint(&pol, &req, 1, hint, pol.MaxDelay)
		if d < hint || d > hint+time.Duration(float64(hint)*pol.Jitter) {
			t.Fatalf("session %d waits %s, want within [%s, %s]", i, d, hint, hint+time.Duration(float64(hint)*pol.Jitter))
		}
		seen[d] = true
		lo, hi = min(lo, d), max(hi, d)
	}
	if len(seen) < 35 || hi-lo < 200*time.Millisecond {
		t.Errorf("40 sessions spread over %s in %d distinct waits: want them apart", hi-lo, len(seen))
	}
	if d := spreadHint(&pol, &Request{Session: "s"}, 1, time.Hour, pol.MaxDelay); d > time.Hour+maxHintSpread || d > pol.MaxDelay && d != time.Hour {
		t.Errorf("a long hint spreads to %s: at most maxHintSpread past it, never past maxDelay", d)
	}
	pol.Jitter = 0
	if d := spreadHint(&pol, &Request{Session: "s"}, 1, hint, pol.MaxDelay); d != hint {
		t.Errorf("jitter 0: %s, want the hint", d)
	}
}
