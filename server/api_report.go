package server

import (
	"fmt"
	"net/http"
	"time"
)

// handleReport serves GET /gate/v1/report[?since=DURATION]: what the gate did
// since the server started, or in the last DURATION (in whole minutes, up to
// report.Retention; a longer one is since the start). `gatectl report` prints it.
func (a *api) handleReport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "since" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: since)", k))
			return
		}
	}
	var since time.Duration
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "since", fmt.Sprintf(`since must be a positive duration such as "30m" or "2h" (got %q)`, v))
			return
		}
		since = d
	}
	writeJSON(w, http.StatusOK, a.s.report.Report(a.s.clock.Now(), since))
}
