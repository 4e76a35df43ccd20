package server

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// Shutting down (Serve, once its context ends) has two steps. At once, every
// request held in gatectl — queued in the gate, waiting to retry, in a
// long-term wait — is answered 503 with a Retry-After of 1 to 4 s, drawn for
// each (spreadRetryAfter): it was not sent, and
// its client can send it again to this daemon's successor or another instance
// (the drain). Calls already upstream go on until the grace ends; then their
// contexts are cancelled with errShutdown, and each answers its client — 503,
// or an error event in a stream that started — before the connections close,
// so no client takes a cut connection or a truncated stream for an answer.
// Their reservations are released meanwhile, in a shared store too: it is
// closed only after the handlers returned (handlerWait bounds the wait).

// errShutdown is the cause a request's context is cancelled with when the
// shutdown grace ran out.
var errShutdown = errors.New("gatectl: shutdown grace ran out")

// handlerWait bounds how long Serve waits, after cancelling what outlived the
// grace, for the handlers to answer and release what they hold.
const handlerWait = 3 * time.Second

// shutDown reports whether ctx ended because the grace ran out.
func shutDown(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errShutdown) }

// drainer ends the holds when the shutdown begins.
type drainer struct {
	ctx  context.Context
	stop context.CancelFunc
}

func newDrainer() drainer {
	ctx, stop := context.WithCancel(context.Background())
	return drainer{ctx, stop}
}

// drainable returns ctx, ended also when the shutdown begins; release when done.
func (s *Server) drainable(ctx context.Context) (context.Context, func()) {
	dctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drain.ctx, cancel)
	return dctx, func() { stop(); cancel() }
}

// handlers counts the requests being answered, so Serve can wait for them.
// (A counter, not a WaitGroup: a request may still begin while Serve waits.)
type handlers struct{ n atomic.Int64 }

func (h *handlers) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.n.Add(1)
		defer h.n.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// waitFor waits for the handlers to return, at most d; false when some did not.
func (h *handlers) waitFor(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for h.n.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
