package rules

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// DefaultEvidence is how long after a capacity failure a "modality is not
// supported" 400 still counts as MISLABELED (retry.mislabeled.evidence); after it,
// the 400 is taken at its word.
const DefaultEvidence = 10 * time.Minute

// Options tune a rule set as it loads. The zero value is the default.
type Options struct {
	// Name is the set's name, the first half of every Verdict.By. Default: the
	// file's `name:`, else its base name without extension.
	Name string
	// Evidence is the MISLABELED evidence window, evidenceMs in rules.
	// Default DefaultEvidence; config's retry.mislabeled.evidence.
	Evidence time.Duration
	// Now tells the time hints are measured from when a failure has no Date
	// header. Default time.Now.
	Now func() time.Time
	// Cases are extra golden cases (config's classifiers[i].cases), in the form of
	// a rule file's cases; they run after the file's own.
	Cases []map[string]any
	// CasesFile and CasesPath name where Cases come from in errors, e.g.
	// "gatectl.yaml" and "classifiers[0].cases". Default: the rule file and
	// "config cases".
	CasesFile, CasesPath string
}

// RuleSet is a compiled rule file: an ordered list of rules, each an expr
// condition with a class and an optional hint and window. It implements
// engine.Classifier: the first rule whose condition holds decides, with By
// "<set>/<rule>"; when none holds, the set abstains.
//
// A RuleSet is immutable and safe for concurrent use; the WithX methods return
// copies that share the compiled programs. Everything is compiled when the set
// loads: phrases into one automaton, regexps once, expressions once.
type RuleSet struct {
	name     string
	file     string
	source   []byte
	rules    []*rule
	cases    []goldenCase
	evidence time.Duration
	now      func() time.Time

	matcher     *matcher
	groups      []group
	regexes     []*regexp.Regexp
	windowGroup map[string]int
	needText    bool

	pool *sync.Pool // *evalState; shared by copies (a state takes its set at reset)
}

// with applies opts to a copy.
func (rs *RuleSet) with(opts Options) *RuleSet {
	cp := *rs
	if opts.Name != "" {
		cp.name = opts.Name
	}
	if opts.Evidence > 0 {
		cp.evidence = opts.Evidence
	}
	if opts.Now != nil {
		cp.now = opts.Now
	}
	return &cp
}

// WithEvidence returns a copy whose MISLABELED evidence window is d.
func (rs *RuleSet) WithEvidence(d time.Duration) *RuleSet { return rs.with(Options{Evidence: d}) }

// WithNow returns a copy that measures date hints from now() when a failure has
// no Date header.
func (rs *RuleSet) WithNow(now func() time.Time) *RuleSet { return rs.with(Options{Now: now}) }

// WithName returns a copy named name.
func (rs *RuleSet) WithName(name string) *RuleSet { return rs.with(Options{Name: name}) }

// Name is the set's name.
func (rs *RuleSet) Name() string { return rs.name }

// File is the file the set was loaded from.
func (rs *RuleSet) File() string { return rs.file }

// Source is the rule file's text.
func (rs *RuleSet) Source() []byte { return append([]byte(nil), rs.source...) }

// Evidence is the MISLABELED evidence window.
func (rs *RuleSet) Evidence() time.Duration { return rs.evidence }

// RuleInfo describes one rule, for listings.
type RuleInfo struct {
	Name         string
	Class        engine.Class
	Window       string // a literal window, or "(expr)"
	When         string
	RetryAfterMs string
	Line         int
}

// Rules lists the set's rules in order.
func (rs *RuleSet) Rules() []RuleInfo {
	out := make([]RuleInfo, len(rs.rules))
	for i, r := range rs.rules {
		w := r.window
		if r.windowExpr != nil {
			w = "(expr)"
		}
		out[i] = RuleInfo{Name: r.name, Class: r.class, Window: w, When: r.whenSrc, RetryAfterMs: r.retrySrc, Line: r.line}
	}
	return out
}

func (rs *RuleSet) nowTime() time.Time {
	if rs.now != nil {
		return rs.now()
	}
	return time.Now()
}

func (rs *RuleSet) get(f *engine.Failure) *evalState {
	st := rs.pool.Get().(*evalState)
	st.reset(rs, f, rs.nowTime())
	return st
}

func (rs *RuleSet) put(st *evalState) {
	st.release()
	rs.pool.Put(st)
}

// Classify runs the rules in order; the first that holds decides. It abstains
// when none holds. An error means a rule failed at run time (say, int() of a
// string that is not a number); the chain then asks the next classifier.
func (rs *RuleSet) Classify(ctx context.Context, f *engine.Failure) (engine.Verdict, bool, error) {
	if f == nil {
		return engine.Verdict{}, false, errors.New("rules: nil failure")
	}
	st := rs.get(f)
	defer rs.put(st)
	for _, r := range rs.rules {
		ok, err := st.holds(r)
		if err != nil {
			return engine.Verdict{}, false, rs.runError(r, "when", err)
		}
		if !ok {
			continue
		}
		v, err := st.verdict(r)
		if err != nil {
			return engine.Verdict{}, false, err
		}
		return v, true, nil
	}
	return engine.Verdict{}, false, nil
}

// Explain lists every rule that holds for f, the deciding one first, as
// "rule → CLASS (retryAfterMs=N, window=W)". It is for `gatectl classify
// --explain`.
func (rs *RuleSet) Explain(ctx context.Context, f *engine.Failure) []string {
	if f == nil {
		return nil
	}
	st := rs.get(f)
	defer rs.put(st)
	var out []string
	for _, r := range rs.rules {
		ok, err := st.holds(r)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: error: %v", r.name, err))
			continue
		}
		if !ok {
			continue
		}
		v, err := st.verdict(r)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: error: %v", r.name, err))
			continue
		}
		line := fmt.Sprintf("%s/%s (line %d) → %s", rs.name, r.name, r.line, v.Class)
		if v.RetryAfterMs != nil {
			line += fmt.Sprintf(" retryAfterMs=%d", *v.RetryAfterMs)
		}
		if v.Window != "" {
			line += " window=" + v.Window
		}
		if len(out) == 0 {
			line += "  [decides]"
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		out = append(out, "no rule holds")
	}
	return out
}

func (rs *RuleSet) runError(r *rule, field string, err error) error {
	return fmt.Errorf("rules: %s: rule %q (line %d): %s: %w", rs.file, r.name, r.line, field, err)
}

func (st *evalState) holds(r *rule) (bool, error) {
	out, err := st.vm.Run(r.when, &st.env)
	if err != nil {
		return false, err
	}
	b, _ := out.(bool)
	return b, nil
}

func (st *evalState) verdict(r *rule) (engine.Verdict, error) {
	v := engine.Verdict{Class: r.class, Window: r.window, By: st.rs.name + "/" + r.name}
	if r.retry != nil {
		out, err := st.vm.Run(r.retry, &st.env)
		if err != nil {
			return v, st.rs.runError(r, "retryAfterMs", err)
		}
		if ms, ok := toHint(out); ok {
			v.RetryAfterMs = &ms
		}
	}
	if r.windowExpr != nil {
		out, err := st.vm.Run(r.windowExpr, &st.env)
		if err != nil {
			return v, st.rs.runError(r, "window", err)
		}
		if w, _ := out.(string); contains(windowNames, w) {
			v.Window = w
		}
	}
	return v, nil
}

// toHint reads the value of a retryAfterMs expression: a number of milliseconds;
// nil or a negative number means no hint.
func toHint(v any) (int64, bool) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case int32:
		f = float64(x)
	case float64:
		f = x
	case float32:
		f = float64(x)
	case uint, uint64, uint32:
		f = float64(toUint(x))
	case time.Duration:
		f = float64(x.Milliseconds())
	default:
		return 0, false
	}
	if math.IsNaN(f) || f < 0 {
		return 0, false
	}
	return toMs(f), true
}

func toUint(v any) uint64 {
	switch x := v.(type) {
	case uint:
		return uint64(x)
	case uint64:
		return x
	case uint32:
		return uint64(x)
	}
	return 0
}

// runCases runs the file's golden cases and those of opts; every failure is
// reported.
func (rs *RuleSet) runCases(opts Options) error {
	cases := append([]goldenCase(nil), rs.cases...)
	var errs []error
	file, path := opts.CasesFile, opts.CasesPath
	if file == "" {
		file = rs.file
	}
	if path == "" {
		path = "config cases"
	}
	for i, m := range opts.Cases {
		where := fmt.Sprintf("%s[%d]", path, i)
		c, err := caseFromMap(where, m)
		if err != nil {
			errs = append(errs, &Error{File: file, Field: where, Msg: err.Error()})
			continue
		}
		c.file = file
		cases = append(cases, c)
	}
	for _, c := range cases {
		if err := rs.runCase(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RunCases runs the set's golden cases again (Load already ran them once).
func (rs *RuleSet) RunCases() error { return rs.runCases(Options{}) }

func (rs *RuleSet) runCase(c goldenCase) error {
	f := c.Input
	v, decided, err := rs.Classify(context.Background(), &f)
	where := c.where
	if c.Name != "" {
		where += fmt.Sprintf(" (%s)", c.Name)
	}
	file := c.file
	if file == "" {
		file = rs.file
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = c.Check(v, decided, rs.name, "no rule holds")
	}
	if msg == "" {
		return nil
	}
	return &Error{File: file, Line: c.line, Field: where, Msg: msg, Err: ErrCaseFailed}
}

// Interface guards.
var (
	_ engine.Classifier = (*RuleSet)(nil)
	_ engine.Explainer  = (*RuleSet)(nil)
)
