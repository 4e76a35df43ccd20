package wasm

import (
	"strconv"
	"strings"
)

// parseFlat reads the common shape of a module's output — one JSON object whose
// values are strings without escapes, numbers, booleans or null — calling set
// for each member. It reports false for anything else (escapes, nested values,
// bad syntax, a key that differs from a wanted one only in case, which
// encoding/json would match), and the caller then decodes with encoding/json,
// whose answer is authoritative. The fast path exists because a classifier's
// whole call takes a few microseconds, and reflection-based decoding would take
// a fair share of them.
func parseFlat(b []byte, keys []string, set func(key string, str string, num float64, kind byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := flatString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		want := ""
		for _, k := range keys {
			if k == key {
				want = k
				break
			}
			if strings.EqualFold(k, key) {
				return false // encoding/json matches keys case-insensitively
			}
		}
		switch c := b[i]; {
		case c == '"':
			s, j, ok := flatString(b, i)
			if !ok {
				return false
			}
			if want != "" {
				set(want, s, 0, 's')
			}
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
				j++
			}
			f, err := strconv.ParseFloat(string(b[i:j]), 64)
			if err != nil {
				return false
			}
			if want != "" {
				set(want, "", f, 'n')
			}
			i = j
		case hasWord(b, i, "null"):
			if want != "" {
				set(want, "", 0, '0')
			}
			i += 4
		case hasWord(b, i, "true"), hasWord(b, i, "false"):
			if want != "" {
				return false // a wanted member of the wrong type: let encoding/json say so
			}
			if c == 't' {
				i += 4
			} else {
				i += 5
			}
		default:
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func hasWord(b []byte, i int, w string) bool {
	return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w
}

// flatString reads a JSON string starting at b[i] == '"' that holds no escape
// and no control character; it returns the string and the index past it.
func flatString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", 0, false // escapes and non-ASCII (which may be invalid UTF-8): the slow path
		}
	}
	return "", 0, false
}
