package engine

import (
	"regexp"
	"strconv"
	"strings"
)

// StatedLimits reads the per-minute limits a provider states in the words of a
// 429, for the gate to adopt as it adopts a stated limit from the rate-limit
// headers. A proxy or a harness's failure report often drops the headers and
// keeps the body; OpenAI (and Groq, and the OpenAI-compatible providers that
// copy its wording) name the limit there:
//
//	… on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. …
//	… on requests per min (RPM): Limit 500, Used 500, Requested 1. …
//	… on tokens per min. Limit: 10000 / min. …
//
// and Moonshot's wording:
//
//	… request reached organization TPM rate limit, current: 1410, limit: 32000 …
//
// 0 means the wording states no such limit. Limits over a day (TPD, RPD) are
// not a window's and are never read; neither are figures that do not parse as
// a positive count.
func StatedLimits(f *Failure) (tokensPerMinute, requestsPerMinute int64) {
	if f == nil || f.Body == "" {
		return 0, 0
	}
	for _, m := range statedPerMinute.FindAllStringSubmatch(f.Body, 4) {
		tokensPerMinute, requestsPerMinute = takeStated(m[1], m[2], tokensPerMinute, requestsPerMinute)
	}
	for _, m := range statedCurrentLimit.FindAllStringSubmatch(f.Body, 4) {
		tokensPerMinute, requestsPerMinute = takeStated(m[1], m[2], tokensPerMinute, requestsPerMinute)
	}
	return tokensPerMinute, requestsPerMinute
}

var (
	// "tokens per min (TPM): Limit 30000", "tokens per minute (TPM): Limit
	// 5000", "requests per min. Limit: 3 / min" — with any white space between
	// the words: Groq's message wraps its lines.
	statedPerMinute = regexp.MustCompile(`(?i)\b(tokens|requests)\s+per\s+min(?:ute)?\b(?:\s*\((?:tpm|rpm)\))?\s*[:.]\s*limit:?\s*([0-9][0-9,]*)`)
	// "TPM rate limit, current: 1410, limit: 32000".
	statedCurrentLimit = regexp.MustCompile(`(?i)\b(tpm|rpm)\s+rate\s+limit,\s*current:\s*[0-9,]+,\s*limit:\s*([0-9][0-9,]*)`)
)

// takeStated files one stated figure under its axis (the first figure of an
// axis wins: a message that names one limit twice means the same one).
func takeStated(axis, figure string, tokens, requests int64) (int64, int64) {
	n, err := strconv.ParseInt(strings.ReplaceAll(figure, ",", ""), 10, 64)
	if err != nil || n <= 0 {
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
