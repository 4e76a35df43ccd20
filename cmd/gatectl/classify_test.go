package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runClassify runs `gatectl classify args...` with stdin and returns stdout,
// stderr and the error Run returned.
func runClassifyCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Reader = strings.NewReader(stdin)
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"gatectl", "classify"}, args...))
	return out.String(), errOut.String(), err
}

// verdictLine is a line of output, decoded strictly enough to see the contract:
// retryAfterMs is present (null or a number) on every line.
type verdictLine struct {
	Class        string           `json:"class"`
	RetryAfterMs *json.RawMessage `json:"retryAfterMs"`
	Window       string           `json:"window"`
	By           string           `json:"by"`
}

func verdicts(t *testing.T, out string) []verdictLine {
	t.Helper()
	var vs []verdictLine
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("output line is not JSON: %q", line)
		}
		if _, ok := raw["retryAfterMs"]; !ok {
			t.Errorf("line has no retryAfterMs: %q", line)
		}
		var v verdictLine
		json.Unmarshal([]byte(line), &v)
		vs = append(vs, v)
	}
	return vs
}

func TestClassifyOne(t *testing.T) {
	out, errOut, err := runClassifyCmd(t, `{"status":429,"headers":{"Retry-After":"28"},"body":"cooling down","provider":"nuaa"}`)
	if err != nil {
		t.Fatalf("err = %v, stderr = %s", err, errOut)
	}
	want := `{"class":"RATE_LIMIT","retryAfterMs":28000,"by":"builtin/status-429"}` + "\n"
	if out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
}

func TestClassifyNullHint(t *testing.T) {
	out, _, err := runClassifyCmd(t, `{"status":500,"body":"{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"class":"SERVER","retryAfterMs":null,"by":"builtin/status-5xx"}` + "\n"; out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
}

func TestClassifyPrettyPrintedAndStream(t *testing.T) {
	in := "{\n  \"status\": 529,\n  \"body\": \"Overloaded\"\n}\n{\"status\": 402}\n"
	out, _, err := runClassifyCmd(t, in)
	if err != nil {
		t.Fatal(err)
	}
	vs := verdicts(t, out)
	if len(vs) != 2 || vs[0].Class != "OVERLOADED" || vs[1].Class != "QUOTA" {
		t.Errorf("verdicts = %+v", vs)
	}
}

func TestClassifyJSONL(t *testing.T) {
	in := strings.Join([]string{
		`{"status":429,"body":"Please try again in 644ms."}`,
		``,
		`not json`,
		`{"status":400,"body":"Audio modality is not supported","sinceCapacityMs":1000}`,
		`{"status":"teapot"}`,
		`{"errorKind":"timeout"}`,
	}, "\n")
	out, errOut, err := runClassifyCmd(t, in, "--jsonl")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != exitFailure || !strings.Contains(err.Error(), "2 of 5 inputs could not be read") {
		t.Errorf("err = %v, want exit 1 naming 2 of 5", err)
	}
	for _, want := range []string{"line 3: not JSON", "line 5: not a failure object: status: want an HTTP status"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
	vs := verdicts(t, out)
	wantClasses := []string{"RATE_LIMIT", "MISLABELED", "TIMEOUT"}
	if len(vs) != len(wantClasses) {
		t.Fatalf("got %d verdicts, want %d:\n%s", len(vs), len(wantClasses), out)
	}
	for i, c := range wantClasses {
		if vs[i].Class != c {
			t.Errorf("verdict %d = %+v, want %s", i, vs[i], c)
		}
	}
	if vs[0].RetryAfterMs == nil || string(*vs[0].RetryAfterMs) != "644" {
		t.Errorf("hint = %v, want 644", vs[0].RetryAfterMs)
	}
}

func TestClassifyBadStream(t *testing.T) {
	_, errOut, err := runClassifyCmd(t, "{\"status\":429}\n\n{\"status\": 5")
	if err == nil || !strings.Contains(errOut, "line 3: not JSON") {
		t.Errorf("err = %v, stderr = %q", err, errOut)
	}
	// A value that is not JSON is reported, and reading goes on from the
	// next line that opens an object: the others are still classified.
	out, errOut, err := runClassifyCmd(t, "{\"status\":429}\n{bad}\n{\n  \"status\": 500\n}\n")
	if vs := verdicts(t, out); err == nil || len(vs) != 2 || vs[1].Class != "SERVER" || !strings.Contains(errOut, "line 2: not JSON") || !strings.Contains(err.Error(), "1 of 3 inputs") {
		t.Errorf("after a bad value: verdicts %+v, err %v, stderr %q", vs, err, errOut)
	}
	_, _, err = runClassifyCmd(t, "  \n")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != exitUsage {
		t.Errorf("empty stdin: err = %v, want a usage error", err)
	}
}

func TestClassifyExplain(t *testing.T) {
	out, _, err := runClassifyCmd(t, `{"status":429,"body":"Rate limit reached for gpt-4o on tokens per min (TPM). Please try again in 6ms."}`, "--explain")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], `{"class":"RATE_LIMIT","retryAfterMs":6,"window":"minute","by":"builtin/rate-limit"}`) {
		t.Fatalf("output:\n%s", out)
	}
	for _, want := range []string{
		"# 1 builtin: RATE_LIMIT by builtin/rate-limit retryAfterMs=6 window=minute  <- decides",
		"#     builtin/rate-limit (line",
		"#     builtin/status-429 (line",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
}

func TestClassifyShowBuiltin(t *testing.T) {
	out, _, err := runClassifyCmd(t, "", "--show-builtin")
	if err != nil || !strings.Contains(out, "name: builtin") || !strings.Contains(out, "- name: quota-spent") {
		t.Errorf("--show-builtin: err %v, output %.200q", err, out)
	}
}

func TestClassifyConfig(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "rules")
	out, errOut, err := runClassifyCmd(t, `{"status":429,"body":"pool cooling down, retry after 5s"}`+"\n"+`{"status":429,"body":"insufficient_quota"}`, "--jsonl", "--config", filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatalf("err = %v, stderr = %s", err, errOut)
	}
	vs := verdicts(t, out)
	if len(vs) != 2 || vs[0].By != "my-gateway/cooling-down" || vs[1].By != "builtin/quota-spent" {
		t.Errorf("verdicts = %+v", vs)
	}
	// The config's evidence window (2m) reaches the built-in MISLABELED rule.
	out, _, err = runClassifyCmd(t, `{"status":400,"body":"Audio modality is not supported","sinceCapacityMs":180000}`, "--config", filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if vs := verdicts(t, out); len(vs) != 1 || vs[0].Class != "INVALID_REQUEST" {
		t.Errorf("3 min after a capacity failure with a 2 min window: %+v", vs)
	}
}

func TestClassifyConfigErrors(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "rules")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"wasm in config", []string{"--config", filepath.Join(dir, "wasm-config.yaml")}, "plugins/octafuse.wasm"},
		{"plugin flag", []string{"--plugin", "x.wasm"}, "--plugin x.wasm: wasm: open x.wasm: no such file or directory"},
		{"failing config case", []string{"--config", filepath.Join(dir, "bad-case-config.yaml")}, "bad-case-config.yaml: classifiers[0].cases[0]: got RATE_LIMIT by my-gateway/cooling-down, want QUOTA"},
		{"missing config", []string{"--config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runClassifyCmd(t, `{"status":429}`, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestClassifyBrokenRulesFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "r.yaml"), []byte("- name: a\n  when: status == 429 && nope\n  class: QUOTA\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("classifiers:\n  - rules: r.yaml\n"), 0o600)
	_, _, err := runClassifyCmd(t, `{}`, "--config", filepath.Join(dir, "c.yaml"))
	if err == nil || !strings.Contains(err.Error(), `classifiers[0].rules: `) || !strings.Contains(err.Error(), `r.yaml:2:26: rule "a": when: unknown name nope`) {
		t.Errorf("err = %v", err)
	}
}

// TestClassifyCorpus pipes the corpus (testdata/corpus) through `classify --jsonl`: its
// records decode as failures as they are.
func TestClassifyCorpus(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", "provider-errors.jsonl"))
	if err != nil {
		t.Fatalf("the corpus is part of the repository: %v", err)
	}
	out, errOut, err := runClassifyCmd(t, string(data), "--jsonl")
	if err != nil {
		t.Fatalf("err = %v, stderr = %s", err, errOut)
	}
	if n, want := len(verdicts(t, out)), bytes.Count(bytes.TrimSpace(data), []byte("\n"))+1; n != want {
		t.Errorf("%d verdicts for %d records", n, want)
	}
}

// The learn-from-the-field loop: a failure from `gatectl failures --unclassified`
// (decided by the status alone) pasted into `classify --explain` shows that only
// the catch-all holds; with the operator's new rule file in the config, the
// explanation names the rule that now catches it, ahead of the built-in rules.
func TestClassifyExplainShowsWhichRuleCatches(t *testing.T) {
	const pasted = `{"status":429,"provider":"gw","body":"pool cooling down, retry after 5s"}`
	out, _, err := runClassifyCmd(t, pasted, "--explain")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"by":"builtin/status-429"`) || !strings.Contains(out, "builtin/status-429 (line") || !strings.Contains(out, "[decides]") {
		t.Fatalf("before the rule:\n%s", out)
	}
	out, _, err = runClassifyCmd(t, pasted, "--explain", "--config", filepath.Join("..", "..", "testdata", "rules", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"by":"my-gateway/cooling-down"`,
		"my-gateway: RATE_LIMIT by my-gateway/cooling-down retryAfterMs=5000 window=minute  <- decides",
		"my-gateway/cooling-down (line",
		"builtin/status-429 (line",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("with the rule file, explain lacks %q:\n%s", want, out)
		}
	}
}
