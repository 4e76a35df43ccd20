package config

import "time"

// Proxy is what a proxied client sees while the gate holds its request
// (`proxy:`, docs/waits.md): a streamed request gets its response headers and
// SSE comment lines once it has been held HoldNotice, one every
// HoldNoticeEvery, so idle timeouts never fire; a non-streamed one is held at
// most MaxHold (or what its X-Gate-Max-Wait asks), then answered 429 with
// Retry-After.
type Proxy struct {
	HoldNotice      time.Duration
	HoldNoticeEvery time.Duration
	MaxHold         time.Duration
}

// Defaults of proxy:. MaxHold stays well under the 10-minute default timeout
// of the OpenAI and Anthropic SDKs, so that a held non-streamed call is
// answered (429 with Retry-After, which the client can act on) before the SDK
// gives up on it blindly and retries into the same wait.
const (
	DefaultHoldNotice      = 2 * time.Second
	DefaultHoldNoticeEvery = 5 * time.Second
	DefaultMaxHold         = 5 * time.Minute
)

// proxySchema is proxy:.
var proxySchema = &schema[Proxy]{
	path:     "proxy",
	doc:      "what a proxied client sees while the gate holds its request: SSE comments for a stream, a cap for the rest (docs/waits.md)",
	defaults: func() Proxy { return base().Proxy },
	fields: []setting[Proxy]{
		durField("holdNotice", "a streamed request held this long gets its response headers (200, text/event-stream) and a first \": gatectl waiting …\" comment; a failure after that arrives as the protocol's error event", positive,
			func(p *Proxy) *time.Duration { return &p.HoldNotice }),
		durField("holdNoticeEvery", "interval of the comments while the hold goes on", positive,
			func(p *Proxy) *time.Duration { return &p.HoldNoticeEvery }),
		durField("maxHold", "longest a non-streamed request is held (admission, retry waits, long-term quota waits); past it the client gets 429 with Retry-After and the reason. The request header X-Gate-Max-Wait may ask for more, up to the longest single wait gatectl plans (gate.maxWait, quota.longTermDelay)", positive,
			func(p *Proxy) *time.Duration { return &p.MaxHold }),
	},
}
