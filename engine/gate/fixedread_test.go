package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// fixedRead plays a provider that counts 1,000–1,099 tokens in each
// clock-aligned minute against a gate that counts a sliding one (budget
// 1,250), with calls of 200 answered a second after their admission: 400
// served at 0:50, 600 at 1:06 and 200 at 1:20 (the sliding minute then held
// 1,200, all of it answered but the last call; the fixed one 800), and at 1:52
// — the 0:50 calls gone from the sliding minute — 200 more, and then a call of
// 100 refused. The fixed minute held 1,000 then and had served no more; the
// sliding minute held 1,000 too, on arrival and at completion, after serving
// 1,200 in both within two windows — and a 429 40 s before voted for fixed
// windows as this one does. set adjusts the config.
func fixedRead(t *testing.T, set func(*Config)) (*Ledger, *eventLog) {
	return fixedReadFrom(t, fixedReadPlay{voted: 40 * time.Second}, set)
}

// fixedReadPlay varies fixedRead: a learned quota in place of the start (0:
// none), hook, run on the bucket just before the 429, and voted: a 429 that
// voted for fixed windows came that long before this one (0: none).
type fixedReadPlay struct {
	quota float64
	hook  func(b *bucket, at time.Time)
	voted time.Duration
}

func fixedReadFrom(t *testing.T, p fixedReadPlay, set func(*Config)) (*Ledger, *eventLog) {
	t.Helper()
	c := learnGate()
	c.Defaults.TPM, c.Defaults.RPM = 1250, 100
	if set != nil {
		set(&c)
	}
	l, _, ev := newTestLedger(t, c)
	if p.quota > 0 {
		b := l.bucketFor("p", "m", t0)
		b.mu.Lock()
		b.learn.quota = p.quota
		b.mu.Unlock()
	}
	call := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100, MaxTokens: 100}
	serve := func(at time.Time, n int, took time.Duration) { // n calls answered took after at
		var tks []Ticket
		for range n {
			tks = append(tks, mustAdmit(t, l, at, call))
		}
		for _, tk := range tks {
			if err := l.Settle(at.Add(took), tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
				t.Fatal(err)
			}
		}
	}
	serve(t0.Add(50*time.Second), 2, time.Second)
	serve(t0.Add(66*time.Second), 3, time.Second)
	serve(t0.Add(80*time.Second), 1, time.Second)
	at := t0.Add(112 * time.Second)
	serve(at, 1, time.Second/2)
	at = at.Add(time.Second)
	refused := mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 50, MaxTokens: 50})
	_ = l.Release(at, refused)
	b := l.bucketFor("p", "m", at)
	b.mu.Lock()
	if p.voted > 0 {
		b.fixedEv.readVotes, b.fixedEv.readVoteAt = 1, at.Add(-p.voted)
	}
	if p.hook != nil {
		p.hook(b, at)
	}
	b.mu.Unlock()
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Minute, Axis: engine.AxisTokens, Admitted: at, Tokens: refused.Reserved})
	return l, ev
}

// A second 429, 40 s after the first, that the sliding window cannot explain
// (it refused 1,100 after serving 1,200 within two windows, on arrival and at
// completion) while the current fixed window can (it served 1,000 and refused
// 1,100) switches a model the user said nothing about to fixed windows, and its trigger is read
// there. So it does when probes raised the budget to 1,400 from a start of
// 1,000: the refused level is the gate's own excess against the start.
func TestFixedWindowsLearnedFromTheReadings(t *testing.T) {
	cases := []struct {
		name string
		p    fixedReadPlay
		set  func(*Config)
	}{
		{"at the start", fixedReadPlay{voted: 40 * time.Second}, nil},
		{"a budget the probes raised", fixedReadPlay{voted: 40 * time.Second, quota: 1400}, func(c *Config) { c.Defaults.TPM = 1000 }},
		// 1,110 served in the fixed window: within 1% of refused 1,100 (a
		// call counted on both sides of an edge, an estimate in flight)
		{"a fixed level served within its error", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.servedFixed.note(at, 1110, time.Minute)
		}}, nil},
		// counting at completion (a vote moved it): fixed windows count on
		// arrival, and the view goes back with the switch
		{"in the completion view", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.atCompletion = true
		}}, nil},
		// a 429 refuted the fixed view 11 windows ago: past the memory
		{"a refutation long ago", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.fixedRefutedAt = at.Add(-11 * time.Minute)
		}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := fixedReadFrom(t, tc.p, tc.set)
			now := t0.Add(114 * time.Second)
			if got := windowsOf(l, now); got != WindowsFixed {
				t.Fatalf("windows %q, want fixed", got)
			}
			if n := windowsEvents(ev); n != 1 {
				t.Fatalf("%d windows events, want 1", n)
			}
			if _, trig := quota(l, now); trig != 1000 {
				t.Fatalf("trigger %g, want the fixed window's 1,000", trig)
			}
			if got := l.BucketStatus(now, "p", "m").CountsAt; got != CountsAtArrival {
				t.Fatalf("counts at %q, want arrival: fixed windows count a call when it arrives", got)
			}
		})
	}
}

// What does not switch: one vote, or two in one burst; and what does not point
// at fixed windows is no vote: the fixed window served above what it refused
// too, or did within ten windows (another client's calls, a bucket), a
// sliding view explains the 429, another client is read spending the key, the
// refused level is a fraction of the budget (not the gate's own excess), the
// user said the windows slide, and learning is off.
func TestFixedWindowsNotLearnedFromReadingsThatDoNotFit(t *testing.T) {
	cases := []struct {
		name string
		p    fixedReadPlay
		set  func(*Config)
	}{
		// the first vote: another client's backlog can look like this once
		{"one vote", fixedReadPlay{}, nil},
		// the vote before came 10 s earlier: the same burst
		{"two votes in one burst", fixedReadPlay{voted: 10 * time.Second}, nil},
		// a lone bucket's rate moved the view to completion a second ago
		{"a rate holds the completion view", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.atCompletion, b.rateViewAt = true, at.Add(-time.Second)
		}}, nil},
		// 1,120 served in the fixed window, refused at 1,100
		{"the fixed window served more", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.servedFixed.note(at, 1120, time.Minute)
		}}, nil},
		{"a refutation within ten windows", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.fixedRefutedAt = at.Add(-9 * time.Minute)
		}}, nil},
		// the completion window served no level above the one refused (as
		// a provider that counts at completion does with the calls in flight)
		{"the completion view explains it", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.servedDone = servedLevel{}
		}}, nil},
		{"the arrival view explains it", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.servedArrival = servedLevel{}
		}}, nil},
		// another client read spending a fifth of a stated 1,500
		{"another client spends the key", fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
			b.learn.stated = 1500
			b.outside.others = othersSpend{mean: 300, weight: 1, at: at}
		}}, nil},
		// refused at 1,100 of a budget of 1,400: below 0.8 of it
		{"a fraction of the budget", fixedReadPlay{voted: 40 * time.Second}, func(c *Config) { c.Defaults.TPM = 1400 }},
		{"told sliding", fixedReadPlay{voted: 40 * time.Second}, func(c *Config) { c.Defaults.Windows = WindowsSliding }},
		{"learning off", fixedReadPlay{voted: 40 * time.Second}, func(c *Config) { c.Learn = false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := fixedReadFrom(t, tc.p, tc.set)
			if n := windowsEvents(ev); n != 0 {
				t.Fatalf("%d windows events, want none (windows now %q)", n, windowsOf(l, t0.Add(114*time.Second)))
			}
		})
	}
}

// refuseEarlyInAWindow serves 800 at 3:01, then at 4:01 — a new fixed window,
// the 3:01 calls still in the sliding one — refuses a call of 100 after
// serving one of 200: the fixed window refused 300 after serving 800 in the
// one before, which no fixed-window provider does on its own.
func refuseEarlyInAWindow(t *testing.T, l *Ledger) {
	t.Helper()
	call := Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100, MaxTokens: 100}
	var tks []Ticket
	at := t0.Add(181 * time.Second)
	for range 4 {
		tks = append(tks, mustAdmit(t, l, at, call))
	}
	at = t0.Add(241 * time.Second)
	tks = append(tks, mustAdmit(t, l, at, call))
	for _, tk := range tks {
		if err := l.Settle(at, tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	refused := mustAdmit(t, l, at, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 50, MaxTokens: 50})
	_ = l.Release(at, refused)
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens, Admitted: at, Tokens: refused.Reserved})
}

// Fixed windows learned from the readings go at the first 429 the fixed
// window does not explain: a token bucket, or another client, refutes each
// view in turn, and its reading there would be a fraction of the limit.
// Learned from the provider's own word (its waits), they stay.
func TestFixedWindowsFromReadingsGoWhenAFixedWindowRefusesLow(t *testing.T) {
	l, ev := fixedRead(t, nil)
	refuseEarlyInAWindow(t, l)
	if got := windowsOf(l, t0.Add(242*time.Second)); got != "" {
		t.Fatalf("windows %q, want sliding again", got)
	}
	if n := windowsEvents(ev); n != 2 {
		t.Fatalf("%d windows events, want 2 (fixed, then sliding)", n)
	}
	if _, trig := quota(l, t0.Add(242*time.Second)); trig < 1000 {
		t.Fatalf("trigger %g: the fixed window's low reading was taken", trig)
	}

	l2, _, _ := newTestLedger(t, func() Config { c := learnGate(); c.Defaults.TPM, c.Defaults.RPM = 1250, 100; return c }())
	warm := mustAdmit(t, l2, t0, Request{Provider: "p", Model: "m", Session: "s", InputTokens: 100, MaxTokens: 100})
	if err := l2.Settle(t0.Add(time.Second), warm, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
		t.Fatal(err) // an output seen: the levels served are recorded from here
	}
	learnFixedFromWaits(t, l2)
	refuseEarlyInAWindow(t, l2)
	if got := windowsOf(l2, t0.Add(242*time.Second)); got != WindowsFixed {
		t.Fatalf("windows learned from waits: %q after a low 429, want fixed still", got)
	}
	b2 := l2.bucketFor("p", "m", t0.Add(242*time.Second))
	b2.mu.Lock()
	refutedAt := b2.fixedRefutedAt
	b2.mu.Unlock()
	if !refutedAt.Equal(t0.Add(241 * time.Second)) {
		t.Fatalf("the low 429 did not refute the fixed view (refuted at %s): the case tests nothing", refutedAt.Sub(t0))
	}
}

// A 429 that the fixed window does not explain forgets the votes before it:
// two votes are two in a row.
func TestFixedWindowsReadingVotesForgottenAtARefutation(t *testing.T) {
	l, _ := fixedReadFrom(t, fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
		b.servedFixed.note(at, 1120, time.Minute) // served above the 1,100 refused
	}}, nil)
	b := l.bucketFor("p", "m", t0.Add(114*time.Second))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fixedEv.readVotes != 0 {
		t.Fatalf("%d votes kept, want none after the fixed window refused below what it served", b.fixedEv.readVotes)
	}
}

// One vote is counted, and kept with when it came: the next, half a window
// or more later, switches (TestFixedWindowsLearnedFromTheReadings).
func TestFixedWindowsOneReadingVoteIsCounted(t *testing.T) {
	l, _ := fixedReadFrom(t, fixedReadPlay{}, nil)
	b := l.bucketFor("p", "m", t0.Add(114*time.Second))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fixedEv.readVotes != 1 || !b.fixedEv.readVoteAt.Equal(t0.Add(113*time.Second)) {
		t.Fatalf("votes %d at %s, want 1 at 1:53", b.fixedEv.readVotes, b.fixedEv.readVoteAt.Sub(t0))
	}
}

// Fixed windows the readings learned are kept as such with the learned
// quota: restored, a 429 the fixed window does not explain still undoes them.
func TestFixedWindowsFromReadingsRestoredAsSuch(t *testing.T) {
	l, _ := fixedRead(t, nil)
	b := l.bucketFor("p", "m", t0.Add(114*time.Second))
	b.mu.Lock()
	q := b.snapshotLocked()
	b.mu.Unlock()
	if !q.FixedLearned || !q.FixedByReadings {
		t.Fatalf("saved fixedLearned %v fixedByReadings %v, want both", q.FixedLearned, q.FixedByReadings)
	}
	l2, _, _ := newTestLedger(t, func() Config { c := learnGate(); c.Defaults.TPM, c.Defaults.RPM = 1250, 100; return c }())
	b2 := l2.bucketFor("p", "m", t0.Add(114*time.Second))
	b2.mu.Lock()
	b2.restoreLocked(q)
	byReadings := b2.fixedByReadings
	b2.mu.Unlock()
	if !byReadings || windowsOf(l2, t0.Add(114*time.Second)) != WindowsFixed {
		t.Fatalf("restored: windows %q, by the readings %v; want fixed, by the readings", windowsOf(l2, t0.Add(114*time.Second)), byReadings)
	}
}

// A wait that says the windows slide forgets the readings' votes, as it
// starts the waits' and the resets' counts again.
func TestFixedWindowsReadingVotesForgottenAtAStatedSlidingWait(t *testing.T) {
	l := learningLedger(t, nil)
	b := l.bucketFor("p", "m", t0)
	b.mu.Lock()
	b.fixedEv.readVotes, b.fixedEv.readVoteAt = 1, t0
	b.mu.Unlock()
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 10*time.Second) // ends at 0:50, away from an edge
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fixedEv.readVotes != 0 {
		t.Fatalf("%d reading votes kept after a wait that ends away from an edge, want none", b.fixedEv.readVotes)
	}
}

// With no fixed level served to read (levels noted before the fixed part was
// kept), the switch leaves the clean record as it was: an empty level is no
// clean window.
func TestFixedWindowsFromReadingsKeepACleanRecordWithoutAFixedLevel(t *testing.T) {
	l, _ := fixedReadFrom(t, fixedReadPlay{voted: 40 * time.Second, hook: func(b *bucket, at time.Time) {
		b.servedFixed = servedLevel{}
	}}, nil)
	now := t0.Add(114 * time.Second)
	if got := windowsOf(l, now); got != WindowsFixed {
		t.Fatalf("windows %q, want fixed", got)
	}
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.learn.cleanMax <= 0 {
		t.Fatalf("clean record %g after the switch, want the one kept", b.learn.cleanMax)
	}
}
