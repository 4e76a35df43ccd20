package balance

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gatectl/gatectl/internal/testlog"
)

// traceLogger logs everything, at every level, into the returned buffer.
func traceLogger() (hclog.Logger, *testlog.Buffer) {
	buf := &testlog.Buffer{}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Output: buf, Level: hclog.Trace}), buf
}

// testdata is the absolute path of testdata/balance.
func testdata(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "testdata", "balance"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// envMap is a LookupEnv over a fixed map.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
