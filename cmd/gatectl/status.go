package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/server"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "each model's window, reservations, in-flight, learned quota, tightest trigger, cooldown",
		Description: "Asks a running server (GET /gate/v1/status) for every provider/model its gate has\n" +
			"seen: tokens in the sliding window against the budget, requests against the RPM budget,\n" +
			"reservations not settled yet, calls in flight and queued, the learned quota (and the\n" +
			"configured TPM it started from), the tightest window reading at a 429, and the\n" +
			"cooldown left.",
		Flags: []cli.Flag{
			addrFlag("server `URL`"),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("status: --format must be text or json (got %q)", format), exitUsage)
			}
			if c.Args().Len() > 0 {
				return cli.Exit(fmt.Sprintf("status: takes no arguments (got %q)", c.Args().Slice()), exitUsage)
			}
			var st server.APIStatus
			if err := apiGet(c.Context, c.String("addr"), "/gate/v1/status", &st); err != nil {
				return cli.Exit("status: "+err.Error(), exitFailure)
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return writeStatusText(c.App.Writer, st)
		},
	}
}

func writeStatusText(w io.Writer, st server.APIStatus) error {
	head := fmt.Sprintf("config version %d, window %s, max wait %s", st.ConfigVersion,
		time.Duration(st.WindowMs)*time.Millisecond, time.Duration(st.MaxWaitMs)*time.Millisecond)
	if st.OpenTickets > 0 {
		head += ", " + plural(st.OpenTickets, "open ticket", "open tickets")
	}
	fmt.Fprintln(w, head)
	if st.LastReloadError != "" {
		fmt.Fprintf(w, "last reload failed (the previous configuration runs): %s\n", st.LastReloadError)
	}
	if len(st.Models) == 0 {
		fmt.Fprintln(w, "no model has been called yet")
		return writeSharedText(w, st.Store)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tWINDOW\tREQUESTS\tRESERVED\tIN-FLIGHT\tWAITING\tQUOTA\tTRIGGER\tCOOLDOWN\t429s")
	for _, m := range st.Models {
		fmt.Fprintln(tw, strings.Join([]string{
			m.Provider + "/" + m.Model,
			windowText(m),
			requestsText(m),
			strconv.FormatInt(m.Reserved, 10),
			strconv.Itoa(m.InFlight),
			strconv.Itoa(m.Waiting),
			quotaText(m),
			triggerText(m),
			cooldownText(m),
			strconv.FormatInt(m.RateLimited, 10),
		}, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeOutputText(w, st.Models); err != nil {
		return err
	}
	return writeSharedText(w, st.Store)
}

// writeOutputText shows the output axis of the models that have one (a limit
// on output tokens alone: otpm, stated, or learned from a 429 about it).
func writeOutputText(w io.Writer, models []gate.BucketStatus) error {
	var tw *tabwriter.Writer
	for _, m := range models {
		if m.OutputLimit <= 0 {
			continue
		}
		if tw == nil {
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "\nMODEL\tOUTPUT WINDOW\tOUTPUT LIMIT")
		}
		lim := strconv.FormatFloat(m.OutputLimit, 'f', 0, 64)
		switch {
		case m.OutputTrigger > 0 && m.OutputTrigger <= m.OutputLimit:
			lim += " (learned from a 429)"
		case m.OutputStated > 0:
			lim += " (stated)"
		}
		out := strconv.FormatInt(m.OutputWindow, 10)
		if m.OutputBudget > 0 {
			out = fmt.Sprintf("%d/%d (%d%%)", m.OutputWindow, m.OutputBudget, 100*m.OutputWindow/m.OutputBudget)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\n", m.Provider, m.Model, out, lim)
	}
	if tw == nil {
		return nil
	}
	return tw.Flush()
}

// writeSharedText shows the shared store: its health and what all instances
// together hold of each model.
func writeSharedText(w io.Writer, s *server.APIStore) error {
	if s == nil {
		return nil
	}
	fmt.Fprintf(w, "\nshared store: %s %s (keyPrefix %q, onError %s, %d failed calls)\n", s.Kind, s.State, s.KeyPrefix, s.OnError, s.Errors)
	if len(s.Shared) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL (ALL INSTANCES)\tWINDOW\tREQUESTS\tCOOLDOWN UNTIL")
	for _, m := range s.Shared {
		cd := "-"
		if !m.CooldownUntil.IsZero() && m.CooldownUntil.After(time.Now()) {
			cd = m.CooldownUntil.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%s\n", m.Provider, m.Model, m.WindowTokens, m.Requests, cd)
	}
	return tw.Flush()
}

// windowText is tokens in the window against the token budget, with the share.
func windowText(m gate.BucketStatus) string {
	if m.TokenBudget <= 0 {
		return strconv.FormatInt(m.WindowTokens, 10)
	}
	return fmt.Sprintf("%d/%d (%d%%)", m.WindowTokens, m.TokenBudget, 100*m.WindowTokens/m.TokenBudget)
}

// quotaText is the learned quota, and where it started when learning moved it:
// the configured TPM, or the limit the provider stated (headers, a 429's words);
// and what other clients on the key spend when it holds the budget down.
func quotaText(m gate.BucketStatus) string {
	q := strconv.FormatFloat(m.Quota, 'f', 0, 64)
	switch {
	case m.Stated > 0 && m.Quota != m.Stated:
		q += " (stated " + strconv.FormatFloat(m.Stated, 'f', 0, 64) + ")"
	case m.Stated > 0:
		q += " (stated)"
	case m.Start > 0 && m.Quota != m.Start:
		q += " (from " + strconv.FormatFloat(m.Start, 'f', 0, 64) + ")"
	}
	if m.MaxTPM > 0 {
		q += " (cap " + strconv.Itoa(m.MaxTPM) + ")"
	}
	if m.OthersSpend > 0 {
		q += " (others spend " + strconv.FormatInt(m.OthersSpend, 10) + ")"
	}
	return q
}

// requestsText is the window's requests over the request budget, and the cap
// when the config sets one.
func requestsText(m gate.BucketStatus) string {
	r := fmt.Sprintf("%d/%d", m.WindowRequests, m.RPMBudget)
	if m.MaxRPM > 0 {
		r += " (cap " + strconv.Itoa(m.MaxRPM) + ")"
	}
	return r
}

func triggerText(m gate.BucketStatus) string {
	if m.Trigger <= 0 {
		return "-"
	}
	return strconv.FormatFloat(m.Trigger, 'f', 0, 64)
}

func cooldownText(m gate.BucketStatus) string {
	if m.CooldownMs <= 0 {
		return "-"
	}
	return (time.Duration(m.CooldownMs) * time.Millisecond).Round(100 * time.Millisecond).String()
}
