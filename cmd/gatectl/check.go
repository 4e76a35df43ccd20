package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/store/redisstore"
	"github.com/urfave/cli/v2"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "validate a config: decode it strictly, compile its rules, load its plugins, run every golden case",
		ArgsUsage: "[FILE]",
		Flags:     []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			path := c.String("config")
			// `gatectl check FILE` means FILE: checking the embedded default
			// instead, and saying ok, would pass a file nobody read.
			switch args := c.Args().Slice(); {
			case len(args) > 1:
				return cli.Exit(fmt.Sprintf("check: one config at a time (got %q)", args), exitUsage)
			case len(args) == 1:
				path = args[0] // over --config and GATECTL_CONFIG: the one named last
			}
			hook := pluginHook(nil, "")
			defer hook.Close(context.Background())
			s, err := snapshot.Load(c.Context, path, snapshotOptions(nil, hook))
			if err != nil {
				for _, line := range errorLines(err) {
					fmt.Fprintln(c.App.ErrWriter, line)
				}
				return cli.Exit("", exitFailure)
			}
			defer s.Close()
			name := path
			if name == "" {
				name = "(embedded default)"
			}
			for _, w := range s.Warnings {
				fmt.Fprintln(c.App.ErrWriter, "warning:", w)
			}
			for _, w := range unsetKeyWarnings(s.Config, os.LookupEnv) {
				fmt.Fprintln(c.App.ErrWriter, "warning:", w)
			}
			pools := 0
			if s.Pools != nil {
				pools = len(s.Pools.Names())
			}
			if ro := s.Config.Store.Redis; ro != nil {
				if err := checkRedis(c, *ro); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.App.Writer, "%s: ok — %s, %s (built-in rules last), %s, %s\n", name,
				plural(len(s.Config.Providers), "provider", "providers"), plural(len(s.Chain.Links()), "classifier", "classifiers"),
				plural(pools, "pool", "pools"), plural(len(s.Config.Balances), "balance source", "balance sources"))
			return nil
		},
	}
}

// checkRedis verifies the shared store's connection: an instance that cannot
// reach it would run degraded (or refuse calls) from its first request.
func checkRedis(c *cli.Context, o redisstore.Options) error {
	st, err := redisstore.Open(o, nil)
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "store.redis:", err)
		return cli.Exit("", exitFailure)
	}
	defer st.Close()
	rtt, err := st.Check(c.Context)
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "store.redis: %s: %v\n", st.Addr(), err)
		return cli.Exit("", exitFailure)
	}
	fmt.Fprintf(c.App.Writer, "store.redis: ok — %s answers in %s, scripts loaded (keyPrefix %q, onError %s)\n",
		st.Addr(), rtt.Round(time.Microsecond), st.Options().KeyPrefix, st.Options().OnError)
	return nil
}

// errorLines flattens joined errors and config.Errors into one problem a line.
func errorLines(err error) []string {
	var ce config.Errors
	if errors.As(err, &ce) {
		out := make([]string, 0, len(ce))
		for _, e := range ce {
			out = append(out, e.Error())
		}
		return out
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, errorLines(e)...)
		}
		return out
	}
	return strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
}
