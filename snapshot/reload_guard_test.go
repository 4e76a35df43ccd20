package snapshot

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/config"
)

const twoProviders = `providers:
  deepseek: {kind: openai, baseURL: "https://api.deepseek.com/v1"}
  openrouter: {kind: openai, baseURL: "https://openrouter.ai/api/v1"}
gate: {defaults: {tpm: 5000, rpm: 10}}
`

// A reload that would drop the file's own providers — an empty or comments-only
// file, or one that lost its providers section — is refused and counted; the
// running snapshot stays. Keeping the section with fewer providers is an edit.
func TestReloadRefusesToDropTheConfiguredProviders(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, twoProviders)
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var failed []error
	m.OnError(func(err error) { failed = append(failed, err) })
	want := []string{"deepseek", "openrouter"}

	cases := []struct{ name, text, says string }{
		{"empty", "", "the file is empty"},
		{"whitespace", "\n  \n", "the file is empty"},
		{"comments only", "# providers:\n#   deepseek: {kind: openai}\n", "the file is empty"},
		{"null", "~\n", "the file is empty"},
		{"no providers section", "gate: {defaults: {tpm: 5000, rpm: 10}}\n", "no longer has a providers section"},
	}
	for i, c := range cases {
		writeFile(t, cfg, c.text)
		err := m.Reload(context.Background())
		if err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), c.says) || !errors.Is(err, config.ErrInvalid) {
			t.Fatalf("%s: err = %v; want ErrInvalid naming %s and saying %q", c.name, err, cfg, c.says)
		}
		if got := m.Current().Config.ProviderNames(); !reflect.DeepEqual(got, want) || m.Current().Version != 0 {
			t.Fatalf("%s: the running snapshot changed: v%d %v", c.name, m.Current().Version, got)
		}
		if r, f, last := m.Stats(); r != 0 || f != uint64(i+1) || !strings.Contains(last, c.says) {
			t.Fatalf("%s: stats %d %d %q", c.name, r, f, last)
		}
		if len(failed) != i+1 {
			t.Fatalf("%s: OnError ran %d times", c.name, len(failed))
		}
	}

	// Fewer providers, the section kept: an ordinary edit.
	writeFile(t, cfg, "providers:\n  deepseek: {kind: openai, baseURL: \"https://api.deepseek.com/v1\"}\n")
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.Current().Config.ProviderNames(); !reflect.DeepEqual(got, []string{"deepseek"}) {
		t.Fatalf("after an edit: %v", got)
	}
}

// A file that never had a providers section runs on the default's providers and
// may reload without one.
func TestReloadWithoutProvidersSectionStaysAllowed(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, "gate: {defaults: {tpm: 5000, rpm: 10}}\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	writeFile(t, cfg, "gate: {defaults: {tpm: 7000, rpm: 10}}\n")
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An empty file is refused all the same.
	writeFile(t, cfg, "")
	if err := m.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "the file is empty") {
		t.Fatalf("err = %v", err)
	}
	if m.Current().Gate.Defaults.TPM != 7000 {
		t.Fatalf("snapshot changed: %+v", m.Current().Gate.Defaults)
	}
	if _, err := NewManager(context.Background(), cfg, Options{}); err == nil || !strings.Contains(err.Error(), "the file is empty") {
		t.Fatalf("start on an empty file: err = %v", err)
	}
}
