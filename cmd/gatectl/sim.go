package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/gatectl/gatectl/sim"
	"github.com/urfave/cli/v2"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate sessions against a provider with a hidden quota: oracle, gate and naive retries on one trace",
		Description: "Drives the real admission engine on a virtual clock (two simulated hours take about a second).\n" +
			"Without --scenario it runs the built-in scenario: 32 sessions offering 1.5× a 200k TPM limit,\n" +
			"the gate configured at the truth. Scenario keys: seed, duration, window, sessions, demand,\n" +
			"provider {tpm, rpm, retryAfter}, gate {tpm, rpm, safetyFactor}, promptTokens {median, p99},\n" +
			"outputTokens {median, p99}.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", Usage: "YAML scenario `FILE` (keys override the built-in scenario)"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text | json"},
		},
		Action: func(c *cli.Context) error {
			s := sim.DefaultScenario()
			if f := c.String("scenario"); f != "" {
				data, err := os.ReadFile(f)
				if err != nil {
					return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
				}
				if s, err = sim.ParseScenario(data); err != nil {
					return cli.Exit(fmt.Sprintf("sim: %s: %v", f, err), exitFailure)
				}
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("sim: --format %q: want text or json", format), exitUsage)
			}
			r, err := sim.Run(s)
			if err != nil {
				return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			writeSimText(c.App.Writer, r)
			return nil
		},
	}
}

func writeSimText(w io.Writer, r sim.Report) {
	s := r.Scenario
	fmt.Fprintf(w, "scenario: %d sessions offering %.2f× the limit for %s (seed %d)\n", s.Sessions, s.Demand, time.Duration(s.Duration), s.Seed)
	fmt.Fprintf(w, "provider: %d TPM, %d RPM per %s window, Retry-After %s\n", s.Provider.TPM, s.Provider.RPM, time.Duration(s.Window), time.Duration(s.Provider.RetryAfter))
	fmt.Fprintf(w, "gate:     starts at %d TPM (%.2f× the truth), %d RPM, safety factor %.2f\n\n", s.Gate.TPM, float64(s.Gate.TPM)/float64(s.Provider.TPM), s.Gate.RPM, s.Gate.SafetyFactor)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tutilization\t429s\t429s/h\tlost\tcompleted\twait p50\twait p99\tfairness")
	for _, m := range sim.Modes {
		x := r.Modes[m]
		fmt.Fprintf(tw, "%s\t%.3f\t%d\t%.1f\t%d\t%d\t%s\t%s\t%.3f\n", m, x.Utilization, x.RateLimited, x.RateLimitedPerHour,
			x.Lost, x.Completed, time.Duration(x.WaitP50Ms)*time.Millisecond, time.Duration(x.WaitP99Ms)*time.Millisecond, x.Fairness)
	}
	tw.Flush()
	g, o := r.Modes[sim.ModeGate], r.Modes[sim.ModeOracle]
	if o.Utilization > 0 {
		fmt.Fprintf(w, "\ngate utilization: %.1f%% of the oracle's\n", 100*g.Utilization/o.Utilization)
	}
	if g.ConvergedAfterWindows != nil {
		fmt.Fprintf(w, "learned quota within ±5%% of the truth from window %d on; %d 429s since (%.2f/h); final quota %.0f, trigger %.0f\n",
			*g.ConvergedAfterWindows, *g.RateLimitedAfterConvergence, *g.RateLimitedPerHourAfterConvergence, g.FinalQuota, g.FinalTrigger)
	} else {
		fmt.Fprintf(w, "learned quota did not settle within ±5%% of the truth; final quota %.0f, trigger %.0f\n", g.FinalQuota, g.FinalTrigger)
	}
}
