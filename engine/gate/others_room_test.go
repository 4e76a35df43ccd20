package gate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// status is the model's status in the outside rig.
func (r *outsideRig) status() BucketStatus { return r.l.BucketStatus(r.now, "p", "m") }

// othersMean is the mean of the readings of the others' spend, without the
// margin for its swing that the status's OthersSpend holds.
func (r *outsideRig) othersMean() float64 {
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.outside.others.mean
}

// The answers' remaining tokens say another client spends 150 of the stated
// 800: the budget keeps under the 650 it leaves, before any 429, and is whole
// again once the readings fall back (the client stopped).
func TestOthersRoomHoldsTheBudgetUnderTheirSpend(t *testing.T) {
	r := newOutsideRig(t, 800)
	whole := r.status().TokenBudget
	r.answers(30, 20, 150, false)
	st := r.status()
	if st.OthersSpend < 140 || st.OthersSpend > 160 {
		t.Fatalf("others spend %d read from the remaining tokens, want about 150", st.OthersSpend)
	}
	// testGate's safety factor is 1; half of what is left of the first
	// reading's jump in the spread keeps a few tokens more
	if st.TokenBudget < 800-150-10 || st.TokenBudget > 800-150 || st.TokenBudget != 800-st.OthersSpend {
		t.Fatalf("token budget %d (whole %d, others spend %d), want 800 − %d, a little under the 650 the others leave", st.TokenBudget, whole, st.OthersSpend, st.OthersSpend)
	}
	if st.RateLimited != 0 || st.Trigger != 0 {
		t.Fatalf("%d 429s, trigger %v: the room needs neither", st.RateLimited, st.Trigger)
	}

	r.answers(30, 20, 0, false) // a window with nobody else on the key
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("a window after the others stopped: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
}

// Readings that do not say plainly that someone else spends leave the budget
// whole: noise about nothing (a mean no larger than twice the spread), and a
// spend under a hundredth of the limit.
func TestOthersRoomNotFromReadingsThatSayNothingPlain(t *testing.T) {
	cases := map[string]func(r *outsideRig){
		"noise about nothing": func(r *outsideRig) {
			for i := range 60 {
				r.answer(20, int64(40*(i%2)), false) // 0, 40, 0, 40 …: a mean of 20, a spread as large
			}
		},
		"under a hundredth": func(r *outsideRig) { r.answers(60, 20, 7, false) },
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			r := newOutsideRig(t, 800)
			whole := r.status().TokenBudget
			run(r)
			if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
				t.Fatalf("others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
			}
		})
	}
}

// A window without an answer leaves nobody knowing what the others spend now:
// the room is not kept on old readings, and the first answer after it is one
// reading alone, which says nothing plainly — even when the readings said so
// plainly before the pause.
func TestOthersRoomForgottenWithoutAnswers(t *testing.T) {
	r := newOutsideRig(t, 800)
	whole := r.status().TokenBudget
	r.answers(30, 20, 150, false)
	if r.status().OthersSpend == 0 {
		t.Fatal("setup: no room read")
	}
	r.now = r.now.Add(2 * time.Minute)
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("two minutes without answers: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
	r.answer(20, 400, false)
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("then one answer reading 400: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
}

// The spend is a mean over time, not over readings: answers that come at one
// instant move it by the least step each after the first (a mean that moved a
// fifth of the way to each reading would take the five below from 100 to
// about 167), and readings spread over time move it by 1 − exp(−elapsed ÷
// 10 s) at a minute's window.
func TestOthersRoomIsAMeanOverTime(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.answers(30, 10, 100, false)
	for range 5 { // five answers at one instant, two seconds after the last
		r.answer(10, 200, false)
		r.now = r.now.Add(-outsideTick)
	}
	r.now = r.now.Add(outsideTick)
	kept := math.Exp(-2.0/10) * math.Pow(1-0.02, 4) // of the distance to 200: the least step is 2%
	got, want := r.othersMean(), 200-100*kept
	if math.Abs(got-want) > 2 {
		t.Fatalf("others spend %.0f after five answers at one instant reading 200, from 100: want about %.0f (two seconds' weight, then the least step four times)", got, want)
	}
	r.answers(4, 10, 200, false) // eight more seconds at 200
	want = 200 - 100*kept*math.Exp(-8.0/10)
	if got := r.othersMean(); math.Abs(got-want) > 2 {
		t.Fatalf("others spend %.0f after eight more seconds at 200: want about %.0f", got, want)
	}
}

// After a pause one reading is no spend read plainly, whatever it says — it
// is most of the mean, and alone — and its jump is most of the spread: the
// new level reads plainly only once readings agree with it for a while.
func TestOthersRoomReadAgainAfterAPause(t *testing.T) {
	r := newOutsideRig(t, 800)
	whole := r.status().TokenBudget
	r.answers(30, 20, 0, false)
	r.now = r.now.Add(40 * time.Second)
	r.answer(20, 150, false)
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("one answer after a 40 s pause: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
	r.answers(2, 20, 150, false)
	if st := r.status(); st.OthersSpend != 0 {
		t.Fatalf("three answers after the pause, at 150 from 0: others spend %d, want none yet (the jump is the spread)", st.OthersSpend)
	}
	r.answers(12, 20, 150, false)
	if st := r.status(); st.OthersSpend < 140 {
		t.Fatalf("fifteen answers after the pause, all at 150: others spend %d, want about 150", st.OthersSpend)
	}
}

// The room holds the gate's calls back; it is no limit learned of the
// provider. A call larger than the room but within the learned budget waits
// for it — for an empty window — and is not an over-budget call, which could
// never fit and so goes at once. The others leave 350 here, and the calls of
// 380 fit the learned budget of 400, not the room.
func TestOthersRoomHoldsALargeCallBack(t *testing.T) {
	r := newOutsideRig(t, 800, func(c *Config) { c.Learn = true })
	b := r.l.bucketFor("p", "m", r.now)
	b.mu.Lock()
	b.learn.trigger = 400
	b.mu.Unlock()
	r.answers(30, 10, 450, false)
	if st := r.status(); st.OthersSpend < 440 || st.TokenBudget > 360 {
		t.Fatalf("setup: others spend %d, budget %d", st.OthersSpend, st.TokenBudget)
	}
	big := Request{Provider: "p", Model: "m", Session: "big", InputTokens: 379, MaxTokens: 1}
	r.now = r.now.Add(time.Second)
	tk, w := r.l.Submit(r.now, big)
	if w == nil {
		t.Fatalf("a call of 380 with the room at %d went at once (%s)", r.status().TokenBudget, tk.Reason)
	}
	granted := 0
	for range 3 * 60 { // three windows of calls of 380, held back by the room alone
		r.now = r.now.Add(time.Second)
		if tk, ok := w.Poll(r.now); ok {
			granted++
			if tk.Reason == "over-budget" {
				t.Fatal("a call larger than the room only went as over the budget")
			}
			if err := r.l.Settle(r.now, tk, Usage{InputTokens: 379, OutputTokens: 1}); err != nil {
				t.Fatal(err)
			}
			if _, w = r.l.Submit(r.now, big); w == nil {
				t.Fatal("a call of 380 went at once into a window holding one")
			}
		}
		r.l.Calibrate(r.now, "p", "m", r.stated, max(0, r.stated-r.status().WindowTokens-450), -1, -1)
	}
	if granted == 0 {
		t.Fatal("the calls larger than the room never went (each should, into an empty window)")
	}
}

// A 429 that refutes both views while the answers show another client
// spending — plainly or not yet — is that client's doing, not a drained
// reserve: it is read by the window, not by the rate of the gate's own spend
// (in the simulator, a slow start from half the limit took a rate of 0.62 of
// what the other client left and kept it for the hour; over real sockets, a
// 429 soon after a switch of view, 0.60 of the limit).
func TestOthersSpendKeepsA429FromTheRate(t *testing.T) {
	for _, c := range []struct {
		spend    float64
		wantRate bool
	}{
		{20000, false}, // a fifth of the stated 100,000
		{500, true},    // under a hundredth: nobody else to speak of, a drained reserve
	} {
		l, ev, now := relaxedBeforeADrainedReserve(t, true)
		b := l.bucketFor("p", "m", now)
		b.mu.Lock()
		b.learn.stated = 100000
		b.outside.others = othersSpend{mean: c.spend, variance: c.spend * c.spend, weight: 1, at: now} // not plainly yet
		_, plain := b.othersRoomLocked(now)
		b.mu.Unlock()
		if plain {
			t.Fatalf("setup: a spend of %.0f reads plainly", c.spend)
		}
		l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
		if to := rateSteps(ev); (len(to) > 0) != c.wantRate {
			t.Fatalf("others read to spend %.0f: rate steps %v, want a rate %v", c.spend, to, c.wantRate)
		}
	}
}

// Once the spend reads plainly the room stays while the mean says the others
// spend, however the readings swing about it; it goes when the mean falls
// under a hundredth of the limit.
func TestOthersRoomStaysWhileTheySpend(t *testing.T) {
	r := newOutsideRig(t, 800)
	whole := r.status().TokenBudget
	r.answers(30, 10, 150, false)
	for i := range 30 { // 0, 300, 0, 300 …: a mean of 150, a spread as large
		r.answer(10, int64(300*(i%2)), false)
		if st := r.status(); st.OthersSpend == 0 {
			t.Fatalf("answer %d of readings swinging about 150: the room let go", i)
		}
	}
	r.answers(60, 10, 0, false)
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("two windows with nobody else spending: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
}

// The other client's count in the window swings about its mean with each of
// its calls, and a gate held at the mean's room meets the swings above it:
// the room keeps half the readings' spread under it as well. Readings of 100
// and 200 in turn leave about 800 − 150 − 33 (the spread as the moving mean
// weighs it, each reading's whole squared distance from the mean before it:
// about 66); the same mean read steadily, 650.
func TestOthersRoomKeepsAMarginForTheirSwing(t *testing.T) {
	steady := newOutsideRig(t, 800)
	steady.answers(60, 10, 150, false)
	swinging := newOutsideRig(t, 800)
	swinging.answers(30, 10, 150, false)
	for i := range 60 {
		swinging.answer(10, int64(100+100*(i%2)), false)
	}
	if got := steady.status().TokenBudget; got < 645 || got > 650 {
		t.Fatalf("readings steadily at 150: budget %d, want about 650", got)
	}
	if got := swinging.status().TokenBudget; got < 605 || got > 630 {
		t.Fatalf("readings of 100 and 200 in turn: budget %d, want about 617 (half a spread of about 66 under 650)", got)
	}
}

// A provider that states its count as of each call's arrival, its answers
// coming five calls later: against the window as each answer comes, another
// client's steady 150 takes in the calls sent (or, counted at completion,
// completed) since and those that left the window, and swings by more than it
// spends — it never reads plainly, and the budget stays whole. Against the
// window as each call was sent it reads 150 to the token: that is the moment
// the provider states at, and the room holds the budget under what the other
// client leaves. The same provider stating as it answers is read at the
// answers' own moment. So it is whatever the user told the gate of how the
// provider counts and decides.
func TestOthersReadAtTheMomentTheProviderStates(t *testing.T) {
	for _, tc := range []struct {
		name         string
		atCompletion bool
		atSend       bool
		decides      string
	}{
		{"counted on arrival, stated as the call arrived", false, true, ""},
		{"counted on arrival, stated as it answers", false, false, ""},
		{"counted at completion, stated as the call arrived", true, true, ""},
		{"counted at completion, stated as it answers", true, false, ""},
		{"told it decides on what it knows, stated as the call arrived", false, true, DecidesKnown},
		{"told it counts at completion and decides on the whole cost, stated as the call arrived", true, true, DecidesWhole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newOutsideRig(t, 8000, func(c *Config) {
				if tc.atCompletion {
					c.Defaults.CountsAt = CountsAtCompletion
				}
				c.Defaults.Decides = tc.decides
			})
			rng := rand.New(rand.NewPCG(7, 7))
			type call struct {
				tk        Ticket
				at        time.Time // sent, or completed
				size      int64
				sentCount int64 // what the provider counted as the call arrived
			}
			var inFlight, done []call
			// count is what the provider counts at now: the calls sent within
			// the window, or those completed within it, and the other client's.
			count := func(now time.Time) int64 {
				if !tc.atCompletion {
					return r.status().WindowTokens + 150
				}
				n := int64(150)
				for _, c := range done {
					if now.Sub(c.at) < time.Minute {
						n += c.size
					}
				}
				return n
			}
			for range 150 {
				r.now = r.now.Add(outsideTick)
				size := 5 + rng.Int64N(146)
				tk := mustAdmit(t, r.l, r.now, Request{Provider: "p", Model: "m", Session: "s", InputTokens: int(size - 1), MaxTokens: 1})
				r.l.Sent(r.now, tk)
				inFlight = append(inFlight, call{tk, r.now, size, count(r.now)})
				if len(inFlight) <= 5 {
					continue
				}
				c := inFlight[0]
				inFlight = inFlight[1:]
				if err := r.l.Settle(r.now, c.tk, Usage{InputTokens: c.size - 1, OutputTokens: 1}); err != nil {
					t.Fatal(err)
				}
				sent := c.at
				c.at = r.now
				done = append(done, c)
				counted := c.sentCount
				if !tc.atSend {
					counted = count(r.now) // as it answers, the call counted
				}
				r.l.CalibrateAnswer(r.now, sent, "p", "m", r.stated, r.stated-counted, -1, -1)
			}
			if st := r.status(); st.OthersSpend < 145 || st.OthersSpend > 160 || math.Abs(float64(st.TokenBudget-(r.stated-st.OthersSpend))) > 1 {
				t.Fatalf("others spend %d, budget %d; want about 150 and the stated %d less it", st.OthersSpend, st.TokenBudget, r.stated)
			}
		})
	}
}

// The moment the provider states at is the provider's: a switch of view
// drops the readings of the others' spend taken in the old one, not which
// moment they were read at.
func TestStatedMomentOutlivesAViewSwitch(t *testing.T) {
	l, clk, _ := newTestLedger(t, testGate())
	b := l.lockedBucketFor("p", "m", clk.Now())
	defer b.mu.Unlock()
	m := &b.outside.moments
	for range statedMomentReadings {
		m.now.add(100, refillVarSpan)
		m.sent.add(10, refillVarSpan)
	}
	m.useSent = true
	b.completionByHeadersLocked(clk.Now())
	if m := b.outside.moments; !m.useSent || m.now.readings != 0 || m.sent.readings != 0 {
		t.Fatalf("after a switch of view: %+v; want the moment at the send kept, the readings gone", m)
	}
}
