package server

import (
	"fmt"
	"net/http"
	"testing"
)

// TestAPIFailureInterleavedTurns: failures of two turns of one session on one
// provider, reported alternately, each get retry.rounds (3) retries, and the
// budgetLeft of a failure that spends nothing is its own turn's. Before, each
// report of one turn reset the other's rounds and neither was ever given up.
func TestAPIFailureInterleavedTurns(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	fail := func(turn string, status int) map[string]any {
		return e.post("/gate/v1/failure", fmt.Sprintf(`{"provider":"beta","model":"m1","session":"s9","turn":%q,"status":%d}`, turn, status), http.StatusOK)
	}
	for round := 1; round <= 3; round++ {
		for _, turn := range []string{"t1", "t2"} {
			if f := fail(turn, 500); f["action"] != "retry" || apiNum(t, f, "attempt") != float64(round) {
				t.Fatalf("%s round %d: %v", turn, round, f)
			}
		}
	}
	if f := fail("t1", 500); f["action"] != "giveup" || f["exhausted"] != true || apiNum(t, f, "budgetLeft") != 0 {
		t.Fatalf("t1 spent: %v", f)
	}
	if f := fail("t3", 500); f["action"] != "retry" || apiNum(t, f, "attempt") != 1 {
		t.Fatalf("a third turn: %v", f)
	}
	// An AUTH failure spends nothing: budgetLeft is what its own turn has left.
	if f := fail("t3", 401); f["action"] != "giveup" || apiNum(t, f, "budgetLeft") != 2 {
		t.Fatalf("AUTH in t3: %v", f)
	}
	if f := fail("t2", 401); f["action"] != "giveup" || apiNum(t, f, "budgetLeft") != 0 {
		t.Fatalf("AUTH in t2: %v", f)
	}
}
