package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tokenServerConfig = `
providers:
  alpha: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
api:
  tokenEnv: GATECTL_CLI_TEST_TOKEN
`

// The commands that talk to a server send the API token: from GATECTL_TOKEN, or
// from the variable the config's api.tokenEnv names (config from GATECTL_CONFIG).
func TestAPIClientSendsToken(t *testing.T) {
	t.Setenv("GATECTL_CLI_TEST_TOKEN", "cli-s3cret")
	t.Setenv("GATECTL_TOKEN", "")
	t.Setenv("GATECTL_CONFIG", "")
	url := startServer(t, tokenServerConfig)

	_, err := runCLI(t, "status", "--addr", url)
	if err == nil || !strings.Contains(err.Error(), "GATECTL_TOKEN") {
		t.Fatalf("status without a token: %v", err)
	}

	t.Setenv("GATECTL_TOKEN", "cli-s3cret")
	if out, err := runCLI(t, "status", "--addr", url); err != nil {
		t.Fatalf("status with GATECTL_TOKEN: %v\n%s", err, out)
	}

	t.Setenv("GATECTL_TOKEN", "")
	cfg := filepath.Join(t.TempDir(), "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(tokenServerConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATECTL_CONFIG", cfg)
	if out, err := runCLI(t, "status", "--addr", url); err != nil {
		t.Fatalf("status with the config's api.tokenEnv: %v\n%s", err, out)
	}

	// GATECTL_CONFIG set, the token not found through it: the refusal says
	// why, not only where a token may be put.
	t.Setenv("GATECTL_CLI_TEST_TOKEN", "")
	if _, err := runCLI(t, "status", "--addr", url); err == nil || !strings.Contains(err.Error(), "GATECTL_CLI_TEST_TOKEN (api.tokenEnv of GATECTL_CONFIG") {
		t.Errorf("the config's token variable unset: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("gate: {window: soon}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATECTL_CONFIG", bad)
	if _, err := runCLI(t, "status", "--addr", url); err == nil || !strings.Contains(err.Error(), "does not load") {
		t.Errorf("GATECTL_CONFIG that does not load: %v", err)
	}
}

// serve refuses an address beyond loopback without an API token, before it binds.
func TestServeRefusesPublicListenWithoutToken(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(tokenServerConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATECTL_CLI_TEST_TOKEN", "")
	_, err := runCLI(t, "serve", "--config", cfg, "--state-dir", t.TempDir(), "--listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "GATECTL_CLI_TEST_TOKEN (api.tokenEnv) is unset or empty") || !strings.Contains(err.Error(), "0.0.0.0:0") {
		t.Fatalf("serve on 0.0.0.0 without a token: %v", err)
	}
}
