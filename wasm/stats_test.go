package wasm

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

// The deadline is generous (slow): what is tested is the count, not the speed,
// and under the race detector beside other packages a call can take longer
// than the production 2 ms (seen once in CI).
func TestPluginStatsForMetrics(t *testing.T) {
	h, err := NewHost(HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := NewClassifier(context.Background(), h, filepath.Join("..", "testdata", "plugins", "octafuse-wat.wasm"), ClassifierOptions{Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		f := engine.Failure{Status: 200, Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`}
		if _, ok, err := c.Classify(context.Background(), &f); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
	}
	ps := h.PluginStats()
	if len(ps) != 1 || ps[0].Kind != KindClassify || ps[0].Stats.Calls != 3 || ps[0].Stats.CallTime <= 0 {
		t.Fatalf("stats %+v", ps)
	}
}
