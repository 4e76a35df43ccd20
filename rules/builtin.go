package rules

import (
	_ "embed"
	"strings"
	"sync"

	"github.com/gatectl/gatectl/engine"
)

//go:embed builtin.yaml
var builtinYAML []byte

// BuiltinFile is the name the built-in rule file goes by in errors and listings.
const BuiltinFile = "builtin.yaml"

var builtin struct {
	once sync.Once
	rs   *RuleSet
	err  error
}

// Builtin returns the built-in rule set (rules/builtin.yaml, embedded), named
// "builtin". It is compiled and its golden cases run once per process; opts
// tune the copy returned (opts.Cases run against it).
func Builtin(opts Options) (*RuleSet, error) {
	builtin.once.Do(func() {
		rs, err := compileSet(BuiltinFile, builtinYAML)
		if err == nil {
			err = rs.runCases(Options{})
		}
		builtin.rs, builtin.err = rs, err
	})
	if builtin.err != nil {
		return nil, builtin.err
	}
	rs := builtin.rs.with(opts)
	rs.cases = nil // already run
	if len(opts.Cases) > 0 {
		if err := rs.runCases(opts); err != nil {
			return nil, err
		}
	}
	rs.cases = builtin.rs.cases
	return rs, nil
}

// BuiltinSource returns the text of the built-in rule file.
func BuiltinSource() []byte { return append([]byte(nil), builtinYAML...) }

// CatchAll reports whether a verdict's By names a catch-all: one of the built-in
// rules that decide from the status code alone (builtin/status-429,
// builtin/status-5xx, ... every built-in rule named status-*), or no classifier
// at all (chain/none). Such a verdict rests on nothing the provider said; the
// server keeps those failures so that an operator can write a rule for them
// (GET /gate/v1/failures/unclassified).
func CatchAll(by string) bool {
	return by == engine.ByChainNone || strings.HasPrefix(by, "builtin/status-")
}
