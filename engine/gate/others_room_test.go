package gate

import (
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// othersStatus is the model's status in the outside rig.
func (r *outsideRig) status() BucketStatus { return r.l.BucketStatus(r.now, "p", "m") }

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
	if want := 800 - st.OthersSpend; st.TokenBudget < want-1 || st.TokenBudget > want { // (testGate's safety factor is 1)
		t.Fatalf("token budget %d (whole %d), want the room the others leave, %d", st.TokenBudget, whole, want)
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
// the room is not kept on old readings.
func TestOthersRoomForgottenWithoutAnswers(t *testing.T) {
	r := newOutsideRig(t, 800)
	whole := r.status().TokenBudget
	r.answers(30, 20, 150, false)
	if r.status().OthersSpend == 0 {
		t.Fatal("setup: no room read")
	}
	r.now = r.now.Add(time.Minute)
	if st := r.status(); st.OthersSpend != 0 || st.TokenBudget != whole {
		t.Fatalf("a window without answers: others spend %d, budget %d; want 0 and the whole %d", st.OthersSpend, st.TokenBudget, whole)
	}
}

// The spend is a mean over about a sixth of the window, not the last few
// readings: one long answer in flight reads as a spend for as long as it
// runs, and the room does not follow it. Ten seconds of readings at 150
// after a window at 0 move the mean about two thirds of the way; three
// readings at 150 after a window at 100 move it far less.
func TestOthersRoomIsAMeanOverTime(t *testing.T) {
	r := newOutsideRig(t, 800)
	r.answers(30, 20, 100, false)
	r.answers(3, 20, 200, false) // six seconds
	got := float64(r.status().OthersSpend)
	want := 100 + 100*(1-math.Exp(-6.0/10))
	if math.Abs(got-want) > 5 {
		t.Fatalf("others spend %.0f after six seconds at 200 from 100, want about %.0f (a mean with a time constant of 10 s)", got, want)
	}
}

// A 429 that refutes both views while the answers plainly show another client
// spending is that client's doing, not a drained reserve: it is read by the
// window, not by the rate of the gate's own spend (in the simulator, a slow
// start from half the limit took a rate of 0.62 of what the other client left
// and kept it for the hour).
func TestOthersSpendKeepsA429FromTheRate(t *testing.T) {
	l, ev, now := relaxedBeforeADrainedReserve(t, true)
	b := l.bucketFor("p", "m", now)
	b.mu.Lock()
	b.learn.stated = 100000
	b.outside.others = othersSpend{mean: 20000, n: othersMinReadings, at: now}
	b.mu.Unlock()
	if st := l.BucketStatus(now, "p", "m"); st.OthersSpend != 20000 {
		t.Fatalf("setup: others spend %d", st.OthersSpend)
	}
	l.RateLimitedBy(now, "p", "m", engine.RateLimit{Axis: engine.AxisTokens, Tokens: 500})
	if to := rateSteps(ev); len(to) > 0 {
		t.Fatalf("a 429 while another client plainly spends was read by the rate (%.0f)", to[0])
	}
}
