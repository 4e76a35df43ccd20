package server

import (
	"slices"
	"sync"
	"time"
)

// maxSeenSessions bounds the sessions the server remembers seeing: session ids
// are client input, so past it the oldest half is forgotten.
const maxSeenSessions = 10000

// seenSessions remembers when each session last sent a call through the proxy,
// so GET /gate/v1/sessions can list sessions that never failed, waited or had a
// route drawn (no other part of the gate records those). Safe for concurrent use.
type seenSessions struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func newSeenSessions() *seenSessions { return &seenSessions{last: map[string]time.Time{}} }

// note records that session sent a call at now.
func (b *seenSessions) note(session string, now time.Time) {
	if session == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.last[session]; !ok && len(b.last) >= maxSeenSessions {
		b.dropOldestLocked(len(b.last) / 2)
	}
	if now.After(b.last[session]) {
		b.last[session] = now
	}
}

// dropOldestLocked forgets the n least recently seen sessions. b.mu must be held.
func (b *seenSessions) dropOldestLocked(n int) {
	type seen struct {
		id string
		at time.Time
	}
	all := make([]seen, 0, len(b.last))
	for id, at := range b.last {
		all = append(all, seen{id, at})
	}
	slices.SortFunc(all, func(x, y seen) int { return x.at.Compare(y.at) })
	for _, s := range all[:n] {
		delete(b.last, s.id)
	}
}

// prune forgets the sessions not seen since before (the janitor).
func (b *seenSessions) prune(before time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, at := range b.last {
		if at.Before(before) {
			delete(b.last, id)
		}
	}
}

// each calls fn with every remembered session and when it was last seen.
func (b *seenSessions) each(fn func(session string, at time.Time)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, at := range b.last {
		fn(id, at)
	}
}
