package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/snapshot"
)

// serveWith runs a Server on loopback with the given server: section and returns
// its address; it shuts down when the test ends.
func serveWith(t *testing.T, section string) (string, *Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gatectl.yaml")
	if err := os.WriteFile(path, []byte(section), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, StateDir: t.TempDir(), ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		m.Close()
	})
	return ln.Addr().String(), srv
}

// healthzWithin asks /healthz on a fresh connection and fails unless it answers
// 200 within d.
func healthzWithin(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: d, Transport: &http.Transport{DisableKeepAlives: true}}
	began := time.Now()
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v after %s", err, time.Since(began))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
}

// slowBody opens a connection that sends a proxy request's headers and the first
// bytes of a body it never finishes.
func slowBody(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"model\":")
	return c
}

// closedWithin reads c until the server closes it (whatever it answers first) and
// fails if that takes longer than d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %s", d)
	}
}

const tightServer = "server: {maxConnections: 8, headerTimeout: 300ms, bodyTimeout: 300ms, idleTimeout: 300ms}\n"

// Slow bodies, silent connections and idle keep-alives are closed within their
// timeouts, and /healthz answers within 1 s while they are open — also with
// three times the connection cap waiting, whose excess sits in the accept queue.
func TestSlowClientsAreClosed(t *testing.T) {
	addr, srv := serveWith(t, tightServer)

	t.Run("slow bodies under the cap", func(t *testing.T) {
		var conns []net.Conn
		for range 6 {
			conns = append(conns, slowBody(t, addr))
		}
		healthzWithin(t, addr, time.Second)
		for _, c := range conns {
			closedWithin(t, c, 2*time.Second)
		}
	})

	t.Run("silent and idle connections", func(t *testing.T) {
		silent, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(idle)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatal("the server closed the keep-alive at once")
		}
		closedWithin(t, silent, 2*time.Second)
		closedWithin(t, idle, 2*time.Second)
	})

	t.Run("three times the cap", func(t *testing.T) {
		var conns []net.Conn
		for i := range 24 {
			if i%2 == 0 {
				conns = append(conns, slowBody(t, addr))
				continue
			}
			c, err := net.Dial("tcp", addr) // says nothing
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		time.Sleep(50 * time.Millisecond) // let the first eight be accepted
		if n := srv.conns.Load(); n > 8 {
			t.Fatalf("%d connections open, cap 8", n)
		}
		// The excess waits its turn: three rounds of 300ms at most, then /healthz.
		healthzWithin(t, addr, 2*time.Second)
		for _, c := range conns {
			closedWithin(t, c, 3*time.Second)
		}
	})

	// Every slot came back.
	deadline := time.Now().Add(2 * time.Second)
	for srv.conns.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("%d connections still counted open", n)
	}
}

// The body deadline ends with the body: a handler that then holds the request
// far longer than every timeout (a wait in the gate) and streams its answer slowly
// keeps its context and finishes (a WriteTimeout, or a deadline left armed, would
// cut it).
func TestLongHoldAfterTheBodyIsNotCut(t *testing.T) {
	lim := config.Server{MaxConnections: 4, HeaderTimeout: 200 * time.Millisecond, BodyTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}
	var cancelled atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select { // held in the gate, past every timeout
		case <-r.Context().Done():
			cancelled.Store(true)
			return
		case <-time.After(700 * time.Millisecond):
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 4 { // a slow stream
			fmt.Fprintf(w, "data: %d\n\n", i)
			http.NewResponseController(w).Flush()
			time.Sleep(150 * time.Millisecond)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	hs := newHTTPServer(h, lim)
	go hs.Serve(newLimitListener(ln, lim.MaxConnections, &open))
	defer hs.Close()

	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || strings.Count(string(body), "data: ") != 4 {
		t.Fatalf("status %d, body %q, err %v", resp.StatusCode, body, err)
	}
	if cancelled.Load() {
		t.Fatal("the request's context was cancelled while it was held")
	}
}

// The listener never has more than its cap open; Accept waits for a Close and
// returns at once when the listener is closed.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	ln := newLimitListener(inner, 2, &open)
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	a, _ := ln.Accept()
	b, _ := ln.Accept()
	third := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		third <- c
	}()
	select {
	case <-third:
		t.Fatal("accepted past the cap")
	case <-time.After(100 * time.Millisecond):
	}
	if open.Load() != 2 {
		t.Fatalf("open = %d", open.Load())
	}
	a.Close()
	a.Close() // a second Close gives nothing back twice
	select {
	case c := <-third:
		c.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("a closed connection did not free its slot")
	}
	b.Close()
	if open.Load() != 0 {
		t.Fatalf("open = %d after every Close", open.Load())
	}
	go func() { time.Sleep(50 * time.Millisecond); ln.Close() }()
	for range 3 { // fill the slots, then the next Accept waits until Close
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
		} else {
			return
		}
	}
	t.Fatal("Accept did not return after Close")
}
