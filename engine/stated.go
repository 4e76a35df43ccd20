package engine

import (
	"regexp"
	"strconv"
	"strings"
)

// MaxStatedLimit bounds a limit read from a provider (per minute): a figure
// above it is not a limit but a garbled or hostile one, and adopted it would
// overflow the gate's arithmetic. The largest published tiers are around 10⁸
// tokens per minute.
const MaxStatedLimit = 1e12

// StatedLimits reads the per-minute limits a provider states in a 429, for the
// gate to adopt as a stated limit: its x-ratelimit-limit-* (or Anthropic's)
// headers, and else its words. A proxy or a harness's failure report often drops
// the headers and keeps the body; OpenAI (and Groq, and the OpenAI-compatible
// providers that copy its wording) name the limit there:
//
//	… on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. …
//	… on requests per min (RPM): Limit 500, Used 500, Requested 1. …
//	… on tokens per min. Limit: 10000 / min. …
//
// and Moonshot's words:
//
//	… request reached organization TPM rate limit, current: 1410, limit: 32000 …
//	… request reached max RPM: 3, please try again after 1 seconds …
//
// 0 means the 429 states no such limit. Limits over a day (TPD, RPD) are not a
// window's and are never read; a limit of only input or output tokens is not
// the whole call's; a figure outside [1, MaxStatedLimit], or one that runs into
// a unit ("30k", "1.5M"), is not read either.
func StatedLimits(f *Failure) (tokensPerMinute, requestsPerMinute int64) {
	if f == nil {
		return 0, 0
	}
	h := ReadRateLimitHeaders(f.Header)
	tokensPerMinute, requestsPerMinute = max(0, h.LimitTokens), max(0, h.LimitRequests)
	if f.Body == "" || (tokensPerMinute > 0 && requestsPerMinute > 0) {
		return tokensPerMinute, requestsPerMinute
	}
	for _, re := range statedWordings {
		for _, m := range re.FindAllStringSubmatchIndex(f.Body, 4) {
			if inputOrOutput(f.Body[:m[2]]) {
				continue // "input tokens per minute": not the whole call's limit
			}
			axis, figure := f.Body[m[2]:m[3]], f.Body[m[4]:m[5]]
			tokensPerMinute, requestsPerMinute = takeStated(axis, figure, tokensPerMinute, requestsPerMinute)
		}
	}
	return tokensPerMinute, requestsPerMinute
}

// statedWordings: submatch 1 is the axis, 2 the figure. A figure must end where
// a number ends (not "30k", not "1.5M").
var statedWordings = []*regexp.Regexp{
	// "tokens per min (TPM): Limit 30000", "tokens per minute (TPM): Limit
	// 5000", "requests per min. Limit: 3 / min" — with any white space between
	// the words, as a wrapped message has.
	regexp.MustCompile(`(?i)\b(tokens|requests)\s+per\s+min(?:ute)?\b(?:\s*\((?:tpm|rpm)\))?\s*[:.]\s*limit:?\s*([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:[^\p{L}\p{N}_.,]|[.,](?:[^\p{N}]|$)|$)`),
	// "TPM rate limit, current: 1410, limit: 32000".
	regexp.MustCompile(`(?i)\b(tpm|rpm)\s+rate\s+limit,\s*current:\s*[0-9,]+,\s*limit:\s*([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:[^\p{L}\p{N}_.,]|[.,](?:[^\p{N}]|$)|$)`),
	// "max RPM: 3".
	regexp.MustCompile(`(?i)\bmax\s+(tpm|rpm):\s*([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:[^\p{L}\p{N}_.,]|[.,](?:[^\p{N}]|$)|$)`),
}

// inputOrOutput reports whether the text before an axis word ends in "input",
// "output", "prompt" or "completion" ("input-tokens", "prompt_tokens" too): a
// limit of one side of the call.
func inputOrOutput(before string) bool {
	w := strings.Fields(strings.ToLower(before))
	if len(w) == 0 {
		return false
	}
	last := strings.TrimRight(w[len(w)-1], "-_")     // "input-" of "input-tokens"
	last = last[strings.LastIndexAny(last, "-_")+1:] // "prompt" of "max_prompt"
	last = strings.Trim(last, "\"'`(")
	switch last {
	case "input", "output", "prompt", "completion":
		return true
	}
	return false
}

// statedFigure is a stated figure ("30,000") as a limit the gate may adopt;
// 0 when it is out of range.
func statedFigure(figure string) int64 {
	n, err := strconv.ParseInt(strings.ReplaceAll(figure, ",", ""), 10, 64)
	if err != nil || !statedInRange(n) {
		return 0
	}
	return n
}

// statedInRange: a stated limit the gate may adopt.
func statedInRange(n int64) bool { return n >= 1 && n <= MaxStatedLimit }

// takeStated files one stated figure under its axis (the first figure of an
// axis wins: a message that names one limit twice means the same one).
func takeStated(axis, figure string, tokens, requests int64) (int64, int64) {
	n := statedFigure(figure)
	if n == 0 {
		return tokens, requests
	}
	switch strings.ToLower(axis) {
	case "tokens", "tpm":
		if tokens == 0 {
			tokens = n
		}
	case "requests", "rpm":
		if requests == 0 {
			requests = n
		}
	}
	return tokens, requests
}

// OutputLimitInWords reads the per-minute output-token limit a 429's words
// name, as Anthropic words it when a call would pass its OTPM:
//
//	… exceed the rate limit for your organization (…) of 8,000 output tokens per minute. …
//	… exceed your organization's rate limit of 8,000 output tokens per minute (org: …, model: …). …
//
// 0 when the words name none (or a figure outside [1, MaxStatedLimit], or one
// that runs into a unit). A proxy or a harness's failure report often keeps
// only the body; the headers' figure (StatedOutputLimit) is the provider's
// word where both are there.
func OutputLimitInWords(f *Failure) int64 {
	if f == nil || f.Body == "" {
		return 0
	}
	if m := outputInWords.FindStringSubmatch(f.Body); m != nil {
		return statedFigure(m[1])
	}
	return 0
}

var outputInWords = regexp.MustCompile(`(?i)\bof\s+([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)\s+output\s+tokens\s+per\s+min(?:ute)?\b`)
