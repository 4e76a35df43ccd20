package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
)

// APIWaits is the answer of GET /gate/v1/waits: every call the gate holds now,
// and every session in a long-term quota wait. It is a read-only snapshot: the
// console polls it, and asking changes no queue.
type APIWaits struct {
	At        time.Time          `json:"at"`
	MaxWaitMs int64              `json:"maxWaitMs"`
	Held      []gate.HeldCall    `json:"held"`
	LongTerm  []pool.SessionWait `json:"longTerm"`
}

func (a *api) handleWaits(w http.ResponseWriter, r *http.Request) {
	for k := range r.URL.Query() {
		writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (this endpoint takes none)", k))
		return
	}
	now := a.s.clock.Now()
	out := APIWaits{At: now, MaxWaitMs: a.s.ledger.Config().MaxWait.Milliseconds(),
		Held: a.s.ledger.Held(now), LongTerm: a.s.quota.LongTermWaits()}
	if out.Held == nil {
		out.Held = []gate.HeldCall{}
	}
	writeJSON(w, http.StatusOK, out)
}
