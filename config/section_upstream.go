package config

import "time"

// Upstream bounds one attempt on an upstream (`upstream:`): how long gatectl
// waits for an answer to start, for a whole non-streaming answer, and for the
// next bytes of a stream. Past a deadline the attempt fails as a TIMEOUT (kind
// "timeout"), which retry.transport.timeout bounds. A reload changes them for the
// requests that start after it.
type Upstream struct {
	// FirstByteTimeout bounds a streaming attempt from sending the request to the
	// first byte of its body (the headers and the start of the first event).
	FirstByteTimeout time.Duration
	// ResponseTimeout bounds a non-streaming attempt from sending the request to
	// the end of its body: such an answer starts only once the model has finished
	// writing, so its first byte is its last.
	ResponseTimeout time.Duration
	// StreamIdleTimeout bounds the silence between two reads of a stream that has
	// started; past it the stream ends with the protocol's error event.
	StreamIdleTimeout time.Duration
}

// Defaults of upstream:.
const (
	DefaultFirstByteTimeout  = 60 * time.Second
	DefaultResponseTimeout   = 10 * time.Minute
	DefaultStreamIdleTimeout = 60 * time.Second
)

// upstreamSchema is upstream:.
var upstreamSchema = &schema[Upstream]{
	path:     "upstream",
	doc:      "deadlines of one attempt on an upstream; past one the attempt fails as a TIMEOUT (retry.transport.timeout bounds its retries)",
	defaults: func() Upstream { return base().Upstream },
	fields: []setting[Upstream]{
		durField("firstByteTimeout", "a streaming attempt: longest wait from sending the request to the first byte of the stream", positive,
			func(u *Upstream) *time.Duration { return &u.FirstByteTimeout }),
		durField("responseTimeout", "a non-streaming attempt: longest wait from sending the request to the end of the answer (it starts only when the model has finished)", positive,
			func(u *Upstream) *time.Duration { return &u.ResponseTimeout }),
		durField("streamIdleTimeout", "a stream that started: longest silence between two reads; past it the stream ends with the protocol's error event", positive,
			func(u *Upstream) *time.Duration { return &u.StreamIdleTimeout }),
	},
}
