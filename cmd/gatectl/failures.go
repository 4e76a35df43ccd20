package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/server"
)

func failuresCommand() *cli.Command {
	return &cli.Command{
		Name:  "failures",
		Usage: "list the failures a running server could classify only by their status code",
		Description: "With --unclassified (the one list there is), asks a running server\n" +
			"(GET /gate/v1/failures/unclassified) for the last failures that fell through to a\n" +
			"catch-all: a built-in rule that decides from the status code alone (builtin/status-429,\n" +
			"builtin/status-5xx, ...) or no rule at all (UNKNOWN by chain/none). Keys are redacted and\n" +
			"bodies cut to 1 KiB. Turn what recurs into a rule file (rules/README.md) and check it\n" +
			"with `gatectl classify --explain`.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "unclassified", Usage: "the failures that only a catch-all rule classified"},
			addrFlag("server `URL`"),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			if err := flagsAfterArg(c); err != nil {
				return err
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("failures: --format must be text or json (got %q)", format), exitUsage)
			}
			if !c.Bool("unclassified") {
				return cli.Exit("failures: say which list: --unclassified (the failures only a catch-all rule classified)", exitUsage)
			}
			if c.Args().Len() > 0 {
				return cli.Exit(fmt.Sprintf("failures: takes no arguments (got %q)", c.Args().First()), exitUsage)
			}
			var out server.APIUnclassified
			if err := apiGet(c.Context, c.String("addr"), "/gate/v1/failures/unclassified", &out); err != nil {
				return cli.Exit("failures: "+err.Error(), exitFailure)
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return writeUnclassifiedText(c.App.Writer, out)
		},
	}
}

// writeUnclassifiedText prints one block a failure, newest first.
func writeUnclassifiedText(w io.Writer, l server.APIUnclassified) error {
	if len(l.Failures) == 0 {
		_, err := fmt.Fprintf(w, "no unclassified failures (of %d seen since the server started)\n", l.Total)
		return err
	}
	fmt.Fprintf(w, "%s kept (newest first; %d since the server started, the last %d are kept)\n",
		plural(len(l.Failures), "unclassified failure", "unclassified failures"), l.Total, l.Capacity)
	for _, f := range l.Failures {
		what := fmt.Sprintf("status %d", f.Status)
		if f.ErrorKind != "" {
			what = "transport " + f.ErrorKind
		}
		target := f.Provider
		if f.Model != "" {
			target += "/" + f.Model
		}
		fmt.Fprintf(w, "\n%s  %s  %s  %s by %s\n", f.Time.UTC().Format("2006-01-02T15:04:05Z"), target, what, f.Class, f.By)
		if len(f.Headers) > 0 {
			keys := make([]string, 0, len(f.Headers))
			for k := range f.Headers {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(w, "  %s: %s\n", k, f.Headers[k])
			}
		}
		body := strings.ReplaceAll(f.Excerpt, "\n", "\n  ")
		if f.Truncated {
			body += " …"
		}
		if _, err := fmt.Fprintf(w, "  %s\n", body); err != nil {
			return err
		}
	}
	return nil
}
