package pool

import (
	"testing"
	"time"
)

// LongTermWaits lists each session in a long-term wait with its next attempt,
// the soonest first, and drops a session whose entry ended.
func TestLongTermWaitsListsOpenEntries(t *testing.T) {
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	if got := f.q.LongTermWaits(); len(got) != 0 {
		t.Fatalf("LongTermWaits with no entry = %+v", got)
	}
	late := f.q.ArmLongTerm(QuotaFailure{Session: "late", Route: rX, Turn: "t1"}, 2*time.Hour)
	soon := f.q.ArmLongTerm(QuotaFailure{Session: "soon", Route: rX}, 10*time.Minute)
	if late.Action != ActionWait || soon.Action != ActionWait {
		t.Fatalf("ArmLongTerm actions %v, %v, want wait", late.Action, soon.Action)
	}
	got := f.q.LongTermWaits()
	if len(got) != 2 || got[0].Session != "soon" || got[1].Session != "late" {
		t.Fatalf("LongTermWaits = %+v, want soon then late", got)
	}
	if !got[0].Pending || !got[0].NextAttemptAt.Equal(pt0.Add(10*time.Minute)) || got[0].Provider != "x" || got[1].Turn != "t1" {
		t.Fatalf("LongTermWaits = %+v, want soon pending at +10m on provider x, late on turn t1", got)
	}
	f.q.OnSuccess("soon")
	if got := f.q.LongTermWaits(); len(got) != 1 || got[0].Session != "late" {
		t.Fatalf("after soon's success LongTermWaits = %+v, want only late", got)
	}
}
