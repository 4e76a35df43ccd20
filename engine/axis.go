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
	// Anthropic states its output limit apart (OTPM): at zero there, with
	// its input and request counts left, the 429 was about the output. Its
	// anthropic-ratelimit-tokens-* is the tighter of the two token limits, at
	// zero whenever either is: it names the axis only for an upstream that
	// states nothing else.
	output := zeroHeader(f, "anthropic-ratelimit-output-tokens-remaining")
	split := f.Header("anthropic-ratelimit-input-tokens-remaining") != "" || f.Header("anthropic-ratelimit-output-tokens-remaining") != ""
	tokens := zeroHeader(f, "x-ratelimit-remaining-tokens", "anthropic-ratelimit-input-tokens-remaining") ||
		(!split && zeroHeader(f, "anthropic-ratelimit-tokens-remaining"))
	requests := zeroHeader(f, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
	switch {
	case output && !tokens && !requests:
		return AxisOutputTokens
	case (tokens || output) && !requests:
		return AxisTokens
	case requests && !tokens && !output:
		return AxisRequests
	}
	body := strings.ToLower(f.Body)
	o := containsAny(body, outputWords) || hasWord(body, "otpm")
	// Token words besides the output ones; "input and output tokens per
	// minute" is one limit on both.
	t := containsAny(blankOutputWords.Replace(body), tokenWords) || containsAny(body, bothWords)
	r := containsAny(body, requestWords)
	switch {
	case o && !t && !r:
		return AxisOutputTokens
	case (t || o) && !r:
		return AxisTokens
	case r && !t && !o:
		return AxisRequests
	}
	return AxisUnknown
}

// The wording providers use for each limit, lowercased. "Too many requests"
// is not here: it names the status, not the limit.
var (
	// outputWords name a limit on output tokens alone: "8,000 output tokens
	// per minute" (Anthropic), "output tokens per minute (OTPM)", "OTPM: …".
	outputWords = []string{"output tokens per", "输出token", "输出令牌"} // and the word "otpm" (hasWord)
	bothWords   = []string{"input and output tokens", "input + output tokens", "input/output tokens"}
	tokenWords  = []string{"tokens per min", "tokens per minute", "(tpm)", " tpm", "tpm:", "token rate limit",
		"input tokens per", "tokens per day", "每分钟token", "token数", "tpm限制", "令牌"}
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

// blankOutputWords takes the output words out of a message, so that the token
// words found in what is left name another token limit.
var blankOutputWords = func() *strings.Replacer {
	pairs := make([]string, 0, 2*len(outputWords)+2)
	for _, w := range append([]string{"otpm"}, outputWords...) {
		pairs = append(pairs, w, " ")
	}
	return strings.NewReplacer(pairs...)
}()

// hasWord reports whether s holds w between non-letters (or its ends): "otpm"
// in "OTPM: 8000" but not inside an identifier that happens to contain it.
func hasWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isWordByte(s[j-1])
		after := j+len(w) == len(s) || !isWordByte(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
