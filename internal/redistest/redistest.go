// Package redistest starts a real redis-server for a test: on a free loopback
// port, without persistence, killed when the test ends.
package redistest

import (
	"bufio"
	"fmt"
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
	t     testing.TB
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
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}, s.extra...)
	s.cmd = exec.Command(s.path, args...)
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
		s := &Server{path: path, t: t, Port: freePort(t)}
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		s.extra = []string{"--cluster-enabled", "yes", "--dir", dir,
			"--cluster-config-file", "nodes-" + strconv.Itoa(s.Port) + ".conf"}
		s.Restart()
		t.Cleanup(s.Kill)
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
