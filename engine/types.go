package engine

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Rand is the random source the engine draws from (jitter, route draws).
// *math/rand/v2.Rand satisfies it.
type Rand interface {
	// Float64 returns a number in [0, 1).
	Float64() float64
}

// Class is what kind of failure a request met.
type Class string

// The failure classes. Their names are part of the external contract.
const (
	ClassRateLimit      Class = "RATE_LIMIT"      // throttled for a short window; retry after the hint
	ClassQuota          Class = "QUOTA"           // balance or daily/monthly allowance spent; fail over or wait long-term
	ClassOverloaded     Class = "OVERLOADED"      // the provider is saturated, not us
	ClassServer         Class = "SERVER"          // a 5xx with no better explanation
	ClassTimeout        Class = "TIMEOUT"         // the request or the connection timed out
	ClassTransport      Class = "TRANSPORT"       // reset, refused, DNS: no HTTP answer
	ClassAuth           Class = "AUTH"            // bad or missing key, forbidden
	ClassInvalidRequest Class = "INVALID_REQUEST" // the request itself is wrong; never retried unchanged
	ClassContext        Class = "CONTEXT"         // the prompt does not fit the model's context
	ClassMislabeled     Class = "MISLABELED"      // a 400 that is really a capacity failure (a replayed circuit)
	ClassUnknown        Class = "UNKNOWN"
)

// Classes lists every class, in the contract's order.
var Classes = []Class{
	ClassRateLimit, ClassQuota, ClassOverloaded, ClassServer, ClassTimeout, ClassTransport,
	ClassAuth, ClassInvalidRequest, ClassContext, ClassMislabeled, ClassUnknown,
}

// ParseClass accepts a class name in any case.
func ParseClass(s string) (Class, error) {
	u := Class(strings.ToUpper(strings.TrimSpace(s)))
	for _, c := range Classes {
		if c == u {
			return c, nil
		}
	}
	names := make([]string, len(Classes))
	for i, c := range Classes {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown class %q (have: %s)", s, strings.Join(names, ", "))
}

// Failure is one failed request as the classifiers see it. Its JSON form is the
// input of `gatectl classify` and of gate/v1 classifier modules.
type Failure struct {
	Status   int               `json:"status"`             // HTTP status; 0 for transport errors
	Headers  map[string]string `json:"headers,omitempty"`  // response headers, one value each
	Body     string            `json:"body,omitempty"`     // response body, bounded by the caller
	Provider string            `json:"provider,omitempty"` // configured provider name
	Model    string            `json:"model,omitempty"`
	// ErrorKind names a transport failure: "timeout", "reset", "refused", "dns", or "".
	ErrorKind string `json:"errorKind,omitempty"`
	// SinceCapacityMs is how long ago this provider last had a capacity failure
	// (rate limit, overload); nil when it has none on record. MISLABELED needs it.
	SinceCapacityMs *int64 `json:"sinceCapacityMs,omitempty"`
}

// Header looks a response header up case-insensitively.
func (f *Failure) Header(name string) string {
	if v, ok := f.Headers[name]; ok {
		return v
	}
	for k, v := range f.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// Verdict is a classifier's answer. Its JSON form is one line of `gatectl classify`.
type Verdict struct {
	Class Class `json:"class"`
	// RetryAfterMs is the provider's wait hint as sent (unclamped); nil when none.
	RetryAfterMs *int64 `json:"retryAfterMs"`
	// Window is the limit's window when it can be told: "minute", "day", "month".
	Window string `json:"window,omitempty"`
	// By names the classifier and rule that decided, e.g. "builtin/openai-insufficient-quota".
	By string `json:"by"`
}

// RetryAfter returns the hint as a duration and whether there is one.
func (v Verdict) RetryAfter() (time.Duration, bool) {
	if v.RetryAfterMs == nil {
		return 0, false
	}
	return time.Duration(*v.RetryAfterMs) * time.Millisecond, true
}

// Classifier is one link of the classifier chain. Classify is called once per failed
// request, concurrently; it abstains by returning decided=false. An error means the
// classifier failed (a trapped plugin, say): the chain logs it and asks the next one.
type Classifier interface {
	Name() string
	Classify(ctx context.Context, f *Failure) (v Verdict, decided bool, err error)
}

// RateLimitSink receives rate-limit feedback. The Ledger implements it: a 429 starts
// the model's cooldown (the hint, or the fallback when retryAfter is 0) and teaches
// the learner. An empty model means the failing model is unknown: the cooldown then
// covers the whole provider.
type RateLimitSink interface {
	RateLimitedBy(now time.Time, provider, model string, sig RateLimit)
}

// Axis names the limit a 429 was about, as far as the caller could tell.
type Axis uint8

const (
	AxisUnknown  Axis = iota // the provider did not say which limit
	AxisTokens               // tokens per window (TPM)
	AxisRequests             // requests per window (RPM)
	// AxisOutputTokens is a limit on output tokens alone (Anthropic's OTPM,
	// and the output limits of Groq, Databricks and Bedrock): a model's
	// output window, apart from its token window (gate/output.go).
	AxisOutputTokens
)

// String names the axis for logs and events.
func (a Axis) String() string {
	switch a {
	case AxisTokens:
		return "tokens"
	case AxisRequests:
		return "requests"
	case AxisOutputTokens:
		return "output-tokens"
	}
	return "unknown"
}

// RateLimit is one 429 as the gate learns from it.
type RateLimit struct {
	// RetryAfter is the cooldown; 0 means none was hinted (the gate's fallback).
	RetryAfter time.Duration
	// Axis is the limit the provider named (wording, headers); AxisUnknown lets
	// the gate judge from its window.
	Axis Axis
	// Admitted is when the gate's entry for the refused call counts from (zero:
	// unknown): its admission, or its send when the caller reported that
	// (gate.Ledger.Sent). The delay from it to the 429 bounds how late the
	// provider counts a call.
	Admitted time.Time
	// Tokens is what the refused call reserved (0: unknown). The provider held
	// less than its limit and this call did not fit: the limit lies between the
	// gate's reading and the reading plus these tokens.
	Tokens int64
	// StatedTokens and StatedRequests are the per-minute limits the 429 stated
	// in its headers or its words (StatedLimits); 0: not stated. The gate adopts them as it
	// adopts the rate-limit headers' limits.
	StatedTokens, StatedRequests int64
	// StatedOutputTokens is the per-minute limit on output tokens alone its
	// headers stated (ReadOutputLimit); 0: none.
	StatedOutputTokens int64
	// OutputInWords is the per-minute limit on output tokens alone its words
	// name (OutputLimitInWords: "… of 8,000 output tokens per minute"); 0:
	// none. A 429 about the output reads it as the limit, where it would read
	// its own window's count.
	OutputInWords int64
	// Unread: nothing of the 429 was read but its status and headers (its body
	// found no room, its client left). It cools the model down and teaches the
	// learner nothing: it may be spent quota or a gateway's refusal.
	Unread bool
}

// Route is one provider/model pair a session can run on.
type Route struct {
	Provider        string `json:"provider"`
	Model           string `json:"model"`
	ReasoningEffort string `json:"reasoningEffort,omitempty"`
}

// String renders the route as "provider/model" (plus "@effort" when set).
func (r Route) String() string {
	s := r.Provider + "/" + r.Model
	if r.ReasoningEffort != "" {
		s += "@" + r.ReasoningEffort
	}
	return s
}

// WindowReading is one named allowance of a balance reading, e.g. a weekly budget.
type WindowReading struct {
	Name      string   `json:"name"`
	Remaining float64  `json:"remaining"`
	Capacity  *float64 `json:"capacity,omitempty"`
}

// Reading is what a balance source reports (the balance script contract of DESIGN.md).
type Reading struct {
	Remaining *float64        `json:"remaining,omitempty"`
	Windows   []WindowReading `json:"windows,omitempty"`
	ResetsAt  string          `json:"resetsAt,omitempty"`
	Error     string          `json:"error,omitempty"`
	// TakenAt is when the host took the reading (not part of the script contract).
	TakenAt time.Time `json:"-"`
}

// BalanceSource reads a provider's remaining balance. Read is called when a reading
// is due, bounded by ctx; an error is a missing reading, never a blocked request.
type BalanceSource interface {
	Read(ctx context.Context) (Reading, error)
}

// Scorer turns a route's reading into a draw weight. scored=false means the reading
// cannot be scored (the route is then unscored, see the pools).
type Scorer interface {
	Score(ctx context.Context, r Reading, capacities map[string]float64, coefficients map[string]float64, capacity *float64) (score float64, scored bool, err error)
}
