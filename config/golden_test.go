package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expectations of testdata/config/*.yaml")

// goldenMarker separates a case's config from what loading it must report: one
// "error: …" or "warning: …" line each, nothing when it loads cleanly. The file
// name in the messages is always gatectl.yaml.
const goldenMarker = "#### want\n"

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("../testdata/config/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			src, want, ok := strings.Cut(string(raw), goldenMarker)
			if !ok {
				t.Fatalf("no %q line", strings.TrimSpace(goldenMarker))
			}
			got := report(src)
			if *update {
				if err := os.WriteFile(file, []byte(src+goldenMarker+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// report loads src and lists what it reports, a line each.
func report(src string) string {
	var b strings.Builder
	c, err := Parse([]byte(src), "gatectl.yaml")
	if err != nil {
		for _, e := range err.(Errors) {
			b.WriteString("error: " + e.Error() + "\n")
		}
		return b.String()
	}
	for _, w := range c.Warnings {
		b.WriteString("warning: " + w.Error() + "\n")
	}
	return b.String()
}
