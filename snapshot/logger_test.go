package snapshot

import (
	"context"
	"github.com/gatectl/gatectl/internal/testlog"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// loggerNames lists the names of the loggers that wrote to out, once each.
func loggerNames(out string) map[string]bool {
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`\] (gatectl[\w.]*):`).FindAllStringSubmatch(out, -1) {
		names[m[1]] = true
	}
	return names
}

// The snapshot hands balance the parent logger as it is: a source logs under
// gatectl.balance, named once.
func TestBalanceSourceLogsUnderGatectlBalance(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, `
providers:
  beta: {kind: openai, baseURL: "https://beta.example/v1"}
balances:
  - provider: beta
    script: [sh, -c, 'echo ''{"remaining": 5}''']
`)
	buf := &testlog.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Debug, Output: buf})
	s, err := Load(context.Background(), cfg, Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s.Balances.Refresh(context.Background(), []string{"beta"})
	if r, ok := s.Balances.Last("beta"); !ok || r.Remaining == nil || *r.Remaining != 5 {
		t.Fatalf("reading = %+v, %v", r, ok)
	}
	names := loggerNames(buf.String())
	if !names["gatectl.balance"] || len(names) != 1 {
		t.Errorf("logger names = %v, want only gatectl.balance:\n%s", names, buf)
	}
}
