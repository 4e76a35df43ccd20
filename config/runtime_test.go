package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const runtimeTestYAML = `
providers:
  deepseek: {kind: openai, baseURL: "https://api.deepseek.com/v1"}
gate:
  window: 60s
  maxWait: 120s
  models:
    deepseek/deepseek-chat: {tpm: 50000, rpm: 60}
retry:
  rounds: 4
  hintClamp: {min: 2s, max: 90s}
  transport: {dns: 0, refused: null}
quota:
  nativeRetryFirstProviders: [deepseek]
`

// An encoded section decodes back to itself: what GET shows, PUT takes.
func TestSectionObjectRoundTrip(t *testing.T) {
	for _, c := range []*Config{Default(), mustParse(t, runtimeTestYAML)} {
		for _, sec := range RuntimeSections {
			obj, err := SectionObject(c, sec)
			if err != nil {
				t.Fatal(err)
			}
			var partial map[string]any
			b, _ := json.Marshal(obj)
			if err := json.Unmarshal(b, &partial); err != nil {
				t.Fatal(err)
			}
			got, _, err := WithSection(c, sec, partial)
			if err != nil {
				t.Fatalf("%s: %v\n%s", sec, err, b)
			}
			if len(got.Gate.Models) == 0 && len(c.Gate.Models) == 0 {
				got.Gate.Models = c.Gate.Models // nil and empty mean the same
			}
			if !reflect.DeepEqual(got.Gate, c.Gate) || !reflect.DeepEqual(got.Retry, c.Retry) || !reflect.DeepEqual(got.Quota, c.Quota) {
				t.Fatalf("%s: round trip changed the section\n%s", sec, b)
			}
		}
	}
}

// A runtime value is refused with the message the file gets for it.
func TestWithSectionSameMessages(t *testing.T) {
	c := mustParse(t, runtimeTestYAML)
	cases := []struct {
		section string
		partial string
		file    string // the same value in a file
	}{
		{"retry", `{"multiplier": 0.5}`, "retry: {multiplier: 0.5}"},
		{"retry", `{"hintClamp": {"min": "2m"}}`, "retry: {hintClamp: {min: 2m, max: 90s}}"},
		{"retry", `{"rounds": "three"}`, "retry: {rounds: three}"},
		{"gate", `{"maxWait": "30s"}`, "gate: {maxWait: 30s}"},
		{"gate", `{"models": {"nobody/x": {"tpm": 5}}}`, "gate: {models: {nobody/x: {tpm: 5}}}"},
		{"quota", `{"bogus": true}`, "quota: {bogus: true}"},
	}
	for _, tc := range cases {
		var partial map[string]any
		if err := json.Unmarshal([]byte(tc.partial), &partial); err != nil {
			t.Fatal(err)
		}
		_, _, err := WithSection(c, tc.section, partial)
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("%s %s: no error: %v", tc.section, tc.partial, err)
		}
		_, ferr := Parse([]byte(strings.Replace(runtimeTestYAML, "\n"+tc.section+":\n", "\n"+tc.file+"\nunused_"+tc.section+":\n", 1)), "x.yaml")
		var fes Errors
		if !errors.As(ferr, &fes) {
			t.Fatalf("file %s: %v", tc.file, ferr)
		}
		found := false
		for _, fe := range fes {
			if fe.Path == es[0].Path && fe.Msg == es[0].Msg {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: runtime says %s: %s; the file says %v", tc.section, tc.partial, es[0].Path, es[0].Msg, ferr)
		}
	}
}

// A partial nested section keeps the keys it leaves out; the input is not changed.
func TestWithSectionPartial(t *testing.T) {
	c := mustParse(t, runtimeTestYAML)
	got, _, err := WithSection(c, "retry", map[string]any{"hintClamp": map[string]any{"max": "60s"}, "rounds": 2})
	if err != nil {
		t.Fatal(err)
	}
	if got.Retry.Rounds != 2 || got.Retry.HintClamp.Max.String() != "1m0s" || got.Retry.HintClamp.Min.String() != "2s" {
		t.Fatalf("got %+v", got.Retry)
	}
	if c.Retry.Rounds != 4 || c.Retry.HintClamp.Max.String() != "1m30s" {
		t.Fatalf("the input changed: %+v", c.Retry)
	}
	if _, _, err := WithSection(c, "pools", nil); err == nil || !strings.Contains(err.Error(), "retry, gate, quota") {
		t.Fatalf("unknown section: %v", err)
	}
}
