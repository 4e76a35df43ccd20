package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gatectl/gatectl/internal/failurejson"
	"reflect"
	"sort"
	"strings"
)

// RunCases runs golden cases through the plugin, whatever its kind, reporting
// every failing one. Classifier cases are as Classifier.RunCases describes. For a
// scorer or a balance parser a case is {name, input, expect}: input is the JSON
// object handed to the module as it is (for a balance parser,
// {"nowMs","config","fetch":{...}}), and expect is either {abstain: true} or the
// members the output must have, compared as JSON values (other members of the
// output are not checked): {score: 0.25}, {remaining: 74.75}.
func (p *Plugin) RunCases(ctx context.Context, cases []map[string]any) error {
	if p.Kind() == KindClassify {
		return ClassifierFor(p).RunCases(ctx, cases)
	}
	var errs []error
	for i, m := range cases {
		if err := p.runRawCase(ctx, m); err != nil {
			where := fmt.Sprintf("cases[%d]", i)
			if n, ok := m["name"]; ok {
				where += fmt.Sprintf(" (%v)", n)
			}
			errs = append(errs, fmt.Errorf("wasm: %s: %s: %w", p.Name(), where, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Plugin) runRawCase(ctx context.Context, raw map[string]any) error {
	m, _ := failurejson.Normalize(raw).(map[string]any)
	for k := range m {
		if k != "name" && k != "input" && k != "expect" {
			return fmt.Errorf("unknown key %q (valid: name, input, expect)", k)
		}
	}
	in, err := json.Marshal(m["input"])
	if err != nil || m["input"] == nil {
		return errors.New("input: want a JSON object")
	}
	exp, ok := m["expect"].(map[string]any)
	if !ok {
		return errors.New("expect: want a mapping ({abstain: true} or the output's members)")
	}
	out, abstain, err := p.Call(ctx, in)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCaseFailed, fmt.Sprintf(format, args...))
	}
	switch {
	case err != nil:
		return fail("%v", err)
	case exp["abstain"] == true && abstain:
		return nil
	case exp["abstain"] == true:
		return fail("got %s, want an abstention", out)
	case abstain:
		return fail("the module abstained")
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		return fail("output is not a JSON object (%d bytes)", len(out))
	}
	keys := make([]string, 0, len(exp))
	for k := range exp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var diffs []string
	for _, k := range keys {
		want, _ := json.Marshal(exp[k])
		var w any
		json.Unmarshal(want, &w) // YAML values as JSON values: ints become float64
		if !reflect.DeepEqual(got[k], w) {
			g, _ := json.Marshal(got[k])
			diffs = append(diffs, fmt.Sprintf("%s is %s, want %s", k, g, want))
		}
	}
	if len(diffs) > 0 {
		return fail("%s", strings.Join(diffs, "; "))
	}
	return nil
}
