package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/hashicorp/go-hclog"
)

func TestAccessLog(t *testing.T) {
	t.Setenv("GATECTL_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("GATECTL_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
	oa := newFakeUpstream(t, chatOK(120, 7, 20))
	an := newFakeUpstream(t, jsonAnswer(400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`))

	f := newPxFixture(t, aliasConfig(oa.URL, an.URL, "log: {access: true}"), true)
	f.call("/v1/chat/completions", chatReq("gpt-4o", "secret_field", "do-not-log-me"),
		"X-Gate-Session", "sess-7", "Authorization", "Bearer sk-client-secret")
	f.call("/v1/messages", chatReq("claude-3-5-haiku-latest", "max_tokens", 5))
	f.call("/v1/chat/completions", chatReq("no-such-model"))
	f.call("/v1/chat/completions", "not an object")

	var lines []string
	for _, l := range strings.Split(f.logs.String(), "\n") {
		if strings.Contains(l, "gatectl.access: proxied") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("%d access lines, want one per call:\n%s", len(lines), f.logs.String())
	}
	for i, want := range []string{
		`\[INFO\]  gatectl.access: proxied: method=POST path=/v1/chat/completions face=openai model=gpt-4o route=openai/gpt-4o status=200 attempts=1 gate_wait_ms=\d+ upstream_ms=\d+ total_ms=\d+ tokens_in=120 tokens_out=7 session=sess-7$`,
		`path=/v1/messages face=anthropic model=claude-3-5-haiku-latest route=anthropic/claude-3-5-haiku-latest status=400 attempts=1 .* tokens_in=0 tokens_out=0 session=addr-127\.0\.0\.1$`, // no X-Gate-Session: the client's address
		`path=/v1/chat/completions face=openai model=no-such-model route="" status=400 attempts=0 `,
		`path=/v1/chat/completions face=openai route="" status=400 attempts=0 `,
	} {
		if !regexp.MustCompile(want).MatchString(lines[i]) {
			t.Errorf("line %d:\n%s\nwant it to match %s", i, lines[i], want)
		}
	}
	for _, secret := range []string{"sk-client-secret", "sk-test-openai", "sk-test-anthropic", "do-not-log-me", "hello"} {
		if strings.Contains(strings.Join(lines, "\n"), secret) {
			t.Errorf("an access line holds %q", secret)
		}
	}

	off := newPxFixture(t, aliasConfig(oa.URL, an.URL, ""), true)
	off.call("/v1/chat/completions", chatReq("gpt-4o"))
	if strings.Contains(off.logs.String(), "gatectl.access") {
		t.Errorf("access lines without log.access:\n%s", off.logs.String())
	}
}

// BenchmarkAccessLine: the cost of one access line (hclog text format, written
// to io.Discard): what log.access adds to a proxied call besides the writer's
// own I/O.
func BenchmarkAccessLine(b *testing.B) {
	s := &Server{accessLog: hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Info, Output: io.Discard}).Named("access")}
	ep := &endpoints[0]
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	pr := &proxyRequest{ep: ep, model: "gpt-4o", session: "sess-7"}
	x := &exchange{pr: pr, route: engine.Route{Provider: "openai", Model: "gpt-4o"}, attempts: 1,
		waited: 3 * time.Millisecond, upstream: 80 * time.Millisecond, usage: gate.Usage{InputTokens: 120, OutputTokens: 7}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.logAccess(r, ep, http.StatusOK, pr, x, 85*time.Millisecond)
	}
}

// TestAccessLogRetries: the line of a call that gatectl retried counts the
// attempts and the gate's wait.
func TestAccessLogRetries(t *testing.T) {
	up := newFakeUpstream(t,
		jsonAnswer(429, `{"error":{"message":"Rate limit reached for requests","type":"requests"}}`, "Retry-After", "5"),
		chatOK(10, 2, 0))
	f := newPxFixture(t, retryConfig(up.URL, "  rounds: 3")+"log: {access: true}\n", true)
	res := f.callAsync("/v1/chat/completions", chatReq("pa/rl"))
	waitFor(t, "the admission wait", func() bool { return up.n() == 1 && f.clock.Timers() == 1 })
	f.clock.Advance(6 * time.Second) // past the cooldown and its jitter
	if r := <-res; r.resp.StatusCode != 200 {
		t.Fatalf("%d %s", r.resp.StatusCode, r.body)
	}
	line := regexp.MustCompile(`gatectl\.access: proxied: .*`).FindString(f.logs.String())
	m := regexp.MustCompile(`route=pa/rl status=200 attempts=2 gate_wait_ms=(\d+) .* tokens_in=10 tokens_out=2 session=addr-127\.0\.0\.1$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("access line %q", line)
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 5000 {
		t.Errorf("gate_wait_ms %d, want the cooldown (≥ 5000)", ms)
	}
}
