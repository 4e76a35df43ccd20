package wasm

import (
	"errors"
	"fmt"
	"strings"
)

// The reasons a call or a load fails. Every error the package returns wraps one of
// them (or the caller's context error), so callers match with errors.Is.
var (
	// ErrABI: the module is not a gate/v1 module of the wanted kind (a missing
	// export, a wrong signature, no gate_abi_v1 marker, bad wasm).
	ErrABI = errors.New("wasm: not a gate/v1 module")
	// ErrImport: the module imports something outside the allowed list. The
	// error is an *ImportError naming each import.
	ErrImport = errors.New("wasm: forbidden import")
	// ErrInit: making an instance failed (_initialize or gate_init trapped, timed
	// out or returned non-zero).
	ErrInit = errors.New("wasm: instance did not start")
	// ErrTimeout: the call ran past its deadline and was stopped.
	ErrTimeout = errors.New("wasm: call exceeded its deadline")
	// ErrTrap: the module trapped (unreachable, out of bounds, proc_exit, memory
	// it could not grow).
	ErrTrap = errors.New("wasm: module trapped")
	// ErrCode: the entry point returned an error code (>= 2).
	ErrCode = errors.New("wasm: module returned an error code")
	// ErrOutput: the output is missing, too large or not what the kind expects.
	ErrOutput = errors.New("wasm: bad output")
	// ErrInput: the call's input is larger than MaxInputBytes; the module was not
	// called and is not blamed.
	ErrInput = errors.New("wasm: input too large")
	// ErrBusy: every instance stayed busy for the whole deadline; the module was
	// not called and is not blamed.
	ErrBusy = errors.New("wasm: every instance is busy")
	// ErrQuarantined: the plugin failed too many times in a row and is not
	// called until its quarantine ends.
	ErrQuarantined = errors.New("wasm: plugin quarantined")
	// ErrClosed: the plugin (or its host) was closed.
	ErrClosed = errors.New("wasm: plugin closed")
)

// ImportError refuses a module for the imports it names, each as "module.name".
// It matches ErrImport with errors.Is.
type ImportError struct {
	Module  string   // the plugin's name or path
	Imports []string // the forbidden imports, "module.name", in the module's order
}

func (e *ImportError) Error() string {
	q := make([]string, len(e.Imports))
	for i, s := range e.Imports {
		q[i] = fmt.Sprintf("%q", s)
	}
	verb := "is"
	if len(q) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("wasm: %s: import %s %s not allowed (allowed: %s)",
		e.Module, strings.Join(q, ", "), verb, strings.Join(AllowedImports, ", "))
}

// Is makes errors.Is(err, ErrImport) true.
func (e *ImportError) Is(target error) bool { return target == ErrImport }
