package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/internal/testlog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/urfave/cli/v2"
)

func TestMistypedCommandSuggests(t *testing.T) {
	for word, want := range map[string]string{"serv": `"serve"`, "stauts": `"status"`, "chek": `"check"`, "demp": `"demo"`} {
		_, _, err := runGatectl(t, "", word)
		var ec cli.ExitCoder
		if err == nil || !errors.As(err, &ec) || ec.ExitCode() != exitUsage {
			t.Fatalf("%s: err = %v, want a usage error", word, err)
		}
		if !strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q does not suggest %s", word, err, want)
		}
	}
	_, _, err := runGatectl(t, "", "xyzzyplugh")
	if err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "not a gatectl command") {
		t.Errorf("a word near nothing: %v", err)
	}
	// No command at all is the help, not an error.
	out, _, err := runGatectl(t, "")
	if err != nil || !strings.Contains(out, "COMMANDS") {
		t.Errorf("no command: %v\n%s", err, out)
	}
}

func TestVersionFlagAndCommand(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, err := runGatectl(t, "", args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out, "gatectl ") || !strings.Contains(out, "commit: ") {
			t.Errorf("%v: %q lacks the version and the commit line", args, out)
		}
	}
}

// The help lists the commands by category, in the order a newcomer needs them,
// and every command has one.
func TestHelpListsCommandsByCategory(t *testing.T) {
	out, _, err := runGatectl(t, "", "--help")
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, cat := range []string{catRun, catConfig, catServer, catVersion} {
		i := strings.Index(out, cat)
		if i < 0 || i < last {
			t.Fatalf("category %q missing or out of order:\n%s", cat, out)
		}
		last = i
	}
	for _, cmd := range newApp().Commands {
		if cmd.Category == "" {
			t.Errorf("command %s has no category", cmd.Name)
		}
	}
	if d, s := strings.Index(out, "demo"), strings.Index(out, "status"); d < 0 || d > s {
		t.Errorf("demo should come first:\n%s", out)
	}
}

// Every command that reads a config takes -c and GATECTL_CONFIG.
func TestConfigFlagEverywhere(t *testing.T) {
	for _, cmd := range newApp().Commands {
		for _, f := range cmd.Flags {
			if f.Names()[0] != "config" {
				continue
			}
			sf, ok := f.(*cli.StringFlag)
			if !ok || len(sf.Aliases) == 0 || sf.Aliases[0] != "c" || len(sf.EnvVars) == 0 || sf.EnvVars[0] != "GATECTL_CONFIG" {
				t.Errorf("%s: --config lacks -c or GATECTL_CONFIG", cmd.Name)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "g.yaml")
	if err := os.WriteFile(path, []byte("retry: {rounds: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATECTL_CONFIG", path)
	out, _, err := runGatectl(t, "", "backoff")
	if err != nil || !strings.Contains(out, "1 round ·") {
		t.Errorf("backoff with GATECTL_CONFIG (1 round, singular): %v\n%s", err, out)
	}
	out, _, err = runGatectl(t, "", "check")
	if err != nil || !strings.Contains(out, path+": ok") {
		t.Errorf("check with GATECTL_CONFIG: %v\n%s", err, out)
	}
}

func TestCheckSaysOneProvider(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.yaml")
	if err := os.WriteFile(path, []byte("providers:\n  local: {kind: openai, baseURL: http://127.0.0.1:9/v1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runGatectl(t, "", "check", "-c", path)
	if err != nil || !strings.Contains(out, "ok — 1 provider,") {
		t.Errorf("check: %v\n%s", err, out)
	}
}

// check warns, naming provider and variable, when an apiKeyEnv is unset or
// empty; a set one says nothing.
func TestCheckWarnsAboutUnsetKeyVariables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.yaml")
	cfg := `providers:
  alpha: {kind: openai, baseURL: http://127.0.0.1:9/v1, apiKeyEnv: GATECTL_TEST_ALPHA_KEY}
  beta: {kind: openai, baseURL: http://127.0.0.1:9/v1, apiKeyEnv: GATECTL_TEST_BETA_KEY}
  gamma: {kind: openai, baseURL: http://127.0.0.1:9/v1, apiKeyEnv: GATECTL_TEST_GAMMA_KEY}
  delta: {kind: openai, baseURL: http://127.0.0.1:9/v1, headers: {Authorization: "Bearer ${GATECTL_TEST_DELTA_KEY}"}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("GATECTL_TEST_ALPHA_KEY")
	os.Unsetenv("GATECTL_TEST_DELTA_KEY")
	t.Setenv("GATECTL_TEST_BETA_KEY", "")
	t.Setenv("GATECTL_TEST_GAMMA_KEY", "sk-set")
	out, errOut, err := runGatectl(t, "", "check", path) // the file named without -c
	if err != nil || !strings.Contains(out, "ok") || !strings.Contains(out, path) {
		t.Fatalf("check: %v\n%s%s", err, out, errOut)
	}
	for _, want := range []string{`warning: provider "alpha": apiKeyEnv GATECTL_TEST_ALPHA_KEY is not set`, `warning: provider "beta": apiKeyEnv GATECTL_TEST_BETA_KEY is set but empty`,
		`warning: provider "delta": header Authorization names ${GATECTL_TEST_DELTA_KEY}, which is not set`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "gamma") || strings.Contains(errOut, "sk-set") {
		t.Errorf("a set key was warned about (or shown):\n%s", errOut)
	}
	// serve logs the same at start (it reads the config the same way).
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := unsetKeyWarnings(c, os.LookupEnv); len(w) != 3 {
		t.Errorf("unsetKeyWarnings = %q", w)
	}
}

func TestClassifyRefusesWhatIsNotAFailure(t *testing.T) {
	for _, args := range [][]string{{"classify"}, {"classify", "--jsonl"}} {
		_, errOut, err := runGatectl(t, `{"code":429}`+"\n", args...)
		if err == nil {
			t.Fatalf("%v: {\"code\":429} was accepted", args)
		}
		if !strings.Contains(errOut, "no status, errorKind or body (got only code)") || !strings.Contains(errOut, `"status":429`) {
			t.Errorf("%v: the error should say what fields it expects:\n%s", args, errOut)
		}
	}
	// A captured record with extra keys still classifies.
	out, _, err := runGatectl(t, `{"status":429,"expected_class":"RATE_LIMIT"}`, "classify")
	if err != nil || !strings.Contains(out, `"class":"RATE_LIMIT"`) {
		t.Errorf("a record with a status: %v\n%s", err, out)
	}
}

// serve logs the unset key variable at start, before any request.
func TestServeWarnsAboutUnsetKeyVariables(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(path, []byte("providers:\n  alpha: {kind: openai, baseURL: http://127.0.0.1:9/v1, apiKeyEnv: GATECTL_TEST_ALPHA_KEY}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("GATECTL_TEST_ALPHA_KEY")
	var logs testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveParams{ConfigPath: path, Listen: "127.0.0.1:0", StateDir: dir, Log: &logs, Grace: time.Second,
			Ready: func(net.Addr) { cancel() }})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `[WARN]  gatectl: provider "alpha": apiKeyEnv GATECTL_TEST_ALPHA_KEY is not set`) {
		t.Errorf("serve's log lacks the warning:\n%s", logs.String())
	}
}

// A build from a git checkout prints its module version and commit; one without
// VCS information says so.
func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201173934-b80656329484"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "b80656329484135e3a0a54722e855f52017292ab"},
		{Key: "vcs.time", Value: "2026-12-01T17:39:34Z"}, {Key: "vcs.modified", Value: "true"}}}
	v := buildVersionOf(bi, true)
	if got := v.short(); got != "v0.0.0-20261201173934-b80656329484 (b80656329484, modified)" {
		t.Errorf("short = %q", got)
	}
	var b strings.Builder
	v.print(&b)
	if !strings.Contains(b.String(), "gatectl v0.0.0-20261201173934-b80656329484 ") ||
		!strings.Contains(b.String(), "commit: b80656329484135e3a0a54722e855f52017292ab (with uncommitted changes) 2026-12-01T17:39:34Z") {
		t.Errorf("print:\n%s", b.String())
	}
	b.Reset()
	buildVersionOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true).print(&b)
	if !strings.Contains(b.String(), "gatectl dev ") || !strings.Contains(b.String(), "commit: unknown") {
		t.Errorf("without VCS information:\n%s", b.String())
	}
}

// A stray argument is refused, not ignored: `check FILE` reads FILE (above),
// and commands that take none say so.
func TestStrayArgumentsRefused(t *testing.T) {
	for _, args := range [][]string{{"check", "a.yaml", "b.yaml"}, {"sim", "x.yaml"}, {"backoff", "x.yaml"}, {"version", "now"}} {
		_, errOut, err := runGatectl(t, "", args...)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitUsage {
			t.Errorf("%q: err %v (stderr %q), want a usage error", args, err, errOut)
		}
	}
	if _, errOut, err := runGatectl(t, "", "check", "/nonexistent/g.yaml"); err == nil {
		t.Errorf("check of a missing file named without -c passed: %s", errOut)
	}
}

// A flag the CLI library cannot parse, or a subcommand that does not exist, is
// a usage error (exit 2) in one line, as the others are — not the whole help
// page with exit 1, nor "No help topic" with exit 3.
func TestLibraryUsageErrorsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--bogus"}, "status: flag provided but not defined: -bogus (gatectl status --help)"},
		{[]string{"settings", "get", "--bogus"}, "settings get: flag provided but not defined: -bogus (gatectl settings get --help)"},
		{[]string{"report", "--since", "abc"}, `invalid value "abc" for flag -since`},
		{[]string{"settings", "bogus"}, `"bogus" is not a gatectl settings command`},
		{[]string{"plugin", "ne"}, `did you mean "new"?`},
	} {
		_, errOut, err := runGatectl(t, "", tc.args...)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitUsage || !strings.Contains(err.Error()+errOut, tc.want) {
			t.Errorf("%q: err %v, stderr %q; want exit %d saying %q", tc.args, err, errOut, exitUsage, tc.want)
		}
	}
}

// check warns about a pool none of whose routes can be scored, and says what
// the draw does then; a balance with a capacity says nothing.
func TestCheckWarnsAboutAnUnscoredPool(t *testing.T) {
	dir := t.TempDir()
	cfg := `providers:
  pa: {kind: openai, baseURL: http://127.0.0.1:9/v1}
  pb: {kind: openai, baseURL: http://127.0.0.1:9/v1}
pools:
  duo:
    routes:
      - {provider: pa, model: m}
      - {provider: pb, model: m}
balances:
  - {provider: pa, http: {url: "http://127.0.0.1:9/b", remaining: body.left}%s}
`
	for _, c := range []struct {
		extra string
		warn  bool
	}{{"", true}, {", capacity: 10", false}} {
		path := filepath.Join(dir, "g.yaml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(cfg, c.extra)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, err := runGatectl(t, "", "check", "-c", path)
		if err != nil || !strings.Contains(out, "ok") {
			t.Fatalf("check: %v\n%s%s", err, out, errOut)
		}
		want := "warning: pools.duo: none of its routes can be scored"
		if got := strings.Contains(errOut, want) && strings.Contains(errOut, "every draw takes the first usable route, pa/m"); got != c.warn {
			t.Errorf("balance%s: warned %v, want %v:\n%s", c.extra, got, c.warn, errOut)
		}
	}
}
