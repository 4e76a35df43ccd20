package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
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
		Name:  "serve",
		Usage: "run the gate: the OpenAI/Anthropic-compatible proxy, the decision API and /metrics",
		Description: "Without --config it runs on the embedded default: well-known providers with the client's\n" +
			"own key passed through, memory ledger, built-in rules, 127.0.0.1:7878. The config file, its\n" +
			"rule files and the plugins directory are watched and reloaded; SIGHUP forces a reload.",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "listen", Usage: "`ADDR` to listen on (overrides the config's listen; port 0 picks one)"},
			&cli.StringFlag{Name: "state-dir", Usage: "`DIR` for the state file (overrides the config's stateDir)"},
			&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "how long running requests may finish on shutdown"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			path := c.String("config")
			logger, err := loggerFor(path, c.App.ErrWriter)
			if err != nil {
				return cli.Exit("serve: "+err.Error(), exitFailure)
			}
			hook := pluginHook(logger)
			defer hook.Close(context.Background())
			m, err := snapshot.NewManager(ctx, path, snapshotOptions(logger, hook))
			if err != nil {
				return cli.Exit(fmt.Sprintf("serve: %v", err), exitFailure)
			}
			defer m.Close() // after the server is done with it, before the hook's host goes
			srv, err := server.New(server.Options{Manager: m, Logger: logger, StateDir: c.String("state-dir"), ShutdownGrace: c.Duration("grace"), Plugins: hook})
			if err != nil {
				return cli.Exit(fmt.Sprintf("serve: %v", err), exitFailure)
			}
			defer srv.Close()
			addr := c.String("listen")
			if addr == "" {
				addr = m.Current().Config.Listen
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return cli.Exit(fmt.Sprintf("serve: listen %s: %v", addr, err), exitFailure)
			}
			fmt.Fprintf(c.App.Writer, "gatectl listening on http://%s\n", ln.Addr())
			fmt.Fprintf(c.App.Writer, "console: http://%s/ui\n", ln.Addr())
			go func() { _ = m.Watch(ctx, snapshot.WatchOptions{}) }()
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
			return srv.Serve(ctx, ln)
		},
	}
}

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
