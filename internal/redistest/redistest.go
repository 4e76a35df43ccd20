// Package redistest starts a real redis-server for a test: on a free loopback
// port, without persistence, killed when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/testenv"
)

// Server is a redis-server process the test owns.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	path string
	cmd  *exec.Cmd
	t    testing.TB
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Start runs redis-server on a free loopback port and waits until it answers
// PING. It ends t (skip locally, fail in CI) when redis-server is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	path := testenv.Tool(t, "redis-server", "apt-get install -y redis-server")
	s := &Server{path: path, t: t, Port: freePort(t)}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Kill stops the server (SIGKILL: what a crash looks like) and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty, and waits for PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.cmd = exec.Command(s.path, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(s.Addr); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.Kill()
			s.t.Fatalf("redis-server on %s did not answer PING within 10s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
