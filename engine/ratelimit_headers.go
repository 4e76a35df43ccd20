package engine

import (
	"strconv"
	"strings"
	"time"
)

// HeaderLimits are the rate limits a provider states in its response headers,
// per minute. A field is -1 when not sent (or not per minute).
type HeaderLimits struct {
	LimitTokens, RemainingTokens     int64
	LimitRequests, RemainingRequests int64
}

// Any reports whether a limit was stated.
func (l HeaderLimits) Any() bool { return l.LimitTokens > 0 || l.LimitRequests > 0 }

// ReadRateLimitHeaders reads OpenAI-style x-ratelimit-{limit,remaining,reset}-{tokens,requests}
// (OpenAI, Groq, DeepSeek, OpenRouter, Mistral, …) and Anthropic's
// anthropic-ratelimit-{tokens,input-tokens,requests}-{limit,remaining,reset}
// through get (a header lookup, case-insensitive). A limit whose reset is more
// than a minute away is not a per-minute limit (Groq states requests per day
// there) and is skipped; so is a limit outside [1, MaxStatedLimit].
func ReadRateLimitHeaders(get func(name string) string) (l HeaderLimits) {
	l = HeaderLimits{-1, -1, -1, -1}
	defer func() {
		if !statedInRange(l.LimitTokens) {
			l.LimitTokens, l.RemainingTokens = -1, -1
		}
		if !statedInRange(l.LimitRequests) {
			l.LimitRequests, l.RemainingRequests = -1, -1
		}
	}()
	if get("X-Ratelimit-Limit-Tokens") != "" || get("X-Ratelimit-Limit-Requests") != "" {
		if perMinute(get("X-Ratelimit-Reset-Tokens")) {
			l.LimitTokens, l.RemainingTokens = headerInt(get, "X-Ratelimit-Limit-Tokens"), headerInt(get, "X-Ratelimit-Remaining-Tokens")
		}
		if perMinute(get("X-Ratelimit-Reset-Requests")) {
			l.LimitRequests, l.RemainingRequests = headerInt(get, "X-Ratelimit-Limit-Requests"), headerInt(get, "X-Ratelimit-Remaining-Requests")
		}
		return l
	}
	// Anthropic's limits are per minute. input-tokens-* is its input limit
	// (ITPM), what the window counts for it (input and cache writes; see
	// server/usage.go); tokens-* is whichever of its input and output limits
	// is tightest, usually the far smaller output one (OTPM): read as the
	// window's limit, it held the gate to a fraction of the input allowance.
	// It is the fallback for an upstream that states only that.
	if v := headerInt(get, "Anthropic-Ratelimit-Input-Tokens-Limit"); statedInRange(v) {
		l.LimitTokens, l.RemainingTokens = v, headerInt(get, "Anthropic-Ratelimit-Input-Tokens-Remaining")
	} else if v := headerInt(get, "Anthropic-Ratelimit-Tokens-Limit"); v > 0 {
		l.LimitTokens, l.RemainingTokens = v, headerInt(get, "Anthropic-Ratelimit-Tokens-Remaining")
	}
	l.LimitRequests, l.RemainingRequests = headerInt(get, "Anthropic-Ratelimit-Requests-Limit"), headerInt(get, "Anthropic-Ratelimit-Requests-Remaining")
	return l
}

// ReadOutputLimit reads the limit on output tokens alone that Anthropic states
// per minute (anthropic-ratelimit-output-tokens-limit, its OTPM) through get;
// -1 when not sent or outside [1, MaxStatedLimit].
func ReadOutputLimit(get func(name string) string) int64 {
	if v := headerInt(get, "Anthropic-Ratelimit-Output-Tokens-Limit"); statedInRange(v) {
		return v
	}
	return -1
}

// StatedOutputLimit is ReadOutputLimit of a failure's headers, 0 when it
// states none (or f is nil).
func StatedOutputLimit(f *Failure) int64 {
	if f == nil {
		return 0
	}
	return max(0, ReadOutputLimit(f.Header))
}

func headerInt(get func(string) string, k string) int64 {
	v := strings.TrimSpace(get(k))
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || !(f >= 0 && f <= MaxStatedLimit) { // NaN too
			return -1
		}
		return int64(f)
	}
	return n
}

// perMinute reports whether a reset value ("1s", "6m0s", "59.5s", or absent) is
// within a minute.
func perMinute(reset string) bool {
	reset = strings.TrimSpace(reset)
	if reset == "" {
		return true
	}
	d, err := time.ParseDuration(reset)
	if err != nil {
		return true // an unparsable reset says nothing about the period
	}
	return d <= time.Minute
}

// TokenReset is when a provider says its token count restarts — or, for one
// that refills continuously, is whole again.
type TokenReset struct {
	// In is how long from the provider's stating (OpenAI-style
	// x-ratelimit-reset-tokens: "59s", "1.5s", "20ms"); At is an instant
	// instead (anthropic-ratelimit-tokens-reset, RFC 3339), when set.
	In time.Duration
	At time.Time
	// Coarse: the figure is in whole seconds, so the instant is known to a
	// second only.
	Coarse bool
}

// Between is the span the instant lies in, for an answer to a call sent at
// sent and received at now: a duration counts from when the provider stated
// it, at some moment between the two.
func (r TokenReset) Between(sent, now time.Time) (earliest, latest time.Time) {
	if !r.At.IsZero() {
		return r.At, r.At
	}
	if sent.IsZero() || sent.After(now) {
		sent = now
	}
	return sent.Add(r.In), now.Add(r.In)
}

// ReadTokenReset reads the token reset of an answer's headers through get:
// x-ratelimit-reset-tokens, else anthropic-ratelimit-input-tokens-reset (else
// its tokens one). ok is false when none was stated, it is unreadable, or a
// duration is negative or longer than a minute (not a per-minute limit's).
func ReadTokenReset(get func(name string) string) (r TokenReset, ok bool) {
	if v := strings.TrimSpace(get("X-Ratelimit-Reset-Tokens")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Minute {
			return TokenReset{}, false
		}
		return TokenReset{In: d, Coarse: d%time.Second == 0}, true
	}
	v := strings.TrimSpace(get("Anthropic-Ratelimit-Input-Tokens-Reset")) // the limit ReadRateLimitHeaders reads
	if v == "" {
		v = strings.TrimSpace(get("Anthropic-Ratelimit-Tokens-Reset"))
	}
	if v == "" {
		return TokenReset{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return TokenReset{}, false
	}
	return TokenReset{At: t, Coarse: t.Nanosecond() == 0}, true
}
