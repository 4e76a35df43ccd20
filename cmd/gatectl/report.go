package main

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/report"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:  "report",
		Usage: "what the gate did: per model, the waits and their reasons, the budget range, learner steps, anomalies",
		Description: "Asks a running server (GET /gate/v1/report) what its gate did since it started, or in\n" +
			"the last --since DURATION: per model, how many calls waited, how long in total and at\n" +
			"most, for which reasons, the range of the effective token budget, the 429s, each step of\n" +
			"the learner, and the anomalies (over-budget admissions, fail-opens, leak warnings).\n" +
			"With --log FILE it reads a log written with `log: {format: json}` instead, offline;\n" +
			"--since then counts back from the last line of the file.",
		Flags: []cli.Flag{
			addrFlag("server `URL`"),
			&cli.DurationFlag{Name: "since", Usage: "only the last `DURATION` (e.g. 30m); default: since the start"},
			&cli.StringFlag{Name: "log", Usage: "read the gate's lines of a JSON log `FILE` instead of asking a server"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("report: --format must be text or json (got %q)", format), exitUsage)
			}
			if c.Args().Len() > 0 {
				return cli.Exit(fmt.Sprintf("report: takes no arguments (got %q)", c.Args().Slice()), exitUsage)
			}
			since := c.Duration("since")
			if c.IsSet("since") && since <= 0 {
				return cli.Exit(fmt.Sprintf("report: --since must be a positive duration (got %s)", since), exitUsage)
			}
			var rep report.Report
			if file := c.String("log"); file != "" {
				var err error
				if rep, err = reportFromLog(file, since, c.App.ErrWriter); err != nil {
					return cli.Exit("report: "+err.Error(), exitFailure)
				}
			} else {
				path := "/gate/v1/report"
				if since > 0 {
					path += "?since=" + url.QueryEscape(since.String())
				}
				if err := apiGet(c.Context, c.String("addr"), path, &rep); err != nil {
					return cli.Exit("report: "+err.Error(), exitFailure)
				}
			}
			if format == "json" {
				return writeJSONOut(c.App.Writer, rep)
			}
			return writeReportText(c.App.Writer, rep)
		},
	}
}

// reportFromLog builds the report from a JSON log file, counting back from its
// last gate line.
func reportFromLog(file string, since time.Duration, errw io.Writer) (report.Report, error) {
	f, err := os.Open(file)
	if err != nil {
		return report.Report{}, err
	}
	defer f.Close()
	b := report.New(time.Time{})
	read, skipped, err := report.ReadLog(b, f)
	if err != nil {
		return report.Report{}, fmt.Errorf("%s: %w", file, err)
	}
	if read == 0 {
		hint := ""
		if skipped > 0 {
			hint = fmt.Sprintf(" (%d lines are not JSON: is it written with `log: {format: json}`?)", skipped)
		}
		return report.Report{}, fmt.Errorf("%s: no gate events in the file%s", file, hint)
	}
	if skipped > 0 {
		fmt.Fprintf(errw, "report: skipped %d lines of %s that are not JSON (or over 1 MiB)\n", skipped, file)
	}
	return b.Report(b.Last(), since), nil
}

// writeReportText prints a table of the models, then each model's learner steps
// and anomalies.
func writeReportText(w io.Writer, r report.Report) error {
	fmt.Fprintf(w, "gate report %s → %s (%s, %d events)\n", r.From.Format(time.RFC3339), r.To.Format(time.RFC3339),
		r.To.Sub(r.From).Round(time.Second), r.Events)
	if len(r.Models) == 0 {
		_, err := fmt.Fprintln(w, "no call waited, no 429, no learner step, no anomaly")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tWAITED\tTOTAL WAIT\tMAX WAIT\tREASONS\tBUDGET\t429s\tOVER-BUDGET\tFAIL-OPEN\tLEAKS")
	for _, m := range r.Models {
		budget := "-"
		if m.Budget != nil {
			budget = fmt.Sprintf("%d–%d", m.Budget.Min, m.Budget.Max)
		}
		var reasons []string
		for _, k := range slices.Sorted(maps.Keys(m.Reasons)) {
			reasons = append(reasons, fmt.Sprintf("%s %d", k, m.Reasons[k]))
		}
		if len(reasons) == 0 {
			reasons = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", m.Model, m.Waited, ms(m.WaitTotalMs), ms(m.WaitMaxMs),
			strings.Join(reasons, ", "), budget, m.RateLimited, m.OverBudget, m.FailOpen, m.Leaks)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Models {
		if len(m.Steps) > 0 {
			fmt.Fprintf(w, "\nlearner steps of %s:\n", m.Model)
			for _, s := range m.Steps {
				line := fmt.Sprintf("  %s  %-8s %d → %d", s.At.Format(time.RFC3339), s.Step, s.From, s.To)
				if s.Trigger > 0 {
					line += fmt.Sprintf("  (trigger %d)", s.Trigger)
				}
				fmt.Fprintln(w, line)
			}
		}
		if len(m.Anomalies) > 0 {
			fmt.Fprintf(w, "\nanomalies of %s:\n", m.Model)
			for _, a := range m.Anomalies {
				line := fmt.Sprintf("  %s  %s", a.At.Format(time.RFC3339), a.Kind)
				switch a.Kind {
				case report.KindLeak:
					line += fmt.Sprintf(": a 429 at %d tokens below a clean window of %d (another client on the key?)", a.To, a.From)
				default:
					if a.Reason != "" {
						line += " (" + a.Reason + ")"
					}
					if a.WaitMs > 0 {
						line += " after " + ms(a.WaitMs)
					}
				}
				fmt.Fprintln(w, line)
			}
		}
	}
	return nil
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }
