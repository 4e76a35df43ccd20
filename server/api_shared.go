package server

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/store/redisstore"
)

// A ticket admitted through the shared store names its model and its shared
// entry, so any instance on the same Redis can settle it: "gts_" +
// base64url(provider/model) + "." + the entry id, which carries the nonce
// only the holder of the reservation knows.
const sharedTicketPrefix = "gts_"

func sharedTicketID(provider, model, shared string) string {
	return sharedTicketPrefix + base64.RawURLEncoding.EncodeToString([]byte(provider+"/"+model)) + "." + shared
}

// parseSharedTicket reads a shared ticket id; ok is false for any other string.
func parseSharedTicket(id string) (provider, model, shared string, ok bool) {
	rest, found := strings.CutPrefix(id, sharedTicketPrefix)
	if !found {
		return "", "", "", false
	}
	enc, shared, found := strings.Cut(rest, ".")
	if !found || shared == "" {
		return "", "", "", false
	}
	pm, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", "", "", false
	}
	provider, model, ok = strings.Cut(string(pm), "/")
	return provider, model, shared, ok && provider != "" && model != ""
}

// settleElsewhere settles, through the shared store, a ticket another instance
// issued, output of its tokens written. handled is false when id is not such a
// ticket (or there is no store): the caller answers 404 as for any unknown
// ticket. An abandoned call keeps its entry's reservation.
func (a *api) settleElsewhere(w http.ResponseWriter, id string, tokens, output int64, how settleKind) (handled bool) {
	if a.s.shared == nil {
		return false
	}
	provider, model, shared, ok := parseSharedTicket(id)
	if !ok {
		return false
	}
	var reserved int64
	var err error
	if how == settleAbandon {
		reserved, err = a.s.shared.AbandonFor(provider, model, shared, id)
		tokens = reserved
	} else {
		reserved, err = a.s.shared.SettleFor(provider, model, shared, tokens, output, id)
	}
	switch {
	case errors.Is(err, redisstore.ErrNotOpen):
		return false
	case err != nil:
		a.storeUnavailable(w, "the shared gate store (Redis) could not settle the ticket: "+err.Error())
		return true
	}
	resp := apiSettleResponse{Ticket: id, ReservedTokens: reserved, Provider: provider, Model: model}
	switch how {
	case settleRelease:
		resp.Released = true
	case settleAbandon:
		resp.Abandoned, resp.UsedTokens = true, tokens
	default:
		resp.Settled, resp.UsedTokens = true, tokens
	}
	writeJSON(w, http.StatusOK, resp)
	return true
}

// releaseElsewhere releases, through the shared store, a ticket another
// instance issued, as a settle with release: true does (settleElsewhere):
// the tokens it reserved, and open: whether it is such a ticket, still open
// on the shared window — or err says the store could not tell.
func (a *api) releaseElsewhere(id string) (reserved int64, open bool, err error) {
	if a.s.shared == nil {
		return 0, false, nil
	}
	provider, model, shared, ok := parseSharedTicket(id)
	if !ok {
		return 0, false, nil
	}
	reserved, err = a.s.shared.SettleFor(provider, model, shared, 0, 0, id)
	if errors.Is(err, redisstore.ErrNotOpen) {
		return 0, false, nil
	}
	return reserved, true, err
}

// settledElsewhere is the store's notice that an instance settled a ticket:
// when it is one of ours, the local record closes with the real usage and
// without settling the shared entry a second time.
func (s *Server) settledElsewhere(ticket string, tokens int64) {
	if s.api == nil {
		return
	}
	tk := s.api.tickets.take(ticket)
	if tk == nil {
		return // not ours, or settled here already
	}
	_ = s.ledger.SettledElsewhere(s.clock.Now(), tk.t, tokens)
}

// sentElsewhere records the send of a ticket another instance issued: its
// entry on the shared window moves to now (that instance's own window keeps
// the admission's time). It reports whether it answered; an entry settled or
// gone answers 404, as a local ticket would.
func (a *api) sentElsewhere(w http.ResponseWriter, now time.Time, id string) (handled bool) {
	if a.s.shared == nil {
		return false
	}
	provider, model, shared, ok := parseSharedTicket(id)
	if !ok {
		return false
	}
	cfg := a.s.ledger.Config()
	span := cfg.Window + time.Duration(cfg.CountGuard*float64(cfg.Window))
	moved, err := a.s.shared.Sent(provider, model, shared, now, span)
	switch {
	case errors.Is(err, gate.ErrSharedEntryClosed):
		return false
	case err != nil:
		a.storeUnavailable(w, "the shared gate store (Redis) could not record the send: "+err.Error())
		return true
	}
	resp := apiSentResponse{Ticket: id, Moved: moved, Provider: provider, Model: model}
	if moved {
		resp.CountsFrom = &now
	}
	writeJSON(w, http.StatusOK, resp)
	return true
}

// storeUnavailable answers 503 for a shared store that could not decide,
// with a Retry-After drawn by spreadRetryAfter.
func (a *api) storeUnavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", a.s.spreadRetryAfter())
	writeError(w, http.StatusServiceUnavailable, "", msg)
}
