package snapshot

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gatectl/gatectl/config"
)

// An overlay shapes every snapshot the manager builds: Rebuild applies it to the
// file's config as last loaded, Reload to the file read again; File keeps the
// file's own config; a failing overlay keeps the running snapshot.
func TestOverlayAndRebuild(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, twoProviders)
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	swaps := 0
	m.OnSwap(func(old, next *Snapshot) { swaps++ })
	if m.Current().File != m.Current().Config {
		t.Fatal("without an overlay File is Config")
	}
	rounds := 7
	var fail error
	m.SetOverlay(func(file *config.Config) (*config.Config, error) {
		if fail != nil {
			return nil, fail
		}
		c := *file
		c.Retry.Rounds = rounds
		return &c, nil
	})
	if err := m.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := m.Current()
	if s.Retry.Rounds != 7 || s.File.Retry.Rounds != 8 || s.Version != 1 || swaps != 1 {
		t.Fatalf("rebuild: rounds %d, file %d, v%d, %d swaps", s.Retry.Rounds, s.File.Retry.Rounds, s.Version, swaps)
	}
	// a reload reads the file and applies the overlay again
	writeFile(t, cfg, twoProviders+"retry: {rounds: 4}\n")
	rounds = 2
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := m.Current(); s.Retry.Rounds != 2 || s.File.Retry.Rounds != 4 || s.File == s.Config {
		t.Fatalf("reload: rounds %d, file %d", s.Retry.Rounds, s.File.Retry.Rounds)
	}
	fail = errors.New("no")
	if err := m.Rebuild(context.Background()); !errors.Is(err, fail) || m.Current().Retry.Rounds != 2 || swaps != 2 {
		t.Fatalf("a failing overlay: %v, rounds %d, %d swaps", err, m.Current().Retry.Rounds, swaps)
	}
}
