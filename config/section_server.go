package config

import "time"

// Server bounds what a client connection may hold (`server:`): how many are open
// at once, and how long one may take to send its headers and its body or sit
// idle between requests. Nothing bounds how long a request may take once its body
// is in: a proxied call may wait minutes in the gate and stream for many more.
// The daemon reads these when it starts listening; a reload does not change them.
type Server struct {
	// MaxConnections caps the client connections open at once; past it, new
	// connections wait in the kernel's accept queue until one closes.
	MaxConnections int
	HeaderTimeout  time.Duration // from a request's first byte to the end of its headers
	BodyTimeout    time.Duration // from the end of a request's headers to the end of its body
	IdleTimeout    time.Duration // a keep-alive connection's wait for its next request
	// MaxBufferedBytes caps the bytes of request and response bodies held in
	// memory at once, across every request in flight. Past it a request waits
	// briefly for room, then gets 503 with Retry-After (server/bodybudget.go).
	MaxBufferedBytes int
}

// Defaults of server:.
const (
	DefaultMaxConnections = 4096
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout    = 60 * time.Second
	DefaultIdleTimeout    = 120 * time.Second
	// DefaultMaxBufferedBytes: 256 MiB, room for several bodies at the 32 MiB
	// request limit on a small machine. The least allowed is 96 MiB: a request
	// holds its body twice (as read, and the copy sent upstream), and requests
	// share three quarters of the budget, so one at the limit must fit in that.
	DefaultMaxBufferedBytes = 256 << 20
)

// serverSchema is server:.
var serverSchema = &schema[Server]{
	path:     "server",
	doc:      "client connections: how many at once, how long one may take to send a request or sit idle; read at start, a reload does not change them",
	defaults: func() Server { return base().Server },
	fields: []setting[Server]{
		intField("maxConnections", "client connections open at once; past it new ones wait in the accept queue until one closes", atLeast(1),
			func(s *Server) *int { return &s.MaxConnections }),
		durField("headerTimeout", "longest time from a request's first byte to the end of its headers", positive,
			func(s *Server) *time.Duration { return &s.HeaderTimeout }),
		durField("bodyTimeout", "longest time from the end of a request's headers to the end of its body; the connection is closed past it. The wait in the gate and the response, however long, come after and are not bounded by it", positive,
			func(s *Server) *time.Duration { return &s.BodyTimeout }),
		durField("idleTimeout", "how long a keep-alive connection may wait for its next request", positive,
			func(s *Server) *time.Duration { return &s.IdleTimeout }),
		intField("maxBufferedBytes", "bytes of request and response bodies held in memory at once, across all requests; past it a request waits briefly for room, then gets 503 with Retry-After", atLeast(96<<20),
			func(s *Server) *int { return &s.MaxBufferedBytes }),
	},
}
