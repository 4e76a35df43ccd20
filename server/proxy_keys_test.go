package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
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
