package wasm

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The module names a gate/v1 module may import from.
const (
	ImportModuleGate = "gate"
	ImportModuleWASI = "wasi_snapshot_preview1"
)

// ExportABIMarker is the function every gate/v1 module exports to say so.
const ExportABIMarker = "gate_abi_v1"

// AllowedImports lists what a gate/v1 module may import, for messages.
var AllowedImports = []string{"gate.input_read", "gate.output_write", "gate.log", "wasi_snapshot_preview1.*"}

// sig is a function signature, written like "(i32,i32)->i32".
type sig struct{ params, results []api.ValueType }

func (s sig) String() string { return sigString(s.params, s.results) }

func sigString(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		n := make([]string, len(ts))
		for i, t := range ts {
			n[i] = api.ValueTypeName(t)
		}
		return strings.Join(n, ",")
	}
	s := "(" + name(params) + ")"
	if len(results) > 0 {
		s += "->" + name(results)
	}
	return s
}

func (s sig) matches(params, results []api.ValueType) bool {
	return sameTypes(s.params, params) && sameTypes(s.results, results)
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var (
	i32 = api.ValueTypeI32

	// gateImports are the host functions of the "gate" module and their signatures.
	gateImports = map[string]sig{
		"input_read":   {[]api.ValueType{i32}, nil},
		"output_write": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		"log":          {[]api.ValueType{i32, i32, i32}, nil},
	}
	entrySig      = sig{[]api.ValueType{i32}, []api.ValueType{i32}} // gate_classify, gate_score, gate_balance, gate_init
	initializeSig = sig{nil, nil}                                   // _initialize
)

// Info describes a compiled module: what it imports and exports and which gate/v1
// kinds it can serve. Inspect and `gatectl plugin check` report it.
type Info struct {
	SHA256     string   `json:"sha256"`
	Size       int      `json:"size"`
	ABIMarker  bool     `json:"abiMarker"`  // exports gate_abi_v1
	Memory     bool     `json:"memory"`     // exports "memory"
	Kinds      []Kind   `json:"kinds"`      // entry points exported with the right signature
	Init       bool     `json:"init"`       // exports gate_init
	Initialize bool     `json:"initialize"` // exports _initialize
	Imports    []string `json:"imports"`    // "module.name", in the module's order
	Exports    []string `json:"exports"`    // function and memory exports, sorted
	// MemoryMinPages is the declared initial size of the exported memory.
	MemoryMinPages uint32 `json:"memoryMinPages"`
}

// Has reports whether the module exports the entry point of kind k.
func (i *Info) Has(k Kind) bool {
	for _, x := range i.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// inspect reads a compiled module's imports and exports.
func inspect(cm wazero.CompiledModule) *Info {
	info := &Info{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		info.Imports = append(info.Imports, mod+"."+name)
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		info.Imports = append(info.Imports, mod+"."+name)
	}
	fns := cm.ExportedFunctions()
	for name, f := range fns {
		info.Exports = append(info.Exports, name)
		switch {
		case name == ExportABIMarker:
			info.ABIMarker = true
		case name == "gate_init":
			info.Init = entrySig.matches(f.ParamTypes(), f.ResultTypes())
		case name == "_initialize":
			info.Initialize = initializeSig.matches(f.ParamTypes(), f.ResultTypes())
		}
	}
	for _, k := range Kinds {
		if f, ok := fns[k.Export()]; ok && entrySig.matches(f.ParamTypes(), f.ResultTypes()) {
			info.Kinds = append(info.Kinds, k)
		}
	}
	for name, m := range cm.ExportedMemories() {
		info.Exports = append(info.Exports, name)
		if name == "memory" {
			info.Memory = true
			info.MemoryMinPages = m.Min()
		}
	}
	sort.Strings(info.Exports)
	return info
}

// checkImports refuses a module importing anything outside AllowedImports, or a
// gate function with the wrong signature. It runs before instantiation.
func checkImports(name string, cm wazero.CompiledModule) error {
	var bad []string
	var errs []error
	for _, f := range cm.ImportedFunctions() {
		mod, fn, _ := f.Import()
		switch mod {
		case ImportModuleWASI:
			continue // the host instantiates wazero's WASI, sandboxed (see doc.go)
		case ImportModuleGate:
			want, ok := gateImports[fn]
			if !ok {
				bad = append(bad, mod+"."+fn)
				continue
			}
			if !want.matches(f.ParamTypes(), f.ResultTypes()) {
				errs = append(errs, fmt.Errorf("%w: %s: import \"%s.%s\" has signature %s, want %s",
					ErrABI, name, mod, fn, sigString(f.ParamTypes(), f.ResultTypes()), want))
			}
		default:
			bad = append(bad, mod+"."+fn)
		}
	}
	for _, m := range cm.ImportedMemories() {
		mod, n, _ := m.Import()
		bad = append(bad, mod+"."+n) // the module brings its own memory
	}
	if len(bad) > 0 {
		errs = append([]error{&ImportError{Module: name, Imports: bad}}, errs...)
	}
	return errors.Join(errs...)
}

// checkExports checks that the module is a gate/v1 module of kind k: memory, the
// marker, the entry point and the optional gate_init and _initialize with the
// right signatures. Every problem is reported.
func checkExports(name string, cm wazero.CompiledModule, k Kind) error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrABI, name, fmt.Sprintf(format, args...)))
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		fail(`does not export "memory"`)
	}
	fns := cm.ExportedFunctions()
	if _, ok := fns[ExportABIMarker]; !ok {
		fail("does not export the %s marker", ExportABIMarker)
	}
	check := func(export string, want sig, required bool) {
		f, ok := fns[export]
		switch {
		case !ok && required:
			fail("does not export %s%s", export, want)
		case ok && !want.matches(f.ParamTypes(), f.ResultTypes()):
			fail("exports %s with signature %s, want %s", export, sigString(f.ParamTypes(), f.ResultTypes()), want)
		}
	}
	check(k.Export(), entrySig, true)
	check("gate_init", entrySig, false)
	check("_initialize", initializeSig, false)
	return errors.Join(errs...)
}
