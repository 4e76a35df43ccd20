package rules

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// bodies4KiB are realistic 4 KiB failure bodies: the message a provider sends,
// padded the way real bodies are (long JSON details, an HTML error page).
func bodies4KiB() map[string]*engine.Failure {
	pad := func(s string, filler string) string {
		var b strings.Builder
		b.WriteString(s)
		for b.Len() < 4096 {
			b.WriteString(filler)
		}
		return b.String()[:4096]
	}
	return map[string]*engine.Failure{
		// An OpenAI TPM 429 with a long JSON envelope: decided by rate-limit, hint in prose.
		"openai-429": {Status: 429, Body: pad(`{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"},"debug":"`, "request trace 0123456789abcdef upstream=api.openai.com region=us-east-1 ")},
		// A Gemini RESOURCE_EXHAUSTED with QuotaFailure details and RetryInfo: the regex rules run.
		"gemini-429": {Status: 429, Body: pad(`{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[`, `{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaValue":"10"},`)},
		// A 502 HTML page from a proxy: nothing matches until the status rules.
		"html-502": {Status: 502, Body: pad(`<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center>`, "<!-- a padding to disable MSIE and Chrome friendly error page -->\n")},
	}
}

// BenchmarkClassifyBuiltin4KiB measures one classification of a 4 KiB body by the
// built-in set, and reports the median (p50) besides the mean.
func BenchmarkClassifyBuiltin4KiB(b *testing.B) {
	rs, err := Builtin(Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bodies := bodies4KiB()
	names := make([]string, 0, len(bodies))
	for k := range bodies {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		f := bodies[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f.Body)))
			samples := make([]time.Duration, 0, min(b.N, 1<<20))
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, ok, err := rs.Classify(ctx, f); !ok || err != nil {
					b.Fatalf("not decided: %v", err)
				}
				if len(samples) < cap(samples) {
					samples = append(samples, time.Since(start))
				}
			}
			if len(samples) > 0 {
				slices.Sort(samples)
				b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
			}
		})
	}
}
