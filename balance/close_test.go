package balance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// closingSource is a BalanceSource with a Close that counts itself; a Read waits
// for its context when block is set (a read Close has to stop).
type closingSource struct {
	closes  atomic.Int32
	block   bool
	started chan struct{}
}

func (s *closingSource) Read(ctx context.Context) (engine.Reading, error) {
	if !s.block {
		return remainingReading(1), nil
	}
	close(s.started)
	<-ctx.Done()
	return engine.Reading{}, ctx.Err()
}

func (s *closingSource) Close() error {
	s.closes.Add(1)
	return nil
}

// Close closes the source once, however often it is called; a fresh outcome
// still answers, a due source answers ErrClosed and reads no more.
func TestCachedCloseReleasesTheSource(t *testing.T) {
	t.Parallel()
	clock := engine.NewFakeClock(t0)
	src := &closingSource{}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Clock: clock})
	if _, err := c.Get(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := src.closes.Load(); n != 1 {
		t.Errorf("source closed %d times, want 1", n)
	}
	if r, err := c.Get(context.Background(), t0.Add(time.Second)); err != nil || *r.Remaining != 1 {
		t.Errorf("fresh after Close: %+v, %v", r, err)
	}
	if _, err := c.Get(context.Background(), t0.Add(2*time.Minute)); !errors.Is(err, ErrClosed) {
		t.Errorf("due after Close: err = %v, want ErrClosed", err)
	}
}

// Close stops the read in progress: its waiters get ErrClosed, not a timeout.
func TestCachedCloseStopsTheRead(t *testing.T) {
	t.Parallel()
	src := &closingSource{block: true, started: make(chan struct{})}
	c := NewCached(src, CacheOptions{Timeout: time.Hour})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		errc <- err
	}()
	<-src.started
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("waiter: err = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the read")
	}
}

// A Set closes every source.
func TestSetClose(t *testing.T) {
	t.Parallel()
	a, b := &closingSource{}, &closingSource{}
	set, err := NewSet([]string{"a", "b"}, []*Cached{NewCached(a, CacheOptions{}), NewCached(b, CacheOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if a.closes.Load() != 1 || b.closes.Load() != 1 {
		t.Errorf("closes: a %d, b %d", a.closes.Load(), b.closes.Load())
	}
}
