package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/testlog"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
)

// A classifier that fails at run time (here a rule whose expression cannot
// convert the body) falls through to the next link, as before; now each failure
// is counted by classifier on /metrics, and logged at most once a minute per
// classifier so a broken rule cannot flood the log.
// ruleFixture serves a config whose one rule file, name, holds rule.
func ruleFixture(t *testing.T, name, rule string) *pxFixture {
	t.Helper()
	rules := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(rules, []byte("name: "+name+"\nrules:\n  - "+rule+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return newPxFixture(t, fmt.Sprintf(`
providers:
  alpha: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
classifiers:
  - rules: %q
`, rules), true)
}

func TestClassifierErrorsCountedAndLogged(t *testing.T) {
	f := ruleFixture(t, "broken", "{name: boom, when: 'int(body) > 0', class: SERVER}")
	h := f.srv.Handler()
	failure := func() map[string]any {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/gate/v1/failure",
			strings.NewReader(`{"provider":"alpha","model":"m","status":503,"body":"oops"}`)))
		if rec.Code != http.StatusOK {
			t.Fatalf("failure: %d %s", rec.Code, rec.Body)
		}
		return apiJSON(t, rec.Body.Bytes())
	}
	for range 5 {
		if v := failure(); v["class"] == "" || strings.HasPrefix(fmt.Sprint(v["by"]), "broken") {
			t.Fatalf("the broken rule decided: %v", v)
		}
	}
	metric := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return grepLines(rec.Body.String(), "gatectl_classifier_errors_total{")
	}
	if m := metric(); !strings.Contains(m, `gatectl_classifier_errors_total{classifier="broken"} 5`) {
		t.Fatalf("metric: %q", m)
	}
	if n := strings.Count(f.logs.String(), "classifier failed"); n != 1 {
		t.Fatalf("%d log lines for 5 errors in one minute:\n%s", n, f.logs.String())
	}
	f.clock.Advance(time.Minute)
	failure()
	logs := f.logs.String()
	if n := strings.Count(logs, "classifier failed"); n != 2 || !strings.Contains(logs, "suppressed=4") {
		t.Fatalf("%d log lines a minute later:\n%s", n, logs)
	}
}

// The error of a rule that chokes on a value quotes the value (expr's
// "invalid operation: int(…)"), and a failure's headers and body may hold a
// key: what is logged has credentials masked.
func TestClassifierErrorLogRedacted(t *testing.T) {
	f := ruleFixture(t, "boom", `{name: boom, when: 'int(header("x-count")) > 3', class: SERVER}`)
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/gate/v1/failure",
		strings.NewReader(`{"provider":"alpha","model":"m","status":503,"headers":{"x-count":"sk-proj-LEAKME0123456789"}}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("failure: %d %s", rec.Code, rec.Body)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "classifier failed") || strings.Contains(logs, "LEAKME") {
		t.Fatalf("want the error logged with the key masked:\n%s", logs)
	}
}

// log.level takes effect on a reload (the named loggers share the root's
// level); log.format, read at start, is warned about instead of ignored.
func TestReloadLogLevel(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	write := func(log string) {
		if err := os.WriteFile(path, []byte("log: "+log+"\nproviders:\n  alpha: {kind: openai, baseURL: \"http://127.0.0.1:9/v1\"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("{level: info}")
	var logs testlog.Buffer
	root := hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Info, Output: &logs})
	clock := engine.NewFakeClock(apiT0)
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{Clock: clock, Logger: root})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, Clock: clock, Logger: root, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	write("{level: error, format: json}")
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gate := root.Named("gate"); gate.IsWarn() || !gate.IsError() {
		t.Errorf("after the reload a named logger logs at %v, want error", gate.GetLevel())
	}
	if !strings.Contains(logs.String(), "read at start; restart to apply them") || !strings.Contains(logs.String(), "log.format") {
		t.Errorf("no word on the format change:\n%s", logs.String())
	}
}

// A reload that changes what the daemon reads at start only says so, naming
// each, in the log and in the reload event: "reloaded" alone let an operator
// believe a new API token guarded the API.
func TestReloadNamesStartOnlySettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	write := func(extra string) {
		if err := os.WriteFile(path, []byte(extra+"providers:\n  alpha: {kind: openai, baseURL: \"http://127.0.0.1:9/v1\"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	var logs testlog.Buffer
	root := hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Info, Output: &logs})
	clock := engine.NewFakeClock(apiT0)
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{Clock: clock, Logger: root})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, Clock: clock, Logger: root, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	events, cancel := srv.Bus().Subscribe(16)
	defer cancel()
	write("listen: 127.0.0.1:7999\napi: {tokenEnv: MY_TOKEN}\nserver: {maxConnections: 10}\ngate: {window: 2m, maxWait: 4m}\n")
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "changed=\"listen, server, api\"") {
		t.Errorf("want listen, server and api named, and nothing else (the gate reloads):\n%s", logs.String())
	}
	for {
		select {
		case ev := <-events:
			if ev.Type != "reload" {
				continue
			}
			if got := fmt.Sprint(ev.Data.(map[string]any)["restartToApply"]); got != "[listen server api]" {
				t.Fatalf("reload event restartToApply %s, want [listen server api]", got)
			}
			return
		case <-time.After(5 * time.Second):
			t.Fatal("no reload event")
		}
	}
}
