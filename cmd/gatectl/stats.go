package main

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/server"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "the retry counters of a running server: lifetime and per session turn",
		Description: "Asks a running server (GET /gate/v1/stats) what its retry planner decided since it\n" +
			"started, and in each session's current turn: retries (and their planned waits), give-ups\n" +
			"on a spent budget, failures not retried, capacity failures without a wait hint, replays of\n" +
			"mislabeled 400s, failovers, long-term waits, retries by provider, and the last decision.",
		Flags: []cli.Flag{
			addrFlag("server `URL`"),
			&cli.StringFlag{Name: "session", Usage: "show only session `ID`'s turn"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("stats: --format must be text or json (got %q)", format), exitUsage)
			}
			if c.Args().Len() > 0 {
				return cli.Exit(fmt.Sprintf("stats: takes no arguments (got %q); --session ID picks a session", c.Args().Slice()), exitUsage)
			}
			path := "/gate/v1/stats"
			if c.IsSet("session") {
				path += "?session=" + url.QueryEscape(c.String("session"))
			}
			var st server.APIStats
			if err := apiGet(c.Context, c.String("addr"), path, &st); err != nil {
				return cli.Exit("stats: "+err.Error(), exitFailure)
			}
			if format == "json" {
				return writeJSONOut(c.App.Writer, st)
			}
			return writeStatsText(c.App.Writer, st)
		},
	}
}

// writeStatsText prints a table, lifetime first then each turn, then the
// retries by provider and the last decision.
func writeStatsText(w io.Writer, st server.APIStats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tTURN\tRETRIES\tWAITED\tGAVE UP\tNOT RETRIED\tNO HINT\tMISLABELED\tFAILOVERS\tLONG-TERM")
	row := func(scope, turn string, s retry.Stats) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", scope, turn, s.Retries+s.MislabeledRetries,
			s.Waited.Round(time.Millisecond), s.GaveUp, s.NotRetried, s.HintlessCapacity, s.MislabeledRetries, s.Failovers, s.LongTermWaits)
	}
	if st.Session == "" {
		row("lifetime", "-", st.Lifetime)
	}
	for _, t := range st.Turns {
		row(sessionLabel(t.Session), t.Turn, t.Stats)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Session != "" && st.Turn == nil {
		fmt.Fprintf(w, "session %s: no retry decision yet\n", st.Session)
		return nil // the lifetime's breakdown below is not the session's
	}
	if len(st.Turns) < st.TurnsTotal {
		fmt.Fprintf(w, "(%d of %d sessions shown)\n", len(st.Turns), st.TurnsTotal)
	}
	s := st.Lifetime
	if st.Turn != nil {
		s = st.Turn.Stats
	}
	if len(s.ByProvider) > 0 {
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(s.ByProvider)) {
			parts = append(parts, fmt.Sprintf("%s %d", p, s.ByProvider[p]))
		}
		fmt.Fprintf(w, "retries by provider: %s\n", strings.Join(parts, ", "))
	}
	if len(s.ByClass) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(s.ByClass)) {
			parts = append(parts, fmt.Sprintf("%s %d", c, s.ByClass[c]))
		}
		fmt.Fprintf(w, "retries by class: %s\n", strings.Join(parts, ", "))
	}
	if e := s.Last; e != nil {
		a := e.Action
		line := fmt.Sprintf("last: %s %s/%s %s: %s", e.At.Format(time.RFC3339), e.Provider, e.Model, sessionLabel(e.Session), a.Kind)
		if a.Delay > 0 {
			line += " in " + a.Delay.String()
		}
		if a.Rounds > 0 {
			line += fmt.Sprintf(" (%d/%d)", a.Round, a.Rounds)
		}
		fmt.Fprintf(w, "%s — %s\n", line, a.Reason)
	}
	return nil
}

// sessionLabel names a session for the table; calls without one share "".
func sessionLabel(s string) string {
	if s == "" {
		return "(no session)"
	}
	return "session " + s
}
