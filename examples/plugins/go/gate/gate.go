//go:build wasip1

// Package gate is a minimal gate/v1 SDK for plugins written in Go: it wraps the
// host's three imports. A plugin is a main package built as a WASI reactor,
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// that exports the marker and its entry point with //go:wasmexport:
//
//	//go:wasmexport gate_abi_v1
//	func abiV1() {}
//
//	//go:wasmexport gate_classify
//	func classify(n int32) int32 {
//		in := gate.Input(n) // the failure's JSON
//		...
//		gate.Output(out)    // the verdict's JSON
//		return gate.OK
//	}
//
// The Go runtime's _initialize export is run once per instance by the host.
package gate

import "unsafe"

// What an entry point returns.
const (
	OK      int32 = 0 // the output is the answer
	Abstain int32 = 1 // no answer: the next classifier decides
	Error   int32 = 2 // failed: the host falls through and counts a failure
)

// Log levels for Log.
const (
	LevelTrace int32 = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

//go:wasmimport gate input_read
func inputRead(ptr unsafe.Pointer)

//go:wasmimport gate output_write
func outputWrite(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport gate log
func logWrite(level int32, ptr unsafe.Pointer, n uint32)

// in is reused from call to call: an instance serves one call at a time.
var in []byte

// Input copies the call's JSON input (n bytes, the entry point's argument) out of
// the host. The slice is valid until the next call.
func Input(n int32) []byte {
	if n <= 0 {
		return nil
	}
	if cap(in) < int(n) {
		in = make([]byte, n)
	}
	in = in[:n]
	inputRead(unsafe.Pointer(&in[0]))
	return in
}

// Output hands the JSON answer to the host. It reports false when the host
// refused it (larger than the plugin's output limit).
func Output(b []byte) bool {
	if len(b) == 0 {
		return outputWrite(nil, 0) == 0
	}
	return outputWrite(unsafe.Pointer(&b[0]), uint32(len(b))) == 0
}

// Log writes a line to the gate's log, under the plugin's name.
func Log(level int32, msg string) {
	if msg == "" {
		return
	}
	logWrite(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}
