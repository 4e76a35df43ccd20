package failurejson

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gatectl/gatectl/engine"
)

// Keys of a golden case beside the failure's own.
var (
	// caseKeys name the case and hold its two halves.
	caseKeys = []string{"name", "input", "expect"}
	// ExpectKeys are what a case may expect; they sit under expect or beside it.
	ExpectKeys = []string{"class", "retryAfterMs", "window", "by", "abstain"}
)

// Case is one golden case of a classifier: a failure and what the classifier
// must answer. Its written form, in rule files, config cases and plugin case
// files alike, is one of
//
//	{name: optional, input: {status, headers, body, ...},
//	 expect: {class, retryAfterMs (a number, or null for "no hint"), window, by}}
//	{name: optional, input: {...}, class: QUOTA, retryAfterMs: 5}
//	{status: 429, body: "slow down", expect: RATE_LIMIT}
//
// that is: the failure under input or, inline, its keys in the case itself; the
// expectations under expect, or beside it; expect may be just the class.
// `abstain: true` instead of a class expects the classifier to abstain.
// Expectations left out are not checked.
type Case struct {
	Name  string
	Input engine.Failure

	Abstain bool         // the classifier must abstain; nothing else is expected
	Class   engine.Class // the class expected, when !Abstain
	// CheckHint is whether retryAfterMs is expected; Hint is nil for "no hint".
	CheckHint bool
	Hint      *int64
	Window    string // "" is not checked
	By        string // "" is not checked; see Check
}

// ParseCase reads one golden case as decoded from YAML or JSON (see Case). Its
// errors name the key at fault; the caller adds which case it is.
func ParseCase(v any) (Case, error) {
	var c Case
	m, ok := Normalize(v).(map[string]any)
	if !ok {
		return c, fmt.Errorf("a case is a mapping of name, input, expect (got %s)", kindOf(v))
	}
	inline := map[string]any{}
	exp := map[string]any{}
	for _, k := range sortedKeys(m) {
		switch {
		case slices.Contains(caseKeys, k):
		case slices.Contains(ExpectKeys, k):
			exp[k] = m[k]
		case slices.Contains(FailureKeys, k):
			inline[k] = m[k]
		default:
			return c, fmt.Errorf("unknown key %q (valid: %s, %s, or the failure's %s)", k,
				strings.Join(caseKeys, ", "), strings.Join(ExpectKeys, ", "), strings.Join(FailureKeys, ", "))
		}
	}
	if n, ok := m["name"]; ok && n != nil {
		c.Name = fmt.Sprint(n)
	}

	in, ok := m["input"]
	switch {
	case ok && len(inline) > 0:
		return c, errors.New("give the failure either under input or beside expect, not both")
	case !ok && len(inline) == 0:
		return c, fmt.Errorf("missing input (a failure: %s)", strings.Join(FailureKeys, ", "))
	case ok:
		f, err := FromValue(in)
		if err != nil {
			return c, fmt.Errorf("input: %w", err)
		}
		c.Input = *f
	default:
		f, err := FromValue(inline)
		if err != nil {
			return c, err
		}
		c.Input = *f
	}

	prefix := "" // where the expectations sit, for errors
	switch e := m["expect"].(type) {
	case nil:
	case string:
		if _, dup := exp["class"]; dup {
			return c, errors.New("give the class either as expect or as class, not both")
		}
		exp["class"] = e
	case map[string]any:
		if len(exp) > 0 {
			return c, fmt.Errorf("give the expectations either under expect or beside it, not both (%s beside it)", strings.Join(sortedKeys(exp), ", "))
		}
		for _, k := range sortedKeys(e) {
			if !slices.Contains(ExpectKeys, k) {
				return c, fmt.Errorf("expect: unknown key %q (valid: %s)", k, strings.Join(ExpectKeys, ", "))
			}
		}
		exp, prefix = e, "expect."
	default:
		return c, fmt.Errorf("expect: want a class or a mapping of %s (got %s)", strings.Join(ExpectKeys, ", "), kindOf(e))
	}
	return c, c.expect(exp, prefix)
}

// expect fills the expectations from exp, whose keys are ExpectKeys.
func (c *Case) expect(exp map[string]any, prefix string) error {
	if a, ok := exp["abstain"]; ok && a != nil {
		b, ok := a.(bool)
		if !ok {
			return fmt.Errorf("%sabstain: want true or false (got %s)", prefix, show(a))
		}
		c.Abstain = b
	}
	if c.Abstain {
		for _, k := range []string{"class", "retryAfterMs", "window", "by"} {
			if _, ok := exp[k]; ok {
				return fmt.Errorf("%s%s: an abstention has no verdict (drop %s, or abstain)", prefix, k, k)
			}
		}
		return nil
	}
	cl, ok := exp["class"]
	if !ok {
		return errors.New("missing expect (the class, or {class, retryAfterMs, window, by}, or {abstain: true})")
	}
	class, err := engine.ParseClass(fmt.Sprint(cl))
	if err != nil {
		return fmt.Errorf("expect.class: %w", err)
	}
	c.Class = class
	if h, ok := exp["retryAfterMs"]; ok {
		c.CheckHint = true
		if h != nil {
			n, ok := number(h)
			if !ok || n < 0 || n > math.MaxInt64/2 {
				return fmt.Errorf("expect.retryAfterMs: want a number of milliseconds >= 0, or null (got %s)", show(h))
			}
			ms := int64(n)
			c.Hint = &ms
		}
	}
	if w, ok := exp["window"]; ok && w != nil {
		c.Window = fmt.Sprint(w)
	}
	if b, ok := exp["by"]; ok && b != nil {
		c.By = fmt.Sprint(b)
	}
	return nil
}

// Check compares a classifier's answer to f (c.Input) with the case. It returns
// "" when they agree, else what differs, in words. link is the classifier's
// name as it starts Verdict.By ("my-rules", "wasm/octafuse.wasm"): an expected
// by matches the whole Verdict.By or what follows link + "/". abstained words an
// unexpected abstention ("no rule holds", "the module abstained").
func (c *Case) Check(v engine.Verdict, decided bool, link, abstained string) string {
	switch {
	case c.Abstain && decided:
		return fmt.Sprintf("got %s by %s, want an abstention", v.Class, v.By)
	case c.Abstain:
		return ""
	case !decided:
		return fmt.Sprintf("%s, want %s", abstained, c.Class)
	case v.Class != c.Class:
		return fmt.Sprintf("got %s by %s, want %s", v.Class, v.By, c.Class)
	}
	if c.CheckHint {
		switch {
		case c.Hint == nil && v.RetryAfterMs != nil:
			return fmt.Sprintf("got retryAfterMs %d by %s, want none", *v.RetryAfterMs, v.By)
		case c.Hint != nil && v.RetryAfterMs == nil:
			return fmt.Sprintf("got no retryAfterMs by %s, want %d", v.By, *c.Hint)
		case c.Hint != nil && *v.RetryAfterMs != *c.Hint:
			return fmt.Sprintf("got retryAfterMs %d by %s, want %d", *v.RetryAfterMs, v.By, *c.Hint)
		}
	}
	if c.Window != "" && v.Window != c.Window {
		return fmt.Sprintf("got window %q by %s, want %q", v.Window, v.By, c.Window)
	}
	if c.By != "" && v.By != c.By && v.By != link+"/"+c.By {
		return fmt.Sprintf("decided by %s, want %s", v.By, c.By)
	}
	return ""
}
