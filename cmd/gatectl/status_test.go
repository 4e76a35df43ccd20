package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/server"
	"github.com/gatectl/gatectl/snapshot"
)

// startServer runs a gatectl server on config over loopback, on a fake clock.
func startServer(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := engine.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m, err := snapshot.NewManager(context.Background(), path, snapshot.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Manager: m, Clock: clock, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return hs.URL
}

func postJSON(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"gatectl"}, args...))
	return out.String(), err
}

const statusYAML = `
providers:
  gateway-a: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
gate:
  models:
    gateway-a/flash-1: {tpm: 10000, rpm: 100, safetyFactor: 1}
`

func TestStatusAgainstServer(t *testing.T) {
	url := startServer(t, statusYAML)
	out, err := runCLI(t, "status", "--addr", url)
	if err != nil || !strings.Contains(out, "no model has been called yet") || !strings.Contains(out, "config version 0, window 1m0s, max wait 2m0s") {
		t.Fatalf("empty status: %v\n%s", err, out)
	}
	postJSON(t, url+"/gate/v1/admit", `{"provider":"gateway-a","model":"flash-1","inputTokens":5000,"maxTokens":1000}`)
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-1","status":429,"headers":{"Retry-After":"20"}}`)

	out, err = runCLI(t, "status", "--addr", strings.TrimPrefix(url, "http://")) // a bare host:port works too
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"1 open ticket\n",
		"MODEL", "WINDOW", "REQUESTS", "RESERVED", "IN-FLIGHT", "WAITING", "QUOTA", "TRIGGER", "COOLDOWN",
		"gateway-a/flash-1", "6000/6000 (100%)", "1/100", "6000 (from 10000)", "6000", "20s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	out, err = runCLI(t, "status", "--addr", url, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st server.APIStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(st.Models) != 1 || st.Models[0].InFlight != 1 || st.Models[0].Reserved != 6000 || st.Models[0].CooldownMs != 20000 || st.Models[0].Trigger != 6000 {
		t.Fatalf("json: %+v", st)
	}

	// A 429 whose words state the limit: the quota starts over at it, and the
	// status says where the figure came from.
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-a","model":"flash-2","status":429,"body":"Rate limit reached for flash-2 in organization org-x on tokens per min (TPM): Limit 8000, Used 7900, Requested 900. Please try again in 2s."}`)
	if out, err = runCLI(t, "status", "--addr", url); err != nil || !strings.Contains(out, "8000 (stated)") {
		t.Fatalf("status after a 429 stating 8000 tokens per minute: %v\n%s", err, out)
	}
}

func TestStatusErrors(t *testing.T) {
	url := startServer(t, statusYAML)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"status", "--addr", "http://127.0.0.1:1"}, "cannot reach gatectl at http://127.0.0.1:1"},
		{[]string{"status", "--addr", url, "--format", "xml"}, "--format must be text or json"},
		{[]string{"status", "--addr", "ftp://x"}, "want a URL such as http://127.0.0.1:7878"},
		{[]string{"status", "--addr", url, "extra"}, "takes no arguments"},
		{[]string{"status", "--addr", url + "/gate/v1/nothing"}, "no endpoint"},
	}
	for _, c := range cases {
		_, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestRoutesAgainstServer(t *testing.T) {
	url := startServer(t, routesYAML)
	out, err := runCLI(t, "routes", "--addr", url, "--draw", "1000")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pool medium\n",
		"pool advice (refuses mid-session switches: a started session waits on its route)\n",
		"gateway-a/flash-1@high", "five-hour 14/14*, weekly 2.94/35*, monthly 37.94*", "0.0840",
		"gateway-b/flash-1@high", "0.2000",
		"gateway-c/flash-1", "unscored",
		"DRAWS", "0 (0.0%)",
		"no reading from gateway-c: balance: script failed: exit status 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A QUOTA failure on the server marks its provider; the report shows it.
	postJSON(t, url+"/gate/v1/failure", `{"provider":"gateway-b","model":"model-max","status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"}`)
	out, err = runCLI(t, "routes", "advice", "--addr", url, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Pools []pool.PoolReport `json:"pools"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Pools) != 1 || rep.Pools[0].Name != "advice" || !rep.Pools[0].Routes[1].Marked || rep.Pools[0].Routes[0].Marked {
		t.Fatalf("pools %+v", rep.Pools)
	}
	out, err = runCLI(t, "routes", "advice", "--addr", url)
	if err != nil || !strings.Contains(out, "exhausted, lifts in 1h0m0s") {
		t.Fatalf("text mark: %v\n%s", err, out)
	}

	_, err = runCLI(t, "routes", "nope", "--addr", url)
	if !errors.Is(err, pool.ErrNoPool) || !strings.Contains(err.Error(), `no such pool: "nope"`) {
		t.Errorf("unknown pool: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"routes", "--addr", url, "--seed", "3"}, "--seed needs --offline"},
		{[]string{"routes", "--offline", "--addr", url}, "exclude each other"},
		{[]string{"routes", "--addr", "http://127.0.0.1:1"}, "cannot reach gatectl"},
	} {
		if _, err := runCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestQuotaTextSaysWhereTheQuotaComesFrom(t *testing.T) {
	for _, c := range []struct {
		m    gate.BucketStatus
		want string
	}{
		{gate.BucketStatus{Quota: 1000, Start: 1000}, "1000"},
		{gate.BucketStatus{Quota: 1340, Start: 1000}, "1340 (from 1000)"},
		{gate.BucketStatus{Quota: 8000, Start: 8000, Stated: 8000}, "8000 (stated)"},
		{gate.BucketStatus{Quota: 7000, Start: 8000, Stated: 8000}, "7000 (stated 8000)"},
		{gate.BucketStatus{Quota: 1200, Start: 1000, MaxTPM: 1200}, "1200 (from 1000) (cap 1200)"},
		{gate.BucketStatus{Quota: 8000, Start: 8000, Stated: 8000, OthersSpend: 900}, "8000 (stated) (others spend 900)"},
	} {
		if got := quotaText(c.m); got != c.want {
			t.Errorf("quotaText(%+v) = %q, want %q", c.m, got, c.want)
		}
	}
}

func TestRequestsTextShowsTheCap(t *testing.T) {
	if got := requestsText(gate.BucketStatus{WindowRequests: 3, RPMBudget: 14, MaxRPM: 14}); got != "3/14 (cap 14)" {
		t.Errorf("requestsText = %q, want \"3/14 (cap 14)\"", got)
	}
	if got := requestsText(gate.BucketStatus{WindowRequests: 3, RPMBudget: 60}); got != "3/60" {
		t.Errorf("requestsText = %q, want \"3/60\"", got)
	}
}

func TestOutputTextShowsModelsWithAnOutputLimit(t *testing.T) {
	var b strings.Builder
	if err := writeOutputText(&b, []gate.BucketStatus{
		{Provider: "p", Model: "none"},
		{Provider: "anthropic", Model: "stated", OutputLimit: 20000, OutputBudget: 19800, OutputWindow: 9900, OutputStated: 20000},
		{Provider: "anthropic", Model: "learned", OutputLimit: 6000, OutputBudget: 5940, OutputWindow: 5940, OutputStated: 20000, OutputTrigger: 6000},
	}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"OUTPUT WINDOW", "anthropic/stated   9900/19800 (50%)", "20000 (stated)", "anthropic/learned", "5940/5940 (100%)", "6000 (learned from a 429)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output table missing %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "p/none") {
		t.Errorf("a model without an output limit is listed:\n%s", got)
	}
	b.Reset()
	if err := writeOutputText(&b, []gate.BucketStatus{{Provider: "p", Model: "none"}}); err != nil || b.Len() != 0 {
		t.Fatalf("no model with an output limit wrote %q (%v), want nothing", b.String(), err)
	}
}
