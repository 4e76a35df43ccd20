package server

import (
	"net/http"
	"strings"
	"testing"
)

// A reservation larger than the model's whole configured budget is refused: it
// could never fit in a window, and admitting it would hold every other caller
// of the model until it is settled (or its ticket expires ten minutes later).
func TestAPIAdmitRefusesReservationAboveBudget(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	cases := []struct{ name, body, field, msg string }{
		{"MaxInt32", `{"provider":"alpha","model":"small","session":"hog","maxTokens":2147483647}`, "maxTokens", "10000"},
		{"Sum", `{"provider":"alpha","model":"small","session":"hog","inputTokens":6000,"maxTokens":4001}`, "maxTokens", "inputTokens 6000 + maxTokens 4001"},
		{"InputAlone", `{"provider":"alpha","model":"small","session":"hog","inputTokens":10001}`, "inputTokens", "10001"},
		{"DefaultBudget", `{"provider":"alpha","model":"other","session":"hog","maxTokens":2147483647}`, "maxTokens", "1000000"},
		// the input the gate estimates from the bytes is what it would reserve
		{"Bytes", `{"provider":"alpha","model":"small","session":"hog","inputBytes":2000000000,"maxTokens":10}`, "inputBytes", "inputBytes 2000000000 (about"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := e.do(http.MethodPost, "/gate/v1/admit", c.body)
			field, msg := apiErrorOf(t, body)
			if status != http.StatusBadRequest || field != c.field || !strings.Contains(msg, c.msg) || !strings.Contains(msg, "budget") {
				t.Fatalf("%s: %d field %q message %q", c.body, status, field, msg)
			}
		})
	}
	// The model is not stalled: a call that fits goes straight through.
	a := e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputTokens":5000,"maxTokens":1000,"wait":false}`, http.StatusOK)
	if a["admitted"] != true || apiNum(t, a, "waitedMs") != 0 {
		t.Fatalf("a fitting call after the refused ones: %v", a)
	}
	e.post("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","release":true}`, http.StatusOK)
	a = e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputBytes":4000,"maxTokens":1000,"wait":false}`, http.StatusOK)
	if a["admitted"] != true {
		t.Fatalf("a call of a few bytes: %v", a)
	}
	// The whole budget exactly is still a reservation (it fits an empty window).
	e.post("/gate/v1/settle", `{"ticket":"`+a["ticket"].(string)+`","release":true}`, http.StatusOK)
	a = e.post("/gate/v1/admit", `{"provider":"alpha","model":"small","session":"s1","inputTokens":5000,"maxTokens":5000,"wait":false}`, http.StatusOK)
	if a["admitted"] != true {
		t.Fatalf("a call of exactly the budget: %v", a)
	}
}
