package rules

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// t0 is the fixed "now" of these tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func builtinForTest(t testing.TB) *RuleSet {
	t.Helper()
	rs, err := Builtin(Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func i64(v int64) *int64 { return &v }

// noHint marks a case that expects no hint; nil means "not checked".
var noHint = i64(-1)

type builtinCase struct {
	name   string
	f      engine.Failure
	class  engine.Class
	hint   *int64 // nil: not checked; noHint: none expected
	window string // "" not checked; "-" none expected
	rule   string // "" not checked
}

func runBuiltinCases(t *testing.T, cases []builtinCase) {
	t.Helper()
	rs := builtinForTest(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			v, decided, err := rs.Classify(context.Background(), &f)
			if err != nil {
				t.Fatal(err)
			}
			if !decided {
				v = engine.Verdict{Class: engine.ClassUnknown, By: "(abstained)"}
			}
			if v.Class != tc.class {
				t.Errorf("class = %s by %s, want %s\n  body: %.200q", v.Class, v.By, tc.class, f.Body)
			}
			if tc.rule != "" && v.By != "builtin/"+tc.rule {
				t.Errorf("by = %s, want builtin/%s", v.By, tc.rule)
			}
			switch {
			case tc.hint == nil:
			case tc.hint == noHint && v.RetryAfterMs != nil:
				t.Errorf("retryAfterMs = %d, want none (by %s)", *v.RetryAfterMs, v.By)
			case tc.hint != noHint && (v.RetryAfterMs == nil || *v.RetryAfterMs != *tc.hint):
				t.Errorf("retryAfterMs = %v, want %d (by %s)", ptrStr(v.RetryAfterMs), *tc.hint, v.By)
			}
			switch {
			case tc.window == "":
			case tc.window == "-" && v.Window != "":
				t.Errorf("window = %q, want none", v.Window)
			case tc.window != "-" && v.Window != tc.window:
				t.Errorf("window = %q, want %q", v.Window, tc.window)
			}
		})
	}
}

func body(status int, b string) engine.Failure { return engine.Failure{Status: status, Body: b} }

func TestBuiltinOpenAIAndAzure(t *testing.T) {
	runBuiltinCases(t, []builtinCase{
		{"openai TPM 429 with ms prose", body(429, `{"error":{"message":"Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): Limit 10000, Used 9962, Requested 138. Please try again in 6ms. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`), engine.ClassRateLimit, i64(6), "minute", "rate-limit"},
		{"openai RPM 429 with Go duration", body(429, `Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.`), engine.ClassRateLimit, i64(20000), "minute", ""},
		{"openai RPD is a daily quota", body(429, `{"error":{"message":"Rate limit reached for gpt-3.5-turbo in organization org-x on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in 7m12s.","type":"requests","code":"rate_limit_exceeded"}}`), engine.ClassQuota, i64(432000), "day", "periodic-limit"},
		{"openai TPD is a daily quota", body(429, `Rate limit reached for o1 in organization org-x on tokens per day (TPD): Limit 90000, Used 89000, Requested 2000. Please try again in 9m38.016s.`), engine.ClassQuota, i64(578016), "day", ""},
		{"openai insufficient_quota", body(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`), engine.ClassQuota, noHint, "", "quota-spent"},
		{"openai billing hard limit", body(400, `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","code":"billing_hard_limit_reached"}}`), engine.ClassQuota, noHint, "", ""},
		{"openai billing not active", body(429, `{"error":{"message":"Your account is not active, please check your billing details on our website.","type":"billing_not_active","code":"billing_not_active"}}`), engine.ClassQuota, nil, "", ""},
		{"openai request too large for TPM", body(429, `{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 50034. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","code":"rate_limit_exceeded"}}`), engine.ClassInvalidRequest, noHint, "", "request-too-large-for-limit"},
		{"openai context length", body(400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130015 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`), engine.ClassContext, noHint, "", "context-length"},
		{"openai responses input limit", body(400, `{"error":{"message":"Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`), engine.ClassContext, nil, "", ""},
		{"openai engine overloaded", body(503, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","code":"engine_overloaded"}}`), engine.ClassOverloaded, noHint, "", "overloaded"},
		{"openai model overloaded at 429", body(429, `{"error":{"message":"That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists.","type":"server_error"}}`), engine.ClassOverloaded, nil, "", ""},
		{"openai slow down 503", body(503, `{"error":{"message":"Slow Down: please reduce your request rate and try again later.","type":"server_error","code":"slow_down"}}`), engine.ClassRateLimit, nil, "", ""},
		{"openai server error", body(500, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}`), engine.ClassServer, noHint, "", "status-5xx"},
		{"openai bad key", body(401, `{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`), engine.ClassAuth, noHint, "", ""},
		{"openai no key", body(401, `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth.","type":"invalid_request_error"}}`), engine.ClassAuth, nil, "", ""},
		{"openai region", body(403, `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported","type":"request_forbidden"}}`), engine.ClassAuth, nil, "", ""},
		{"openai model not found", body(404, `{"error":{"message":"The model `+"`gpt-9`"+` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}`), engine.ClassInvalidRequest, nil, "", "model-not-found"},
		{"openai headers: retry-after-ms wins", engine.Failure{Status: 429, Headers: map[string]string{"Retry-After": "2", "retry-after-ms": "1500", "x-ratelimit-reset-requests": "6m0s"}, Body: `{"error":{"message":"Rate limit reached"}}`}, engine.ClassRateLimit, i64(1500), "", ""},
		{"openai headers: reset of the empty bucket", engine.Failure{Status: 429, Headers: map[string]string{"x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "12ms"}, Body: `{"error":{"message":"Rate limit reached for tokens"}}`}, engine.ClassRateLimit, i64(12), "", ""},
		{"azure 429 with retry after prose", body(429, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-06-01 have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}`), engine.ClassQuota, i64(86400000), "day", "hint-beyond-rate-window"}, // a day's wait is no per-minute window (issue 14)
		{"azure rate limit is exceeded", body(429, `{"error":{"code":"RateLimitReached","message":"Rate limit is exceeded. Try again in 30 seconds."}}`), engine.ClassRateLimit, i64(30000), "", ""},
		// A per-day request bucket's reset (17 h) once read as the wait, and made
		// a per-minute token throttle a QUOTA: the body says when the call fits.
		{"openai tpm 429 beside a per-day request bucket", engine.Failure{Status: 429, Headers: map[string]string{
			"x-ratelimit-limit-requests": "200", "x-ratelimit-remaining-requests": "57", "x-ratelimit-reset-requests": "17h9m36s",
			"x-ratelimit-limit-tokens": "40000", "x-ratelimit-remaining-tokens": "63", "x-ratelimit-reset-tokens": "1m29.9s"},
			Body: `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-abc on tokens per min (TPM): Limit 40000, Used 39937, Requested 385. Please try again in 483ms. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
			engine.ClassRateLimit, i64(483), "", ""},
		{"azure x-ms-retry-after-ms", engine.Failure{Status: 429, Headers: map[string]string{"x-ms-retry-after-ms": "2400", "retry-after": "3"}}, engine.ClassRateLimit, i64(2400), "", "status-429"},
		{"azure content filter", body(400, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}`), engine.ClassInvalidRequest, nil, "", "content-policy"},
		{"azure bad subscription key", body(401, `{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`), engine.ClassAuth, nil, "", ""},
	})
}

func TestBuiltinAnthropicAndBedrock(t *testing.T) {
	runBuiltinCases(t, []builtinCase{
		{"anthropic 429 with retry-after header", engine.Failure{Status: 429, Headers: map[string]string{"retry-after": "17", "anthropic-ratelimit-tokens-reset": "2026-03-01T12:00:30Z"}, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}}`}, engine.ClassRateLimit, i64(17000), "minute", "rate-limit"},
		{"anthropic reset header minus Date", engine.Failure{Status: 429, Headers: map[string]string{"Date": "Sun, 01 Mar 2026 12:00:00 GMT", "anthropic-ratelimit-input-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-reset": "2026-03-01T12:00:42Z", "anthropic-ratelimit-requests-reset": "2026-03-01T12:00:01Z", "anthropic-ratelimit-requests-remaining": "49"}, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}`}, engine.ClassRateLimit, i64(42000), "", ""},
		{"anthropic 529", body(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), engine.ClassOverloaded, noHint, "", "overloaded"},
		{"anthropic overloaded in a 200 stream", body(200, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"), engine.ClassOverloaded, nil, "", ""},
		{"anthropic api_error 500", body(500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`), engine.ClassServer, nil, "", ""},
		{"anthropic credit balance", body(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`), engine.ClassQuota, noHint, "", ""},
		{"anthropic usage limits until date", body(400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-04-01 at 00:00 UTC."}}`), engine.ClassQuota, nil, "", ""},
		{"anthropic prompt too long", body(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`), engine.ClassContext, noHint, "", ""},
		{"anthropic input+max_tokens", body(400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and `+"`max_tokens`"+` exceed context limit: 197000 + 8192 > 200000, decrease input length or `+"`max_tokens`"+` and try again"}}`), engine.ClassContext, nil, "", ""},
		{"anthropic bad key", body(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`), engine.ClassAuth, nil, "", ""},
		{"anthropic permission", body(403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`), engine.ClassAuth, nil, "", ""},
		{"anthropic request too large 413", body(413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`), engine.ClassInvalidRequest, nil, "", ""},
		{"claude code 5-hour limit", body(429, `Claude AI usage limit reached|1772370000`), engine.ClassQuota, nil, "", ""},
		{"bedrock throttling", body(429, `{"message":"Too many requests, please wait before trying again. You have sent too many requests.  Wait before trying again."}`), engine.ClassRateLimit, noHint, "", ""},
		{"bedrock throttling in a 200 stream", body(200, `{"throttlingException":{"message":"Too many tokens, please wait before trying again."}}`), engine.ClassRateLimit, nil, "", ""},
		{"bedrock service quota", body(400, `ServiceQuotaExceededException: Your request exceeds the service quota for your account. You can view your quotas at Viewing service quotas.`), engine.ClassQuota, nil, "", ""},
		{"bedrock daily token quota", body(429, `ThrottlingException: Too many tokens per day, please wait before trying again.`), engine.ClassQuota, nil, "day", "periodic-limit"},
		{"bedrock model not ready", body(429, `ModelNotReadyException: Model is not ready to serve inference requests. The AWS SDK will automatically retry the operation up to 5 times.`), engine.ClassOverloaded, nil, "", ""},
		{"bedrock service unavailable", body(503, `ServiceUnavailableException: Bedrock is unable to process your request.`), engine.ClassOverloaded, nil, "", ""},
		{"bedrock input too long", body(400, `ValidationException: Input is too long for requested model.`), engine.ClassContext, nil, "", ""},
		{"bedrock access denied", body(403, `AccessDeniedException: You don't have access to the model with the specified model ID.`), engine.ClassAuth, nil, "", ""},
		{"bedrock bad token", body(403, `UnrecognizedClientException: The security token included in the request is invalid.`), engine.ClassAuth, nil, "", ""},
		{"bedrock model timeout", body(408, `ModelTimeoutException: The request took too long to process.`), engine.ClassTimeout, nil, "", ""},
	})
}

func TestBuiltinGoogle(t *testing.T) {
	perMinute := `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, model: gemini-2.0-flash\nPlease retry in 26.846115585s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"10"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`
	perDay := strings.NewReplacer("PerMinute", "PerDay", "limit: 10", "limit: 50", `"10"`, `"50"`, "26.846115585s", "3h2m1s", `"26s"`, `"10921s"`).Replace(perMinute)
	zero := strings.NewReplacer("limit: 10", "limit: 0", `"quotaValue":"10"`, `"quotaValue":"0"`).Replace(perMinute)
	runBuiltinCases(t, []builtinCase{
		{"gemini per-minute quota with RetryInfo", body(429, perMinute), engine.ClassRateLimit, i64(26000), "minute", "google-quota-throttle"},
		{"gemini per-day quota", body(429, perDay), engine.ClassQuota, i64(10921000), "day", "google-quota-per-day"},
		{"gemini limit 0: no allowance", body(429, zero), engine.ClassQuota, nil, "", "google-quota-zero"},
		{"gemini resource has been exhausted", body(429, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`), engine.ClassRateLimit, noHint, "minute", ""},
		{"vertex resource exhausted, try later", body(429, `{"error":{"code":429,"message":"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.","status":"RESOURCE_EXHAUSTED"}}`), engine.ClassOverloaded, noHint, "", "google-resource-exhausted-capacity"},
		{"vertex per-minute quota", body(429, `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-1.5-pro. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.","status":"RESOURCE_EXHAUSTED"}}`), engine.ClassRateLimit, nil, "", ""},
		{"gemini python repr", body(429, `google.api_core.exceptions.ResourceExhausted: 429 You exceeded your current quota, please check your plan and billing details. [violations { quota_metric: "generativelanguage.googleapis.com/generate_content_free_tier_requests" quota_id: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier" } , retry_delay { seconds: 38 }]`), engine.ClassRateLimit, nil, "", "google-quota-throttle"},
		{"gemini overloaded 503", body(503, `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`), engine.ClassOverloaded, nil, "", ""},
		{"gemini high demand", body(503, `{"error":{"code":503,"message":"The model is currently experiencing high demand. Spikes in demand are usually temporary. Please try again later.","status":"UNAVAILABLE"}}`), engine.ClassOverloaded, nil, "", ""},
		{"gemini internal", body(500, `{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`), engine.ClassServer, nil, "", ""},
		{"gemini bad key at 400", body(400, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}`), engine.ClassAuth, nil, "", ""},
		{"gemini location", body(400, `{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`), engine.ClassAuth, nil, "", ""},
		{"gemini token count", body(400, `{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`), engine.ClassContext, nil, "", ""},
		{"gemini deadline", body(504, `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`), engine.ClassTimeout, nil, "", ""},
		{"gemini leaked key", body(403, `{"error":{"code":403,"message":"Your API key was reported as leaked. Please use another API key.","status":"PERMISSION_DENIED"}}`), engine.ClassAuth, nil, "", ""},
	})
}

func TestBuiltinChineseProviders(t *testing.T) {
	runBuiltinCases(t, []builtinCase{
		// DeepSeek
		{"deepseek insufficient balance 402", body(402, `{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}`), engine.ClassQuota, noHint, "", ""},
		{"deepseek overloaded 503", body(503, `{"error":{"message":"Server overloaded, please try again later.","type":"server_error"}}`), engine.ClassOverloaded, nil, "", ""},
		{"deepseek 服务器繁忙", body(200, `{"error":{"message":"服务器繁忙，请稍后再试。"}}`), engine.ClassOverloaded, nil, "", ""},
		{"deepseek rate limit", body(429, `{"error":{"message":"Rate Limit Reached","type":"rate_limit_error"}}`), engine.ClassRateLimit, nil, "", ""},
		{"deepseek context", body(400, `{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70321 tokens (62129 in the messages, 8192 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","code":"invalid_request_error"}}`), engine.ClassContext, nil, "", ""},
		{"deepseek auth", body(401, `{"error":{"message":"Authentication Fails, Your api key: ****abcd is invalid","type":"authentication_error","code":"invalid_request_error"}}`), engine.ClassAuth, nil, "", ""},
		// Qwen / DashScope / Bailian
		{"dashscope rate quota", body(429, `{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded, please try again later.","request_id":"x"}`), engine.ClassRateLimit, noHint, "", "rate-limit"},
		{"dashscope allocation quota is a TPM throttle", body(429, `{"code":"Throttling.AllocationQuota","message":"Allocated quota exceeded, please increase your quota limit.","request_id":"x"}`), engine.ClassRateLimit, noHint, "minute", "dashscope-allocation-throttle"},
		{"dashscope free tier only", body(403, `{"code":"AllocationQuota.FreeTierOnly","message":"The free tier of the model has been exhausted. If you wish to continue access the model on a paid basis, please disable the \"use free tier only\" mode in the management console.","request_id":"x"}`), engine.ClassQuota, nil, "", ""},
		{"dashscope arrearage", body(400, `{"code":"Arrearage","message":"Access denied, please make sure your account is in good standing.","request_id":"x"}`), engine.ClassQuota, nil, "", "quota-spent"},
		{"qwen compatible insufficient_quota", body(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`), engine.ClassQuota, nil, "", ""},
		{"dashscope input length", body(400, `{"code":"InvalidParameter","message":"Range of input length should be [1, 129024]","request_id":"x"}`), engine.ClassContext, nil, "", ""},
		{"dashscope bad key", body(401, `{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"x"}`), engine.ClassAuth, nil, "", ""},
		{"dashscope data inspection", body(400, `{"code":"DataInspectionFailed","message":"Input data may contain inappropriate content.","request_id":"x"}`), engine.ClassInvalidRequest, nil, "", "content-policy"},
		{"dashscope request timeout", body(500, `{"code":"RequestTimeOut","message":"Request timed out, please try again later.","request_id":"x"}`), engine.ClassTimeout, nil, "", "timeout-wording"},
		{"bailian 欠费", body(400, `{"code":"Arrearage","message":"您的账户已欠费，请充值后再试"}`), engine.ClassQuota, noHint, "", ""},
		{"bailian per-minute 配额", body(429, `{"code":"Throttling","message":"您当前每分钟调用配额已达上限，请稍后重试"}`), engine.ClassRateLimit, nil, "minute", ""},
		// Moonshot / Kimi
		{"moonshot max RPM", body(429, `{"error":{"message":"Your account org-x<ak-y> request reached organization max RPM: 3, please try again after 1 seconds","type":"rate_limit_reached_error"}}`), engine.ClassRateLimit, i64(1000), "minute", ""},
		{"moonshot TPD", body(429, `{"error":{"message":"Your account org-x<ak-y> request reached organization TPD rate limit, current: 1526210, limit: 1500000","type":"rate_limit_reached_error"}}`), engine.ClassQuota, noHint, "day", "periodic-limit"},
		{"moonshot token quota", body(429, `{"error":{"message":"You exceeded your current token quota: <org-x> -0.0015, please check your account balance","type":"exceeded_current_quota_error"}}`), engine.ClassQuota, nil, "", ""},
		{"moonshot suspended", body(429, `{"error":{"message":"Your account org-x<ak-y> is suspended, please check your plan and billing details","type":"exceeded_current_quota_error"}}`), engine.ClassQuota, nil, "", ""},
		{"moonshot engine overloaded", body(429, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"engine_overloaded_error"}}`), engine.ClassOverloaded, nil, "", ""},
		{"moonshot token limit", body(400, `{"error":{"message":"Invalid request: Your request exceeded model token limit: 8192","type":"invalid_request_error"}}`), engine.ClassContext, nil, "", ""},
		// Zhipu GLM
		{"zhipu 1302 concurrency", body(429, `{"error":{"code":"1302","message":"您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。"}}`), engine.ClassRateLimit, nil, "", ""},
		{"zhipu 1303 frequency", body(429, `{"error":{"code":"1303","message":"您当前使用该API的频率过高，请降低频率，或联系客服增加限额。"}}`), engine.ClassRateLimit, nil, "", ""},
		{"zhipu 1304 daily", body(429, `{"error":{"code":"1304","message":"该API已达今日调用次数限额，如有更多需求，请联系客服购买。"}}`), engine.ClassQuota, nil, "day", ""},
		{"zhipu 1305", body(429, `{"error":{"code":"1305","message":"当前API请求过多，请稍后重试。"}}`), engine.ClassRateLimit, nil, "", ""},
		{"zhipu 1308 5-hour cap", body(429, `{"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 2026-03-01 17:00:00 重置。"}}`), engine.ClassQuota, nil, "hour", ""},
		{"zhipu 1261 prompt too long", body(400, `{"error":{"code":"1261","message":"Prompt 超长"}}`), engine.ClassContext, nil, "", ""},
		{"zhipu 1001 auth", body(401, `{"error":{"code":"1001","message":"Header中未收到Authorization参数，无法进行身份验证。"}}`), engine.ClassAuth, nil, "", ""},
		{"zhipu 1301 sensitive", body(400, `{"error":{"code":"1301","message":"系统检测到输入或生成内容可能包含不安全或敏感内容，请您避免输入易产生敏感内容的提示语，感谢您的配合。"}}`), engine.ClassInvalidRequest, nil, "", ""},
		// MiniMax, iFlytek, Baidu, Volcengine, SiliconFlow, gateways
		{"minimax 1002 RPM in a 200", body(200, `{"base_resp":{"status_code":1002,"status_msg":"rate limit exceeded(RPM)"}}`), engine.ClassRateLimit, nil, "minute", ""},
		{"minimax 1008 in a 200", body(200, `{"base_resp":{"status_code":1008,"status_msg":"insufficient balance"}}`), engine.ClassQuota, nil, "", ""},
		{"spark 11201 daily", body(0, `{"header":{"code":11201,"message":"授权错误：日流控超限。超过当日最大访问量的限制"}}`), engine.ClassQuota, nil, "day", ""},
		{"spark 11202 per second", body(0, `{"header":{"code":11202,"message":"授权错误：秒级流控超限。秒级并发超过授权路数限制"}}`), engine.ClassRateLimit, nil, "", ""},
		{"baidu qps", body(200, `{"error_code":18,"error_msg":"Open api qps request limit reached"}`), engine.ClassRateLimit, nil, "", ""},
		{"baidu daily", body(200, `{"error_code":17,"error_msg":"Open api daily request limit reached"}`), engine.ClassQuota, nil, "day", ""},
		{"volcengine overdue", body(403, `{"error":{"code":"AccountOverdueError","message":"The request failed because your account has an overdue balance. Request id: x","type":"Forbidden"}}`), engine.ClassQuota, nil, "", ""},
		{"volcengine tpm", body(429, `{"error":{"code":"ModelAccountTpmRateLimitExceeded","message":"The request failed because you have exceeded the TPM limit for your account. Request id: x"}}`), engine.ClassRateLimit, nil, "minute", ""},
		{"volcengine overloaded", body(429, `{"error":{"code":"ServerOverloaded","message":"The service is currently unable to handle additional requests due to server overload. Request id: x"}}`), engine.ClassOverloaded, nil, "", ""},
		{"siliconflow balance", body(403, `{"code":30001,"message":"Sorry, your account balance is insufficient","data":null}`), engine.ClassQuota, nil, "", ""},
		{"siliconflow tpm", body(429, `{"code":50603,"message":"Request was rejected due to rate limiting. Details: TPM limit reached.","data":null}`), engine.ClassRateLimit, nil, "minute", ""},
		{"siliconflow overloaded", body(503, `{"code":50505,"message":"Model service overloaded. Please try again later.","data":null}`), engine.ClassOverloaded, nil, "", ""},
		{"new-api token quota", body(403, `{"error":{"message":"该令牌额度已用尽 (request id: x)","type":"new_api_error","code":"pre_consume_token_quota_failed"}}`), engine.ClassQuota, nil, "", ""},
		{"new-api user quota", body(403, `{"error":{"message":"user quota is not enough","type":"one_api_error"}}`), engine.ClassQuota, nil, "", ""},
		{"new-api per-minute request cap", body(429, `您已达到请求数限制：1分钟内最多请求 60 次`), engine.ClassRateLimit, nil, "minute", ""},
		{"gateway cooling down with retry_after_seconds", body(429, `{"error":{"message":"All upstream providers are cooling down. Please retry after 28 seconds.","retry_after_seconds":28}}`), engine.ClassOverloaded, i64(28000), "", "gateway-saturated"}, // the gateway's pool, not this key (issue 14)
		{"chinese hint 请在 30 秒后重试", body(429, `{"error":{"message":"请求过于频繁，请在 30 秒后重试"}}`), engine.ClassRateLimit, i64(30000), "", ""},
		{"chinese hint 1分30秒后", body(429, `请求过于频繁，请1分30秒后再试`), engine.ClassRateLimit, i64(90000), "", ""},
	})
}

func TestBuiltinOthers(t *testing.T) {
	runBuiltinCases(t, []builtinCase{
		{"openrouter insufficient credits", body(402, `{"error":{"message":"Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits","code":402}}`), engine.ClassQuota, nil, "", ""},
		{"openrouter free per-min", body(429, `{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1772366430000"}}}}`), engine.ClassRateLimit, i64(30000), "minute", ""},
		{"openrouter upstream rate limited", body(429, `{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations","provider_name":"Google"}}}`), engine.ClassOverloaded, nil, "", "gateway-upstream-throttle"}, // the upstream's shared capacity, not this key's limit (issue 14)
		{"openrouter 200 with error code", body(200, `{"error":{"code":502,"message":"Provider returned error"}}`), engine.ClassServer, nil, "", "status-5xx"},
		{"groq TPM with float seconds", body(429, `{"error":{"message":"Rate limit reached for model `+"`llama-3.3-70b-versatile`"+` in organization `+"`org_x`"+` service tier `+"`on_demand`"+` on tokens per minute (TPM): Limit 12000, Used 11000, Requested 1500. Please try again in 2.5s. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing","type":"tokens","code":"rate_limit_exceeded"}}`), engine.ClassRateLimit, i64(2500), "minute", ""},
		{"groq request too large 413", body(413, `{"error":{"message":"Request too large for model `+"`llama3-8b-8192`"+` in organization `+"`org_x`"+` service tier `+"`on_demand`"+` on tokens per minute (TPM): Limit 6000, Requested 9054, please reduce your message size and try again. Visit https://console.groq.com/docs/rate-limits for more information.","type":"tokens","code":"rate_limit_exceeded"}}`), engine.ClassInvalidRequest, noHint, "", "request-too-large-for-limit"},
		{"groq TPD", body(429, `Rate limit reached for model `+"`qwen-qwq-32b`"+` in organization `+"`org_x`"+` service tier `+"`on_demand`"+` on tokens per day (TPD): Limit 500000, Used 499000, Requested 2000. Please try again in 2m52.8s.`), engine.ClassQuota, i64(172800), "day", ""},
		{"groq over capacity", body(503, `{"error":{"message":"Service Unavailable","type":"internal_server_error"}}`), engine.ClassOverloaded, nil, "", ""},
		{"mistral rate", body(429, `{"message":"Requests rate limit exceeded"}`), engine.ClassRateLimit, nil, "", ""},
		{"mistral monthly", body(429, `{"object":"error","message":"Tokens per month limit exceeded","type":"invalid_request_error"}`), engine.ClassQuota, nil, "month", ""},
		{"mistral capacity", body(429, `{"object":"error","message":"Service tier capacity exceeded for this model.","type":"service_tier_capacity_exceeded","code":"3505"}`), engine.ClassOverloaded, nil, "", ""},
		{"mistral context", body(400, `{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_error"}`), engine.ClassContext, nil, "", ""},
		{"xai credits", body(403, `{"code":"Some requested entity was not found","error":"Your team has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit."}`), engine.ClassQuota, nil, "", ""},
		{"cohere monthly trial", body(429, `{"message":"You are using a Trial key, which is limited to 1000 API calls / month. You can continue to use the Trial key for free or upgrade to a Production key with higher rate limits."}`), engine.ClassQuota, nil, "month", ""},
		{"litellm budget", body(400, `{"error":{"message":"Budget has been exceeded! Current cost: 10.5, Max budget: 10.0","type":"budget_exceeded"}}`), engine.ClassQuota, nil, "", ""},
		{"nvidia temporarily overloaded", body(0, `PI_AI_ERROR: Service temporarily overloaded`), engine.ClassOverloaded, nil, "", ""},
		{"cloudflare 524", body(524, `<html><body>A timeout occurred</body></html>`), engine.ClassTimeout, nil, "", ""},
		{"nginx 502", body(502, `<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>`), engine.ClassServer, nil, "", "status-5xx"},
		{"503 with Retry-After date", engine.Failure{Status: 503, Headers: map[string]string{"Date": "Sun, 01 Mar 2026 12:00:00 GMT", "Retry-After": "Sun, 01 Mar 2026 12:01:30 GMT"}}, engine.ClassOverloaded, i64(90000), "", "status-overloaded"},
		{"bare 429", engine.Failure{Status: 429}, engine.ClassRateLimit, noHint, "", "status-429"},
		{"bare 400", engine.Failure{Status: 400, Body: "Bad Request"}, engine.ClassInvalidRequest, noHint, "", "status-4xx"},
		{"bare 422", engine.Failure{Status: 422, Body: `{"detail":[{"loc":["body","messages"],"msg":"field required"}]}`}, engine.ClassInvalidRequest, nil, "", ""},
		{"client backoff log is not a hint", body(529, `API Error (529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}) · Retrying in 1 seconds… (attempt 1/10)`), engine.ClassOverloaded, noHint, "", ""},
		{"wrapped status in a transport error", body(0, `Error: API error: Request failed with status code 503`), engine.ClassOverloaded, nil, "", "status-overloaded"},
		{"status in an SDK rendering", body(0, `Error code: 429 - {'error': {'message': 'slow', 'type': 'x'}}`), engine.ClassRateLimit, nil, "", "status-429"},
		{"github models per-day cap", body(429, `{"error":{"code":"RateLimitReached","message":"Rate limit of 150 per 86400s exceeded for UserByModelByDay. Please wait 51085 seconds before retrying."}}`), engine.ClassQuota, i64(51085000), "day", "periodic-limit"},
		{"github models per-minute", body(429, `{"error":{"code":"RateLimitReached","message":"Rate limit of 15 per 60s exceeded for UserByModelByMinute. Please wait 38 seconds before retrying."}}`), engine.ClassRateLimit, i64(38000), "minute", "rate-limit"},
		{"cerebras tokens per minute", body(429, `{"message":"Tokens per minute limit exceeded - too many tokens processed.","type":"too_many_tokens_error"}`), engine.ClassRateLimit, nil, "minute", ""},
		{"cerebras tokens per day", body(429, `{"message":"Tokens per day limit exceeded - too many tokens processed.","type":"too_many_tokens_error"}`), engine.ClassQuota, nil, "day", ""},
		{"huggingface too busy", body(503, `{"error":"Model too busy, unable to get response in less than 60 second(s)"}`), engine.ClassOverloaded, nil, "", ""},
		{"ollama server busy", body(503, `{"error":"server busy, please try again.  maximum pending requests exceeded"}`), engine.ClassOverloaded, nil, "", ""},
		{"replicate insufficient credit", body(402, `{"title":"Insufficient credit","detail":"You have insufficient credit to run this model. Go to https://replicate.com/account/billing#billing to purchase credit."}`), engine.ClassQuota, nil, "", "quota-spent"},
		{"together credit limit", body(429, `{"error":{"message":"Credit limit exceeded. Please navigate to https://api.together.xyz/settings/billing to add credit.","type":"credit_limit"}}`), engine.ClassQuota, nil, "", ""},
		{"perplexity rate", body(429, `{"error":{"message":"You have been rate limited. Your rate limit is 50 queries per minute.","type":"rate_limit"}}`), engine.ClassRateLimit, nil, "minute", ""},
		{"daily quota wording", body(429, `{"error":{"message":"You have exceeded your daily quota of 1000 requests."}}`), engine.ClassQuota, nil, "day", ""},
		{"account not active, check billing", body(429, `{"error":{"message":"Your account is not active, please check your billing details on our website."}}`), engine.ClassQuota, nil, "", "quota-spent"},
		{"TPM abbreviation alone in a 200", body(200, `{"code":"ModelTpmLimit","msg":"TPM超限"}`), engine.ClassRateLimit, nil, "minute", "rate-limit"},
		{"请求频率超限", body(200, `{"code":40029,"msg":"请求频率超限，请稍后再试"}`), engine.ClassRateLimit, nil, "", "rate-limit"},
		{"litellm rate limit wrapping insufficient_quota", body(429, `litellm.RateLimitError: RateLimitError: OpenAIException - Error code: 429 - {'error': {'message': 'You exceeded your current quota, please check your plan and billing details.', 'type': 'insufficient_quota', 'param': None, 'code': 'insufficient_quota'}}`), engine.ClassQuota, nil, "", "quota-spent"},
		{"anthropic content filtering", body(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}`), engine.ClassInvalidRequest, nil, "", "content-policy"},
		{"a throttle that mentions a daily plan keeps its minute window", body(429, `Rate limit reached for requests per minute. Upgrade for higher daily limits.`), engine.ClassRateLimit, nil, "minute", "rate-limit"},
		{"openai free-trial rate limit with a billing link", body(429, `Rate limit reached for default-gpt-3.5-turbo in organization org-x on requests per min. Limit: 3 / min. Please try again in 20s. Contact us through our help center at help.openai.com if you continue to have issues. Please add a payment method to your account to increase your rate limit. Visit https://platform.openai.com/account/billing to add a payment method.`), engine.ClassRateLimit, i64(20000), "minute", "rate-limit"},
		{"free tier spent", body(429, `{"error":{"message":"You have used up the free tier allowance for this model."}}`), engine.ClassQuota, nil, "", "quota-allowance"},
		{"free tier per-minute", body(429, `{"error":{"message":"Free tier rate limit: 10 RPM reached."}}`), engine.ClassRateLimit, nil, "minute", ""},
		{"quota wording of a per-minute cap", body(429, `You have reached the maximum number of requests per minute allowed by your quota.`), engine.ClassRateLimit, nil, "minute", ""},
		{"unknown 200", body(200, `{"id":"chatcmpl-1","choices":[]}`), engine.ClassUnknown, nil, "", ""},
	})
}

func TestBuiltinTransportAndMislabeled(t *testing.T) {
	recent, old := int64(60_000), int64(3_600_000)
	runBuiltinCases(t, []builtinCase{
		{"timeout kind", engine.Failure{ErrorKind: "timeout"}, engine.ClassTimeout, noHint, "", "transport-timeout"},
		{"reset kind", engine.Failure{ErrorKind: "reset"}, engine.ClassTransport, noHint, "", "transport-error"},
		{"refused kind", engine.Failure{ErrorKind: "refused"}, engine.ClassTransport, nil, "", ""},
		{"dns kind", engine.Failure{ErrorKind: "dns"}, engine.ClassTransport, nil, "", ""},
		{"timeout kind beats a partial body", engine.Failure{ErrorKind: "timeout", Body: "Rate limit"}, engine.ClassTimeout, nil, "", ""},
		{"socket hang up text", body(0, `Error: socket hang up`), engine.ClassTransport, nil, "", ""},
		{"ECONNRESET text", body(0, `read ECONNRESET`), engine.ClassTransport, nil, "", ""},
		{"deadline text", body(0, `context deadline exceeded (Client.Timeout exceeded while awaiting headers)`), engine.ClassTimeout, nil, "", ""},
		{"408", body(408, `Request Timeout`), engine.ClassTimeout, nil, "", ""},
		{"504", body(504, `Gateway Timeout`), engine.ClassTimeout, nil, "", ""},
		{"modality 400 within the window", engine.Failure{Status: 400, SinceCapacityMs: &recent, Body: `{"error":{"message":"Audio modality is not supported","type":"invalid_request_error"}}`}, engine.ClassMislabeled, noHint, "", "mislabeled-capacity-replay"},
		{"image input 400 within the window", engine.Failure{Status: 400, SinceCapacityMs: &recent, Body: `{"error":{"message":"Image input is not supported for this model"}}`}, engine.ClassMislabeled, nil, "", ""},
		{"modality 400 outside the window", engine.Failure{Status: 400, SinceCapacityMs: &old, Body: `{"error":{"message":"Audio modality is not supported"}}`}, engine.ClassInvalidRequest, nil, "", "status-4xx"},
		{"modality 400 with no capacity on record", engine.Failure{Status: 400, Body: `{"error":{"message":"Audio modality is not supported"}}`}, engine.ClassInvalidRequest, nil, "", ""},
		{"circuit replay with its own retry_after_sec", engine.Failure{Status: 400, SinceCapacityMs: &recent, Body: `{"error":{"message":"client error circuit breaker is open for this route","retry_after_sec":12}}`}, engine.ClassMislabeled, i64(12000), "", ""},
		{"not supported without a modality is a real 400", engine.Failure{Status: 400, SinceCapacityMs: &recent, Body: `{"error":{"message":"Parameter 'logprobs' is not supported with this model."}}`}, engine.ClassInvalidRequest, nil, "", ""},
	})
}

// TestBuiltinLineBreaks: terminals and loggers wrap bodies mid-word and pad
// them; the phrases still match.
func TestBuiltinLineBreaks(t *testing.T) {
	runBuiltinCases(t, []builtinCase{
		{"quota word broken", body(429, "{'error': {'message': 'insuffi\ncient_quota', 'type': 'x'}}"), engine.ClassQuota, nil, "", ""},
		{"overloaded broken with indent", body(500, "{\"message\":\"Over\n      loaded\"}"), engine.ClassOverloaded, nil, "", ""},
		{"Chinese broken", body(429, "该模型当前访问量过\n大，请您稍后再试"), engine.ClassOverloaded, nil, "", ""},
		{"hint broken across lines", body(429, "Rate limit reached. Please try\n  again in\n 3s."), engine.ClassRateLimit, i64(3000), "", ""},
		{"tpd broken", body(429, "request reached organization T\nPD rate limit"), engine.ClassQuota, nil, "day", "periodic-limit"},
	})
}

// TestBuiltinFuzzNoError checks that no body makes a rule fail at run time.
func FuzzClassifyBuiltin(f *testing.F) {
	f.Add(429, "Rate limit reached. Please try again in 644ms.", "")
	f.Add(0, "", "timeout")
	f.Add(200, `{"error":{"code":503}}`, "")
	f.Add(400, "Error code: 400 - {'error': {'message': 'Audio modality is not supported'}}", "")
	rs, err := Builtin(Options{Now: func() time.Time { return t0 }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status int, b, kind string) {
		fl := &engine.Failure{Status: status, Body: b, ErrorKind: kind}
		v, _, err := rs.Classify(context.Background(), fl)
		if err != nil {
			t.Fatalf("Classify(%d, %q): %v", status, b, err)
		}
		if v.RetryAfterMs != nil && *v.RetryAfterMs < 0 {
			t.Fatalf("negative hint %d", *v.RetryAfterMs)
		}
	})
}

// The five patterns of issue 14, each from a published error (the source is on
// the case); every case here failed before its rule was written.
func TestBuiltinFieldPatterns(t *testing.T) {
	nested := `{"error":{"message":"{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"You exceeded your current quota, please check your plan and billing details.\",\n    \"status\": \"RESOURCE_EXHAUSTED\",\n    \"details\": [\n      {\n        \"@type\": \"type.googleapis.com/google.rpc.QuotaFailure\",\n        \"violations\": [{\"quotaId\": \"GenerateContentInputTokensPerModelPerMinute-FreeTier\"}]\n      },\n      {\n        \"@type\": \"type.googleapis.com/google.rpc.RetryInfo\",\n        \"retryDelay\": \"26s\"\n      }\n    ]\n  }\n}\n","code":429,"status":"Too Many Requests"}}`
	runBuiltinCases(t, []builtinCase{
		// A wait longer than any rate window (dbchatprov2#2).
		{"azure retry after a day", body(429, `Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds.`), engine.ClassQuota, i64(86400000), "day", "hint-beyond-rate-window"},
		{"an hour's Retry-After", engine.Failure{Status: 429, Headers: map[string]string{"Retry-After": "3600"}, Body: `Too many requests`}, engine.ClassQuota, i64(3600000), "hour", "hint-beyond-rate-window"},
		{"a minute's Retry-After stays a throttle", engine.Failure{Status: 429, Headers: map[string]string{"Retry-After": "60"}, Body: `Too many requests`}, engine.ClassRateLimit, i64(60000), "", ""},
		// Gateways' own capacity (new-api#991, free_chatgpt_api#7, one-api#330, pollinations#6260, openrouter-proxy#1, opencode#29912).
		{"new-api saturated under rate_limit_exceeded", body(429, `{"error":{"message":"当前分组上游负载已饱和，请稍后再试 (request id: 2024052310260941388718971918754)","type":"requests","param":"","code":"rate_limit_exceeded"}}`), engine.ClassOverloaded, noHint, "", "gateway-saturated"},
		{"one-api saturated under billing_not_active", body(429, `{"error":{"message":"当前分组负载已饱和，请稍后再试，或升级账户以提升服务质量。","type":"billing_not_active","code":"billing_not_active"}}`), engine.ClassOverloaded, noHint, "", "gateway-saturated"},
		{"azure high demand at peak load", body(429, `The system is currently experiencing high demand and cannot process your request. Your request exceeds the maximum usage size allowed during peak load. Please retry after 20 seconds.`), engine.ClassOverloaded, i64(20000), "", "gateway-saturated"},
		{"upstream capacity exhausted", body(429, `upstream capacity exhausted, please retry`), engine.ClassOverloaded, noHint, "", "gateway-saturated"},
		{"circuit breaker open on a 503", body(503, `{"error":{"code":"circuit_open","message":"circuit breaker is open for upstream openai"}}`), engine.ClassOverloaded, noHint, "", "gateway-saturated"},
		{"openrouter free model rate-limited upstream", body(429, `{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits","provider_name":"Google AI Studio"}}}`), engine.ClassOverloaded, noHint, "", "gateway-upstream-throttle"},
		{"gateway relays its provider's 429", body(429, `{'code': '429', 'message': 'Error from provider (Xiaomi): Too many requests', 'type': 'limitation'}`), engine.ClassOverloaded, noHint, "", "gateway-upstream-throttle"},
		{"a relayed spent balance stays QUOTA", body(429, `{"error":{"message":"Error from provider: Provider returned error","code":429,"metadata":{"raw":"{\"error\":{\"message\":\"Your account is suspended due to insufficient balance, please recharge your account\"}}"}}}`), engine.ClassQuota, noHint, "", "quota-spent"},
		// A request larger than the limit itself.
		{"limit 7000, used 0", body(429, `Rate limit reached for model in organization org on tokens per min (TPM): Limit 7000, Used 0, Requested 12903. Please try again in 7.2s.`), engine.ClassInvalidRequest, nil, "", "request-too-large-for-limit"},
		{"limit 7,000, used: 0 with commas", body(429, `{"error":{"message":"Rate limit reached on tokens per min (TPM): limit: 7,000, used: 0, requested: 12,903.","code":"rate_limit_exceeded"}}`), engine.ClassInvalidRequest, nil, "", "request-too-large-for-limit"},
		// A counter that reads 0 (a token bucket's window, a gateway) beside a request that fits is a throttle.
		{"limit 240000, used 0, requested 1049 fits", engine.Failure{Status: 429, Provider: "openai", Headers: map[string]string{"retry-after": "10"}, Body: `{"error":{"message":"Rate limit reached for gpt-fake in organization org-fake on tokens per min (TPM): Limit 240000, Used 0, Requested 1049. Please try again in 10s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`}, engine.ClassRateLimit, i64(10000), "minute", "rate-limit"},
		{"limit: 7,000, used: 0, requested: 1,049 fits", body(429, `limit: 7,000, used: 0, requested: 1,049. Please try again in 2s.`), engine.ClassRateLimit, i64(2000), "", ""},
		{"limit with used > 0 is a throttle", body(429, `Rate limit reached for gpt-4o in organization org on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.`), engine.ClassRateLimit, i64(644), "minute", "rate-limit"},
		// Contradicting fields: the most specific evidence decides (oh-my-pi#8476, gcli2api#416, pi#3494).
		{"bailian TPM throttle in billing words", body(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For details, see: https://help.aliyun.com/zh/model-studio/error-code#token-limit","type":"insufficient_quota","code":"insufficient_quota"}}`), engine.ClassRateLimit, noHint, "minute", "dashscope-allocation-throttle"},
		{"ai studio prepayment credits depleted", body(429, `{"error":{"code":429,"message":"Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing.","status":"RESOURCE_EXHAUSTED"}}`), engine.ClassQuota, noHint, "", "google-credits-spent"},
		{"xai credits or spending limit", body(429, `{"code":"Some resource has been exhausted","error":"Your team abc has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit."}`), engine.ClassQuota, noHint, "", "google-credits-spent"},
		{"xai at capacity", body(429, `{"code":"Some resource has been exhausted","error":"The service is temporarily at capacity. Please retry your request shortly."}`), engine.ClassOverloaded, noHint, "", "resource-exhausted-at-capacity"},
		{"google credits spent under a throttle message", body(429, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INSUFFICIENT_G1_CREDITS_BALANCE"}]}}`), engine.ClassQuota, noHint, "", "google-credits-spent"},
		{"rate_limit_error type on an overload message", body(429, `{"error":{"type":"rate_limit_error","message":"The engine is currently overloaded, please try again later"},"type":"error"}`), engine.ClassOverloaded, noHint, "", "overloaded"},
		// Hints nested inside escaped JSON (Roo-Code#3883).
		{"retryDelay inside a serialised error", body(429, nested), engine.ClassRateLimit, i64(26000), "minute", "google-quota-throttle"},
	})
}

// Every built-in rule that decides from the status alone is named status-*, so
// that CatchAll recognises it; no other is.
func TestCatchAll(t *testing.T) {
	for _, tc := range []struct {
		f    engine.Failure
		want bool
	}{
		{body(429, ""), true},
		{body(500, "oops"), true},
		{body(503, ""), true},
		{body(504, ""), true},
		{body(418, ""), true},
		{body(402, ""), true},
		{body(429, "rate limit exceeded"), false},
		{body(400, "context length exceeded"), false},
	} {
		v, _, _ := builtinForTest(t).Classify(context.Background(), &tc.f)
		if got := CatchAll(v.By); got != tc.want {
			t.Errorf("%d %q: by %s, CatchAll = %v, want %v", tc.f.Status, tc.f.Body, v.By, got, tc.want)
		}
	}
	if !CatchAll(engine.ByChainNone) || CatchAll("my-gateway/status-429") {
		t.Error("chain/none is a catch-all; a user rule named status-429 is not the built-in one")
	}
}
