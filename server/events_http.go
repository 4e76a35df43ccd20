package server

import (
	"encoding/json"
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
	// eventsBuffer is each subscriber's backlog; past it events are dropped for
	// that subscriber, never waited for.
	eventsBuffer = 256
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
// "event: TYPE" / "data: JSON" record per event, flushed at once, a ": heartbeat"
// comment every 15 s of silence. ?types=wait,rate-limited selects types. The
// stream ends when the client disconnects or the server shuts down.
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
	rc := http.NewResponseController(w)
	events, unsubscribe := a.s.bus.Subscribe(eventsBuffer)
	defer unsubscribe()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// The opening comment tells the client the subscription is live.
	if _, err := fmt.Fprint(w, ": gatectl events\nretry: 2000\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	ctx := r.Context()
	for {
		beat := a.s.clock.NewTimer(eventsHeartbeat)
		select {
		case <-ctx.Done():
			beat.Stop()
			return
		case e, ok := <-events:
			beat.Stop()
			if !ok {
				return
			}
			if want != nil && !want[e.Type] {
				continue
			}
			data, err := json.Marshal(e)
			if err != nil {
				a.s.apiLog.Error("event not encodable", "type", e.Type, "error", err)
				continue
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, data); err != nil {
				return
			}
		case <-beat.C():
			if !a.s.ready.Load() { // shutting down: let the server finish
				return
			}
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}
