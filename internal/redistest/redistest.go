// Package redistest starts a real redis-server for a test: on a free loopback
// port, without persistence, killed when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/testenv"
)

// Server is a redis-server process the test owns.
type Server struct {
	Addr  string // 127.0.0.1:port
	Port  int
	path  string
	extra []string // more redis-server arguments (cluster mode)
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited (and been waited for)
	t     testing.TB
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Start runs redis-server on a free loopback port and waits until it answers
// PING. It ends t (skip locally, fail in CI) when redis-server is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	path := testenv.Tool(t, "redis-server", "apt-get install -y redis-server")
	s := &Server{path: path, t: t}
	t.Cleanup(s.Kill)
	// The port is free when chosen, then released: another process may take it
	// before redis-server binds it. Then ours exits, and another port is tried.
	var err error
	for range 5 {
		s.Port = pickPort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redis-server: %v", err)
	return nil
}

// pickPort chooses the port of a new server (a test replaces it to make one collide).
var pickPort = freePort

// Kill stops the server (SIGKILL: what a crash looks like) and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port, empty, and waits for PING.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
}

// start (re)starts the process on s.Port and waits until it answers PING as
// itself: INFO's process_id is its PID, so a server another test started on the
// same port does not pass for it.
func (s *Server) start() error {
	s.Kill()
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}, s.extra...)
	cmd := exec.Command(s.path, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(s.Addr)
		if err == nil {
			var pid int
			if pid, err = processID(s.Addr); err == nil && pid != cmd.Process.Pid {
				err = fmt.Errorf("another redis-server (pid %d) answers on %s", pid, s.Addr)
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited before it answered (port taken?): %v", s.Addr, err)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer PING within 10s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processID asks the server at addr for its process_id (INFO server).
func processID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server names no process_id")
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

// StartCluster runs a Redis Cluster of n masters (no replicas) on loopback and
// waits until it serves every slot. It returns the nodes; a cluster client can
// start from the first one's URL.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	path := testenv.Tool(t, "redis-server", "apt-get install -y redis-server")
	cli := testenv.Tool(t, "redis-cli", "apt-get install -y redis-tools")
	dir := t.TempDir()
	var nodes []*Server
	args := []string{"--cluster", "create"}
	for range n {
		s := &Server{path: path, t: t}
		t.Cleanup(s.Kill)
		var err error
		for range 5 { // as in Start: a port taken meanwhile means another try
			s.Port = pickPort(t)
			s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
			s.extra = []string{"--cluster-enabled", "yes", "--dir", dir,
				"--cluster-config-file", "nodes-" + strconv.Itoa(s.Port) + ".conf"}
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		nodes = append(nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		for {
			out, _ := exec.Command(cli, "-p", strconv.Itoa(s.Port), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok within 20s:\n%s", s.Addr, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}
