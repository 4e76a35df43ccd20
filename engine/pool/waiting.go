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
// out with no route left to move to). The Waits view reads it top down, so the
// armed waits (Pending) come first, the soonest next attempt first: that is what
// happens next. The entries with no attempt armed (a retry is on the wire, or the
// client left and the next QUOTA failure re-arms it) have no next attempt to
// count down to; they come last, by session. It only reads.
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
		case a.Pending && !b.Pending: // armed before not armed
			return -1
		case !a.Pending && b.Pending:
			return 1
		case a.Pending: // both armed: the soonest attempt first
			if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Session, b.Session)
	})
	return out
}
