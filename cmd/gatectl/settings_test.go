package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const settingsYAML = `
providers:
  gateway-a: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
retry:
  rounds: 3
  initialDelay: 2s
  jitter: 0
`

// settings get, set (pairs and --json), a refused value, reset.
func TestSettingsCommands(t *testing.T) {
	url := startServer(t, settingsYAML)
	out, err := runCLI(t, "settings", "get", "retry", "--addr", url)
	if err != nil || !strings.Contains(out, "retry (0 runtime setting(s))") || !strings.Contains(out, "retry.rounds") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	out, err = runCLI(t, "settings", "set", "retry", "rounds=5", "hintClamp.max=90s", "retryOn=[RATE_LIMIT, SERVER]", "--addr", url)
	if err != nil || !strings.Contains(out, "retry (3 runtime setting(s))") {
		t.Fatalf("set: %v\n%s", err, out)
	}
	for _, want := range []string{"retry.rounds", "5", "runtime (file: 3)", "retry.hintClamp.max", "1m30s", "retry.retryOn", "[RATE_LIMIT, SERVER]"} {
		if !strings.Contains(out, want) {
			t.Errorf("set output lacks %q:\n%s", want, out)
		}
	}
	// Where each other value comes from: the file's initialDelay (2s, the
	// default's too), its jitter (0, not the default), the default multiplier.
	for _, want := range []string{"retry.initialDelay  2s  default", "retry.jitter  0  file", "retry.multiplier  2  default"} {
		if !regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(want), "  ", `\s+`)).MatchString(out) {
			t.Errorf("set output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "settings", "set", "gate", "--json", `{"models":{"gateway-a/flash-1.5":{"tpm":30000}}}`, "--addr", url, "--format", "json")
	var v struct {
		Effective map[string]any `json:"effective"`
		Overrides map[string]any `json:"overrides"`
	}
	if err != nil || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("set --json: %v\n%s", err, out)
	}
	if m := v.Effective["models"].(map[string]any)["gateway-a/flash-1.5"].(map[string]any); m["tpm"] != 30000.0 {
		t.Fatalf("set --json: %s", out)
	}
	_, err = runCLI(t, "settings", "set", "retry", "multiplier=0.5", "--addr", url)
	if err == nil || !strings.Contains(err.Error(), "retry.multiplier: must be at least 1 (1 = a fixed interval; got 0.5)") {
		t.Fatalf("a bad value: %v", err)
	}
	out, err = runCLI(t, "settings", "get", "--addr", url)
	if err != nil || !strings.Contains(out, "retry (3 runtime setting(s))") || !strings.Contains(out, "gate (1 runtime setting(s))") || !strings.Contains(out, "quota (0 runtime setting(s))") {
		t.Fatalf("get all: %v\n%s", err, out)
	}
	out, err = runCLI(t, "settings", "reset", "retry", "--addr", url)
	if err != nil || !strings.Contains(out, "retry (0 runtime setting(s))") {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"settings", "get", "pools"}, {"settings", "set", "retry"}, {"settings", "set", "retry", "rounds"}, {"settings", "reset"}} {
		if _, err := runCLI(t, append(args, "--addr", url)...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// stats shows the retries the decision API planned, lifetime and per session.
func TestStatsCommand(t *testing.T) {
	url := startServer(t, settingsYAML)
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"m","session":"s1","turn":"t1","status":500,"body":"oops"}`)
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"m","session":"s1","turn":"t1","status":503,"body":"busy"}`)
	out, err := runCLI(t, "stats", "--addr", url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SCOPE", "lifetime", "session s1", "6s", "retries by provider: gateway-a 2", "last:", "retry in 4s (2/3)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "stats", "--session", "s1", "--addr", url, "--format", "json")
	if err != nil || !strings.Contains(out, `"waitedMs": 6000`) || !strings.Contains(out, `"session": "s1"`) {
		t.Fatalf("stats --session: %v\n%s", err, out)
	}
	out, err = runCLI(t, "stats", "--session", "nobody", "--addr", url)
	if err != nil || !strings.Contains(out, "session nobody: no retry decision yet") || strings.Contains(out, "retries by provider") || strings.Contains(out, "last:") {
		t.Fatalf("stats --session nobody: %v\n%s (want no lifetime figures shown as the session's)", err, out)
	}
}

// report from a server, as text and JSON.
func TestReportCommand(t *testing.T) {
	url := startServer(t, statusYAML)
	// a 429 and a reset: the learner moves, the report shows it
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-1","status":429,"headers":{"retry-after":"2"},"body":"rate limited"}`)
	postJSON(t, url+"/gate/v1/models/gateway-a/flash-1/reset", ``)
	out, err := runCLI(t, "report", "--addr", url)
	if err != nil || !strings.Contains(out, "gateway-a/flash-1") || !strings.Contains(out, "learner steps of gateway-a/flash-1:") || !strings.Contains(out, "reset") {
		t.Fatalf("report: %v\n%s", err, out)
	}
	out, err = runCLI(t, "report", "--addr", url, "--since", "5m", "--format", "json")
	var rep struct {
		Models []struct {
			Model       string `json:"model"`
			RateLimited int    `json:"rateLimited"`
		} `json:"models"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Models) != 1 || rep.Models[0].RateLimited != 1 {
		t.Fatalf("report json: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "report", "--addr", url, "--since", "-5m"); err == nil {
		t.Fatal("a negative --since was taken")
	}
}

// The real binary: settings survive a restart; the startup line says the
// settings in force; the JSON log of the run feeds `gatectl report --log`.
func TestSettingsProcessRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	gatectl := buildBinary(t, dir, "./cmd/gatectl", "gatectl")
	cfg := filepath.Join(dir, "gatectl.yaml")
	text := "stateDir: state\nlog: {level: info, format: json}\nproviders:\n  local: {kind: openai, baseURL: \"http://127.0.0.1:9/v1\"}\n" +
		"gate:\n  models:\n    local/small: {tpm: 10000, rpm: 100, safetyFactor: 1}\nretry:\n  rounds: 3\n  initialDelay: 2s\n  jitter: 0\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "gatectl.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	start := func() (*exec.Cmd, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		srv := exec.CommandContext(ctx, gatectl, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
		stdout, _ := srv.StdoutPipe()
		srv.Stderr = logFile
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "gatectl listening on ") {
			t.Fatalf("first line %q: %v", line, err)
		}
		return srv, strings.TrimSpace(strings.TrimPrefix(line, "gatectl listening on "))
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(gatectl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gatectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	srv, base := start()
	cli("settings", "set", "retry", "initialDelay=5s", "rounds=2", "--addr", base)
	// the next decision uses it
	resp, err := http.Post(base+"/gate/v1/failure", "application/json",
		strings.NewReader(`{"provider":"local","model":"small","session":"s","turn":"t","status":500}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"delayMs":5000`) {
		t.Fatalf("failure after the change: %s", b)
	}
	// a 429 and a reset of the model, for the report
	for _, p := range [][2]string{
		{"/gate/v1/failure", `{"provider":"local","model":"small","status":429,"headers":{"retry-after":"2"},"body":"rate limited"}`},
		{"/gate/v1/models/local/small/reset", ``},
	} {
		resp, err := http.Post(base+p[0], "application/json", strings.NewReader(p[1]))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %s", p[0], resp.Status)
		}
		resp.Body.Close()
	}
	srv.Process.Kill() // no graceful shutdown: the settings were on disk already
	srv.Wait()

	srv, base = start()
	out := cli("settings", "get", "retry", "--addr", base, "--format", "json")
	var v struct {
		Effective map[string]any `json:"effective"`
		Overrides map[string]any `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Effective["initialDelay"] != "5s" || v.Overrides["rounds"] != 2.0 {
		t.Fatalf("after a restart: %v\n%s", err, out)
	}
	srv.Process.Signal(os.Interrupt)
	srv.Wait()

	logs, _ := os.ReadFile(logPath)
	if !strings.Contains(string(logs), `"@message":"effective settings"`) || !strings.Contains(string(logs), `"retry_curve":"5s×2 up to 1m0s ±0%"`) {
		t.Fatalf("no startup line with the settings in force:\n%s", logs)
	}
	out = cli("report", "--log", logPath)
	if !strings.Contains(out, "local/small") || !strings.Contains(out, "learner steps of local/small:") || !strings.Contains(out, "reset") {
		t.Fatalf("report --log:\n%s\nlog:\n%s", out, logs)
	}
}

// A key given twice, or beside a key inside it, is refused rather than one of
// them dropped without a word (the config file refuses a duplicate key too).
func TestSettingsSetBodyRefusesRepeatedKeys(t *testing.T) {
	for _, pairs := range [][]string{{"rounds=5", "rounds=7"}, {"defaults={tpm: 1}", "defaults.tpm=5"}, {"defaults.tpm=5", "defaults=x"}} {
		if _, err := settingsSetBody(pairs, ""); err == nil || !strings.Contains(err.Error(), "set each key once") {
			t.Errorf("%q: %v, want a refusal", pairs, err)
		}
	}
	b, err := settingsSetBody([]string{"defaults.tpm=5", "defaults.rpm=6", "rounds=2"}, "")
	if err != nil || string(b) != `{"defaults":{"rpm":6,"tpm":5},"rounds":2}` {
		t.Errorf("distinct keys: %s, %v", b, err)
	}
}
