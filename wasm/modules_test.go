package wasm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gatectl/gatectl/internal/testenv"
)

// The modules the tests load, and how each is built. Built modules are found, in
// order: under testdata/plugins/ when testdata/plugins/manifest.json records the
// same source hash (the WAT and AssemblyScript ones are committed there, so the
// tests need no toolchain); in a cache under the user cache dir keyed by source
// hash; or built now, when the toolchain is installed (else the test skips,
// saying what to install). `go test ./wasm -run TestBuildPlugins -update-plugins`
// rebuilds the committed ones and rewrites the manifest.

var updatePlugins = flag.Bool("update-plugins", false, "rebuild testdata/plugins/*.wasm and manifest.json")

const (
	repoRoot     = ".."
	pluginsDir   = "../testdata/plugins"
	manifestPath = "../testdata/plugins/manifest.json"
	examplesDir  = "../examples/plugins"
)

type toolchain string

const (
	toolWAT toolchain = "wat"
	toolAS  toolchain = "as"
	toolGo  toolchain = "go"
)

// moduleSpec is one module the tests use.
type moduleSpec struct {
	tool    toolchain
	sources []string // relative to the repo root; hashed in this order
	// commit: kept under testdata/plugins (small, and their toolchains are not Go).
	commit bool
	// pkg is the Go package to build, relative to examples/plugins/go.
	pkg string
}

func watSpec(path string) moduleSpec {
	return moduleSpec{tool: toolWAT, sources: []string{path}, commit: true}
}

var goSources = []string{
	"examples/plugins/go/go.mod", "examples/plugins/go/gate/gate.go",
	"examples/plugins/go/octafuse/main.go", "examples/plugins/go/scorer/main.go",
	"examples/plugins/go/balance/main.go",
}

var moduleSpecs = map[string]moduleSpec{
	"octafuse-wat.wasm": watSpec("examples/plugins/wat/octafuse.wat"),
	"octafuse-as.wasm": {tool: toolAS, commit: true, sources: []string{
		"examples/plugins/as/assembly/index.ts", "examples/plugins/as/asconfig.json",
		"examples/plugins/as/package.json", "examples/plugins/as/package-lock.json",
	}},
	"octafuse-go.wasm": {tool: toolGo, pkg: "./octafuse", sources: goSources},
	"scorer-go.wasm":   {tool: toolGo, pkg: "./scorer", sources: goSources},
	"balance-go.wasm":  {tool: toolGo, pkg: "./balance", sources: goSources},
	"trap.wasm":        watSpec("testdata/plugins/src/trap.wat"),
	"loop.wasm":        watSpec("testdata/plugins/src/loop.wat"),
	"bomb.wasm":        watSpec("testdata/plugins/src/bomb.wat"),
	"forbidden.wasm":   watSpec("testdata/plugins/src/forbidden.wat"),
	"badgate.wasm":     watSpec("testdata/plugins/src/badgate.wat"),
	"nomarker.wasm":    watSpec("testdata/plugins/src/nomarker.wat"),
	"initfail.wasm":    watSpec("testdata/plugins/src/initfail.wat"),
	"garbage.wasm":     watSpec("testdata/plugins/src/garbage.wat"),
	"nooutput.wasm":    watSpec("testdata/plugins/src/nooutput.wat"),
	"errcode.wasm":     watSpec("testdata/plugins/src/errcode.wat"),
	"config.wasm":      watSpec("testdata/plugins/src/config.wat"),
	"switch.wasm":      watSpec("testdata/plugins/src/switch.wat"),
	"score.wasm":       watSpec("testdata/plugins/src/score.wat"),
	"echo.wasm":        watSpec("testdata/plugins/src/echo.wat"),
	"wasi.wasm":        watSpec("testdata/plugins/src/wasi.wat"),
}

var builtModules = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

// module returns the built module name, building it (once per process) when no
// committed or cached build matches its sources.
func testModule(t testing.TB, name string) []byte {
	t.Helper()
	builtModules.Lock()
	defer builtModules.Unlock()
	if b, ok := builtModules.m[name]; ok {
		return b
	}
	spec, ok := moduleSpecs[name]
	if !ok {
		t.Fatalf("no module %q", name)
	}
	hash, err := sourceHash(spec)
	if err != nil {
		t.Fatal(err)
	}
	if spec.commit {
		if manifest(t)[name] == hash {
			if b, err := os.ReadFile(filepath.Join(pluginsDir, name)); err == nil {
				builtModules.m[name] = b
				return b
			}
		}
	}
	cached := filepath.Join(buildCacheDir(), hash[:16]+"-"+name)
	if b, err := os.ReadFile(cached); err == nil {
		builtModules.m[name] = b
		return b
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := buildModule(t, spec, cached); err != nil {
		t.Fatalf("build %s: %v", name, err)
	}
	b, err := os.ReadFile(cached)
	if err != nil {
		t.Fatal(err)
	}
	builtModules.m[name] = b
	return b
}

// modulePath writes module name into a temp dir and returns its path.
func modulePath(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, testModule(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func buildCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "gatectl-test-plugins")
}

// sourceHash hashes a module's sources (names and contents) and its toolchain.
func sourceHash(spec moduleSpec) (string, error) {
	h := sha256.New()
	h.Write([]byte(string(spec.tool) + "\n" + spec.pkg + "\n"))
	if spec.tool == toolGo {
		h.Write([]byte(runtime.Version() + "\n"))
	}
	for _, s := range spec.sources {
		b, err := os.ReadFile(filepath.Join(repoRoot, s))
		if err != nil {
			return "", err
		}
		h.Write([]byte(s + "\n"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func manifest(t testing.TB) map[string]string {
	m := map[string]string{}
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		return m
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", manifestPath, err)
	}
	return m
}

// buildModule builds spec into out, skipping the test when the toolchain is
// missing.
func buildModule(t testing.TB, spec moduleSpec, out string) error {
	t.Helper()
	var cmd *exec.Cmd
	switch spec.tool {
	case toolWAT:
		if _, err := exec.LookPath("wat2wasm"); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("wat2wasm is not installed (Debian: apt-get install -y wabt) and testdata/plugins has no build of %s", spec.sources[0]))
		}
		cmd = exec.Command("wat2wasm", filepath.Join(repoRoot, spec.sources[0]), "-o", out)
	case toolAS:
		asc, _ := filepath.Abs(filepath.Join(examplesDir, "as", "node_modules", ".bin", "asc"))
		if _, err := os.Stat(asc); err != nil {
			testenv.Unavailable(t, "the AssemblyScript compiler is not installed (run: npm ci --prefix examples/plugins/as) and testdata/plugins has no build of the current sources")
		}
		abs, err := filepath.Abs(out)
		if err != nil {
			return err
		}
		cmd = exec.Command(asc, "assembly/index.ts", "--config", "asconfig.json", "--target", "release", "--outFile", abs)
		cmd.Dir = filepath.Join(examplesDir, "as")
	case toolGo:
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		abs, err := filepath.Abs(out)
		if err != nil {
			return err
		}
		cmd = exec.Command(goBin, "build", "-buildmode=c-shared", "-o", abs, spec.pkg)
		cmd.Dir = filepath.Join(examplesDir, "go")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=", "GOWORK=off")
	}
	if o, err := cmd.CombinedOutput(); err != nil {
		return &buildError{cmd: strings.Join(cmd.Args, " "), out: string(o), err: err}
	}
	return nil
}

type buildError struct {
	cmd, out string
	err      error
}

func (e *buildError) Error() string { return e.cmd + ": " + e.err.Error() + "\n" + e.out }

// TestBuildPlugins rebuilds the committed modules with -update-plugins.
func TestBuildPlugins(t *testing.T) {
	if !*updatePlugins {
		t.Skip("run with -update-plugins to rebuild testdata/plugins")
	}
	m := manifest(t)
	names := make([]string, 0, len(moduleSpecs))
	for name, spec := range moduleSpecs {
		if spec.commit {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		spec := moduleSpecs[name]
		hash, err := sourceHash(spec)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(pluginsDir, name)
		if err := buildModule(t, spec, out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m[name] = hash
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(manifestPath, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The committed modules under testdata/plugins match their sources, so the tests
// (and ExampleClassifier) run without wat2wasm or npm.
func TestCommittedPluginsFresh(t *testing.T) {
	m := manifest(t)
	for name, spec := range moduleSpecs {
		if !spec.commit {
			continue
		}
		hash, err := sourceHash(spec)
		if err != nil {
			t.Fatal(err)
		}
		if m[name] != hash {
			t.Errorf("testdata/plugins/%s is stale: run go test ./wasm -run TestBuildPlugins -update-plugins", name)
		}
		if _, err := os.Stat(filepath.Join(pluginsDir, name)); err != nil {
			t.Error(err)
		}
	}
}
