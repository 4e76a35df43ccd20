package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	pxClientKey = "sk-client-secret-1234567890"
	pxConfKey   = "sk-conf-secret-0987654321"
)

var quotaAnswer = jsonAnswer(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`)

func keysConfig(conf, pt1, pt2 string) string {
	return fmt.Sprintf(`
log: {level: trace}
providers:
  conf: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_CONF, headers: {X-Org: "${GATECTL_TEST_ORG}", X-Lit: "a$b"}}
  pt1:  {kind: openai, baseURL: %s/v1}
  pt2:  {kind: openai, baseURL: %s/v1}
pools:
  pass:
    routes:
      - {provider: pt1, model: m}
      - {provider: pt2, model: m}
  mixed:
    routes:
      - {provider: pt1, model: k}
      - {provider: conf, model: k}
`, conf, pt1, pt2)
}

// TestProxyKeys: gatectl's key goes to providers that have one, the client's
// only to the pass-through provider it is meant for; a failover never carries it
// to another provider; no key is ever logged.
func TestProxyKeys(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_CONF", pxConfKey)
	t.Setenv("GATECTL_TEST_ORG", "org-42")
	auth := []string{"Authorization", "Bearer " + pxClientKey, "OpenAI-Organization", "org-client"}

	t.Run("failover between pass-through providers is not taken", func(t *testing.T) {
		conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, pt1.URL, pt2.URL), true)
		r, body := f.call("/v1/chat/completions", chatReq("pt1/m"), auth...)
		if r.StatusCode != 429 || !strings.Contains(body, "insufficient_quota") || r.Header.Get("X-Should-Retry") != "false" {
			t.Fatalf("status %d should-retry %q body %s", r.StatusCode, r.Header.Get("X-Should-Retry"), body)
		}
		if pt2.n() != 0 || conf.n() != 0 {
			t.Fatalf("the client's key went on: pt2 %d calls, conf %d", pt2.n(), conf.n())
		}
		if got := pt1.call(0).Header.Get("Authorization"); got != "Bearer "+pxClientKey {
			t.Fatalf("pt1 got Authorization %q, want the client's", got)
		}
		if pt1.call(0).Header.Get("Openai-Organization") != "org-client" {
			t.Fatal("the client's organization did not reach its own provider")
		}
		assertNoKeyLogged(t, f)
	})

	t.Run("the client's query string goes only to the provider it named", func(t *testing.T) {
		conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, pt1.URL, pt2.URL), true)
		r, body := f.call("/v1/chat/completions?key=client-secret&api-version=1", chatReq("pt1/k"), auth...)
		if r.StatusCode != 200 || r.Header.Get("X-Gate-Route") != "conf/k" {
			t.Fatalf("status %d route %q body %s", r.StatusCode, r.Header.Get("X-Gate-Route"), body)
		}
		if q := pt1.call(0).Query; q != "key=client-secret&api-version=1" {
			t.Fatalf("the named provider got query %q", q)
		}
		if q := conf.call(0).Query; q != "" {
			t.Fatalf("the failover provider got the client's query %q", q)
		}
	})

	t.Run("an unset key is gatectl's own error: not worth retrying", func(t *testing.T) {
		conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, pt1.URL, pt2.URL), true)
		t.Setenv("GATECTL_TEST_KEY_CONF", "")
		r, body := f.call("/v1/chat/completions", chatReq("conf/k"))
		if r.StatusCode != 502 || r.Header.Get("X-Should-Retry") != "false" || conf.n() != 0 {
			t.Fatalf("status %d should-retry %q calls %d body %s", r.StatusCode, r.Header.Get("X-Should-Retry"), conf.n(), body)
		}
		if strings.Contains(f.logs.String(), pxConfKey) {
			t.Fatal("a key reached the log")
		}
	})

	t.Run("failover to a provider with a configured key", func(t *testing.T) {
		conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, pt1.URL, pt2.URL), true)
		r, body := f.call("/v1/chat/completions", chatReq("pt1/k"), auth...)
		if r.StatusCode != 200 || r.Header.Get("X-Gate-Route") != "conf/k" {
			t.Fatalf("status %d route %q body %s", r.StatusCode, r.Header.Get("X-Gate-Route"), body)
		}
		h := conf.call(0).Header
		if h.Get("Authorization") != "Bearer "+pxConfKey || h.Get("Openai-Organization") != "" {
			t.Fatalf("conf got Authorization %q organization %q", h.Get("Authorization"), h.Get("Openai-Organization"))
		}
		if h.Get("X-Org") != "org-42" || h.Get("X-Lit") != "a$b" {
			t.Fatalf("provider headers X-Org %q X-Lit %q", h.Get("X-Org"), h.Get("X-Lit"))
		}
		assertNoKeyLogged(t, f)
	})

	t.Run("a provider with a key never sees the client's", func(t *testing.T) {
		conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, pt1.URL, pt2.URL), true)
		r, _ := f.call("/v1/chat/completions", chatReq("conf/x"), append(auth, "X-Api-Key", pxClientKey, "X-Gate-Session", "s1")...)
		if r.StatusCode != 200 {
			t.Fatalf("status %d", r.StatusCode)
		}
		for k, vs := range conf.call(0).Header {
			for _, v := range vs {
				if strings.Contains(v, pxClientKey) {
					t.Fatalf("conf got the client's key in %s", k)
				}
				if strings.HasPrefix(k, "X-Gate-") {
					t.Fatalf("gatectl's own header %s went upstream", k)
				}
			}
		}
		assertNoKeyLogged(t, f)
	})

	t.Run("a configured key that is not set", func(t *testing.T) {
		t.Setenv("GATECTL_TEST_KEY_CONF", "")
		conf := newFakeUpstream(t, chatOK(1, 1, 0))
		f := newPxFixture(t, keysConfig(conf.URL, conf.URL, conf.URL), true)
		r, body := f.call("/v1/chat/completions", chatReq("conf/x"), auth...)
		if r.StatusCode != http.StatusBadGateway || !strings.Contains(body, "GATECTL_TEST_KEY_CONF") || conf.n() != 0 {
			t.Fatalf("status %d calls %d body %s", r.StatusCode, conf.n(), body)
		}
		if st := f.status("conf", "x"); st.InFlight != 0 {
			t.Fatal("the reservation was not released")
		}
	})
}

func assertNoKeyLogged(t *testing.T, f *pxFixture) {
	t.Helper()
	logs := f.logs.String()
	if logs == "" {
		t.Fatal("nothing was logged at trace level: the check would prove nothing")
	}
	for _, k := range []string{pxClientKey, pxConfKey, "sk-client", "sk-conf"} {
		if strings.Contains(logs, k) {
			t.Fatalf("the logs hold a key (%q):\n%s", k, logs)
		}
	}
}

// TestProxyRedirectKeepsKeys: an upstream's redirect to another origin is not
// followed: net/http would carry x-api-key (and, to another port of the same
// host, Authorization) there. It is passed back to the client as it is.
func TestProxyRedirectKeepsKeys(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_CONF", pxConfKey)
	elsewhere := newFakeUpstream(t, jsonAnswer(200, `{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":1}}`))
	redirectTo := func(base string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, base+r.URL.Path, http.StatusTemporaryRedirect)
		}
	}
	// anth passes the client's x-api-key through; conf sends gatectl's Authorization.
	anth := newFakeUpstream(t, redirectTo(strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)))
	conf := newFakeUpstream(t, redirectTo(elsewhere.URL))
	f := newPxFixture(t, fmt.Sprintf(`
log: {level: trace}
providers:
  anth: {kind: anthropic, baseURL: %s}
  conf: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_CONF}
`, anth.URL, conf.URL), true)

	// The test's own client must not follow the redirect either.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(path string, body any, headers ...string) int {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if st := send("/v1/messages", chatReq("anth/claude-x", "max_tokens", 10), "X-Api-Key", pxClientKey); st != http.StatusTemporaryRedirect || anth.n() != 1 {
		t.Fatalf("anthropic: status %d, %d calls", st, anth.n())
	}
	if st := send("/v1/chat/completions", chatReq("conf/x"), "Authorization", "Bearer "+pxClientKey); st != http.StatusTemporaryRedirect || conf.n() != 1 {
		t.Fatalf("openai: status %d, %d calls", st, conf.n())
	}
	for i := range elsewhere.n() {
		t.Errorf("the redirect was followed: %s got X-Api-Key %q Authorization %q", elsewhere.URL,
			elsewhere.call(i).Header.Get("X-Api-Key"), elsewhere.call(i).Header.Get("Authorization"))
	}
	for _, m := range []string{"claude-x", "x"} {
		p := map[string]string{"claude-x": "anth", "x": "conf"}[m]
		if st := f.status(p, m); st.InFlight != 0 || st.Reserved != 0 {
			t.Errorf("%s/%s: %d in flight, %d reserved", p, m, st.InFlight, st.Reserved)
		}
	}
	assertNoKeyLogged(t, f)
}

// TestProxyGoogleKeyHeader: x-goog-api-key (Gemini's key header, a credential
// header to the config too) is a key like the others: the client's goes only to
// the pass-through provider it is meant for, and a provider whose headers set it
// is keyed.
func TestProxyGoogleKeyHeader(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_GOOG", pxConfKey)
	goog, pt1 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, quotaAnswer)
	f := newPxFixture(t, fmt.Sprintf(`
log: {level: trace}
providers:
  goog: {kind: openai, baseURL: %s/v1, headers: {X-Goog-Api-Key: "${GATECTL_TEST_KEY_GOOG}"}}
  pt1:  {kind: openai, baseURL: %s/v1}
pools:
  mixed:
    routes:
      - {provider: pt1, model: k}
      - {provider: goog, model: k}
`, goog.URL, pt1.URL), true)
	r, body := f.call("/v1/chat/completions", chatReq("pt1/k"), "X-Goog-Api-Key", pxClientKey, "Authorization", "Bearer "+pxClientKey)
	if r.StatusCode != 200 || r.Header.Get("X-Gate-Route") != "goog/k" {
		t.Fatalf("status %d route %q body %s: the failover to a keyed provider was not taken", r.StatusCode, r.Header.Get("X-Gate-Route"), body)
	}
	if got := pt1.call(0).Header.Get("X-Goog-Api-Key"); got != pxClientKey {
		t.Fatalf("pt1 (the key's own provider) got X-Goog-Api-Key %q", got)
	}
	for k, vs := range goog.call(0).Header {
		for _, v := range vs {
			if strings.Contains(v, pxClientKey) {
				t.Fatalf("goog got the client's key in %s", k)
			}
		}
	}
	if got := goog.call(0).Header.Get("X-Goog-Api-Key"); got != pxConfKey {
		t.Fatalf("goog got X-Goog-Api-Key %q, want gatectl's", got)
	}
	assertNoKeyLogged(t, f)
}

// With an API token set, the proxy spends gatectl's own provider keys only for
// a request that carries the token — as the API key an SDK sends, or in
// X-Gate-Token. Without it, anyone who can reach the daemon would spend them.
// A pass-through provider takes the client's own key, token or not; a pool
// draw and a failover never move a request without the token onto a keyed
// route.
func TestProxyOwnKeysNeedTheToken(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_CONF", pxConfKey)
	t.Setenv("GATECTL_TEST_ORG", "org-42")
	t.Setenv("GATECTL_PROXY_TOKEN", "a-token-of-24-characters")
	conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, strings.Replace(keysConfig(conf.URL, pt1.URL, pt2.URL), "pools:\n", `pools:
  keyedfirst:
    routes:
      - {provider: conf, model: k}
      - {provider: pt1, model: k}
`, 1)+"api: {tokenEnv: GATECTL_PROXY_TOKEN}\n", true)
	cases := []struct {
		name, model string
		hdr         []string
		want        int
	}{
		{"no token, gatectl's key", "conf/m", []string{"Authorization", "Bearer " + pxClientKey}, 401},
		{"a wrong token", "conf/m", []string{"Authorization", "Bearer not-the-token"}, 401},
		{"the token as the OpenAI key", "conf/m", []string{"Authorization", "Bearer a-token-of-24-characters"}, 200},
		{"the token as Anthropic's x-api-key", "conf/m", []string{"X-Api-Key", "a-token-of-24-characters"}, 200},
		{"the token beside a key", "conf/m", []string{"Authorization", "Bearer " + pxClientKey, "X-Gate-Token", "a-token-of-24-characters"}, 200},
		{"no token, a pass-through provider", "pt1/m", []string{"Authorization", "Bearer " + pxClientKey}, 200},
	}
	for _, c := range cases {
		r, body := f.call("/v1/chat/completions", chatReq(c.model), c.hdr...)
		if r.StatusCode != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, r.StatusCode, body, c.want)
		}
		if c.want == 401 && (!strings.Contains(body, "API token") || strings.Contains(body, "a-token-of-24")) {
			t.Errorf("%s: body %s: want it to say the token is needed, and not the token", c.name, body)
		}
	}
	if conf.n() != 3 {
		t.Fatalf("the keyed provider got %d calls, want the 3 that carried the token", conf.n())
	}
	// A pool mixing the two, the keyed route first (the draw's pick when no
	// route can be scored): a session without the token is drawn onto the
	// pass-through route; one with it, onto the keyed route.
	before := conf.n()
	if r, body := f.call("/v1/chat/completions", chatReq("keyedfirst"), "Authorization", "Bearer a-token-of-24-characters", "X-Gate-Session", "member"); r.StatusCode != 200 || conf.n() != before+1 {
		t.Fatalf("a session with the token on the pool: %d %s, %d calls to the keyed route", r.StatusCode, body, conf.n()-before)
	}
	before = conf.n()
	for i := range 20 {
		r, body := f.call("/v1/chat/completions", chatReq("keyedfirst"), "Authorization", "Bearer "+pxClientKey, "X-Gate-Session", fmt.Sprintf("guest-%d", i))
		if r.StatusCode != 200 {
			t.Fatalf("session guest-%d on the mixed pool: %d %s", i, r.StatusCode, body)
		}
	}
	if conf.n() != before {
		t.Fatalf("requests without the token were drawn onto the keyed route: %d calls", conf.n()-before)
	}
	// The token sent as the API key is never passed through: a pass-through
	// route has no key of the client's to send, and says so.
	ptBefore := pt1.n()
	for _, hdr := range [][]string{{"Authorization", "Bearer a-token-of-24-characters"}, {"X-Api-Key", "a-token-of-24-characters"}} {
		r, body := f.call("/v1/chat/completions", chatReq("pt1/m"), hdr...)
		if r.StatusCode != 400 || !strings.Contains(body, "API token") {
			t.Errorf("the token as the key, on a pass-through route (%s): %d %s, want 400 saying the token is not sent", hdr[0], r.StatusCode, body)
		}
	}
	for i := range 10 { // a pool draw: only the keyed route, and the token goes nowhere
		if r, body := f.call("/v1/chat/completions", chatReq("keyedfirst"), "Authorization", "Bearer a-token-of-24-characters", "X-Gate-Session", fmt.Sprintf("member-%d", i)); r.StatusCode != 200 {
			t.Fatalf("member-%d: %d %s", i, r.StatusCode, body)
		}
	}
	if pt1.n() != ptBefore {
		t.Fatalf("requests whose key is the token reached the pass-through provider: %d calls", pt1.n()-ptBefore)
	}
	// The token beside a key of the client's own, wherever each goes (as the
	// Anthropic SDK sends api_key with auth_token): the own key goes on, the
	// token does not. A token in any key header, any value, is taken off.
	for _, hdr := range [][]string{
		{"X-Api-Key", pxClientKey, "Authorization", "Bearer a-token-of-24-characters"},
		{"Authorization", "Bearer " + pxClientKey, "Api-Key", "a-token-of-24-characters"},
		{"Authorization", "Bearer " + pxClientKey, "Authorization", "Bearer a-token-of-24-characters"},
	} {
		n := pt1.n()
		r, body := f.call("/v1/chat/completions", chatReq("pt1/m"), hdr...)
		if r.StatusCode != 200 || pt1.n() != n+1 {
			t.Fatalf("own key and token %v: %d %s", hdr, r.StatusCode, body)
		}
		for k, vs := range pt1.call(n).Header {
			for _, v := range vs {
				if strings.Contains(v, "a-token-of-24") {
					t.Fatalf("own key and token %v: the pass-through provider got the token in %s", hdr, k)
				}
			}
		}
	}
	// A client that sends the token as its key and names no session gets the
	// session of its address, not one every client of the token would share.
	f.call("/v1/chat/completions", chatReq("conf/m"), "Authorization", "Bearer a-token-of-24-characters")
	var sessions []string
	f.srv.seen.each(func(id string, _ time.Time) { sessions = append(sessions, id) })
	if got := strings.Join(sessions, " "); !strings.Contains(got, "addr-127.0.0.1") || strings.Contains(got, "key-"+tokenSessionHash()) {
		t.Fatalf("sessions %s: want addr-127.0.0.1 and none named by the token", got)
	}
	for i := range conf.n() {
		if got := conf.call(i).Header.Get("Authorization"); got != "Bearer "+pxConfKey {
			t.Fatalf("the keyed provider got Authorization %q, want gatectl's key", got)
		}
	}
}

// tokenSessionHash is the default session's hash the token would give as a key.
func tokenSessionHash() string {
	sum := sha256.Sum256([]byte("Bearer a-token-of-24-characters"))
	return hex.EncodeToString(sum[:8])
}
