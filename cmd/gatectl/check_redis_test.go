package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/internal/redistest"
)

// `gatectl check` verifies store.redis: ok while Redis answers, a failure
// naming the address (never the password) when it does not.
func TestCheckRedis(t *testing.T) {
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "gatectl.yaml")
	if err := os.WriteFile(path, []byte("store:\n  redis: {url: \"redis://"+rs.Addr+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runGatectl(t, "", "check", "--config", path)
	if err != nil || !strings.Contains(out, "store.redis: ok — "+rs.Addr) {
		t.Fatalf("check: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	rs.Kill()
	if err := os.WriteFile(path, []byte("store:\n  redis: {url: \"redis://:s3cret@"+rs.Addr+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = runGatectl(t, "", "check", "--config", path)
	if err == nil || !strings.Contains(errOut, "no answer") || !strings.Contains(errOut, rs.Addr) {
		t.Fatalf("check with Redis down: err %v, stderr %q", err, errOut)
	}
	if strings.Contains(errOut, "s3cret") {
		t.Fatalf("the password reached the output: %s", errOut)
	}
}
