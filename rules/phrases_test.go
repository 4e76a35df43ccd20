package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestMatcher(t *testing.T) {
	var tbl phraseTable
	add := func(p string, word bool) int32 {
		id, err := tbl.add(p, word)
		if err != nil {
			t.Fatal(err)
		}
		return int32(id)
	}
	phrases := map[string]int32{
		"rate limit":         add("rate limit", false),
		"insufficient_quota": add("insufficient_quota", false),
		"余额不足":               add("余额不足", false),
		"tpd":                add("tpd", true),
		"per day":            add("per day", false),
		"a":                  add("a", false),
		"quota":              add("quota", false),
		"quota exceeded":     add("quota exceeded", false),
	}
	if id := add("Rate-Limit", false); id != phrases["rate limit"] {
		t.Errorf("equal squashed phrases got two ids")
	}
	m, err := compileMatcher(&tbl)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		body string
		want []string
	}{
		{"Rate limit reached", []string{"rate limit", "a"}},
		{"RATE_LIMIT_EXCEEDED", []string{"rate limit", "a"}},
		{"ratelimit", []string{"rate limit", "a"}},
		{"rate\n     limit", []string{"rate limit", "a"}},
		{"insuffi\ncient-quota", []string{"insufficient_quota", "quota", "a"}},
		{"您的账户余额不足", []string{"余额不足"}},
		{"余额\n不足", []string{"余额不足"}},
		{"organization TPD rate limit", []string{"tpd", "rate limit", "a"}},
		{"(TPD)", []string{"tpd"}},
		{"tpd", []string{"tpd"}},
		{"T\nPD", []string{"tpd"}},
		{"outputdata", []string{"a"}},
		{"stpd", nil},
		{"tpds", nil},
		{"per-day", []string{"per day", "a"}},
		{"Quota Exceeded", []string{"quota", "quota exceeded", "a"}},
		{"", nil},
		{"xyz 123 !!", nil},
	}
	for _, tc := range tests {
		var b scanBuffers
		m.scan(tc.body, &b)
		var got []string
		for name, id := range phrases {
			if b.has(id) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("scan(%q) = %v, want %v", tc.body, got, want)
		}
	}
}

// TestMatcherAgainstNaive checks the automaton against strings.Contains on the
// squashed body, over many phrases and bodies.
func TestMatcherAgainstNaive(t *testing.T) {
	var tbl phraseTable
	words := []string{"rate", "limit", "ratelimit", "limited", "ted", "e", "quota", "uota", "欠费", "费", "额度", "度", "over", "overloaded", "loaded", "aaa", "aa", "a"}
	for _, w := range words {
		if _, err := tbl.add(w, false); err != nil {
			t.Fatal(err)
		}
	}
	m, err := compileMatcher(&tbl)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{"", "a", "aaaa", "Over Loaded", "rate_limited quota", "欠 费 额度", "xuotaquota", "limitedlimit", "ovER-loAded!", strings.Repeat("ab", 50)}
	for _, body := range bodies {
		var b scanBuffers
		m.scan(body, &b)
		sq := squashPhrase(body)
		for id, p := range tbl.phrases {
			if want := strings.Contains(sq, p.squashed); b.has(int32(id)) != want {
				t.Errorf("scan(%q) has %q = %v, want %v", body, p.text, b.has(int32(id)), want)
			}
		}
	}
}

func TestMatcherAnchorsInOrder(t *testing.T) {
	var tbl phraseTable
	for _, a := range hintAnchors {
		tbl.addAnchor(a, false, true)
	}
	m, err := compileMatcher(&tbl)
	if err != nil {
		t.Fatal(err)
	}
	body := "Retry after 2s, or try again in 3s; X-Rate-Limit-Reset: 4; 5秒后"
	var b scanBuffers
	m.scan(body, &b)
	var got []string
	for _, h := range b.anchors {
		p := tbl.phrases[h.id].squashed
		got = append(got, fmt.Sprintf("%s@%d", p, rawStart(body, h.end, len(p))))
	}
	want := []string{"retry@0", "after@6", "again@23", "xratelimitreset@36", "reset@49", "后@63"}
	if !slices.Equal(got, want) {
		t.Errorf("anchors = %v, want %v", got, want)
	}
}

func TestPhraseErrors(t *testing.T) {
	var tbl phraseTable
	if _, err := tbl.add(" _- ", false); err == nil {
		t.Error("an all-separator phrase was accepted")
	}
}
