package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// statedLimits are the rate limits a provider states in its response headers.
// A field is -1 when not sent (or not per minute).
type statedLimits struct {
	limitTokens, remainingTokens     int64
	limitRequests, remainingRequests int64
}

// any reports whether a limit was stated.
func (l statedLimits) any() bool { return l.limitTokens > 0 || l.limitRequests > 0 }

// rateLimitHeaders reads OpenAI-style x-ratelimit-{limit,remaining,reset}-{tokens,requests}
// (OpenAI, Groq, DeepSeek, OpenRouter, Mistral, …) and Anthropic's
// anthropic-ratelimit-{tokens,input-tokens,requests}-{limit,remaining,reset}.
// A limit whose reset is more than a minute away is not a per-minute limit (Groq
// states requests per day there) and is skipped.
func rateLimitHeaders(h http.Header) statedLimits {
	l := statedLimits{-1, -1, -1, -1}
	if h.Get("X-Ratelimit-Limit-Tokens") != "" || h.Get("X-Ratelimit-Limit-Requests") != "" {
		if perMinute(h.Get("X-Ratelimit-Reset-Tokens")) {
			l.limitTokens, l.remainingTokens = headerInt(h, "X-Ratelimit-Limit-Tokens"), headerInt(h, "X-Ratelimit-Remaining-Tokens")
		}
		if perMinute(h.Get("X-Ratelimit-Reset-Requests")) {
			l.limitRequests, l.remainingRequests = headerInt(h, "X-Ratelimit-Limit-Requests"), headerInt(h, "X-Ratelimit-Remaining-Requests")
		}
		return l
	}
	// Anthropic's limits are per minute; tokens-* is the tightest of its input and
	// output limits, input-tokens-* the one admission mostly spends.
	if v := headerInt(h, "Anthropic-Ratelimit-Tokens-Limit"); v > 0 {
		l.limitTokens, l.remainingTokens = v, headerInt(h, "Anthropic-Ratelimit-Tokens-Remaining")
	} else if v := headerInt(h, "Anthropic-Ratelimit-Input-Tokens-Limit"); v > 0 {
		l.limitTokens, l.remainingTokens = v, headerInt(h, "Anthropic-Ratelimit-Input-Tokens-Remaining")
	}
	l.limitRequests, l.remainingRequests = headerInt(h, "Anthropic-Ratelimit-Requests-Limit"), headerInt(h, "Anthropic-Ratelimit-Requests-Remaining")
	return l
}

func headerInt(h http.Header, k string) int64 {
	v := strings.TrimSpace(h.Get(k))
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f < 0 {
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
