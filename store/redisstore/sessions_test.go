package redisstore

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/internal/redistest"
)

// A session setting made through one instance holds on another, even one that
// had the session cached already.
func TestSessionsShared(t *testing.T) {
	srv := redistest.Start(t)
	sessions := func() *pool.Sessions {
		s := open(t, srv, FailOpen)
		ss := pool.NewSessions(s.Sessions(&pool.MemorySessionStore{}))
		s.Notify(Handlers{SessionChanged: ss.Forget})
		return ss
	}
	a, b := sessions(), sessions()
	waitSubscribed(t, srv)
	if rec, _ := b.Get("s1"); rec.Switch != "" {
		t.Fatalf("fresh session: %+v", rec)
	} // b now caches the empty record
	if _, err := a.SetSwitch("s1", "off"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if rec, _ := b.Get("s1"); rec.Switch == "off" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B still follows its cached record 5s after A switched the session off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec, _ := sessions().Get("s1"); rec.Switch != "off" {
		t.Fatalf("an instance started later reads %+v", rec)
	}
}

// A session's settings cleared through one instance stay cleared on the
// instance that set them: its own state file's older record must not come
// back when Redis answers that the session has none.
func TestSessionClearedElsewhereStaysCleared(t *testing.T) {
	srv := redistest.Start(t)
	a := open(t, srv, FailOpen).Sessions(&pool.MemorySessionStore{})
	b := open(t, srv, FailOpen).Sessions(&pool.MemorySessionStore{})
	if err := a.SaveSession("s1", pool.SessionRecord{Switch: "off"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SaveSession("s1", pool.SessionRecord{}); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := a.LoadSession("s1"); err != nil || !rec.IsZero() {
		t.Fatalf("A reads %+v (%v) after B cleared the session, want nothing", rec, err)
	}
}
