package server

import "strconv"

// spreadRetryMax is the longest Retry-After of a call refused because this
// instance cannot take it now: the shared store is down (failClosed), or the
// body budget is full.
const spreadRetryMax = 4

// spreadRetryAfter is the Retry-After of such a refusal: 1 to spreadRetryMax
// seconds, drawn for each answer. Either refusal meets every call of the
// moment at once, and one fixed figure brought all their clients back in the
// same second — to a store that takes a probe to recover, or to the same full
// budget — to be refused together again.
func (s *Server) spreadRetryAfter() string {
	return strconv.Itoa(1 + int(s.rnd.Float64()*spreadRetryMax)%spreadRetryMax)
}
