package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/internal/testenv"
)

const pluginsTestdata = "../../testdata/plugins"

func runGatectl(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Reader = strings.NewReader(stdin)
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"gatectl"}, args...))
	return out.String(), errOut.String(), err
}

func TestPluginCheck(t *testing.T) {
	octa := filepath.Join(pluginsTestdata, "octafuse-wat.wasm")
	cases := "../../examples/plugins/octafuse.cases.yaml"
	out, _, err := runGatectl(t, "", "plugin", "check", "--runs", "50", "--cases", cases, octa)
	if err != nil {
		t.Fatalf("err = %v\n%s", err, out)
	}
	for _, want := range []string{"kinds     classify", "imports   gate.input_read, gate.output_write", "cases     7 run, 0 failed", "timing    50 calls: p50", "\nok\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A sidecar beside the module, with a config; a failing --case; JSON output.
	dir := t.TempDir()
	mod := filepath.Join(dir, "cfg.wasm")
	b, _ := os.ReadFile(filepath.Join(pluginsTestdata, "config.wasm"))
	os.WriteFile(mod, b, 0o644)
	os.WriteFile(filepath.Join(dir, "cfg.cases.yaml"), []byte(`
config: {class: QUOTA, retryAfterMs: 5}
cases:
  - input: {status: 402}
    expect: {class: QUOTA, retryAfterMs: 5}
`), 0o644)
	out, _, err = runGatectl(t, "", "plugin", "check", "--format", "json", "--runs", "10",
		"--case", `{"name":"wrong","input":{"status":200},"expect":{"class":"AUTH"}}`, mod)
	if err == nil {
		t.Fatal("a failing case passed")
	}
	var rep pluginReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.OK || rep.Cases != 2 || len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0], "cases[1] (wrong): golden case failed: got QUOTA") || rep.Timing == nil {
		t.Errorf("report = %+v", rep)
	}
}

func TestPluginCheckRefuses(t *testing.T) {
	for _, tc := range []struct{ module, want string }{
		{"forbidden.wasm", `import "env.open_socket" is not allowed`},
		{"nomarker.wasm", "does not export the gate_abi_v1 marker"},
		{"initfail.wasm", "gate_init: returned 3"},
	} {
		out, _, err := runGatectl(t, "", "plugin", "check", filepath.Join(pluginsTestdata, tc.module))
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "FAILED") {
			t.Errorf("%s: err = %v, output:\n%s", tc.module, err, out)
		}
	}
	if _, _, err := runGatectl(t, "", "plugin", "check", "a.wasm", "--runs", "3"); err == nil || !strings.Contains(err.Error(), "flags go before the module") {
		t.Errorf("flags after the module: %v", err)
	}
}

// The call deadline is raised: the production 2 ms is what serve applies, and on
// a loaded 2-core CI machine the first call of a fresh process can pass it.
func TestClassifyWithPlugin(t *testing.T) {
	octa := filepath.Join(pluginsTestdata, "octafuse-wat.wasm")
	out, errOut, err := runGatectl(t, `{"status":200,"body":"{\"code\":\"OCTA_THROTTLED\",\"wait_ms\":1500}"}
{"status":429,"headers":{"retry-after":"3"}}`, "classify", "--jsonl", "--plugin-timeout", "1s", "--plugin", octa)
	if err != nil {
		t.Fatalf("err = %v, stderr = %s", err, errOut)
	}
	vs := verdicts(t, out)
	if len(vs) != 2 || vs[0].By != "wasm/octafuse-wat.wasm" || string(*vs[0].RetryAfterMs) != "1500" || !strings.HasPrefix(vs[1].By, "builtin/") {
		t.Errorf("verdicts = %+v\nstderr (a plugin past its deadline says so): %s", vs, errOut)
	}
}

// Each starter builds with its own build.sh and passes its own check.
func TestPluginNew(t *testing.T) {
	for _, lang := range []string{"wat", "go", "as"} {
		t.Run(lang, func(t *testing.T) {
			switch lang {
			case "wat":
				testenv.Tool(t, "wat2wasm", "Debian: apt-get install -y wabt")
			case "go":
				if testing.Short() {
					t.Skip("builds a Go wasm module")
				}
			case "as":
				if _, err := os.Stat("../../examples/plugins/as/node_modules/assemblyscript"); err != nil {
					testenv.Unavailable(t, "AssemblyScript is not installed (npm ci --prefix examples/plugins/as)")
				}
			}
			dir := t.TempDir()
			out, _, err := runGatectl(t, "", "plugin", "new", "--lang", lang, "--dir", dir, "my-gw")
			if err != nil || !strings.Contains(out, "plugin check "+filepath.Join(dir, "my-gw", "my-gw.wasm")) {
				t.Fatalf("new: %v\n%s", err, out)
			}
			root := filepath.Join(dir, "my-gw")
			if lang == "as" { // reuse the examples' compiler instead of installing one
				abs, _ := filepath.Abs("../../examples/plugins/as/node_modules")
				os.Symlink(abs, filepath.Join(root, "node_modules"))
			}
			cmd := exec.Command("sh", filepath.Join(root, "build.sh"))
			cmd.Env = append(os.Environ(), "PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build.sh: %v\n%s", err, b)
			}
			out, _, err = runGatectl(t, "", "plugin", "check", "--runs", "10", filepath.Join(root, "my-gw.wasm"))
			if err != nil || !strings.Contains(out, "cases     2 run, 0 failed") {
				t.Errorf("check: %v\n%s", err, out)
			}
		})
	}
	if _, _, err := runGatectl(t, "", "plugin", "new", "--lang", "rust", "x"); err == nil || !strings.Contains(err.Error(), "--lang must be go, as or wat") {
		t.Errorf("bad lang: %v", err)
	}
	if _, _, err := runGatectl(t, "", "plugin", "new", "Bad_Name"); err == nil || !strings.Contains(err.Error(), `name "Bad_Name"`) {
		t.Errorf("bad name: %v", err)
	}
}

// plugin new prints a check command that runs: gatectl when it is on the PATH,
// the go run form in the repository, the binary's path otherwise.
func TestGatectlInvocation(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gatectl")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := func(string) (string, error) { return bin, nil }
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	for _, c := range []struct {
		name   string
		self   string
		look   func(string) (string, error)
		inRepo bool
		run    string
		note   bool
	}{
		{"installed", bin, onPath, false, "gatectl", false},
		{"built, not on PATH", bin, notOnPath, false, bin, false},
		{"go run in the repository", "/tmp/go-build123/b001/exe/gatectl", notOnPath, true, "go run ./cmd/gatectl", false},
		{"go run elsewhere", "/tmp/go-build123/b001/exe/gatectl", notOnPath, false, "gatectl", true},
		{"another gatectl on PATH", "/tmp/go-build123/b001/exe/gatectl", onPath, true, "go run ./cmd/gatectl", false},
	} {
		run, note := gatectlInvocation(c.self, c.look, c.inRepo)
		if run != c.run || (note != "") != c.note {
			t.Errorf("%s: %q, %q; want %q (note %v)", c.name, run, note, c.run, c.note)
		}
		if c.note && !strings.Contains(note, "go install ./cmd/gatectl") {
			t.Errorf("%s: the note should say how to install: %q", c.name, note)
		}
	}
}
