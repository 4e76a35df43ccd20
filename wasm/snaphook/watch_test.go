package snaphook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
)

// The promise on the box: drop a classifier .wasm into the plugins directory and
// it is live — through the real watcher, on a real file system.
func TestDropInPluginGoesLive(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "testdata", "plugins", "octafuse-wat.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte("stateDir: state\npluginsDir: plugins\npluginLimits: {timeout: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hook := New(wasm.HostOptions{})
	defer hook.Close(context.Background())
	m, err := snapshot.NewManager(context.Background(), cfg, snapshot.Options{Hooks: []snapshot.ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	octa := engine.Failure{Status: 200, Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`}
	if v, _, _ := m.Current().Chain.Classify(context.Background(), &octa); strings.HasPrefix(v.By, "wasm/") {
		t.Fatalf("classified before the plugin was dropped in: %+v", v)
	}
	swapped := make(chan *snapshot.Snapshot, 1)
	m.OnSwap(func(_, s *snapshot.Snapshot) {
		select {
		case swapped <- s:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go m.Watch(ctx, snapshot.WatchOptions{Debounce: 20 * time.Millisecond, Poll: time.Hour, Ready: func() { close(ready) }})
	<-ready // the fsnotify watch on the plugins directory is what must fire
	if err := os.WriteFile(filepath.Join(dir, "plugins", "10-octafuse.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-swapped:
		// pluginLimits gives the drop-in a generous deadline: under -race on a
		// loaded machine a first call can pass the production 2 ms.
		v, _, err := s.Chain.Classify(context.Background(), &octa)
		if err != nil || v.Class != engine.ClassRateLimit || v.RetryAfterMs == nil || *v.RetryAfterMs != 1500 || !strings.HasPrefix(v.By, "wasm/10-octafuse") {
			t.Fatalf("after the drop-in: %+v %v", v, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the dropped-in plugin never went live")
	}
}
