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
	}
	for _, c := range cases {
		if got := RateLimitAxis(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
