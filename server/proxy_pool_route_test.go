package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A failover the proxy could not take is never chosen: in a pool mixing
// protocols, a QUOTA moves the session to a route of the endpoint's protocol,
// and the session stays usable.
func TestPoolFailoverKeepsToTheEndpointProtocol(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-a")
	t.Setenv("GATECTL_TEST_KEY_AN", "sk-an")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-b")
	pa, an, pb := newFakeUpstream(t, quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PA}
  an: {kind: anthropic, baseURL: %s, apiKeyEnv: GATECTL_TEST_KEY_AN}
  pb: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PB}
pools:
  mix:
    routes:
      - {provider: pa, model: m}
      - {provider: an, model: m}
      - {provider: pb, model: m}
`, pa.URL, an.URL, pb.URL), true)
	hdr := []string{"X-Gate-Session", "s-mix"}
	for i := range 3 {
		r, body := f.call("/v1/chat/completions", chatReq("mix"), hdr...)
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != "pb/m" {
			t.Fatalf("request %d: status %d route %q, want 200 on pb/m: %s\n%s", i, r.StatusCode, r.Header.Get("X-Gate-Route"), body, f.logs.String())
		}
	}
	if an.n() != 0 || pa.n() != 1 {
		t.Fatalf("calls pa=%d an=%d, want 1 and 0", pa.n(), an.n())
	}
	if logs := f.logs.String(); strings.Contains(logs, "to=an/m") {
		t.Errorf("a failover to the anthropic-kind route was announced:\n%s", logs)
	}
}

// With pass-through keys, a QUOTA on the client's provider is not moved to
// another pass-through provider — not for this request, and not for the
// session's next one — but to a provider gatectl holds a key for.
func TestPoolFailoverNeverMovesAClientKey(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_CONF", pxConfKey)
	conf, pt1, pt2 := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  conf: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_CONF}
  pt1:  {kind: openai, baseURL: %s/v1}
  pt2:  {kind: openai, baseURL: %s/v1}
pools:
  pass:
    routes:
      - {provider: pt1, model: m}
      - {provider: pt2, model: m}
      - {provider: conf, model: m}
`, conf.URL, pt1.URL, pt2.URL), true)
	hdr := []string{"X-Gate-Session", "s-pass", "Authorization", "Bearer " + pxClientKey}
	for i := range 2 {
		r, body := f.call("/v1/chat/completions", chatReq("pass"), hdr...)
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != "conf/m" {
			t.Fatalf("request %d: status %d route %q, want 200 on conf/m: %s\n%s", i, r.StatusCode, r.Header.Get("X-Gate-Route"), body, f.logs.String())
		}
	}
	if pt2.n() != 0 {
		t.Fatalf("pt2 got %d calls (Authorization %q): the client's key for pt1 went to another provider", pt2.n(), pt2.call(0).Header.Get("Authorization"))
	}
	if got := conf.call(0).Header.Get("Authorization"); got != "Bearer "+pxConfKey {
		t.Fatalf("conf got Authorization %q, want gatectl's key", got)
	}
	if logs := f.logs.String(); strings.Contains(logs, "to=pt2/m") {
		t.Errorf("a failover to pt2 was announced:\n%s", logs)
	}
	assertNoKeyLogged(t, f)
}

// Two pools sharing a route: the pool the request names governs, so its
// session keeps its route and a QUOTA on the shared route fails over within
// that pool.
func TestPoolSharedRouteIsGovernedByTheNamedPool(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-a")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-b")
	t.Setenv("GATECTL_TEST_KEY_PC", "sk-c")
	pa, pb, pc := newFakeUpstream(t, chatOK(1, 1, 0), quotaAnswer), newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PA}
  pb: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PB}
  pc: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PC}
pools:
  one:
    routes:
      - {provider: pa, model: m}
      - {provider: pb, model: m}
  two:
    routes:
      - {provider: pa, model: m}
      - {provider: pc, model: m}
`, pa.URL, pb.URL, pc.URL), true)
	hdr := []string{"X-Gate-Session", "s-two"}
	want := []string{"pa/m", "pc/m", "pc/m"} // drawn, then failed over within "two", then kept
	for i, w := range want {
		r, body := f.call("/v1/chat/completions", chatReq("two"), hdr...)
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != w {
			t.Fatalf("request %d: status %d route %q, want 200 on %s: %s\n%s", i, r.StatusCode, r.Header.Get("X-Gate-Route"), w, body, f.logs.String())
		}
	}
	if pb.n() != 0 {
		t.Errorf("pool one's route pb got %d calls", pb.n())
	}
	if got, ok := f.srv.Quota().CurrentRoute("s-two"); !ok || got.String() != "pc/m" {
		t.Errorf("session route %v %v, want pc/m", got, ok)
	}
}

// A pool mixing protocols draws, for each endpoint, among its routes of that
// protocol; an endpoint none of its routes speaks is a 400 naming the pool.
func TestPoolDrawsAmongTheEndpointProtocol(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_AN", "sk-an")
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-a")
	an, pa := newFakeUpstream(t, jsonAnswer(200, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":1}}`)), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  an: {kind: anthropic, baseURL: %s, apiKeyEnv: GATECTL_TEST_KEY_AN}
  pa: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PA}
pools:
  mix:
    routes:
      - {provider: an, model: m}
      - {provider: pa, model: m}
  claude:
    routes:
      - {provider: an, model: c}
`, an.URL, pa.URL), true)
	for i := range 4 {
		r, body := f.call("/v1/chat/completions", chatReq("mix"), "X-Gate-Session", fmt.Sprintf("s-%d", i))
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != "pa/m" {
			t.Fatalf("chat %d: status %d route %q, want pa/m: %s", i, r.StatusCode, r.Header.Get("X-Gate-Route"), body)
		}
	}
	r, body := f.call("/v1/messages", chatReq("mix", "max_tokens", 5), "X-Gate-Session", "s-msg")
	if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != "an/m" {
		t.Fatalf("messages: status %d route %q, want an/m: %s", r.StatusCode, r.Header.Get("X-Gate-Route"), body)
	}
	r, body = f.call("/v1/chat/completions", chatReq("claude"), "X-Gate-Session", "s-c")
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(body, `pool \"claude\" has no openai-kind route`) {
		t.Fatalf("claude pool on chat: status %d: %s", r.StatusCode, body)
	}
}

// Naming the pool after naming one of its routes keeps the session on that
// route: the ask changed, the route did not need to.
func TestPoolAskAfterRouteKeepsTheRoute(t *testing.T) {
	t.Setenv("GATECTL_TEST_KEY_PA", "sk-a")
	t.Setenv("GATECTL_TEST_KEY_PB", "sk-b")
	pa, pb := newFakeUpstream(t, chatOK(1, 1, 0)), newFakeUpstream(t, chatOK(1, 1, 0))
	f := newPxFixture(t, fmt.Sprintf(`
providers:
  pa: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PA}
  pb: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_TEST_KEY_PB}
pools:
  duo:
    routes:
      - {provider: pa, model: m}
      - {provider: pb, model: m}
`, pa.URL, pb.URL), true)
	hdr := []string{"X-Gate-Session", "s-ask"}
	for i, model := range []string{"pb/m", "duo", "duo"} {
		r, body := f.call("/v1/chat/completions", chatReq(model), hdr...)
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Gate-Route") != "pb/m" {
			t.Fatalf("request %d (%s): status %d route %q, want pb/m: %s", i, model, r.StatusCode, r.Header.Get("X-Gate-Route"), body)
		}
	}
	if pa.n() != 0 {
		t.Errorf("pa got %d calls", pa.n())
	}
}
