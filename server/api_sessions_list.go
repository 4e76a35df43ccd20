package server

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
)

// GET /gate/v1/sessions lists the sessions the gate knows now: those that sent a
// call through the proxy, hold a route, had a retry decision in their current
// turn, or wait long-term. Session ids are client input, so the answer is a
// bounded page, the most recently active first, with the total beside it.

// Bounds of ?limit=.
const (
	apiSessionsDefaultLimit = 100
	apiSessionsMaxLimit     = 1000
)

// APISessionList is the answer of GET /gate/v1/sessions.
type APISessionList struct {
	At time.Time `json:"at"`
	// Sessions are at most Limit sessions, the most recently active first (ties by
	// id); Total is how many the gate knows.
	Sessions []APISessionListItem `json:"sessions"`
	Total    int                  `json:"total"`
	Limit    int                  `json:"limit"`
}

// APISessionListItem is one session: what GET /gate/v1/sessions/{id} answers,
// when it was last active, and its current turn's retries.
type APISessionListItem struct {
	APISession
	// LastActive is the session's latest call, route use, retry decision or
	// long-term wait.
	LastActive time.Time `json:"lastActive"`
	// Turn is the retry planner's counters for the session's current turn; null
	// when the planner made no decision for it yet.
	Turn *retry.TurnStats `json:"turn"`
	// Budgets is what is left of the current turn's retry budgets, one per provider
	// the turn retried on or the session is routed to, sorted by provider.
	Budgets []APIRetryBudget `json:"budgets"`
}

// APIRetryBudget is one (session, turn, provider) retry budget: the rounds the
// policy gives and how many are left, for the main and the mislabeled-400 budgets.
type APIRetryBudget struct {
	Provider       string `json:"provider"`
	Rounds         int    `json:"rounds"`
	Left           int    `json:"left"`
	MislabeledLeft int    `json:"mislabeledLeft"`
}

func (a *api) handleSessionsList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := apiSessionsDefaultLimit
	for k, vs := range q {
		if k != "limit" {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (parameters: limit)", k))
			return
		}
		n, err := strconv.Atoi(vs[0])
		if err != nil || n < 1 || n > apiSessionsMaxLimit || len(vs) > 1 {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("limit %q must be one whole number from 1 to %d", strings.Join(vs, ","), apiSessionsMaxLimit))
			return
		}
		limit = n
	}
	now := a.s.clock.Now()
	a.sweepTickets(now)

	// Every source is bounded (the janitor and each book's own cap), so the union is.
	last := map[string]time.Time{}
	seen := func(id string, at time.Time) {
		if id == "" {
			return
		}
		if cur, ok := last[id]; !ok || at.After(cur) {
			last[id] = at
		}
	}
	a.s.seen.each(seen)
	for _, sr := range a.s.quota.SessionRoutes() {
		seen(sr.Session, sr.LastUsed)
	}
	for _, lw := range a.s.quota.LongTermWaits() {
		seen(lw.Session, lw.EnteredAt)
	}
	turns := a.s.planner.Stats().Turns
	for id, ts := range turns {
		var at time.Time
		if ts.Stats.Last != nil {
			at = ts.Stats.Last.At
		}
		seen(id, at)
	}

	ids := slices.Collect(maps.Keys(last))
	slices.SortFunc(ids, func(x, y string) int {
		if c := last[y].Compare(last[x]); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	out := APISessionList{At: now, Total: len(ids), Limit: limit, Sessions: []APISessionListItem{}}
	pol := a.s.planner.Policy()
	for _, id := range ids[:min(limit, len(ids))] {
		it := APISessionListItem{APISession: a.session(id, nil), LastActive: last[id], Budgets: []APIRetryBudget{}}
		if ts, ok := turns[id]; ok {
			it.Turn = &ts
		}
		it.Budgets = a.retryBudgets(id, it, pol)
		out.Sessions = append(out.Sessions, it)
	}
	writeJSON(w, http.StatusOK, out)
}

// retryBudgets reads what is left of the session's current-turn budgets on the
// providers its turn retried on and the one its route is on. Without a turn
// there is no budget to read: none is listed.
func (a *api) retryBudgets(id string, it APISessionListItem, pol retry.Policy) []APIRetryBudget {
	out := []APIRetryBudget{}
	if it.Turn == nil {
		return out
	}
	providers := map[string]bool{}
	for p := range it.Turn.Stats.ByProvider {
		providers[p] = true
	}
	if l := it.Turn.Stats.Last; l != nil && l.Provider != "" {
		providers[l.Provider] = true
	}
	if it.Route != nil {
		providers[it.Route.Provider] = true
	}
	for _, p := range slices.Sorted(maps.Keys(providers)) {
		b := APIRetryBudget{Provider: p, Rounds: pol.Rounds, Left: pol.Rounds, MislabeledLeft: pol.Mislabeled.Rounds}
		// A record of another turn is a budget the current turn has not touched.
		// Without a record (a one-shot turn's ended with its request) the turn's
		// counters still tell what it spent on the provider.
		if rec, ok := a.s.planner.Budget(retry.BudgetKey{Session: id, Provider: p, Turn: it.Turn.Turn}); ok && rec.Turn == it.Turn.Turn {
			b.Left = max(pol.Rounds-rec.Rounds, 0)
			b.MislabeledLeft = max(pol.Mislabeled.Rounds-rec.Mislabeled, 0)
		} else if !ok {
			b.Left = max(pol.Rounds-int(it.Turn.Stats.ByProvider[p]), 0)
		}
		out = append(out, b)
	}
	return out
}
