package testenv

import "testing"

func TestRequired(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("GATECTL_REQUIRE_ALL", "")
	if Required() {
		t.Fatal("Required() with neither CI nor GATECTL_REQUIRE_ALL set")
	}
	t.Setenv("GATECTL_REQUIRE_ALL", "1")
	if !Required() {
		t.Fatal("Required() false with GATECTL_REQUIRE_ALL=1")
	}
}

func TestToolFound(t *testing.T) {
	if p := Tool(t, "go", "https://go.dev/dl"); p == "" {
		t.Fatal("Tool(go) returned an empty path")
	}
}
