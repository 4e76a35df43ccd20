package redisstore

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/gatectl/gatectl/engine/pool"
	"github.com/redis/go-redis/v9"
)

// sessionTTL is how long a session's settings outlive their last change.
const sessionTTL = budgetTTL * 7

// Sessions shares per-session settings (quota switch, pool) between the
// instances: a setting made through one instance holds on all of them. Redis
// holds the shared record and announces each change, so the other instances
// drop their cached copy (Handlers.SessionChanged → pool.Sessions.Forget);
// local (the state file) keeps a copy and answers while Redis does not.
type Sessions struct {
	s     *Store
	local pool.SessionStore
}

// Sessions returns the shared session store over local.
func (s *Store) Sessions(local pool.SessionStore) *Sessions { return &Sessions{s: s, local: local} }

func (s *Store) sessionKey(id string) string { return s.opts.KeyPrefix + "session:{" + id + "}" }
func (s *Store) sessionsChannel() string     { return s.opts.KeyPrefix + "{sessions}:ev" }

// LoadSession implements pool.SessionStore: Redis's record, else the local one.
func (x *Sessions) LoadSession(id string) (pool.SessionRecord, bool, error) {
	var raw []byte
	err := x.s.call(func(ctx context.Context) error {
		var err error
		raw, err = x.s.c.Get(ctx, x.s.sessionKey(id)).Bytes()
		return err
	})
	if err == nil {
		var rec pool.SessionRecord
		if json.Unmarshal(raw, &rec) == nil {
			return rec, true, nil
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) && !errors.Is(err, ErrDegraded) {
		x.s.log.Debug("shared session settings unavailable; using the local record", "error", err)
	}
	return x.local.LoadSession(id)
}

// SaveSession implements pool.SessionStore: the local record (durable), then
// the shared one, and the notice to the other instances.
func (x *Sessions) SaveSession(id string, rec pool.SessionRecord) error {
	if err := x.local.SaveSession(id, rec); err != nil {
		return err
	}
	raw, _ := json.Marshal(rec)
	_ = x.s.call(func(ctx context.Context) error {
		p := x.s.c.Pipeline()
		// A cleared session keeps its (empty) record rather than none: with none,
		// an instance that set the session earlier would read its own state
		// file's older record back (LoadSession's fallback for Redis's absence).
		p.Set(ctx, x.s.sessionKey(id), raw, sessionTTL)
		p.Publish(ctx, x.s.sessionsChannel(), "x "+x.s.instance+" "+id)
		_, err := p.Exec(ctx)
		return err
	})
	return nil
}

var _ pool.SessionStore = (*Sessions)(nil)
