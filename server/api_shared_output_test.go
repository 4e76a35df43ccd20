package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A decision-API ticket settled on another instance than the one that issued
// it corrects the shared output window to what the call wrote: with the
// decision API behind a load balancer most settles land elsewhere, and each
// kept its max_tokens there for the window.
func TestSettleElsewhereCorrectsTheSharedOutput(t *testing.T) {
	a, b, rs := sharedAPIPair(t, "{tpm: 1000000, otpm: 1000}")
	ticket := admitOn(t, a)
	if st := b.post("/gate/v1/settle", `{"ticket":"`+ticket+`","usage":{"inputTokens":10,"outputTokens":100}}`, 200); st["settled"] != true {
		t.Fatalf("settle on B of A's ticket %q: %v", ticket, st)
	}
	if v := sharedKey(t, rs, "os"); v != "100" {
		t.Fatalf("the shared output window holds %s after the settle on B, want 100 (what the call wrote, not its 600)", v)
	}
}

// sharedAPIPair is two instances of the decision API sharing one real
// redis-server, with a provider up and gate defaults as given (YAML).
//
// Their Redis calls get 2 s, not the default 100 ms: these tests check what
// the instances tell each other, and under the race detector on a loaded
// machine a call past 100 ms failed (a release "the store could not answer").
func sharedAPIPair(t *testing.T, defaults string) (a, b *apiEnv, rs *redistest.Server) {
	t.Helper()
	rs = redistest.Start(t)
	up := httptest.NewServer(fakeprovider.New(fakeprovider.Config{Tokens: 1 << 30}))
	t.Cleanup(up.Close)
	cfg := fmt.Sprintf(`providers:
  up: {kind: openai, baseURL: "%s/v1"}
gate:
  defaults: %s
store:
  redis: {url: "%s", timeout: 2s}
`, up.URL, defaults, rs.URL())
	return newAPIEnv(t, cfg), newAPIEnv(t, cfg), rs
}

// admitOn admits a call of 10 input tokens and max_tokens 600 to up/m1 on
// instance e and returns its ticket.
func admitOn(t *testing.T, e *apiEnv) string {
	t.Helper()
	adm := e.post("/gate/v1/admit", `{"provider":"up","model":"m1","session":"s","inputTokens":10,"maxTokens":600}`, 200)
	ticket, _ := adm["ticket"].(string)
	return ticket
}

// sharedKey reads up/m1's shared window key of that suffix (s: the window's
// sum, os: the output window's).
func sharedKey(t *testing.T, rs *redistest.Server, suffix string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "*{up/m1}:"+suffix).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the shared window's key %q: keys %v (%v)", suffix, keys, err)
	}
	return c.Get(context.Background(), keys[0]).Val()
}

// A failure reported to another instance than the one that issued its
// ticket (a load balancer in front of the decision API) is classified and
// planned there, and the ticket's entry on the shared window is released, as
// a settle of it there would be: the issuing instance closes its own record.
// Before, the report was refused as an unknown ticket (404): no plan, no
// cooldown, and the reservation held until the ticket expired. An unknown
// ticket is still refused.
func TestFailureReportedElsewhereReleasesTheTicket(t *testing.T) {
	a, b, rs := sharedAPIPair(t, "{tpm: 1000000}")
	ticket := admitOn(t, a)
	f := b.post("/gate/v1/failure", `{"ticket":"`+ticket+`","provider":"up","model":"m1","session":"s","status":429,"headers":{"retry-after":"7"}}`, 200)
	if f["ticketReleased"] != true || f["class"] != "RATE_LIMIT" {
		t.Fatalf("failure on B of A's ticket %q: %v; want it classified and the ticket released", ticket, f)
	}
	if v := sharedKey(t, rs, "s"); v != "0" {
		t.Fatalf("the shared window holds %s after the failure on B, want 0 (the refused call released)", v)
	}
	// Settled already: the same report again is refused, as a local ticket's.
	b.post("/gate/v1/failure", `{"ticket":"`+ticket+`","provider":"up","model":"m1","status":429}`, 404)
	b.post("/gate/v1/failure", `{"ticket":"gts_nope","provider":"up","model":"m1","status":429}`, 404)
}
