package balance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/gatectl/gatectl/engine"
)

// MaxOutput bounds a script's stdout and an HTTP response body, in bytes. A reading
// is a few hundred bytes; anything past this is not one.
const MaxOutput = 1 << 20

// ParseReading decodes the balance script contract: data must hold exactly one JSON
// object (surrounding whitespace allowed),
//
//	{"remaining": 2.94,
//	 "windows": [{"name": "weekly", "remaining": 2.94, "capacity": 35}],
//	 "resetsAt": "2026-10-01T00:00:00Z",
//	 "error": "…"}
//
// where every member is optional and unknown members are ignored. `remaining` must
// be a JSON number, `resetsAt` and `error` strings (null counts as absent); otherwise
// the whole output is rejected with ErrOutput. Window entries are judged one by one:
// an entry that is not an object, whose `remaining` is not a number, whose `name` is
// not a string or whose `capacity` is not a positive number is dropped and the rest
// of the reading kept (a `windows` that is not an array drops every entry). A window
// without a name is kept with Name "".
//
// The error never quotes data. TakenAt is left zero: the caller stamps it.
func ParseReading(data []byte) (engine.Reading, error) {
	r, _, err := parseReading(data)
	return r, err
}

// parseReading is ParseReading that also counts the dropped window entries.
func parseReading(data []byte) (engine.Reading, int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top any
	if err := dec.Decode(&top); err != nil {
		// The decoder's message may quote the offending input: say only where.
		if se, ok := err.(*json.SyntaxError); ok {
			return engine.Reading{}, 0, fmt.Errorf("%w: invalid JSON at byte %d of %d", ErrOutput, se.Offset, len(data))
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return engine.Reading{}, 0, fmt.Errorf("%w: empty output", ErrOutput)
		}
		return engine.Reading{}, 0, fmt.Errorf("%w: invalid JSON (%d bytes)", ErrOutput, len(data))
	}
	if _, err := dec.Token(); err != io.EOF {
		return engine.Reading{}, 0, fmt.Errorf("%w: more than one JSON value", ErrOutput)
	}
	m, ok := top.(map[string]any)
	if !ok {
		return engine.Reading{}, 0, fmt.Errorf("%w: a JSON %s, not an object", ErrOutput, jsonKind(top))
	}
	var r engine.Reading
	if v := m["remaining"]; v != nil {
		f, ok := number(v, false)
		if !ok {
			return engine.Reading{}, 0, fmt.Errorf("%w: remaining is a %s, not a number", ErrOutput, jsonKind(v))
		}
		r.Remaining = &f
	}
	for _, name := range []string{"resetsAt", "error"} {
		v := m[name]
		if v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return engine.Reading{}, 0, fmt.Errorf("%w: %s is a %s, not a string", ErrOutput, name, jsonKind(v))
		}
		if name == "resetsAt" {
			r.ResetsAt = s
		} else {
			r.Error = s
		}
	}
	var dropped int
	r.Windows, dropped = windows(m["windows"], false)
	return r, dropped, nil
}

// windows turns a decoded `windows` value into window readings, dropping malformed
// entries (see ParseReading) and returning how many it dropped. lenient also accepts
// numbers written as strings ("88.00"), which HTTP endpoints often send.
func windows(v any, lenient bool) ([]engine.WindowReading, int) {
	if v == nil {
		return nil, 0
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, 1
	}
	var out []engine.WindowReading
	dropped := 0
	for i := 0; i < rv.Len(); i++ {
		w, ok := window(rv.Index(i).Interface(), lenient)
		if !ok {
			dropped++
			continue
		}
		out = append(out, w)
	}
	return out, dropped
}

// window validates one entry of `windows`.
func window(v any, lenient bool) (engine.WindowReading, bool) {
	m, ok := stringMap(v)
	if !ok {
		return engine.WindowReading{}, false
	}
	var w engine.WindowReading
	if n := m["name"]; n != nil {
		s, ok := n.(string)
		if !ok {
			return engine.WindowReading{}, false
		}
		w.Name = s
	}
	rem, ok := number(m["remaining"], lenient)
	if !ok {
		return engine.WindowReading{}, false
	}
	w.Remaining = rem
	if c := m["capacity"]; c != nil {
		f, ok := number(c, lenient)
		if !ok || f <= 0 {
			return engine.WindowReading{}, false
		}
		w.Capacity = &f
	}
	return w, true
}

// stringMap accepts any map keyed by strings (JSON objects decode to
// map[string]any; expr map literals too, but other Go maps may come from a custom
// environment).
func stringMap(v any) (map[string]any, bool) {
	if m, ok := v.(map[string]any); ok {
		return m, true
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	m := make(map[string]any, rv.Len())
	it := rv.MapRange()
	for it.Next() {
		m[it.Key().String()] = it.Value().Interface()
	}
	return m, true
}

// number converts a decoded JSON number (or, when lenient, any Go number or a
// numeric string) to a finite float64.
func number(v any, lenient bool) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	case float64:
		f = x
	case string:
		if !lenient {
			return 0, false
		}
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return 0, false
		}
	default:
		rv := reflect.ValueOf(v)
		if !rv.IsValid() {
			return 0, false
		}
		switch {
		case rv.CanInt():
			f = float64(rv.Int())
		case rv.CanUint():
			f = float64(rv.Uint())
		case rv.CanFloat():
			f = rv.Float()
		default:
			return 0, false
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// jsonKindArticle is jsonKind with its article: "an array", "a string".
func jsonKindArticle(v any) string {
	k := jsonKind(v)
	if strings.ContainsRune("aeiou", rune(k[0])) {
		return "an " + k
	}
	return "a " + k
}

// jsonKind names the JSON type of a decoded value, for messages that must not
// quote the value itself.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64, int, int64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
