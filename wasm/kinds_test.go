package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/balance"
	"github.com/gatectl/gatectl/engine"
	"gopkg.in/yaml.v3"
)

func f64(v float64) *float64 { return &v }

func TestScorer(t *testing.T) {
	th := newTestHost(t, "")
	ctx := context.Background()
	s := ScorerFor(th.load(t, "score.wasm", KindScore, Limits{}))
	score, scored, err := s.Score(ctx, engine.Reading{Remaining: f64(3)}, nil, nil, f64(10))
	if err != nil || !scored || score != 0.5 {
		t.Errorf("Score = %v, %v, %v; want 0.5", score, scored, err)
	}
	// No remaining member at all: the module abstains, the route is unscored.
	if _, scored, err := s.Score(ctx, engine.Reading{}, nil, nil, nil); scored || err != nil {
		t.Errorf("empty reading: scored=%v err=%v", scored, err)
	}
}

func TestScorerGoExample(t *testing.T) {
	th := newTestHost(t, "")
	ctx := context.Background()
	s, err := NewScorer(ctx, th.Host, modulePath(t, "scorer-go.wasm"), ScorerOptions{Config: map[string]any{"floor": 0.1}, Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name    string
		r       engine.Reading
		caps    map[string]float64
		coef    map[string]float64
		capa    *float64
		want    float64
		unscore bool
	}{
		{name: "remaining over capacity", r: engine.Reading{Remaining: f64(5)}, capa: f64(20), want: 0.25},
		{name: "below the floor", r: engine.Reading{Remaining: f64(1)}, capa: f64(20), want: 0},
		{name: "lowest window", r: engine.Reading{Windows: []engine.WindowReading{
			{Name: "weekly", Remaining: 14, Capacity: f64(35)}, {Name: "monthly", Remaining: 30}}},
			caps: map[string]float64{"monthly": 40}, coef: map[string]float64{"monthly": 0.25}, want: 0.1875},
		{name: "nothing to score", r: engine.Reading{Remaining: f64(5)}, unscore: true},
	} {
		score, scored, err := s.Score(ctx, tc.r, tc.caps, tc.coef, tc.capa)
		if err != nil || scored == tc.unscore || (scored && score != tc.want) {
			t.Errorf("%s: Score = %v, %v, %v; want %v", tc.name, score, scored, err, tc.want)
		}
	}
}

// The host does the request (with the key from the environment, never shown to
// the module) and hands {"nowMs","config","fetch"} over.
func TestBalanceHostFetches(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.Header().Set("X-Credits-Left", "7")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":{"total_credits":100.5,"total_usage":25.75}}`))
	}))
	defer srv.Close()
	th := newTestHost(t, "")
	spec := balance.Spec{
		Provider:  "openrouter",
		APIKeyEnv: "TEST_KEY",
		LookupEnv: func(k string) (string, bool) {
			return map[string]string{"TEST_KEY": "sk-secret", "OTHER": "x"}[k], k == "TEST_KEY"
		},
		Wasm: &balance.WasmSpec{
			Module:  modulePath(t, "echo.wasm"),
			URL:     srv.URL + "/credits?x=1",
			Headers: map[string]string{"Authorization": "Bearer ${TEST_KEY}"},
			Config:  map[string]any{"currency": "USD"},
		},
	}
	b, err := NewBalance(context.Background(), th.Host, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := b.Read(context.Background())
	if err != nil || r.Remaining == nil || *r.Remaining != 7 {
		t.Fatalf("Read = %+v, %v", r, err)
	}
	if gotAuth != "Bearer sk-secret" {
		t.Errorf("Authorization = %q", gotAuth)
	}
	log := th.log.String()
	for _, want := range []string{`\"nowMs\":1767225600000`, `\"config\":{\"currency\":\"USD\"}`, `\"status\":200`,
		`\"x-credits-left\":\"7\"`, `total_credits`} {
		if !strings.Contains(log, want) {
			t.Errorf("module input lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "sk-secret") {
		t.Error("the key reached the module or the log")
	}
}

// The request a balance module maps carries the key in its headers, so it
// follows a redirect only within the URL's origin, as the http kind's does: Go's
// own client drops only Authorization and cookies at another host, and would
// hand it an X-Api-Key. A redirect elsewhere is the module's answer to map.
func TestBalanceKeyStaysWithinTheOrigin(t *testing.T) {
	var leaked string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = r.Header.Get("X-Api-Key")
		w.Write([]byte(`{}`))
	}))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) // another origin, same machine
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherURL+"/steal", http.StatusFound)
	}))
	defer origin.Close()
	th := newTestHost(t, "")
	b, err := NewBalance(context.Background(), th.Host, balance.Spec{
		Provider: "p", APIKeyEnv: "TEST_KEY",
		LookupEnv: func(k string) (string, bool) { return "sk-secret-key-123", k == "TEST_KEY" },
		Wasm: &balance.WasmSpec{Module: modulePath(t, "echo.wasm"), URL: origin.URL + "/balance",
			Headers: map[string]string{"X-Api-Key": "${TEST_KEY}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, _ = b.Read(context.Background())
	if leaked != "" {
		t.Fatalf("the key followed a redirect to another origin: %q", leaked)
	}
	if log := th.log.String(); !strings.Contains(log, `\"status\":302`) {
		t.Fatalf("the module was not handed the redirect as its own answer:\n%s", log)
	}
}

func TestBalanceErrors(t *testing.T) {
	th := newTestHost(t, "")
	echo := modulePath(t, "echo.wasm")
	for _, tc := range []struct {
		spec  balance.Spec
		field string
	}{
		{balance.Spec{Wasm: &balance.WasmSpec{Module: echo, URL: "ftp://x"}}, "wasm.url"},
		{balance.Spec{Wasm: &balance.WasmSpec{Module: echo, URL: "https://x/${KEY}"}, APIKeyEnv: "KEY"}, "wasm.url"},
		{balance.Spec{Wasm: &balance.WasmSpec{Module: echo, URL: "https://x/", Headers: map[string]string{"A": "${OTHER}"}}, APIKeyEnv: "KEY"}, "wasm.headers[A]"},
		{balance.Spec{Wasm: &balance.WasmSpec{Module: modulePath(t, "trap.wasm"), URL: "https://x/"}}, "wasm.module"},
		{balance.Spec{Wasm: &balance.WasmSpec{Module: "/nonexistent.wasm", URL: "https://x/"}}, "wasm.module"},
	} {
		_, err := NewBalance(context.Background(), th.Host, tc.spec)
		var fe *balance.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, balance.ErrInvalid) {
			t.Errorf("%+v: err = %v, want a FieldError on %s", tc.spec.Wasm, err, tc.field)
		}
	}
}

// The Go balance example, through balance's registry, on the host the Spec names.
func TestBalanceGoExampleViaRegistry(t *testing.T) {
	th := newTestHost(t, "")
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(`{"data":{"total_credits":100.5,"total_usage":25.75}}`))
	}))
	defer srv.Close()
	spec := balance.Spec{Provider: "openrouter", Wasm: &balance.WasmSpec{
		Module: modulePath(t, "balance-go.wasm"), URL: srv.URL, Config: map[string]any{"reserve": 0.75},
	}}
	// Without a host the kind refuses to build: there is no process-wide default.
	if _, err := balance.New(spec); !errors.Is(err, balance.ErrInvalid) || !strings.Contains(err.Error(), "need a plugin host") {
		t.Fatalf("no host: err = %v", err)
	}
	spec.Modules = th.Host
	src, err := balance.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer src.(*Balance).Close()
	r, err := src.Read(context.Background())
	if err != nil || r.Remaining == nil || *r.Remaining != 74 {
		t.Fatalf("Read = %+v, %v; want remaining 74", r, err)
	}
	status = http.StatusUnauthorized
	if _, err := src.Read(context.Background()); !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), "no reading (status 401)") {
		t.Errorf("401: err = %v", err)
	}
}

// LoadDir takes every classifier in the directory, by file name, skipping other
// kinds; a reload of the unchanged directory compiles nothing.
func TestLoadDir(t *testing.T) {
	th := newTestHost(t, "")
	dir := t.TempDir()
	write := func(name, module string) {
		if err := os.WriteFile(filepath.Join(dir, name), testModule(t, module), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("20-octafuse.wasm", "octafuse-wat.wasm")
	write("10-switch.wasm", "switch.wasm")
	write("15-score.wasm", "score.wasm")
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a module"), 0o644)
	ctx := context.Background()
	cs, err := LoadDir(ctx, th.Host, dir, DirOptions{Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.Name())
	}
	if strings.Join(names, ",") != "wasm/10-switch.wasm,wasm/20-octafuse.wasm" {
		t.Errorf("classifiers = %v", names)
	}
	compiles := th.Stats().Compiles
	again, err := LoadDir(ctx, th.Host, dir, DirOptions{Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	if th.Stats().Compiles != compiles || again[0].p.s != cs[0].p.s {
		t.Errorf("reload recompiled: %+v", th.Stats())
	}
	for _, c := range cs {
		c.Close()
	}
	// A forbidden module fails the whole directory, naming the file.
	write("30-forbidden.wasm", "forbidden.wasm")
	_, err = LoadDir(ctx, th.Host, dir, DirOptions{Limits: Limits{Timeout: slow}})
	if !errors.Is(err, ErrImport) || !strings.Contains(err.Error(), "30-forbidden.wasm") {
		t.Errorf("err = %v", err)
	}
	for _, c := range again {
		c.Close()
	}
	if st := th.Stats(); st.Plugins != 0 || st.Modules != 0 {
		t.Errorf("leaked %+v", st)
	}
	if cs, err := LoadDir(ctx, th.Host, filepath.Join(dir, "missing"), DirOptions{Limits: Limits{Timeout: slow}}); cs != nil || err != nil {
		t.Errorf("missing dir: %v, %v", cs, err)
	}
}

// Inspect describes a module without loading it.
func TestInspect(t *testing.T) {
	th := newTestHost(t, "")
	info, err := th.Inspect(context.Background(), "octafuse-as.wasm", testModule(t, "octafuse-as.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(info)
	if !info.ABIMarker || !info.Memory || !info.Has(KindClassify) || info.Has(KindScore) || !info.Initialize || info.Init ||
		strings.Join(info.Imports, ",") != "gate.output_write,gate.input_read" {
		t.Errorf("info = %s", b)
	}
	info, err = th.Inspect(context.Background(), "forbidden.wasm", testModule(t, "forbidden.wasm"))
	if !errors.Is(err, ErrImport) || info == nil || len(info.Imports) != 3 {
		t.Errorf("forbidden: %+v, %v", info, err)
	}
	if st := th.Stats(); st.Modules != 0 {
		t.Errorf("Inspect kept a module: %+v", st)
	}
}

// The compilation cache on disk serves a second host (a restart).
func TestCompilationCacheOnDisk(t *testing.T) {
	dir := t.TempDir()
	th := newTestHost(t, dir)
	th.load(t, "octafuse-as.wasm", KindClassify, Limits{})
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 {
		t.Fatal("nothing written to the cache dir")
	}
	th2 := newTestHost(t, dir)
	c := th2.classifier(t, "octafuse-as.wasm", Limits{})
	if _, decided, err := c.Classify(context.Background(), failureWithBody(200, "OCTA_CREDITS")); err != nil || !decided {
		t.Fatal(decided, err)
	}
}

// The example scorer and balance parser pass their golden cases (the files
// `gatectl plugin check` reads), through Plugin.RunCases.
func TestExampleRawCases(t *testing.T) {
	for _, tc := range []struct {
		module, cases string
		kind          Kind
	}{
		{"scorer-go.wasm", "scorer.cases.yaml", KindScore},
		{"balance-go.wasm", "balance.cases.yaml", KindBalance},
	} {
		t.Run(tc.module, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(examplesDir, tc.cases))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Config map[string]any   `yaml:"config"`
				Cases  []map[string]any `yaml:"cases"`
			}
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			th := newTestHost(t, "")
			p, err := th.LoadBytes(context.Background(), testModule(t, tc.module), Options{Kind: tc.kind, Name: tc.module, Config: doc.Config, Limits: Limits{Timeout: slow}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.RunCases(context.Background(), doc.Cases); err != nil {
				t.Error(err)
			}
			// A wrong expectation is reported with the member that differs.
			err = p.RunCases(context.Background(), []map[string]any{{"name": "off", "input": doc.Cases[0]["input"], "expect": map[string]any{"remaining": -1, "score": -1}}})
			if !errors.Is(err, ErrCaseFailed) || !strings.Contains(err.Error(), "cases[0] (off): golden case failed:") || !strings.Contains(err.Error(), "want -1") {
				t.Errorf("err = %v", err)
			}
		})
	}
}
