// Package e2e drives the official openai-go SDK, unchanged, through a gatectl
// binary to a fake upstream on loopback that answers 429 with Retry-After,
// streams, and reports usage. It is a module of its own so that gatectl's module
// does not depend on the SDK.
//
//	go build -o /tmp/gatectl ./cmd/gatectl
//	cd testdata/e2e/go && GATECTL_BIN=/tmp/gatectl go test ./...
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// upstream is a fake OpenAI-compatible provider with a provider's cooldown:
// while it runs, every call gets a 429 with Retry-After.
type upstream struct {
	mu            sync.Mutex
	calls         []call
	cooldownUntil time.Time
	rateLimitNext int
}

type call struct {
	at             time.Time
	status         int
	includeUsage   bool
	duringCooldown bool
	auth           string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	now := time.Now()
	c := call{at: now, includeUsage: body.StreamOptions != nil && body.StreamOptions.IncludeUsage, auth: r.Header.Get("Authorization")}
	u.mu.Lock()
	limited := now.Before(u.cooldownUntil) || u.rateLimitNext > 0
	if limited {
		if now.Before(u.cooldownUntil) {
			c.duringCooldown = true
		} else {
			u.rateLimitNext--
			u.cooldownUntil = now.Add(time.Second)
		}
		c.status = 429
	} else {
		c.status = 200
	}
	u.calls = append(u.calls, c)
	u.mu.Unlock()
	if limited {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	}
	usage := map[string]any{"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion", "created": 1, "model": body.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "pong"}, "finish_reason": "stop"}},
			"usage":   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1, "model": body.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": "po"}, nil)
	chunk(map[string]any{"content": "ng"}, nil)
	chunk(map[string]any{}, "stop")
	if c.includeUsage {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1, "model": body.Model,
			"choices": []any{}, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

func (u *upstream) since(i int) []call {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]call(nil), u.calls[i:]...)
}

func (u *upstream) n() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

// startGatectl runs $GATECTL_BIN serve in front of upURL and returns its URL.
func startGatectl(t *testing.T, upURL string) string {
	t.Helper()
	bin := os.Getenv("GATECTL_BIN")
	if bin == "" {
		t.Skip("GATECTL_BIN is not set: build gatectl (go build -o /tmp/gatectl ./cmd/gatectl) and point GATECTL_BIN at it")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
log: {level: error}
providers:
  fake: {kind: openai, baseURL: %s/v1, apiKeyEnv: GATECTL_E2E_KEY}
retry:
  rounds: 8
  hintClamp: {min: 100ms, max: 10s}
`, upURL)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"), "--grace", "1s")
	cmd.Env = append(os.Environ(), "GATECTL_E2E_KEY=sk-e2e-upstream")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on (http://\S+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("gatectl did not start")
	}
	return ""
}

func setup(t *testing.T) (*upstream, openai.Client) {
	t.Helper()
	up := &upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	gate := startGatectl(t, srv.URL)
	// WithMaxRetries(0): any retry that happens is gatectl's, invisible to the SDK.
	return up, openai.NewClient(option.WithBaseURL(gate+"/v1"), option.WithAPIKey("sk-client-unused"), option.WithMaxRetries(0))
}

func ping() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "fake/gpt-e2e", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ping")}}
}

func TestSDKThroughGatectl(t *testing.T) {
	up, client := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("429 with Retry-After is waited out inside gatectl", func(t *testing.T) {
		up.mu.Lock()
		up.rateLimitNext = 1
		up.mu.Unlock()
		from := up.n()
		res, err := client.Chat.Completions.New(ctx, ping())
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].Message.Content != "pong" || res.Usage.TotalTokens != 15 {
			t.Fatalf("answer %+v", res)
		}
		calls := up.since(from)
		if len(calls) != 2 || calls[0].status != 429 || calls[1].status != 200 {
			t.Fatalf("upstream saw %+v: want one 429, then one paced retry", calls)
		}
		if gap := calls[1].at.Sub(calls[0].at); gap < 900*time.Millisecond {
			t.Fatalf("the retry came %s after the 429, before its Retry-After", gap)
		}
		if calls[1].auth != "Bearer sk-e2e-upstream" {
			t.Fatalf("upstream Authorization %q: want gatectl's configured key", calls[1].auth)
		}
	})

	t.Run("streaming", func(t *testing.T) {
		from := up.n()
		stream := client.Chat.Completions.NewStreaming(ctx, ping())
		text, sawUsage := "", false
		for stream.Next() {
			ch := stream.Current()
			if len(ch.Choices) > 0 {
				text += ch.Choices[0].Delta.Content
			}
			sawUsage = sawUsage || ch.Usage.TotalTokens > 0
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text != "pong" || sawUsage {
			t.Fatalf("text %q, usage shown %v", text, sawUsage)
		}
		if c := up.since(from); len(c) != 1 || !c[0].includeUsage {
			t.Fatalf("upstream calls %+v: want one, with include_usage", c)
		}
	})

	t.Run("a burst meets the gate's pacing, not a retry storm", func(t *testing.T) {
		up.mu.Lock()
		up.rateLimitNext = 1
		up.mu.Unlock()
		from := up.n()
		const n = 12
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				res, err := client.Chat.Completions.New(ctx, ping(), option.WithHeader("X-Gate-Session", fmt.Sprintf("burst-%d", i)))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Choices[0].Message.Content == "pong" {
					ok.Add(1)
				}
			}(i)
		}
		wg.Wait()
		if ok.Load() != n {
			t.Fatalf("%d of %d calls succeeded", ok.Load(), n)
		}
		calls := up.since(from)
		var first time.Time
		rejected, late := 0, 0
		for _, c := range calls {
			if c.status == 429 {
				if rejected == 0 {
					first = c.at
				}
				rejected++
				if c.duringCooldown && c.at.Sub(first) > 200*time.Millisecond {
					late++
				}
			}
		}
		if rejected > n || late > 0 {
			t.Fatalf("%d 429s for %d calls, %d sent into the cooldown after gatectl knew of it", rejected, n, late)
		}
		t.Logf("burst: %d upstream calls, %d 429s", len(calls), rejected)
	})
}
