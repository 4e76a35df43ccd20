package gate

import (
	"slices"
	"strings"
	"time"
)

// HeldCall is one call the gate holds right now, as the console and
// GET /gate/v1/waits show it. It is a copy: reading it changes nothing.
type HeldCall struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Session  string `json:"session"`
	// Priority is "interactive" or "batch".
	Priority string `json:"priority"`
	// Tokens is what the call reserves once admitted (input estimate + output reserve).
	Tokens int64 `json:"tokens"`
	// Reason is why it first waited: cooldown, tpm, rpm, otpm, pace, session-cap (its
	// session's in-flight cap), queue (behind an earlier call that holds it) or
	// store (a failClosed shared store that does not answer).
	Reason string `json:"reason"`
	// Since is when it was queued; ExpectedAt when the gate next expects to admit
	// it (its drain time, or the maxWait deadline where it fails open). A
	// settlement can admit it earlier.
	Since      time.Time `json:"since"`
	ExpectedAt time.Time `json:"expectedAt"`
	WaitedMs   int64     `json:"waitedMs"`
	// ExpectedInMs is ExpectedAt − now, never below 0.
	ExpectedInMs int64 `json:"expectedInMs"`
	// Position is the call's place in its model's fair order, from 1.
	Position int `json:"position"`
}

// PriorityName names p for people and JSON.
func PriorityName(p Priority) string {
	if p == PriorityBatch {
		return "batch"
	}
	return "interactive"
}

// Held returns every call the gate holds at now, sorted by provider, model and
// the fair order in which they will be admitted. It only reads: the queue is not
// dispatched and no waiter moves, so looking cannot change what is admitted when.
// Cost: one lock per bucket, held for a copy of its queue.
func (l *Ledger) Held(now time.Time) []HeldCall {
	var out []HeldCall
	for _, b := range l.allBuckets() {
		out = b.appendHeld(out, now)
	}
	slices.SortStableFunc(out, func(a, b HeldCall) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return a.Position - b.Position
	})
	return out
}

func (b *bucket) appendHeld(out []HeldCall, now time.Time) []HeldCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) == 0 {
		return out
	}
	// Order a copy: the queue itself is sorted only by dispatch, which owns it.
	ws := slices.Clone(b.waiters)
	sortWaiters(ws)
	pos := 0
	for _, w := range ws {
		if w.granted || w.cancelled {
			continue
		}
		pos++
		h := HeldCall{
			Provider: b.provider, Model: b.model, Session: w.req.Session,
			Priority: PriorityName(w.req.Priority), Tokens: w.reserved, Reason: w.reason,
			Since: w.enqueued, ExpectedAt: w.next, WaitedMs: max(now.Sub(w.enqueued), 0).Milliseconds(),
			Position: pos,
		}
		if h.Reason == "" {
			h.Reason = "queue"
		}
		if d := w.next.Sub(now); d > 0 {
			h.ExpectedInMs = (d + time.Millisecond - 1).Milliseconds()
		}
		out = append(out, h)
	}
	return out
}
