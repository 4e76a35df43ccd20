package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// storeCall sends one chat completion through the proxy and returns its status.
func storeCall(t *testing.T, url string) (int, string) {
	t.Helper()
	body := `{"model":"up/m1","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func storeGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// failClosedProxy is a proxy in front of a fake upstream, sharing its gate on
// a real redis-server under onError: failClosed with the given call deadline,
// checked to serve a call while Redis is up.
func failClosedProxy(t *testing.T, timeout string) (*redistest.Server, *pxFixture) {
	t.Helper()
	rs := redistest.Start(t)
	up := httptest.NewServer(fakeprovider.New(fakeprovider.Config{Tokens: 1 << 30}))
	t.Cleanup(up.Close)
	f := newPxFixture(t, fmt.Sprintf(`providers:
  up: {kind: openai, baseURL: "%s/v1"}
store:
  redis: {url: "%s", timeout: %s, onError: failClosed}
`, up.URL, rs.URL(), timeout), false)
	if code, body := storeCall(t, f.url); code != 200 {
		t.Fatalf("with Redis up: %d %s", code, body)
	}
	return rs, f
}

// With failClosed, a Redis that dies turns calls into 503s and /readyz red, says
// "degraded" once in the log and in the metrics, and everything comes back by
// itself when Redis does.
func TestStoreFailClosed(t *testing.T) {
	rs, f := failClosedProxy(t, "500ms")
	if code, body := storeGet(t, f.url+"/readyz"); code != 200 || !strings.Contains(body, `"state":"ok"`) {
		t.Fatalf("/readyz with Redis up: %d %s", code, body)
	}

	rs.Kill()
	for range 2 {
		if code, body := storeCall(t, f.url); code != http.StatusServiceUnavailable || !strings.Contains(body, "failClosed") {
			t.Fatalf("with Redis down under failClosed: %d %s, want 503", code, body)
		}
	}
	resp, err := http.Post(f.url+"/gate/v1/admit", "application/json", strings.NewReader(`{"provider":"up","model":"m1","inputTokens":10}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("decision API admit with Redis down under failClosed: %d, want 503", resp.StatusCode)
	}
	if ra := resp.Header.Get("Retry-After"); !validSpreadRetryAfter(ra) {
		t.Fatalf("Retry-After %q with Redis down, want 1 to %d seconds", ra, spreadRetryMax)
	}
	if code, body := storeGet(t, f.url+"/readyz"); code != 503 || !strings.Contains(body, `"state":"degraded"`) {
		t.Fatalf("/readyz with Redis down under failClosed: %d %s", code, body)
	}
	_, metrics := storeGet(t, f.url+"/metrics")
	if !strings.Contains(metrics, "gatectl_store_degraded 1") || strings.Contains(metrics, "gatectl_store_errors_total 0\n") {
		t.Fatalf("metrics with Redis down:\n%s", storeGrep(metrics, "gatectl_store"))
	}
	if n := strings.Count(f.logs.String(), "shared store degraded"); n != 1 {
		t.Fatalf("logged degraded %d times, want once per transition:\n%s", n, f.logs.String())
	}

	rs.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := storeGet(t, f.url+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no recovery within 10s of Redis returning")
		}
		time.Sleep(50 * time.Millisecond) // waiting for the store's own ping
	}
	if code, body := storeCall(t, f.url); code != 200 {
		t.Fatalf("after recovery: %d %s", code, body)
	}
	if !strings.Contains(f.logs.String(), "shared store recovered") {
		t.Fatal("recovery not logged")
	}
	// The status API shows the shared view again.
	var st APIStatus
	_, body := storeGet(t, f.url+"/gate/v1/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Store == nil || st.Store.State != "ok" || len(st.Store.Shared) != 1 || st.Store.Shared[0].Requests != 1 {
		t.Fatalf("status store %+v (%v): want ok and the one call since the restart", st.Store, err)
	}
}

func storeGrep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Over real sockets: under failClosed, a Redis that stops answering for less
// than the hold (300 ms of CLIENT PAUSE, against calls with a 100 ms deadline)
// costs a call through the proxy a wait, not a 503 — it is held, and admitted
// through the shared window once a probe finds Redis again. Refused at the
// first failure, as before, the same call was a 503.
func TestStoreFailClosedBlipIsAWait(t *testing.T) {
	rs, f := failClosedProxy(t, "100ms")
	raw := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer raw.Close()
	if err := raw.Do(context.Background(), "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, body := storeCall(t, f.url)
	took := time.Since(start)
	if code != 200 {
		t.Fatalf("a 300 ms pause of Redis under failClosed: %d %s after %v, want the call held and served", code, body, took)
	}
	if !strings.Contains(f.logs.String(), "shared store degraded") {
		t.Fatalf("served in %v without the store degrading: the pause was not met, and the test tested nothing", took)
	}
}
