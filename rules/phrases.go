package rules

import (
	"errors"
	"fmt"
)

// The phrase matcher finds every phrase of a rule set in a body in one pass,
// whatever the number of phrases: an Aho-Corasick automaton, compiled to a dense
// DFA over the byte classes the phrases use.
//
// Matching is on the "squashed" body: ASCII letters lowercased and whitespace,
// '_' and '-' removed. So "Rate limit", "rate_limit", "RateLimit" and a line broken
// mid-word ("reach\ned") all match the phrase "rate limit" / "reached", and a
// phrase is written the way it reads. A word phrase (words()) must also start and
// end on a word boundary: a removed separator, a non-alphanumeric byte, or the ends
// of the body.

// isSquashed reports whether the byte is dropped by squashing.
func isSquashed(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v', '_', '-':
		return true
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || 'A' <= c && c <= 'Z'
}

// squashPhrase normalizes a phrase the way bodies are normalized.
func squashPhrase(p string) string {
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isSquashed(c) {
			continue
		}
		b = append(b, lowerASCII(c))
	}
	return string(b)
}

// phraseTable collects the phrases of a rule set while it compiles.
type phraseTable struct {
	ids     map[phraseKey]int
	phrases []phraseInfo
}

type phraseKey struct {
	squashed string
	word     bool
}

type phraseInfo struct {
	text     string // as written
	squashed string
	word     bool
	anchor   bool // a hint anchor: the scan records where it occurs
}

// add registers a phrase and returns its id.
func (t *phraseTable) add(p string, word bool) (int, error) {
	return t.addAnchor(p, word, false)
}

// addAnchor registers a phrase; anchor marks it as a hint anchor.
func (t *phraseTable) addAnchor(p string, word, anchor bool) (int, error) {
	sq := squashPhrase(p)
	if sq == "" {
		return 0, fmt.Errorf("phrase %q is empty once whitespace, '_' and '-' are removed", p)
	}
	if t.ids == nil {
		t.ids = map[phraseKey]int{}
	}
	k := phraseKey{sq, word}
	if id, ok := t.ids[k]; ok {
		t.phrases[id].anchor = t.phrases[id].anchor || anchor
		return id, nil
	}
	id := len(t.phrases)
	t.ids[k] = id
	t.phrases = append(t.phrases, phraseInfo{text: p, squashed: sq, word: word, anchor: anchor})
	return id, nil
}

// matcher is the compiled automaton. It is immutable and safe for concurrent use.
type matcher struct {
	phrases []phraseInfo
	// class maps a byte to its class; upper-case ASCII maps like its lower case,
	// and the bytes squashing drops map to skipClass. Class 0 is "a byte no
	// phrase uses".
	class  [256]uint16
	nclass int
	// delta[row+class] is the row of the next state, where the row of state s is
	// s*nclass (premultiplied: one add per byte in the hot loop).
	delta    []uint32
	firstOut int     // rows >= firstOut*nclass have outputs (states are numbered so)
	outStart []int32 // outputs of state s: outs[outStart[s]:outStart[s+1]]
	outs     []int32 // phrase ids
}

const (
	maxStates = 1<<16 - 1
	skipClass = 1<<16 - 1
)

var errTooManyPhrases = errors.New("rule set has too many phrases (the phrase automaton is limited to 65535 states)")

// compileMatcher builds the automaton for the phrases of t.
func compileMatcher(t *phraseTable) (*matcher, error) {
	m := &matcher{phrases: t.phrases}
	// Byte classes.
	next := uint16(1)
	for _, p := range t.phrases {
		for i := 0; i < len(p.squashed); i++ {
			c := p.squashed[i]
			if m.class[c] == 0 {
				m.class[c] = next
				next++
			}
		}
	}
	for c := 'A'; c <= 'Z'; c++ {
		m.class[c] = m.class[c+'a'-'A']
	}
	for c := 0; c < 256; c++ {
		if isSquashed(byte(c)) {
			m.class[c] = skipClass
		}
	}
	m.nclass = int(next)

	// Trie.
	type node struct {
		next map[uint16]int
		fail int
		out  []int32
	}
	nodes := []node{{next: map[uint16]int{}}}
	for id, p := range t.phrases {
		s := 0
		for i := 0; i < len(p.squashed); i++ {
			cl := m.class[p.squashed[i]]
			n, ok := nodes[s].next[cl]
			if !ok {
				nodes = append(nodes, node{next: map[uint16]int{}})
				n = len(nodes) - 1
				nodes[s].next[cl] = n
			}
			s = n
		}
		nodes[s].out = append(nodes[s].out, int32(id))
	}
	if len(nodes) > maxStates {
		return nil, errTooManyPhrases
	}

	// Breadth-first: failure links, merged outputs and the dense transitions
	// (in trie numbering).
	nc := m.nclass
	delta := make([]int, len(nodes)*nc)
	queue := make([]int, 0, len(nodes))
	for cl := 0; cl < nc; cl++ {
		if n, ok := nodes[0].next[uint16(cl)]; ok {
			nodes[n].fail = 0
			delta[cl] = n
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		nodes[s].out = append(nodes[s].out, nodes[nodes[s].fail].out...)
		for cl := 0; cl < nc; cl++ {
			if n, ok := nodes[s].next[uint16(cl)]; ok {
				nodes[n].fail = delta[nodes[s].fail*nc+cl]
				delta[s*nc+cl] = n
				queue = append(queue, n)
			} else {
				delta[s*nc+cl] = delta[nodes[s].fail*nc+cl]
			}
		}
	}

	// Renumber: states without outputs first (the root stays 0), so that the hot
	// loop tests for outputs with one comparison.
	num := make([]int, len(nodes))
	k := 0
	for s := range nodes {
		if len(nodes[s].out) == 0 {
			num[s] = k
			k++
		}
	}
	m.firstOut = k
	for s := range nodes {
		if len(nodes[s].out) > 0 {
			num[s] = k
			k++
		}
	}
	m.delta = make([]uint32, len(delta))
	for s := range nodes {
		for cl := 0; cl < nc; cl++ {
			m.delta[num[s]*nc+cl] = uint32(num[delta[s*nc+cl]] * nc)
		}
	}
	byNum := make([]int, len(nodes))
	for s, n := range num {
		byNum[n] = s
	}
	m.outStart = make([]int32, len(nodes)+1)
	for n, s := range byNum {
		m.outStart[n] = int32(len(m.outs))
		m.outs = append(m.outs, nodes[s].out...)
	}
	m.outStart[len(nodes)] = int32(len(m.outs))
	return m, nil
}

// scanBuffers are the per-call buffers of a scan, reused through the eval pool.
type scanBuffers struct {
	matched []uint64 // bitset of phrase ids found
	pending []wordHit
	anchors []wordHit // hint anchors, in order of position (at most maxCands)
}

type wordHit struct {
	id  int32
	end int // index in the body of the match's last byte
}

// scan records which phrases occur in body (lowercased and squashed on the fly).
func (m *matcher) scan(body string, b *scanBuffers) {
	words := 1 + len(m.phrases)/64
	if cap(b.matched) < words {
		b.matched = make([]uint64, words)
	}
	b.matched = b.matched[:words]
	clear(b.matched)
	b.pending = b.pending[:0]
	b.anchors = b.anchors[:0]

	var (
		row      uint32
		delta    = m.delta
		class    = &m.class
		firstOut = uint32(m.firstOut * m.nclass)
		matched  = b.matched
	)
	for i := 0; i < len(body); i++ {
		cl := class[body[i]]
		if cl == skipClass {
			continue
		}
		row = delta[row+uint32(cl)]
		if row < firstOut {
			continue
		}
		s := int(row) / m.nclass
		for _, id := range m.outs[m.outStart[s]:m.outStart[s+1]] {
			if m.phrases[id].anchor && len(b.anchors) < maxCands {
				b.anchors = append(b.anchors, wordHit{id: id, end: i})
			}
			if m.phrases[id].word {
				b.pending = append(b.pending, wordHit{id: id, end: i})
				continue
			}
			matched[id>>6] |= 1 << (id & 63)
		}
	}
	for _, h := range b.pending {
		if matched[h.id>>6]&(1<<(h.id&63)) != 0 {
			continue
		}
		if wordBounded(body, h.end, len(m.phrases[h.id].squashed)) {
			matched[h.id>>6] |= 1 << (h.id & 63)
		}
	}
}

// wordBounded reports whether the match of n squashed bytes that ends at
// body[end] starts and ends on a word boundary: a dropped separator, a byte that
// is not an ASCII letter or digit, or an end of the body.
func wordBounded(body string, end, n int) bool {
	start := rawStart(body, end, n)
	before := start == 0 || !isAlnum(body[start-1]) || !isAlnum(body[start])
	after := end+1 >= len(body) || !isAlnum(body[end+1]) || !isAlnum(body[end])
	return before && after
}

// rawStart finds where in body a match of n squashed bytes that ends at
// body[end] starts.
func rawStart(body string, end, n int) int {
	start := end
	for left := n; start >= 0; start-- {
		if !isSquashed(body[start]) {
			left--
			if left == 0 {
				break
			}
		}
	}
	return max(start, 0)
}

func (b *scanBuffers) has(id int32) bool {
	return b.matched[id>>6]&(1<<(id&63)) != 0
}
