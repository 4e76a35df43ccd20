package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Event stream defaults.
const (
	// eventsHeartbeat is how often an idle stream gets a comment line, so proxies
	// and clients see the connection alive (and a shutdown ends the stream).
	eventsHeartbeat = 15 * time.Second
	// A stream gathers events for a moment after the first one and writes them
	// together: with many subscribers, a write (a syscall) per event per
	// subscriber costs the publishing API more than the events are worth, while
	// a moment of delay costs a watcher nothing. The moment grows with the
	// streams open so that all of them together write about eventsWritesPerSecond
	// times a second: 10 ms for one stream, 128 ms for 256, a second at most.
	eventsWritesPerSecond = 2000
	eventsMinBatchDelay   = 10 * time.Millisecond
	eventsMaxBatchDelay   = time.Second
	// eventsWriteTimeout is how long a write to a stream may block (the client
	// not reading, its buffers full) before the stream is cut.
	eventsWriteTimeout = 10 * time.Second
)

// eventTypes are the event types the stream carries, for ?types= validation.
var eventTypes = []string{
	"wait", "admitted", "fail-open", "over-budget", "rate-limited", "learn", "leak", // the gate
	"failover", "entered", "left", // the pools
	"reload", "settings", // the config, the runtime settings
	"ticket-expired", "ticket-evicted", // the decision API's tickets
	"retry", "giveup", // the proxy's failures: planned, and handed back (or a stream cut after its start)
}

// handleEvents streams the server's events as server-sent events: one
// "event: TYPE" / "data: JSON" record per event, written in batches a moment
// after they happen (eventsBatchDelay), a ": heartbeat" comment every 15 s of
// silence. ?types=wait,rate-limited selects types. The stream ends when the
// client disconnects, stops reading for eventsWriteTimeout, or the server shuts
// down. Past api.maxSubscribers streams, a new one is answered 503.
func (a *api) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "types" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: types)", k))
			return
		}
	}
	var want map[string]bool
	if v := q.Get("types"); v != "" {
		want = map[string]bool{}
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if !slices.Contains(eventTypes, t) {
				writeError(w, http.StatusBadRequest, "types", fmt.Sprintf("unknown event type %q (types: %s)", t, strings.Join(eventTypes, ", ")))
				return
			}
			want[t] = true
		}
	}
	st, err := a.s.bus.SubscribeStream(want)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "", err.Error()+": retry later")
		return
	}
	defer st.Close()
	rc := http.NewResponseController(w)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// The opening comment tells the client the subscription is live.
	if !eventsWrite(w, rc, []byte(": gatectl events\nretry: 2000\n\n")) {
		return
	}
	ctx := r.Context()
	for {
		beat := a.s.clock.NewTimer(eventsHeartbeat)
		select {
		case <-ctx.Done():
			beat.Stop()
			return
		case <-st.Ready():
			beat.Stop()
			// Gather what else arrives in the next moment, so a burst of events
			// costs the stream one write, not one each.
			batch := time.NewTimer(eventsBatchDelay(a.s.bus.Streams()))
			select {
			case <-ctx.Done():
				batch.Stop()
				return
			case <-batch.C:
			}
			recs, dropped, ended := st.take()
			if ended {
				return
			}
			var out []byte
			if dropped > 0 {
				out = fmt.Appendf(out, ": dropped %d events: this stream fell more than %d behind\n\n", dropped, eventsLog)
			}
			for _, rec := range recs {
				out = append(out, rec...)
			}
			if len(out) > 0 && !eventsWrite(w, rc, out) {
				return
			}
		case <-beat.C():
			if !a.s.ready.Load() { // shutting down: let the server finish
				return
			}
			if !eventsWrite(w, rc, []byte(": heartbeat\n\n")) {
				return
			}
		}
	}
}

// eventsBatchDelay is how long a stream gathers events when streams are open.
func eventsBatchDelay(streams int) time.Duration {
	d := time.Duration(streams) * time.Second / eventsWritesPerSecond
	return min(max(d, eventsMinBatchDelay), eventsMaxBatchDelay)
}

// eventsWrite writes and flushes b within eventsWriteTimeout: a client that
// stopped reading loses its stream rather than holding a goroutine and a buffer
// forever. It reports whether the stream may go on.
func eventsWrite(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout)) // a writer without deadlines (a test recorder) has none
	if _, err := w.Write(b); err != nil {
		return false
	}
	if rc.Flush() != nil {
		return false
	}
	_ = rc.SetWriteDeadline(time.Time{})
	return true
}
