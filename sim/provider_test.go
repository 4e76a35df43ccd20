package sim

import (
	"testing"
	"time"
)

// Fixed instants for the step tables (x/time/rate style): the window is 10 s,
// the limit 100 tokens and 3 requests.
var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a window boundary
	t1 = t0.Add(1 * time.Second)
	t2 = t0.Add(2 * time.Second)
	t5 = t0.Add(5 * time.Second)
	t9 = t0.Add(9 * time.Second)
)

const (
	testWindow = 10 * time.Second
	testTPM    = 100
	testRPM    = 3
)

type step struct {
	at     time.Time
	op     string // "offer" or "done"
	tokens int64
	want   axis          // offer: the refusing limit, axisNone when accepted
	fit    time.Duration // offer: when it would first fit; checked when want != axisNone
}

func runSteps(t *testing.T, model string, steps []step) {
	t.Helper()
	l, err := newLimiter(model, testTPM, testRPM, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		if s.op == "done" {
			l.done(s.at, whole(s.tokens), held{})
			continue
		}
		ax, fit, _ := l.offer(s.at, whole(s.tokens))
		if ax != s.want || (ax != axisNone && fit != s.fit) {
			t.Fatalf("step %d (+%s, %d tokens): got %s after %s, want %s after %s", i, s.at.Sub(t0), s.tokens, ax, fit, s.want, s.fit)
		}
	}
}

func TestLimitModels(t *testing.T) {
	t.Run("SlidingArrival", func(t *testing.T) {
		runSteps(t, LimitSlidingArrival, []step{
			{t0, "offer", 60, axisNone, 0},
			{t1, "offer", 30, axisNone, 0},
			{t2, "offer", 20, axisTokens, 8 * time.Second},                                       // 110 > 100: fits when the t0 call leaves at t0+10s
			{t2, "offer", 10, axisNone, 0},                                                       // exactly 100
			{t5, "offer", 1, axisTokens, 5 * time.Second},                                        // over both: tokens named first
			{t0.Add(testWindow), "offer", 60, axisNone, 0},                                       // the t0 call left: 40 + 60
			{t0.Add(10500 * time.Millisecond), "offer", 0, axisRequests, 500 * time.Millisecond}, // 3 requests in; the t1 one leaves at 11 s
			{t0.Add(11 * time.Second), "offer", 30, axisNone, 0},
			{t0.Add(11 * time.Second), "offer", 101, axisTokens, 0}, // larger than the limit: never fits
		})
	})
	t.Run("SlidingCompletion", func(t *testing.T) {
		runSteps(t, LimitSlidingCompletion, []step{
			{t0, "offer", 60, axisNone, 0},
			{t1, "offer", 60, axisNone, 0}, // the first is still running: nothing is counted yet
			{t2, "done", 60, 0, 0},
			{t2, "offer", 50, axisTokens, 10 * time.Second}, // 60 completed + 50 > 100
			{t5, "done", 60, 0, 0},
			{t5, "offer", 1, axisTokens, 7 * time.Second}, // 120 completed: over until the t2 completion leaves
			{t0.Add(12 * time.Second), "offer", 40, axisNone, 0},
		})
	})
	t.Run("TokenBucket", func(t *testing.T) {
		runSteps(t, LimitTokenBucket, []step{
			{t0, "offer", 100, axisNone, 0},                // starts full
			{t1, "offer", 20, axisTokens, 1 * time.Second}, // 10 refilled in 1 s; 10 more take 1 s
			{t2, "offer", 20, axisNone, 0},                 // 20 refilled
			{t2, "offer", 1, axisTokens, 100 * time.Millisecond},
			{t9, "offer", 71, axisTokens, 100 * time.Millisecond}, // 70 refilled since t2
			{t9, "offer", 70, axisNone, 0},
		})
	})
	t.Run("TokenBucketRequests", func(t *testing.T) {
		runSteps(t, LimitTokenBucket, []step{
			{t0, "offer", 1, axisNone, 0},
			{t0, "offer", 1, axisNone, 0},
			{t0, "offer", 1, axisNone, 0},
			{t0, "offer", 1, axisRequests, testWindow/3 + 1}, // one request refills in window ÷ rpm (rounded up)
			{t0.Add(testWindow/3 + 1), "offer", 1, axisNone, 0},
		})
	})
	t.Run("FixedWindow", func(t *testing.T) {
		runSteps(t, LimitFixedWindow, []step{
			{t1, "offer", 90, axisNone, 0},
			{t5, "offer", 20, axisTokens, 5 * time.Second}, // resets at the boundary t0+10s
			{t9, "offer", 10, axisNone, 0},
			{t0.Add(10 * time.Second), "offer", 100, axisNone, 0}, // a new window: full again
			{t0.Add(11 * time.Second), "offer", 1, axisTokens, 9 * time.Second},
		})
	})
	t.Run("FixedWindowRequests", func(t *testing.T) {
		runSteps(t, LimitFixedWindow, []step{
			{t1, "offer", 1, axisNone, 0},
			{t1, "offer", 1, axisNone, 0},
			{t2, "offer", 1, axisNone, 0},
			{t5, "offer", 1, axisRequests, 5 * time.Second},
		})
	})
}

// knownStep is a step of a provider that decides on what it knows: an offer
// costs decide at arrival and whole once done; a "done" step completes the
// offer at index of.
type knownStep struct {
	at            time.Time
	op            string
	decide, whole int64
	of            int
	want          axis
	fit           time.Duration
}

func runKnownSteps(t *testing.T, model string, steps []knownStep) {
	t.Helper()
	l, err := newLimiter(model, testTPM, testRPM, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	hs := make([]held, len(steps))
	for i, s := range steps {
		c := cost{decide: s.decide, whole: s.whole}
		if s.op == "done" {
			o := steps[s.of]
			l.done(s.at, cost{decide: o.decide, whole: o.whole}, hs[s.of])
			continue
		}
		ax, fit, h := l.offer(s.at, c)
		hs[i] = h
		if ax != s.want || (ax != axisNone && fit != s.fit) {
			t.Fatalf("step %d (+%s, %d of %d tokens): got %s after %s, want %s after %s", i, s.at.Sub(t0), s.decide, s.whole, ax, fit, s.want, s.fit)
		}
	}
}

// A provider that decides on what it knows accepts a call whose output will
// take the window over, and counts that output, at the call's arrival, once it
// is written; one that decides on the whole cost refuses it at arrival.
func TestLimitModelsDecideOnWhatTheyKnow(t *testing.T) {
	t.Run("SlidingArrival", func(t *testing.T) {
		runKnownSteps(t, LimitSlidingArrival, []knownStep{
			{t0, "offer", 30, 90, 0, axisNone, 0},
			{t1, "offer", 60, 60, 0, axisNone, 0}, // 30 + 60 known: goes (90 + 60 would not)
			{t2, "done", 0, 0, 0, 0, 0},           // the t0 call wrote 60: 150 in the window
			{t2, "offer", 10, 10, 0, axisTokens, 8 * time.Second},
			{t0.Add(testWindow), "offer", 10, 10, 0, axisNone, 0}, // the t0 call left with its whole 90
		})
	})
	t.Run("SlidingArrivalWholeRefuses", func(t *testing.T) {
		runSteps(t, LimitSlidingArrival, []step{
			{t0, "offer", 90, axisNone, 0},
			{t1, "offer", 60, axisTokens, 9 * time.Second},
		})
	})
	t.Run("FixedWindow", func(t *testing.T) {
		runKnownSteps(t, LimitFixedWindow, []knownStep{
			{t1, "offer", 30, 90, 0, axisNone, 0},
			{t2, "done", 0, 0, 0, 0, 0}, // 90 in this window
			{t5, "offer", 20, 20, 0, axisTokens, 5 * time.Second},
			{t9, "offer", 10, 50, 0, axisNone, 0},
			{t0.Add(11 * time.Second), "done", 0, 0, 3, 0, 0}, // completes in the next window: its output counts there
			{t0.Add(11 * time.Second), "offer", 61, 61, 0, axisTokens, 9 * time.Second},
			{t0.Add(19 * time.Second), "offer", 50, 10, 0, axisNone, 0}, // asks 50: the window holds 90
			{t0.Add(21 * time.Second), "done", 0, 0, 6, 0, 0},           // it wrote 10 after the boundary: nothing given back to a window that never counted it
			{t0.Add(21 * time.Second), "offer", 100, 100, 0, axisNone, 0},
			{t0.Add(22 * time.Second), "offer", 1, 1, 0, axisTokens, 8 * time.Second},
		})
	})
	t.Run("TokenBucket", func(t *testing.T) {
		runKnownSteps(t, LimitTokenBucket, []knownStep{
			{t0, "offer", 30, 90, 0, axisNone, 0}, // 100 → 70
			{t0, "done", 0, 0, 0, 0, 0},           // and the 60 it wrote: 10
			{t0, "offer", 20, 20, 0, axisTokens, time.Second},
			{t1, "offer", 20, 5, 0, axisNone, 0}, // 20 → 0
			{t1, "done", 0, 0, 3, 0, 0},          // it asked 20 and wrote 5: 15 back
			{t1, "offer", 15, 85, 0, axisNone, 0},
			{t1, "done", 0, 0, 5, 0, 0},                           // 70 more than it asked: a debt of 70
			{t1, "offer", 10, 10, 0, axisTokens, 8 * time.Second}, // 80 to refill at 10 a second
		})
	})
	t.Run("SlidingCompletion", func(t *testing.T) {
		runKnownSteps(t, LimitSlidingCompletion, []knownStep{
			{t0, "offer", 20, 20, 0, axisNone, 0},
			{t0, "done", 0, 0, 0, 0, 0},           // 20 completed
			{t1, "offer", 30, 90, 0, axisNone, 0}, // decided on 30: 20 + 90 would not go
			{t2, "done", 0, 0, 2, 0, 0},           // counted at completion, whole: 110
			{t2, "offer", 1, 1, 0, axisTokens, 8 * time.Second},
		})
	})
}

// A session's call costs the provider its input and max_tokens at arrival when
// it decides on what it knows, and its whole cost either way once done. An
// output limit counts its max_tokens at arrival when it sends one, else its
// output as the provider knows it (all of it, or none deciding on what it
// knows), and what it wrote once done.
func TestCallCost(t *testing.T) {
	j := job{prompt: 100, output: 50, maxTokens: 80}
	free := job{prompt: 100, output: 50}
	for _, tc := range []struct {
		decides string
		j       job
		want    cost
	}{
		{"", j, cost{150, 150, 80, 50}},
		{DecidesWhole, free, cost{150, 150, 50, 50}},
		{DecidesKnown, j, cost{180, 150, 80, 50}},
		{DecidesKnown, free, cost{100, 150, 0, 50}},
	} {
		r := &runner{s: Scenario{Provider: ProviderSpec{Decides: tc.decides}}}
		if got := r.cost(tc.j); got != tc.want {
			t.Errorf("decides %q, %+v: %+v, want %+v", tc.decides, tc.j, got, tc.want)
		}
	}
}

func TestProviderRetryAfter(t *testing.T) {
	spec := ProviderSpec{Model: LimitFixedWindow, TPM: testTPM, RPM: testRPM, RetryAfter: Duration(30 * time.Second)}
	p, err := newProvider(spec, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	p.offer(t1, whole(90), fromSessions)
	if ref, _ := p.offer(t0.Add(1500*time.Millisecond), whole(20), fromSessions); ref.axis != axisTokens || ref.retryAfter != 30*time.Second {
		t.Fatalf("configured Retry-After: %+v", ref)
	}
	p.spec.ComputeRetryAfter = true
	if ref, _ := p.offer(t0.Add(1500*time.Millisecond), whole(20), fromSessions); ref.retryAfter != 9*time.Second {
		t.Fatalf("computed Retry-After is the wait to the boundary in whole seconds (8.5 s → 9 s): %+v", ref)
	}
	if ref, _ := p.offer(t0.Add(9900*time.Millisecond), whole(20), fromSessions); ref.retryAfter != time.Second {
		t.Fatalf("computed Retry-After is at least 1 s: %+v", ref)
	}
	if ref, _ := p.offer(t5, whole(101), fromSessions); ref.retryAfter != 30*time.Second {
		t.Fatalf("a call that never fits gets the configured Retry-After: %+v", ref)
	}
	if p.served[fromSessions] != 90 || p.refusedBy[axisTokens] != 4 {
		t.Fatalf("served %d, refused %v", p.served[fromSessions], p.refusedBy)
	}
}

func TestProviderHeaders(t *testing.T) {
	// a 10 s window: the headers state per-minute figures, six times the window's
	p, _ := newProvider(ProviderSpec{Model: LimitSlidingArrival, TPM: testTPM, RPM: testRPM}, testWindow)
	p.offer(t1, whole(40), fromSessions)
	h := p.headers(t2)
	want := headers{limitTokens: 600, remainingTokens: 360, limitRequests: 18, remainingRequests: 12, tokensReset: 9 * time.Second}
	if h != want {
		t.Fatalf("headers %+v, want %+v", h, want)
	}
}

// The token reset each limit model states: until the sliding window's newest
// call leaves, the bucket is full again, the fixed window ends; 0 while the
// limit is whole.
func TestProviderTokensReset(t *testing.T) {
	at := t0.Add(2500 * time.Millisecond)
	for _, c := range []struct {
		model string
		want  time.Duration
	}{
		{LimitSlidingArrival, 8500 * time.Millisecond},                 // the call at 1 s leaves at 11 s
		{LimitSlidingCompletion, 9*time.Second + 500*time.Millisecond}, // counted when it completed, at 2 s
		{LimitTokenBucket, 2500 * time.Millisecond},                    // 40 of 100 taken at 1 s, 10 a second back: 25 short at 2.5 s
		{LimitFixedWindow, 7500 * time.Millisecond},                    // the window ends at 10 s
	} {
		p, _ := newProvider(ProviderSpec{Model: c.model, TPM: testTPM, RPM: testRPM}, testWindow)
		if got := p.headers(t0).tokensReset; got != 0 {
			t.Errorf("%s, nothing counted: reset %v, want 0", c.model, got)
		}
		_, h := p.offer(t0.Add(time.Second), whole(40), fromSessions)
		p.done(t0.Add(2*time.Second), whole(40), h, fromSessions)
		if got := p.headers(at).tokensReset; got != c.want {
			t.Errorf("%s: reset %v, want %v", c.model, got, c.want)
		}
	}
}

// An output limit counts a call's max_tokens when it arrives and what it wrote
// once it is done, in a sliding window of its own, checked before the token
// limit: a call it refuses counts nothing, and the refusal names it, with the
// wait until the refused output fits. A call whose output the provider does
// not know at arrival counts it as written; an outside call writes what its
// cost says, here none.
func TestProviderOutputLimit(t *testing.T) {
	spec := ProviderSpec{Model: LimitSlidingArrival, TPM: 1000, RPM: 100, OTPM: 100, RetryAfter: Duration(30 * time.Second), ComputeRetryAfter: true}
	p, err := newProvider(spec, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	offer := func(at time.Time, c cost, src source, want axis) held {
		t.Helper()
		ref, h := p.offer(at, c, src)
		if ref.axis != want {
			t.Fatalf("+%s %+v: refused by %s, want %s", at.Sub(t0), c, ref.axis, want)
		}
		return h
	}
	asked := cost{decide: 90, whole: 70, outDecide: 80, outWhole: 60} // max_tokens 80, wrote 60
	ha := offer(t0, asked, fromSessions, axisNone)
	ref, _ := p.offer(t1, cost{decide: 30, whole: 30, outDecide: 30, outWhole: 30}, fromSessions)
	if ref.axis != axisOutput || ref.retryAfter != 9*time.Second {
		t.Fatalf("80 reserved + 30 over an output limit of 100: %+v, want refused by the output limit, Retry-After 9s (the t0 call leaves at +10s)", ref)
	}
	if tok, _ := p.lim.remaining(t1); tok != 1000-90 {
		t.Fatalf("the call the output limit refused was counted by the token limit: %d tokens left, want %d", tok, 1000-90)
	}
	p.done(t2, asked, ha, fromSessions) // corrected to the 60 it wrote
	offer(t2, cost{decide: 30, whole: 30, outDecide: 30, outWhole: 30}, fromSessions, axisNone)
	offer(t2, whole(500), fromOutside, axisNone)         // no output
	unknown := cost{decide: 10, whole: 50, outWhole: 40} // deciding on what it knows, no max_tokens
	hu := offer(t5, unknown, fromSessions, axisNone)     // 60 + 30 + nothing yet
	p.done(t5, unknown, hu, fromSessions)                // + the 40 it wrote: 130
	offer(t5, cost{decide: 1, whole: 1, outDecide: 1, outWhole: 1}, fromSessions, axisOutput)
	if p.refusedBy[axisOutput] != 2 || p.refusedBy[axisTokens] != 0 {
		t.Fatalf("refusals by axis %v, want 2 by the output limit and none by tokens", p.refusedBy)
	}
	if p.outServed[fromSessions] != 60+40 || p.outServed[fromOutside] != 0 {
		t.Fatalf("output served %v, want the 100 the two finished calls wrote, none the outside's", p.outServed)
	}
	if h := p.headers(t5); h.limitOutput != 600 {
		t.Fatalf("headers state an output limit of %d a minute, want 600 (100 a 10 s window)", h.limitOutput)
	}
}
