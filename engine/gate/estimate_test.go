package gate

import (
	"testing"
	"time"
)

func TestEstimateInput(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	r := Request{Provider: "p", Model: "m", InputBytes: 400}
	// nothing settled yet: 4 bytes a token
	if tk := mustAdmit(t, l, t0, r); tk.Reserved != 100+100 {
		t.Fatalf("first estimate %d, want 200", tk.Reserved)
	}
	// settle three unsized calls: the cold start is the mean of the last three actuals
	l2, _, _ := newTestLedger(t, testGate())
	for _, in := range []int64{10, 30, 50, 20} {
		tk := mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m", InputTokens: 1})
		l2.Settle(t0, tk, Usage{InputTokens: in})
	}
	if tk := mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m"}); tk.Reserved != (50+30+20)/3+100 {
		t.Fatalf("cold start %d, want mean of 30, 50, 20 + reserve", tk.Reserved)
	}
	// sized settles teach the bytes-per-token ratio (here 2 bytes/token)
	for i := 0; i < 3; i++ {
		tk := mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m", InputBytes: 200, MaxTokens: 1})
		l2.Settle(t0, tk, Usage{InputTokens: 80, CacheReadTokens: 20})
	}
	if tk := mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m", InputBytes: 300, MaxTokens: 1}); tk.Reserved != 150+1 {
		t.Fatalf("ratio estimate %d, want 151", tk.Reserved)
	}
	if st := l2.BucketStatus(t0, "p", "m"); st.BytesPerToken != 2 {
		t.Fatalf("bytes per token %g", st.BytesPerToken)
	}
}

func TestOutputReserveCalibration(t *testing.T) {
	c := testGate()
	c.Defaults.TPM = 1 << 30
	c.Defaults.RPM = 1 << 20
	c.OutputReserveTokens = 8192
	l, _, _ := newTestLedger(t, c)
	for i := 0; i < reserveMinSamples-1; i++ {
		tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1})
		l.Settle(t0, tk, Usage{InputTokens: 1, OutputTokens: 400})
	}
	if tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1}); tk.ReservedOutput != 8192 {
		t.Fatalf("calibrated too early: %d", tk.ReservedOutput)
	} else {
		l.Settle(t0, tk, Usage{InputTokens: 1, OutputTokens: 400})
	}
	tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1})
	if tk.ReservedOutput != 400 {
		t.Fatalf("calibrated reserve %d, want 400 (the expected output; the margin covers the spread)", tk.ReservedOutput)
	}
	// never below what max_tokens asks
	if tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1, MaxTokens: 4000}); tk.ReservedOutput != 4000 {
		t.Fatalf("max_tokens reserve %d, want 4000", tk.ReservedOutput)
	}
	// calls that chose their own max_tokens say nothing about the default reserve
	for i := 0; i < reserveSamples; i++ {
		tk := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", InputTokens: 1, MaxTokens: 9000})
		l.Settle(t0, tk, Usage{InputTokens: 1, OutputTokens: 9000})
	}
	st := l.BucketStatus(t0, "p", "m")
	if st.OutputReserve != 400 || st.ReserveDrift >= 0 {
		t.Fatalf("status %+v: want reserve 400 and a negative drift (over-reserved)", st)
	}
	// outputs grow: the reserve follows them
	for i := 0; i < reserveSamples; i++ {
		tk := mustAdmit(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", InputTokens: 1})
		l.Settle(t0.Add(time.Second), tk, Usage{InputTokens: 1, OutputTokens: 100_000})
	}
	if st := l.BucketStatus(t0, "p", "m"); st.OutputReserve != 100_000 {
		t.Fatalf("reserve %d, want the outputs' 100000", st.OutputReserve)
	}
}

// A queue formed at a cold start was sized with the configured output reserve;
// once outputs are learned its calls are sized again, or a queue of them would
// go through at the configured reserve each (over real HTTP: a quarter of the
// limit for the first four windows).
func TestColdStartQueueResizedOnceCalibrated(t *testing.T) {
	c := testGate()
	c.Defaults.TPM = 12000
	c.OutputReserveTokens = 8192
	l, _, _ := newTestLedger(t, c)
	r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100}
	for i := 0; i < reserveMinSamples-1; i++ {
		tk := mustAdmit(t, l, t0, r)
		if tk.ReservedOutput != 8192 {
			t.Fatalf("cold start reserved %d, want the configured 8192", tk.ReservedOutput)
		}
		l.Settle(t0, tk, Usage{InputTokens: 100, OutputTokens: 50})
	}
	// Calls with max_tokens take 2,600 of the 12,000; the eighth call without
	// it is in flight at the configured reserve, and another arrives: it waits.
	mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "t", InputTokens: 100, MaxTokens: 2500})
	eighth := mustAdmit(t, l, t0, r)
	_, w := l.Submit(t0, Request{Provider: "p", Model: "m", Session: "u", InputTokens: 100})
	if w == nil {
		t.Fatal("the call after the eighth was admitted at once; want it queued at the configured reserve")
	}
	// The eighth settles: outputs are learned, and the queued call now reserves
	// 100 + 50, which fits; at the configured reserve it would not (1,200 +
	// 2,600 + 8,292 > 12,000).
	now := t0.Add(time.Second)
	if err := l.Settle(now, eighth, Usage{InputTokens: 100, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	tk, ok := w.Ticket()
	if !ok {
		t.Fatalf("the queued call still waits (%s until %s) with %d reserved", w.reason, w.Next().Sub(t0), w.reserved)
	}
	if tk.ReservedOutput > 100 {
		t.Fatalf("the queued call went with %d output reserved, want the learned ≈ 50", tk.ReservedOutput)
	}
}
