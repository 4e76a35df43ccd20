package balance

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// jsonServer serves body with status at any path, after checking the
// Authorization header when wantAuth is set; hits counts the requests.
func jsonServer(t *testing.T, status int, body, wantAuth string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if wantAuth != "" && r.Header.Get("Authorization") != wantAuth {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error": "bad key"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Reset", "2026-12-01T00:00:00Z")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestHTTPMapping(t *testing.T) {
	t.Parallel()
	body := `{"data": {"total": "40.5", "used": 10, "plans": [
		{"name": "five-hour", "left": 14, "cap": 14},
		{"name": "monthly", "left": "37.94"},
		{"name": "broken", "left": "n/a"},
		{"name": "zero cap", "left": 1, "cap": 0}
	]}}`
	srv, hits := jsonServer(t, 200, body, "Bearer k-123")
	src, err := New(Spec{
		APIKeyEnv: "TEST_KEY",
		LookupEnv: envMap(map[string]string{"TEST_KEY": "k-123"}),
		HTTP: &HTTPSpec{
			URL:       srv.URL + "/v1/balance",
			Headers:   map[string]string{"Authorization": "Bearer ${TEST_KEY}"},
			Remaining: `float(body.data.total) - body.data.used`,
			Windows:   `map(body.data.plans, ({name: .name, remaining: .left, capacity: .cap}))`,
			ResetsAt:  `headers["x-reset"]`,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	assertReading(t, r, engine.Reading{Remaining: fp(30.5), ResetsAt: "2026-12-01T00:00:00Z", Windows: []engine.WindowReading{
		{Name: "five-hour", Remaining: 14, Capacity: fp(14)},
		{Name: "monthly", Remaining: 37.94},
	}})
	if hits.Load() != 1 {
		t.Errorf("%d requests, want 1", hits.Load())
	}
}

func TestHTTPNumericStringAndNil(t *testing.T) {
	t.Parallel()
	srv, _ := jsonServer(t, 200, `{"a": " 12.5 ", "b": null}`, "")
	for expr, want := range map[string]*float64{"body.a": fp(12.5), "body.b": nil, "body.missing": nil} {
		src, err := NewHTTP(Spec{HTTP: &HTTPSpec{URL: srv.URL, Remaining: expr}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := src.Read(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if !eqFloatPtr(r.Remaining, want) {
			t.Errorf("%s: remaining = %v, want %v", expr, fmtPtr(r.Remaining), fmtPtr(want))
		}
	}
}

// Every way an HTTP read fails is a missing reading whose error quotes neither the
// body, nor the key, nor the URL's query.
func TestHTTPMissingReadings(t *testing.T) {
	t.Parallel()
	const marker = "SECRET-MARKER-90be"
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers nothing until the client gives up
	}))
	t.Cleanup(hang.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	cases := []struct {
		name   string
		status int
		body   string
		url    string // overrides the server's
		expr   string
		noKey  bool
		want   error
		noHits bool
	}{
		{name: "non-2xx", status: 500, body: `{"error": "` + marker + `"}`, want: ErrStatus},
		{name: "401", status: 401, body: marker, want: ErrStatus},
		{name: "not JSON", status: 200, body: "<html>" + marker, want: ErrOutput},
		{name: "expression fails", status: 200, body: `{"balance_infos": []}`, expr: "body.balance_infos[0].total_balance", want: ErrMapping},
		{name: "conversion quotes the value", status: 200, body: `{"v": "` + marker + `"}`, expr: "float(body.v)", want: ErrMapping},
		{name: "not a number", status: 200, body: `{"v": "` + marker + `"}`, expr: "body.v", want: ErrMapping},
		{name: "a bool", status: 200, body: `{"v": true}`, expr: "body.v", want: ErrMapping},
		{name: "not finite", status: 200, body: `{"v": 0}`, expr: "1 / body.v", want: ErrMapping},
		{name: "timeout", url: hang.URL + "/balance?token=" + marker, want: ErrTimeout},
		{name: "refused", url: closedURL + "/balance?token=" + marker, want: ErrTransport},
		{name: "key not set", status: 200, body: `{"v": 1}`, noKey: true, want: ErrNoKey, noHits: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, hits := jsonServer(t, tc.status, tc.body, "")
			url := srv.URL + "/balance?token=" + marker
			if tc.url != "" {
				url = tc.url
			}
			expr := tc.expr
			if expr == "" {
				expr = "body.v"
			}
			env := map[string]string{"K": marker + "-key"}
			if tc.noKey {
				env = nil
			}
			logger, logs := traceLogger()
			src, err := NewHTTP(Spec{
				APIKeyEnv: "K",
				LookupEnv: envMap(env),
				Timeout:   300 * time.Millisecond,
				Logger:    logger,
				HTTP:      &HTTPSpec{URL: url, Headers: map[string]string{"Authorization": "Bearer ${K}"}, Remaining: expr},
			})
			if err != nil {
				t.Fatal(err)
			}
			c := NewCached(src, CacheOptions{Timeout: 5 * time.Second, Logger: logger})
			_, err = c.Get(context.Background(), time.Unix(0, 0))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.name == "not finite" && !strings.Contains(err.Error(), "not finite") {
				t.Errorf("err = %v, want it to say the number is not finite", err)
			}
			for what, text := range map[string]string{"error": err.Error(), "log": logs.String()} {
				if strings.Contains(text, marker) || strings.Contains(text, "SECRET") {
					t.Errorf("the %s quotes the body, key or query: %q", what, text)
				}
			}
			if tc.noHits && hits.Load() != 0 {
				t.Errorf("%d requests without a key, want none", hits.Load())
			}
		})
	}
}

func TestNewHTTPRejects(t *testing.T) {
	t.Parallel()
	ok := HTTPSpec{URL: "https://example.com/b", Remaining: "body.x"}
	cases := []struct {
		name   string
		apiKey string
		edit   func(h *HTTPSpec)
		field  string
	}{
		{"bad remaining", "", func(h *HTTPSpec) { h.Remaining = "body.x +" }, "http.remaining"},
		{"unknown variable", "", func(h *HTTPSpec) { h.Remaining = "response.x" }, "http.remaining"},
		{"bad windows", "", func(h *HTTPSpec) { h.Windows = "map(body.x" }, "http.windows"},
		{"bad resetsAt", "", func(h *HTTPSpec) { h.ResetsAt = "]" }, "http.resetsAt"},
		{"nothing to map", "", func(h *HTTPSpec) { h.Remaining = "" }, "http.remaining"},
		{"relative url", "", func(h *HTTPSpec) { h.URL = "/user/balance" }, "http.url"},
		{"ftp url", "", func(h *HTTPSpec) { h.URL = "ftp://example.com/x" }, "http.url"},
		{"reference in url", "K", func(h *HTTPSpec) { h.URL = "https://example.com/b?key=${K}" }, "http.url"},
		{"other variable", "K", func(h *HTTPSpec) { h.Headers = map[string]string{"Authorization": "Bearer ${HOME}"} }, "http.headers[Authorization]"},
		{"no apiKeyEnv", "", func(h *HTTPSpec) { h.Headers = map[string]string{"Authorization": "Bearer ${K}"} }, "http.headers[Authorization]"},
		{"header injection", "", func(h *HTTPSpec) { h.Headers = map[string]string{"X": "a\r\nB: c"} }, "http.headers[X]"},
		{"bad header name", "", func(h *HTTPSpec) { h.Headers = map[string]string{"A B": "c"} }, "http.headers[A B]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ok
			tc.edit(&h)
			_, err := New(Spec{APIKeyEnv: tc.apiKey, HTTP: &h})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://api.example.com/v1/balance?key=abc#frag": "https://api.example.com/v1/balance",
		"https://user:pass@api.example.com/x":             "https://api.example.com/x",
		"http://127.0.0.1:8080/b":                         "http://127.0.0.1:8080/b",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSpecKind(t *testing.T) {
	t.Parallel()
	if _, err := New(Spec{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no kind: err = %v", err)
	}
	_, err := New(Spec{Script: []string{"sh"}, HTTP: &HTTPSpec{URL: "https://x.example/b", Remaining: "1"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "only one") {
		t.Errorf("two kinds: err = %v", err)
	}
	// wasm joins from the wasm package; until it registers, New says what exists.
	if !registered("wasm") {
		_, err = New(Spec{Wasm: &WasmSpec{Module: "m.wasm", URL: "https://x.example/b"}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "http, script") {
			t.Errorf("unregistered kind: err = %v", err)
		}
	}
	if got := strings.Join(Kinds(), ","); !strings.Contains(got, "http") || !strings.Contains(got, "script") {
		t.Errorf("Kinds() = %s", got)
	}
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"duplicate": func() { Register("script", func(Spec) (engine.BalanceSource, error) { return nil, nil }) },
		"empty":     func() { Register("", func(Spec) (engine.BalanceSource, error) { return nil, nil }) },
		"nil":       func() { Register("x-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s registration did not panic", name)
				}
			}()
			f()
		}()
	}
}

func registered(kind string) bool {
	for _, k := range Kinds() {
		if k == kind {
			return true
		}
	}
	return false
}

func TestMappingErrKeepsSafeMessages(t *testing.T) {
	t.Parallel()
	srv, _ := jsonServer(t, 200, `{"infos": [], "s": "abc"}`, "")
	for expr, want := range map[string]string{
		"body.infos[0].total": "index out of range: 0 (array length is 0) (1:",
		"body.nope.total":     "cannot fetch total from <nil> (1:",
		"body.s - 1":          "invalid operation: string - int (1:",
		"float(body.s)":       "evaluation failed (1:",
	} {
		src, err := NewHTTP(Spec{HTTP: &HTTPSpec{URL: srv.URL, Remaining: expr}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Read(context.Background())
		if !errors.Is(err, ErrMapping) || !strings.Contains(err.Error(), "http.remaining: "+want) {
			t.Errorf("%s: err = %v, want it to say %q", expr, err, want)
		}
	}
}

// A redirect to another host is not followed: the request's headers hold the
// key (Go forwards all but Authorization and Cookie, and a Referer holding the
// query). It is answered as its own status, a missing reading. Within the
// URL's own host a redirect is followed.
func TestHTTPRedirectStaysOnItsHost(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = io.WriteString(w, `{"v": 12.5}`)
	}))
	t.Cleanup(other.Close)
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/ok", http.StatusFound)
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusFound)
		case "/here":
			_, _ = io.WriteString(w, `{"v": 7}`)
		}
	}))
	t.Cleanup(home.Close)
	read := func(path string) (engine.Reading, error) {
		src, err := NewHTTP(Spec{APIKeyEnv: "K", LookupEnv: envMap(map[string]string{"K": "sk-key"}), Timeout: 2 * time.Second,
			HTTP: &HTTPSpec{URL: home.URL + path + "?token=q", Headers: map[string]string{"X-Api-Key": "${K}"}, Remaining: "body.v"}})
		if err != nil {
			t.Fatal(err)
		}
		return src.Read(context.Background())
	}
	if _, err := read("/away"); !errors.Is(err, ErrStatus) || elsewhere.Load() != 0 {
		t.Errorf("a redirect to another host: err %v, %d requests there; want ErrStatus and none", err, elsewhere.Load())
	}
	if r, err := read("/moved"); err != nil || r.Remaining == nil || *r.Remaining != 7 {
		t.Errorf("a redirect on its own host: %+v, %v", r, err)
	}
}
