package gate

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Every field of the learner a shared store carries survives snapshot and
// restore, and an older record without the per-window flags leaves them alone.
func TestLearnedSnapshotRestore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := newLearner(10000, true, t0)
	a.quota, a.trigger, a.lastCut, a.last429 = 9000, 8500, t0.Add(time.Second), t0.Add(2*time.Second)
	a.cleanMax, a.lastProbe, a.probeRun, a.preProbe = 8700, t0.Add(3*time.Second), 2, 8600
	a.prevCut, a.lastRelax, a.relaxed, a.lastRaise = t0.Add(4*time.Second), t0.Add(5*time.Second), true, t0.Add(7*time.Second)
	a.lastSuspect, a.suspects = t0.Add(6*time.Second), 2
	a.firstProbe, a.firstFrom, a.firstUsed = firstProbeInFlight, 8400, true
	a.refusedLevel, a.againProbeAt = 8500, t0.Add(8*time.Second)
	q := a.snapshot()
	if q.RefusedLevel != 8500 || !q.AgainProbeAt.Equal(t0.Add(8*time.Second)) {
		t.Fatalf("snapshot RefusedLevel %v AgainProbeAt %v, want 8500 and t0+8s", q.RefusedLevel, q.AgainProbeAt)
	}
	b := newLearner(10000, true, t0.Add(time.Hour))
	b.restore(q)
	if got := b.snapshot(); got != q {
		t.Fatalf("restored %+v\n      want %+v", got, q)
	}
	if b.burstStart != q.LastCut {
		t.Fatalf("burstStart %v, want the last cut %v", b.burstStart, q.LastCut)
	}
	old := LearnedQuota{Quota: 9500, Trigger: 9000}
	c := newLearner(10000, true, t0)
	c.cleanMax, c.probeRun = 7000, 3
	c.restore(old)
	if c.quota != 9500 || c.trigger != 9000 || c.cleanMax != 7000 || c.probeRun != 3 || !c.lastProbe.Equal(t0) {
		t.Fatalf("an older record: quota %v trigger %v cleanMax %v probeRun %d lastProbe %v", c.quota, c.trigger, c.cleanMax, c.probeRun, c.lastProbe)
	}
	// A record from before LastRaise: the later of its probe and relax stands
	// for it, not zero (which would make a probe's overshoot look held).
	pre := a.snapshot()
	pre.LastRaise = time.Time{}
	d := newLearner(10000, true, t0.Add(time.Hour))
	d.restore(pre)
	if want := maxTime(pre.LastProbe, pre.LastRelax); !d.lastRaise.Equal(want) {
		t.Fatalf("lastRaise %v from a record without it, want %v", d.lastRaise, want)
	}
}

// blockingLearnedStore holds Load of one model until release is closed: a
// shared store (Redis) that is slow to answer for it.
type blockingLearnedStore struct {
	MemoryLearnedStore
	model   string
	entered chan struct{}
	release chan struct{}
}

func (s *blockingLearnedStore) Load(provider, model string) (LearnedQuota, bool) {
	if model == s.model {
		close(s.entered)
		<-s.release
	}
	return s.MemoryLearnedStore.Load(provider, model)
}

// A new model's learned state is loaded outside the ledger's shard lock: a
// store slow to answer for one new model must not hold the admissions of the
// other models in its shard (with Redis, up to store.redis.timeout each).
func TestNewBucketLoadsOutsideShardLock(t *testing.T) {
	st := &blockingLearnedStore{model: "slow", entered: make(chan struct{}), release: make(chan struct{})}
	l, err := NewLedger(DefaultConfig(), engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	// A model in the same shard as the slow one.
	other := ""
	for i := range 10000 {
		if m := fmt.Sprintf("m%d", i); l.shardOf("p", m) == l.shardOf("p", "slow") {
			other = m
			break
		}
	}
	if other == "" {
		t.Fatal("no model in the slow one's shard")
	}
	go l.BucketStatus(t0, "p", "slow")
	<-st.entered
	done := make(chan error, 1)
	go func() {
		tk, err := l.Admit(context.Background(), Request{Provider: "p", Model: other, InputTokens: 10, MaxTokens: 10})
		if err == nil {
			err = l.Settle(t0, tk, Usage{InputTokens: 10, OutputTokens: 10})
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // a deadline for a deadlock, not a timing bound
		t.Fatal("an admission on another model of the shard waited for the slow store's Load")
	}
	close(st.release)
}

// The view the readings were taken in is stored with them. A restart without a
// configured view takes it back; one whose configured view differs drops the
// readings (they measured the other thing) and keeps the level that held; a
// record that does not say (an older build's) leaves the bucket's view and
// readings alone.
func TestLearnedStoreKeepsTheCountView(t *testing.T) {
	for _, tc := range []struct {
		name, countsAt, stored string
		wantView               string
		wantTrigger, wantQuota float64
	}{
		{"learned, restored", "", CountsAtCompletion, "completion", 900, 950},
		{"configured, same", CountsAtCompletion, CountsAtCompletion, "completion", 900, 950},
		{"configured, other", CountsAtArrival, CountsAtCompletion, "arrival", 0, 900},
		{"configured, record does not say", CountsAtCompletion, "", "completion", 900, 950},
		{"learned, record does not say", "", "", "arrival", 900, 950},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &MemoryLearnedStore{}
			st.Save("p", "m", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, CountsAt: tc.stored})
			c := testGate()
			c.Defaults.CountsAt = tc.countsAt
			l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
			if err != nil {
				t.Fatal(err)
			}
			bs := l.BucketStatus(t0, "p", "m")
			if bs.CountsAt != tc.wantView || bs.Trigger != tc.wantTrigger || bs.Quota != tc.wantQuota {
				t.Fatalf("counts at %q, trigger %v, quota %v; want %q, %v, %v", bs.CountsAt, bs.Trigger, bs.Quota, tc.wantView, tc.wantTrigger, tc.wantQuota)
			}
		})
	}
}

// What a bucket saves carries its view: a learned switch survives a restart
// through the store.
func TestLearnedStoreSavesTheCountView(t *testing.T) {
	st := &MemoryLearnedStore{}
	c := learnGate()
	c.Defaults.RPM = 100
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	servedThenRefused(t, l, 63*time.Second) // switches to completion and saves
	if q, _ := st.Load("p", "m"); q.CountsAt != CountsAtCompletion {
		t.Fatalf("saved view %q, want completion", q.CountsAt)
	}
	l2, err := NewLedger(c, engine.NewFakeClock(t0.Add(time.Minute)), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	if bs := l2.BucketStatus(t0.Add(time.Minute), "p", "m"); bs.CountsAt != "completion" {
		t.Fatalf("after a restart counts at %q, want completion", bs.CountsAt)
	}
}

// What the headers taught of what the provider decides on survives a restart
// through the store; a `decides: known` the user had set and then removed
// does not come back as if the headers had said it.
func TestLearnedStoreKeepsWhatTheHeadersTaughtOfDecides(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stored        LearnedQuota
		configured    string
		wantDecides   string
		wantForgotten bool // the readings in the other units went
	}{
		{"learned, restored", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Decides: DecidesKnown, DecidesLearned: true}, "", DecidesKnown, false},
		{"configured then, removed since", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Decides: DecidesKnown}, "", DecidesWhole, true},
		{"learned, the user says whole now", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Decides: DecidesKnown, DecidesLearned: true}, DecidesWhole, DecidesWhole, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &MemoryLearnedStore{}
			st.Save("p", "m", tc.stored)
			c := testGate()
			c.Defaults.Decides = tc.configured
			l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
			if err != nil {
				t.Fatal(err)
			}
			bs := l.BucketStatus(t0, "p", "m")
			if bs.Decides != tc.wantDecides || (bs.Trigger == 0) != tc.wantForgotten {
				t.Fatalf("decides %q, trigger %v; want %q, readings forgotten %v", bs.Decides, bs.Trigger, tc.wantDecides, tc.wantForgotten)
			}
		})
	}
	// And a switch is saved.
	st := &MemoryLearnedStore{}
	l, err := NewLedger(testGate(), engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	b := l.lockedBucketFor("p", "m", t0)
	b.switchDecidesLocked(t0, true, 0.1)
	b.mu.Unlock()
	if q, _ := st.Load("p", "m"); !q.DecidesLearned || q.Decides != DecidesKnown {
		t.Fatalf("saved decides %q, learned %v; want known, learned", q.Decides, q.DecidesLearned)
	}
}

// Fixed windows read from the stated waits survive a restart through the
// store; readings taken in the other windows than the bucket counts now go.
func TestLearnedStoreKeepsTheWindowsTheWaitsTaught(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stored        LearnedQuota
		configured    string
		wantWindows   string
		wantForgotten bool
	}{
		{"learned, restored", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Fixed: true, FixedLearned: true}, "", WindowsFixed, false},
		{"configured then, removed since", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Fixed: true}, "", "", true},
		{"learned, the user says sliding now", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0, Fixed: true, FixedLearned: true}, WindowsSliding, "", true},
		{"sliding then, the user says fixed now", LearnedQuota{Quota: 950, Trigger: 900, LastProbe: t0}, WindowsFixed, WindowsFixed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &MemoryLearnedStore{}
			st.Save("p", "m", tc.stored)
			c := testGate()
			c.Defaults.Windows = tc.configured
			l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
			if err != nil {
				t.Fatal(err)
			}
			bs := l.BucketStatus(t0, "p", "m")
			if bs.Windows != tc.wantWindows || (bs.Trigger == 0) != tc.wantForgotten {
				t.Fatalf("windows %q, trigger %v; want %q, readings forgotten %v", bs.Windows, bs.Trigger, tc.wantWindows, tc.wantForgotten)
			}
		})
	}
	// And a switch is saved.
	st := &MemoryLearnedStore{}
	l, err := NewLedger(testGate(), engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	l.RateLimited(t0.Add(40*time.Second), "p", "m", 20*time.Second)
	l.RateLimited(t0.Add(100*time.Second), "p", "m", 20*time.Second)
	if q, _ := st.Load("p", "m"); !q.Fixed || !q.FixedLearned {
		t.Fatalf("saved fixed %v, learned %v; want both", q.Fixed, q.FixedLearned)
	}
}

// A record adopted from another instance never lifts the quota or the trigger
// above the limit this model's provider states (that instance's record may
// predate its headers); restating the same figure does not move the budget, so
// without the bound it would stay above the stated limit until a 429.
func TestAdoptedRecordStaysUnderTheStatedLimit(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	l.Calibrate(t0, "p", "m", 800, 800, -1, -1)
	if bs := l.BucketStatus(t0, "p", "m"); bs.TokenBudget != 800 {
		t.Fatalf("setup: budget %d, want the stated 800", bs.TokenBudget)
	}
	l.AdoptLearned("p", "m", LearnedQuota{Quota: 5000, Trigger: 4000, LastProbe: t0})
	l.Calibrate(t0.Add(time.Second), "p", "m", 800, 800, -1, -1)
	bs := l.BucketStatus(t0.Add(time.Second), "p", "m")
	if bs.Quota > 800 || bs.Trigger > 800 || bs.TokenBudget > 800 {
		t.Fatalf("adopted: quota %v trigger %v budget %d, want none above the stated 800", bs.Quota, bs.Trigger, bs.TokenBudget)
	}
	// A record under the stated limit is taken as it is.
	l.AdoptLearned("p", "m", LearnedQuota{Quota: 600, Trigger: 600, LastProbe: t0})
	if bs := l.BucketStatus(t0.Add(time.Second), "p", "m"); bs.Quota != 600 || bs.Trigger != 600 {
		t.Fatalf("adopted 600: quota %v trigger %v", bs.Quota, bs.Trigger)
	}
}

// A record that says the provider decides on what it knows (read from its
// headers by another instance) resizes the calls already queued: they were
// sized with an output reserve this model no longer keeps.
func TestAdoptedDecidesResizesTheQueue(t *testing.T) {
	l, _, _ := newTestLedger(t, testGate())
	mustAdmit(t, l, t0, req(900)) // 900 + the reserve of 100: the window is full
	w := mustWait(t, l, t0, req(50), "tpm", time.Minute)
	if w.reserved != 150 {
		t.Fatalf("setup: queued call reserves %d, want 50 + the reserve of 100", w.reserved)
	}
	l.AdoptLearned("p", "m", LearnedQuota{Quota: 1000, LastProbe: t0, Decides: DecidesKnown, DecidesLearned: true})
	if bs := l.BucketStatus(t0, "p", "m"); bs.Decides != DecidesKnown {
		t.Fatalf("decides %q after the adopted record, want known", bs.Decides)
	}
	if w.reserved != 50 {
		t.Fatalf("queued call reserves %d after the switch, want its input alone (50)", w.reserved)
	}
}

// A reload while a model's bucket is being built (its learned state loading
// from a slow store) reaches the new bucket too: the reload walked the buckets
// without it, and it came in with the configuration before the reload (here a
// cap the reload set, ignored until the next reload).
func TestReloadWhileABucketIsBuiltReachesIt(t *testing.T) {
	st := &blockingLearnedStore{model: "m", entered: make(chan struct{}), release: make(chan struct{})}
	l, err := NewLedger(testGate(), engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	built := make(chan BucketStatus, 1)
	go func() { built <- l.BucketStatus(t0, "p", "m") }()
	<-st.entered // building, its Load held
	c := testGate()
	c.Defaults.MaxTPM = 500
	if err := l.Reconfigure(t0, c); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	<-built
	if bs := l.BucketStatus(t0, "p", "m"); bs.MaxTPM != 500 || bs.TokenBudget > 500 {
		t.Fatalf("after the reload: cap %d budget %d, want the reload's cap of 500", bs.MaxTPM, bs.TokenBudget)
	}
}

// A record says the window its figures are per: an instance with another
// window (a peer on the shared store, or this one after a reload) adopts them
// at the same rate; a record from before the field is taken as it is.
func TestLearnedRecordCarriesItsWindow(t *testing.T) {
	c := testGate()
	c.Window = 10 * time.Second
	for _, tc := range []struct {
		name string
		q    LearnedQuota
		want float64
	}{
		{"a minute's figures", LearnedQuota{Quota: 800, Trigger: 800, LastProbe: t0, CleanMax: 780, Window: time.Minute}, 800.0 / 6},
		{"this window's", LearnedQuota{Quota: 800, Trigger: 800, LastProbe: t0, CleanMax: 780, Window: 10 * time.Second}, 800},
		{"an older record", LearnedQuota{Quota: 800, Trigger: 800, LastProbe: t0, CleanMax: 780}, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &MemoryLearnedStore{}
			st.Save("p", "m", tc.q)
			l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
			if err != nil {
				t.Fatal(err)
			}
			if q, trig := quota(l, t0); math.Abs(q-tc.want) > 1e-9 || math.Abs(trig-tc.want) > 1e-9 {
				t.Fatalf("loaded: quota %v trigger %v, want %v", q, trig, tc.want)
			}
			l.AdoptLearned("p", "m", tc.q) // from a peer
			if q, trig := quota(l, t0); math.Abs(q-tc.want) > 1e-9 || math.Abs(trig-tc.want) > 1e-9 {
				t.Fatalf("adopted: quota %v trigger %v, want %v", q, trig, tc.want)
			}
		})
	}
	// And what it saves says its window.
	st := &MemoryLearnedStore{}
	l, err := NewLedger(c, engine.NewFakeClock(t0), WithLearnedStore(st))
	if err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, l, t0, req(500))
	l.RateLimitedBy(t0, "p", "m", engine.RateLimit{RetryAfter: time.Second, Axis: engine.AxisTokens})
	if q, _ := st.Load("p", "m"); q.Window != 10*time.Second || q.Trigger != 600 {
		t.Fatalf("saved window %s trigger %v, want 10s and 600", q.Window, q.Trigger)
	}
}
