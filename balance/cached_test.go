package balance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
)

// fakeSource is a BalanceSource driven by the test: each Read counts itself and
// returns what next returns (after waiting for release, when set).
type fakeSource struct {
	calls   atomic.Int32
	release chan struct{} // nil: answer at once
	next    func(n int) (engine.Reading, error)
}

func (f *fakeSource) Read(ctx context.Context) (engine.Reading, error) {
	n := int(f.calls.Add(1))
	if f.release != nil {
		<-f.release // ignores ctx on purpose: a source that hangs
	}
	return f.next(n)
}

func remainingReading(v float64) engine.Reading { return engine.Reading{Remaining: fp(v)} }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The refresh rules, step by step on a fake clock: a reading answers for Refresh;
// a failed read answers (as missing) for Refresh too; a failure does not bring the
// old reading back; TakenAt is the clock's time when the read finished.
func TestCachedRefreshSteps(t *testing.T) {
	t.Parallel()
	clock := engine.NewFakeClock(t0)
	outcomes := map[int]error{3: errors.New("boom")} // the third read fails
	src := &fakeSource{next: func(n int) (engine.Reading, error) {
		if err := outcomes[n]; err != nil {
			return engine.Reading{}, err
		}
		return remainingReading(float64(n)), nil
	}}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: 5 * time.Second, Clock: clock})

	steps := []struct {
		at        time.Duration // clock offset from t0
		reads     int32         // source reads so far, after this Get
		remaining float64       // -1: a missing reading
		takenAt   time.Duration // offset of the reading's TakenAt
		due       bool          // Due right after the Get
	}{
		{0, 1, 1, 0, false},                               // the first Get reads
		{30 * time.Second, 1, 1, 0, false},                // fresh: no read
		{59 * time.Second, 1, 1, 0, false},                // still fresh
		{60 * time.Second, 2, 2, 60 * time.Second, false}, // due at exactly Refresh
		{90 * time.Second, 2, 2, 60 * time.Second, false},
		{120 * time.Second, 3, -1, 0, false}, // the read fails: missing
		{150 * time.Second, 3, -1, 0, false}, // the failure answers too: no retry
		{179 * time.Second, 3, -1, 0, false},
		{180 * time.Second, 4, 4, 180 * time.Second, false}, // retried after Refresh
		{170 * time.Second, 4, 4, 180 * time.Second, false}, // clock back 10s: still fresh
		{100 * time.Second, 5, 5, 100 * time.Second, false}, // back 80s > Refresh: due
	}
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		r, err := c.Read(context.Background()) // Read = Get at the clock's time
		if got := src.calls.Load(); got != s.reads {
			t.Fatalf("step %d (t0+%s): %d reads, want %d", i, s.at, got, s.reads)
		}
		if s.remaining < 0 {
			if err == nil {
				t.Fatalf("step %d: got a reading %v, want a missing one", i, fmtPtr(r.Remaining))
			}
			if _, ok := c.Last(); ok {
				t.Fatalf("step %d: Last has a reading after a failed read", i)
			}
			st := c.Status(clock.Now())
			if st.Err == nil || st.LastGood == nil || *st.LastGood.Remaining != 2 || !st.LastGood.TakenAt.Equal(t0.Add(60*time.Second)) {
				t.Fatalf("step %d: Status = %+v, want the error and the last good reading (2, taken t0+60s)", i, st)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if *r.Remaining != s.remaining || !r.TakenAt.Equal(t0.Add(s.takenAt)) {
			t.Fatalf("step %d: reading %v taken %s, want %v taken t0+%s", i, *r.Remaining, r.TakenAt.Sub(t0), s.remaining, s.takenAt)
		}
		if last, ok := c.Last(); !ok || *last.Remaining != s.remaining {
			t.Fatalf("step %d: Last = %v, %v", i, fmtPtr(last.Remaining), ok)
		}
		if c.Due(clock.Now()) != s.due {
			t.Fatalf("step %d: Due = %v, want %v", i, !s.due, s.due)
		}
	}
}

// Get(ctx, now) decides freshness by now, not by the clock.
func TestCachedGetUsesNow(t *testing.T) {
	t.Parallel()
	clock := engine.NewFakeClock(t0)
	src := &fakeSource{next: func(n int) (engine.Reading, error) { return remainingReading(float64(n)), nil }}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Clock: clock})
	if !c.Due(t0) {
		t.Fatal("a new source is not due")
	}
	c.Get(context.Background(), t0)
	c.Get(context.Background(), t0.Add(59*time.Second))
	if src.calls.Load() != 1 {
		t.Fatalf("%d reads, want 1", src.calls.Load())
	}
	c.Get(context.Background(), t0.Add(time.Minute))
	if src.calls.Load() != 2 {
		t.Fatalf("%d reads, want 2", src.calls.Load())
	}
}

// 100 concurrent callers of a due source start one read and all get its outcome.
func TestCachedSingleFlight(t *testing.T) {
	t.Parallel()
	clock := engine.NewFakeClock(t0)
	src := &fakeSource{release: make(chan struct{}), next: func(n int) (engine.Reading, error) { return remainingReading(float64(n)), nil }}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: time.Minute, Clock: clock})

	const callers = 100
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan float64, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.Get(context.Background(), clock.Now())
			if err != nil {
				t.Error(err)
				return
			}
			results <- *r.Remaining
		}()
	}
	close(start)
	for !c.Status(clock.Now()).Running { // the read has started
		time.Sleep(time.Millisecond)
	}
	close(src.release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 1 {
			t.Fatalf("a caller got reading %v, want the shared first one", v)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d reads for %d concurrent callers, want 1", n, callers)
	}
}

// A source that hangs costs each caller at most the timeout, and its read is not
// restarted by the callers that come while it is being torn down.
func TestCachedTimeout(t *testing.T) {
	t.Parallel()
	src := &fakeSource{release: make(chan struct{}), next: func(n int) (engine.Reading, error) { return remainingReading(1), nil }}
	defer close(src.release)
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: 50 * time.Millisecond, Clock: engine.NewFakeClock(t0)})
	begin := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(context.Background(), t0); !errors.Is(err, ErrTimeout) {
				t.Errorf("err = %v, want ErrTimeout", err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("callers waited %s for a 50ms timeout", d)
	}
	// The hung read still runs: a new caller joins it (and times out at once)
	// rather than starting another.
	if _, err := c.Get(context.Background(), t0); !errors.Is(err, ErrTimeout) {
		t.Errorf("err = %v, want ErrTimeout", err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d reads, want 1", n)
	}
	// A report read right after the timeout says so, though the hung read
	// has not finished to record it (it said "not attempted" before).
	if st := c.Status(t0); !errors.Is(st.Err, ErrTimeout) {
		t.Errorf("status after the timeout: err %v, want ErrTimeout", st.Err)
	}
	if _, ok := c.Last(); ok {
		t.Error("a reading while the latest attempt timed out")
	}
}

// A caller's own context ends its wait, not the read: the others still get it.
func TestCachedCallerGivesUp(t *testing.T) {
	t.Parallel()
	src := &fakeSource{release: make(chan struct{}), next: func(n int) (engine.Reading, error) { return remainingReading(7), nil }}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: time.Minute, Clock: engine.NewFakeClock(t0)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, t0)
		done <- err
	}()
	for !c.Status(t0).Running {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	close(src.release)
	r, err := c.Get(context.Background(), t0)
	if err != nil || *r.Remaining != 7 {
		t.Fatalf("Get = %v, %v; want the read the first caller started", fmtPtr(r.Remaining), err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d reads, want 1", n)
	}
}

type panicSource struct{}

func (panicSource) Read(context.Context) (engine.Reading, error) { panic("kaboom") }

func TestCachedRecoversPanic(t *testing.T) {
	t.Parallel()
	c := NewCached(panicSource{}, CacheOptions{})
	if _, err := c.Get(context.Background(), t0); !errors.Is(err, ErrPanic) {
		t.Fatalf("err = %v, want ErrPanic", err)
	}
}

func TestCachedDefaults(t *testing.T) {
	t.Parallel()
	c := NewCached(panicSource{}, CacheOptions{})
	if c.Refresh() != pool.DefaultBalanceRefresh || c.Timeout() != pool.DefaultBalanceTimeout {
		t.Fatalf("defaults = %s, %s", c.Refresh(), c.Timeout())
	}
}

// Set.Refresh reads exactly the due sources of the providers asked for.
func TestSetRefresh(t *testing.T) {
	t.Parallel()
	clock := engine.NewFakeClock(t0)
	mk := func(refresh time.Duration) (*fakeSource, *Cached) {
		src := &fakeSource{next: func(n int) (engine.Reading, error) { return remainingReading(float64(n)), nil }}
		return src, NewCached(src, CacheOptions{Refresh: refresh, Clock: clock})
	}
	aSrc, a := mk(time.Minute)
	bSrc, b := mk(10 * time.Minute)
	cSrc, cc := mk(time.Minute)
	set, err := NewSet([]string{"a", "b", "c"}, []*Cached{a, b, cc})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Last("a"); ok {
		t.Fatal("a reading before any refresh")
	}
	set.Refresh(context.Background(), []string{"a", "b", "a", "unknown"})
	if aSrc.calls.Load() != 1 || bSrc.calls.Load() != 1 || cSrc.calls.Load() != 0 {
		t.Fatalf("reads a, b, c = %d, %d, %d; want 1, 1, 0", aSrc.calls.Load(), bSrc.calls.Load(), cSrc.calls.Load())
	}
	clock.Advance(2 * time.Minute) // a is due, b is not
	set.Refresh(context.Background(), []string{"a", "b"})
	if aSrc.calls.Load() != 2 || bSrc.calls.Load() != 1 {
		t.Fatalf("reads a, b = %d, %d; want 2, 1", aSrc.calls.Load(), bSrc.calls.Load())
	}
	if r, ok := set.Last("a"); !ok || *r.Remaining != 2 || !r.TakenAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("Last(a) = %+v, %v", r, ok)
	}
	if _, ok := set.Last("nobody"); ok {
		t.Fatal("Last of an unknown provider")
	}
	if st := set.Status(); len(st) != 3 || !st["c"].Due || st["b"].Due {
		t.Fatalf("Status = %+v", st)
	}
	if got := fmt.Sprint(set.Providers()); got != "[a b c]" {
		t.Fatalf("Providers = %s", got)
	}
	if _, err := NewSet([]string{"a", "a"}, []*Cached{a, b}); err == nil {
		t.Fatal("NewSet accepted a provider twice")
	}
}
