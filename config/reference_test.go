package config

import (
	"os"
	"testing"
)

// TestReference keeps docs/config.md in step with the section tables: run
// `go test ./config -update` after changing a table.
func TestReference(t *testing.T) {
	const file = "../docs/config.md"
	got := reference()
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./config -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s is out of date with the section tables: run go test ./config -update", file)
	}
}
