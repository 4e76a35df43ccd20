package balance

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/testenv"
)

// exampleConfig parses examples/balance/<file> as the `balances:` list of a config
// file at the repository's root.
func exampleConfig(t *testing.T, file string) *config.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "balance", file))
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(append([]byte("balances:\n"), data...), filepath.Join(root, "gatectl.yaml"))
	if err != nil {
		t.Fatalf("%s does not parse as balances: %v", file, err)
	}
	if len(c.Balances) != 1 {
		t.Fatalf("%s: %d balance entries, want 1", file, len(c.Balances))
	}
	return c
}

// fakeProvider serves body at path to requests carrying "Bearer <key>", like the
// provider's documented endpoint; anything else is a 401 or a 404.
func fakeProvider(t *testing.T, path, key, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error": {"message": "Authentication Fails"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Each shipped http example, pointed at a local server that serves the shape its
// provider documents and checks the key, yields the documented balance.
func TestHTTPExamples(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file, name, path, body string
		want                   engine.Reading
	}{
		{"deepseek.yaml", "documented", "/user/balance",
			`{"is_available": true, "balance_infos": [{"currency": "CNY", "total_balance": "110.00", "granted_balance": "10.00", "topped_up_balance": "100.00"}]}`,
			engine.Reading{Remaining: fp(110)}},
		{"deepseek.yaml", "not available", "/user/balance",
			`{"is_available": false, "balance_infos": [{"currency": "CNY", "total_balance": "0.00", "granted_balance": "0.00", "topped_up_balance": "0.00"}]}`,
			engine.Reading{Remaining: fp(0)}},
		{"openrouter.yaml", "documented", "/api/v1/credits",
			`{"data": {"total_credits": 100.5, "total_usage": 25.75}}`,
			engine.Reading{Remaining: fp(74.75), Windows: []engine.WindowReading{{Name: "credits", Remaining: 74.75, Capacity: fp(100.5)}}}},
		{"openrouter-key.yaml", "documented", "/api/v1/key",
			`{"data": {"label": "sk-or-v1-au7...890", "limit": 100, "limit_remaining": 74.5, "limit_reset": "monthly", "usage": 25.5, "usage_daily": 25.5, "usage_weekly": 25.5, "usage_monthly": 25.5, "is_free_tier": false, "is_provisioning_key": false, "rate_limit": {"requests": 1000, "interval": "1h"}}}`,
			engine.Reading{Remaining: fp(74.5), Windows: []engine.WindowReading{{Name: "monthly", Remaining: 74.5, Capacity: fp(100)}}}},
		{"openrouter-key.yaml", "no limit", "/api/v1/key",
			`{"data": {"label": "sk-or-v1-au7...890", "limit": null, "limit_remaining": null, "limit_reset": null, "usage": 25.5, "is_free_tier": false}}`,
			engine.Reading{}},
		{"openrouter-key.yaml", "limit without reset", "/api/v1/key",
			`{"data": {"limit": 5, "limit_remaining": 4.9, "limit_reset": null, "usage": 0.1}}`,
			engine.Reading{Remaining: fp(4.9), Windows: []engine.WindowReading{{Name: "limit", Remaining: 4.9, Capacity: fp(5)}}}},
		{"moonshot.yaml", "documented", "/v1/users/me/balance",
			`{"code": 0, "data": {"available_balance": 49.58894, "voucher_balance": 46.58893, "cash_balance": 3.00001}, "scode": "0x0", "status": true}`,
			engine.Reading{Remaining: fp(49.58894)}},
		{"siliconflow.yaml", "documented", "/v1/user/info",
			`{"code": 20000, "message": "OK", "status": true, "data": {"id": "userid", "name": "username", "image": "user_avatar_image_url", "email": "user_email_address", "isAdmin": false, "balance": "0.88", "status": "normal", "introduction": "", "role": "", "chargeBalance": "88.00", "totalBalance": "88.88"}}`,
			engine.Reading{Remaining: fp(88.88)}},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.file, ".yaml")+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := exampleConfig(t, tc.file)
			b := c.Balances[0]
			if b.HTTP == nil || b.APIKeyEnv == "" {
				t.Fatalf("%s is not an http source with a key", tc.file)
			}
			documented, err := url.Parse(b.HTTP.URL)
			if err != nil || documented.Path != tc.path || documented.Scheme != "https" {
				t.Fatalf("%s: url %q, want https://…%s", tc.file, b.HTTP.URL, tc.path)
			}
			key := "test-key-" + b.Provider
			srv := fakeProvider(t, tc.path, key, tc.body)

			spec := SpecFromConfig(c, b)
			local := *spec.HTTP
			local.URL = srv.URL + documented.RequestURI()
			spec.HTTP = &local
			spec.LookupEnv = envMap(map[string]string{b.APIKeyEnv: key})
			src, err := New(spec)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			r, err := src.Read(context.Background())
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			assertReading(t, r, tc.want)

			// The same source with the wrong key is a missing reading.
			spec.LookupEnv = envMap(map[string]string{b.APIKeyEnv: "wrong"})
			src, _ = New(spec)
			if _, err := src.Read(context.Background()); !errors.Is(err, ErrStatus) {
				t.Fatalf("wrong key: err = %v, want ErrStatus", err)
			}
		})
	}
}

// The script example, run as the config runs it (python3, from the config's
// directory, with only PATH, HOME, its env and the key), reads the fake endpoint.
func TestScriptExample(t *testing.T) {
	t.Parallel()
	testenv.Tool(t, "python3", "Debian: apt-get install -y python3")
	c := exampleConfig(t, "script_example.yaml")
	b := c.Balances[0]
	if len(b.Script) == 0 || b.APIKeyEnv != "DEEPSEEK_API_KEY" {
		t.Fatalf("script_example.yaml: %+v", b)
	}
	srv := fakeProvider(t, "/user/balance", "sk-test-123",
		`{"is_available": true, "balance_infos": [{"currency": "CNY", "total_balance": "110.00", "granted_balance": "10.00", "topped_up_balance": "100.00"}, {"currency": "USD", "total_balance": "15.50", "granted_balance": "0.00", "topped_up_balance": "15.50"}]}`)

	environ := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "DEEPSEEK_API_KEY": "sk-test-123"}
	run := func(t *testing.T, env map[string]string) (engine.Reading, error) {
		t.Helper()
		spec := SpecFromConfig(c, b)
		spec.Env = map[string]string{}
		for k, v := range b.Env {
			spec.Env[k] = v
		}
		for k, v := range env {
			spec.Env[k] = v
		}
		spec.LookupEnv = envMap(environ)
		spec.Timeout = 30 * time.Second // python's start-up on a loaded machine
		src, err := New(spec)
		if err != nil {
			t.Fatal(err)
		}
		return src.Read(context.Background())
	}
	t.Run("first currency", func(t *testing.T) {
		r, err := run(t, map[string]string{"DEEPSEEK_BASE_URL": srv.URL})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		assertReading(t, r, engine.Reading{Remaining: fp(110)})
	})
	t.Run("chosen currency", func(t *testing.T) {
		r, err := run(t, map[string]string{"DEEPSEEK_BASE_URL": srv.URL, "DEEPSEEK_CURRENCY": "USD"})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		assertReading(t, r, engine.Reading{Remaining: fp(15.5)})
	})
	t.Run("fake", func(t *testing.T) {
		r, err := run(t, map[string]string{"BALANCE_FAKE_REMAINING": "3.25"})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		assertReading(t, r, engine.Reading{Remaining: fp(3.25)})
	})
	t.Run("endpoint refuses", func(t *testing.T) {
		_, err := run(t, map[string]string{"DEEPSEEK_BASE_URL": srv.URL + "/nowhere"})
		if !errors.Is(err, ErrExit) {
			t.Fatalf("err = %v, want ErrExit", err)
		}
	})
}

// FromConfig names the entry in construction errors; SetFromConfig reports every
// bad entry.
func TestFromConfigErrors(t *testing.T) {
	t.Parallel()
	yaml := `balances:
  - provider: a
    http: {url: "https://a.example/b", remaining: "body.x +"}
  - provider: b
    script: [sh, x.sh]
  - provider: c
    apiKeyEnv: C_KEY
    http: {url: "https://c.example/b", headers: {X-Key: "${OTHER}"}, remaining: "body.x"}
`
	c, err := config.Parse([]byte(yaml), "/etc/gatectl/gatectl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromConfig(c, 0, BuildOptions{})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "balances[0].http.remaining" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want a FieldError on balances[0].http.remaining", err)
	}
	src, err := FromConfig(c, 1, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc, ok := src.Source().(*Script); !ok || sc.dir != "/etc/gatectl" || src.Refresh() != c.Balances[1].Refresh || src.Timeout() != c.Balances[1].Timeout {
		t.Fatalf("balances[1] = %#v (refresh %s, timeout %s)", src.Source(), src.Refresh(), src.Timeout())
	}
	_, err = SetFromConfig(c, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "balances[0].http.remaining") || !strings.Contains(err.Error(), "balances[2].http.headers[X-Key]") {
		t.Fatalf("SetFromConfig err = %v, want both bad entries", err)
	}
}
