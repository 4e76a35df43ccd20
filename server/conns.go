package server

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/config"
)

// Client connections are bounded two ways (config `server:`), so that slow or
// idle clients cannot hold file descriptors until the process runs out:
//
//   - at most MaxConnections are open at once (limitListener); past it, new ones
//     wait in the kernel's accept queue until one closes;
//   - a request must send its headers within HeaderTimeout (this also closes a
//     connection that sends nothing), and its body within BodyTimeout of its
//     headers (bodyDeadline); an idle keep-alive connection is closed after
//     IdleTimeout;
// and one thing is left unbounded on purpose:
//
//   - nothing bounds a request once its body is in: a proxied call may wait
//     minutes in the gate and stream for many more, so there is no WriteTimeout.
//     The body deadline is set per request, from the end of its headers, so that
//     the two timeouts are separate settings (http.Server's ReadTimeout runs from
//     the first byte), and is lifted when the body ends.

// newHTTPServer builds the http.Server Serve runs, with lim's timeouts; the caller
// adds BaseContext and ErrorLog, and wraps the listener with newLimitListener.
func newHTTPServer(h http.Handler, lim config.Server) *http.Server {
	return &http.Server{
		Handler:           bodyDeadline(h, lim.BodyTimeout),
		ReadHeaderTimeout: lim.HeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
	}
}

// bodyDeadline gives a request with a body d from now (its headers are in) to
// send it: past that its reads fail, the handler answers the error, and the
// connection is closed. The deadline is lifted the moment the body ends, so what
// the handler does next (wait in the gate, stream the answer) is not bounded by
// it. A request without a body has nothing to wait for.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			h.ServeHTTP(w, r) // a writer without deadlines (a test recorder): nothing to bound
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the body deadline once its body has been read to the end.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.lift)
	}
	return n, err
}

// limitListener accepts at most cap connections that are open at once: Accept
// waits for one of them to close. open counts them (shared with /metrics). Safe
// for concurrent use; Close unblocks a waiting Accept.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	open      *atomic.Int64
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, limit int, open *atomic.Int64) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, limit), open: open, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.open.Add(1)
	return &limitConn{Conn: c, release: func() { l.open.Add(-1); <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

var (
	_ net.Listener  = (*limitListener)(nil)
	_ net.Conn      = (*limitConn)(nil)
	_ io.ReadCloser = (*deadlineBody)(nil)
)
