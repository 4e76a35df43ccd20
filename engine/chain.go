package engine

import (
	"context"
	"fmt"
	"sync/atomic"
)

// ByChainNone is the Verdict.By of a chain in which no link decided.
const ByChainNone = "chain/none"

// Chain is the classifier chain of DESIGN.md: an ordered list of classifiers, asked
// in order for each failure. The first link that decides wins. A link that returns
// an error (a trapped plugin, a panicking rule) is counted, reported to the error
// hook, and skipped: the next link is asked. When no link decides, the chain answers
// UNKNOWN with By "chain/none", so Classify always decides.
//
// A Chain is immutable once built (WithErrorHook and WithVerdictHook return
// copies that share the error counters) and safe for concurrent use. The zero value is an empty chain
// that answers UNKNOWN for everything.
type Chain struct {
	links     []Classifier
	onError   func(link string, err error)
	onVerdict func(f *Failure, v Verdict)
	errs      []*atomic.Uint64 // errs[i] counts the errors of links[i]; same length as links
}

// NewChain returns a chain that asks links in the order given. Nil links are
// dropped.
func NewChain(links ...Classifier) *Chain {
	c := &Chain{}
	for _, l := range links {
		if l == nil {
			continue
		}
		c.links = append(c.links, l)
		c.errs = append(c.errs, new(atomic.Uint64))
	}
	return c
}

// WithErrorHook returns a copy of the chain that calls hook (from the goroutine
// that called Classify) each time a link fails. The copy shares the error counts.
func (c *Chain) WithErrorHook(hook func(link string, err error)) *Chain {
	cp := *c
	cp.onError = hook
	return &cp
}

// WithVerdictHook returns a copy of the chain that calls hook (from the goroutine
// that called Classify) with every verdict Classify returns, once it has decided,
// including UNKNOWN by chain/none; not when ctx ended first, and never from
// Explain. Every caller of Classify reaches it, so the server records failures
// that fell through to a catch-all rule here. The copy shares the error counts.
func (c *Chain) WithVerdictHook(hook func(f *Failure, v Verdict)) *Chain {
	cp := *c
	cp.onVerdict = hook
	return &cp
}

// Name is "chain".
func (c *Chain) Name() string { return "chain" }

// Links returns the chain's classifiers, in order. The slice is a copy.
func (c *Chain) Links() []Classifier {
	return append([]Classifier(nil), c.links...)
}

// Errors returns how many times each link has failed, by link name, since the
// chain was built. Links that share a name are summed.
func (c *Chain) Errors() map[string]uint64 {
	m := make(map[string]uint64, len(c.links))
	for i, l := range c.links {
		m[l.Name()] += c.errs[i].Load()
	}
	return m
}

// Classify asks each link in order and returns the first decision. It always
// decides (UNKNOWN by "chain/none" when nothing else does). The error is non-nil
// only when ctx ends before a link decides; the verdict is then UNKNOWN.
func (c *Chain) Classify(ctx context.Context, f *Failure) (Verdict, bool, error) {
	for i, l := range c.links {
		if err := ctx.Err(); err != nil {
			return Verdict{Class: ClassUnknown, By: ByChainNone}, true, err
		}
		v, decided, err := c.ask(ctx, i, l, f)
		if err != nil || !decided {
			continue
		}
		c.observe(f, v)
		return v, true, nil
	}
	v := Verdict{Class: ClassUnknown, By: ByChainNone}
	c.observe(f, v)
	return v, true, nil
}

// observe hands a verdict to the verdict hook, if any.
func (c *Chain) observe(f *Failure, v Verdict) {
	if c.onVerdict != nil {
		c.onVerdict(f, v)
	}
}

// ask runs one link, turning a panic into an error, and records an error.
func (c *Chain) ask(ctx context.Context, i int, l Classifier, f *Failure) (v Verdict, decided bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, decided, err = Verdict{}, false, fmt.Errorf("classifier %s panicked: %v", l.Name(), r)
		}
		if err != nil {
			c.errs[i].Add(1)
			if c.onError != nil {
				c.onError(l.Name(), err)
			}
		}
	}()
	v, decided, err = l.Classify(ctx, f)
	if decided && v.Class == "" {
		return Verdict{}, false, fmt.Errorf("classifier %s decided without a class", l.Name())
	}
	return v, decided, err
}

// Explainer is an optional capability of a Classifier: it lists, in its own words,
// why it answered as it did (for a rule set, every rule that matches). Explain is
// called by `gatectl classify --explain`, never on the request path.
type Explainer interface {
	Explain(ctx context.Context, f *Failure) []string
}

// Answer is what one link of a chain answered, as Chain.Explain reports it.
type Answer struct {
	Link    string   `json:"link"`
	Decided bool     `json:"decided"`
	Verdict *Verdict `json:"verdict,omitempty"` // set when Decided
	Err     string   `json:"error,omitempty"`
	Wins    bool     `json:"wins,omitempty"`   // this link's verdict is the chain's
	Detail  []string `json:"detail,omitempty"` // from an Explainer link
}

// Explain asks every link, even after one has decided, and returns what each
// answered together with the chain's verdict (the same one Classify returns).
// Explain does not count errors and does not call the error hook.
func (c *Chain) Explain(ctx context.Context, f *Failure) ([]Answer, Verdict) {
	out := make([]Answer, 0, len(c.links))
	final := Verdict{Class: ClassUnknown, By: ByChainNone}
	won := false
	for _, l := range c.links {
		a := Answer{Link: l.Name()}
		v, decided, err := explainOne(ctx, l, f)
		switch {
		case err != nil:
			a.Err = err.Error()
		case decided:
			a.Decided = true
			vv := v
			a.Verdict = &vv
			if !won {
				won, a.Wins, final = true, true, v
			}
		}
		if e, ok := l.(Explainer); ok {
			a.Detail = e.Explain(ctx, f)
		}
		out = append(out, a)
	}
	return out, final
}

func explainOne(ctx context.Context, l Classifier, f *Failure) (v Verdict, decided bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, decided, err = Verdict{}, false, fmt.Errorf("classifier %s panicked: %v", l.Name(), r)
		}
	}()
	v, decided, err = l.Classify(ctx, f)
	if err == nil && decided && v.Class == "" {
		return Verdict{}, false, fmt.Errorf("classifier %s decided without a class", l.Name())
	}
	return v, decided, err
}

// Interface guards.
var (
	_ Classifier = (*Chain)(nil)
)
