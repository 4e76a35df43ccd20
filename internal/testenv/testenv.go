// Package testenv is how a test says it needs something beyond Go (a tool that
// .ci/run installs, a server binary, an npm package). Locally, without it, the
// test skips and says what to install. In CI (CI or GATECTL_REQUIRE_ALL set) a
// missing requirement fails the test instead: a test that skips in CI is a test
// that does not run.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Required reports whether every requirement must be met (CI).
func Required() bool {
	return os.Getenv("CI") != "" || os.Getenv("GATECTL_REQUIRE_ALL") != ""
}

// Unavailable ends t because something it needs is missing: a failure under CI,
// a skip (with why, which should say how to install it) elsewhere.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("required in CI but unavailable: %s", why)
	}
	t.Skipf("skipped: %s", why)
}

// Tool returns the path of the named program, or ends t (see Unavailable) with
// install, the command that provides it.
func Tool(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, name+" is not installed ("+install+")")
	}
	return p
}

// RealTiming marks a test whose claims rest on wall-clock timing over real
// sockets (429s, utilization against a hidden limit). Under the race detector,
// which slows every request several times, such figures mean nothing (the gate
// read 0.58 of the limit there where it reads 0.94 without it), so the test is
// skipped, saying how to run it. CI runs these tests in a step of their own,
// without -race, after `go test -race ./...`.
func RealTiming(t testing.TB) {
	t.Helper()
	if RaceEnabled {
		t.Skip("real-timing figures are measured without the race detector: go test -run " + t.Name() + " (CI runs it in its own step)")
	}
}

// LongSimulation marks a test of long simulated runs (hours of virtual time, or
// many seeds): the race detector slows the simulator some forty times, so under
// it the test is skipped, saying how to run it, and t runs in parallel with the
// package's other long tests otherwise. CI runs the simulator's package without
// -race in a step of its own, after `go test -race ./...`. Keep one short run
// of the concurrent code (the matrix's goroutines) under the race detector.
func LongSimulation(t *testing.T) {
	t.Helper()
	if RaceEnabled {
		t.Skip("long simulated runs are checked without the race detector, which slows the simulator forty times: go test -run " + t.Name() + " ./sim/ (CI runs the package in its own step)")
	}
	t.Parallel()
}
