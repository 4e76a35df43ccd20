package wasm

import (
	"strconv"
	"strings"
)

// parseFlat reads the common shape of a module's output — one JSON object whose
// values are strings without escapes, numbers, booleans or null — calling set
// for each member. It reports false for anything else (escapes, nested values,
// bad syntax, a number JSON forbids such as 01 or 1., a key that differs from a
// wanted one only in case, which encoding/json would match), and the caller
// then decodes with encoding/json, whose answer is authoritative. The fast path
// exists because a classifier's whole call takes a few microseconds, and
// reflection-based decoding would take a fair share of them.
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
			j, ok := scanNumber(b, i)
			if !ok {
				return false // not a JSON number: 01, 1., .5, +1, 1e
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

// scanNumber reads a JSON number starting at b[i] and returns the index past
// it. JSON's grammar is stricter than strconv.ParseFloat's: no leading zeros
// ("01"), no bare dot ("1.", "1.e5"), no sign but a leading minus.
//
//	number = [ "-" ] ( "0" / 1-9 *DIGIT ) [ "." 1*DIGIT ] [ ( "e" / "E" ) [ "+" / "-" ] 1*DIGIT ]
func scanNumber(b []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return 0, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	// What follows must end the number: a digit here is a leading-zero case
	// ("01"), anything else is checked by the caller.
	if i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '+' || b[i] == '-') {
		return 0, false
	}
	return i, true
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
