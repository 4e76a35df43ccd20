package engine

import "strings"

// RateLimitAxis reads which limit a 429 was about from the provider's own
// evidence: a remaining-count header at zero, else the wording of the message.
// It answers AxisUnknown when neither says, or when both limits are named —
// the gate then judges from its window. f may be nil.
func RateLimitAxis(f *Failure) Axis {
	if f == nil {
		return AxisUnknown
	}
	tokens := zeroHeader(f, "x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining",
		"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-output-tokens-remaining")
	requests := zeroHeader(f, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
	switch {
	case tokens && !requests:
		return AxisTokens
	case requests && !tokens:
		return AxisRequests
	}
	body := strings.ToLower(f.Body)
	t := containsAny(body, tokenWords)
	r := containsAny(body, requestWords)
	switch {
	case t && !r:
		return AxisTokens
	case r && !t:
		return AxisRequests
	}
	return AxisUnknown
}

// The wording providers use for each limit, lowercased. "Too many requests"
// is not here: it names the status, not the limit.
var (
	tokenWords = []string{"tokens per min", "tokens per minute", "(tpm)", " tpm", "tpm:", "token rate limit",
		"input tokens per", "output tokens per", "tokens per day", "每分钟token", "token数", "tpm限制", "令牌"}
	requestWords = []string{"requests per min", "requests per minute", "(rpm)", " rpm", "rpm:", "request rate limit",
		"requests per day", "每分钟请求", "请求数", "请求次数", "rpm限制", "qps", "queries per minute", "queries per second"}
)

func zeroHeader(f *Failure, names ...string) bool {
	for _, n := range names {
		if v := strings.TrimSpace(f.Header(n)); v == "0" {
			return true
		}
	}
	return false
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
