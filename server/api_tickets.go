package server

import (
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// Ticket table defaults.
const (
	// apiTicketTTL is how long a ticket the decision API handed out may stay
	// unsettled: after it, the ticket is released (its reservation refunded) and
	// a later settle answers 404. Ten minutes outlasts any sane LLM call.
	apiTicketTTL = 10 * time.Minute
	// apiMaxTickets bounds the table: past it the oldest ticket is released, so a
	// harness that never settles cannot grow the server without bound.
	apiMaxTickets = 1 << 16
)

// apiTicket is one open admission of the decision API.
type apiTicket struct {
	id       string
	t        gate.Ticket
	provider string
	model    string
	session  string
	issued   time.Time
	expires  time.Time
	sent     bool      // the harness reported the call sent (POST /gate/v1/sent); guarded by the table's mutex
	sentAt   time.Time // when it did (zero: not reported)
}

// apiTickets maps the opaque ticket strings of the decision API to the ledger's
// tickets. Entries are kept in issue order, which (one TTL for all) is expiry
// order, so expiry and eviction take the oldest first. Safe for concurrent use.
type apiTickets struct {
	ttl time.Duration
	max int

	mu    sync.Mutex
	byID  map[string]*list.Element // of *apiTicket
	order *list.List               // oldest first
}

func newAPITickets(ttl time.Duration, max int) *apiTickets {
	return &apiTickets{ttl: ttl, max: max, byID: map[string]*list.Element{}, order: list.New()}
}

// add records t and returns its id. When the table is full, the oldest tickets
// are returned in evicted for the caller to release.
func (ts *apiTickets) add(now time.Time, t gate.Ticket, provider, model, session string) (tk *apiTicket, evicted []*apiTicket) {
	id := newTicketID()
	if t.Shared != "" {
		// The key the shared entry is under: a model past gate.maxModels is
		// counted under its provider's (other), and another instance settling
		// the ticket looks there.
		p, m := t.Model()
		if p == "" {
			p, m = provider, model
		}
		id = sharedTicketID(p, m, t.Shared)
	}
	tk = &apiTicket{id: id, t: t, provider: provider, model: model, session: session, issued: now, expires: now.Add(ts.ttl)}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for ts.order.Len() >= ts.max {
		old := ts.order.Remove(ts.order.Front()).(*apiTicket)
		delete(ts.byID, old.id)
		evicted = append(evicted, old)
	}
	ts.byID[tk.id] = ts.order.PushBack(tk)
	return tk, evicted
}

// take removes and returns the ticket by id; nil when unknown, expired (and
// swept) or already taken.
func (ts *apiTickets) take(id string) *apiTicket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	e := ts.byID[id]
	if e == nil {
		return nil
	}
	delete(ts.byID, id)
	return ts.order.Remove(e).(*apiTicket)
}

// markSent returns the ticket by id without taking it, and whether this is
// the first report of its send; nil when unknown, expired (and swept) or
// already taken.
func (ts *apiTickets) markSent(now time.Time, id string) (tk *apiTicket, first bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	e := ts.byID[id]
	if e == nil {
		return nil, false
	}
	tk = e.Value.(*apiTicket)
	first, tk.sent = !tk.sent, true
	if first {
		tk.sentAt = now
	}
	return tk, first
}

// expired removes and returns the tickets whose time is up at now.
func (ts *apiTickets) expired(now time.Time) []*apiTicket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []*apiTicket
	for e := ts.order.Front(); e != nil; e = ts.order.Front() {
		tk := e.Value.(*apiTicket)
		if now.Before(tk.expires) {
			break
		}
		ts.order.Remove(e)
		delete(ts.byID, tk.id)
		out = append(out, tk)
	}
	return out
}

// open is how many tickets are outstanding.
func (ts *apiTickets) open() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.order.Len()
}

// newTicketID returns an opaque, unguessable ticket id: "gt_" and 128 random bits.
func newTicketID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "gt_" + hex.EncodeToString(b[:])
}

// sweepTickets releases the tickets that expired: their reservations go back to
// the window, and "ticket-expired" is announced. Every decision API call sweeps
// first, so a harness that forgets to settle is cleaned up by the next call.
func (a *api) sweepTickets(now time.Time) {
	for _, tk := range a.tickets.expired(now) {
		a.dropTicket(now, tk, "expired")
	}
}

// dropTicket closes a ticket the harness never settled: released, or, when
// the harness reported its call sent within the window, kept counted as a
// call in flight is — the provider had it (Ledger.Abandon). The decision
// API's tickets are admitted without Request.Sends, so the harness's report
// decides.
func (a *api) dropTicket(now time.Time, tk *apiTicket, why string) {
	if tk.sent {
		_, _ = a.s.ledger.Abandon(now, tk.t)
	} else {
		_ = a.s.ledger.Release(now, tk.t)
	}
	a.s.apiLog.Warn("ticket closed unsettled", "why", why, "provider", tk.provider, "model", tk.model,
		"session", tk.session, "age", now.Sub(tk.issued), "sent", tk.sent)
	a.s.bus.Publish(Event{Type: "ticket-" + why, At: now, Data: map[string]any{
		"provider": tk.provider, "model": tk.model, "session": tk.session,
		"reservedTokens": tk.t.Reserved, "ageMs": now.Sub(tk.issued).Milliseconds(), "sent": tk.sent,
	}})
}
