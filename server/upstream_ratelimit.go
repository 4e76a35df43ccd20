package server

import (
	"net/http"

	"github.com/gatectl/gatectl/engine"
)

// rateLimitHeaders reads the rate limits a provider states in its response
// headers (engine.ReadRateLimitHeaders).
func rateLimitHeaders(h http.Header) engine.HeaderLimits { return engine.ReadRateLimitHeaders(h.Get) }
