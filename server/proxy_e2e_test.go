package server

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gatectl/gatectl/internal/testenv"
)

// The end-to-end tests drive real SDKs through a gatectl binary to a fake
// upstream on loopback (testdata/e2e). They need their dependencies installed:
//
//	(cd testdata/e2e/node && npm ci --no-audit --no-fund)   # the OpenAI Node SDK
//	(cd testdata/e2e/go && go mod download)                  # openai-go, in a module of its own
//
// and skip, saying so, when they are missing.

var (
	e2eBinOnce sync.Once
	e2eBin     string
	e2eBinErr  error
)

// e2eGatectl builds the gatectl binary once per test binary.
func e2eGatectl(t *testing.T) string {
	t.Helper()
	e2eBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gatectl-e2e-bin-")
		if err != nil {
			e2eBinErr = err
			return
		}
		e2eBin = filepath.Join(dir, "gatectl")
		cmd := exec.Command("go", "build", "-o", e2eBin, "./cmd/gatectl")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			e2eBinErr = err
			t.Logf("go build: %s", out)
		}
	})
	if e2eBinErr != nil {
		t.Fatalf("building gatectl: %v", e2eBinErr)
	}
	return e2eBin
}

func TestProxyE2ENodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	dir := filepath.Join("..", "testdata", "e2e", "node")
	testenv.Tool(t, "node", "Debian: apt-get install -y nodejs npm")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		testenv.Unavailable(t, "e2e: the OpenAI Node SDK is not installed: run (cd testdata/e2e/node && npm ci --no-audit --no-fund)")
	}
	cmd := exec.Command("node", "--test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATECTL_BIN="+e2eGatectl(t))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}

func TestProxyE2EGoSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	dir := filepath.Join("..", "testdata", "e2e", "go")
	check := exec.Command("go", "list", "-m", "github.com/openai/openai-go/v3")
	check.Dir = dir
	check.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	if out, err := check.CombinedOutput(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("e2e: openai-go is not downloaded: run (cd testdata/e2e/go && go mod download) [%s]", out))
	}
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATECTL_BIN="+e2eGatectl(t))
	out, err := cmd.CombinedOutput()
	t.Logf("go test (testdata/e2e/go):\n%s", out)
	if err != nil {
		t.Fatalf("go test: %v", err)
	}
}
