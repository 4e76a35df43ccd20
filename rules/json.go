package rules

import (
	"slices"
	"strconv"
	"strings"
)

// Bodies rarely arrive as clean JSON. An SDK prints `Error code: 429 - {...}`, a
// Python client prints a dict repr (single quotes, True, None), a terminal wraps a
// string across lines, a log truncates it. parseLoose reads all of those: it starts
// at the first '{' or '[' that opens a non-empty value, accepts single- or
// double-quoted strings with raw control characters in them, bare identifier keys,
// True/False/None as well as true/false/null, trailing commas, and closes whatever
// is still open at the end of the input. Objects become map[string]any, arrays
// []any, numbers float64.

// maxJSONDepth bounds nesting so that a hostile body cannot exhaust the stack.
const maxJSONDepth = 64

// parseLoose returns the first JSON-ish value in s, or nil.
func parseLoose(s string) any {
	for tries := 0; tries < 8; tries++ {
		i := strings.IndexAny(s, "{[")
		if i < 0 {
			return nil
		}
		p := looseParser{s: s, i: i}
		v := p.value(0)
		switch x := v.(type) {
		case map[string]any:
			if len(x) > 0 {
				return x
			}
		case []any:
			if len(x) > 0 {
				return x
			}
		}
		s = s[i+1:]
	}
	return nil
}

type looseParser struct {
	s string
	i int
}

func (p *looseParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			p.i++
		default:
			return
		}
	}
}

func (p *looseParser) value(depth int) any {
	p.ws()
	if p.i >= len(p.s) || depth > maxJSONDepth {
		return nil
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"' || c == '\'':
		return p.str()
	case c == '-' || c == '+' || c == '.' || '0' <= c && c <= '9':
		return p.number()
	default:
		w := p.ident()
		switch w {
		case "true", "True":
			return true
		case "false", "False":
			return false
		case "null", "None", "nil", "undefined", "":
			if w == "" && p.i < len(p.s) {
				p.i++ // skip a byte we cannot read
			}
			return nil
		}
		return w
	}
}

func (p *looseParser) object(depth int) map[string]any {
	p.i++ // '{'
	m := map[string]any{}
	for {
		p.ws()
		if p.i >= len(p.s) {
			return m
		}
		switch p.s[p.i] {
		case '}':
			p.i++
			return m
		case ',':
			p.i++
			continue
		}
		var key string
		switch p.s[p.i] {
		case '"', '\'':
			key = p.str()
		default:
			key = p.ident()
			if key == "" { // not a key: give up on this object
				p.i = len(p.s)
				return m
			}
		}
		p.ws()
		if p.i < len(p.s) && (p.s[p.i] == ':' || p.s[p.i] == '=') {
			p.i++
		} else {
			m[key] = nil
			continue
		}
		v := p.value(depth + 1)
		if _, dup := m[key]; !dup {
			m[key] = v
		}
	}
}

func (p *looseParser) array(depth int) []any {
	p.i++ // '['
	a := []any{}
	for {
		p.ws()
		if p.i >= len(p.s) {
			return a
		}
		switch p.s[p.i] {
		case ']':
			p.i++
			return a
		case ',':
			p.i++
			continue
		case '}': // mismatched: treat as the end of the array
			return a
		}
		start := p.i
		a = append(a, p.value(depth+1))
		if p.i == start {
			p.i++
		}
	}
}

// str reads a quoted string; the opening quote decides the closing one.
func (p *looseParser) str() string {
	q := p.s[p.i]
	p.i++
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == q {
			s := p.s[start:p.i]
			p.i++
			return s
		}
		if c == '\\' {
			break
		}
		p.i++
	}
	var b strings.Builder
	b.WriteString(p.s[start:p.i])
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String()
		case c == '\\' && p.i+1 < len(p.s):
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'u':
				if p.i+4 <= len(p.s) {
					if r, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32); err == nil {
						b.WriteRune(rune(r))
						p.i += 4
						continue
					}
				}
				b.WriteString(`\u`)
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return b.String()
}

func (p *looseParser) number() any {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if '0' <= c && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E' {
			p.i++
			continue
		}
		break
	}
	tok := p.s[start:p.i]
	if f, err := strconv.ParseFloat(tok, 64); err == nil {
		return f
	}
	return tok
}

func (p *looseParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if isAlnum(c) || c == '_' || c == '$' || c == '@' || c == '-' || c == '.' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// lookup follows a path into a parsed value. A path is keys separated by dots;
// a segment may be an array index ("details.0", or "details[0]"), "*" (any key or
// element: the first that leads somewhere), and a path that starts with ".." finds
// its first key anywhere in the tree ("..reason"). Keys match case-sensitively
// first, then case-insensitively.
func lookup(root any, path string) (any, bool) {
	path = strings.ReplaceAll(strings.ReplaceAll(path, "[", "."), "]", "")
	if strings.HasPrefix(path, "..") {
		rest := strings.TrimLeft(path, ".")
		first, tail, _ := strings.Cut(rest, ".")
		return deepFind(root, first, tail, 0)
	}
	path = strings.Trim(path, ".")
	if path == "" {
		return root, root != nil
	}
	return walk(root, strings.Split(path, "."))
}

func walk(v any, segs []string) (any, bool) {
	for i, seg := range segs {
		if seg == "" {
			continue
		}
		if seg == "*" {
			switch x := v.(type) {
			case map[string]any:
				for _, k := range sortedKeys(x) {
					if r, ok := walk(x[k], segs[i+1:]); ok {
						return r, true
					}
				}
			case []any:
				for _, e := range x {
					if r, ok := walk(e, segs[i+1:]); ok {
						return r, true
					}
				}
			}
			return nil, false
		}
		next, ok := child(v, seg)
		if !ok {
			return nil, false
		}
		v = next
	}
	return v, true
}

func child(v any, seg string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		if c, ok := x[seg]; ok {
			return c, true
		}
		for k, c := range x {
			if strings.EqualFold(k, seg) {
				return c, true
			}
		}
	case []any:
		n, err := strconv.Atoi(seg)
		if err == nil && n < 0 {
			n += len(x)
		}
		if err == nil && n >= 0 && n < len(x) {
			return x[n], true
		}
	}
	return nil, false
}

// deepFind searches depth-first (keys in sorted order) for key, then walks tail.
func deepFind(v any, key, tail string, depth int) (any, bool) {
	if depth > maxJSONDepth {
		return nil, false
	}
	switch x := v.(type) {
	case map[string]any:
		if c, ok := child(x, key); ok {
			if tail == "" {
				return c, true
			}
			if r, ok := walk(c, strings.Split(tail, ".")); ok {
				return r, true
			}
		}
		for _, k := range sortedKeys(x) {
			if r, ok := deepFind(x[k], key, tail, depth+1); ok {
				return r, true
			}
		}
	case []any:
		for _, e := range x {
			if r, ok := deepFind(e, key, tail, depth+1); ok {
				return r, true
			}
		}
	}
	return nil, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic lookups
	return keys
}

// scalarString renders a looked-up value as a string ("" for nil, objects, arrays).
func scalarString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}
