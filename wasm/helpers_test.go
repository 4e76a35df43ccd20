package wasm

import (
	"context"
	"github.com/gatectl/gatectl/internal/testlog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
	"gopkg.in/yaml.v3"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testHost is a host on a fake clock, logging into a buffer, closed with the test.
type testHost struct {
	*Host
	clock *engine.FakeClock
	log   *testlog.Buffer
	out   *testlog.Buffer // modules' stdout and stderr
}

// newTestHost makes a host; with cacheDir "" it shares the test process's
// compilation cache (sharedCacheDir).
func newTestHost(t testing.TB, cacheDir string) *testHost {
	t.Helper()
	if cacheDir == "" {
		cacheDir = sharedCacheDir(t)
	}
	th := &testHost{clock: engine.NewFakeClock(t0), log: &testlog.Buffer{}, out: &testlog.Buffer{}}
	lg := hclog.New(&hclog.LoggerOptions{Output: th.log, Level: hclog.Trace})
	h, err := NewHost(HostOptions{CacheDir: cacheDir, Logger: lg, Clock: th.clock, Stderr: th.out})
	if err != nil {
		t.Fatal(err)
	}
	th.Host = h
	t.Cleanup(func() { h.Close(context.Background()) })
	return th
}

// sharedCache is the on-disk compilation cache every test host without a
// directory of its own uses: the Go examples take 10–25 s each to compile under
// -race, and a dozen tests load the same few modules. TestMain removes it.
var sharedCache struct {
	once sync.Once
	dir  string
	err  error
}

func sharedCacheDir(t testing.TB) string {
	t.Helper()
	sharedCache.once.Do(func() { sharedCache.dir, sharedCache.err = os.MkdirTemp("", "gatectl-wasm-test-cache-") })
	if sharedCache.err != nil {
		t.Fatal(sharedCache.err)
	}
	return sharedCache.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCache.dir != "" {
		os.RemoveAll(sharedCache.dir)
	}
	os.Exit(code)
}

// slow is the deadline of tests that are not about deadlines: the machine may be
// loaded (or under -race), and a 2ms deadline would make them flaky.
const slow = time.Second

// load loads a test module as a plugin of kind k; a zero Timeout is slow.
func (th *testHost) load(t testing.TB, name string, k Kind, l Limits) *Plugin {
	t.Helper()
	if l.Timeout == 0 {
		l.Timeout = slow
	}
	p, err := th.LoadBytes(context.Background(), testModule(t, name), Options{Kind: k, Name: name, Limits: l})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (th *testHost) classifier(t testing.TB, name string, l Limits) *Classifier {
	return ClassifierFor(th.load(t, name, KindClassify, l))
}

// octafuseCases reads the shared golden cases of the Octafuse examples.
func octafuseCases(t testing.TB) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(examplesDir + "/octafuse.cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []map[string]any
	if err := yaml.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func failureWithBody(status int, body string) *engine.Failure {
	return &engine.Failure{Status: status, Body: body}
}

func ms(v int64) *int64 { return &v }

func hint(v engine.Verdict) string {
	if v.RetryAfterMs == nil {
		return "null"
	}
	return strconv.FormatInt(*v.RetryAfterMs, 10)
}

// staticClassifier always decides with its verdict.
type staticClassifier struct{ v engine.Verdict }

func (s staticClassifier) Name() string { return s.v.By }
func (s staticClassifier) Classify(context.Context, *engine.Failure) (engine.Verdict, bool, error) {
	return s.v, true, nil
}
