package balance_test

import (
	"fmt"

	"github.com/gatectl/gatectl/balance"
)

func ExampleParseReading() {
	stdout := []byte(`{"remaining": 2.94, "windows": [
		{"name": "weekly", "remaining": 2.94, "capacity": 35},
		{"name": "monthly", "remaining": "37.94"}
	], "resetsAt": "2026-10-01T00:00:00Z"}`)
	r, err := balance.ParseReading(stdout)
	if err != nil {
		fmt.Println("missing reading:", err)
		return
	}
	fmt.Println("remaining:", *r.Remaining)
	for _, w := range r.Windows { // the malformed monthly entry was dropped
		fmt.Println("window:", w.Name, w.Remaining, *w.Capacity)
	}

	_, err = balance.ParseReading([]byte("Traceback (most recent call last): ..."))
	fmt.Println("missing reading:", err)
	// Output:
	// remaining: 2.94
	// window: weekly 2.94 35
	// missing reading: balance: output is not a reading: invalid JSON at byte 1 of 38
}
