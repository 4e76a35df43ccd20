package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestStatedLimits(t *testing.T) {
	cases := []struct {
		name             string
		body             string
		tokens, requests int64
	}{
		{"openai tpm", `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.","type":"tokens","code":"rate_limit_exceeded"}}`, 30000, 0},
		{"openai rpm", `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms."}}`, 0, 500},
		{"groq, per minute spelled out", `Rate limit reached for model llama in organization org_1 on tokens per minute (TPM): Limit 6000, Used 5747, Requested ~4251. Please try again in 59.9s.`, 6000, 0},
		{"groq, the lines wrapped", "Error code: 429 - {'error': {'message': 'Rate limit reached for model\n`llama-3.3-70b-versatile` in organization\n`org_1` service tier `on_demand` on tokens\nper minute (TPM): Limit 12000, Used 2542, Requested 9855. Please try\nagain in 1.98s.'}}", 12000, 0},
		{"moonshot, wrapped", "request reached organization TPM\nrate limit, current: 1410, limit: 32000", 32000, 0},
		{"openai's older wording", `Rate limit reached for default-gpt-4 in organization org-x on tokens per min. Limit: 10000 / min. Please try again in 6ms.`, 10000, 0},
		{"a call larger than the limit still states it", `Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 30601.`, 30000, 0},
		{"moonshot", `{"error":{"type":"rate_limit_reached_error","message":"Your account org-1 <ak-1> request reached organization TPM rate limit, current: 1410, limit: 32000"}}`, 32000, 0},
		{"moonshot rpm", `request reached organization RPM rate limit, current: 200, limit: 200`, 0, 200},
		{"moonshot's max rpm", `{"error":{"message":"Your account org-1<ak-1> request reached organization max RPM: 3, please try again after 1 seconds","type":"rate_limit_reached_error"}}`, 0, 3},
		{"a limit of input tokens only is not the call's", `This request would exceed the rate limit on input tokens per minute (TPM): Limit 40000.`, 0, 0},
		{"hyphenated", `on input-tokens per min (TPM): Limit 40000.`, 0, 0},
		{"prompt tokens", `on prompt tokens per minute (TPM): Limit 40000.`, 0, 0},
		{"a unit not in ASCII", `on tokens per min (TPM): Limit 30000ｋ, Used 1.`, 0, 0},
		{"commas not grouping thousands", `on tokens per min (TPM): Limit 1,2,3, Used 1.`, 0, 0},
		{"nor of output tokens", "on `output` tokens per min (TPM): Limit 8000, Used 8000.", 0, 0},
		{"a figure with a unit", `on tokens per min (TPM): Limit 30k, Used 29k.`, 0, 0},
		{"a decimal figure", `on tokens per min. Limit: 1.5M / min.`, 0, 0},
		{"the largest count", `on tokens per min (TPM): Limit 9223372036854775807, Used 1.`, 0, 0},
		{"above any real limit", `on tokens per min (TPM): Limit 1000000000001, Used 1.`, 0, 0},
		{"at the end of the text", `on tokens per min (TPM): Limit 30000`, 30000, 0},
		{"digits grouped", `on tokens per min (TPM): Limit 2,000,000, Used 1,999,000, Requested 5,000.`, 2000000, 0},
		{"per day is no window's limit", `Rate limit reached for gpt-4o on tokens per day (TPD): Limit 90000, Used 89000, Requested 2000.`, 0, 0},
		{"moonshot per day", `request reached organization TPD rate limit, current: 1508351, limit: 1500000`, 0, 0},
		{"no figure", `Requests to the ChatCompletions_Create Operation have exceeded token rate limit of your current pricing tier. Please retry after 6 seconds.`, 0, 0},
		{"too many requests", `Too Many Requests`, 0, 0},
		{"zero is no limit", `on tokens per min (TPM): Limit 0, Used 0, Requested 5.`, 0, 0},
		{"a figure too large to be a count", `on tokens per min (TPM): Limit 99999999999999999999999, Used 1.`, 0, 0},
	}
	for _, c := range cases {
		tok, req := StatedLimits(&Failure{Status: 429, Body: c.body})
		if tok != c.tokens || req != c.requests {
			t.Errorf("%s: stated %d tokens, %d requests per minute; want %d, %d", c.name, tok, req, c.tokens, c.requests)
		}
	}
	headers := []struct {
		name             string
		f                Failure
		tokens, requests int64
	}{
		{"headers", Failure{Headers: map[string]string{"x-ratelimit-limit-tokens": "30000", "x-ratelimit-limit-requests": "500"}}, 30000, 500},
		{"headers before words", Failure{Headers: map[string]string{"x-ratelimit-limit-tokens": "30000"}, Body: "on tokens per min (TPM): Limit 20000. on requests per min (RPM): Limit 60."}, 30000, 60},
		{"a per-day header is no window's", Failure{Headers: map[string]string{"x-ratelimit-limit-requests": "14400", "x-ratelimit-reset-requests": "2m59s"}}, 0, 0},
		{"anthropic", Failure{Headers: map[string]string{"anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-requests-limit": "50"}}, 40000, 50},
		{"a header too large", Failure{Headers: map[string]string{"x-ratelimit-limit-tokens": "9223372036854775807"}}, 0, 0},
		{"not a number", Failure{Headers: map[string]string{"x-ratelimit-limit-tokens": "NaN"}}, 0, 0},
		{"anthropic, tokens out of range: input tokens", Failure{Headers: map[string]string{"anthropic-ratelimit-tokens-limit": "9223372036854775807", "anthropic-ratelimit-input-tokens-limit": "40000"}}, 40000, 0},
	}
	for _, c := range headers {
		if tok, req := StatedLimits(&c.f); tok != c.tokens || req != c.requests {
			t.Errorf("%s: stated %d tokens, %d requests per minute; want %d, %d", c.name, tok, req, c.tokens, c.requests)
		}
	}
	if tok, req := StatedLimits(nil); tok != 0 || req != 0 {
		t.Errorf("nil failure: %d, %d", tok, req)
	}
}

// On the corpus of real provider errors: the limits read are the four in the
// wordings StatedLimits reads (two from OpenAI, Moonshot's max RPM, one from
// Groq with its lines wrapped); Moonshot's per-day limit, the input-only limits
// and every other error give none.
func TestStatedLimitsOnTheCorpus(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "provider-errors.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int64
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if tokens, requests := StatedLimits(&Failure{Status: e.Status, Body: e.Body}); tokens != 0 || requests != 0 {
			got = append(got, [2]int64{tokens, requests})
		}
	}
	if want := [][2]int64{{30000, 0}, {30000, 0}, {0, 3}, {12000, 0}}; !slices.Equal(got, want) {
		t.Fatalf("(tokens, requests) per minute read: %v, want %v", got, want)
	}
}

// FuzzStatedLimits: any body and header value reads as no limit or one in
// [1, MaxStatedLimit], never a panic.
func FuzzStatedLimits(f *testing.F) {
	f.Add("Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29937, Requested 385.", "")
	f.Add("request reached organization TPM rate limit, current: 1410, limit: 32000", "")
	f.Add("request reached organization max RPM: 3, please try again after 1 seconds", "")
	f.Add("on tokens per min. Limit: 10000 / min.", "60000")
	f.Add("on input tokens per minute (TPM): Limit 1,000,000,000,000,000", "9223372036854775808")
	f.Fuzz(func(t *testing.T, body, header string) {
		tok, req := StatedLimits(&Failure{Status: 429, Body: body, Headers: map[string]string{"x-ratelimit-limit-tokens": header}})
		for _, v := range []int64{tok, req} {
			if v != 0 && !statedInRange(v) {
				t.Fatalf("read %d from %q / %q", v, body, header)
			}
		}
	})
}
