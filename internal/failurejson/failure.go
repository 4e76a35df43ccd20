package failurejson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gatectl/gatectl/engine"
)

// FailureKeys are the keys of a failure object, the JSON fields of engine.Failure.
var FailureKeys = []string{"status", "headers", "body", "provider", "model", "errorKind", "sinceCapacityMs"}

// Status bounds: a valid HTTP status is 100 to 599; 0 means no HTTP answer.
const (
	minStatus = 100
	maxStatus = 599
)

// Decode reads one failure object in its JSON form. See the package doc for
// what it accepts; a key that is not a failure's is refused, and so is trailing
// data after the object.
func Decode(data []byte) (*engine.Failure, error) {
	m, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	return FromValue(m)
}

// DecodeRecord reads a record that holds a failure among other keys: the
// failure's keys are read as Decode reads them, the others are skipped. It is
// the input of `gatectl classify`, whose contract is that captured records (the
// corpus's lines (testdata/corpus) carry expected_class, source, note) classify as they
// are. Golden cases use the strict form.
func DecodeRecord(data []byte) (*engine.Failure, error) {
	m, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	for k := range m {
		if !slices.Contains(FailureKeys, k) {
			delete(m, k)
		}
	}
	return FromValue(m)
}

// decodeObject reads one JSON object; numbers stay json.Number, and body stays
// json.RawMessage, so a body sent as an object keeps its members' order.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("want a JSON object with %s (got a JSON %s)", strings.Join(FailureKeys, ", "), te.Value)
		}
		return nil, err
	}
	if top == nil {
		return nil, fmt.Errorf("want a JSON object with %s (got null)", strings.Join(FailureKeys, ", "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the failure object")
	}
	m := make(map[string]any, len(top))
	for k, raw := range top {
		if k == "body" {
			m[k] = raw
			continue
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		m[k] = v
	}
	return m, nil
}

// FromValue reads a failure already decoded from YAML or JSON: a
// map[string]any (or map[any]any) whose values are what those decoders give —
// numbers as int, float64 or json.Number, nested mappings and lists — and, for
// body, possibly a json.RawMessage. It does not change v.
func FromValue(v any) (*engine.Failure, error) {
	m, ok := Normalize(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a mapping with %s (got %s)", strings.Join(FailureKeys, ", "), kindOf(v))
	}
	f := &engine.Failure{}
	for _, k := range sortedKeys(m) {
		val := m[k]
		var err error
		switch k {
		case "status":
			f.Status, err = status(val)
		case "headers":
			if f.Headers, err = headers(val); err != nil {
				return nil, err // it names the header
			}
		case "body":
			f.Body, err = body(val)
		case "provider":
			f.Provider, err = str(val)
		case "model":
			f.Model, err = str(val)
		case "errorKind":
			f.ErrorKind, err = str(val)
		case "sinceCapacityMs":
			if val != nil {
				n, ok := number(val)
				if !ok || n < 0 || n > math.MaxInt64/2 {
					return nil, fmt.Errorf("sinceCapacityMs: want a number of milliseconds >= 0, or null (got %s)", show(val))
				}
				ms := int64(n)
				f.SinceCapacityMs = &ms
			}
		default:
			return nil, fmt.Errorf("unknown key %q (valid: %s)", k, strings.Join(FailureKeys, ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return f, nil
}

func status(v any) (int, error) {
	if v == nil {
		return 0, nil
	}
	n, ok := number(v)
	if ok && n == math.Trunc(n) && (n == 0 || n >= minStatus && n <= maxStatus) {
		return int(n), nil
	}
	return 0, fmt.Errorf("want an HTTP status (%d to %d), or 0 or null for no HTTP answer (got %s)", minStatus, maxStatus, show(v))
}

func headers(v any) (map[string]string, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("headers: want a mapping of header name to value (got %s)", kindOf(v))
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		switch x := m[k].(type) {
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				s, ok := scalar(e)
				if !ok {
					return nil, fmt.Errorf("headers[%q][%d]: want a string or a number (got %s)", k, i, kindOf(e))
				}
				parts[i] = s
			}
			out[k] = strings.Join(parts, ", ") // HTTP's join of repeated values
		default:
			s, ok := scalar(x)
			if !ok {
				return nil, fmt.Errorf("headers[%q]: want a string, a number or a list of them (got %s)", k, kindOf(x))
			}
			out[k] = s
		}
	}
	return out, nil
}

func body(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case json.RawMessage:
		t := bytes.TrimSpace(x)
		if string(t) == "null" {
			return "", nil
		}
		var s string
		if json.Unmarshal(t, &s) == nil {
			return s, nil
		}
		var b bytes.Buffer
		if err := json.Compact(&b, t); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(j), nil
}

func str(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	}
	return "", fmt.Errorf("want a string (got %s)", kindOf(v))
}

// number reads a number as the decoders give it, or a numeric string. NaN and
// infinities are refused.
func number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int8:
		f = float64(x)
	case int16:
		f = float64(x)
	case int32:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint:
		f = float64(x)
	case uint8:
		f = float64(x)
	case uint16:
		f = float64(x)
	case uint32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float32:
		f = float64(x)
	case float64:
		f = x
	case json.Number:
		n, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, false
		}
		f = n
	case string:
		n, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false
		}
		f = n
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// scalar renders a header value: strings as they are, numbers as written,
// booleans as true/false, null as "".
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, true
	case json.Number:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	}
	return "", false
}

// kindOf names a decoded value's JSON kind for errors.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any, map[any]any:
		return "a mapping"
	case []any:
		return "a list"
	case json.RawMessage:
		return "raw JSON"
	}
	if _, ok := number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// show renders a bad value for an error: strings quoted, others as they print.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case nil:
		return "null"
	case map[string]any, map[any]any, []any:
		return kindOf(v)
	}
	return fmt.Sprint(v)
}

// Normalize turns the map[any]any an older YAML decoder may produce into
// map[string]any, recursively, without changing its argument. It is exported for
// the other readers of YAML-or-JSON values (wasm plugin configs).
func Normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = Normalize(e)
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = Normalize(e)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Normalize(e)
		}
		return out
	}
	return v
}

// sortedKeys gives a mapping's keys in order, so the first error reported is
// always the same.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
