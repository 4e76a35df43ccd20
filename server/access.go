package server

// The access log (log.access: true): one info line per proxied call, from the
// "access" logger. Names and numbers only — never a key, a header or a body —
// and the client's strings (model, session) bounded.

import (
	"net/http"
	"strings"
	"time"
)

// maxLoggedModel bounds the model name an access line repeats: it is the
// client's string, and the body may be megabytes.
const maxLoggedModel = 256

// logAccess writes the access line of one proxied call. status is what the
// client was answered (0: nothing); client_gone says the client went away
// before the answer was over; pr and x are
// nil when the request was refused before being read or routed.
func (s *Server) logAccess(r *http.Request, ep *endpoint, status int, pr *proxyRequest, x *exchange, total time.Duration) {
	face := "openai"
	if ep.kind == kindAnthropic {
		face = "anthropic"
	}
	args := []any{"method", r.Method, "path", ep.path, "face", face}
	if pr != nil {
		model := pr.model
		if len(model) > maxLoggedModel {
			model = strings.ToValidUTF8(model[:maxLoggedModel], "") + "…"
		}
		args = append(args, "model", model)
	}
	route := ""
	var attempts int
	var gateWait, upstream time.Duration
	var in, out int64
	if x != nil {
		route = x.route.String()
		if x.route.Provider == "" {
			route = x.res.route.String() // refused before the first attempt
		}
		attempts, gateWait, upstream = x.attempts, x.waited, x.upstream
		in = x.usage.InputTokens + x.usage.CacheReadTokens + x.usage.CacheWriteTokens
		out = x.usage.OutputTokens
	}
	args = append(args, "route", route, "status", status, "attempts", attempts,
		"gate_wait_ms", gateWait.Milliseconds(), "upstream_ms", upstream.Milliseconds(), "total_ms", total.Milliseconds(),
		"tokens_in", in, "tokens_out", out)
	if pr != nil && pr.session != "" {
		args = append(args, "session", pr.session)
	}
	// The handler is still running, so an ended context is the client gone: before
	// any answer (status 0) or during a held stream, whose 200 went out early.
	if r.Context().Err() != nil {
		args = append(args, "client_gone", true)
	}
	s.accessLog.Info("proxied", args...)
}

// statusRecorder remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection's Flush through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
