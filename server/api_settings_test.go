package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/state"
	"github.com/hashicorp/go-hclog"
)

// newSettingsEnv is newAPIEnv on a state directory the test chooses (so a
// second server can reopen it), logging into logs when it is not nil.
func newSettingsEnv(t *testing.T, cfgPath, stateDir string, logs *bytes.Buffer) *apiEnv {
	t.Helper()
	clock := engine.NewFakeClock(apiT0)
	logger := hclog.NewNullLogger()
	if logs != nil {
		logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info, JSONFormat: true})
	}
	m, err := snapshot.NewManager(context.Background(), cfgPath, snapshot.Options{Clock: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, Clock: clock, StateDir: stateDir, Logger: logger,
		Rand: &lockedRand{r: rand.New(rand.NewPCG(1, 2))}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return &apiEnv{t: t, srv: srv, http: hs, clock: clock, mgr: m, config: cfgPath}
}

func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A bad value is refused with the message the config file gets for it, and
// nothing changes.
func TestSettingsPutValidated(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	cases := []struct {
		section, body, field string
		file                 string // the same value in the file's section
	}{
		{"retry", `{"multiplier": 0.5}`, "multiplier", "  multiplier: 0.5\n"},
		{"retry", `{"rounds": 3.0}`, "rounds", "  rounds: 3.0\n"},
		{"retry", `{"hintClamp": {"min": "10m"}}`, "hintClamp", "  hintClamp: {min: 10m}\n"},
		{"gate", `{"maxWait": "10s"}`, "maxWait", "  maxWait: 10s\n"},
		{"gate", `{"windw": "10s"}`, "windw", "  windw: 10s\n"},
		{"quota", `{"longTermDelay": "soon"}`, "longTermDelay", "  longTermDelay: soon\n"},
	}
	for _, tc := range cases {
		code, b, _ := e.do(http.MethodPut, "/gate/v1/settings/"+tc.section, tc.body)
		if code != http.StatusBadRequest {
			t.Fatalf("%s %s: %d %s", tc.section, tc.body, code, b)
		}
		field, msg := apiErrorOf(t, b)
		// The file's message for the same value: the section with the key added.
		src := strings.Replace(apiTestConfig, "\n"+tc.section+":\n", "\n"+tc.section+":\n"+tc.file, 1)
		_, ferr := config.Parse([]byte(src), "gatectl.yaml")
		var fes config.Errors
		if !errors.As(ferr, &fes) {
			t.Fatalf("the file accepted %q: %v", tc.file, ferr)
		}
		want := fes[0].Path + ": " + fes[0].Msg
		if field != tc.field || msg != want {
			t.Errorf("%s %s: field %q message %q; want field %q message %q (the file's)", tc.section, tc.body, field, msg, tc.field, want)
		}
	}
	for _, bad := range []string{`[1]`, `{"rounds":`, `{} {}`} {
		if code, b, _ := e.do(http.MethodPut, "/gate/v1/settings/retry", bad); code != http.StatusBadRequest {
			t.Errorf("body %s: %d %s", bad, code, b)
		}
	}
	if code, b, _ := e.do(http.MethodPut, "/gate/v1/settings/pools", `{}`); code != http.StatusNotFound || !strings.Contains(string(b), "retry, gate, quota") {
		t.Errorf("unknown section: %d %s", code, b)
	}
	got := e.get("/gate/v1/settings/retry", http.StatusOK)
	if ov := got["overrides"].(map[string]any); len(ov) != 0 {
		t.Fatalf("a refused PUT left overrides: %v", ov)
	}
}

// A PUT applies to the next decision: the planned wait and the rounds change,
// and the GET shows effective, overrides and file apart.
func TestSettingsAppliedToNextDecision(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	fail := func(session string) map[string]any {
		return e.post("/gate/v1/failure", `{"provider":"beta","model":"m1","session":"`+session+`","turn":"t1","status":500,"body":"oops"}`, http.StatusOK)
	}
	if f := fail("s1"); apiNum(t, f, "delayMs") != 2000 {
		t.Fatalf("before: %v", f)
	}
	got := e.call(http.MethodPut, "/gate/v1/settings/retry", `{"initialDelay": "5s", "rounds": 1, "hintClamp": {"max": "90s"}}`, http.StatusOK)
	if got["section"] != "retry" {
		t.Fatalf("answer: %v", got)
	}
	eff, over, file := got["effective"].(map[string]any), got["overrides"].(map[string]any), got["file"].(map[string]any)
	if eff["initialDelay"] != "5s" || eff["rounds"] != 1.0 || file["initialDelay"] != "2s" || file["rounds"] != 3.0 ||
		over["initialDelay"] != "5s" || over["rounds"] != 1.0 || len(over) != 3 {
		t.Fatalf("effective %v\noverrides %v\nfile %v", eff, over, file)
	}
	clamp := eff["hintClamp"].(map[string]any)
	if clamp["max"] != "1m30s" || clamp["min"] != "1s" {
		t.Fatalf("a partial nested section keeps the rest: %v", clamp)
	}
	if f := fail("s2"); apiNum(t, f, "delayMs") != 5000 || apiNum(t, f, "rounds") != 1 {
		t.Fatalf("after: %v", f)
	}
	if f := fail("s2"); f["action"] != "giveup" {
		t.Fatalf("rounds 1: the second failure of the turn gives up: %v", f)
	}
	all := e.get("/gate/v1/settings", http.StatusOK)
	if all["retry"].(map[string]any)["initialDelay"] != "5s" || all["gate"] == nil || all["quota"] == nil {
		t.Fatalf("GET /settings: %v", all)
	}
	// gate: a window change reaches the ledger
	e.call(http.MethodPut, "/gate/v1/settings/gate", `{"window": "30s", "maxWait": "90s"}`, http.StatusOK)
	if c := e.srv.Ledger().Config(); c.Window.String() != "30s" || c.MaxWait.String() != "1m30s" {
		t.Fatalf("ledger: %+v", c)
	}
	// a model's limit set alone keeps the file's other models
	e.call(http.MethodPut, "/gate/v1/settings/gate", `{"models": {"beta/m1": {"tpm": 5000}}}`, http.StatusOK)
	models := e.srv.Snapshot().Config.Gate.Models
	if models["beta/m1"].TPM != 5000 || models["alpha/small"].TPM != 10000 {
		t.Fatalf("models: %+v", models)
	}
	// quota
	e.call(http.MethodPut, "/gate/v1/settings/quota", `{"longTermDelay": "10m"}`, http.StatusOK)
	if d := e.srv.Snapshot().Quota.LongTermDelay; d.String() != "10m0s" {
		t.Fatalf("quota: %s", d)
	}
}

// Reset drops a section's overrides; every change is a "settings" event.
func TestSettingsResetAndEvent(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	ev := e.openEvents(t, "?types=settings")
	e.call(http.MethodPut, "/gate/v1/settings/retry", `{"rounds": 5}`, http.StatusOK)
	typ, data := ev.nextEvent(t)
	if typ != "settings" || data["section"] != "retry" || data["overrides"].(map[string]any)["rounds"] != 5.0 {
		t.Fatalf("event %s %v", typ, data)
	}
	got := e.call(http.MethodPost, "/gate/v1/settings/retry/reset", "", http.StatusOK)
	if len(got["overrides"].(map[string]any)) != 0 || got["effective"].(map[string]any)["rounds"] != 3.0 {
		t.Fatalf("reset: %v", got)
	}
	if e.srv.Planner().Policy().Rounds != 3 {
		t.Fatal("the planner kept the override")
	}
	typ, data = ev.nextEvent(t)
	if typ != "settings" || data["section"] != "retry" || len(data["overrides"].(map[string]any)) != 0 {
		t.Fatalf("event %s %v", typ, data)
	}
}

// A restart keeps the overrides; a file changed while the server was stopped
// wins for the keys it changed, and only those (logged at info).
func TestSettingsSurviveRestartAndFileWins(t *testing.T) {
	dir := t.TempDir()
	cfg, state := filepath.Join(dir, "gatectl.yaml"), filepath.Join(dir, "state")
	writeConfig(t, cfg, apiTestConfig)
	e := newSettingsEnv(t, cfg, state, nil)
	e.call(http.MethodPut, "/gate/v1/settings/retry", `{"rounds": 5, "initialDelay": "4s"}`, http.StatusOK)
	e.http.Close()
	e.srv.Close()

	e = newSettingsEnv(t, cfg, state, nil)
	got := e.get("/gate/v1/settings/retry", http.StatusOK)
	if eff := got["effective"].(map[string]any); eff["rounds"] != 5.0 || eff["initialDelay"] != "4s" {
		t.Fatalf("after a restart: %v", got)
	}
	if e.srv.Planner().Policy().Rounds != 5 {
		t.Fatal("the planner does not have the override after a restart")
	}
	e.http.Close()
	e.srv.Close()

	// the file changes rounds while stopped: its value wins; initialDelay stays
	writeConfig(t, cfg, strings.Replace(apiTestConfig, "rounds: 3", "rounds: 6", 1))
	var logs bytes.Buffer
	e = newSettingsEnv(t, cfg, state, &logs)
	got = e.get("/gate/v1/settings/retry", http.StatusOK)
	eff, over := got["effective"].(map[string]any), got["overrides"].(map[string]any)
	if eff["rounds"] != 6.0 || eff["initialDelay"] != "4s" || over["rounds"] != nil || over["initialDelay"] != "4s" {
		t.Fatalf("file wins for rounds only: %v", got)
	}
	if !strings.Contains(logs.String(), `"@message":"runtime setting dropped: the config file wins for the keys it changes"`) ||
		!strings.Contains(logs.String(), `"key":"rounds"`) || !strings.Contains(logs.String(), `"@level":"info"`) {
		t.Fatalf("the drop is not logged at info:\n%s", logs.String())
	}
}

// On a hot reload the file wins for the keys it changes; the others keep their
// overrides; the drop is a settings event.
func TestSettingsFileWinsOnReload(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	e.call(http.MethodPut, "/gate/v1/settings/retry", `{"rounds": 5, "initialDelay": "4s"}`, http.StatusOK)
	e.call(http.MethodPut, "/gate/v1/settings/quota", `{"longTermDelay": "10m"}`, http.StatusOK)
	ev := e.openEvents(t, "?types=settings")

	// an edit that leaves every overridden key alone keeps them all
	writeConfig(t, e.config, strings.Replace(apiTestConfig, "window: 60s", "window: 50s", 1))
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := e.srv.Planner().Policy(); p.Rounds != 5 || p.InitialDelay.String() != "4s" {
		t.Fatalf("an unrelated edit dropped overrides: %+v", p)
	}
	// the file sets initialDelay: it wins; rounds keeps its override
	writeConfig(t, e.config, strings.Replace(apiTestConfig, "initialDelay: 2s", "initialDelay: 3s", 1))
	if err := e.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := e.srv.Planner().Policy(); p.Rounds != 5 || p.InitialDelay.String() != "3s" {
		t.Fatalf("after the edit: rounds %d initialDelay %s", p.Rounds, p.InitialDelay)
	}
	got := e.get("/gate/v1/settings/retry", http.StatusOK)
	if over := got["overrides"].(map[string]any); over["initialDelay"] != nil || over["rounds"] != 5.0 {
		t.Fatalf("overrides: %v", over)
	}
	if e.srv.Snapshot().Quota.LongTermDelay.String() != "10m0s" {
		t.Fatal("another section's override was dropped")
	}
	typ, data := ev.nextEvent(t)
	if typ != "settings" || data["section"] != "retry" {
		t.Fatalf("event %s %v", typ, data)
	}
	var over map[string]any
	b, _ := json.Marshal(data["overrides"])
	_ = json.Unmarshal(b, &over)
	if over["initialDelay"] != nil || over["rounds"] != 5.0 {
		t.Fatalf("event overrides: %v", over)
	}
}

// PUTs and resets of the settings while the file is reloaded over and over: a
// PUT holds the book's write lock and takes the snapshot manager's in its
// rebuild, a reload holds the manager's and takes the book's own; were one of
// them to take the other's lock the other way round, this would hang. The
// deadline only catches such a hang (it is far beyond what the calls take).
func TestSettingsPutDuringReloadsDoesNotDeadlock(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 25
	errs := make(chan error, 4*n)
	var wg sync.WaitGroup
	for _, sec := range []string{"retry", "gate", "quota"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]string{"retry": `{"jitter": 0.1}`, "gate": `{"learn": false}`, "quota": `{"longTermDelay": "20m"}`}[sec]
			for i := range n {
				path, method, b := "/gate/v1/settings/"+sec, http.MethodPut, body
				if i%3 == 2 {
					path, method, b = path+"/reset", http.MethodPost, ""
				}
				// Straight to the handler, not through the test's HTTP server:
				// were it to hang, the server's Close would wait for it for ever.
				rec := httptest.NewRecorder()
				e.srv.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(b)))
				if rec.Code != http.StatusOK {
					errs <- fmt.Errorf("%s %s: %d %s", method, path, rec.Code, rec.Body)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			writeConfig(t, e.config, strings.Replace(apiTestConfig, "window: 60s", fmt.Sprintf("window: %ds", 50+i%2*10), 1))
			if err := e.mgr.Reload(ctx); err != nil {
				errs <- fmt.Errorf("reload %d: %w", i, err)
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		buf := make([]byte, 1<<20)
		t.Fatalf("settings changes and reloads hung:\n%s", buf[:runtime.Stack(buf, true)])
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// what the API says is in force is what the planner runs
	got := e.get("/gate/v1/settings/retry", http.StatusOK)
	if j := got["effective"].(map[string]any)["jitter"].(float64); j != e.srv.Planner().Policy().Jitter {
		t.Fatalf("effective jitter %v, planner %v", j, e.srv.Planner().Policy().Jitter)
	}
}

// A stored override this build rejects (here a retry.rounds past the most the
// planner takes) must not keep the server from starting: it is dropped from the
// book and the state file, logged at warn with its section and key, and the
// file's value applies.
func TestSettingsRejectedOverrideDroppedAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg, stateDir := filepath.Join(dir, "gatectl.yaml"), filepath.Join(dir, "state")
	writeConfig(t, cfg, apiTestConfig)
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"overrides":[{"key":["rounds"],"value":5000,"file":3,"setAt":"2026-01-01T00:00:00Z"}]}`
	if err := st.SaveSettings("retry", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var logs bytes.Buffer
	e := newSettingsEnv(t, cfg, stateDir, &logs)
	if got := e.srv.Planner().Policy().Rounds; got != 3 {
		t.Fatalf("rounds %d, want the file's 3", got)
	}
	if over := e.get("/gate/v1/settings/retry", http.StatusOK)["overrides"].(map[string]any); len(over) != 0 {
		t.Fatalf("the rejected override is still in the book: %v", over)
	}
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"@level":"warn"`) && strings.Contains(line, `"section":"retry"`) && strings.Contains(line, `"key":"rounds"`) {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("the drop is not logged at warn naming section and key:\n%s", logs.String())
	}
	e.http.Close()
	e.srv.Close()
	st, err = state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if recs, err := st.LoadSettings(); err != nil || len(recs["retry"]) != 0 {
		t.Fatalf("the state file still holds the override: %q (%v)", recs["retry"], err)
	}
}

// When the snapshot cannot be rebuilt with the stored overrides at start (here a
// rules file broke between the manager's build and the server's), the server
// still starts, on the file's settings: the overrides are dropped from the book
// and the state file, logged at warn with their section and keys.
func TestSettingsUnbuildableAtStartDropped(t *testing.T) {
	dir := t.TempDir()
	cfg, stateDir, rules := filepath.Join(dir, "gatectl.yaml"), filepath.Join(dir, "state"), filepath.Join(dir, "rules.yaml")
	writeConfig(t, rules, "name: mine\nrules:\n  - {name: busy, when: 'status == 503', class: SERVER}\n")
	writeConfig(t, cfg, apiTestConfig+fmt.Sprintf("classifiers:\n  - rules: %q\n", rules))
	st, err := state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"overrides":[{"key":["rounds"],"value":5,"file":3,"setAt":"2026-01-01T00:00:00Z"}]}`
	if err := st.SaveSettings("retry", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info, JSONFormat: true})
	clock := engine.NewFakeClock(apiT0)
	m, err := snapshot.NewManager(context.Background(), cfg, snapshot.Options{Clock: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	writeConfig(t, rules, "name: mine\nrules: [") // the rebuild cannot load it
	srv, err := New(Options{Manager: m, Clock: clock, StateDir: stateDir, Logger: logger})
	if err != nil {
		t.Fatalf("the server refused to start: %v", err)
	}
	if got := srv.Planner().Policy().Rounds; got != 3 {
		t.Errorf("rounds %d, want the file's 3", got)
	}
	if over := srv.settings.List("retry"); len(over) != 0 {
		t.Errorf("the overrides are still in the book: %v", over)
	}
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"@level":"warn"`) && strings.Contains(line, `"section":"retry"`) && strings.Contains(line, `"keys":["rounds"]`) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("the drop is not logged at warn naming section and keys:\n%s", logs.String())
	}
	srv.Close()
	st, err = state.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if recs, err := st.LoadSettings(); err != nil || len(recs["retry"]) != 0 {
		t.Fatalf("the state file still holds the override: %q (%v)", recs["retry"], err)
	}
}

// A settings body that cannot be read is a bad request (400, saying so); only
// one over the size limit is 413.
func TestSettingsBodyReadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		body io.Reader
		code int
		want string
	}{
		{"Broken", iotest.ErrReader(errors.New("connection reset by peer")), http.StatusBadRequest, "reading the request body: connection reset by peer"},
		{"TooLarge", strings.NewReader(`{"x":"` + strings.Repeat("x", apiMaxBody) + `"}`), http.StatusRequestEntityTooLarge, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if _, ok := settingsBody(rec, httptest.NewRequest(http.MethodPut, "/gate/v1/settings/gate", tc.body)); ok {
				t.Fatal("read a body that cannot be read")
			}
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("%d %s, want %d naming %q", rec.Code, rec.Body.String(), tc.code, tc.want)
			}
		})
	}
}
