package engine

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

type retryNopSink struct{}

func (retryNopSink) RateLimited(time.Time, string, string, time.Duration) {}

// BenchmarkPlanRetry measures the planner's hot path: one failure planned, its
// budget loaded and saved in a MemoryBudgetStore, the counters updated. 1024
// sessions take turns; each turn sees 4 failures, so budgets are spent and reset.
func BenchmarkPlanRetry(b *testing.B) {
	const sessions, perTurn = 1024, 4
	reqs := make([]RetryRequest, sessions*perTurn)
	for i := range reqs {
		s := i % sessions
		reqs[i] = RetryRequest{Provider: "deepseek", Model: "deepseek-chat", Session: "session-" + strconv.Itoa(s), Step: 1}
	}
	turns := make([]string, 64)
	for i := range turns {
		turns[i] = "turn-" + strconv.Itoa(i)
	}
	cases := []struct {
		name    string
		verdict Verdict
	}{
		{"overloaded-hint", Verdict{Class: ClassOverloaded, RetryAfterMs: retryMs(12000)}},
		{"server-jitter", Verdict{Class: ClassServer}},
		{"rate-limit-gate", Verdict{Class: ClassRateLimit, RetryAfterMs: retryMs(28000)}},
		{"auth-give-up", Verdict{Class: ClassAuth}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pl, err := NewPlanner(DefaultRetryPolicy(), PlannerOptions{
				Sink: retryNopSink{}, Rand: rand.New(rand.NewPCG(1, 2)),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			now := retryT0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := reqs[i%len(reqs)]
				r.Verdict = c.verdict
				r.Turn = turns[(i/len(reqs))%len(turns)]
				pl.Plan(ctx, now, r)
				i++
			}
		})
	}
}
