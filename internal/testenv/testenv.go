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
