package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gatectl/gatectl/internal/testenv"
)

// TestProxyE2ESDKModelNames drives the official Anthropic and OpenAI Node SDKs
// through a gatectl binary with the model names they already use
// (testdata/e2e/node/sdk_names.e2e.mjs): successes, a stream, count_tokens,
// and each SDK's typed errors for a 429, a 529 and gatectl's own 400.
func TestProxyE2ESDKModelNames(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	dir := filepath.Join("..", "testdata", "e2e", "node")
	node := testenv.Tool(t, "node", "apt-get install nodejs, or see https://nodejs.org")
	for _, pkg := range []string{"openai", filepath.Join("@anthropic-ai", "sdk")} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
			testenv.Unavailable(t, "the npm package "+filepath.ToSlash(pkg)+" is not installed: run (cd testdata/e2e/node && npm ci --no-audit --no-fund)")
		}
	}
	cmd := exec.Command(node, "--test", "sdk_names.e2e.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATECTL_BIN="+e2eGatectl(t))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk_names.e2e.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}
