package pool

import (
	"context"
	"fmt"
	"github.com/gatectl/gatectl/engine"
	"sync"
	"testing"
	"time"
)

// TestQuotaHammer runs draws, marks, requests, failures, successes, setting
// changes, reports and reloads from P goroutines at once, all released together.
// Run it with -race. It checks the invariants that must hold whatever the
// interleaving: every route answered belongs to the pool or is the one asked for,
// every entry that opened is announced, and no wait is left pending.
func TestQuotaHammer(t *testing.T) {
	const P, N = 8, 400
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.read("a", 50, 0)
	f.read("b", 10, 0)
	f.read("c", 5, 0)
	ctx := context.Background()
	medium := f.q.Pools().Pool("medium")
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, P*N)
	for g := range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range N {
				session := fmt.Sprintf("s%d", (g*N+i)%13)
				switch i % 10 {
				case 0:
					r, err := f.q.PickRoute(ctx, "medium")
					if err != nil || !medium.Holds(r) {
						errs <- fmt.Errorf("PickRoute = %s, %v", r, err)
					}
				case 1:
					f.q.Mark([]string{"a", "b", "c"}[i%3], f.clock.Now())
				case 2, 3, 4:
					ch, _ := f.q.RouteFor(ctx, session, rA)
					if !medium.Holds(ch.Route) {
						errs <- fmt.Errorf("RouteFor = %s", ch.Route)
					}
				case 5:
					d := f.q.OnQuota(ctx, QuotaFailure{Session: session, Route: rA})
					if d.Action == ActionWait {
						cctx, cancel := context.WithCancel(ctx)
						cancel()
						f.q.Wait(cctx, d) // cancelled at once: never blocks
					}
				case 6:
					f.q.OnSuccess(session)
				case 7:
					f.q.SetSwitch(session, []string{"on", "off", "default"}[i%3])
					f.q.SetPool(session, []string{"medium", "default", "off"}[i%3])
				case 8:
					if _, err := f.q.Report(ctx, false); err != nil {
						errs <- err
					}
					f.q.Facts(session)
					f.q.Fork(session+"-child", session)
				case 9:
					f.q.Reload(f.q.Pools(), DefaultSettings())
					f.readings.Set("b", engine.Reading{Remaining: pf(float64(i % 20)), TakenAt: f.clock.Now()})
					f.clock.Advance(time.Second)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	entered, left := 0, 0
	for _, e := range f.events.all() {
		switch e.Kind {
		case EventEntered:
			entered++
		case EventLeft:
			left++
		}
	}
	open := 0
	for i := range 13 {
		if st, ok := f.q.State(fmt.Sprintf("s%d", i)); ok {
			open++
			if st.Pending {
				t.Errorf("s%d: a cancelled wait is still pending", i)
			}
		}
	}
	if entered != left+open {
		t.Errorf("%d entered, %d left, %d open", entered, left, open)
	}
}
