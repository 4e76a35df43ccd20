package server

import "strconv"

// spreadRetryMax is the longest Retry-After of a call refused because this
// instance cannot take it now: the shared store is down (failClosed), the body
// budget is full, or the daemon is shutting down.
const spreadRetryMax = 4

// spreadRetryAfter is the Retry-After of such a refusal: 1 to spreadRetryMax
// seconds, drawn for each answer. Each refusal meets every call of the moment
// at once, and one fixed figure brought all their clients back in the same
// second — to a store that takes a probe to recover, to the same full budget,
// or to a restarted instance that knows no cooldown yet — to be refused (or
// refused by the provider) together again.
func (s *Server) spreadRetryAfter() string {
	return strconv.Itoa(1 + int(s.rnd.Float64()*spreadRetryMax)%spreadRetryMax)
}
