package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/gatectl/gatectl/engine"
)

// Per-session settings: the quota switch and the route pool.
//
// A session's record holds two settings, each either explicit or absent:
//
//   - the switch: "on" or "off"; absent means the deployment's defaultEnabled;
//   - the pool: a pool name or "off" (never change provider); absent means the
//     pool is inferred from the route the session is on.
//
// A forked (or delegated) session takes, once, a snapshot of its nearest ancestor's
// explicit setting, field by field; from then on the value is the child's own, and
// setting it to "default" clears it back to the deployment default rather than
// inheriting again. The records are durable through a SessionStore.

// Setting values shared by the switch and the pool.
const (
	SettingOn      = "on"
	SettingOff     = "off"
	SettingDefault = "default"
)

// Where a session's setting came from.
const (
	SourceDefault   = "default"   // no record: the deployment default (or the route, for the pool)
	SourceSession   = "session"   // set on this session
	SourceInherited = "inherited" // snapshot of an ancestor's explicit setting, taken at fork
	SourceOff       = "off"       // pool only: the session opted out of pools
)

// ErrSessionSetting: a session setting value is not one of the choices.
var ErrSessionSetting = errors.New("invalid session setting")

// ErrSessionNotSaved wraps a store failure: the setting applies in memory but will
// not survive a restart. Callers log it; the switch itself never fails on it.
var ErrSessionNotSaved = errors.New("session setting not saved")

// SessionRecord is one session's durable settings. The zero value is a session that
// follows every default. Its JSON form is what a SessionStore may keep.
type SessionRecord struct {
	// Switch is SettingOn, SettingOff, or "" (follow defaultEnabled).
	Switch string `json:"switch,omitempty"`
	// SwitchSource is SourceSession or SourceInherited when Switch is set.
	SwitchSource string `json:"switchSource,omitempty"`
	// Pool is a pool name, SettingOff, or "" (follow the session's route).
	Pool string `json:"pool,omitempty"`
	// PoolSource is SourceSession or SourceInherited when Pool is set.
	PoolSource string `json:"poolSource,omitempty"`
	// Parent is the session this one was forked from, "" for a root.
	Parent string `json:"parent,omitempty"`
}

// IsZero reports whether the record says nothing (a store may delete it).
func (r SessionRecord) IsZero() bool { return r == SessionRecord{} }

// SessionStore keeps session records durably. state.Store implements it with a
// bbolt file; MemorySessionStore keeps them in the process.
type SessionStore interface {
	// LoadSession returns the session's record and whether one exists. Called by
	// Sessions the first time a session is looked at, concurrently for different
	// sessions. A missing record is (zero, false, nil), never an error.
	LoadSession(id string) (SessionRecord, bool, error)
	// SaveSession replaces the session's record atomically and durably: when it
	// returns nil the record survives a crash. A zero record may be deleted.
	// Sessions serialises its calls.
	SaveSession(id string, rec SessionRecord) error
}

// MemorySessionStore is a SessionStore in memory: the degraded mode when no state
// directory is available. The zero value is ready; safe for concurrent use.
type MemorySessionStore struct {
	mu sync.Mutex
	m  map[string]SessionRecord
}

// LoadSession implements SessionStore.
func (s *MemorySessionStore) LoadSession(id string) (SessionRecord, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[id]
	return r, ok, nil
}

// SaveSession implements SessionStore.
func (s *MemorySessionStore) SaveSession(id string, rec SessionRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.IsZero() {
		delete(s.m, id)
		return nil
	}
	if s.m == nil {
		s.m = map[string]SessionRecord{}
	}
	s.m[id] = rec
	return nil
}

// ParseSwitch normalises a switch value: on, off or default (any case).
func ParseSwitch(s string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case SettingOn, SettingOff, SettingDefault:
		return v, nil
	}
	return "", fmt.Errorf("%w: switch %q (choices: on, off, default)", ErrSessionSetting, s)
}

// ParsePoolSetting normalises a pool setting: off, default, or a well-formed pool
// name. Whether the pool exists is the caller's check (Router.SetPool).
func ParsePoolSetting(s string) (string, error) {
	v := strings.TrimSpace(s)
	switch lv := strings.ToLower(v); lv {
	case SettingOff, SettingDefault:
		return lv, nil
	}
	if err := CheckPoolName(v); err != nil {
		return "", fmt.Errorf("%w: pool %q (choices: a pool name, off, default): %w", ErrSessionSetting, s, err)
	}
	return v, nil
}

// maxCachedSessions bounds the Sessions cache; past it, half the saved entries go.
const maxCachedSessions = 1 << 16

// Sessions reads and writes per-session settings through a SessionStore, with a
// cache in front of it. Safe for concurrent use; writes are serialised.
type Sessions struct {
	store SessionStore

	writeMu sync.Mutex // serialises read-modify-write of records; held across store I/O

	mu    sync.Mutex
	cache map[string]cachedSession // id -> record as last loaded or written
}

type cachedSession struct {
	rec     SessionRecord
	unsaved bool // the store refused it: kept here, never evicted
}

// NewSessions returns settings backed by store (a MemorySessionStore when nil).
func NewSessions(store SessionStore) *Sessions {
	if store == nil {
		store = &MemorySessionStore{}
	}
	return &Sessions{store: store, cache: map[string]cachedSession{}}
}

// Get returns the session's record (zero when it has none). A store that fails to
// load gives the zero record and the error: the session follows the defaults.
func (s *Sessions) Get(id string) (SessionRecord, error) {
	s.mu.Lock()
	c, ok := s.cache[id]
	s.mu.Unlock()
	if ok {
		return c.rec, nil
	}
	rec, _, err := s.store.LoadSession(id)
	if err != nil {
		return SessionRecord{}, fmt.Errorf("session %q: %w", id, err)
	}
	s.mu.Lock()
	if c, ok := s.cache[id]; ok { // a write won the race
		rec = c.rec
	} else {
		s.put(id, cachedSession{rec: rec})
	}
	s.mu.Unlock()
	return rec, nil
}

// Forget drops the cached record of id, so the next Get reads the store again:
// another process sharing the store changed it. A record the store refused is
// kept (it exists nowhere else).
func (s *Sessions) Forget(id string) {
	s.mu.Lock()
	if c, ok := s.cache[id]; ok && !c.unsaved {
		delete(s.cache, id)
	}
	s.mu.Unlock()
}

// put caches c under id. s.mu must be held.
func (s *Sessions) put(id string, c cachedSession) {
	if len(s.cache) >= maxCachedSessions {
		n := 0
		for k, v := range s.cache {
			if !v.unsaved {
				delete(s.cache, k)
				if n++; n >= maxCachedSessions/2 {
					break
				}
			}
		}
	}
	s.cache[id] = c
}

// update applies fn to the session's record and saves it. When the store refuses,
// the new record still applies in memory and the error wraps ErrSessionNotSaved.
func (s *Sessions) update(id string, fn func(*SessionRecord)) (SessionRecord, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	rec, loadErr := s.Get(id)
	fn(&rec)
	err := s.store.SaveSession(id, rec)
	s.mu.Lock()
	s.put(id, cachedSession{rec: rec, unsaved: err != nil})
	s.mu.Unlock()
	if err != nil {
		return rec, fmt.Errorf("%w: session %q: %w", ErrSessionNotSaved, id, err)
	}
	if loadErr != nil {
		return rec, loadErr
	}
	return rec, nil
}

// SetSwitch sets the session's switch: on, off, or default (clears it).
func (s *Sessions) SetSwitch(id, value string) (SessionRecord, error) {
	v, err := ParseSwitch(value)
	if err != nil {
		return SessionRecord{}, err
	}
	return s.update(id, func(r *SessionRecord) {
		if v == SettingDefault {
			r.Switch, r.SwitchSource = "", ""
		} else {
			r.Switch, r.SwitchSource = v, SourceSession
		}
	})
}

// SetPool sets the session's pool: a pool name, off, or default (clears it). It
// checks the form only; Router.SetPool also checks that the pool exists.
func (s *Sessions) SetPool(id, value string) (SessionRecord, error) {
	v, err := ParsePoolSetting(value)
	if err != nil {
		return SessionRecord{}, err
	}
	return s.update(id, func(r *SessionRecord) {
		if v == SettingDefault {
			r.Pool, r.PoolSource = "", ""
		} else {
			r.Pool, r.PoolSource = v, SourceSession
		}
	})
}

// maxAncestry bounds the walk up a fork chain (and breaks a cycle).
const maxAncestry = 64

// Fork records that child was forked (or delegated) from parent, and gives the
// child, field by field, a snapshot of its nearest ancestor's explicit setting,
// marked SourceInherited. A setting the child already has explicitly is kept.
func (s *Sessions) Fork(child, parent string) (SessionRecord, error) {
	if child == parent {
		return SessionRecord{}, fmt.Errorf("%w: session %q cannot be forked from itself", ErrSessionSetting, child)
	}
	var sw, pool string
	var errs []error
	for id, n := parent, 0; id != "" && n < maxAncestry && (sw == "" || pool == ""); n++ {
		if id == child {
			break // a cycle through the child
		}
		rec, err := s.Get(id)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if sw == "" {
			sw = rec.Switch
		}
		if pool == "" {
			pool = rec.Pool
		}
		id = rec.Parent
	}
	rec, err := s.update(child, func(r *SessionRecord) {
		r.Parent = parent
		if r.SwitchSource != SourceSession && sw != "" {
			r.Switch, r.SwitchSource = sw, SourceInherited
		}
		if r.PoolSource != SourceSession && pool != "" {
			r.Pool, r.PoolSource = pool, SourceInherited
		}
	})
	if err != nil {
		errs = append(errs, err)
	}
	return rec, errors.Join(errs...)
}

var _ SessionStore = (*MemorySessionStore)(nil)

// RouteForChosen is RouteFor for a route the client named itself
// (provider/model), not a pool: a session that has not started starts on that
// route instead of a draw, since the draw is what naming the pool asks for. From
// then on the session is like any other: it stays on its route and is moved only
// when its provider is marked (a failover), and a different route it names later
// is again its choice. Without a session it is RouteFor.
func (q *Router) RouteForChosen(ctx context.Context, session string, asked engine.Route) (RouteChoice, error) {
	return q.Route(ctx, session, Ask{Route: asked, Chosen: true})
}
