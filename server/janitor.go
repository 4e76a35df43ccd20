package server

import (
	"context"
	"time"
)

// The janitor bounds what the server keeps per client-chosen name over time:
// once a minute, on the server's clock, it drops
//
//   - ledger buckets idle for bucketIdle that hold nothing and learned nothing,
//     and their metric series (gate.Ledger.Evict);
//   - retry budgets, turn counters and per-session statistics of sessions idle
//     for the router's session idle time (a day, or two long-term delays), in
//     memory and in the state file (retry.Planner.Prune);
//   - the pools' session routes and finished long-term entries idle as long
//     (pool.Router.Sweep), and the sessions GET /gate/v1/sessions lists;
//   - decision-API tickets past their time (closed, "ticket-expired");
//   - session records in the state file (a session's switch, pool, parent)
//     unused for sessionRecordIdle: stamped when changed and, at most once a
//     day, when the session calls through the proxy or the decision API.
//
// Before, the prunes had no caller and tickets were swept only when another API
// call arrived.

// Janitor timings.
const (
	janitorEvery = time.Minute
	// bucketIdle is how long an empty bucket stays after its last use: long
	// enough that a model called every few minutes keeps its bucket (and what it
	// learned about its calls' sizes), short enough that a flood of invented
	// names is gone within the quarter hour.
	bucketIdle = 15 * time.Minute
	// sessionRecordIdle is how long a session's settings outlive its last use
	// in the state file: a harness that forks a session per subagent leaves a
	// record each, and the file never shrinks by itself. Redis keeps them a
	// week past their last change too.
	sessionRecordIdle = 7 * 24 * time.Hour
)

// runJanitor sweeps every janitorEvery until ctx ends.
func (s *Server) runJanitor(ctx context.Context) {
	for {
		t := s.clock.NewTimer(janitorEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			s.sweep(s.clock.Now())
		}
	}
}

// sweep runs one pass of the janitor at now.
func (s *Server) sweep(now time.Time) {
	evicted := s.ledger.Evict(now, bucketIdle)
	s.metrics.ForgetModels(evicted)
	idle := s.quota.SessionIdle()
	pruned, err := s.planner.Prune(now.Add(-idle))
	if err != nil {
		s.logger.Warn("janitor: pruning retry budgets failed; trying again next pass", "error", err)
	}
	s.quota.Sweep(now)
	s.seen.prune(now.Add(-idle))
	s.api.sweepTickets(now)
	records := s.sweepSessionRecords(now)
	if len(evicted) > 0 || pruned > 0 || records > 0 {
		s.logger.Debug("janitor swept", "buckets", len(evicted), "budgets", pruned, "sessionRecords", records)
	}
}

// sweepSessionRecords stamps the records of the sessions that called since
// the last pass and drops those unused for sessionRecordIdle (and their cached
// copies). It returns how many went.
func (s *Server) sweepSessionRecords(now time.Time) int {
	var used []string
	s.seen.each(func(id string, at time.Time) {
		if !at.Before(s.swept) {
			used = append(used, id)
		}
	})
	s.swept = now
	if err := s.store.TouchSessions(used, now); err != nil {
		s.logger.Warn("janitor: stamping session records failed; trying again next pass", "error", err)
	}
	gone, err := s.store.PruneSessions(now.Add(-sessionRecordIdle))
	if err != nil {
		s.logger.Warn("janitor: pruning session records failed; trying again next pass", "error", err)
	}
	for _, id := range gone {
		s.sessions.Forget(id)
	}
	return len(gone)
}
