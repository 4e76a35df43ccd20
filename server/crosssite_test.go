package server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// A page on another site (or another port of the same host) can send the
// daemon a form post or a no-cors fetch: what it sends that would change state
// or spend a key is refused when the browser says where it came from. Programs
// send no Origin and pass; so do reads, and the console's own requests.
func TestCrossSiteRequestsRefused(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	failure := `{"provider":"alpha","model":"m1","status":429,"body":"insufficient_quota"}`
	send := func(method, path, body string, hdr map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain") // what a no-cors fetch may send
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	own := "http://" + strings.TrimPrefix(e.http.URL, "http://")
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		want               int
	}{
		{"another site's page", "POST", "/gate/v1/failure", map[string]string{"Origin": "http://localhost:37899", "Sec-Fetch-Site": "cross-site"}, 403},
		{"another port of this host", "POST", "/gate/v1/failure", map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, 403},
		{"an Origin alone", "PUT", "/gate/v1/settings/retry", map[string]string{"Origin": "http://evil.example"}, 403},
		{"an opaque origin", "POST", "/gate/v1/failure", map[string]string{"Origin": "null"}, 403},
		{"the proxy face", "POST", "/v1/chat/completions", map[string]string{"Origin": "http://evil.example"}, 403},
		{"the console itself", "POST", "/gate/v1/failure", map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin"}, 200},
		{"the console behind a reverse proxy (Host rewritten)", "POST", "/gate/v1/failure", map[string]string{"Origin": "https://gate.example.com", "Sec-Fetch-Site": "same-origin"}, 200},
		{"an older browser, Origin alone", "POST", "/gate/v1/failure", map[string]string{"Origin": own}, 200},
		{"a program", "POST", "/gate/v1/failure", nil, 200},
		{"a cross-site read", "GET", "/gate/v1/status", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 200},
	}
	for _, c := range cases {
		body := failure
		if c.method == "PUT" {
			body = `{"rounds":5}`
		} else if c.method == "GET" {
			body = ""
		}
		if got := send(c.method, c.path, body, c.hdr); got != c.want {
			t.Errorf("%s: %s %s answered %d, want %d", c.name, c.method, c.path, got, c.want)
		}
	}
	if got := e.rawGet("/gate/v1/settings/retry"); strings.Contains(got, `"rounds":5`) {
		t.Fatalf("a refused cross-site PUT changed the settings: %s", got)
	}
	if got := send("PUT", "/gate/v1/settings/retry", `{"rounds":5}`, nil); got != 200 {
		t.Fatalf("a program's PUT: %d", got)
	}
	if got := e.rawGet("/gate/v1/settings/retry"); !strings.Contains(got, `"rounds":5`) {
		t.Fatalf("a program's PUT did not change the settings: %s", got)
	}
}

func (e *apiEnv) rawGet(path string) string {
	e.t.Helper()
	_, b, _ := e.do(http.MethodGet, path, "")
	return string(b)
}

// Without a token the daemon answers only requests that name loopback: a DNS
// rebinding page, whose requests name the attacker's host, is refused. With a
// token, the token decides.
func TestHostGuardWithoutToken(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig)
	ln, shutDown := serveLoopback(t, e.srv)
	defer shutDown()
	get := func(host string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/gate/v1/status", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for host, want := range map[string]int{
		"127.0.0.1:" + port:        200,
		"localhost:" + port:        200,
		"[::1]:" + port:            200,
		"rebind.attacker.example":  403,
		"10.0.0.5:" + port:         403,
		"gatectl.example.com:8080": 403,
	} {
		if got := get(host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"": true, "localhost": true, "LOCALHOST:80": true, "app.localhost": true, "127.0.0.1": true, "127.9.9.9:1": true,
		"[::1]:7878": true, "::1": true, "localhost.": true,
		"example.com": false, "127.0.0.1.nip.io": false, "0.0.0.0": false, "[::]:1": false, "10.1.1.1": false, "localhost.example": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
