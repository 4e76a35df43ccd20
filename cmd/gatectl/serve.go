package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"sort"
	"syscall"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/server"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:     "serve",
		Category: catRun,
		Usage:    "run the gate: the OpenAI/Anthropic-compatible proxy, the decision API and /metrics",
		Description: "Without --config it runs on the embedded default: well-known providers with the client's\n" +
			"own key passed through, memory ledger, built-in rules, 127.0.0.1:7878. The config file, its\n" +
			"rule files and the plugins directory are watched and reloaded; SIGHUP forces a reload.",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "listen", Usage: "`ADDR` to listen on (overrides the config's listen; port 0 picks one)"},
			&cli.StringFlag{Name: "state-dir", Usage: "`DIR` for the state file and the wasm compilation cache (overrides the config's stateDir)"},
			&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "how long running requests may finish on shutdown"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				// The first signal starts the graceful shutdown; from then on a
				// second one has its default effect and ends the process now.
				<-ctx.Done()
				stop()
			}()
			err := runServe(ctx, serveParams{
				ConfigPath: c.String("config"), Listen: c.String("listen"), StateDir: c.String("state-dir"),
				Grace: c.Duration("grace"), Out: c.App.Writer, Log: c.App.ErrWriter, Reload: true,
			})
			if err != nil {
				return cli.Exit("serve: "+err.Error(), exitFailure)
			}
			return nil
		},
	}
}

// serveParams is what runServe needs: what `gatectl serve` reads from its flags,
// or what `gatectl demo` builds for its in-process server.
type serveParams struct {
	ConfigPath string        // "" = the embedded default
	Listen     string        // overrides the config's listen when set
	Listener   net.Listener  // when set, used as is (Listen is ignored)
	StateDir   string        // overrides the config's stateDir when set
	Grace      time.Duration // shutdown grace for running requests
	Out        io.Writer     // the "listening on" line
	Log        io.Writer     // the logger's output
	// Reload watches the config and reloads on SIGHUP (serve does; the demo's
	// config never changes).
	Reload bool
	// Ready, when set, is called with the address once the server accepts
	// connections.
	Ready func(addr net.Addr)
}

// runServe is `gatectl serve`: it builds the snapshot manager, the server and
// the listener, and serves until ctx is done. The demo runs the very same path.
func runServe(ctx context.Context, p serveParams) error {
	logger, err := loggerFor(p.ConfigPath, p.Log)
	if err != nil {
		return err
	}
	hook := pluginHook(logger, p.StateDir)
	defer hook.Close(context.Background())
	m, err := snapshot.NewManager(ctx, p.ConfigPath, snapshotOptions(logger, hook))
	if err != nil {
		return err
	}
	defer m.Close() // after the server is done with it, before the hook's host goes
	softMemoryLimit(m.Current().Config.Server.MaxBufferedBytes)
	for _, w := range unsetKeyWarnings(m.Current().Config, os.LookupEnv) {
		logger.Warn(w)
	}
	srv, err := server.New(server.Options{Manager: m, Logger: logger, StateDir: p.StateDir, ShutdownGrace: p.Grace, Plugins: hook})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln := p.Listener
	if ln == nil {
		addr := p.Listen
		if addr == "" {
			addr = m.Current().Config.Listen
		}
		if err := srv.CheckListen(addr); err != nil { // before anything is bound
			return err
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
	}
	if p.Reload {
		// The watcher is armed before the server says it listens: an edit made
		// right after that line is seen (before, one made while the watcher was
		// still starting was lost until the next edit).
		armed := make(chan struct{})
		go func() { _ = m.Watch(ctx, snapshot.WatchOptions{Ready: func() { close(armed) }}) }()
		select {
		case <-armed:
		case <-time.After(2 * time.Second): // never hold the server back for it
		}
	}
	if p.Out != nil {
		fmt.Fprintf(p.Out, "gatectl listening on http://%s\n", ln.Addr())
		fmt.Fprintf(p.Out, "console: http://%s/ui\n", ln.Addr())
	}
	if p.Reload {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					_ = m.Reload(ctx) // logged; the old configuration stays on failure
				}
			}
		}()
	}
	if p.Ready != nil {
		p.Ready(ln.Addr())
	}
	return srv.Serve(ctx, ln)
}

// unsetKeyWarnings names every provider whose apiKeyEnv names a variable that is
// unset or empty: the first request to it would fail with a 502, so `check` and
// `serve` say so up front. lookup is os.LookupEnv (a test passes its own).
func unsetKeyWarnings(cfg *config.Config, lookup func(string) (string, bool)) []string {
	names := make([]string, 0, len(cfg.Providers))
	for name := range cfg.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		env := cfg.Providers[name].APIKeyEnv
		if env == "" {
			continue
		}
		v, ok := lookup(env)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("provider %q: apiKeyEnv %s is not set in the environment; its requests will fail until it is (export %s=…)", name, env, env))
		case v == "":
			out = append(out, fmt.Sprintf("provider %q: apiKeyEnv %s is set but empty; its requests will fail until it holds the key", name, env))
		}
	}
	// ${NAME} in a provider's headers: unset, the header goes out with the
	// reference empty ("Bearer "), in place of the client's own key.
	for _, name := range names {
		hs := cfg.Providers[name].Headers
		keys := make([]string, 0, len(hs))
		for k := range hs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, m := range headerEnvRef.FindAllStringSubmatch(hs[k], -1) {
				if v, ok := lookup(m[1]); !ok || v == "" {
					out = append(out, fmt.Sprintf("provider %q: header %s names ${%s}, which is not set (or empty); it goes out without it", name, k, m[1]))
				}
			}
		}
	}
	return out
}

// headerEnvRef is a ${NAME} in a header's value.
var headerEnvRef = regexp.MustCompile(`\$\{([^}]+)\}`)

// loggerFor builds the root logger from the config's log section (before the
// snapshot exists, so that loading errors are logged the same way).
func loggerFor(path string, w io.Writer) (hclog.Logger, error) {
	level, format := "info", "text"
	if cfg, err := config.Load(path); err == nil {
		level, format = cfg.Log.Level, cfg.Log.Format
	}
	return hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.LevelFromString(level), JSONFormat: format == "json", Output: w}), nil
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Aliases: []string{"c"}, EnvVars: []string{"GATECTL_CONFIG"}, Usage: "config `FILE` (default: the embedded default)"}
}

// softMemoryLimit sets the Go runtime's soft memory limit to the body budget
// (server.maxBufferedBytes) plus 256 MiB for everything else, unless GOMEMLIMIT
// says otherwise. The budget bounds the bodies held at once; without a limit
// the collector lets the heap grow to twice what is live before it runs, so the
// buffers of bodies already answered would double the process's footprint.
func softMemoryLimit(maxBuffered int) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(int64(maxBuffered) + 256<<20)
}
