package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/failurejson"
)

// ByPrefix starts the Verdict.By of every wasm classifier: "wasm/<name>", or
// "wasm/<name>/<by>" when the module reports a "by" of its own.
const ByPrefix = "wasm/"

// Classifier is a gate/v1 module exporting gate_classify, as a link of the
// classifier chain (engine.Classifier). The module gets the failure's JSON (body
// cut to MaxBodyBytes) and returns {"class": ..., "retryAfterMs": ...} (optionally
// "window" and "by"); returning 1 abstains. Any failure of the module — trap,
// timeout, error code, missing or bad output — is returned as an error, so the
// chain asks the next link.
//
// A Classifier is immutable and safe for concurrent use. Close it when its
// snapshot goes.
type Classifier struct {
	p    *Plugin
	name string // "wasm/<plugin name>"
}

// ClassifierOptions configure NewClassifier.
type ClassifierOptions struct {
	// Name names the plugin; default its file name ("octafuse.wasm").
	Name string
	// Config is handed to gate_init (config's classifiers[i].config).
	Config map[string]any
	// Cases are golden cases (config's classifiers[i].cases), run once loaded; one
	// failing refuses the classifier. See RunCases for their form.
	Cases []map[string]any
	// Limits bound the plugin; zero fields take DefaultLimits(KindClassify).
	Limits Limits
}

// NewClassifier loads the module at path as a classifier and runs its golden
// cases.
func NewClassifier(ctx context.Context, h *Host, path string, opts ClassifierOptions) (*Classifier, error) {
	p, err := h.Load(ctx, path, Options{Kind: KindClassify, Name: opts.Name, Config: opts.Config, Limits: opts.Limits})
	if err != nil {
		return nil, err
	}
	c := ClassifierFor(p)
	if err := c.RunCases(ctx, opts.Cases); err != nil {
		p.Close()
		return nil, err
	}
	return c, nil
}

// ClassifierFor wraps a loaded plugin of kind classify.
func ClassifierFor(p *Plugin) *Classifier {
	return &Classifier{p: p, name: ByPrefix + p.Name()}
}

// Name is "wasm/<plugin name>".
func (c *Classifier) Name() string { return c.name }

// Plugin returns the plugin behind the classifier (for its stats).
func (c *Classifier) Plugin() *Plugin { return c.p }

// Close gives the plugin handle back.
func (c *Classifier) Close() error { return c.p.Close() }

// bufPool holds input buffers; an instance copies the input into its own memory
// during the call, so a buffer is free again when the call returns.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Classify implements engine.Classifier.
func (c *Classifier) Classify(ctx context.Context, f *engine.Failure) (engine.Verdict, bool, error) {
	bp := bufPool.Get().(*[]byte)
	in := appendFailure((*bp)[:0], f, c.p.s.limits.MaxBodyBytes)
	var v engine.Verdict
	abstain, err := c.p.call(ctx, in, func(out []byte) error {
		var perr error
		v, perr = c.parseVerdict(out)
		return perr
	})
	*bp = in
	bufPool.Put(bp)
	if err != nil || abstain {
		return engine.Verdict{}, false, err
	}
	return v, true, nil
}

// verdictOut is a classifier's output.
type verdictOut struct {
	Class        string   `json:"class"`
	RetryAfterMs *float64 `json:"retryAfterMs"`
	Window       string   `json:"window"`
	By           string   `json:"by"`
}

var verdictKeys = []string{"class", "retryAfterMs", "window", "by"}

func (c *Classifier) parseVerdict(out []byte) (engine.Verdict, error) {
	var (
		o       verdictOut
		hint    float64
		badType bool
	)
	fast := parseFlat(out, verdictKeys, func(key, str string, num float64, kind byte) {
		switch {
		case key == "class" && kind == 's':
			o.Class = str
		case key == "window" && kind == 's':
			o.Window = str
		case key == "by" && kind == 's':
			o.By = str
		case key == "retryAfterMs" && kind == 'n':
			hint, o.RetryAfterMs = num, &hint
		case key == "retryAfterMs" && kind == '0':
			o.RetryAfterMs = nil
		case kind != '0': // a string where a number goes, or the reverse
			badType = true // encoding/json words the error
		}
	})
	if !fast || badType {
		o = verdictOut{}
		if err := json.Unmarshal(out, &o); err != nil {
			return engine.Verdict{}, jsonErr(out, err)
		}
	}
	return c.verdictFrom(o)
}

// verdictFrom checks a decoded output and makes the verdict.
func (c *Classifier) verdictFrom(o verdictOut) (engine.Verdict, error) {
	class, err := engine.ParseClass(o.Class)
	if err != nil {
		return engine.Verdict{}, fmt.Errorf("class: %w", err)
	}
	v := engine.Verdict{Class: class, Window: o.Window, By: c.name}
	if o.By != "" {
		v.By = c.name + "/" + o.By
	}
	if o.RetryAfterMs != nil {
		ms := *o.RetryAfterMs
		if ms < 0 || math.IsNaN(ms) || ms > math.MaxInt64/2 {
			return engine.Verdict{}, fmt.Errorf("retryAfterMs: want a number of milliseconds >= 0 (got %v)", ms)
		}
		n := int64(ms)
		v.RetryAfterMs = &n
	}
	return v, nil
}

// jsonErr describes bad JSON output without quoting it.
func jsonErr(out []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("output is not JSON (%d bytes; error at byte %d)", len(out), se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Errorf("output field %s is a JSON %s, want %s", te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("output is a JSON %s, not an object", te.Value)
	}
	return fmt.Errorf("output is not JSON (%d bytes)", len(out))
}

// appendFailure appends f's JSON (the form engine.Failure marshals to) with the
// body cut to maxBody bytes at a UTF-8 boundary.
func appendFailure(b []byte, f *engine.Failure, maxBody int) []byte {
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(f.Status), 10)
	if len(f.Headers) > 0 {
		b = append(b, `,"headers":{`...)
		first := true
		for k, v := range f.Headers {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, v)
		}
		b = append(b, '}')
	}
	if f.Body != "" {
		b = append(b, `,"body":`...)
		b = appendString(b, truncateUTF8(f.Body, maxBody))
	}
	for _, kv := range [...]struct{ k, v string }{{"provider", f.Provider}, {"model", f.Model}, {"errorKind", f.ErrorKind}} {
		if kv.v != "" {
			b = append(b, `,"`...)
			b = append(b, kv.k...)
			b = append(b, `":`...)
			b = appendString(b, kv.v)
		}
	}
	if f.SinceCapacityMs != nil {
		b = append(b, `,"sinceCapacityMs":`...)
		b = strconv.AppendInt(b, *f.SinceCapacityMs, 10)
	}
	return append(b, '}')
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD (as encoding/json does).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// RunCases runs golden cases through the classifier; every failing case is
// reported (errors.Join), each naming "cases[i]" and its name. A case has the
// form of rule files' cases (failurejson.Case): a failure under input (or its
// keys inline) and the expectations under expect (or beside it); `abstain: true`
// instead of a class expects the module to abstain. `by` matches the whole
// Verdict.By or the part after "wasm/<name>/".
func (c *Classifier) RunCases(ctx context.Context, cases []map[string]any) error {
	var errs []error
	for i, m := range cases {
		if err := c.runCase(ctx, m); err != nil {
			where := fmt.Sprintf("cases[%d]", i)
			if n, ok := m["name"]; ok {
				where += fmt.Sprintf(" (%v)", n)
			}
			errs = append(errs, fmt.Errorf("wasm: %s: %s: %w", c.p.Name(), where, err))
		}
	}
	return errors.Join(errs...)
}

// ErrCaseFailed is wrapped by the error of a golden case whose answer differs.
var ErrCaseFailed = errors.New("golden case failed")

func (c *Classifier) runCase(ctx context.Context, raw map[string]any) error {
	gc, err := failurejson.ParseCase(raw)
	if err != nil {
		return err
	}
	f := gc.Input
	v, decided, err := c.Classify(ctx, &f)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCaseFailed, err)
	}
	if msg := gc.Check(v, decided, c.name, "the module abstained"); msg != "" {
		return fmt.Errorf("%w: %s", ErrCaseFailed, msg)
	}
	return nil
}

var _ engine.Classifier = (*Classifier)(nil)
