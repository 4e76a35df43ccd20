package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/server"
)

func TestFailuresUnclassifiedAgainstServer(t *testing.T) {
	url := startServer(t, statusYAML)
	if out, err := runCLI(t, "failures", "--unclassified", "--addr", url); err != nil || !strings.Contains(out, "no unclassified failures") {
		t.Fatalf("empty: %v\n%s", err, out)
	}
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-1","status":429,"headers":{"Authorization":"Bearer sk-live-0123456789abcdef"},"body":"nope"}`)
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-1","status":429,"body":"Rate limit reached for requests per minute"}`) // a rule: not kept

	out, err := runCLI(t, "failures", "--unclassified", "--addr", url)
	if err != nil || !strings.Contains(out, "gateway-a/flash-1  status 429  RATE_LIMIT by builtin/status-429") ||
		!strings.Contains(out, "Authorization: [redacted]") || !strings.Contains(out, "  nope") || strings.Contains(out, "0123456789") {
		t.Fatalf("text: %v\n%s", err, out)
	}
	out, err = runCLI(t, "failures", "--unclassified", "--addr", url, "--format", "json")
	var l server.APIUnclassified
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Failures) != 1 || l.Failures[0].By != "builtin/status-429" || l.Total != 1 {
		t.Fatalf("json: %v %+v\n%s", err, l, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"failures", "--addr", url}, "say which list: --unclassified"},
		{[]string{"failures", "--unclassified", "--addr", url, "--format", "yaml"}, "--format must be text or json"},
	} {
		_, err := runCLI(t, tc.args...)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want exit %d with %q", tc.args, err, exitUsage, tc.want)
		}
	}
}
