package balance

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine"
)

func fp(f float64) *float64 { return &f }

func TestParseReading(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want engine.Reading
	}{
		{"full", `{"remaining": 2.94, "windows": [{"name": "five-hour", "remaining": 14, "capacity": 14}, {"name": "weekly", "remaining": 2.94, "capacity": 35}, {"name": "monthly", "remaining": 37.94}], "resetsAt": "2026-10-01T00:00:00Z"}`,
			engine.Reading{Remaining: fp(2.94), ResetsAt: "2026-10-01T00:00:00Z", Windows: []engine.WindowReading{
				{Name: "five-hour", Remaining: 14, Capacity: fp(14)},
				{Name: "weekly", Remaining: 2.94, Capacity: fp(35)},
				{Name: "monthly", Remaining: 37.94},
			}}},
		{"empty object", `{}`, engine.Reading{}},
		{"whitespace around", "\n  {\"remaining\": 0}\n\n", engine.Reading{Remaining: fp(0)}},
		{"negative remaining (debt)", `{"remaining": -3.5}`, engine.Reading{Remaining: fp(-3.5)}},
		{"nulls are absent", `{"remaining": null, "windows": null, "resetsAt": null, "error": null}`, engine.Reading{}},
		{"provider error beside the reading", `{"remaining": 0, "error": "account suspended"}`, engine.Reading{Remaining: fp(0), Error: "account suspended"}},
		{"unknown members ignored", `{"remaining": 1, "unit": "usd", "raw": {"x": [1,2]}}`, engine.Reading{Remaining: fp(1)}},
		{"malformed windows dropped, rest kept", `{"remaining": 7, "windows": [
			{"name": "ok", "remaining": 1, "capacity": 2},
			"not an object",
			{"name": "no remaining"},
			{"name": "string remaining", "remaining": "3"},
			{"name": 5, "remaining": 1},
			{"name": "zero capacity", "remaining": 1, "capacity": 0},
			{"name": "negative capacity", "remaining": 1, "capacity": -4},
			{"name": "string capacity", "remaining": 1, "capacity": "10"},
			{"remaining": 4, "capacity": 8},
			{"name": "null capacity", "remaining": 3, "capacity": null},
			null, 42, []
		]}`, engine.Reading{Remaining: fp(7), Windows: []engine.WindowReading{
			{Name: "ok", Remaining: 1, Capacity: fp(2)},
			{Name: "", Remaining: 4, Capacity: fp(8)},
			{Name: "null capacity", Remaining: 3},
		}}},
		{"windows not an array drops them all", `{"remaining": 1, "windows": {"name": "x", "remaining": 1}}`, engine.Reading{Remaining: fp(1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReading([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseReading: %v", err)
			}
			assertReading(t, got, tc.want)
		})
	}
}

func TestParseReadingRejects(t *testing.T) {
	t.Parallel()
	const marker = "SECRET-MARKER-7f3a"
	cases := []struct{ name, in string }{
		{"empty", ""},
		{"blank", "  \n"},
		{"not JSON", marker},
		{"a string", `"` + marker + `"`},
		{"an array", `[{"remaining": 1}]`},
		{"a number", `12`},
		{"null", `null`},
		{"two objects", `{"remaining": 1}{"remaining": 2}`},
		{"two lines", "{\"remaining\": 1}\n{\"remaining\": 2}\n"},
		{"trailing garbage", `{"remaining": 1} ` + marker},
		{"truncated", `{"remaining": 1, "note": "` + marker},
		{"remaining is a string", `{"remaining": "` + marker + `"}`},
		{"remaining is a bool", `{"remaining": true}`},
		{"remaining overflows", `{"remaining": 1e999}`},
		{"resetsAt is a number", `{"remaining": 1, "resetsAt": 17}`},
		{"error is an object", `{"remaining": 1, "error": {"m": "` + marker + `"}}`},
		{"invalid character", `{"remaining": ` + marker + `}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseReading([]byte(tc.in))
			if !errors.Is(err, ErrOutput) {
				t.Fatalf("err = %v, want ErrOutput", err)
			}
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("error quotes the output: %v", err)
			}
		})
	}
}

func assertReading(t *testing.T, got, want engine.Reading) {
	t.Helper()
	if !eqFloatPtr(got.Remaining, want.Remaining) {
		t.Errorf("Remaining = %v, want %v", fmtPtr(got.Remaining), fmtPtr(want.Remaining))
	}
	if got.ResetsAt != want.ResetsAt || got.Error != want.Error {
		t.Errorf("ResetsAt, Error = %q, %q; want %q, %q", got.ResetsAt, got.Error, want.ResetsAt, want.Error)
	}
	if len(got.Windows) != len(want.Windows) {
		t.Fatalf("Windows = %+v, want %+v", got.Windows, want.Windows)
	}
	for i := range got.Windows {
		g, w := got.Windows[i], want.Windows[i]
		if g.Name != w.Name || g.Remaining != w.Remaining || !eqFloatPtr(g.Capacity, w.Capacity) {
			t.Errorf("Windows[%d] = {%q %v %v}, want {%q %v %v}", i, g.Name, g.Remaining, fmtPtr(g.Capacity), w.Name, w.Remaining, fmtPtr(w.Capacity))
		}
	}
}

func eqFloatPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func fmtPtr(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}
