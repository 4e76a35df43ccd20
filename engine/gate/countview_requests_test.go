package gate

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// atCompletion is a provider that counts 20 requests a minute at completion.
func atCompletion() *requestWindow {
	return &requestWindow{limit: 20, window: time.Minute, atCompletion: true}
}

// requestWindow is a provider's request limit: at most limit requests a
// sliding window, counted when a call arrives or, atCompletion, when it
// completes (a call still running is not counted yet).
type requestWindow struct {
	limit        int
	window       time.Duration
	atCompletion bool
	counted      []time.Time
}

// offer decides a call arriving at now.
func (p *requestWindow) offer(now time.Time) bool {
	for len(p.counted) > 0 && !p.counted[0].After(now.Add(-p.window)) {
		p.counted = p.counted[1:]
	}
	if len(p.counted) >= p.limit {
		return false
	}
	if !p.atCompletion {
		p.counted = append(p.counted, now)
	}
	return true
}

// complete counts a call that completed at at (times in order).
func (p *requestWindow) complete(at time.Time) {
	if p.atCompletion {
		p.counted = append(p.counted, at)
	}
}

// requestBucket is a provider's request limit as a token bucket: a reserve of
// rate requests, full at first, refilled continuously at rate a window; a call
// takes one when it arrives.
type requestBucket struct {
	bucket tokenBucket
}

func (p *requestBucket) offer(now time.Time) bool { return p.bucket.take(now, 1) }
func (p *requestBucket) complete(time.Time)       {}

// requestLimit is the provider's request limit the calls meet.
type requestLimit interface {
	offer(now time.Time) bool // decides a call arriving at now
	complete(at time.Time)    // a call completed at at (times in order)
}

// requestRun is a run of calls against a provider's request limit.
type requestRun struct {
	rpm  int          // the gate's configured request limit
	prov requestLimit // the provider's (20 requests a minute)
	// The k-th call admitted completes lat + (7k mod latSteps) × 0.5 s after
	// it (1 s and 9 steps when zero: 1–5 s).
	lat      time.Duration
	latSteps int
	// A refused call's 429 comes back trip after its admission and says
	// retryAfter (a window when zero).
	trip, retryAfter time.Duration
	d                time.Duration
	setup            func(*bucket) // when not nil, run on the model's bucket (locked) first
	config           func(*Config) // when not nil, changes the gate's configuration
	opts             []Option      // the ledger's options beside its event hook
}

// run offers a call of 200 tokens to model p/m every 250 ms for r.d from t0
// (far more than the provider's 20 requests a window), the gate configured at
// r.rpm with its derived margin; an admitted call reaches the provider at once
// and is settled when it completes; a refused one is released and reported as
// a request 429. It returns the 429s' times and the requests served in each
// window from t0.
func (r requestRun) run(t *testing.T) (*eventLog, []time.Duration, []int) {
	t.Helper()
	c := rpmGate(r.rpm)
	c.SafetyFactor = 0
	if r.config != nil {
		r.config(&c)
	}
	ev := &eventLog{}
	l, err := NewLedger(c, engine.NewFakeClock(t0), append(r.opts, WithEventHook(ev.add))...)
	if err != nil {
		t.Fatal(err)
	}
	if r.setup != nil {
		b := l.bucketFor("p", "m", t0)
		b.mu.Lock()
		r.setup(b)
		b.mu.Unlock()
	}
	lat, steps, retryAfter := r.lat, r.latSteps, r.retryAfter
	if lat == 0 {
		lat, steps = time.Second, 9
	}
	if retryAfter == 0 {
		retryAfter = c.Window
	}
	type call struct {
		tk       Ticket
		admitted time.Time
		at       time.Time // when it completes, or when its 429 comes back
	}
	var inFlight, refusing []call // each in the order of at
	var refused []time.Duration
	served := make([]int, int(r.d/c.Window)+1)
	admitted := 0
	for now := t0; now.Before(t0.Add(r.d)); now = now.Add(250 * time.Millisecond) {
		for len(inFlight) > 0 && !inFlight[0].at.After(now) {
			f := inFlight[0]
			inFlight = inFlight[1:]
			if err := l.Settle(f.at, f.tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
				t.Fatal(err)
			}
			r.prov.complete(f.at)
			served[int(f.at.Sub(t0)/c.Window)]++
		}
		for len(refusing) > 0 && !refusing[0].at.After(now) {
			f := refusing[0]
			refusing = refusing[1:]
			if err := l.Release(f.at, f.tk); err != nil {
				t.Fatal(err)
			}
			l.RateLimitedBy(f.at, "p", "m", engine.RateLimit{Axis: engine.AxisRequests, RetryAfter: retryAfter, Admitted: f.admitted})
			refused = append(refused, f.at.Sub(t0))
		}
		tk, w := l.Submit(now, Request{Provider: "p", Model: "m", InputTokens: 100, MaxTokens: 100})
		if w != nil {
			w.Cancel(now)
			continue
		}
		if !r.prov.offer(now) {
			refusing = append(refusing, call{tk, now, now.Add(r.trip)})
			continue
		}
		done := now.Add(lat + time.Duration(7*admitted%steps)*500*time.Millisecond)
		admitted++
		i := len(inFlight)
		for i > 0 && inFlight[i-1].at.After(done) {
			i--
		}
		inFlight = append(inFlight[:i], append([]call{{tk, now, done}}, inFlight[i:]...)...)
	}
	return ev, refused, served
}

// servedFrom5 is the requests served in windows 5–29.
func servedFrom5(served []int) int {
	n := 0
	for _, s := range served[5:30] {
		n += s
	}
	return n
}

// A provider that counts requests at completion refuses, at the edge of the
// gate's arrival window, a count the arrival view served a window before: the
// cohort the gate admitted has left its window but not the provider's. The
// completion view explains it — the provider refused at the count of
// completions it held — and the request 429s switch the bucket to it. On
// arrival the gate took a 429 at every cooldown's end, for the hour (15 and 14
// in these 30 windows), and used half the requests.
func TestRequest429sSwitchToTheCompletionView(t *testing.T) {
	for _, rpm := range []int{20, 40} { // configured at the truth, and at twice it
		ev, refused, served := requestRun{rpm: rpm, prov: atCompletion(), d: 30 * time.Minute}.run(t)
		t.Logf("rpm %d: 429s at %v; views %v; served a window %v", rpm, refused, countModeSwitches(ev), served)
		if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
			t.Fatalf("rpm %d: view switches %v, want one, to completion", rpm, got)
		}
		if n := len(refused); n > 5 || refused[n-1] >= 10*time.Minute {
			t.Fatalf("rpm %d: 429s at %v, want at most 5 and none from window 10 on", rpm, refused)
		}
		// From window 5 on, at least 90% of the provider's 20 a window. (A
		// window's completions can exceed it — the calls in flight when a
		// count was taken were not in it — and they come in bursts a window
		// and a call's latency apart, so one window may hold few.)
		if n := servedFrom5(served); n < 18*25 {
			t.Fatalf("rpm %d: %d requests served in windows 5–29, want at least 90%% of 20 a window (%v)", rpm, n, served)
		}
	}
}

// A token bucket of requests refuses where its reserve runs out. With long
// calls (5–25 s) a probe step above its rate was refused at the arrival count
// it had served when the reserve lent it, while the completions, lagging,
// stayed under what they had served: two such 429s switched the bucket to the
// completion view. There the gate counts the calls in flight as free, and the
// next 429 came at a completion count far under one served — the completion
// view contradicted, the arrival view not: it switches back. Without that
// vote, the completion view's request ceiling stepped down 429 after 429 (21
// 429s in 30 windows, 382 requests served in windows 5–29 of 500).
func TestRequest429sTakeABucketBackToArrival(t *testing.T) {
	bucket := &requestBucket{tokenBucket{rate: 20, level: 20, window: time.Minute, at: t0}}
	ev, refused, served := requestRun{rpm: 20, prov: bucket, lat: 5 * time.Second, latSteps: 41, d: 30 * time.Minute}.run(t)
	t.Logf("429s at %v; views %v; served a window %v", refused, countModeSwitches(ev), served)
	if got := countModeSwitches(ev); len(got) != 2 || got[1] != "on-arrival" {
		t.Fatalf("view switches %v, want to completion and back", got)
	}
	if len(refused) > 4 || servedFrom5(served) < 19*25 {
		t.Fatalf("429s at %v, %d served in windows 5–29: want at most 4, and at least 95%% of 20 a window", refused, servedFrom5(served))
	}
}

// Across call latencies (0.1–1 s to 20–40 s), Retry-Afters (5 s and a
// window), 429s that come back at once or a second late, and the request limit
// configured at the truth or twice it (40 runs per provider): a provider that
// counts on arrival never switches the view, a token bucket of requests ends
// each run on arrival, and one that counts at completion is switched to it in
// nine runs in ten or more, at a fraction of the 429s (on arrival these runs
// took 1,379; switched, 340).
func TestRequest429sAcrossLatencies(t *testing.T) {
	type tally struct{ runs, switched, endOnArrival, refused int }
	got := map[string]*tally{}
	for _, retryAfter := range []time.Duration{5 * time.Second, time.Minute} {
		for _, trip := range []time.Duration{0, time.Second} {
			for _, lat := range []struct {
				min   time.Duration
				steps int
			}{{100 * time.Millisecond, 3}, {time.Second, 9}, {3 * time.Second, 11}, {5 * time.Second, 41}, {20 * time.Second, 41}} {
				for _, rpm := range []int{20, 40} {
					for name, prov := range map[string]func() requestLimit{
						"on arrival": func() requestLimit { return &requestWindow{limit: 20, window: time.Minute} },
						"a bucket": func() requestLimit {
							return &requestBucket{tokenBucket{rate: 20, level: 20, window: time.Minute, at: t0}}
						},
						"at completion": func() requestLimit { return atCompletion() },
					} {
						ev, refused, _ := requestRun{rpm: rpm, prov: prov(), lat: lat.min, latSteps: lat.steps, trip: trip, retryAfter: retryAfter, d: 30 * time.Minute}.run(t)
						tl := got[name]
						if tl == nil {
							tl = &tally{}
							got[name] = tl
						}
						views := countModeSwitches(ev)
						tl.runs++
						tl.refused += len(refused)
						if len(views) > 0 {
							tl.switched++
						}
						if len(views) == 0 || views[len(views)-1] == "on-arrival" {
							tl.endOnArrival++
						}
					}
				}
			}
		}
	}
	for name, tl := range got {
		t.Logf("%s: %d runs, %d switched, %d ended on arrival, %d 429s", name, tl.runs, tl.switched, tl.endOnArrival, tl.refused)
	}
	if tl := got["on arrival"]; tl.switched != 0 {
		t.Errorf("counted on arrival: %d runs of %d switched the view", tl.switched, tl.runs)
	}
	if tl := got["a bucket"]; tl.endOnArrival != tl.runs {
		t.Errorf("a bucket: %d runs of %d ended at completion", tl.runs-tl.endOnArrival, tl.runs)
	}
	if tl := got["at completion"]; tl.switched < tl.runs*9/10 || tl.refused > 1379/3 {
		t.Errorf("counted at completion: %d runs of %d switched, %d 429s: want nine in ten, and at most a third of the 1,379 on arrival", tl.switched, tl.runs, tl.refused)
	}
}

// Request 429s leave the view alone when the user said how the provider
// counts, when learning is off, and with a shared window (its counts are this
// instance's; the provider counts everyone's calls).
func TestRequest429sKeepTheViewWhenTheyCannotTell(t *testing.T) {
	for name, r := range map[string]requestRun{
		"configured on arrival": {setup: func(b *bucket) { b.limits.CountsAt = CountsAtArrival }},
		"learning off":          {config: func(c *Config) { c.Learn = false }},
		"a shared window":       {opts: []Option{WithSharedWindow(grantAllShared{})}},
	} {
		r.rpm, r.prov, r.d = 20, atCompletion(), 10*time.Minute
		ev, refused, _ := r.run(t)
		if got := countModeSwitches(ev); len(got) != 0 {
			t.Errorf("%s: view switches %v (429s at %v), want none", name, got, refused)
		}
	}
}

// Each condition of a request 429's vote: one view contradicted (its served
// level reaches the refused count), the other not; by the slack, at once.
func TestRequestVote(t *testing.T) {
	for _, c := range []struct {
		name                                 string
		refusedA, servedA, refusedD, servedD int
		doneRefuted                          bool
		want                                 int
	}{
		{"arrival contradicted by its slack: switch", 19, 20, 21, 20, false, switchVotes},
		{"arrival contradicted exactly: a vote", 20, 20, 21, 20, false, 1},
		{"completion refuted lately: a vote", 19, 20, 21, 20, true, 1},
		{"both explain it", 21, 20, 21, 20, false, 0},
		{"both contradicted", 19, 20, 20, 20, false, 0},
		{"slack of a larger count: a vote", 199, 200, 201, 200, false, 1},
		{"slack of a larger count: switch", 190, 200, 201, 200, false, switchVotes},
		{"completion contradicted exactly: a vote back", 21, 20, 20, 20, false, -1},
		{"completion contradicted by its slack: back", 21, 20, 17, 22, false, -switchVotes},
		{"completion refuted lately says nothing of arrival", 21, 20, 17, 22, true, -switchVotes},
		{"slack of a larger count: a vote back", 201, 200, 199, 200, false, -1},
	} {
		if got := requestVote(c.refusedA, c.servedA, c.refusedD, c.servedD, c.doneRefuted); got != c.want {
			t.Errorf("%s: vote %d, want %d", c.name, got, c.want)
		}
	}
}

// The counts a request 429 is read at: nineteen calls admitted together and
// completed a second later, a twentieth admitted at 2 s, completed at 3 s; a
// window after the nineteen, the arrival window holds one call and the
// completion window all twenty, and the provider refuses the next call. On
// arrival that is a refusal at 2 after serving 20 — contradicted — and at
// completion at 21 after serving 20 (the twentieth met 19 completed calls):
// the view switches. Read without the refused call, the completion view
// would be contradicted too.
func TestRequest429ReadAgainstTheServedLevels(t *testing.T) {
	l, ev, at := servedTwentyThenRefused(t, nil, false)
	if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
		t.Fatalf("view switches %v, want one, to completion", got)
	}
	// The switch comes first: the 429 is then read in the completion view,
	// at its 20 (read on arrival, 2 would set nothing: a window nearly empty).
	if got := l.BucketStatus(at, "p", "m").RPMBudget; got != 20 {
		t.Fatalf("request budget %d after the 429, want 20, the completions it met", got)
	}

	// Calls the caller sends later are read as they reach the provider: the
	// twenty sent one by one met 0–19 on arrival (at their admission, the
	// others unsent, each met 0).
	_, ev, _ = servedTwentyThenRefused(t, nil, true)
	if got := countModeSwitches(ev); len(got) != 1 || got[0] != "at-completion" {
		t.Fatalf("view switches %v, calls sent after their admission: want one, to completion", got)
	}

	// A reset forgets the levels served before it: nothing to contradict.
	_, ev, _ = servedTwentyThenRefused(t, func(l *Ledger, at time.Time) { l.Reset(at, "p", "m") }, false)
	if got := countModeSwitches(ev); len(got) != 0 {
		t.Fatalf("view switches %v after a reset, want none", got)
	}
}

// servedTwentyThenRefused is TestRequest429ReadAgainstTheServedLevels's
// history; before, when not nil, runs just before the refused call; with
// sends, the twenty are admitted at once, before any is sent (Request.Sends),
// and sent a millisecond apart.
func servedTwentyThenRefused(t *testing.T, before func(*Ledger, time.Time), sends bool) (*Ledger, *eventLog, time.Time) {
	t.Helper()
	l, _, ev := newTestLedger(t, rpmGate(40))
	settle := func(at time.Time, tk Ticket) {
		t.Helper()
		if err := l.Settle(at, tk, Usage{InputTokens: 100, OutputTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	call := Request{Provider: "p", Model: "m", InputTokens: 100, MaxTokens: 100}
	if sends {
		sent := call
		sent.Sends = true
		var tks []Ticket
		for range 20 {
			tks = append(tks, mustAdmit(t, l, t0, sent))
		}
		for i, tk := range tks {
			l.Sent(t0.Add(time.Duration(i)*time.Millisecond), tk)
		}
		for _, tk := range tks {
			settle(t0.Add(time.Second), tk)
		}
	} else {
		var first []Ticket
		for range 19 {
			first = append(first, mustAdmit(t, l, t0, call))
		}
		for _, tk := range first {
			settle(t0.Add(time.Second), tk)
		}
		settle(t0.Add(3*time.Second), mustAdmit(t, l, t0.Add(2*time.Second), call))
	}
	at := t0.Add(60500 * time.Millisecond)
	if before != nil {
		before(l, at)
	}
	refused := mustAdmit(t, l, at, call)
	if err := l.Release(at, refused); err != nil {
		t.Fatal(err)
	}
	l.RateLimitedBy(at, "p", "m", engine.RateLimit{Axis: engine.AxisRequests, RetryAfter: time.Second, Admitted: at})
	return l, ev, at
}

// fixedRequests is a provider's request limit in clock-aligned fixed windows,
// counted on arrival.
type fixedRequests struct {
	limit  int
	window time.Duration
	edge   time.Time
	n      int
}

func (p *fixedRequests) offer(now time.Time) bool {
	if e := now.Truncate(p.window); e.After(p.edge) {
		p.edge, p.n = e, 0
	}
	if p.n >= p.limit {
		return false
	}
	p.n++
	return true
}
func (p *fixedRequests) complete(time.Time) {}

// In fixed windows the provider counts on arrival (fixedwindow.go): request
// 429s do not move the view there, whatever the counts read.
func TestRequest429sDoNotVoteInFixedWindows(t *testing.T) {
	for _, lat := range []time.Duration{time.Second, 5 * time.Second, 20 * time.Second} {
		for _, rpm := range []int{20, 40} {
			for name, prov := range map[string]func() requestLimit{
				"fixed":         func() requestLimit { return &fixedRequests{limit: 20, window: time.Minute} },
				"at completion": func() requestLimit { return atCompletion() },
			} {
				ev, refused, _ := requestRun{rpm: rpm, prov: prov(), lat: lat, latSteps: 21, d: 30 * time.Minute, setup: func(b *bucket) {
					b.limits.Windows = WindowsFixed
					b.setSpanLocked(t0, b.l.conf())
				}}.run(t)
				if got := countModeSwitches(ev); len(got) != 0 {
					t.Fatalf("%s, lat %v, rpm %d: view switches %v (429s at %v), want none in fixed windows", name, lat, rpm, got, refused)
				}
			}
		}
	}
}
