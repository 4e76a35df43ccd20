package server

// GET /v1/models: what a client may send as model, in the shape of the face
// that asks (Anthropic's when the request carries anthropic-version, else
// OpenAI's).

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gatectl/gatectl/snapshot"
)

// modelEntry is one item of GET /v1/models (OpenAI's list shape, with
// gatectl's fields after owned_by).
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Kind is the protocol of the route or pool it reaches; Routes lists a
	// pool's routes; AliasOf is an alias's target as written; Pattern marks a
	// name pattern (gpt-*), listed as an example of the names it admits, not as
	// a name to send.
	Kind    string   `json:"kind,omitempty"`
	Routes  []string `json:"routes,omitempty"`
	AliasOf string   `json:"alias_of,omitempty"`
	Pattern bool     `json:"pattern,omitempty"`
}

// listModels is every name a client may send, in the order resolveModel tries
// them (route.go), each once: pools, configured provider/model routes, exact
// aliases, bare models one route serves, alias patterns, and provider/* for
// every provider (any of its models, named provider/model).
func listModels(snap *snapshot.Snapshot) []modelEntry {
	cfg := snap.Config
	created := snap.BuiltAt.Unix()
	seen := map[string]bool{}
	var data []modelEntry
	add := func(e modelEntry) {
		if seen[e.ID] {
			return
		}
		seen[e.ID] = true
		e.Object, e.Created = "model", created
		data = append(data, e)
	}
	kindOf := func(provider string) string { return cfg.Providers[provider].Kind }
	poolKind := func(name string) (string, []string) {
		var kind string
		var routes []string
		if p := snap.Pools.Pool(name); p != nil {
			for _, rt := range p.Routes() {
				routes = append(routes, rt.String())
				if kind == "" {
					kind = kindOf(rt.Provider)
				}
			}
		}
		return kind, routes
	}
	for _, p := range snap.Pools.All() {
		kind, routes := poolKind(p.Name())
		add(modelEntry{ID: p.Name(), OwnedBy: "gatectl-pool", Kind: kind, Routes: routes})
	}
	routes := configuredRoutes(snap)
	for _, rt := range routes {
		add(modelEntry{ID: rt.Provider + "/" + rt.Model, OwnedBy: rt.Provider, Kind: kindOf(rt.Provider)})
	}
	aliases := cfg.Models.All()
	aliasEntry := func(name, target, pool, provider string, pattern bool) modelEntry {
		e := modelEntry{ID: name, AliasOf: target, Pattern: pattern}
		if pool != "" {
			e.OwnedBy = "gatectl-pool"
			e.Kind, e.Routes = poolKind(pool)
		} else {
			e.OwnedBy, e.Kind = provider, kindOf(provider)
		}
		return e
	}
	for _, a := range aliases {
		if !a.IsPattern() {
			add(aliasEntry(a.Name, a.Target, a.Pool, a.Route.Provider, false))
		}
	}
	count := map[string]int{}
	for _, rt := range routes {
		count[rt.Model]++
	}
	for _, rt := range routes {
		if count[rt.Model] == 1 {
			add(modelEntry{ID: rt.Model, OwnedBy: rt.Provider, Kind: kindOf(rt.Provider)})
		}
	}
	for _, a := range aliases {
		if a.IsPattern() {
			add(aliasEntry(a.Name, a.Target, a.Pool, a.Route.Provider, true))
		}
	}
	for _, name := range cfg.ProviderNames() {
		add(modelEntry{ID: name + "/*", OwnedBy: name, Kind: kindOf(name), Pattern: true})
	}
	return data
}

// handleModels answers GET /v1/models. Models a provider serves beyond the
// names above are not known to gatectl (ask the provider); the patterns say
// which of them a bare name reaches.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	snap := s.snap.Current()
	data := listModels(snap)
	if r.Header.Get("Anthropic-Version") != "" {
		s.anthropicModels(w, r, snap, data)
		return
	}
	if data == nil {
		data = []modelEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// anthropicModel is one item of Anthropic's GET /v1/models.
type anthropicModel struct {
	Type        string `json:"type"` // always "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// anthropicModels answers in Anthropic's list shape: only the names
// /v1/messages can take (those reaching an anthropic-kind provider), paged by
// limit (default 20, at most 1000), after_id and before_id as Anthropic's API
// pages them.
func (s *Server) anthropicModels(w http.ResponseWriter, r *http.Request, snap *snapshot.Snapshot, data []modelEntry) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeAnthropicError(w, http.StatusBadRequest, "limit", "limit must be a number from 1 to 1000 (got "+strconv.Quote(v)+")")
			return
		}
		limit = n
	}
	created := snap.BuiltAt.UTC().Format(time.RFC3339)
	var all []anthropicModel
	for _, e := range data {
		if e.Kind != string(kindAnthropic) {
			continue
		}
		all = append(all, anthropicModel{Type: "model", ID: e.ID, DisplayName: displayName(e), CreatedAt: created})
	}
	from, to := 0, len(all)
	if id := q.Get("after_id"); id != "" {
		from = len(all)
		for i, m := range all {
			if m.ID == id {
				from = i + 1
				break
			}
		}
	}
	if id := q.Get("before_id"); id != "" {
		to = 0
		for i, m := range all {
			if m.ID == id {
				to = i
				break
			}
		}
		from = min(max(to-limit, from), to)
	}
	page := all[from:to]
	hasMore := len(page) > limit
	if hasMore {
		page = page[:limit]
	}
	if q.Get("before_id") != "" {
		hasMore = from > 0
	}
	out := map[string]any{"data": page, "has_more": hasMore, "first_id": nil, "last_id": nil}
	if len(page) > 0 {
		out["first_id"], out["last_id"] = page[0].ID, page[len(page)-1].ID
	} else {
		out["data"] = []anthropicModel{}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleModel answers GET /v1/models/{model}: the listed entry of that id, or
// for a name a pattern or route admits (gpt-4o), an entry saying where it goes;
// 404 in the face's shape otherwise. With anthropic-version, Anthropic's shape,
// and only for names /v1/messages takes.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	snap := s.snap.Current()
	id := r.PathValue("model")
	face := requestFace(r)
	var entry *modelEntry
	for _, e := range listModels(snap) {
		if e.ID == id {
			entry = &e
			break
		}
	}
	if entry == nil {
		t, err := s.lookupModel(snap, id)
		if err != nil {
			writeFaceError(w, face, http.StatusNotFound, "model", err.Error())
			return
		}
		e := modelEntry{ID: id, Object: "model", Created: snap.BuiltAt.Unix()}
		if t.alias != nil {
			e.AliasOf = t.alias.Target
		}
		if t.pool != nil {
			e.OwnedBy = "gatectl-pool"
			for _, rt := range t.pool.Routes() {
				e.Routes = append(e.Routes, rt.String())
			}
			e.Kind = snap.Config.Providers[t.pool.Routes()[0].Provider].Kind
		} else {
			e.OwnedBy, e.Kind = t.route.Provider, snap.Config.Providers[t.route.Provider].Kind
		}
		entry = &e
	}
	if face != kindAnthropic {
		writeJSON(w, http.StatusOK, entry)
		return
	}
	if entry.Kind != string(kindAnthropic) {
		writeAnthropicError(w, http.StatusNotFound, "model", "model "+strconv.Quote(id)+" reaches an "+entry.Kind+"-kind provider: /v1/messages cannot take it")
		return
	}
	writeJSON(w, http.StatusOK, anthropicModel{Type: "model", ID: entry.ID, DisplayName: displayName(*entry),
		CreatedAt: snap.BuiltAt.UTC().Format(time.RFC3339)})
}

// displayName is an entry's display_name in Anthropic's shape.
func displayName(e modelEntry) string {
	switch {
	case e.Pattern:
		return e.ID + " (any name it matches)"
	case e.AliasOf != "":
		return e.ID + " (alias of " + e.AliasOf + ")"
	case e.Routes != nil:
		return e.ID + " (gatectl pool)"
	}
	return e.ID
}
