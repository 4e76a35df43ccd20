package engine

import (
	"net/http"
	"testing"
)

func TestReadRateLimitHeaders(t *testing.T) {
	cases := []struct {
		name string
		h    map[string]string
		want HeaderLimits
	}{
		{"none", nil, HeaderLimits{-1, -1, -1, -1}},
		{"openai", map[string]string{"X-Ratelimit-Limit-Tokens": "30000", "X-Ratelimit-Remaining-Tokens": "29000", "X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "499"}, HeaderLimits{30000, 29000, 500, 499}},
		{"a float", map[string]string{"X-Ratelimit-Limit-Tokens": "30000.0", "X-Ratelimit-Remaining-Tokens": "1.5"}, HeaderLimits{30000, 1, -1, -1}},
		{"groq's requests per day", map[string]string{"X-Ratelimit-Limit-Tokens": "6000", "X-Ratelimit-Reset-Tokens": "7.66s", "X-Ratelimit-Limit-Requests": "14400", "X-Ratelimit-Reset-Requests": "2m59.56s"}, HeaderLimits{6000, -1, -1, -1}},
		{"anthropic", map[string]string{"Anthropic-Ratelimit-Tokens-Limit": "80000", "Anthropic-Ratelimit-Tokens-Remaining": "79000", "Anthropic-Ratelimit-Input-Tokens-Limit": "40000", "Anthropic-Ratelimit-Requests-Limit": "50", "Anthropic-Ratelimit-Requests-Remaining": "49"}, HeaderLimits{80000, 79000, 50, 49}},
		{"anthropic's input tokens alone", map[string]string{"Anthropic-Ratelimit-Input-Tokens-Limit": "40000", "Anthropic-Ratelimit-Input-Tokens-Remaining": "100"}, HeaderLimits{40000, 100, -1, -1}},
		{"openai's first", map[string]string{"X-Ratelimit-Limit-Tokens": "30000", "Anthropic-Ratelimit-Tokens-Limit": "80000"}, HeaderLimits{30000, -1, -1, -1}},
		{"out of range", map[string]string{"X-Ratelimit-Limit-Tokens": "2000000000000", "X-Ratelimit-Limit-Requests": "0"}, HeaderLimits{-1, -1, -1, -1}},
		{"garbage", map[string]string{"X-Ratelimit-Limit-Tokens": "lots", "X-Ratelimit-Limit-Requests": "-5"}, HeaderLimits{-1, -1, -1, -1}},
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		if got := ReadRateLimitHeaders(h.Get); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
