package pool

import (
	"slices"
	"strings"
)

// SessionWait is one session's long-term wait, for the console and
// GET /gate/v1/waits.
type SessionWait struct {
	Session string `json:"session"`
	WaitState
}

// LongTermWaits returns every open long-term entry (a session whose quota ran
// out with no route left to move to), sorted by the next attempt, the soonest
// first; entries with no attempt armed come last. It only reads.
func (q *Router) LongTermWaits() []SessionWait {
	q.mu.Lock()
	out := make([]SessionWait, 0, len(q.entries))
	for s, e := range q.entries {
		out = append(out, SessionWait{Session: s, WaitState: WaitState{Pending: e.pending, Attempts: e.attempts,
			EnteredAt: e.enteredAt, NextAttemptAt: e.nextAttemptAt, Provider: e.provider, Turn: e.turn, Step: e.step}})
	}
	q.mu.Unlock()
	slices.SortFunc(out, func(a, b SessionWait) int {
		switch {
		case a.Pending != b.Pending:
			if a.Pending {
				return -1
			}
			return 1
		case !a.NextAttemptAt.Equal(b.NextAttemptAt):
			return a.NextAttemptAt.Compare(b.NextAttemptAt)
		}
		return strings.Compare(a.Session, b.Session)
	})
	return out
}
