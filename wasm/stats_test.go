package wasm

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

func TestPluginStatsForMetrics(t *testing.T) {
	h, err := NewHost(HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := NewClassifier(context.Background(), h, filepath.Join("..", "testdata", "plugins", "octafuse-wat.wasm"), ClassifierOptions{})
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
