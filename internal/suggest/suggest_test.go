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
	} {
		if got := Near(tc.word, names); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("Near(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance = %d, want 3", d)
	}
}
