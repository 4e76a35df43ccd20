package server

import (
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// A shared ticket's id names the key its shared entry is under: for a model
// past gate.maxModels, its provider's (other), where another instance that
// settles the ticket looks — not the model the request named, under which it
// found nothing and the entry stayed held until the ticket's TTL.
func TestSharedTicketIDNamesWhereItCounts(t *testing.T) {
	c := gate.DefaultConfig()
	c.MaxModels = 1
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := gate.NewLedger(c, engine.NewFakeClock(now))
	if err != nil {
		t.Fatal(err)
	}
	r := gate.Request{Provider: "p", Model: "a", Session: "s", InputTokens: 10, MaxTokens: 10}
	if _, w := l.Submit(now, r); w != nil {
		t.Fatal("first model waits")
	}
	r.Model = "b" // past maxModels: counted under p/(other)
	tk, w := l.Submit(now, r)
	if w != nil {
		t.Fatal("second model waits")
	}
	if p, m := tk.Model(); p != "p" || m != gate.OtherModel {
		t.Fatalf("setup: counted under %s/%s, want p/%s", p, m, gate.OtherModel)
	}
	tk.Shared = "e1" // as a shared window names its entry
	at, _ := newAPITickets(time.Minute, 10).add(now, tk, "p", "b", "s")
	provider, model, shared, ok := parseSharedTicket(at.id)
	if !ok || provider != "p" || model != gate.OtherModel || shared != "e1" {
		t.Fatalf("ticket %q names %s/%s entry %s (ok %v), want p/%s entry e1", at.id, provider, model, shared, ok, gate.OtherModel)
	}
}
