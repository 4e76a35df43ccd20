package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/server"
)

func TestResetAgainstServer(t *testing.T) {
	url := startServer(t, statusYAML)
	postJSON(t, url+"/gate/v1/admit", `{"provider":"gateway-a","model":"flash-1","inputTokens":5000,"maxTokens":1000}`)
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-1","status":429,"headers":{"Retry-After":"20"}}`)
	if out, err := runCLI(t, "status", "--addr", url); err != nil || !strings.Contains(out, "6000 (from 10000)") {
		t.Fatalf("before: %v\n%s", err, out)
	}

	out, err := runCLI(t, "reset", "gateway-a/flash-1", "--addr", url)
	if want := "reset gateway-a/flash-1: quota 6000 → 10000, trigger 6000 → none, cooldown 20s left (kept)\n"; err != nil || out != want {
		t.Fatalf("reset = %v\n%q\nwant %q", err, out, want)
	}
	var st server.APIStatus
	if out, err := runCLI(t, "status", "--addr", url, "--format", "json"); err != nil || json.Unmarshal([]byte(out), &st) != nil ||
		len(st.Models) != 1 || st.Models[0].Trigger != 0 || st.Models[0].Quota != 10000 {
		t.Fatalf("status after reset: %v %+v\n%s", err, st, out)
	}

	t.Run("ModelWithSlashes", func(t *testing.T) {
		postJSON(t, url+"/gate/v1/admit", `{"provider":"gateway-a","model":"deepseek/deepseek-chat","inputTokens":5000,"maxTokens":1000}`)
		postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"deepseek/deepseek-chat","status":429}`)
		out, err := runCLI(t, "reset", "--addr", url, "--format", "json", "gateway-a/deepseek/deepseek-chat")
		if err != nil {
			t.Fatal(err)
		}
		var r server.APIModelReset
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if !r.Reset || r.Provider != "gateway-a" || r.Model != "deepseek/deepseek-chat" || r.Status.Trigger != 0 || r.Status.Quota != r.Status.Start {
			t.Fatalf("json: %+v", r)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		cases := []struct {
			args []string
			code int
			want string
		}{
			{[]string{"reset", "--addr", url, "gateway-a/never"}, exitFailure, "reset: the gate has no ledger for gateway-a/never"},
			{[]string{"reset", "--addr", url, "flash-1"}, exitUsage, `reset: "flash-1" is not PROVIDER/MODEL`},
			{[]string{"reset", "--addr", url, "/flash-1"}, exitUsage, "no provider before the slash"},
			{[]string{"reset", "--addr", url, "gateway-a/"}, exitUsage, "no model after the slash"},
			{[]string{"reset", "--addr", url}, exitUsage, "give PROVIDER/MODEL"},
			{[]string{"reset", "--addr", url, "a/b", "c/d"}, exitUsage, "at most one PROVIDER/MODEL"},
			{[]string{"reset", "a/b", "--addr", url, "--bogus"}, exitUsage, "flag provided but not defined"},
			{[]string{"reset", "--addr", url, "--format", "xml", "a/b"}, exitUsage, "--format must be text or json"},
			{[]string{"reset", "--addr", "http://127.0.0.1:1", "a/b"}, exitFailure, "cannot reach gatectl"},
		}
		for _, c := range cases {
			_, err := runCLI(t, c.args...)
			var ec cli.ExitCoder
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ec) || ec.ExitCode() != c.code {
				t.Errorf("%v = %v, want exit %d with %q", c.args, err, c.code, c.want)
			}
		}
	})
}

func TestResetPath(t *testing.T) {
	for _, c := range []struct{ provider, model, want string }{
		{"deepseek", "deepseek-chat", "/gate/v1/models/deepseek/deepseek-chat/reset"},
		{"openrouter", "deepseek/deepseek-chat", "/gate/v1/models/openrouter/deepseek/deepseek-chat/reset"},
		{"local", "qwen 2.5?x#y", "/gate/v1/models/local/qwen%202.5%3Fx%23y/reset"},
	} {
		if got := resetPath(c.provider, c.model); got != c.want {
			t.Errorf("resetPath(%q, %q) = %q, want %q", c.provider, c.model, got, c.want)
		}
	}
}

// A server from before the answer carried "before" still gets a line that says
// nothing false: the state after the reset alone, not "quota 0 → …".
func TestResetTextFromAnOlderServer(t *testing.T) {
	var b strings.Builder
	r := server.APIModelReset{Provider: "p", Model: "m", Reset: true}
	r.Status.Model, r.Status.Quota = "m", 1000
	if err := writeResetText(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "reset p/m: quota 1000, trigger none\n"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}
