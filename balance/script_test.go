//go:build unix

package balance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// printScript runs testdata/balance/print.sh, which prints out, writes errText to
// stderr and exits with code.
func printScript(t *testing.T, out, errText string, code int) Spec {
	t.Helper()
	return Spec{
		Provider: "test",
		Dir:      testdata(t),
		Script:   []string{"sh", "print.sh"},
		Env:      map[string]string{"OUTPUT": out, "ERRTEXT": errText, "CODE": fmt.Sprint(code)},
		Timeout:  10 * time.Second,
	}
}

func TestScriptReading(t *testing.T) {
	t.Parallel()
	// 7654.321 cannot occur in a log line's timestamp (2.94 did: "…:42.941Z").
	out := `{"remaining": 7654.321, "windows": [{"name": "weekly", "remaining": 7654.321, "capacity": 35}, {"name": "bad", "remaining": "x"}, 7, {"name": "monthly", "remaining": 37.94}], "resetsAt": "2026-10-01T00:00:00Z"}`
	logger, logs := traceLogger()
	spec := printScript(t, out, "", 0)
	spec.Logger = logger
	src, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*Script); !ok {
		t.Fatalf("New built a %T, want *Script", src)
	}
	r, err := src.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	assertReading(t, r, engine.Reading{Remaining: fp(7654.321), ResetsAt: "2026-10-01T00:00:00Z", Windows: []engine.WindowReading{
		{Name: "weekly", Remaining: 7654.321, Capacity: fp(35)},
		{Name: "monthly", Remaining: 37.94},
	}})
	if !strings.Contains(logs.String(), "dropped=2") {
		t.Errorf("dropped windows not logged at debug: %q", logs.String())
	}
	if strings.Contains(logs.String(), "7654.321") || strings.Contains(logs.String(), "weekly") {
		t.Errorf("the log quotes stdout: %q", logs.String())
	}
}

// A failed script is a missing reading, and neither the error nor any log line at
// any level quotes what it printed, on stdout or on stderr.
func TestScriptMissingReadings(t *testing.T) {
	t.Parallel()
	const marker = "SECRET-MARKER-51c9"
	cases := []struct {
		name    string
		spec    func(t *testing.T) Spec
		want    error
		wantMsg string
	}{
		{"non-zero exit with a valid reading", func(t *testing.T) Spec {
			return printScript(t, `{"remaining": 1, "note": "`+marker+`"}`, marker, 3)
		}, ErrExit, "exit status 3"},
		{"non-zero exit", func(t *testing.T) Spec { return printScript(t, marker, marker, 1) }, ErrExit, "stderr: "},
		{"bad JSON", func(t *testing.T) Spec { return printScript(t, "remaining: "+marker, "", 0) }, ErrOutput, "invalid JSON"},
		{"not an object", func(t *testing.T) Spec { return printScript(t, `["`+marker+`"]`, "", 0) }, ErrOutput, "not an object"},
		{"two objects", func(t *testing.T) Spec {
			return printScript(t, `{"remaining": 1}`+"\n"+`{"remaining": "`+marker+`"}`, "", 0)
		}, ErrOutput, "more than one"},
		{"no output", func(t *testing.T) Spec { return printScript(t, "", marker, 0) }, ErrOutput, "empty"},
		{"remaining not a number", func(t *testing.T) Spec { return printScript(t, `{"remaining": "`+marker+`"}`, "", 0) }, ErrOutput, "remaining"},
		{"too much output", func(t *testing.T) Spec {
			s := printScript(t, "", "", 0)
			s.Script = []string{"sh", "big.sh"}
			return s
		}, ErrOutput, "more than"},
		{"killed by a signal", func(t *testing.T) Spec {
			s := printScript(t, marker, "", 0)
			s.Script = []string{"sh", "-c", `printf '%s' "$OUTPUT"; kill -TERM $$`}
			return s
		}, ErrExit, "signal"},
		{"missing executable", func(t *testing.T) Spec {
			s := printScript(t, "", "", 0)
			s.Script = []string{"gatectl-no-such-program"}
			return s
		}, ErrStart, "not found"},
		{"missing relative executable", func(t *testing.T) Spec {
			s := printScript(t, "", "", 0)
			s.Script = []string{"./no-such-script.sh"}
			return s
		}, ErrStart, "no-such-script"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := traceLogger()
			spec := tc.spec(t)
			spec.Logger = logger
			src, err := NewScript(spec)
			if err != nil {
				t.Fatal(err)
			}
			c := NewCached(src, CacheOptions{Timeout: 10 * time.Second, Logger: logger})
			r, err := c.Get(context.Background(), time.Unix(0, 0))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want it to mention %q", err, tc.wantMsg)
			}
			if r.Remaining != nil || r.Windows != nil {
				t.Errorf("a failed read gave a reading: %+v", r)
			}
			if _, ok := c.Last(); ok {
				t.Error("Last reports a reading after a failed read")
			}
			for what, text := range map[string]string{"error": err.Error(), "log": logs.String()} {
				if strings.Contains(text, marker) || strings.Contains(text, "SECRET") {
					t.Errorf("the %s quotes the script's output: %q", what, text)
				}
			}
			if !strings.Contains(logs.String(), "balance read failed") {
				t.Errorf("the failure was not logged: %q", logs.String())
			}
		})
	}
}

// A hung script never outlives its timeout, and neither does any process it started.
func TestScriptHungKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	src, err := NewScript(Spec{
		Dir:     testdata(t),
		Script:  []string{"sh", "hung.sh"},
		Env:     map[string]string{"PIDS": pids},
		Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = src.Read(context.Background())
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if elapsed > 10*time.Second { // the script sleeps 30s; the timeout is 1s
		t.Fatalf("Read took %s with a 1s timeout", elapsed)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("the script did not record its pids before the timeout: %v", err)
	}
	var leader, child int
	if _, err := fmt.Sscan(string(data), &leader, &child); err != nil {
		t.Fatalf("pids file %q: %v", data, err)
	}
	for _, pid := range []int{leader, child} {
		waitGone(t, pid)
	}
	// The group holds a third member, the script's foreground sleep, whose pid the
	// script cannot record: wait for the whole group, as the kill reaches each
	// member in its own time.
	waitGroupGone(t, leader)
}

// A caller's own deadline ends the script too (a context cancelled before the
// timeout).
func TestScriptCallerCancel(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	src, err := NewScript(Spec{Dir: testdata(t), Script: []string{"sh", "hung.sh"}, Env: map[string]string{"PIDS": pids}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = src.Read(ctx)
	// The caller's deadline is not the script's timeout: it reports as the caller's
	// context error.
	if errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's context error", err)
	}
	if data, err := os.ReadFile(pids); err == nil {
		var leader, child int
		fmt.Sscan(string(data), &leader, &child)
		waitGone(t, leader)
		waitGone(t, child)
	}
}

// The script sees PATH, HOME, its literal env entries and the apiKeyEnv key, and
// nothing else of gatectl's environment; it runs in Dir.
func TestScriptEnvironment(t *testing.T) {
	// t.Setenv: not parallel.
	t.Setenv("GATECTL_TEST_PARENT_SECRET", "parent-secret-value")
	t.Setenv("GATECTL_TEST_API_KEY", "the-key-value")
	tmp := t.TempDir()
	envOut, pwdOut := filepath.Join(tmp, "env"), filepath.Join(tmp, "pwd")
	logger, logs := traceLogger()
	src, err := NewScript(Spec{
		Dir:       testdata(t),
		Script:    []string{"./env.sh"}, // relative to Dir, with a slash
		APIKeyEnv: "GATECTL_TEST_API_KEY",
		Env:       map[string]string{"ENV_OUT": envOut, "PWD_OUT": pwdOut, "REGION": "cn"},
		Logger:    logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Read(context.Background()); err != nil {
		t.Fatalf("Read: %v", err)
	}
	env := readEnv(t, envOut)
	for k, want := range map[string]string{
		"GATECTL_TEST_API_KEY": "the-key-value",
		"REGION":               "cn",
		"PATH":                 os.Getenv("PATH"),
		"HOME":                 os.Getenv("HOME"),
	} {
		if got, ok := env[k]; !ok || got != want {
			t.Errorf("script env %s = %q (set %v), want %q", k, got, ok, want)
		}
	}
	if _, ok := env["GATECTL_TEST_PARENT_SECRET"]; ok {
		t.Error("a variable of gatectl's environment leaked into the script")
	}
	for k := range env {
		switch k {
		case "GATECTL_TEST_API_KEY", "REGION", "ENV_OUT", "PWD_OUT", "PATH", "HOME",
			"PWD", "SHLVL", "_", "OLDPWD": // the last four are the shell's own
		default:
			t.Errorf("unexpected variable %s in the script's environment", k)
		}
	}
	pwd, err := os.ReadFile(pwdOut)
	if err != nil {
		t.Fatal(err)
	}
	wantDir, _ := filepath.EvalSymlinks(testdata(t))
	if got := strings.TrimSpace(string(pwd)); got != wantDir {
		t.Errorf("working directory = %q, want %q", got, wantDir)
	}
	if strings.Contains(logs.String(), "the-key-value") {
		t.Errorf("the key was logged: %q", logs.String())
	}
}

// A key that is not set adds no entry and logs a warning naming the variable; the
// script still runs.
func TestScriptKeyNotSet(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	envOut := filepath.Join(tmp, "env")
	logger, logs := traceLogger()
	src, err := NewScript(Spec{
		Dir:       testdata(t),
		Script:    []string{"sh", "env.sh"},
		APIKeyEnv: "GATECTL_TEST_UNSET_KEY",
		Env:       map[string]string{"ENV_OUT": envOut, "PWD_OUT": filepath.Join(tmp, "pwd"), "PATH": "/usr/bin:/bin"},
		LookupEnv: envMap(map[string]string{"HOME": "/home/x"}),
		Logger:    logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Read(context.Background()); err != nil {
		t.Fatalf("Read: %v", err)
	}
	env := readEnv(t, envOut)
	if _, ok := env["GATECTL_TEST_UNSET_KEY"]; ok {
		t.Error("an unset key was passed")
	}
	if env["PATH"] != "/usr/bin:/bin" || env["HOME"] != "/home/x" {
		t.Errorf("PATH, HOME = %q, %q; want the env entry and the looked-up HOME", env["PATH"], env["HOME"])
	}
	if !strings.Contains(logs.String(), "[WARN]") || !strings.Contains(logs.String(), "apiKeyEnv=GATECTL_TEST_UNSET_KEY") {
		t.Errorf("no warning naming the variable: %q", logs.String())
	}
}

func TestNewScriptRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		spec  Spec
		field string
	}{
		{"empty argv[0]", Spec{Script: []string{""}}, "script"},
		{"NUL in argv", Spec{Script: []string{"sh", "a\x00b"}}, "script[1]"},
		{"env sets the key", Spec{Script: []string{"sh"}, APIKeyEnv: "KEY", Env: map[string]string{"KEY": "literal"}}, "env[KEY]"},
		{"bad env name", Spec{Script: []string{"sh"}, Env: map[string]string{"A=B": "x"}}, "env[A=B]"},
		{"bad apiKeyEnv", Spec{Script: []string{"sh"}, APIKeyEnv: "A=B"}, "apiKeyEnv"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewScript(tc.spec)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// waitGone waits (up to 10s, for the kernel to deliver the kill) until pid is gone
// or a zombie, which a container's init may leave unreaped.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// waitGroupGone waits (up to 10s) until process group pgid has no live member
// left (see groupHasLiveMember).
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) || !groupHasLiveMember(pgid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupHasLiveMember reports whether a process other than a zombie (or a dead
// one not yet gone from /proc) has pgid.
func groupHasLiveMember(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+2:]))
		if len(fields) > 2 && fields[2] == fmt.Sprint(pgid) && fields[0] != "Z" && fields[0] != "X" {
			return true
		}
	}
	return false
}
