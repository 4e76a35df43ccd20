package retry

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"strings"
	"testing"
	"time"
)

func TestStatsPerTurnAndLifetime(t *testing.T) {
	s := time.Second
	pol := DefaultPolicy()
	pol.HintRounds = FollowRounds // hinted retries count on the main budget here
	pol.Rounds = 2
	pl, err := NewPlanner(pol, PlannerOptions{Sink: &retrySink{}, Quota: &retryRouter{answer: func(f QuotaFailure) QuotaAnswer {
		if f.Session == "s1" {
			return QuotaAnswer{Kind: ActionFailover, Route: engine.Route{Provider: "o", Model: "m"}}
		}
		return QuotaAnswer{Kind: ActionWaitLongTerm, Wait: time.Hour}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		at  time.Duration
		req Request
	}{
		{0, retryReq(engine.ClassRateLimit, nil, retryOn("nuaa"))},                         // retry via gate, hintless
		{s, retryReq(engine.ClassOverloaded, retryMs(12000), retryOn("nuaa"))},             // retry 12s
		{2 * s, retryReq(engine.ClassServer, nil, retryOn("nuaa"))},                        // gave up (spent), hintless
		{3 * s, retryReq(engine.ClassMislabeled, nil, retryOn("nuaa"))},                    // mislabeled retry 15s (and its spread)
		{4 * s, retryReq(engine.ClassAuth, nil, retryOn("nuaa"))},                          // not retried
		{5 * s, retryReq(engine.ClassTimeout, nil, retryOn("deepseek"))},                   // retry 2s
		{6 * s, retryReq(engine.ClassQuota, nil, retryOn("deepseek"))},                     // failover
		{7 * s, retryReq(engine.ClassQuota, nil, retryOn("deepseek"), retrySession("s2"))}, // long-term, other session
	}
	for _, st := range steps {
		pl.Plan(ctx, retryT0.Add(st.at), st.req)
	}
	snap := pl.Stats()
	life := snap.Lifetime
	spread := spreadHint(&pol, &steps[1].req, 2, 12*s, pol.MaxDelay) - 12*s          // the hinted retry waits past its hint,
	spread += spreadSchedule(&pol, &steps[3].req, 1, 15*s, pol.HintClamp.Max) - 15*s // the mislabeled one past its schedule
	want := Stats{Retries: 3, MislabeledRetries: 1, Waited: 29*s + spread, GaveUp: 1, NotRetried: 1, HintlessCapacity: 2,
		Failovers: 1, LongTermWaits: 1}
	if life.Retries != want.Retries || life.MislabeledRetries != want.MislabeledRetries || life.Waited != want.Waited ||
		life.GaveUp != want.GaveUp || life.NotRetried != want.NotRetried || life.HintlessCapacity != want.HintlessCapacity ||
		life.Failovers != want.Failovers || life.LongTermWaits != want.LongTermWaits {
		t.Errorf("lifetime = %+v\nwant       %+v", life, want)
	}
	if len(life.ByProvider) != 2 || life.ByProvider["nuaa"] != 3 || life.ByProvider["deepseek"] != 1 {
		t.Errorf("by provider = %v, want nuaa×3 deepseek×1", life.ByProvider)
	}
	if l := life.Last; l == nil || l.Session != "s2" || l.Action.Kind != ActionWaitLongTerm || !l.At.Equal(retryT0.Add(7*s)) {
		t.Errorf("last = %+v", life.Last)
	}
	if len(snap.Turns) != 2 {
		t.Fatalf("turns = %v, want s1 and s2", snap.Turns)
	}
	s1 := snap.Turns["s1"]
	if s1.Session != "s1" || s1.Turn != "t1" || s1.Stats.Retries != 3 || s1.Stats.LongTermWaits != 0 || s1.Stats.Failovers != 1 {
		t.Errorf("s1 turn = %+v", s1)
	}
	if s1.Stats.Last == nil || s1.Stats.Last.Action.Kind != ActionFailover {
		t.Errorf("s1 last = %+v", s1.Stats.Last)
	}

	// A new turn starts the turn counters afresh; lifetime goes on.
	pl.Plan(ctx, retryT0.Add(8*s), retryReq(engine.ClassTimeout, nil, retryOn("nuaa"), retryTurn("t2", 1)))
	ts, ok := pl.TurnStats("s1")
	if !ok || ts.Turn != "t2" || ts.Stats.Retries != 1 || ts.Stats.GaveUp != 0 || ts.Stats.ByProvider["nuaa"] != 1 || ts.Stats.Waited != 2*s {
		t.Errorf("s1 after a new turn = %+v", ts)
	}
	if got := pl.Stats().Lifetime.Retries; got != 4 {
		t.Errorf("lifetime retries = %d, want 4", got)
	}
	if life := pl.LifetimeStats(); life.Retries != 4 || life.ByProvider["nuaa"] != 4 || life.Last == nil {
		t.Errorf("LifetimeStats = %+v", life)
	}
	if _, ok := pl.TurnStats("nobody"); ok {
		t.Error("TurnStats found an unknown session")
	}

	// A snapshot is a copy.
	snap.Lifetime.ByProvider["nuaa"] = 99
	snap.Lifetime.Last.Provider = "changed"
	if again := pl.Stats(); again.Lifetime.ByProvider["nuaa"] != 4 || again.Lifetime.Last.Provider == "changed" {
		t.Errorf("changing a snapshot changed the planner: %+v", again.Lifetime)
	}
	life = pl.LifetimeStats()
	life.ByProvider["nuaa"] = 99
	life.Last.Provider = "changed"
	if again := pl.LifetimeStats(); again.ByProvider["nuaa"] != 4 || again.Last.Provider == "changed" {
		t.Errorf("changing LifetimeStats' copy changed the planner: %+v", again)
	}
}

func TestStatsString(t *testing.T) {
	st := Stats{Retries: 3, Waited: 84 * time.Second, GaveUp: 1, HintlessCapacity: 2, MislabeledRetries: 1,
		ByProvider: map[string]int64{"nuaa": 4, "deepseek": 2},
		Last:       &Event{Provider: "nuaa", Action: Action{Kind: ActionRetry, Delay: 15 * time.Second, Round: 1, Rounds: 3, Reason: "mislabeled 400"}}}
	want := "retries 3 | waited 1m24s | gave up 1 | not retried 0 | no-hint capacity failures 2 | mislabeled 400 retries 1 | deepseek×2 nuaa×4 | last: nuaa retry 15s (1/3) — mislabeled 400"
	if got := st.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	st = Stats{Failovers: 1, LongTermWaits: 2, Last: &Event{Provider: "p", Action: Action{Kind: ActionGiveUp, Reason: "AUTH is not retried"}}}
	if got := st.String(); !strings.Contains(got, "| failovers 1 | long-term waits 2 | last: p give_up — AUTH is not retried") {
		t.Errorf("String() = %s", got)
	}
	if got := (Stats{}).String(); strings.Contains(got, "last") || strings.Contains(got, "×") {
		t.Errorf("empty String() = %s", got)
	}
}

func TestStatsJSON(t *testing.T) {
	snap := StatsSnapshot{
		Lifetime: Stats{Retries: 1, Waited: 1500 * time.Millisecond, ByProvider: map[string]int64{"p": 1}},
		Turns:    map[string]TurnStats{"s": {Session: "s", Turn: "t", Stats: Stats{Retries: 1, Waited: 2 * time.Second}}},
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Lifetime map[string]any `json:"lifetime"`
		Turns    map[string]struct {
			Turn  string         `json:"turn"`
			Stats map[string]any `json:"stats"`
		} `json:"turns"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Lifetime["waitedMs"] != 1500.0 || back.Lifetime["retries"] != 1.0 {
		t.Errorf("lifetime json = %s", b)
	}
	if tt := back.Turns["s"]; tt.Turn != "t" || tt.Stats["waitedMs"] != 2000.0 {
		t.Errorf("turn json = %s", b)
	}
}

// TestPlannerSweepsIdleSessions: sessions are named by clients, so the planner
// forgets those idle for a day, every 4096 new ones: counters and budgets.
func TestPlannerSweepsIdleSessions(t *testing.T) {
	store := NewMemoryBudgetStore()
	pl, err := NewPlanner(DefaultPolicy(), PlannerOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range sweepEvery - 1 {
		pl.Plan(ctx, retryT0, retryReq(engine.ClassServer, nil, retrySession(fmt.Sprintf("old-%d", i))))
	}
	if n := len(pl.Stats().Turns); n != sweepEvery-1 || store.Len() != sweepEvery-1 {
		t.Fatalf("before the sweep: %d sessions, %d budgets", n, store.Len())
	}
	pl.Plan(ctx, retryT0.Add(25*time.Hour), retryReq(engine.ClassServer, nil, retrySession("new")))
	if st := pl.Stats(); len(st.Turns) != 1 || store.Len() != 1 || st.Lifetime.Retries != sweepEvery {
		t.Fatalf("after the sweep: %d sessions, %d budgets, %d lifetime retries; want only the new one kept, the lifetime whole",
			len(st.Turns), store.Len(), st.Lifetime.Retries)
	}
}

// Session names are the client's: the turn counters keep at most maxTurnBooks
// sessions, the oldest decisions going first, however many a day brings.
func TestStatsSessionsBounded(t *testing.T) {
	var b retryStatsBook
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxTurnBooks + 100 {
		b.record(&Event{At: t0.Add(time.Duration(i) * time.Millisecond), Session: fmt.Sprintf("s-%d", i)}, true)
		if i == maxTurnBooks/2 {
			b.record(&Event{At: t0.Add(time.Duration(i) * time.Millisecond), Session: "s-0"}, true) // decided again
		}
	}
	if n := len(b.snapshot().Turns); n > maxTurnBooks {
		t.Errorf("%d sessions kept, want at most %d", n, maxTurnBooks)
	}
	if _, ok := b.session("s-1"); ok {
		t.Error("the session with the oldest decision was kept")
	}
	if _, ok := b.session("s-0"); !ok {
		t.Error("a session decided since went before older ones")
	}
	if _, ok := b.session(fmt.Sprintf("s-%d", maxTurnBooks+99)); !ok {
		t.Error("the newest session went")
	}
	if life := b.lifetime(); life.HintlessCapacity != maxTurnBooks+101 {
		t.Errorf("lifetime count %d, want every decision counted", life.HintlessCapacity)
	}
}
