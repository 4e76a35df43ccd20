package balance

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// traceLogger logs everything, at every level, into the returned buffer.
func traceLogger() (hclog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
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
