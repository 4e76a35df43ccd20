package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/internal/testenv"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
)

// The console's end-to-end tests: a real headless Chromium (Debian's chromium,
// installed by .ci/run) driven by chromedp against a real gatectl server on a
// loopback port, with a fake provider behind it. Each view is screenshotted at
// a desktop and a phone size into the artifact directory ($GATECTL_ARTIFACTS,
// else a temporary one).

// consoleConfig: fake/small runs on the fake provider (whose hidden limit is
// below the gate's start, so the gate meets real 429s and learns); alpha/held
// has a 1,000-token budget so a second call is held; pool medium fails over
// between alpha and beta; the curve is jitter-free so its waits are exact.
const consoleConfig = `
providers:
  fake:  {kind: openai, baseURL: "%[1]s/v1"}
  alpha: {kind: openai, baseURL: "%[1]s/v1"}
  beta:  {kind: openai, baseURL: "%[1]s/v1"}
gate:
  window: 10s
  maxWait: 60s
  pace: 0
  marginSigmas: 0
  countGuard: 0
  defaults: {tpm: 1000000, rpm: 600}
  models:
    fake/small: {tpm: 12000, rpm: 600, safetyFactor: 1}
    alpha/held: {tpm: 1000, rpm: 600, safetyFactor: 1}
    alpha/out: {otpm: 2000, safetyFactor: 1}
retry:
  rounds: 4
  initialDelay: 2s
  multiplier: 2
  maxDelay: 60s
  jitter: 0
pools:
  medium:
    routes:
      - {provider: alpha, model: m1}
      - {provider: beta, model: m1}
balances:
  - provider: alpha
    script: [sh, -c, 'echo ''{"remaining": 12.5}''']
  - provider: beta
    script: [sh, -c, 'echo ''{"remaining": 4.2}''']
api:
  tokenEnv: %[2]s
`

// consoleEnv is gatectl on a real loopback port, restartable on that port.
type consoleEnv struct {
	t       *testing.T
	dir     string
	config  string
	addr    string
	url     string
	token   string
	srv     *Server
	stop    func()
	fake    *httptest.Server
	pending sync.WaitGroup
}

func newConsoleEnv(t *testing.T, token string) *consoleEnv {
	t.Helper()
	fp := fakeprovider.New(fakeprovider.Config{Tokens: 6000, Window: 10 * time.Second, RetryAfter: 3 * time.Second, Headers: true, OutputMedian: 60})
	fake := httptest.NewServer(fp)
	t.Cleanup(fake.Close)
	env := fmt.Sprintf("GATECTL_CONSOLE_TEST_TOKEN_%d", rand.Uint32())
	if token != "" {
		t.Setenv(env, token)
	}
	e := &consoleEnv{t: t, dir: t.TempDir(), token: token, fake: fake}
	e.config = filepath.Join(e.dir, "gatectl.yaml")
	if err := os.WriteFile(e.config, []byte(fmt.Sprintf(consoleConfig, fake.URL, env)), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.url = "http://" + e.addr
	e.start(ln)
	t.Cleanup(func() {
		e.stop()
		e.pending.Wait()
	})
	return e
}

// start serves a new Server (same config and state directory) on ln.
func (e *consoleEnv) start(ln net.Listener) {
	e.t.Helper()
	m, err := snapshot.NewManager(context.Background(), e.config, snapshot.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	srv, err := New(Options{Manager: m, StateDir: filepath.Join(e.dir, "state"), Logger: hclog.NewNullLogger(),
		ShutdownGrace: 500 * time.Millisecond, Rand: &lockedRand{r: rand.New(rand.NewPCG(3, 4))}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, ln)
	}()
	e.srv = srv
	e.stop = func() {
		cancel()
		<-done
		srv.Close()
	}
}

// restart stops the server and serves a new one on the same address.
func (e *consoleEnv) restart() {
	e.t.Helper()
	e.stop()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port is ours; the kernel may take a moment to let it go
		if ln, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("listening again on %s: %v", e.addr, err)
	}
	e.start(ln)
}

// call sends a JSON request to the API (with the token when one is set).
func (e *consoleEnv) call(method, path, body string, want int) map[string]any {
	e.t.Helper()
	status, b := e.do(context.Background(), method, path, body, true)
	if status != want {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		e.t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
	return m
}

func (e *consoleEnv) do(ctx context.Context, method, path, body string, withToken bool) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if withToken && e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// chat sends n chat completions through the proxy to fake/small in the
// background (bounded by ctx), so the Models view has a real model to show.
func (e *consoleEnv) chat(ctx context.Context, n int) {
	prompt := strings.Repeat("word ", 1500)
	for i := 0; i < n; i++ {
		e.pending.Add(1)
		go func() {
			defer e.pending.Done()
			body := fmt.Sprintf(`{"model":"fake/small","max_tokens":200,"messages":[{"role":"user","content":%q}]}`, prompt)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", fmt.Sprintf("agent-%d", i%3))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}

// browser is one headless Chromium for the whole test; pages are its tabs.
type browser struct {
	ctx  context.Context
	logs *pageLog
}

// pageLog collects what a page reports as an error: console.error and
// console.warn calls, uncaught exceptions, and the browser's own error log
// (failed loads, CSP violations).
type pageLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *pageLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, s)
}

func (l *pageLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.errs
	l.errs = nil
	return out
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	chrome := testenv.Tool(t, "chromium", "apt-get install -y chromium")
	// A fresh profile, removed once the browser is gone (not by t.TempDir,
	// which would race Chromium's helpers still writing to it).
	profile, err := os.MkdirTemp("", "gatectl-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancelCtx()
		cancelAlloc()
		for i := 0; i < 20; i++ { // bounded: helpers may still be exiting
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("could not remove the browser profile %s", profile)
	})
	b := &browser{ctx: ctx, logs: &pageLog{}}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.logs.add(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.logs.add(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError || ev.Entry.Level == log.LevelWarning {
				b.logs.add(fmt.Sprintf("browser %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// run runs actions with a deadline, failing the test with what was being done.
func (b *browser) run(t *testing.T, what string, d time.Duration, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// artifacts is where screenshots go.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GATECTL_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	var png []byte
	b.run(t, "screenshot "+name, 10*time.Second, chromedp.FullScreenshot(&png, 100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// text returns the text of the first node matching sel, read in one step in
// the page (the views re-render; a node found in one call may be gone in the next).
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	var s *string
	b.eval(t, fmt.Sprintf(`document.querySelector(%q)?.textContent ?? null`, sel), &s)
	if s == nil {
		t.Fatalf("no node %s", sel)
	}
	return strings.TrimSpace(*s)
}

// eval runs a JS expression in the page and decodes its value into out.
func (b *browser) eval(t *testing.T, js string, out any) {
	t.Helper()
	b.run(t, "evaluating "+js, 10*time.Second, chromedp.Evaluate(js, out, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	}))
}

// clearInput empties an input the way a person would (select all, delete),
// so the page sees an input event.
func clearInput(sel string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var ok bool
		if err := chromedp.Evaluate(fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.focus(); el.select(); return true })()`, sel), &ok).Do(ctx); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no input %s", sel)
		}
		return chromedp.KeyEvent(kb.Delete).Do(ctx)
	})
}

var views = []string{"models", "waits", "pools", "sessions", "retry", "failures"}

func TestConsole(t *testing.T) {
	b := newBrowser(t)
	e := newConsoleEnv(t, "")
	dir := artifacts(t)
	traffic, stopTraffic := context.WithCancel(context.Background())
	t.Cleanup(stopTraffic)

	t.Run("LoadsWithoutErrors", func(t *testing.T) {
		e.chat(traffic, 8) // some pass, some meet the fake's hidden limit: a learned trigger and 429s to show
		// A failure nothing specific classifies, for the Failures view.
		e.call(http.MethodPost, "/gate/v1/failure", `{"provider":"beta","model":"m1","session":"agent-9","status":418,"body":"{\"error\":{\"message\":\"teapot says no; key sk-abcdefghijklmnopqrstuvwxyz0123\"}}"}`, http.StatusOK)
		b.run(t, "opening the console", 15*time.Second,
			chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(e.url+"/ui#models"),
			chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery),
			chromedp.WaitVisible(`article.model[data-model="fake/small"]`, chromedp.ByQuery),
		)
		if errs := b.logs.take(); len(errs) != 0 {
			t.Fatalf("the console reported errors on load:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("OutputLimitShows", func(t *testing.T) {
		// A model with a limit on output tokens alone shows its output window
		// against it, beside the token window.
		e.call(http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"out","session":"writer","inputTokens":10,"maxTokens":500}`, http.StatusOK)
		legend := `article.model[data-model="alpha/out"] .output-legend`
		b.run(t, "waiting for the output window to show", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#models"),
			chromedp.WaitVisible(legend, chromedp.ByQuery),
		)
		if got := b.text(t, legend); !strings.Contains(got, "500 / 2000 output tokens in window") {
			t.Fatalf("output legend %q, want 500 / 2000 output tokens in window", got)
		}
	})

	t.Run("HeldCallCountsDownThenLeaves", func(t *testing.T) {
		first := e.call(http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"held","session":"filler","inputTokens":900,"maxTokens":1}`, http.StatusOK)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		admitted := make(chan string, 1)
		go func() {
			status, body := e.do(ctx, http.MethodPost, "/gate/v1/admit", `{"provider":"alpha","model":"held","session":"held-1","priority":"batch","inputTokens":500,"maxTokens":1}`, true)
			admitted <- fmt.Sprintf("%d %s", status, body)
		}()
		row := `table.held tr[data-session="held-1"]`
		b.run(t, "waiting for the held call to show", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#waits"),
			chromedp.WaitVisible(row, chromedp.ByQuery),
		)
		cd := row + ` .countdown`
		before := b.text(t, cd)
		if !strings.HasPrefix(before, "~") || !strings.HasSuffix(before, " s") {
			t.Fatalf("countdown %q, want ~N s", before)
		}
		if r := b.text(t, row+` .reason`); r != "tpm" {
			t.Fatalf("reason %q, want tpm", r)
		}
		// The countdown runs in the page between polls.
		var after string
		deadline := time.Now().Add(5 * time.Second)
		for after = b.text(t, cd); after == before && time.Now().Before(deadline); after = b.text(t, cd) {
			time.Sleep(100 * time.Millisecond)
		}
		if after == before {
			t.Fatalf("countdown stayed at %q", before)
		}
		b.screenshot(t, dir, "waits-held-desktop")
		// Settling the first call with what it really used frees the window: the
		// held call is admitted, and leaves the page.
		e.call(http.MethodPost, "/gate/v1/settle", `{"ticket":"`+first["ticket"].(string)+`","usage":{"inputTokens":10,"outputTokens":1}}`, http.StatusOK)
		select {
		case got := <-admitted:
			if !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"admitted":true`) {
				t.Fatalf("held admit answered %s", got)
			}
		case <-ctx.Done():
			t.Fatal("the held call was not admitted after the settle")
		}
		b.run(t, "waiting for the admitted call to leave", 10*time.Second,
			chromedp.WaitNotPresent(row, chromedp.ByQuery))
	})

	t.Run("CurveEditChangesNextFailure", func(t *testing.T) {
		fail := func(session string) float64 {
			f := e.call(http.MethodPost, "/gate/v1/failure", `{"provider":"alpha","model":"m1","session":"`+session+`","turn":"t1","status":500}`, http.StatusOK)
			if f["action"] != "retry" {
				t.Fatalf("a 500 planned %v, want retry", f)
			}
			return f["delayMs"].(float64)
		}
		if d := fail("curve-before"); d != 2000 {
			t.Fatalf("round 1 waits %v ms before the edit, want 2000 (retry.initialDelay 2s)", d)
		}
		field := `#retry-form input[name="initialDelay"]`
		b.run(t, "opening the retry editor", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#retry"),
			chromedp.WaitVisible(`#curve-chart svg g.round`, chromedp.ByQuery),
		)
		var bars int
		b.eval(t, `document.querySelectorAll("#curve-chart g.round").length`, &bars)
		if bars != 4 {
			t.Fatalf("the curve draws %d rounds, want 4", bars)
		}
		// Validation as you type: a bad value is named and blocks saving.
		b.run(t, "typing a bad delay", 5*time.Second,
			clearInput(field),
			chromedp.SendKeys(field, "7 parsecs", chromedp.ByQuery),
			chromedp.WaitVisible(`#retry-save:disabled`, chromedp.ByQuery),
		)
		if msg := b.text(t, `#err-initialDelay`); !strings.Contains(msg, "retry.initialDelay") {
			t.Fatalf("error under the field %q, want it to name retry.initialDelay", msg)
		}
		b.run(t, "typing 7s and saving", 10*time.Second,
			clearInput(field),
			chromedp.SendKeys(field, "7s", chromedp.ByQuery),
			chromedp.WaitVisible(`#retry-save:enabled`, chromedp.ByQuery),
			chromedp.Click(`#retry-save`, chromedp.ByQuery),
			chromedp.WaitVisible(`//span[@id="retry-result"][contains(@class, "ok")][starts-with(., "saved")]`, chromedp.BySearch),
		)
		if d := fail("curve-after"); d != 7000 {
			t.Fatalf("round 1 waits %v ms after saving 7s in the page, want 7000", d)
		}
		b.screenshot(t, dir, "retry-desktop")
		b.run(t, "resetting", 10*time.Second,
			chromedp.Click(`#retry-reset`, chromedp.ByQuery),
			// The save's "saved" is still there until the reset's answer redraws the form.
			chromedp.WaitVisible(`//span[@id="retry-result"][contains(@class, "ok")][starts-with(., "reset")]`, chromedp.BySearch),
		)
		if d := fail("curve-reset"); d != 2000 {
			t.Fatalf("round 1 waits %v ms after the reset, want 2000 again", d)
		}
		// Saving one changed key creates that override alone: the other four stay
		// with the file.
		rounds := `#retry-form input[name="rounds"]`
		b.run(t, "typing 6 rounds and saving", 10*time.Second,
			chromedp.WaitVisible(`#retry-save:enabled`, chromedp.ByQuery),
			clearInput(rounds),
			chromedp.SendKeys(rounds, "6", chromedp.ByQuery),
			chromedp.Click(`#retry-save`, chromedp.ByQuery),
			chromedp.WaitVisible(`//span[@id="retry-result"][contains(@class, "ok")][starts-with(., "saved")]`, chromedp.BySearch),
		)
		ov := e.call(http.MethodGet, "/gate/v1/settings/retry", "", http.StatusOK)["overrides"].(map[string]any)
		if len(ov) != 1 || ov["rounds"] != 6.0 {
			t.Fatalf("overrides after saving rounds alone: %v, want {rounds: 6} only", ov)
		}
		b.run(t, "resetting again", 10*time.Second,
			chromedp.Click(`#retry-reset`, chromedp.ByQuery),
			chromedp.WaitVisible(`//span[@id="retry-result"][contains(@class, "ok")][starts-with(., "reset")]`, chromedp.BySearch),
		)
		if ov := e.call(http.MethodGet, "/gate/v1/settings/retry", "", http.StatusOK)["overrides"].(map[string]any); len(ov) != 0 {
			t.Fatalf("overrides after the reset: %v, want none", ov)
		}
	})

	// The editor draws the curve the planner uses: the page's curve() against
	// retry.Policy.Curve for a few shapes (growing, capped, jittered, flat).
	t.Run("CurveMatchesEngine", func(t *testing.T) {
		b.run(t, "opening the console", 10*time.Second, chromedp.Navigate(e.url+"/ui#retry"), chromedp.WaitVisible(`#nav`, chromedp.ByQuery))
		for _, p := range []retry.Policy{
			{Rounds: 8, InitialDelay: 2 * time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: 0.2},
			{Rounds: 5, InitialDelay: 1500 * time.Millisecond, Multiplier: 3.5, MaxDelay: 20 * time.Second, Jitter: 0},
			{Rounds: 30, InitialDelay: 250 * time.Millisecond, Multiplier: 1.7, MaxDelay: 90 * time.Second, Jitter: 1},
			{Rounds: 3, InitialDelay: 5 * time.Second, Multiplier: 1, MaxDelay: 5 * time.Second, Jitter: 0.5},
		} {
			var got []struct{ Delay, Longest, CumLongest float64 }
			b.eval(t, fmt.Sprintf(`import("/ui/curve.js").then(m => m.curve({rounds: %d, initialDelay: %d, multiplier: %v, maxDelay: %d, jitter: %v}).map(p => ({Delay: p.delay, Longest: p.longest, CumLongest: p.cumLongest})))`,
				p.Rounds, p.InitialDelay.Milliseconds(), p.Multiplier, p.MaxDelay.Milliseconds(), p.Jitter), &got)
			want := p.Curve()
			if len(got) != len(want) {
				t.Fatalf("%+v: the page draws %d rounds, the planner has %d", p, len(got), len(want))
			}
			for i, w := range want {
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				if math.Abs(got[i].Delay-ms(w.Delay)) > 1 || math.Abs(got[i].Longest-ms(w.Longest)) > 1 || math.Abs(got[i].CumLongest-ms(w.CumulativeLongest)) > float64(i+1) {
					t.Fatalf("%+v round %d: page %+v, planner delay %s longest %s cumulative %s", p, i+1, got[i], w.Delay, w.Longest, w.CumulativeLongest)
				}
			}
		}
	})

	t.Run("FailoverShowsInPools", func(t *testing.T) {
		b.run(t, "opening the pools", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#pools"),
			chromedp.WaitVisible(`article.pool[data-pool="medium"]`, chromedp.ByQuery),
		)
		a := e.call(http.MethodPost, "/gate/v1/admit", `{"pool":"medium","session":"mover"}`, http.StatusOK)
		from := a["route"].(map[string]any)["provider"].(string)
		to := map[string]string{"alpha": "beta", "beta": "alpha"}[from]
		quota := `"status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"`
		f := e.call(http.MethodPost, "/gate/v1/failure", `{"provider":"`+from+`","model":"m1","session":"mover","turn":"t1",`+quota+`,"ticket":"`+a["ticket"].(string)+`"}`, http.StatusOK)
		if f["action"] != "failover" {
			t.Fatalf("quota failure planned %v, want failover", f)
		}
		item := `#pool-feed li.ev-failover`
		b.run(t, "waiting for the failover in the feed", 10*time.Second, chromedp.WaitVisible(item, chromedp.ByQuery))
		if s := b.text(t, item); !strings.Contains(s, "mover") || !strings.Contains(s, from+"/m1 → "+to+"/m1") {
			t.Fatalf("feed item %q, want mover moved %s/m1 → %s/m1", s, from, to)
		}
		b.run(t, "waiting for the mark", 10*time.Second,
			chromedp.WaitVisible(`tr[data-route="`+from+`/m1"] .badge.hot`, chromedp.ByQuery))
	})

	t.Run("SessionEdit", func(t *testing.T) {
		b.run(t, "opening the sessions", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#sessions"),
			chromedp.WaitVisible(`article.session[data-session="mover"]`, chromedp.ByQuery),
			// As a person picks an option: the value and its change event at once
			// (the change holds the refreshing list still until the save). The
			// card is marked, so the wait below sees the one drawn after the save.
			chromedp.Evaluate(`(() => { document.querySelector('article.session[data-session="mover"]').dataset.before = "1"; const s = document.querySelector('form.session[data-session="mover"] select[name="switch"]'); s.value = "off"; s.dispatchEvent(new Event("change", {bubbles: true})); })()`, nil),
			chromedp.Click(`form.session[data-session="mover"] button`, chromedp.ByQuery),
			// The save's own event redraws the list within a fraction of a second;
			// the redrawn card still says "saved" (it used to lose it at once).
			chromedp.WaitVisible(`article.session[data-session="mover"]:not([data-before]) .result.ok`, chromedp.ByQuery),
		)
		s := e.call(http.MethodGet, "/gate/v1/sessions/mover", "", http.StatusOK)
		if s["switch"] != "off" || s["enabled"] != false {
			t.Fatalf("after the edit in the page the session is %v, want switch off", s)
		}
		// A session looked up by id shows its turn's retries against the budget:
		// curve-before had one retry planned, of retry.rounds 4.
		card := `article.session[data-session="curve-before"]`
		b.run(t, "looking up a session", 10*time.Second,
			chromedp.SendKeys(`#session-id`, "curve-before", chromedp.ByQuery),
			chromedp.Click(`#session-find button`, chromedp.ByQuery),
			chromedp.WaitVisible(card+` dl.turn`, chromedp.ByQuery),
		)
		var facts map[string]string
		b.eval(t, `Object.fromEntries([...document.querySelectorAll('article.session[data-session="curve-before"] dl.turn div')].map(d => [d.querySelector("dt").textContent, d.querySelector("dd").textContent.trim()]))`, &facts)
		if facts["turn"] != "t1" || facts["retries"] != "1 of 4" || facts["budget left"] != "3" {
			t.Fatalf("curve-before's turn in the page: %v, want turn t1, 1 of 4 retries, 3 left", facts)
		}
	})

	// The Sessions view lists what GET /gate/v1/sessions answers, refreshing:
	// a session that only called through the proxy appears while the view is
	// open, without being looked up.
	t.Run("SessionsListed", func(t *testing.T) {
		b.run(t, "opening the sessions", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#sessions"),
			chromedp.WaitVisible(`//p[@id="session-count"][contains(., "most recently active first") or starts-with(., "no session")]`, chromedp.BySearch),
		)
		// The gate may hold the call (the earlier traffic filled the fake's
		// window): the session is known from the moment it calls.
		body := `{"model":"fake/small","max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", "proxied-only")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		card := `article.session[data-session="proxied-only"]`
		b.run(t, "waiting for the proxied session in the list", 10*time.Second, chromedp.WaitVisible(card, chromedp.ByQuery))
		var looked bool
		b.eval(t, `!!document.querySelector('article.session[data-session="proxied-only"] .badge:not(.warm)')`, &looked)
		if looked {
			t.Fatal("proxied-only is marked looked up; it should come from the list")
		}
		if c := b.text(t, `#session-count`); !strings.Contains(c, "most recently active first") {
			t.Fatalf("the count line %q, want how many sessions and their order", c)
		}
		// The newest session is on top.
		var first string
		b.eval(t, `document.querySelector("#session-list article.session")?.dataset.session ?? ""`, &first)
		if first != "proxied-only" {
			t.Fatalf("first card %q, want proxied-only (the most recently active)", first)
		}
	})

	t.Run("Screenshots", func(t *testing.T) {
		for _, vp := range []struct {
			name string
			w, h int64
			opts []chromedp.EmulateViewportOption
		}{
			{"desktop", 1280, 800, nil},
			{"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile}},
		} {
			b.run(t, "viewport "+vp.name, 15*time.Second, chromedp.EmulateViewport(vp.w, vp.h, vp.opts...),
				chromedp.Navigate(e.url+"/ui#waits"), chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery))
			// Views are switched by their links (no reload), Models last: by then
			// the page has watched long enough to draw some history.
			for _, v := range append(views[1:], views[0]) {
				b.run(t, "opening "+v, 10*time.Second,
					chromedp.Click(`#nav a[data-view="`+v+`"]`, chromedp.ByQuery),
					chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery),
					chromedp.WaitVisible(`#nav a.active[data-view="`+v+`"]`, chromedp.ByQuery),
					chromedp.WaitNotPresent(`#view .empty:only-child`, chromedp.ByQuery),
				)
				if v == "models" {
					b.run(t, "waiting for a chart", 10*time.Second,
						chromedp.WaitVisible(`article.model[data-model="fake/small"] svg.chart`, chromedp.ByQuery))
				}
				time.Sleep(400 * time.Millisecond) // let async views (sessions, retry, failures) finish drawing
				var overflow bool
				b.eval(t, fmt.Sprintf(`document.documentElement.scrollWidth > %d`, vp.w), &overflow)
				if overflow {
					t.Errorf("%s at %s scrolls sideways: the page is wider than the viewport", v, vp.name)
				}
				b.screenshot(t, dir, v+"-"+vp.name)
			}
		}
		b.run(t, "desktop again", 5*time.Second, chromedp.EmulateViewport(1280, 800))
		if errs := b.logs.take(); len(errs) != 0 {
			t.Fatalf("the console reported errors:\n%s", strings.Join(errs, "\n"))
		}
		t.Logf("screenshots in %s", dir)
	})

	t.Run("ReconnectsAcrossRestart", func(t *testing.T) {
		b.run(t, "opening the pools", 10*time.Second,
			chromedp.Navigate(e.url+"/ui#pools"),
			chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery),
		)
		e.restart()
		// The page sees the stream drop and comes back on its own.
		b.run(t, "waiting for the page to reconnect", 20*time.Second, chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery))
		// And it is live on the new server: an event there reaches the page.
		a := e.call(http.MethodPost, "/gate/v1/admit", `{"pool":"medium","session":"after-restart"}`, http.StatusOK)
		from := a["route"].(map[string]any)["provider"].(string)
		quota := `"status":429,"body":"{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}"`
		e.call(http.MethodPost, "/gate/v1/failure", `{"provider":"`+from+`","model":"m1","session":"after-restart","turn":"t1",`+quota+`,"ticket":"`+a["ticket"].(string)+`"}`, http.StatusOK)
		b.run(t, "waiting for an event from the new server", 10*time.Second,
			chromedp.WaitVisible(`//ul[@id="pool-feed"]/li[contains(., "after-restart")]`, chromedp.BySearch))
		b.logs.take() // a dropped stream is logged by the browser; that is the point of this test
	})
	stopTraffic()
}

// With a token configured, the console asks for it, and nothing that changes
// the gate goes through without it.
func TestConsoleToken(t *testing.T) {
	b := newBrowser(t)
	const token = "console-test-token-7f3a"
	e := newConsoleEnv(t, token)
	b.run(t, "opening the console without the token", 10*time.Second,
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(e.url+"/ui"),
		chromedp.WaitVisible(`#login #token`, chromedp.ByQuery),
	)
	// A mutating request from the page without the token is refused.
	var status int
	b.eval(t, `fetch("/gate/v1/sessions/s1", {method: "PUT", headers: {"Content-Type": "application/json"}, body: JSON.stringify({switch: "off"})}).then(r => r.status)`, &status)
	if status != http.StatusUnauthorized {
		t.Fatalf("PUT /gate/v1/sessions/s1 without the token: %d, want 401", status)
	}
	b.eval(t, `fetch("/ui/app.js").then(r => r.status)`, &status)
	if status != http.StatusUnauthorized {
		t.Fatalf("GET /ui/app.js without the token: %d, want 401", status)
	}
	b.screenshot(t, artifacts(t), "login-desktop")
	b.logs.take() // the refused requests are logged by the browser, on purpose

	b.run(t, "a wrong token", 10*time.Second,
		chromedp.SendKeys(`#token`, "not-the-token", chromedp.ByQuery),
		chromedp.Click(`#login button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#login-error`, chromedp.ByQuery),
	)
	if s := b.text(t, `#login-error`); !strings.Contains(s, "refused") {
		t.Fatalf("login error %q, want the refusal", s)
	}
	b.logs.take()
	b.run(t, "the right token opens the console", 15*time.Second,
		clearInput(`#token`),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		chromedp.Click(`#login button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#nav`, chromedp.ByQuery),
		chromedp.WaitVisible(`#conn.up`, chromedp.ByQuery), // the event stream carries the cookie
	)
	// With the token (the cookie), the same request goes through.
	b.eval(t, `fetch("/gate/v1/sessions/s1", {method: "PUT", headers: {"Content-Type": "application/json"}, body: JSON.stringify({switch: "off"})}).then(r => r.status)`, &status)
	if status != http.StatusOK {
		t.Fatalf("PUT /gate/v1/sessions/s1 with the token cookie: %d, want 200", status)
	}
	if errs := b.logs.take(); len(errs) != 0 {
		t.Fatalf("the console reported errors once logged in:\n%s", strings.Join(errs, "\n"))
	}
	if st, _ := e.do(context.Background(), http.MethodPut, "/gate/v1/sessions/s1", `{"switch":"on"}`, false); st != http.StatusUnauthorized {
		t.Fatalf("PUT without the token from Go: %d, want 401", st)
	}
}
