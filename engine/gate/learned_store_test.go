package gate

import (
	"testing"
	"time"
)

// Every field of the learner a shared store carries survives snapshot and
// restore, and an older record without the per-window flags leaves them alone.
func TestLearnedSnapshotRestore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := newLearner(10000, true, t0)
	a.quota, a.trigger, a.lastCut, a.last429 = 9000, 8500, t0.Add(time.Second), t0.Add(2*time.Second)
	a.cleanMax, a.lastProbe, a.probeRun, a.preProbe = 8700, t0.Add(3*time.Second), 2, 8600
	a.prevCut, a.lastRelax, a.relaxed = t0.Add(4*time.Second), t0.Add(5*time.Second), true
	a.lastSuspect, a.suspects = t0.Add(6*time.Second), 2
	a.firstProbe, a.firstFrom, a.firstUsed = firstProbeInFlight, 8400, true
	q := a.snapshot()
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
}
