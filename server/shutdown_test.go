package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/snapshot"
)

// Graceful shutdown ends open event streams at once (they never finish on their
// own) and stops accepting; /readyz says so while it drains.
func TestShutdownEndsEventStreams(t *testing.T) {
	m, err := snapshot.NewManager(context.Background(), "", snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, StateDir: t.TempDir(), ShutdownGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/gate/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, ":") {
		t.Fatalf("stream opened with %q", line)
	}
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second): // the grace period is 20s: only CloseAll ends it sooner
		t.Fatal("shutdown waited on the open event stream")
	}
	t.Logf("shut down in %s with a stream open", time.Since(began))
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}
