package suggest

import (
	"slices"
	"testing"
)

func TestNear(t *testing.T) {
	names := []string{"window", "maxWait", "apiKeyEnv", "pools", "longTermDelay", "status", "stats"}
	for _, tc := range []struct {
		word string
		want []string
	}{
		{"maxwait", []string{"maxWait"}},  // case
		{"apiKey", []string{"apiKeyEnv"}}, // a prefix
		{"pool", []string{"pools"}},       // one letter off
		{"longTermDelayMs", []string{"longTermDelay"}},
		{"stat", []string{"status", "stats"}}, // prefixes count as one edit: declared order
		{"zebra", nil},
		{"wnidow", []string{"window"}},          // two keys swapped: one edit
		{"stauts", []string{"status", "stats"}}, // a swap, and one letter more
	} {
		if got := Near(tc.word, names); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("Near(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{{"kitten", "sitting", 3}, {"rmp", "rpm", 1}, {"ca", "abc", 3}, {"", "abc", 3}, {"abc", "abc", 0}} {
		if d := Distance(tc.a, tc.b); d != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.want)
		}
	}
}
