package redistest

import (
	"testing"
)

// A port another redis-server took between choosing and starting must not pass
// for the new server's: Start notices its own exited, and tries another port.
func TestStartOnTakenPortTriesAnother(t *testing.T) {
	a := Start(t)
	defer func() { pickPort = freePort }()
	calls := 0
	pickPort = func(t testing.TB) int {
		calls++
		if calls == 1 {
			return a.Port // taken by a meanwhile
		}
		return freePort(t)
	}
	b := Start(t)
	if b.Port == a.Port {
		t.Fatalf("the second server took the first one's port %d: its PING was answered by the first", a.Port)
	}
	pid, err := processID(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if pid != b.cmd.Process.Pid {
		t.Fatalf("%s is answered by pid %d, not the server started (pid %d)", b.Addr, pid, b.cmd.Process.Pid)
	}
}
