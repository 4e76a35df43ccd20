package snapshot

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/balance"
	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
)

// closingLink is a chain link with a Close that counts itself.
type closingLink struct {
	name   string
	closes atomic.Int32
}

func (l *closingLink) Name() string { return l.name }
func (l *closingLink) Classify(context.Context, *engine.Failure) (engine.Verdict, bool, error) {
	return engine.Verdict{}, false, nil
}
func (l *closingLink) Close() error {
	l.closes.Add(1)
	return nil
}

// linkHook is a ChainHook that gives each build the link fresh returns from its
// plugins directory, and fails the build when fail is set.
type linkHook struct {
	fresh func() *closingLink
	given []*closingLink
	fail  bool
}

func (h *linkHook) ClassifierFor(context.Context, *config.Config, int, *Snapshot) ([]engine.Classifier, []string, bool, error) {
	return nil, nil, false, nil
}

func (h *linkHook) DirClassifiers(context.Context, *config.Config, *Snapshot) ([]engine.Classifier, []string, error) {
	l := h.fresh()
	h.given = append(h.given, l)
	if h.fail {
		return []engine.Classifier{l}, nil, errors.New("the directory is broken")
	}
	return []engine.Classifier{l}, nil, nil
}

const closeConfig = `
providers:
  beta: {kind: openai, baseURL: "https://beta.example/v1"}
balances:
  - provider: beta
    refresh: 1m
    script: [sh, -c, 'echo ''{"remaining": 5}''']
`

// After a reload the old snapshot's links and balance sources are released, and
// the new snapshot's are not; Close on the manager releases the one in force.
func TestReloadClosesTheOldSnapshot(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, closeConfig)
	clock := engine.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	hook := &linkHook{fresh: func() *closingLink { return &closingLink{name: "fake"} }}
	m, err := NewManager(context.Background(), cfg, Options{Clock: clock, Hooks: []ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s1 := m.Current()
	if _, err := s1.Balances.Source("beta").Read(ctx); err != nil {
		t.Fatal(err)
	}
	var swapOld *Snapshot
	m.OnSwap(func(old, _ *Snapshot) {
		// The old snapshot is closed only after the swap and its callbacks.
		if hook.given[0].closes.Load() != 0 {
			t.Error("the old snapshot was closed before OnSwap ran")
		}
		swapOld = old
	})
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := m.Current()
	if swapOld != s1 || len(hook.given) != 2 {
		t.Fatalf("swap from %p (want %p), %d links given", swapOld, s1, len(hook.given))
	}
	if n := hook.given[0].closes.Load(); n != 1 {
		t.Errorf("old link closed %d times, want 1", n)
	}
	if n := hook.given[1].closes.Load(); n != 0 {
		t.Errorf("new link closed %d times, want 0", n)
	}
	clock.Advance(2 * time.Minute) // both sources are due
	if _, err := s1.Balances.Source("beta").Read(ctx); !errors.Is(err, balance.ErrClosed) {
		t.Errorf("old source after the reload: err = %v, want ErrClosed", err)
	}
	if r, err := s2.Balances.Source("beta").Read(ctx); err != nil || *r.Remaining != 5 {
		t.Errorf("new source after the reload: %+v, %v", r, err)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := hook.given[1].closes.Load(); n != 1 {
		t.Errorf("current link closed %d times by Manager.Close, want 1", n)
	}
	if err := m.Reload(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close: err = %v, want ErrClosed", err)
	}
	m.Close()
	if n := hook.given[1].closes.Load(); n != 1 {
		t.Errorf("a second Close closed again (%d)", n)
	}
}

// A link the new snapshot still holds is not closed with the old one, even when
// the hook handed the very same value to both builds.
func TestReloadKeepsSharedLinksOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, closeConfig)
	shared := &closingLink{name: "shared"}
	hook := &linkHook{fresh: func() *closingLink { return shared }}
	m, err := NewManager(context.Background(), cfg, Options{Hooks: []ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := m.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := shared.closes.Load(); n != 0 {
		t.Errorf("shared link closed %d times across reloads, want 0", n)
	}
	if got := m.Current().Chain.Links()[0].Name(); got != "shared" {
		t.Errorf("first link = %s", got)
	}
	m.Close()
	if n := shared.closes.Load(); n != 1 {
		t.Errorf("shared link closed %d times by Manager.Close, want 1", n)
	}
}

// A build that fails releases what it was given, and the snapshot in force stays
// open.
func TestFailedBuildReleasesWhatItWasGiven(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, closeConfig)
	hook := &linkHook{fresh: func() *closingLink { return &closingLink{name: "fake"} }}
	m, err := NewManager(context.Background(), cfg, Options{Hooks: []ChainHook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	hook.fail = true
	if err := m.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "the directory is broken") {
		t.Fatalf("err = %v", err)
	}
	if n := hook.given[1].closes.Load(); n != 1 {
		t.Errorf("the failed build's link closed %d times, want 1", n)
	}
	if n := hook.given[0].closes.Load(); n != 0 {
		t.Errorf("the link in force closed %d times, want 0", n)
	}
}
