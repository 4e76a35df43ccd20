package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds a main package of this module into dir.
func buildBinary(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The README's offline path, with real processes on loopback: the fake upstream,
// `gatectl serve` on a config pointing at it, a streamed completion through the
// proxy, `gatectl status` against the server, a SIGHUP reload, and a graceful
// SIGTERM.
func TestServeProcessEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	gatectl := buildBinary(t, dir, "./cmd/gatectl", "gatectl")
	fake := buildBinary(t, dir, "./examples/fakeupstream", "fakeupstream")

	upAddr := freePort(t)
	up := exec.Command(fake, "-listen", upAddr, "-tpm", "100000")
	up.Stderr = io.Discard
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { up.Process.Kill(); up.Wait() }()

	cfg := filepath.Join(dir, "gatectl.yaml")
	writeCfg := func(tpm int) {
		text := fmt.Sprintf("stateDir: state\nproviders:\n  local: {kind: openai, baseURL: \"http://%s/v1\"}\ngate:\n  defaults: {tpm: %d, rpm: 60}\n", upAddr, tpm)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(20000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, gatectl, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	stdout, _ := srv.StdoutPipe()
	srv.Stderr = io.Discard
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "gatectl listening on ") {
		t.Fatalf("first line %q: %v", line, err)
	}
	base := strings.TrimSpace(strings.TrimPrefix(line, "gatectl listening on "))

	// a streamed completion through the proxy, event by event
	waitUp(t, up, "http://"+upAddr)
	body := `{"model":"local/echo-1","stream":true,"messages":[{"role":"user","content":"hello through the gate"}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Gate-Route") != "local/echo-1" || !strings.Contains(string(b), `" gate"`) || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("stream: %d %v\n%s", resp.StatusCode, resp.Header, b)
	}
	if strings.Contains(string(b), `"usage"`) {
		t.Fatalf("the usage chunk gatectl asked for leaked to a client that did not: %s", b)
	}

	// gatectl status talks to the running server and shows the settled usage
	out, err := exec.Command(gatectl, "status", "--addr", base, "--format", "json").Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st struct {
		Models []struct {
			Provider, Model string
			WindowTokens    int64 `json:"windowTokens"`
			Start           float64
		} `json:"models"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st.Models) != 1 || st.Models[0].WindowTokens == 0 || st.Models[0].Start != 20000 {
		t.Fatalf("status %s: %v", out, err)
	}

	// SIGHUP reloads the edited config; the ledger keeps what it counted
	writeCfg(30000)
	srv.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ = exec.Command(gatectl, "status", "--addr", base, "--format", "json").Output()
		if json.Unmarshal(out, &st) == nil && len(st.Models) == 1 && st.Models[0].Start == 30000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP: %s", out)
		}
		time.Sleep(50 * time.Millisecond) // polling a real process
	}
	if st.Models[0].WindowTokens == 0 {
		t.Fatal("the reload lost the window")
	}

	// SIGTERM: a graceful exit
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func waitUp(t *testing.T, p *exec.Cmd, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came up: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
}
