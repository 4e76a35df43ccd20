package gate

import (
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// learnOutputs settles 40 calls of 1 input token whose outputs spread as a
// lognormal's (median 300, σ 0.8), each taking 0.5 s + 1 ms a token, so the
// gate has learned outputs with a wide spread and the pace they are written
// at (under whole, reservations follow the calls' age). The calls end two
// windows before at: the window is empty then.
func learnOutputs(t *testing.T, l *Ledger, at time.Time) {
	t.Helper()
	start := at.Add(-5 * time.Minute)
	for i := range 40 {
		// the lognormal's quantiles, in an order that mixes short and long
		q := (float64((i*17)%40) + 0.5) / 40
		out := int64(300 * math.Exp(0.8*math.Sqrt2*math.Erfinv(2*q-1)))
		now := start.Add(time.Duration(i) * 4 * time.Second)
		tk := mustAdmit(t, l, now, Request{Provider: "p", Model: "m", Session: "h", InputTokens: 1})
		done := now.Add(500*time.Millisecond + time.Duration(out)*time.Millisecond)
		if err := l.Settle(done, tk, Usage{InputTokens: 1, OutputTokens: out}); err != nil {
			t.Fatal(err)
		}
	}
}

func decidesGate(decides string) Config {
	c := testGate()
	c.Defaults = ModelLimits{TPM: 10_000, RPM: 100, Decides: decides}
	c.MarginSigmas = 5
	return c
}

// A provider that decides on what it knows counts a call in flight at its
// input (and max_tokens): told so, the gate reserves that, keeps no margin for
// outputs not yet written and does not grow a call's reservation with its
// age. Told nothing, it reserves the expected output and a margin for the
// spread of the outputs in flight, and ten calls of 1,000 do not fit in 10,000.
func TestDecidesKnownCountsACallInFlightAsTheProviderDoes(t *testing.T) {
	at := t0.Add(10 * time.Minute)
	for _, decides := range []string{DecidesKnown, DecidesWhole} {
		l, _, _ := newTestLedger(t, decidesGate(decides))
		learnOutputs(t, l, at)
		admitted := 0
		for i := range 10 {
			if _, w := l.Submit(at, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000}); w != nil {
				w.Cancel(at)
				break
			}
			admitted = i + 1
		}
		// 3 s on, another call (it waits): under whole, the calls in flight
		// are brought up to their age on its way
		if _, w := l.Submit(at.Add(3*time.Second), Request{Provider: "p", Model: "m", Session: "t", InputTokens: 1000}); w != nil {
			w.Cancel(at.Add(3 * time.Second))
		}
		st := l.BucketStatus(at.Add(3*time.Second), "p", "m")
		switch decides {
		case DecidesKnown:
			if admitted != 10 || st.WindowTokens != 10_000 || st.OutputReserve != 0 || st.Decides != DecidesKnown {
				t.Fatalf("known: %d admitted, window %d 3 s later, output reserve %d, decides %q; want 10, 10000 (inputs alone, not aged; the call 3 s on waits), 0, known",
					admitted, st.WindowTokens, st.OutputReserve, st.Decides)
			}
		case DecidesWhole:
			if admitted >= 8 || st.Decides != DecidesWhole {
				t.Fatalf("whole: %d admitted (decides %q); want fewer than 8: each reserves ~300 of output or more, and the margin covers their spread", admitted, st.Decides)
			}
		}
	}
}

// Told the provider decides on what it knows, a call's max_tokens is what it
// reserves for its output until it settles; then its real cost counts, and a
// window the outputs took over the budget holds the next call until it drains.
func TestDecidesKnownSettlesToTheRealCost(t *testing.T) {
	c := testGate()
	c.Defaults.Decides = DecidesKnown
	l, _, _ := newTestLedger(t, c)
	a := mustAdmit(t, l, t0, req(300))
	b := mustAdmit(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "s", InputTokens: 200, MaxTokens: 300})
	if st := l.BucketStatus(t0.Add(time.Second), "p", "m"); st.WindowTokens != 800 {
		t.Fatalf("window = %d, want 800: 300, and 200 + max_tokens 300", st.WindowTokens)
	}
	if err := l.Settle(t0.Add(2*time.Second), a, Usage{InputTokens: 300, OutputTokens: 400}); err != nil {
		t.Fatal(err)
	}
	// 700 + 500 = 1,200 over a budget of 1,000: the next call waits until a leaves.
	w := mustWait(t, l, t0.Add(3*time.Second), req(100), "tpm", 60*time.Second)
	w.Cancel(t0.Add(3 * time.Second))
	if err := l.Settle(t0.Add(4*time.Second), b, Usage{InputTokens: 200, OutputTokens: 20}); err != nil {
		t.Fatal(err)
	}
	if st := l.BucketStatus(t0.Add(4*time.Second), "p", "m"); st.WindowTokens != 920 {
		t.Fatalf("window = %d, want 920: 700 and 220", st.WindowTokens)
	}
}

// The learner reads a 429 in the units the provider decided in: told it
// decides on what it knows, the calls in flight count at their input and
// max_tokens, not at the output the model usually writes.
func TestDecidesKnownReadsA429AsTheProviderCounted(t *testing.T) {
	at := t0.Add(10 * time.Minute)
	// Six calls of 1,000 without max_tokens and two with max_tokens 4,000
	// sent; one more with max_tokens admitted but not sent.
	want := map[string]func(float64) bool{
		DecidesKnown: func(tr float64) bool { return tr == 16_000 },
		// 8,000 and eight outputs of about 400 expected: not 6,000 more
		DecidesWhole: func(tr float64) bool { return tr > 9600 && tr < 14_000 },
	}
	for _, decides := range []string{DecidesKnown, DecidesWhole} {
		c := decidesGate(decides)
		c.MarginSigmas = 0 // the calls fit either way
		c.Defaults.TPM = 30_000
		l, _, _ := newTestLedger(t, c)
		learnOutputs(t, l, at)
		for i := range 8 {
			r := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 1000}
			if i >= 6 {
				r.MaxTokens = 4000
			}
			mustAdmit(t, l, at, r)
		}
		// and one admitted but not written yet: not in the provider's window
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "u", InputTokens: 1000, MaxTokens: 4000, Sends: true})
		l.RateLimitedBy(at.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
		if tr := l.BucketStatus(at.Add(time.Second), "p", "m").Trigger; !want[decides](tr) {
			t.Fatalf("%s: trigger = %.0f after a 429 with 8,000 of input and 8,000 of max_tokens in flight", decides, tr)
		}
	}
}

func TestDecidesIsValidated(t *testing.T) {
	c := testGate()
	c.Models = map[string]ModelLimits{"p/m": {Decides: "everything"}}
	if err := c.Validate(); err == nil || err.Error() != `gate.models["p/m"].decides: must be "known" or "whole" (got "everything")` {
		t.Fatalf("err = %v", err)
	}
	c = testGate()
	c.Defaults.Decides = DecidesKnown
	c.Models = map[string]ModelLimits{"p/w": {Decides: DecidesWhole}, "p/x": {TPM: 5}}
	if got := c.Limits("p/w").Decides; got != DecidesWhole {
		t.Fatalf("p/w decides %q, want its own whole", got)
	}
	if got := c.Limits("p/x").Decides; got != DecidesKnown {
		t.Fatalf("p/x decides %q, want the defaults' known", got)
	}
}

// Readings taken in one mode are of other units than the other's: a trigger
// read with the calls in flight at their expected output is not one read at
// their input. Switching the mode — a reload, or a stored state from an
// instance in the other — forgets the readings and keeps the level that held;
// a waiter is sized again in the new mode.
func TestDecidesSwitchForgetsReadings(t *testing.T) {
	c := testGate()
	c.Defaults.TPM = 10_000
	store := &MemoryLearnedStore{}
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		mustAdmit(t, l, t0, req(1000)) // 1,100 each: 6,600
	}
	l.RateLimitedBy(t0.Add(time.Second), "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
	before := l.BucketStatus(t0.Add(time.Second), "p", "m")
	if before.Trigger <= 0 {
		t.Fatalf("no trigger after the 429: %+v", before)
	}
	// Another instance, told known, loads the state: the level, not the reading.
	k := c
	k.Defaults.Decides = DecidesKnown
	other, err := NewLedger(k, engine.NewFakeClock(t0), WithLearnedStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if st := other.BucketStatus(t0.Add(time.Second), "p", "m"); st.Trigger != 0 || st.Quota != before.Trigger {
		t.Fatalf("loaded under known: trigger %.0f quota %.0f; want no trigger and the quota at the level %.0f", st.Trigger, st.Quota, before.Trigger)
	}
	// The same ledger reloaded with known: a waiter sized at 1,100 is sized at
	// 1,000 again, and the reading goes.
	_, w := l.Submit(t0.Add(2*time.Second), Request{Provider: "p", Model: "m", Session: "w", InputTokens: 4000})
	if w == nil || w.reserved != 4100 {
		t.Fatalf("the waiter: %+v; want one reserving 4,100", w)
	}
	if err := l.Reconfigure(t0.Add(2*time.Second), k); err != nil {
		t.Fatal(err)
	}
	if st := l.BucketStatus(t0.Add(2*time.Second), "p", "m"); st.Trigger != 0 || st.Quota != before.Trigger || st.Decides != DecidesKnown {
		t.Fatalf("reloaded under known: %+v; want no trigger, the quota at %.0f, decides known", st, before.Trigger)
	}
	if w.reserved != 4000 {
		t.Fatalf("the waiter reserves %d after the reload, want its input alone (4000)", w.reserved)
	}
	w.Cancel(t0.Add(2 * time.Second))
}

// The level a served call records (the view when it was admitted plus its
// cost) is what the provider decided on: told it decides on what it knows,
// the call's input and max_tokens — its output came later, and the provider
// did not weigh it then. Under whole, the call's real cost. A level read too
// high would refute the view at a 429 the provider's own count explains.
func TestDecidesKnownServedLevelIsWhatTheProviderDecidedOn(t *testing.T) {
	for _, tc := range []struct {
		decides string
		want    int64
	}{
		// 500 in flight when it was admitted, then its input and max_tokens
		{DecidesKnown, 500 + 200 + 300},
		// under whole the call in flight counts its input and max_tokens
		// too (it asked them), and the served call its real cost
		{DecidesWhole, 500 + 200 + 3000},
	} {
		c := testGate()
		c.Defaults = ModelLimits{TPM: 100_000, RPM: 100, Decides: tc.decides}
		l, _, _ := newTestLedger(t, c)
		// one call answered two windows before: the gate knows what outputs run to
		old := mustAdmit(t, l, t0.Add(-3*time.Minute), req(400))
		if err := l.Settle(t0.Add(-3*time.Minute+time.Second), old, Usage{InputTokens: 400, OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
		mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 400, MaxTokens: 100})
		tk := mustAdmit(t, l, t0.Add(time.Second), Request{Provider: "p", Model: "m", Session: "b", InputTokens: 200, MaxTokens: 300})
		// The provider let it write more than it asked (it counts what was
		// written). The completion view held nothing when it was admitted.
		if err := l.Settle(t0.Add(2*time.Second), tk, Usage{InputTokens: 200, OutputTokens: 3000}); err != nil {
			t.Fatal(err)
		}
		b := l.bucketFor("p", "m", t0)
		b.mu.Lock()
		arrival, done := b.servedArrival.max(t0.Add(2*time.Second), time.Minute), b.servedDone.max(t0.Add(2*time.Second), time.Minute)
		b.mu.Unlock()
		if arrival != tc.want || done != tc.want-500 {
			t.Fatalf("%s: served levels %d on arrival, %d at completion; want %d and %d", tc.decides, arrival, done, tc.want, tc.want-500)
		}
	}
}

// A 429 below a level the provider served within two windows refutes the view
// (countview.go), less a slack for how far a refused level may honestly lie
// below a served one. Under whole that slack includes the refused call's
// output spread: its real output may exceed what it reserved. Told the
// provider decides on what it knows, the provider refused the call on its
// input and max_tokens, which the gate knows: no output spread, and a
// refused level the served one exceeds by less than it refutes the view.
func TestDecidesKnownVoteGivesTheRefusedCallNoOutputSpread(t *testing.T) {
	at := t0.Add(10 * time.Minute)
	for _, decides := range []string{DecidesKnown, DecidesWhole} {
		c := decidesGate(decides)
		c.Defaults.TPM = 30_000
		c.Defaults.CountsAt = CountsAtArrival // the vote reports; no switch to weigh
		l, _, _ := newTestLedger(t, c)
		learnOutputs(t, l, at) // outputs with a wide spread: 5σ of one is well over 1,000
		mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 5000, MaxTokens: 10})
		b := l.bucketFor("p", "m", at)
		b.mu.Lock()
		// Served 1,000 above what the window holds with the refused call now.
		arrival := int64(b.arrivalViewLocked())
		b.servedArrival = servedLevel{cur: arrival + 1000 + 1000, curStart: at.Add(-time.Second)}
		refuted, _ := b.voteLocked(at.Add(time.Second), time.Time{}, 1000)
		callSlack := b.marginOf(b.est.outputVariance(false, b.agingLocked()))
		b.mu.Unlock()
		if callSlack <= 1000 {
			t.Fatalf("%s: one output's 5σ is %d; the test needs it over 1,000", decides, callSlack)
		}
		if want := decides == DecidesKnown; refuted != want {
			t.Fatalf("%s: a 429 1,000 below a level served refutes the arrival view: %v, want %v", decides, refuted, want)
		}
	}
}

// Told the provider decides on what it knows, a call's output beyond what it
// was decided on counts from when it was written: a fixed window counts it in
// the window current then, a bucket takes it then, and a provider counting at
// completion counts all of it then. So it stays a window from its settle, not
// from the call's arrival, and it is tokens, not a request. Told the provider
// counts on arrival (a sliding window that books the output in the call's
// entry), and under whole, it leaves with the call's entry.
func TestDecidesKnownCountsTheOutputFromWhenItWasWritten(t *testing.T) {
	for _, tc := range []struct {
		name, decides, countsAt string
		stays                   bool
	}{
		{"Known", DecidesKnown, "", true},
		{"KnownOnArrival", DecidesKnown, CountsAtArrival, false},
		{"Whole", DecidesWhole, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testGate()
			c.Defaults = ModelLimits{TPM: 10_000, RPM: 100, Decides: tc.decides, CountsAt: tc.countsAt}
			c.Learn = false // no probe step when the budget holds the call back a window on
			l, _, _ := newTestLedger(t, c)
			a := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "a", InputTokens: 1000, MaxTokens: 100})
			b := mustAdmit(t, l, t0, Request{Provider: "p", Model: "m", Session: "b", InputTokens: 500, MaxTokens: 2000})
			// b writes less than it asked: nothing is written past what was decided
			if err := l.Settle(t0.Add(10*time.Second), b, Usage{InputTokens: 500, OutputTokens: 200}); err != nil {
				t.Fatal(err)
			}
			// a writes 3,000 where it asked 100 (a provider that lets it)
			if err := l.Settle(t0.Add(30*time.Second), a, Usage{InputTokens: 1000, OutputTokens: 3000}); err != nil {
				t.Fatal(err)
			}
			if st := l.BucketStatus(t0.Add(31*time.Second), "p", "m"); st.WindowTokens != 4700 || st.WindowRequests != 2 {
				t.Fatalf("at 31 s: window %d tokens, %d requests; want 4,700 and 2", st.WindowTokens, st.WindowRequests)
			}
			at := t0.Add(61 * time.Second) // both calls' entries left
			if !tc.stays {
				mustAdmit(t, l, at, req(7500))
				return
			}
			if st := l.BucketStatus(at, "p", "m"); st.WindowTokens != 2900 || st.WindowRequests != 0 {
				t.Fatalf("at 61 s: window %d tokens, %d requests; want a's 2,900 written past what was decided, no request", st.WindowTokens, st.WindowRequests)
			}
			mustWait(t, l, at, req(7500), "tpm", 90*time.Second).Cancel(at)
		})
	}
}
