package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

const authTestConfig = apiTestConfig + `
api:
  tokenEnv: GATECTL_AUTH_TEST_TOKEN
`

func TestAPITokenRequired(t *testing.T) {
	t.Setenv("GATECTL_AUTH_TEST_TOKEN", "s3cret-token")
	e := newAPIEnv(t, authTestConfig)
	send := func(method, path string, set func(*http.Request)) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, e.http.URL+path, nil)
		if set != nil {
			set(req)
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, path := range []string{"/gate/v1/status", "/gate/v1/nothing", "/ui", "/ui/app.js"} {
		for name, set := range map[string]func(*http.Request){
			"none":        nil,
			"wrongBearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-tokex") },
			"prefix":      func(r *http.Request) { r.Header.Set("X-Gate-Token", "s3cret") },
			"basic":       func(r *http.Request) { r.Header.Set("Authorization", "Basic s3cret-token") },
		} {
			status, body := send(http.MethodGet, path, set)
			var ae apiError
			if status != http.StatusUnauthorized || json.Unmarshal(body, &ae) != nil || ae.Error.Type != "unauthorized" || ae.Error.Message == "" {
				t.Fatalf("%s %s: %d %s", path, name, status, body)
			}
			if strings.Contains(string(body), "s3cret") {
				t.Fatalf("the 401 echoes the token: %s", body)
			}
		}
	}
	for name, set := range map[string]func(*http.Request){
		"bearer":      func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") },
		"bearerLower": func(r *http.Request) { r.Header.Set("Authorization", "bearer s3cret-token") }, // the scheme is case-insensitive
		"header":      func(r *http.Request) { r.Header.Set("X-Gate-Token", "s3cret-token") },
		"cookie":      func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "gatectl_token", Value: "s3cret-token"}) },
	} {
		if status, body := send(http.MethodGet, "/gate/v1/status", set); status != http.StatusOK {
			t.Fatalf("%s: %d %s", name, status, body)
		}
	}
	// Health, readiness, metrics and the proxy face are not guarded.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/models"} {
		if status, body := send(http.MethodGet, path, nil); status == http.StatusUnauthorized {
			t.Fatalf("%s needs the token: %s", path, body)
		}
	}
}

// Without tokenEnv (or with its variable empty) the API is open, as before.
func TestAPITokenUnsetIsOpen(t *testing.T) {
	t.Setenv("GATECTL_AUTH_TEST_TOKEN", "")
	e := newAPIEnv(t, authTestConfig)
	e.get("/gate/v1/status", http.StatusOK)
}

// addrListener reports another address than the one it listens on, so the test
// sees what Serve does on a public address without opening one.
type addrListener struct {
	net.Listener
	addr net.Addr
}

func (l addrListener) Addr() net.Addr { return l.addr }

func TestServeRefusesPublicAddressWithoutToken(t *testing.T) {
	for _, c := range []struct {
		name, config, token string
		public, refused     bool
	}{
		{"PublicNoTokenEnv", apiTestConfig, "", true, true},
		{"PublicEmptyToken", authTestConfig, "", true, true},
		{"PublicWithToken", authTestConfig, "a-token-of-24-characters", true, false},
		{"PublicWithShortToken", authTestConfig, "tok", true, true}, // guessable by anyone who can reach it
		{"LoopbackNoToken", apiTestConfig, "", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GATECTL_AUTH_TEST_TOKEN", c.token)
			e := newAPIEnv(t, c.config)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			if c.public {
				ln = addrListener{ln, &net.TCPAddr{IP: net.IPv4zero, Port: 7878}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err = e.srv.Serve(ctx, ln)
			if c.refused {
				if err == nil || !strings.Contains(err.Error(), "api.tokenEnv") || !strings.Contains(err.Error(), "0.0.0.0:7878") {
					t.Fatalf("Serve on a public address without a token: %v", err)
				}
				return
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}
