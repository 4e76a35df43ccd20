package gate

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestAdmitObservedShowsTheHold: a call that must wait is shown to its caller
// once, with the reason and the expected admission, and is admitted when the
// wait is over; a call admitted at once is never shown.
func TestAdmitObservedShowsTheHold(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	calls := 0
	if _, err := l.AdmitObserved(context.Background(), req(10), func(*Waiter) { calls++ }); err != nil || calls != 0 {
		t.Fatalf("free call: err %v, queued called %d times; want admitted, not shown", err, calls)
	}
	mustAdmit(t, l, t0, req(790)) // with the first call and the output reserves the minute's 1000 tokens are spent
	shown := make(chan Hold, 2)
	done := make(chan error, 1)
	go func() {
		_, err := l.AdmitObserved(context.Background(), req(10), func(w *Waiter) { shown <- w.Hold() })
		done <- err
	}()
	h := <-shown
	if h.Reason != "tpm" || h.Provider != "p" || h.Model != "m" || !h.Since.Equal(t0) || h.Expected.Sub(t0) != time.Minute {
		t.Fatalf("hold = %+v, want tpm on p/m since t0, expected at t0+1m", h)
	}
	for clk.Timers() == 0 { // the waiter's timer is armed
		select {
		case err := <-done:
			t.Fatalf("admitted while the window is full: %v", err)
		default:
			runtime.Gosched()
		}
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if len(shown) != 0 {
		t.Error("queued was called more than once")
	}
}
