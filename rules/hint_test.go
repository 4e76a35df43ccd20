package rules

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

func TestParseHint(t *testing.T) {
	h := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		want    int64 // -1: no hint
	}{
		// Headers.
		{"retry-after seconds", 429, h("Retry-After", "28"), "", 28000},
		{"retry-after zero", 429, h("retry-after", "0"), "", 0},
		{"retry-after fractional", 429, h("retry-after", "1.5"), "", 1500},
		{"retry-after http date vs Date header", 503, h("Date", "Sun, 01 Mar 2026 12:00:00 GMT", "Retry-After", "Sun, 01 Mar 2026 12:00:45 GMT"), "", 45000},
		{"retry-after http date vs now", 503, h("Retry-After", "Sun, 01 Mar 2026 12:00:10 GMT"), "", 10000},
		{"retry-after date in the past is zero", 503, h("Retry-After", "Sun, 01 Mar 2026 11:00:00 GMT"), "", 0},
		{"retry-after garbage falls through to body", 429, h("Retry-After", "soon"), "try again in 2s", 2000},
		{"retry-after-ms", 429, h("retry-after-ms", "644"), "", 644},
		{"retry-after-ms beats retry-after", 429, h("retry-after", "1", "retry-after-ms", "644.4"), "", 644},
		{"x-ms-retry-after-ms", 429, h("X-Ms-Retry-After-Ms", "2400"), "", 2400},
		{"reset requests Go duration", 429, h("x-ratelimit-reset-requests", "6m0s"), "", 360000},
		{"reset tokens ms", 429, h("x-ratelimit-reset-tokens", "12ms"), "", 12},
		{"reset float seconds", 429, h("x-ratelimit-reset-tokens", "1.984999999s"), "", 1985},
		{"reset: the longest on a 429", 429, h("x-ratelimit-reset-tokens", "12ms", "x-ratelimit-reset-requests", "1s"), "", 1000},
		{"reset: the bucket with the least of its limit left", 429, h("x-ratelimit-limit-requests", "200", "x-ratelimit-remaining-requests", "57", "x-ratelimit-reset-requests", "17h9m36s",
			"x-ratelimit-limit-tokens", "40000", "x-ratelimit-remaining-tokens", "63", "x-ratelimit-reset-tokens", "1m29.9s"), "", 89900},
		{"reset headers yield to the body's own wait", 429, h("x-ratelimit-remaining-tokens", "63", "x-ratelimit-reset-tokens", "1m29.9s"),
			"Rate limit reached for gpt-4o-mini on tokens per min (TPM): Limit 40000, Used 39937, Requested 385. Please try again in 483ms.", 483},
		{"retry-after beats the body", 429, h("retry-after", "8"), "Please try again in 7.66s.", 8000},
		{"a negative retry-after-ms is no statement", 429, h("retry-after-ms", "-100", "retry-after", "20"), "", 20000},
		{"reset: the empty bucket wins", 429, h("x-ratelimit-reset-tokens", "12ms", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-requests", "1s", "x-ratelimit-remaining-requests", "5"), "", 12},
		{"reset ignored on a 500 with full buckets", 500, h("x-ratelimit-reset-requests", "6m0s", "x-ratelimit-remaining-requests", "10"), "", -1},
		{"reset counts on a 500 when empty", 500, h("x-ratelimit-reset-requests", "6m0s", "x-ratelimit-remaining-requests", "0"), "", 360000},
		{"azure x-rate-limit-reset-tokens plain seconds", 429, h("x-rate-limit-reset-tokens", "55"), "", 55000},
		{"anthropic reset minus Date", 429, h("date", "Sun, 01 Mar 2026 12:00:00 GMT", "anthropic-ratelimit-tokens-reset", "2026-03-01T12:00:07.5Z"), "", 7500},
		{"anthropic reset in the past", 429, h("date", "Sun, 01 Mar 2026 12:00:00 GMT", "anthropic-ratelimit-tokens-reset", "2026-03-01T11:00:00Z"), "", 0},
		{"generic reset epoch seconds", 429, h("x-ratelimit-reset", "1772366460"), "", 60000},
		{"generic reset epoch ms", 429, h("X-RateLimit-Reset", "1772366405000"), "", 5000},
		// Body fields.
		{"retry_after_seconds", 429, nil, `{"retry_after_seconds": 28}`, 28000},
		{"retry_after_ms", 429, nil, `{"error":{"retry_after_ms":1500}}`, 1500},
		{"retryAfter", 429, nil, `{"retryAfter": 3}`, 3000},
		{"retryAfterMs", 429, nil, `{"retryAfterMs": 250}`, 250},
		{"retry_after_sec", 400, nil, `{"retry_after_sec": 12}`, 12000},
		{"retryDelay string", 429, nil, `{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}`, 26000},
		{"retryDelay python repr", 429, nil, `{'retryDelay': '0.5s'}`, 500},
		{"field beats prose", 429, nil, `{"message":"Please retry in 25.39s.","retryDelay":"26s"}`, 26000},
		{"totalRetryDelay is not a hint", 429, nil, `{"attempts":3,"totalRetryDelay":274}`, -1},
		{"retry_after null", 429, nil, `{"retry_after": null}`, -1},
		{"retry_after date is not seconds", 429, nil, `{"retry_after": "2026-03-01T12:00:00Z"}`, -1},
		{"body header dump", 429, nil, `HTTPHeaders: {'retry-after': '7', 'date': 'x'}`, 7000},
		{"openrouter metadata reset", 429, nil, `{"metadata":{"headers":{"X-RateLimit-Reset":"1772366430000"}}}`, 30000},
		// Prose, English.
		{"try again in ms", 429, nil, "Please try again in 644ms.", 644},
		{"try again in fractional s", 429, nil, "Please try again in 3.89s. Visit", 3890},
		{"try again in float artefact", 429, nil, "Please try again in 1.984999999s.", 1985},
		{"try again in Go duration", 429, nil, "Please try again in 9m38.016s.", 578016},
		{"try again in 6m0s", 429, nil, "Please try again in 6m0s.", 360000},
		{"retry after N seconds", 429, nil, "Please retry after 28 seconds.", 28000},
		{"retry_after with underscores", 429, nil, "retry_after 5 seconds", 5000},
		{"retry-after prose with colon", 429, nil, "Rate limited. Retry-After: 4s", 4000},
		{"after 1500 ms is not 1500 s", 429, nil, "please slow down and retry after 1500 ms", 1500},
		{"after N ms alone", 429, nil, "cooling down, available after 1500 ms", 1500},
		{"try again after 1 seconds", 429, nil, "please try again after 1 seconds", 1000},
		{"broken across lines", 429, nil, "Please try\nagain in\n  2 minutes.", 120000},
		{"words and", 429, nil, "Try again in 1 minute and 30 seconds.", 90000},
		{"wait N seconds", 429, nil, "Please wait 20 seconds before retrying.", 20000},
		{"resets in", 429, nil, "Your limit resets in 4 hours.", 14400000},
		{"bare retry after number", 429, nil, "retry after 30.", 30000},
		{"bare number followed by a word is not a hint", 429, nil, "retry after 3 attempts", -1},
		{"unit before bare", 429, nil, "retry after 30. Or try again in 500ms", 500},
		{"client backoff is not a hint", 529, nil, "Overloaded · Retrying in 1 seconds… (attempt 1/10)", -1},
		{"no number", 429, nil, "Please try again later.", -1},
		{"model name is not a duration", 429, nil, "retry after 4o migration", -1},
		// Prose, Chinese.
		{"30 秒后", 429, nil, "请求过于频繁，30 秒后重试", 30000},
		{"请在 30 秒后重试", 429, nil, "请在 30 秒后重试", 30000},
		{"1分钟后", 429, nil, "请1分钟后再试", 60000},
		{"1分30秒后", 429, nil, "请1分30秒后再试", 90000},
		{"请等待 5 秒", 429, nil, "请等待 5 秒", 5000},
		{"500毫秒后", 429, nil, "请500毫秒后重试", 500},
		{"请充值后重试 has no number", 429, nil, "您的账户已欠费，请充值后重试。", -1},
		{"1分钟内 is a window, not a hint", 429, nil, "1分钟内最多请求 60 次", -1},
		{"稍后 is not a number", 429, nil, "1.请稍后重试", -1},
		// Saturation.
		{"huge saturates", 429, nil, "retry after 99999999999999999999999 seconds", maxHintMs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &engine.Failure{Status: tc.status, Headers: tc.headers, Body: tc.body}
			ms, ok := ParseHint(f, t0)
			if tc.want < 0 {
				if ok {
					t.Errorf("ParseHint = %d, want none", ms)
				}
				return
			}
			if !ok || ms != tc.want {
				t.Errorf("ParseHint = %d, %v; want %d", ms, ok, tc.want)
			}
			// The rule-set path (anchors from the phrase automaton) agrees.
			rs, err := Parse("h.yaml", []byte("- {name: h, when: 'true', class: RATE_LIMIT, retryAfterMs: hint()}"), Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			st := rs.get(f)
			defer rs.put(st)
			if got := st.hintMs(); got != int(tc.want) {
				t.Errorf("hint() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // -1: not a duration
	}{
		{"26s", 26000}, {"6m0s", 360000}, {"12ms", 12}, {"1.984999999s", 1985}, {"9m38.016s", 578016},
		{"1h2m3s", 3723000}, {"500us", 1}, {"30", 30000}, {"1.5", 1500}, {"30 seconds", 30000},
		{"2 minutes and 5 seconds", 125000}, {"1 minute, 30 seconds", 90000}, {"30秒", 30000}, {"1分30秒", 90000},
		{"2小时", 7200000}, {"500 毫秒", 500}, {" \"26s\" ", 26000}, {"0", 0},
		{"", -1}, {"soon", -1}, {"12:30", -1}, {"2026-03-01", -1}, {"5 sessions", -1}, {"30s later", -1}, {"-5", -1},
	}
	for _, tc := range tests {
		ms, ok := ParseDuration(tc.in)
		if tc.want < 0 {
			if ok {
				t.Errorf("ParseDuration(%q) = %d, want not a duration", tc.in, ms)
			}
			continue
		}
		if !ok || ms != tc.want {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", tc.in, ms, ok, tc.want)
		}
	}
}

func TestClampHint(t *testing.T) {
	s := time.Second
	tests := []struct{ d, min, max, want time.Duration }{
		{500 * time.Millisecond, s, 300 * s, s},
		{28 * s, s, 300 * s, 28 * s},
		{3600 * s, s, 300 * s, 300 * s},
		{-5 * s, s, 300 * s, s},
		{-5 * s, 0, 300 * s, 0},
		{10 * s, -s, 300 * s, 10 * s},
		{10 * s, 20 * s, 5 * s, 20 * s}, // max below min: min wins
	}
	for _, tc := range tests {
		if got := ClampHint(tc.d, tc.min, tc.max); got != tc.want {
			t.Errorf("ClampHint(%v, %v, %v) = %v, want %v", tc.d, tc.min, tc.max, got, tc.want)
		}
	}
}

// FuzzParseHint: the parser never panics and never returns a negative wait,
// whatever the headers and body. Seeds: testdata/fuzz/FuzzParseHint.
func FuzzParseHint(f *testing.F) {
	f.Add(429, "28", "", "", "Please try again in 644ms.")
	f.Add(503, "Sun, 01 Mar 2026 12:00:45 GMT", "Sun, 01 Mar 2026 12:00:00 GMT", "", "")
	f.Add(429, "", "", "6m0s", `{"retryDelay":"26s"}`)
	f.Add(429, "", "", "", "请在 30 秒后重试")
	f.Fuzz(func(t *testing.T, status int, retryAfter, date, reset, body string) {
		fl := &engine.Failure{Status: status, Body: body, Headers: map[string]string{
			"retry-after": retryAfter, "date": date, "x-ratelimit-reset-tokens": reset,
			"anthropic-ratelimit-tokens-reset": reset, "x-ratelimit-reset": reset,
		}}
		ms, ok := ParseHint(fl, t0)
		if ok && ms < 0 {
			t.Fatalf("negative hint %d", ms)
		}
		if !ok && ms != 0 {
			t.Fatalf("no hint but ms = %d", ms)
		}
		if v := hintIn(body); v < -1 {
			t.Fatalf("hintIn = %d", v)
		}
		if d, ok := ParseDuration(body); ok && d < 0 {
			t.Fatalf("ParseDuration = %d", d)
		}
	})
}
