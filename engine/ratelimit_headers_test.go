package engine

import (
	"net/http"
	"testing"
	"time"
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
		// tokens-* is the tightest limit, here the output one: the window counts input against input-tokens-*.
		{"anthropic", map[string]string{"Anthropic-Ratelimit-Tokens-Limit": "80000", "Anthropic-Ratelimit-Tokens-Remaining": "79000", "Anthropic-Ratelimit-Input-Tokens-Limit": "400000", "Anthropic-Ratelimit-Input-Tokens-Remaining": "395000", "Anthropic-Ratelimit-Output-Tokens-Limit": "80000", "Anthropic-Ratelimit-Requests-Limit": "50", "Anthropic-Ratelimit-Requests-Remaining": "49"}, HeaderLimits{400000, 395000, 50, 49}},
		{"anthropic's tokens alone", map[string]string{"Anthropic-Ratelimit-Tokens-Limit": "80000", "Anthropic-Ratelimit-Tokens-Remaining": "79000"}, HeaderLimits{80000, 79000, -1, -1}},
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

func TestReadTokenReset(t *testing.T) {
	cases := []struct {
		name string
		h    map[string]string
		want TokenReset
		ok   bool
	}{
		{"none", nil, TokenReset{}, false},
		{"openai, to the millisecond", map[string]string{"X-Ratelimit-Reset-Tokens": "29.75s"}, TokenReset{In: 29750 * time.Millisecond}, true},
		{"openai, in milliseconds", map[string]string{"X-Ratelimit-Reset-Tokens": "20ms"}, TokenReset{In: 20 * time.Millisecond}, true},
		{"openai, whole seconds", map[string]string{"X-Ratelimit-Reset-Tokens": "1m0s"}, TokenReset{In: time.Minute, Coarse: true}, true},
		{"more than a minute: a daily limit's", map[string]string{"X-Ratelimit-Reset-Tokens": "2m59.56s"}, TokenReset{}, false},
		{"garbage", map[string]string{"X-Ratelimit-Reset-Tokens": "soon"}, TokenReset{}, false},
		{"negative", map[string]string{"X-Ratelimit-Reset-Tokens": "-1s"}, TokenReset{}, false},
		{"anthropic, whole seconds", map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "2026-12-04T10:01:00Z"}, TokenReset{At: time.Date(2026, 12, 4, 10, 1, 0, 0, time.UTC), Coarse: true}, true},
		{"anthropic, fractional", map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "2026-12-04T10:00:59.5Z"}, TokenReset{At: time.Date(2026, 12, 4, 10, 0, 59, 500_000_000, time.UTC)}, true},
		{"anthropic's input tokens", map[string]string{"Anthropic-Ratelimit-Input-Tokens-Reset": "2026-12-04T10:01:00Z"}, TokenReset{At: time.Date(2026, 12, 4, 10, 1, 0, 0, time.UTC), Coarse: true}, true},
		{"anthropic's input tokens first", map[string]string{"Anthropic-Ratelimit-Input-Tokens-Reset": "2026-12-04T10:01:00Z", "Anthropic-Ratelimit-Tokens-Reset": "2026-12-04T10:00:30Z"}, TokenReset{At: time.Date(2026, 12, 4, 10, 1, 0, 0, time.UTC), Coarse: true}, true},
		{"anthropic, not a time", map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "tomorrow"}, TokenReset{}, false},
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		got, ok := ReadTokenReset(h.Get)
		if !got.At.Equal(c.want.At) || got.In != c.want.In || got.Coarse != c.want.Coarse || ok != c.ok {
			t.Errorf("%s: %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// A duration counts from the provider's stating, somewhere between the call's
// send and its answer; an instant is itself.
func TestTokenResetBetween(t *testing.T) {
	sent := time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC)
	now := sent.Add(2 * time.Second)
	e, l := TokenReset{In: 10 * time.Second}.Between(sent, now)
	if !e.Equal(sent.Add(10*time.Second)) || !l.Equal(now.Add(10*time.Second)) {
		t.Errorf("a duration: [%v, %v]", e, l)
	}
	if e, l := (TokenReset{In: time.Second}).Between(time.Time{}, now); !e.Equal(now.Add(time.Second)) || !l.Equal(e) {
		t.Errorf("a duration, the send unknown: [%v, %v], want both from now", e, l)
	}
	at := now.Add(28 * time.Second)
	if e, l := (TokenReset{At: at}).Between(sent, now); !e.Equal(at) || !l.Equal(at) {
		t.Errorf("an instant: [%v, %v]", e, l)
	}
}
