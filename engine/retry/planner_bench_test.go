package retry

import (
	"context"
	"github.com/gatectl/gatectl/engine"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

type retryNopSink struct{}

func (retryNopSink) RateLimitedBy(time.Time, string, string, engine.RateLimit) {}

// BenchmarkPlanRetry measures the planner's hot path: one failure planned, its
// budget loaded and saved in a MemoryBudgetStore, the counters updated. 1024
// sessions take turns; each turn sees 4 failures, so budgets are spent and reset.
func BenchmarkPlanRetry(b *testing.B) {
	const sessions, perTurn = 1024, 4
	reqs := make([]Request, sessions*perTurn)
	for i := range reqs {
		s := i % sessions
		reqs[i] = Request{Provider: "deepseek", Model: "deepseek-chat", Session: "session-" + strconv.Itoa(s), Step: 1}
	}
	turns := make([]string, 64)
	for i := range turns {
		turns[i] = "turn-" + strconv.Itoa(i)
	}
	cases := []struct {
		name    string
		verdict engine.Verdict
	}{
		{"overloaded-hint", engine.Verdict{Class: engine.ClassOverloaded, RetryAfterMs: retryMs(12000)}},
		{"server-jitter", engine.Verdict{Class: engine.ClassServer}},
		{"rate-limit-gate", engine.Verdict{Class: engine.ClassRateLimit, RetryAfterMs: retryMs(28000)}},
		{"auth-give-up", engine.Verdict{Class: engine.ClassAuth}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pl, err := NewPlanner(DefaultPolicy(), PlannerOptions{
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
