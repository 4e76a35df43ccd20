package engine

import "testing"

func TestRateLimitAxis(t *testing.T) {
	cases := []struct {
		name string
		f    *Failure
		want Axis
	}{
		{"nil", nil, AxisUnknown},
		{"openai tpm", &Failure{Status: 429, Body: `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500."}}`}, AxisTokens},
		{"openai rpm", &Failure{Status: 429, Body: `{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, Used 500, Requested 1."}}`}, AxisRequests},
		{"header says requests", &Failure{Status: 429, Headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "1200"}}, AxisRequests},
		{"header says tokens", &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-input-tokens-remaining": "0"}}, AxisTokens},
		{"chinese requests", &Failure{Status: 429, Body: "您的请求次数已超过每分钟请求限制"}, AxisRequests},
		{"too many requests names no limit", &Failure{Status: 429, Body: "Too Many Requests"}, AxisUnknown},
		{"both named", &Failure{Status: 429, Body: "limits: 100 requests per minute and 10000 tokens per minute"}, AxisUnknown},
		// A limit on output tokens alone (Anthropic's OTPM): its own axis.
		{"anthropic's whole header set, the output at zero", &Failure{Status: 429, Headers: map[string]string{
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-remaining": "38000",
			"anthropic-ratelimit-output-tokens-remaining": "0", "anthropic-ratelimit-requests-remaining": "49"},
			Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (org-x) of 8,000 output tokens per minute."}}`}, AxisOutputTokens},
		{"anthropic's whole header set, the input at zero", &Failure{Status: 429, Headers: map[string]string{
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-remaining": "0",
			"anthropic-ratelimit-output-tokens-remaining": "7000", "anthropic-ratelimit-requests-remaining": "49"}}, AxisTokens},
		{"anthropic's combined tokens alone", &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-tokens-remaining": "0"}}, AxisTokens},
		{"a combined limit on input and output", &Failure{Status: 429, Body: "Rate limit of 100,000 input and output tokens per minute exceeded"}, AxisTokens},
		{"otpm inside an identifier", &Failure{Status: 429, Body: `{"error":"rate limited on tokens per min","request_id":"req_xotpmz"}`}, AxisTokens},
		{"otpm with a colon", &Failure{Status: 429, Body: `{"error":"OTPM: limit 8000, used 7900"}`}, AxisOutputTokens},
		{"anthropic otpm header", &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-output-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-remaining": "38000", "anthropic-ratelimit-requests-remaining": "49"}}, AxisOutputTokens},
		{"anthropic otpm words", &Failure{Status: 429, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (org-x) of 8,000 output tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}`}, AxisOutputTokens},
		{"anthropic itpm words", &Failure{Status: 429, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (org-x) of 40,000 input tokens per minute."}}`}, AxisTokens},
		{"otpm named", &Failure{Status: 429, Body: "Rate limit reached on output tokens per minute (OTPM): Limit 8000"}, AxisOutputTokens},
		{"input and output both at zero", &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-output-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-remaining": "0"}}, AxisTokens},
		{"output and requests at zero", &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-output-tokens-remaining": "0", "anthropic-ratelimit-requests-remaining": "0"}}, AxisUnknown},
		{"output and tokens words", &Failure{Status: 429, Body: "over 8000 output tokens per minute and 40000 tokens per minute"}, AxisTokens},
		{"chinese output", &Failure{Status: 429, Body: "每分钟输出token数超过限制"}, AxisOutputTokens},
	}
	for _, c := range cases {
		if got := RateLimitAxis(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReadOutputLimit(t *testing.T) {
	get := func(h map[string]string) func(string) string {
		return func(k string) string { return h[k] }
	}
	if got := ReadOutputLimit(get(map[string]string{"Anthropic-Ratelimit-Output-Tokens-Limit": "16000"})); got != 16000 {
		t.Fatalf("ReadOutputLimit = %d, want 16000", got)
	}
	for _, v := range []string{"", "0", "-5", "x", "2000000000000"} {
		if got := ReadOutputLimit(get(map[string]string{"Anthropic-Ratelimit-Output-Tokens-Limit": v})); got != -1 {
			t.Errorf("ReadOutputLimit(%q) = %d, want -1", v, got)
		}
	}
	f := &Failure{Status: 429, Headers: map[string]string{"anthropic-ratelimit-output-tokens-limit": "8000"}}
	if got := StatedOutputLimit(f); got != 8000 {
		t.Fatalf("StatedOutputLimit = %d, want 8000", got)
	}
	if got := StatedOutputLimit(nil); got != 0 {
		t.Fatalf("StatedOutputLimit(nil) = %d, want 0", got)
	}
}

func TestOutputLimitInWords(t *testing.T) {
	for body, want := range map[string]int64{
		`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (0dccdde6-f924-4f1b-bb3b-92ef846e0a5b) of 8,000 output tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}`: 8000,
		`This request would exceed your organization's rate limit of 16,000 output tokens per minute (org: 5456025a, model: claude-sonnet-4-20250514). For details…`:                                                                                                                   16000,
		`… of 40,000 input tokens per minute. …`:            0, // the input limit, not the output's
		`… of 8k output tokens per minute`:                  0, // a figure that runs into a unit
		`rate limit exceeded`:                               0,
		`… of 99999999999999999 output tokens per minute …`: 0, // out of range
	} {
		if got := OutputLimitInWords(&Failure{Body: body}); got != want {
			t.Errorf("OutputLimitInWords(%.60q) = %d, want %d", body, got, want)
		}
	}
	if got := OutputLimitInWords(nil); got != 0 {
		t.Errorf("OutputLimitInWords(nil) = %d", got)
	}
}
