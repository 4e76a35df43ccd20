package rules_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/rules"
)

func ExampleParse() {
	src := `
name: my-gateway
lists:
  coolingDown: [cooling down, 冷却中]
rules:
  - name: cooling-down
    when: code() == 429 && has(coolingDown)
    class: RATE_LIMIT
    retryAfterMs: hint()
`
	mine, err := rules.Parse("my-gateway.yaml", []byte(src), rules.Options{})
	if err != nil {
		panic(err)
	}
	builtin, err := rules.Builtin(rules.Options{})
	if err != nil {
		panic(err)
	}
	chain := engine.NewChain(mine, builtin)
	for _, f := range []*engine.Failure{
		{Status: 429, Body: "All upstream providers are cooling down. Please retry after 28 seconds."},
		{Status: 429, Body: `{"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}`},
	} {
		v, _, _ := chain.Classify(context.Background(), f)
		fmt.Println(v.Class, v.By, *orNone(v.RetryAfterMs))
	}
	// Output:
	// RATE_LIMIT my-gateway/cooling-down 28000
	// QUOTA builtin/quota-spent -1
}

func orNone(p *int64) *int64 {
	if p == nil {
		n := int64(-1)
		return &n
	}
	return p
}

func ExampleParseHint() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, f := range []*engine.Failure{
		{Status: 429, Headers: map[string]string{"x-ratelimit-reset-tokens": "6m0s"}},
		{Status: 503, Headers: map[string]string{"Date": "Sun, 01 Mar 2026 12:00:00 GMT", "Retry-After": "Sun, 01 Mar 2026 12:00:45 GMT"}},
		{Status: 429, Body: `{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}`},
		{Status: 429, Body: "Please try\nagain in 1.984999999s."},
		{Status: 429, Body: "please retry after 1500 ms"},
		{Status: 429, Body: "请在 30 秒后重试"},
	} {
		ms, ok := rules.ParseHint(f, now)
		fmt.Println(ms, ok)
	}
	// Output:
	// 360000 true
	// 45000 true
	// 26000 true
	// 1985 true
	// 1500 true
	// 30000 true
}
