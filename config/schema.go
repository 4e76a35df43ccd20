package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// A schema is one section of the config as a table: one field per key, in the
// order the docs present them. Everything about a key comes from its entry: the
// list of valid keys (unknown-key errors name them), how its value is decoded,
// the bounds it is checked against (with file, line and path in the error), where
// it is stored, and its line in the reference (docs/config.md, see Reference).
// Adding a key is adding one entry.
//
// T is the struct the section decodes into. defaults returns a T holding every
// default: for the gate, retry and quota sections those are the engine's own
// (gate.DefaultConfig, retry.DefaultPolicy, pool.DefaultSettings).
type schema[T any] struct {
	path     string // config path as the reference shows it: "gate", "pools.<name>"
	doc      string // one line for the reference
	defaults func() T
	fields   []setting[T]
	// check runs after every present key was decoded, when the section is a
	// mapping: the rules that span keys.
	check func(v *validator, s section, t *T)
}

// A setting is one key of a schema.
type setting[T any] struct {
	key    string
	kind   string // what the value is, for the reference: "duration", "integer", …
	bounds string // what it must be, for the reference: "> 0", "(0, 1]", "one of: a, b"
	doc    string
	// show formats the field of t for the reference's default column; nil shows none.
	show func(t *T) string
	// decode checks the value n at path and stores it into t; on any problem it
	// reports it and leaves t as it was.
	decode func(v *validator, n *yaml.Node, path string, t *T)
	// encode returns the field of t as a JSON-ready value in the file's own form
	// (a duration as "2s", a nested section as an object), for the runtime
	// settings API; omit reports a value the file could not have written (a zero
	// meaning "not set"), left out of the encoding. nil encode: never shown.
	encode func(t *T) (v any, omit bool)
	// required: an absent key is an error, "is required" + reqHint.
	required bool
	reqHint  string
}

// encode returns t as an object of the section's keys (see setting.encode).
func (sc *schema[T]) encode(t *T) map[string]any {
	out := make(map[string]any, len(sc.fields))
	for _, f := range sc.fields {
		if f.encode == nil {
			continue
		}
		if v, omit := f.encode(t); !omit {
			out[f.key] = v
		}
	}
	return out
}

// keys returns the section's valid keys, in table order.
func (sc *schema[T]) keys() []string {
	ks := make([]string, len(sc.fields))
	for i, f := range sc.fields {
		ks[i] = f.key
	}
	return ks
}

// decode reads mapping n at path into t: unknown keys are errors naming the valid
// ones, each present key is decoded by its entry, a required key left out is an
// error at the mapping, and check runs last. It returns the decoded section.
func (sc *schema[T]) decode(v *validator, n *yaml.Node, path string, t *T) section {
	s := v.object(n, path, sc.keys()...)
	for _, f := range sc.fields {
		if x := s.val(f.key); x != nil {
			f.decode(v, x, s.sub(f.key), t)
		} else if f.required && s.node != nil {
			v.errorf(s.node, s.sub(f.key), "is required%s", f.reqHint)
		}
	}
	if sc.check != nil && s.node != nil {
		sc.check(v, s, t)
	}
	return s
}

// req marks f required; hint follows "is required" in the error.
func (f setting[T]) req(hint string) setting[T] {
	f.required = true
	if hint != "" {
		f.reqHint = hint
	}
	return f
}

// rng bounds a number. The zero rng accepts every value.
type rng struct {
	lo, hi         float64
	hasLo, hasHi   bool
	loOpen, hiOpen bool   // the bound itself is excluded
	note           string // said inside the parentheses, before the value
	tail           string // said after the parentheses
}

func above(x float64) rng   { return rng{lo: x, hasLo: true, loOpen: true} }
func atLeast(x float64) rng { return rng{lo: x, hasLo: true} }
func between(lo, hi float64) rng {
	return rng{lo: lo, hi: hi, hasLo: true, hasHi: true}
}

var (
	positive    = above(0)
	nonNegative = atLeast(0)
	unitFactor  = rng{lo: 0, hi: 1, hasLo: true, hasHi: true, loOpen: true} // (0, 1]
	// safetyFactor is a unitFactor whose zero (left out) means the gate's own 0.99.
	safetyFactor = unitFactor.withTail("; leave it out for the gate's own 0.99")
	unitRange    = between(0, 1) // [0, 1]
	// inherit is a positive value whose zero would mean "inherit".
	inherit = rng{lo: 0, hasLo: true, loOpen: true, tail: "; leave it out to inherit"}
)

func (r rng) withNote(s string) rng { r.note = s; return r }
func (r rng) withTail(s string) rng { r.tail = s; return r }

func (r rng) ok(x float64) bool {
	switch {
	case r.hasLo && (x < r.lo || r.loOpen && x == r.lo):
		return false
	case r.hasHi && (x > r.hi || r.hiOpen && x == r.hi):
		return false
	}
	return true
}

// num writes a bound or a value: whole numbers in full (a byte count reads
// 100663296, not 1.00663296e+08), others in the shortest form.
func num(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// rule is the bound as a message: "must be greater than 0".
func (r rng) rule(integer bool) string {
	switch {
	case r.hasLo && r.hasHi && integer && !r.loOpen && !r.hiOpen:
		return fmt.Sprintf("must be from %s to %s", num(r.lo), num(r.hi))
	case r.hasLo && r.hasHi:
		return "must be in " + r.short(integer)
	case r.hasLo && r.loOpen:
		return "must be greater than " + num(r.lo)
	case r.hasLo && r.lo == 0:
		return "must not be negative"
	case r.hasLo:
		return "must be at least " + num(r.lo)
	case r.hasHi:
		return "must be at most " + num(r.hi)
	}
	return ""
}

// short is the bound as the reference shows it: "> 0", "0..200", "(0, 1]".
func (r rng) short(integer bool) string {
	switch {
	case r.hasLo && r.hasHi && integer && !r.loOpen && !r.hiOpen:
		return num(r.lo) + ".." + num(r.hi)
	case r.hasLo && r.hasHi:
		l, h := "[", "]"
		if r.loOpen {
			l = "("
		}
		if r.hiOpen {
			h = ")"
		}
		return l + num(r.lo) + ", " + num(r.hi) + h
	case r.hasLo && r.loOpen:
		return "> " + num(r.lo)
	case r.hasLo:
		return ">= " + num(r.lo)
	case r.hasHi:
		return "<= " + num(r.hi)
	}
	return ""
}

// check reports value x (shown as got) at n when it is out of range.
func (r rng) check(v *validator, n *yaml.Node, path string, x float64, got string, integer bool) bool {
	if r.ok(x) {
		return true
	}
	note := ""
	if r.note != "" {
		note = r.note + "; "
	}
	v.errorf(n, path, "%s (%sgot %s)%s", r.rule(integer), note, got, r.tail)
	return false
}

// The field kinds. Each takes the key, its one-line doc, its bounds where it has
// any, and a pointer into the section's struct.

func durField[T any](key, doc string, r rng, ptr func(*T) *time.Duration) setting[T] {
	return setting[T]{key: key, kind: "duration", bounds: r.short(false), doc: doc,
		show:   func(t *T) string { return dur(*ptr(t)) },
		encode: func(t *T) (any, bool) { d := *ptr(t); return dur(d), !r.ok(float64(d)) },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if d, ok := v.duration(n, path); ok && r.check(v, n, path, float64(d), dur(d), false) {
				*ptr(t) = d
			}
		}}
}

func intField[T any](key, doc string, r rng, ptr func(*T) *int) setting[T] {
	return setting[T]{key: key, kind: "integer", bounds: r.short(true), doc: doc,
		show:   func(t *T) string { return strconv.Itoa(*ptr(t)) },
		encode: func(t *T) (any, bool) { i := *ptr(t); return i, !r.ok(float64(i)) },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if i, ok := v.integer(n, path); ok && r.check(v, n, path, float64(i), strconv.Itoa(i), true) {
				*ptr(t) = i
			}
		}}
}

func numField[T any](key, doc string, r rng, ptr func(*T) *float64) setting[T] {
	return setting[T]{key: key, kind: "number", bounds: r.short(false), doc: doc,
		show:   func(t *T) string { return num(*ptr(t)) },
		encode: func(t *T) (any, bool) { f := *ptr(t); return f, !r.ok(f) },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if f, ok := v.number(n, path); ok && r.check(v, n, path, f, num(f), false) {
				*ptr(t) = f
			}
		}}
}

// unsetZero shows no default for a number whose zero means "left out" (it is
// outside the number's bounds: the file cannot write it).
func unsetZero[T any](s setting[T]) setting[T] {
	show := s.show
	s.show = func(t *T) string {
		if v := show(t); v != "0" {
			return v
		}
		return ""
	}
	return s
}

func boolField[T any](key, doc string, ptr func(*T) *bool) setting[T] {
	return setting[T]{key: key, kind: "boolean", doc: doc,
		show:   func(t *T) string { return strconv.FormatBool(*ptr(t)) },
		encode: func(t *T) (any, bool) { return *ptr(t), false },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if b, ok := v.boolean(n, path); ok {
				*ptr(t) = b
			}
		}}
}

// strField is a string that must not be empty; check, when set, returns what is
// wrong with it ("" for nothing).
func strField[T any](key, doc string, check func(string) string, ptr func(*T) *string) setting[T] {
	return setting[T]{key: key, kind: "string", bounds: "not empty", doc: doc,
		show:   func(t *T) string { return *ptr(t) },
		encode: func(t *T) (any, bool) { return *ptr(t), *ptr(t) == "" },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			s, ok := v.nonEmpty(n, path)
			if !ok {
				return
			}
			if check != nil {
				if msg := check(s); msg != "" {
					v.errorf(n, path, "%s (got %q)", msg, s)
					return
				}
			}
			*ptr(t) = s
		}}
}

// secretStrField is strField for a value that may hold a credential (a URL
// with a password): an error names the key and what is wrong, never the
// value, since errors reach logs and /readyz.
func secretStrField[T any](key, doc string, check func(string) string, ptr func(*T) *string) setting[T] {
	f := strField(key, doc, nil, ptr)
	f.decode = func(v *validator, n *yaml.Node, path string, t *T) {
		s, ok := v.nonEmpty(n, path)
		if !ok {
			return
		}
		if msg := check(s); msg != "" {
			v.errorf(n, path, "%s (the value is not shown: it may hold a password)", msg)
			return
		}
		*ptr(t) = s
	}
	return f
}

func choiceField[T any](key, doc string, choices []string, ptr func(*T) *string) setting[T] {
	return setting[T]{key: key, kind: "string", bounds: "one of: " + strings.Join(choices, ", "), doc: doc,
		reqHint: " (one of: " + strings.Join(choices, ", ") + ")",
		show:    func(t *T) string { return *ptr(t) },
		encode:  func(t *T) (any, bool) { return *ptr(t), *ptr(t) == "" },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if s, ok := v.oneOf(n, path, choices); ok {
				*ptr(t) = s
			}
		}}
}

// subField is a nested section, decoded over what its target already holds: a key
// left out keeps its value.
func subField[T, S any](key, doc string, sc *schema[S], ptr func(*T) *S) setting[T] {
	return setting[T]{key: key, kind: "mapping", bounds: "see `" + sc.path + "`", doc: doc,
		encode: func(t *T) (any, bool) { return sc.encode(ptr(t)), false },
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			sc.decode(v, n, path, ptr(t))
		}}
}

// customField is a key whose value has a shape of its own (lists, maps, exactly
// one of several forms); decode does all of it.
func customField[T any](key, kind, doc string, decode func(v *validator, n *yaml.Node, path string, t *T)) setting[T] {
	return setting[T]{key: key, kind: kind, doc: doc, decode: decode}
}

// shownBy gives a custom field the default docs/config.md shows (see
// setting.show).
func (f setting[T]) shownBy(show func(t *T) string) setting[T] {
	f.show = show
	return f
}

// encodedBy gives a custom field its encoding (see setting.encode).
func (f setting[T]) encodedBy(encode func(t *T) (any, bool)) setting[T] {
	f.encode = encode
	return f
}

// optSubField is a nested section held by pointer: nil when the key is absent or
// not a mapping; null is an error saying what it needs.
func optSubField[T, S any](key, doc, needs string, sc *schema[S], ptr func(*T) **S) setting[T] {
	return setting[T]{key: key, kind: "mapping", bounds: "see `" + sc.path + "`", doc: doc,
		decode: func(v *validator, n *yaml.Node, path string, t *T) {
			if isNull(n) {
				v.errorf(n, path, "%s", needs)
				return
			}
			s := sc.defaults()
			if sec := sc.decode(v, n, path, &s); sec.node != nil {
				*ptr(t) = &s
			}
		}}
}
