//go:build unix

package balance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// 100 concurrent Gets on a due script source run the script once; once the fake
// clock passes refresh, the next Gets run it once more.
func TestCachedScriptRunsOnce(t *testing.T) {
	t.Parallel()
	count := filepath.Join(t.TempDir(), "count")
	src, err := NewScript(Spec{Dir: testdata(t), Script: []string{"sh", "count.sh"}, Env: map[string]string{"COUNT": count}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock := engine.NewFakeClock(t0)
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: 30 * time.Second, Clock: clock})

	hammer := func(takenAt time.Time) {
		const callers = 100
		var wg sync.WaitGroup
		start := make(chan struct{})
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
				if *r.Remaining != 5 || len(r.Windows) != 1 || !r.TakenAt.Equal(takenAt) {
					t.Errorf("reading = %+v", r)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	hammer(t0)
	if n := runs(t, count); n != 1 {
		t.Fatalf("the script ran %d times for 100 concurrent callers, want once", n)
	}
	clock.Advance(30 * time.Second)
	hammer(t0)
	if n := runs(t, count); n != 1 {
		t.Fatalf("the script ran %d times within refresh, want once", n)
	}
	clock.Advance(30 * time.Second)
	hammer(t0.Add(time.Minute))
	if n := runs(t, count); n != 2 {
		t.Fatalf("the script ran %d times after refresh, want twice", n)
	}
}

// Callers of a hung script wait no longer than its timeout, and the whole process
// group is killed behind them.
func TestCachedScriptHung(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	const timeout = time.Second
	src, err := NewScript(Spec{Dir: testdata(t), Script: []string{"sh", "hung.sh"}, Env: map[string]string{"PIDS": pids}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCached(src, CacheOptions{Refresh: time.Minute, Timeout: timeout, Clock: engine.NewFakeClock(t0)})
	begin := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Get(context.Background(), t0)
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("err = %v, want ErrTimeout", err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(begin); d > 10*time.Second { // generous: the script sleeps 30s
		t.Fatalf("callers waited %s on a %s timeout", d, timeout)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("no pids recorded: %v", err)
	}
	for _, f := range strings.Fields(string(data)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
	}
	// The failure answers for refresh: the hung script is not started again.
	if _, err := c.Get(context.Background(), t0.Add(30*time.Second)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the recorded timeout", err)
	}
}

func runs(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "run\n")
}
