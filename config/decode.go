package config

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gatectl/gatectl/internal/suggest"
	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree and collects every problem it meets, each with
// the file, line and config path where it was found. It never stops at the first.
type decoder struct {
	file string
	errs Errors
	warn Errors
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, d.mk(n, path, format, args...))
}

func (d *decoder) warnf(n *yaml.Node, path, format string, args ...any) {
	d.warn = append(d.warn, d.mk(n, path, format, args...))
}

func (d *decoder) mk(n *yaml.Node, path, format string, args ...any) *Error {
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// field is one key of a mapping with its value.
type field struct {
	key, val *yaml.Node
}

// section is a decoded mapping: its present keys, and where it sits.
type section struct {
	node   *yaml.Node // the mapping itself (nil when absent)
	path   string
	fields map[string]field
}

func (s section) has(k string) bool { _, ok := s.fields[k]; return ok }

// val returns the value of key k, or nil when absent.
func (s section) val(k string) *yaml.Node {
	if f, ok := s.fields[k]; ok {
		return f.val
	}
	return nil
}

// sub returns the config path of key k under s.
func (s section) sub(k string) string { return join(s.path, k) }

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join appends key k to path p: "a.b", or `a["x/y"]` for keys that need quoting.
func join(p, k string) string {
	if !plainKey.MatchString(k) {
		return p + "[" + strconv.Quote(k) + "]"
	}
	if p == "" {
		return k
	}
	return p + "." + k
}

func index(p string, i int) string { return fmt.Sprintf("%s[%d]", p, i) }

// deref follows aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	n = deref(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null"
	case n.Tag == "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case n.Tag == "!!bool":
		return "the boolean " + n.Value
	case n.Tag == "!!int", n.Tag == "!!float":
		return "the number " + n.Value
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// pairs returns the key/value pairs of mapping n, merge keys (<<) expanded, each
// key once; it reports non-string and duplicate keys.
func (d *decoder) pairs(n *yaml.Node, path string) []field {
	n = deref(n)
	var out []field
	seen := map[string]bool{}
	// Mappings being expanded: an anchor merged into itself (&a {<<: *a}) would
	// otherwise expand forever.
	active := map[*yaml.Node]bool{}
	done := map[*yaml.Node]bool{} // merged mappings already walked: nothing new in them
	var walk func(m *yaml.Node, merged bool)
	walk = func(m *yaml.Node, merged bool) {
		if merged && done[m] {
			return
		}
		done[m] = true
		active[m] = true
		defer delete(active, m)
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := deref(m.Content[i]), m.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				v = deref(v)
				if active[v] {
					d.errorf(k, path, "merge key << merges a mapping into itself (an anchor that refers to itself)")
					continue
				}
				switch v.Kind {
				case yaml.MappingNode:
					walk(v, true)
				case yaml.SequenceNode:
					for _, e := range v.Content {
						if e = deref(e); e.Kind == yaml.MappingNode && active[e] {
							d.errorf(k, path, "merge key << merges a mapping into itself (an anchor that refers to itself)")
						} else if e.Kind == yaml.MappingNode {
							walk(e, true)
						}
					}
				default:
					d.errorf(k, path, "merge key << needs a mapping or a list of mappings, got %s", kindName(v))
				}
				continue
			}
			if k.Kind != yaml.ScalarNode {
				d.errorf(k, path, "keys must be strings, got %s", kindName(k))
				continue
			}
			if seen[k.Value] {
				if !merged {
					d.errorf(k, join(path, k.Value), "duplicate key %q", k.Value)
				}
				continue
			}
			seen[k.Value] = true
			out = append(out, field{k, v})
		}
	}
	// Keys written in the mapping itself win over merged ones: walk own keys first.
	own := &yaml.Node{Kind: yaml.MappingNode}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := deref(n.Content[i]); k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, n.Content[i], n.Content[i+1])
		} else {
			own.Content = append(own.Content, n.Content[i], n.Content[i+1])
		}
	}
	walk(own, false)
	if len(merges) > 0 {
		walk(&yaml.Node{Kind: yaml.MappingNode, Content: merges}, true)
	}
	return out
}

// object decodes a mapping with a fixed set of keys. An absent or null node is an
// empty section; anything but a mapping is an error (and an empty section).
func (d *decoder) object(n *yaml.Node, path string, valid ...string) section {
	s := section{path: path, fields: map[string]field{}}
	if isNull(n) {
		return s
	}
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping with keys %s, got %s", strings.Join(valid, ", "), kindName(n))
		return s
	}
	s.node = n
	for _, f := range d.pairs(n, path) {
		if !contains(valid, f.key.Value) {
			if near := suggest.Near(f.key.Value, valid); len(near) > 0 {
				d.errorf(f.key, join(path, f.key.Value), "unknown key %q: did you mean %q? (valid: %s)", f.key.Value, near[0], strings.Join(valid, ", "))
			} else {
				d.errorf(f.key, join(path, f.key.Value), "unknown key %q (valid: %s)", f.key.Value, strings.Join(valid, ", "))
			}
			continue
		}
		s.fields[f.key.Value] = f
	}
	return s
}

// entries decodes a mapping with arbitrary keys, in declared order.
func (d *decoder) entries(n *yaml.Node, path string) []field {
	if isNull(n) {
		return nil
	}
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, got %s", kindName(n))
		return nil
	}
	return d.pairs(n, path)
}

// list returns the items of a sequence; null is an empty list.
func (d *decoder) list(n *yaml.Node, path string) []*yaml.Node {
	if isNull(n) {
		return nil
	}
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// scalar returns n as a scalar node of one of tags, or reports what it wanted.
func (d *decoder) scalar(n *yaml.Node, path, want string, tags ...string) (*yaml.Node, bool) {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode && contains(tags, n.Tag) {
		return n, true
	}
	d.errorf(n, path, "must be %s, got %s", want, kindName(n))
	return n, false
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	s, ok := d.scalar(n, path, "a string", "!!str")
	if !ok {
		return "", false
	}
	return s.Value, true
}

// nonEmpty decodes a string that must not be empty or blank.
func (d *decoder) nonEmpty(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && strings.TrimSpace(s) == "" {
		d.errorf(n, path, "must not be empty")
		return "", false
	}
	return s, ok
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	s, ok := d.scalar(n, path, "true or false", "!!bool")
	if !ok {
		return false, false
	}
	var b bool
	if err := s.Decode(&b); err != nil {
		d.errorf(s, path, "must be true or false, got %s", kindName(s))
		return false, false
	}
	return b, true
}

func (d *decoder) integer(n *yaml.Node, path string) (int, bool) {
	if m := deref(n); m != nil && m.Kind == yaml.ScalarNode && m.Tag == "!!float" && m.Value != "" &&
		strings.Trim(strings.TrimLeft(m.Value, "+-"), "0123456789") == "" {
		d.errorf(m, path, "is too large (got %s)", m.Value) // digits past int64: YAML reads a float
		return 0, false
	}
	s, ok := d.scalar(n, path, "an integer", "!!int")
	if !ok {
		return 0, false
	}
	var i int
	if err := s.Decode(&i); err != nil {
		if s.Tag == "!!int" { // an integer, but more than an int holds
			d.errorf(s, path, "is too large (got %s)", s.Value)
		} else {
			d.errorf(s, path, "must be an integer, got %s", kindName(s))
		}
		return 0, false
	}
	return i, true
}

func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	s, ok := d.scalar(n, path, "a number", "!!int", "!!float")
	if !ok {
		return 0, false
	}
	var f float64
	if err := s.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		d.errorf(s, path, "must be a finite number, got %s", kindName(s))
		return 0, false
	}
	return f, true
}

// duration decodes a Go duration string ("90s", "1h30m"); a bare 0 is allowed.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	s, ok := d.scalar(n, path, `a duration such as "60s"`, "!!str", "!!int")
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		d.errorf(s, path, `must be a duration such as "60s" or "1h30m", got %q`, s.Value)
		return 0, false
	}
	return v, true
}

// strList decodes a list of strings.
func (d *decoder) strList(n *yaml.Node, path string) ([]string, bool) {
	items := d.list(n, path)
	if items == nil {
		return nil, !isNull(n) && deref(n).Kind == yaml.SequenceNode
	}
	out := make([]string, 0, len(items))
	ok := true
	for i, it := range items {
		s, good := d.str(it, index(path, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// strMap decodes a mapping of string to string. Values are never echoed in errors:
// they may be secrets.
func (d *decoder) strMap(n *yaml.Node, path string) map[string]string {
	fs := d.entries(n, path)
	if fs == nil {
		return nil
	}
	out := make(map[string]string, len(fs))
	for _, f := range fs {
		v := deref(f.val)
		if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			d.errorf(f.val, join(path, f.key.Value), "must be a string, got %s", kindOnly(v))
			continue
		}
		out[f.key.Value] = v.Value // numbers and booleans are taken as their text
	}
	return out
}

// kindOnly names the kind of n without its value (which may be a secret).
func kindOnly(n *yaml.Node) string {
	if d := deref(n); d != nil && d.Kind == yaml.ScalarNode && d.Tag != "!!null" {
		return "a scalar"
	}
	return kindName(n)
}

// numMap decodes a mapping of string to number, each value within r.
func (v *validator) numMap(n *yaml.Node, path string, r rng) map[string]float64 {
	fs := v.entries(n, path)
	if fs == nil {
		return nil
	}
	out := make(map[string]float64, len(fs))
	for _, f := range fs {
		p := join(path, f.key.Value)
		x, ok := v.number(f.val, p)
		if !ok || !r.check(v, f.val, p, x, num(x), false) {
			continue
		}
		out[f.key.Value] = x
	}
	return out
}

// anyMap decodes a free-form mapping (plugin config) into plain Go values.
func (d *decoder) anyMap(n *yaml.Node, path string) map[string]any {
	if isNull(n) {
		return nil
	}
	m := deref(n)
	if m.Kind != yaml.MappingNode {
		d.errorf(m, path, "must be a mapping, got %s", kindOnly(m))
		return nil
	}
	var out map[string]any
	if err := m.Decode(&out); err != nil {
		d.errorf(m, path, "cannot decode: %v", err)
		return nil
	}
	return out
}

// sortErrs orders problems by position, keeping discovery order for ties.
func sortErrs(es Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
}

// dur formats a duration for messages the way people write it: 1m, 1h30m, 1.5s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
