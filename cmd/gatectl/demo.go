package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/server"
	"github.com/urfave/cli/v2"
)

// demoSetup is everything one `gatectl demo` run is made of. The flags set
// Sessions and Phase; the rest is the demo's fixed scene.
type demoSetup struct {
	Sessions int           // concurrent sessions, each sending calls back to back
	Phase    time.Duration // how long sessions start calls, per phase
	Drain    time.Duration // how long calls still open after Phase may finish

	Limit      int64         // the provider's hidden limit: tokens per Window
	Window     time.Duration // its sliding window (and the gate's)
	RetryAfter time.Duration // what its 429s tell the client to wait
	StartTPM   int64         // where the gate's learning starts: tokens per Window

	PromptTokens int // about this many prompt tokens a call
	MaxTokens    int // the max_tokens every call sets

	// SDKRetries is how often a client retries a 429 on its own, as the OpenAI
	// SDKs do (max_retries 2), honouring Retry-After and x-should-retry.
	SDKRetries int
}

func defaultDemoSetup() demoSetup {
	return demoSetup{
		Sessions: 24, Phase: 15 * time.Second, Drain: 5 * time.Second,
		Limit: 20_000, Window: 5 * time.Second, RetryAfter: time.Second, StartTPM: 60_000,
		PromptTokens: 600, MaxTokens: 300, SDKRetries: 2,
	}
}

func demoCommand() *cli.Command {
	def := defaultDemoSetup()
	return &cli.Command{
		Name:  "demo",
		Usage: "see the gate work in under a minute: no keys, no network",
		Description: "Starts, in this process and on 127.0.0.1 only, a fake OpenAI-compatible provider with a\n" +
			"hidden limit (20,000 tokens per 5 s, never told to gatectl) and the real `gatectl serve` in\n" +
			"front of it. Then a burst of concurrent sessions calls the provider straight (each retrying\n" +
			"429s as the OpenAI SDK does), and the same burst again through the gate. It prints what\n" +
			"happens every second and a verdict side by side.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "sessions", Value: def.Sessions, Usage: "concurrent `N` sessions, each sending calls back to back"},
			&cli.DurationFlag{Name: "duration", Value: def.Phase, Usage: "how long each phase (direct, then through the gate) sends calls"},
		},
		Action: func(c *cli.Context) error {
			setup := def
			setup.Sessions, setup.Phase = c.Int("sessions"), c.Duration("duration")
			if setup.Sessions < 1 || setup.Sessions > 1000 {
				return cli.Exit(fmt.Sprintf("demo: --sessions %d: want 1 to 1000", setup.Sessions), exitUsage)
			}
			if setup.Phase < time.Second || setup.Phase > 10*time.Minute {
				return cli.Exit(fmt.Sprintf("demo: --duration %s: want 1s to 10m", setup.Phase), exitUsage)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if _, err := runDemo(ctx, setup, c.App.Writer, c.App.ErrWriter); err != nil {
				if ctx.Err() != nil && c.Context.Err() == nil { // Ctrl-C: stopped, not failed
					fmt.Fprintln(c.App.ErrWriter, "\ndemo: interrupted")
					return cli.Exit("", exitFailure)
				}
				return cli.Exit("demo: "+err.Error(), exitFailure)
			}
			return nil
		},
	}
}

// demoPhase is what one phase measured, from the clients' side and the
// provider's.
type demoPhase struct {
	Name        string
	Calls       int64 // calls the sessions started
	OK          int64 // answered 200 in the end
	Failed      int64 // answered an error in the end (after the client's own retries)
	Cut         int64 // still open when the drain ran out
	Client429   int64 // 429 answers the clients saw, retries included
	Provider429 int64 // 429s the provider answered (to the clients or to gatectl)
	Tokens      int64 // tokens the provider served
	Elapsed     time.Duration
	P50, P95    time.Duration // time to a 200, the client's own retries included
	Quota       float64       // the gate's learned quota at the end (0 for direct)
	Budget      int64         // the gate's token budget at the end
}

// TokensPerSec is the provider's served rate over the phase.
func (p demoPhase) TokensPerSec() float64 { return float64(p.Tokens) / p.Elapsed.Seconds() }

// demoResult is both phases.
type demoResult struct {
	Setup  demoSetup
	Direct demoPhase
	Gate   demoPhase
}

// LimitPerSec is the hidden limit as a rate.
func (s demoSetup) LimitPerSec() float64 { return float64(s.Limit) / s.Window.Seconds() }

// runDemo runs both phases and prints as it goes to out; the gate's own log
// (warnings and errors only) goes to logw.
func runDemo(ctx context.Context, s demoSetup, out, logw io.Writer) (demoResult, error) {
	res := demoResult{Setup: s}
	fmt.Fprintf(out, "gatectl demo: a fake provider on 127.0.0.1 with a hidden limit of %d tokens per %s (%.0f tokens/s),\n", s.Limit, s.Window, s.LimitPerSec())
	fmt.Fprintf(out, "%d sessions sending calls of about %d tokens back to back for %s, each client retrying a 429\n", s.Sessions, s.PromptTokens+140, s.Phase)
	fmt.Fprintf(out, "up to %d times after its Retry-After, as the OpenAI SDK does. Nothing leaves this machine.\n\n", s.SDKRetries)

	// Phase 1: straight at the provider.
	direct, err := startDemoProvider(s)
	if err != nil {
		return res, err
	}
	defer direct.close()
	fmt.Fprintf(out, "1. straight to the provider (%s)\n", direct.url)
	res.Direct = runDemoPhase(ctx, s, "direct", direct, direct.url+"/v1/chat/completions", "gpt-4o-mini", "", out)
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Phase 2: the same burst through `gatectl serve`, in front of a fresh
	// provider with the same hidden limit.
	prov, err := startDemoProvider(s)
	if err != nil {
		return res, err
	}
	defer prov.close()
	gateURL, stopGate, err := startDemoGate(ctx, s, prov.url, logw)
	if err != nil {
		return res, err
	}
	defer stopGate()
	fmt.Fprintf(out, "\n2. through gatectl (%s), which starts believing the limit is %d tokens per %s and learns\n", gateURL, s.StartTPM, s.Window)
	res.Gate = runDemoPhase(ctx, s, "gatectl", prov, gateURL+"/v1/chat/completions", "demo/gpt-4o-mini", gateURL, out)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	printDemoVerdict(out, res)
	return res, nil
}

// demoProvider is a fake provider on its own loopback listener.
type demoProvider struct {
	p   *fakeprovider.Provider
	srv *http.Server
	url string
}

func startDemoProvider(s demoSetup) (*demoProvider, error) {
	p := fakeprovider.New(fakeprovider.Config{
		Tokens: s.Limit, Window: s.Window, RetryAfter: s.RetryAfter,
		Latency: 150 * time.Millisecond, Jitter: 100 * time.Millisecond, PerOutputToken: time.Millisecond,
		OutputMedian: 130, OutputSigma: 0.35, Seed: 1,
		// The limit stays hidden: the 429s name the axis but no figure (a figure
		// in their words would tell the gate the limit, and the demo shows it
		// learning one).
		Unstated: true,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake provider: %w", err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &demoProvider{p: p, srv: srv, url: "http://" + ln.Addr().String()}, nil
}

func (d *demoProvider) close() { _ = d.srv.Close() }

// startDemoGate runs `gatectl serve` (runServe, the command's own path) on a
// config file naming the fake provider, with a fresh state directory. stop
// shuts it down and waits for it.
func startDemoGate(ctx context.Context, s demoSetup, providerURL string, logw io.Writer) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "gatectl-demo-")
	if err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf(`# gatectl demo: one provider, the fake one; its limit is not written here.
stateDir: %q
log: {level: warn}
providers:
  demo: {kind: openai, baseURL: %q}
gate:
  window: %s
  defaults: {tpm: %d, rpm: 100000}
`, filepath.Join(dir, "state"), providerURL+"/v1", s.Window, s.StartTPM)
	path := filepath.Join(dir, "gatectl.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- runServe(sctx, serveParams{ConfigPath: path, Listener: ln, Grace: time.Second, Log: logw,
			Ready: func(net.Addr) { close(ready) }})
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		os.RemoveAll(dir)
	}
	select {
	case <-ready:
		return "http://" + ln.Addr().String(), stop, nil
	case err := <-done:
		stop()
		if err == nil {
			err = errors.New("the server stopped before it started")
		}
		return "", nil, fmt.Errorf("gatectl serve: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("gatectl serve did not start within 30s")
	}
}

// demoLoad is the running tally of a phase, shared by its sessions.
type demoLoad struct {
	mu                     sync.Mutex
	calls, ok, failed, cut int64
	client429              int64
	inFlight               int64
	lat                    []time.Duration
}

// runDemoPhase sends the burst to url and prints a line a second. gateURL is
// where to read the gate's status ("" for the direct phase).
func runDemoPhase(ctx context.Context, s demoSetup, name string, prov *demoProvider, url, model, gateURL string, out io.Writer) demoPhase {
	start := time.Now()
	prov.p.SetEpoch(start)
	stopAt := start.Add(s.Phase)
	lctx, cancel := context.WithDeadline(ctx, stopAt.Add(s.Drain))
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: s.Sessions}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	load := &demoLoad{}
	var wg sync.WaitGroup
	for i := range s.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			session := fmt.Sprintf("s%02d", i)
			// A bound far above what the phase allows: one call per 10 ms.
			for n := 0; n < int(s.Phase/(10*time.Millisecond)) && time.Now().Before(stopAt); n++ {
				if !demoSessionCall(lctx, client, load, s, url, model, session, n, rng) {
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-finished:
			break loop
		case now := <-tick.C:
			st := prov.p.Stats()
			// The provider's own window, the figure it refuses against: a rate
			// over the last seconds read above the limit whenever the span
			// caught two bursts (6,586 tokens/s "over 5s" of a 4,000 limit).
			held := prov.p.WindowTokens(time.Now())
			load.mu.Lock()
			line := fmt.Sprintf("  %3.0fs %-8s ok %4d  failed %3d  429s seen by clients %4d  at the provider %4d  open %3d  window %6d of %d",
				now.Sub(start).Seconds(), name, load.ok, load.failed, load.client429, st.Refused, load.inFlight, held, s.Limit)
			load.mu.Unlock()
			if gateURL != "" {
				if b, ok := demoGateStatus(ctx, gateURL); ok {
					line += fmt.Sprintf("  held %3d  learned %6.0f → budget %d", b.Waiting, b.Quota, b.TokenBudget)
				}
			}
			fmt.Fprintln(out, line)
		}
	}
	elapsed := time.Since(start)
	st := prov.p.Stats()
	load.mu.Lock()
	defer load.mu.Unlock()
	ph := demoPhase{Name: name, Calls: load.calls, OK: load.ok, Failed: load.failed, Cut: load.cut,
		Client429: load.client429, Provider429: st.Refused, Tokens: st.Tokens, Elapsed: elapsed}
	ph.P50, ph.P95 = percentile(load.lat, 0.50), percentile(load.lat, 0.95)
	if gateURL != "" {
		if b, ok := demoGateStatus(ctx, gateURL); ok {
			ph.Quota, ph.Budget = b.Quota, b.TokenBudget
		}
	}
	return ph
}

// demoSessionCall is one call as an SDK makes it: sent, and on a 429 (or a
// 5xx) retried up to SDKRetries times after the Retry-After the answer states,
// unless the answer says x-should-retry: false. It reports false when the phase
// is over (the call was cut).
func demoSessionCall(ctx context.Context, client *http.Client, load *demoLoad, s demoSetup, url, model, session string, n int, rng *rand.Rand) bool {
	// A prompt of PromptTokens ± 20%, at the fake's 4 bytes a token.
	words := (s.PromptTokens*4/5)*4/5 + rng.IntN(s.PromptTokens*4/5*2/5+1)
	body, _ := json.Marshal(map[string]any{
		"model":      model,
		"max_tokens": s.MaxTokens,
		"messages":   []any{map[string]string{"role": "user", "content": fmt.Sprintf("call %d of %s: ", n, session) + strings.Repeat("word ", words)}},
	})
	load.mu.Lock()
	load.calls++
	load.inFlight++
	load.mu.Unlock()
	defer func() {
		load.mu.Lock()
		load.inFlight--
		load.mu.Unlock()
	}()
	t0 := time.Now()
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer demo-key-not-a-secret")
		req.Header.Set("X-Gate-Session", session)
		resp, err := client.Do(req)
		if err != nil {
			load.mu.Lock()
			if ctx.Err() != nil {
				load.cut++
			} else {
				load.failed++
			}
			load.mu.Unlock()
			return ctx.Err() == nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			load.mu.Lock()
			load.ok++
			load.lat = append(load.lat, time.Since(t0))
			load.mu.Unlock()
			return true
		}
		load.mu.Lock()
		if resp.StatusCode == http.StatusTooManyRequests {
			load.client429++
		}
		load.mu.Unlock()
		retryable := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		if attempt >= s.SDKRetries || !retryable || resp.Header.Get("X-Should-Retry") == "false" {
			load.mu.Lock()
			load.failed++
			load.mu.Unlock()
			return true
		}
		wait := 500 * time.Millisecond << attempt // the SDK's backoff without a hint
		if secs, err := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64); err == nil && secs >= 0 && secs <= 60 {
			wait = time.Duration(secs * float64(time.Second))
		}
		select {
		case <-ctx.Done():
			load.mu.Lock()
			load.cut++
			load.mu.Unlock()
			return false
		case <-time.After(wait):
		}
	}
}

// demoGateStatus reads the demo model's ledger from the gate's status API.
func demoGateStatus(ctx context.Context, gateURL string) (b struct {
	Waiting     int
	Quota       float64
	Trigger     float64
	TokenBudget int64
}, ok bool) {
	var st server.APIStatus
	if err := apiGet(ctx, gateURL, "/gate/v1/status", &st); err != nil {
		return b, false
	}
	for _, m := range st.Models {
		if m.Provider == "demo" {
			b.Waiting, b.Quota, b.Trigger, b.TokenBudget = m.Waiting, m.Quota, m.Trigger, m.TokenBudget
			return b, true
		}
	}
	return b, false
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// printDemoVerdict prints the two phases side by side, and what they mean.
func printDemoVerdict(out io.Writer, r demoResult) {
	d, g, s := r.Direct, r.Gate, r.Setup
	row := func(label, a, b string) { fmt.Fprintf(out, "  %-34s %-18s %s\n", label, a, b) }
	util := func(p demoPhase) string {
		return fmt.Sprintf("%.0f (%.0f%%)", p.TokensPerSec(), 100*p.TokensPerSec()/s.LimitPerSec())
	}
	fmt.Fprintf(out, "\nverdict (%s, %s each; the hidden limit is %.0f tokens/s)\n", plural(s.Sessions, "session", "sessions"), s.Phase, s.LimitPerSec())
	row("", "direct", "through gatectl")
	row("calls answered 200", strconv.FormatInt(d.OK, 10), strconv.FormatInt(g.OK, 10))
	row("calls that failed in the end", strconv.FormatInt(d.Failed, 10), strconv.FormatInt(g.Failed, 10))
	if d.Cut+g.Cut > 0 {
		row("calls cut at the end of the phase", strconv.FormatInt(d.Cut, 10), strconv.FormatInt(g.Cut, 10))
	}
	row("429s seen by clients", strconv.FormatInt(d.Client429, 10), strconv.FormatInt(g.Client429, 10))
	row("429s the provider answered", strconv.FormatInt(d.Provider429, 10), strconv.FormatInt(g.Provider429, 10))
	row("tokens/s served (of the limit)", util(d), util(g))
	row("latency to a 200, p50 / p95", fmt.Sprintf("%s / %s", d.P50.Round(10*time.Millisecond), d.P95.Round(10*time.Millisecond)),
		fmt.Sprintf("%s / %s", g.P50.Round(10*time.Millisecond), g.P95.Round(10*time.Millisecond)))
	row("limit gatectl learned (per "+s.Window.String()+")", "-", fmt.Sprintf("%.0f (hidden: %d)", g.Quota, s.Limit))
	fmt.Fprintln(out)
	if d.Provider429 == 0 {
		// Nothing was refused: there was no limit to meet, and nothing for the
		// gate to learn. Say so instead of telling the usual story.
		fmt.Fprintln(out, "The load never reached the hidden limit: the provider refused nothing, so there was nothing")
		fmt.Fprintln(out, "for the gate to learn. Run it with more sessions (--sessions, the default is 24).")
		return
	}
	fmt.Fprintf(out, "Straight at the provider, the clients saw %d 429s and %d calls failed: each session retried\n", d.Client429, d.Failed)
	fmt.Fprintln(out, "on its own after the Retry-After, most retries landed on a window that was still full and were")
	fmt.Fprintln(out, "refused again, and a call out of retries is an error in your program. Through gatectl the same")
	fmt.Fprintf(out, "sessions saw %d 429s: the gate learned the limit from the provider's first 429s (%d in all),\n", g.Client429, g.Provider429)
	fmt.Fprintln(out, "held each call that would not fit and sent it when it did. A held call waits in gatectl instead")
	fmt.Fprintln(out, "of failing, so its latency is the queue's (the direct p50 counts only the calls that got through).")
	fmt.Fprintf(out, "The rate is tokens served ÷ the phase's %s (its last calls included); the window lets a\n", g.Elapsed.Round(time.Second))
	fmt.Fprintln(out, "whole limit through at the start, so a phase that keeps it full reads above 100%.")
}
