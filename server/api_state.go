package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/store/redisstore"
)

// APIStatus is the answer of GET /gate/v1/status: every model's ledger, and the
// server's reload state. `gatectl status` prints it.
type APIStatus struct {
	At              time.Time `json:"at"`
	StartedAt       time.Time `json:"startedAt"`
	ConfigVersion   uint64    `json:"configVersion"`
	Reloads         uint64    `json:"reloads"`
	ReloadFailures  uint64    `json:"reloadFailures"`
	LastReloadError string    `json:"lastReloadError,omitempty"`
	// Window is the gate's sliding window; MaxWait where a wait fails open.
	WindowMs  int64 `json:"windowMs"`
	MaxWaitMs int64 `json:"maxWaitMs"`
	// OpenTickets are decision API admissions not settled yet.
	OpenTickets      int `json:"openTickets"`
	EventSubscribers int `json:"eventSubscribers"`
	// Models is each provider/model the gate has seen, sorted.
	Models []gate.BucketStatus `json:"models"`
	// Store is the shared store, when there is one: its health, and what every
	// instance on it holds of this instance's models (Models are this one's).
	Store *APIStore `json:"store,omitempty"`
}

// APIStore is the shared store's part of the status.
type APIStore struct {
	Kind      string              `json:"kind"`  // redis
	State     string              `json:"state"` // ok | degraded
	OnError   string              `json:"onError"`
	KeyPrefix string              `json:"keyPrefix"`
	Errors    int64               `json:"errors"` // failed calls since start
	Shared    []redisstore.Shared `json:"shared,omitempty"`
}

func (a *api) handleStatus(w http.ResponseWriter, r *http.Request) {
	now := a.s.clock.Now()
	a.sweepTickets(now)
	reloads, failures, lastErr := a.s.snap.Stats()
	cfg := a.s.ledger.Config()
	st := APIStatus{At: now, StartedAt: a.s.started, ConfigVersion: a.s.snap.Current().Version,
		Reloads: reloads, ReloadFailures: failures, LastReloadError: lastErr,
		WindowMs: cfg.Window.Milliseconds(), MaxWaitMs: cfg.MaxWait.Milliseconds(),
		OpenTickets: a.tickets.open(), EventSubscribers: a.s.bus.Subscribers(),
		Models: a.s.ledger.Status(now)}
	st.Store = a.s.sharedStatus(st.Models)
	writeJSON(w, http.StatusOK, st)
}

// APIRoutes is the answer of GET /gate/v1/routes: the pools' report (as `gatectl
// routes --offline` builds it), each pool's scorer, the draws asked for, and why
// balance sources failed.
type APIRoutes struct {
	pool.Report
	Scoring       map[string]string `json:"scoring"`
	Draws         map[string][]int  `json:"draws,omitempty"`
	SourceErrors  map[string]string `json:"sourceErrors,omitempty"`
	ConfigVersion uint64            `json:"configVersion"`
}

// apiMaxDraws bounds ?draw=N.
const apiMaxDraws = 100000

func (a *api) handleRoutes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "pool" && k != "refresh" && k != "draw" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: pool, refresh, draw)", k))
			return
		}
	}
	refresh := false
	if v := q.Get("refresh"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "refresh", fmt.Sprintf("refresh must be true or false (got %q)", v))
			return
		}
		refresh = b
	}
	draws := 0
	if v := q.Get("draw"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > apiMaxDraws {
			writeError(w, http.StatusBadRequest, "draw", fmt.Sprintf("draw must be an integer from 0 to %d (got %q)", apiMaxDraws, v))
			return
		}
		draws = n
	}
	a.sweepTickets(a.s.clock.Now())
	rep, err := a.s.quota.Report(r.Context(), refresh, q["pool"]...)
	if err != nil {
		if errors.Is(err, pool.ErrNoPool) {
			writeError(w, http.StatusNotFound, "pool", err.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	snap := a.s.snap.Current()
	out := APIRoutes{Report: rep, Scoring: map[string]string{}, ConfigVersion: snap.Version}
	for _, p := range rep.Pools {
		out.Scoring[p.Name] = snap.Scoring[p.Name]
		if draws > 0 {
			counts, err := a.s.quota.DrawCounts(r.Context(), p.Name, draws)
			if err != nil {
				writeError(w, http.StatusInternalServerError, "", err.Error())
				return
			}
			if out.Draws == nil {
				out.Draws = map[string][]int{}
			}
			out.Draws[p.Name] = counts
		}
	}
	if snap.Balances != nil {
		for prov, st := range snap.Balances.Status() {
			if st.Err != nil {
				if out.SourceErrors == nil {
					out.SourceErrors = map[string]string{}
				}
				out.SourceErrors[prov] = st.Err.Error()
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// apiPickResponse is the answer of GET /gate/v1/pools/{pool}/pick.
type apiPickResponse struct {
	Session string `json:"session,omitempty"`
	apiTarget
}

func (a *api) handlePick(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "session" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: session)", k))
			return
		}
	}
	session := q.Get("session")
	poolName := r.PathValue("pool")
	if err := apiFirstErr(apiCheckName("session", session), apiCheckName("pool", poolName)); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if a.s.quota.Pools().Pool(poolName) == nil {
		writeError(w, http.StatusNotFound, "pool", fmt.Sprintf("%v: %q (pools: %s)", pool.ErrNoPool, poolName, apiNames(a.s.quota.Pools().Names())))
		return
	}
	a.sweepTickets(a.s.clock.Now())
	t, err := a.poolTarget(r.Context(), poolName, session, "pool")
	if err != nil {
		apiFail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, apiPickResponse{Session: session, apiTarget: t})
}

// APISession is the answer of GET and PUT /gate/v1/sessions/{id}: the session's
// settings as a client shows them, where they come from, and its long-term wait.
type APISession struct {
	Session string `json:"session"`
	pool.SessionFacts
	// Switch and PoolSetting are the explicit settings ("" when the default applies).
	Switch      string `json:"switch,omitempty"`
	PoolSetting string `json:"poolSetting,omitempty"`
	Parent      string `json:"parent,omitempty"`
	// LongTerm is the session's long-term wait, while it is in one.
	LongTerm *pool.WaitState `json:"longTerm,omitempty"`
	// Warning: the settings apply but could not be saved (or loaded) durably.
	Warning string `json:"warning,omitempty"`
}

// apiSessionRequest is the body of PUT /gate/v1/sessions/{id}. Absent fields are
// left as they are; parent is applied first, so explicit fields override what the
// fork inherits.
type apiSessionRequest struct {
	// Switch is on, off or default (follow quota.defaultEnabled).
	Switch *string `json:"switch"`
	// Pool is a pool name, off (never change provider) or default (the route decides).
	Pool *string `json:"pool"`
	// Parent forks the session from parent: it takes a snapshot of the nearest
	// ancestor's explicit settings.
	Parent *string `json:"parent"`
}

func (a *api) handleSessionGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := a.checkSessionID(id); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	a.sweepTickets(a.s.clock.Now())
	writeJSON(w, http.StatusOK, a.session(id, nil))
}

func (a *api) handleSessionPut(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := a.checkSessionID(id); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	var req apiSessionRequest
	if !apiDecode(w, r, &req) {
		return
	}
	if req.Switch == nil && req.Pool == nil && req.Parent == nil {
		writeError(w, http.StatusBadRequest, "switch", "give switch, pool or parent")
		return
	}
	// Validate everything before changing anything.
	if req.Switch != nil {
		if _, err := pool.ParseSwitch(*req.Switch); err != nil {
			writeError(w, http.StatusBadRequest, "switch", err.Error())
			return
		}
	}
	if req.Pool != nil {
		v, err := pool.ParsePoolSetting(*req.Pool)
		if err != nil {
			writeError(w, http.StatusBadRequest, "pool", err.Error())
			return
		}
		if v != pool.SettingOff && v != pool.SettingDefault && a.s.quota.Pools().Pool(v) == nil {
			writeError(w, http.StatusBadRequest, "pool", fmt.Sprintf("%v: %q (choices: a pool name, off, default; pools: %s)", pool.ErrNoPool, v, apiNames(a.s.quota.Pools().Names())))
			return
		}
	}
	if req.Parent != nil {
		switch err := a.checkSessionID(*req.Parent); {
		case err != nil:
			writeError(w, http.StatusBadRequest, "parent", "parent: "+err.Error())
			return
		case *req.Parent == id:
			writeError(w, http.StatusBadRequest, "parent", fmt.Sprintf("session %q cannot be forked from itself", id))
			return
		}
	}
	a.sweepTickets(a.s.clock.Now())
	var warnings []error
	// A setting that fails validation is a 400; one that applies but is not saved
	// (or a record that could not be loaded) is a warning in the answer.
	apply := func(field string, err error) bool {
		switch {
		case err == nil:
			return true
		case errors.Is(err, pool.ErrSessionSetting) || errors.Is(err, pool.ErrNoPool):
			writeError(w, http.StatusBadRequest, field, err.Error())
			return false
		}
		warnings = append(warnings, err)
		return true
	}
	if req.Parent != nil {
		if _, err := a.s.quota.Fork(id, *req.Parent); !apply("parent", err) {
			return
		}
	}
	if req.Switch != nil {
		if _, err := a.s.quota.SetSwitch(id, *req.Switch); !apply("switch", err) {
			return
		}
	}
	if req.Pool != nil {
		if _, err := a.s.quota.SetPool(id, *req.Pool); !apply("pool", err) {
			return
		}
	}
	writeJSON(w, http.StatusOK, a.session(id, errors.Join(warnings...)))
}

// session assembles a session's view; warn, when set, becomes its warning.
func (a *api) session(id string, warn error) APISession {
	facts, err := a.s.quota.Facts(id)
	out := APISession{Session: id, SessionFacts: facts}
	if rec, rerr := a.s.quota.Sessions().Get(id); rerr == nil {
		out.Switch, out.PoolSetting, out.Parent = rec.Switch, rec.Pool, rec.Parent
	}
	if st, ok := a.s.quota.State(id); ok {
		out.LongTerm = &st
	}
	if err := errors.Join(warn, err); err != nil {
		out.Warning = err.Error()
	}
	return out
}

func (a *api) checkSessionID(id string) error {
	if id == "" {
		return apiFieldError{"id", "the session id is empty"}
	}
	return apiCheckName("id", id)
}
