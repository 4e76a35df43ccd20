package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
)

// APIStats is the answer of GET /gate/v1/stats: the retry planner's counters
// since the server started, and those of each session's current turn (or of the
// one session ?session= names). `gatectl stats` prints it.
type APIStats struct {
	At        time.Time   `json:"at"`
	StartedAt time.Time   `json:"startedAt"`
	Lifetime  retry.Stats `json:"lifetime"`
	// Turns are the sessions' current turns, sorted by session, at most
	// apiMaxStatsTurns of them; TurnsTotal is how many there are.
	Turns      []retry.TurnStats `json:"turns"`
	TurnsTotal int               `json:"turnsTotal"`
	// Session and Turn answer ?session=: Turn is left out when the planner made no
	// decision for the session yet.
	Session string           `json:"session,omitempty"`
	Turn    *retry.TurnStats `json:"turn,omitempty"`
}

// apiMaxStatsTurns bounds the turns one answer lists.
const apiMaxStatsTurns = 200

func (a *api) handleStats(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "session" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: session)", k))
			return
		}
	}
	out := APIStats{At: a.s.clock.Now(), StartedAt: a.s.started, Turns: []retry.TurnStats{}}
	if q.Has("session") {
		sess := q.Get("session")
		if err := apiCheckName("session", sess); err != nil {
			apiFail(w, http.StatusBadRequest, err)
			return
		}
		out.Session = sess
		if ts, ok := a.s.planner.TurnStats(sess); ok {
			out.Turn = &ts
			out.Turns = append(out.Turns, ts)
			out.TurnsTotal = 1
		}
		out.Lifetime = a.s.planner.LifetimeStats()
		writeJSON(w, http.StatusOK, out)
		return
	}
	snap := a.s.planner.Stats()
	out.Lifetime = snap.Lifetime
	out.TurnsTotal = len(snap.Turns)
	for _, ts := range snap.Turns {
		out.Turns = append(out.Turns, ts)
	}
	slices.SortFunc(out.Turns, func(x, y retry.TurnStats) int { return strings.Compare(x.Session, y.Session) })
	if len(out.Turns) > apiMaxStatsTurns {
		out.Turns = out.Turns[:apiMaxStatsTurns]
	}
	writeJSON(w, http.StatusOK, out)
}
