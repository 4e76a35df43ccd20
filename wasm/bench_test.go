package wasm

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/tetratelabs/wazero"
)

// Targets (issue 5): a pooled call of the WAT or AssemblyScript classifier p50
// <= 5µs, the Go one <= 50µs; loading from the compilation cache <= 10% of a cold
// compile. Run:
//
//	go test ./wasm -run '^$' -bench . -benchtime 20000x
//
// p50-ns and p99-ns are per-call percentiles; ns/op is the mean.

func BenchmarkClassify(b *testing.B) {
	for _, tc := range []struct{ name, module string }{
		{"wat", "octafuse-wat.wasm"},
		{"as", "octafuse-as.wasm"},
		{"go", "octafuse-go.wasm"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			th := newTestHost(b, "")
			// The default 2ms deadline, as in production.
			p, err := th.LoadBytes(context.Background(), testModule(b, tc.module), Options{Kind: KindClassify, Name: tc.module, Limits: Limits{Timeout: slow}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			c := ClassifierFor(p)
			f := &engine.Failure{Status: 200, Headers: map[string]string{"content-type": "application/json"},
				Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`, Provider: "octafuse"}
			ctx := context.Background()
			for range 100 { // warm up
				c.Classify(ctx, f)
			}
			d := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				_, _, err := c.Classify(ctx, f)
				d = append(d, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
	}
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkCompile compares a cold compile with a load from the on-disk cache,
// each by a fresh cache and runtime (as after a restart), timing CompileModule
// alone: the runtime, WASI and the gate host module cost the same either way.
func BenchmarkCompile(b *testing.B) {
	for _, tc := range []struct{ name, module string }{
		{"wat", "octafuse-wat.wasm"},
		{"as", "octafuse-as.wasm"},
		{"go", "octafuse-go.wasm"},
	} {
		bin := testModule(b, tc.module)
		compile := func(b *testing.B, dir string) {
			ctx := context.Background()
			b.StopTimer()
			cache, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
				WithCompilationCache(cache).WithCloseOnContextDone(true).WithMemoryLimitPages(512))
			b.StartTimer()
			if _, err := rt.CompileModule(ctx, bin); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			rt.Close(ctx)
			cache.Close(ctx)
			b.StartTimer()
		}
		b.Run(tc.name+"/cold", func(b *testing.B) {
			for range b.N {
				compile(b, b.TempDir())
			}
		})
		b.Run(tc.name+"/cached", func(b *testing.B) {
			dir := b.TempDir()
			compile(b, dir) // fills the cache
			b.ResetTimer()
			for range b.N {
				compile(b, dir)
			}
		})
	}
}
