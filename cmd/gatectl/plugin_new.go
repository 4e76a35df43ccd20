package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

func pluginNewCommand() *cli.Command {
	return &cli.Command{
		Name:      "new",
		Usage:     "write a starter classifier plugin that builds and passes its own check",
		ArgsUsage: "NAME",
		Description: "Writes DIR/NAME (default ./NAME): a gate/v1 classifier in the chosen language,\n" +
			"its golden cases (NAME.cases.yaml) and build.sh, which builds NAME.wasm. Then:\n" +
			"  (cd NAME && ./build.sh) && gatectl plugin check NAME/NAME.wasm\n" +
			"Toolchains: wat needs wat2wasm (Debian package wabt); go needs Go 1.24 or\n" +
			"later; as needs Node.js and npm (build.sh runs npm install).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "lang", Value: "wat", Usage: "`LANG`uage: go, as (AssemblyScript) or wat"},
			&cli.StringFlag{Name: "dir", Value: ".", Usage: "parent `DIR`ectory of the new plugin's directory"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("plugin new: want a name: gatectl plugin new --lang go|as|wat NAME", exitUsage)
			}
			name := c.Args().First()
			files, ok := starters[c.String("lang")]
			if !ok {
				return cli.Exit(fmt.Sprintf("plugin new: --lang must be go, as or wat (got %q)", c.String("lang")), exitUsage)
			}
			dir, err := writeStarter(c.String("dir"), name, files)
			if err != nil {
				return err
			}
			run, note := gatectlInvocation(selfPath(), exec.LookPath, dirExists("cmd/gatectl"))
			fmt.Fprintf(c.App.Writer, "wrote %s\nnext: (cd %s && ./build.sh) && %s plugin check %s\n", dir, dir, run, filepath.Join(dir, name+".wasm"))
			if note != "" {
				fmt.Fprintln(c.App.Writer, note)
			}
			return nil
		},
	}
}

// pluginNameRe is what a plugin name may be: it names the directory, the module
// and (for Go) the module path.
var pluginNameRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// writeStarter writes files (names and contents with {{NAME}} replaced) into
// parent/name, which must not exist yet.
func writeStarter(parent, name string, files map[string]string) (string, error) {
	if !pluginNameRe.MatchString(name) {
		return "", cli.Exit(fmt.Sprintf("plugin new: name %q: use lowercase letters, digits and '-', starting with a letter", name), exitUsage)
	}
	dir := filepath.Join(parent, name)
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("plugin new: %s already exists", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("plugin new: %w", err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(dir, strings.ReplaceAll(p, "{{NAME}}", name))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", fmt.Errorf("plugin new: %w", err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(strings.ReplaceAll(files[p], "{{NAME}}", name)), mode); err != nil {
			return "", fmt.Errorf("plugin new: %w", err)
		}
	}
	return dir, nil
}

// starterCases are the starter's golden cases, the same for every language.
const starterCases = `# Golden cases of {{NAME}}: ` + "`gatectl plugin check {{NAME}}.wasm`" + ` runs them, and so
# does gatectl on every load when the same list sits under the plugin's
# ` + "`classifiers:`" + ` entry in the config (as cases:).
- name: busy
  input: {status: 200, body: '{"error":"MY_GATEWAY_BUSY"}'}
  expect: {class: OVERLOADED, retryAfterMs: null}
- name: not ours
  input: {status: 429, headers: {retry-after: "20"}, body: rate limited}
  expect: {abstain: true}
`

// starters holds each language's files, by path relative to the plugin's
// directory.
var starters = map[string]map[string]string{
	"wat": {
		"{{NAME}}.cases.yaml": starterCases,
		"build.sh": `#!/bin/sh
# Builds {{NAME}}.wasm. Needs wat2wasm (Debian: apt-get install wabt).
set -e
cd "$(dirname "$0")"
wat2wasm {{NAME}}.wat -o {{NAME}}.wasm
`,
		"{{NAME}}.wat": `;; {{NAME}}.wat: a gate/v1 classifier, started by ` + "`gatectl plugin new`" + `.
;;
;; It answers OVERLOADED (no wait hint) when the failure's JSON mentions
;; MY_GATEWAY_BUSY, and abstains (returns 1: the next classifier decides)
;; otherwise. Change the needle and the verdict, then the cases in
;; {{NAME}}.cases.yaml.
;;
;; The ABI: export memory, gate_abi_v1 and gate_classify(in_len) -> i32; call
;; gate.input_read(ptr) to get the failure's JSON (in_len bytes) and
;; gate.output_write(ptr, len) to hand back the verdict's JSON; return 0 (the
;; output is the answer), 1 (abstain) or 2 and up (error).
;;
;; Build: ./build.sh    Check: gatectl plugin check {{NAME}}.wasm
(module
  (import "gate" "input_read" (func $input_read (param i32)))
  (import "gate" "output_write" (func $output_write (param i32 i32) (result i32)))

  ;; 0..1023: constants; 1024..: the input.
  (memory (export "memory") 1)
  (data (i32.const 0) "MY_GATEWAY_BUSY")                              ;; 15 bytes
  (data (i32.const 32) "{\"class\":\"OVERLOADED\",\"retryAfterMs\":null}") ;; 42 bytes

  (func (export "gate_abi_v1"))

  ;; $contains reports whether the input [1024, 1024+len) holds the needle.
  (func $contains (param $len i32) (result i32)
    (local $i i32) (local $j i32)
    (block $no
      (loop $at
        (br_if $no (i32.gt_s (i32.add (local.get $i) (i32.const 15)) (local.get $len)))
        (local.set $j (i32.const 0))
        (block $miss
          (loop $cmp
            (if (i32.eq (local.get $j) (i32.const 15)) (then (return (i32.const 1))))
            (br_if $miss (i32.ne
              (i32.load8_u (i32.add (i32.const 1024) (i32.add (local.get $i) (local.get $j))))
              (i32.load8_u (local.get $j))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $cmp)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $at)))
    (i32.const 0))

  (func (export "gate_classify") (param $len i32) (result i32)
    (local $need i32)
    ;; grow the memory to fit the input
    (local.set $need (i32.shr_u (i32.add (local.get $len) (i32.const 66559)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.lt_s (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const 0))
        (then (return (i32.const 2))))))
    (call $input_read (i32.const 1024))
    (if (i32.eqz (call $contains (local.get $len))) (then (return (i32.const 1))))
    (drop (call $output_write (i32.const 32) (i32.const 42)))
    (i32.const 0))
)
`,
	},
	"go": {
		"{{NAME}}.cases.yaml": starterCases,
		"build.sh": `#!/bin/sh
# Builds {{NAME}}.wasm: a WASI reactor (c-shared) exporting the gate/v1 ABI.
set -e
cd "$(dirname "$0")"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o {{NAME}}.wasm .
`,
		"go.mod": `module {{NAME}}

go 1.24
`,
		"main.go": `//go:build wasip1

// Command {{NAME}} is a gate/v1 classifier, started by ` + "`gatectl plugin new`" + `.
//
// It answers OVERLOADED (no wait hint) when the failure's JSON mentions
// MY_GATEWAY_BUSY, and abstains (the next classifier decides) otherwise. Change
// the needle and the verdict, then the cases in {{NAME}}.cases.yaml.
//
// The host checks the call's deadline (2ms) at every loop iteration of the
// module, which costs tens of nanoseconds each time: scanning bytes is cheap,
// while encoding/json costs some 100µs a call. Keep the hot path lean.
//
// Build: ./build.sh    Check: gatectl plugin check {{NAME}}.wasm
package main

import (
	"bytes"
	"unsafe"
)

//go:wasmimport gate input_read
func inputRead(ptr unsafe.Pointer)

//go:wasmimport gate output_write
func outputWrite(ptr unsafe.Pointer, n uint32) int32

func main() {} // a reactor: the host calls the exports, never main

//go:wasmexport gate_abi_v1
func abiV1() {}

var (
	in      []byte // reused: an instance serves one call at a time
	needle  = []byte("MY_GATEWAY_BUSY")
	verdict = []byte(` + "`" + `{"class":"OVERLOADED","retryAfterMs":null}` + "`" + `)
)

// classify gets the failure's JSON (n bytes) and hands back a verdict. It
// returns 0 (the output is the answer), 1 (abstain) or 2 (error).
//
//go:wasmexport gate_classify
func classify(n int32) int32 {
	if cap(in) < int(n) {
		in = make([]byte, n)
	}
	in = in[:n]
	if n > 0 {
		inputRead(unsafe.Pointer(&in[0]))
	}
	if !bytes.Contains(in, needle) {
		return 1
	}
	if outputWrite(unsafe.Pointer(&verdict[0]), uint32(len(verdict))) != 0 {
		return 2
	}
	return 0
}
`,
	},
	"as": {
		"{{NAME}}.cases.yaml": starterCases,
		"build.sh": `#!/bin/sh
# Builds {{NAME}}.wasm with the AssemblyScript compiler (installed by npm).
set -e
cd "$(dirname "$0")"
[ -d node_modules/assemblyscript ] || npm install --no-audit --no-fund
npx asc assembly/index.ts --config asconfig.json --target release
`,
		"package.json": `{
  "name": "{{NAME}}",
  "version": "0.1.0",
  "private": true,
  "description": "A gate/v1 classifier plugin for gatectl",
  "scripts": {
    "build": "asc assembly/index.ts --config asconfig.json --target release"
  },
  "devDependencies": {
    "assemblyscript": "^0.28.0"
  }
}
`,
		"asconfig.json": `{
  "targets": {
    "release": {
      "outFile": "{{NAME}}.wasm",
      "optimizeLevel": 3,
      "shrinkLevel": 0,
      "noAssert": true
    }
  },
  "options": {
    "runtime": "stub",
    "exportStart": "_initialize",
    "use": ["abort="]
  }
}
`,
		".gitignore": "node_modules/\n",
		"assembly/index.ts": `// {{NAME}}: a gate/v1 classifier, started by ` + "`gatectl plugin new`" + `.
//
// It answers OVERLOADED (no wait hint) when the failure's JSON mentions
// MY_GATEWAY_BUSY, and abstains (returns 1: the next classifier decides)
// otherwise. Change the needle and the verdict, then the cases in
// {{NAME}}.cases.yaml.
//
// asconfig.json keeps the module lean: the stub runtime (no garbage collector;
// allocate once, at start), _initialize exported instead of a start function,
// and no abort import (the host allows only gate.* and WASI imports).
//
// Build: ./build.sh    Check: gatectl plugin check {{NAME}}.wasm

@external("gate", "input_read")
declare function input_read(ptr: usize): void;

@external("gate", "output_write")
declare function output_write(ptr: usize, len: i32): i32;

// The gate/v1 marker.
export function gate_abi_v1(): void {}

const NEEDLE = String.UTF8.encode("MY_GATEWAY_BUSY");
const VERDICT = String.UTF8.encode('{"class":"OVERLOADED","retryAfterMs":null}');
let inBuf: usize = 0;
let inCap: i32 = 0;

// contains reports whether the input's first len bytes hold the needle.
function contains(len: i32): bool {
  const n = NEEDLE.byteLength;
  const needle = changetype<usize>(NEEDLE);
  for (let i = 0; i + n <= len; i++) {
    if (memory.compare(inBuf + <usize>i, needle, <usize>n) == 0) return true;
  }
  return false;
}

// gate_classify gets the failure's JSON (len bytes) and hands back a verdict.
// It returns 0 (the output is the answer), 1 (abstain) or 2 (error).
export function gate_classify(len: i32): i32 {
  if (len > inCap) {
    if (inBuf != 0) heap.free(inBuf);
    inCap = len < 4096 ? 4096 : len;
    inBuf = heap.alloc(<usize>inCap);
  }
  input_read(inBuf);
  if (!contains(len)) return 1;
  if (output_write(changetype<usize>(VERDICT), VERDICT.byteLength) != 0) return 2;
  return 0;
}
`,
	},
}

// gatectlInvocation is how the user can run this gatectl again from the current
// directory: "gatectl" when that is on the PATH and is this binary, the go run
// form under `go run` in the repository, else the binary's own path. note, when
// set, says how to install it. self is the running binary ("" when unknown);
// inRepo says ./cmd/gatectl exists here.
func gatectlInvocation(self string, lookPath func(string) (string, error), inRepo bool) (run, note string) {
	const install = "(gatectl is not on your PATH: `go install ./cmd/gatectl` in the repository puts it in $(go env GOPATH)/bin)"
	if p, err := lookPath("gatectl"); err == nil && sameFile(p, self) {
		return "gatectl", ""
	}
	if self == "" || strings.Contains(self, string(filepath.Separator)+"go-build") { // go run, go test: a binary that is gone when it ends
		if inRepo {
			return "go run ./cmd/gatectl", ""
		}
		return "gatectl", install
	}
	if strings.ContainsAny(self, " '\"$") {
		return fmt.Sprintf("%q", self), ""
	}
	return self, ""
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
