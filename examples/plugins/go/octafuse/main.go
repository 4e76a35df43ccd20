//go:build wasip1

// Command octafuse is the Octafuse classifier as a gate/v1 plugin, in Go.
//
// Octafuse (a made-up gateway) answers HTTP 200 with the error in the body,
// {"code":"OCTA_THROTTLED","wait_ms":1500}:
//
//	OCTA_THROTTLED -> RATE_LIMIT, retryAfterMs = wait_ms (null when absent)
//	OCTA_BUSY      -> OVERLOADED, retryAfterMs = wait_ms (null when absent)
//	OCTA_CREDITS   -> QUOTA,      retryAfterMs = null
//	anything else  -> abstain: the next classifier decides
//
// Like the WAT and AssemblyScript versions it scans the failure's JSON for the
// codes as bytes instead of decoding it. That is a choice for speed: the host
// stops runaway plugins by checking the call's deadline at every loop iteration,
// each check costs tens of nanoseconds, and encoding/json loops a great deal —
// decoding the failure and its body that way takes some 150µs a call, this scan
// a few. Decode JSON where a plugin needs structure (see ../scorer).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o octafuse.wasm ./octafuse
package main

import (
	"bytes"
	"strconv"

	"github.com/gatectl/gatectl/examples/plugins/go/gate"
)

func main() {} // a reactor: the host calls the exports, never main

//go:wasmexport gate_abi_v1
func abiV1() {}

var (
	octa   = []byte("OCTA_")
	waitMs = []byte("wait_ms")
	out    = make([]byte, 0, 128) // reused: an instance serves one call at a time
)

//go:wasmexport gate_classify
func classify(n int32) int32 {
	in := gate.Input(n)
	i := bytes.Index(in, octa)
	if i < 0 {
		return gate.Abstain // not Octafuse's
	}
	code := in[i+len(octa):]
	var class string
	hint := int64(-1)
	switch {
	case bytes.HasPrefix(code, []byte("THROTTLED")):
		class, hint = "RATE_LIMIT", wait(in)
	case bytes.HasPrefix(code, []byte("BUSY")):
		class, hint = "OVERLOADED", wait(in)
	case bytes.HasPrefix(code, []byte("CREDITS")):
		class = "QUOTA"
	default:
		return gate.Abstain
	}
	out = append(out[:0], `{"class":"`...)
	out = append(out, class...)
	out = append(out, `","retryAfterMs":`...)
	if hint < 0 {
		out = append(out, "null"...)
	} else {
		out = strconv.AppendInt(out, hint, 10)
	}
	out = append(out, '}')
	if !gate.Output(out) {
		return gate.Error
	}
	return gate.OK
}

// wait parses the digits after "wait_ms" (after at most 6 bytes of quotes,
// backslashes, colons and spaces); -1 when there are none.
func wait(in []byte) int64 {
	i := bytes.Index(in, waitMs)
	if i < 0 {
		return -1
	}
	rest := in[i+len(waitMs):]
	skip := 0
	for skip < len(rest) && skip < 6 && (rest[skip] < '0' || rest[skip] > '9') {
		skip++
	}
	rest = rest[skip:]
	n := 0
	for n < len(rest) && n < 12 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return -1
	}
	v, err := strconv.ParseInt(string(rest[:n]), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
