// Package suggest finds the names a mistyped word may have meant: "did you
// mean …?" for commands and config keys.
package suggest

import "sort"

// Near returns the names within a small edit distance of word (a third of
// the name's length, at least 1), or that word is a prefix of (two bytes or
// more), nearest first, in the order given among equals.
func Near(word string, names []string) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, name := range names {
		d := Distance(word, name)
		if len(word) >= 2 && len(word) < len(name) && name[:len(word)] == word {
			d = min(d, 1)
		}
		if d <= max(1, len(name)/3) {
			cs = append(cs, cand{name, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

// Distance is the edit distance of a and b with adjacent transpositions
// (optimal string alignment; bytes, names are ASCII): "rmp" is one edit from
// "rpm", as a typist's swapped keys are, where plain Levenshtein counts two.
func Distance(a, b string) int {
	// Three rows: the one before the previous holds the transposition's source.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
