package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/sim"
	"github.com/urfave/cli/v2"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate sessions against a provider with a hidden quota: oracle, gate and naive retries on one trace",
		Description: "Drives the real admission engine on a virtual clock (two simulated hours take about a second).\n" +
			"Without --scenario it runs the built-in scenario: 32 sessions offering 1.5× a 200k TPM limit on a\n" +
			"sliding window counted at arrival, 5–15 ms of network delay each way, 10% of calls sending max_tokens,\n" +
			"the gate configured at the truth. Scenario keys (docs/sim.md has them all): seed, duration, window,\n" +
			"sessions, demand, provider {model, tpm, rpm, retryAfter, computeRetryAfter, headers, namesLimit, statesLimit},\n" +
			"network {delay, jitter}, response {base, perOutputToken}, outside {share, pattern, callTokens, every, warm},\n" +
			"gate {start, tpm, rpm, safetyFactor, pace, paceBurst, marginSigmas, countsAt}, promptTokens {median, p99},\n" +
			"outputTokens {median, p99}, maxTokensShare, maxTokens.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", Usage: "YAML scenario `FILE` (keys override the built-in scenario)"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text | json"},
			&cli.BoolFlag{Name: "matrix", Usage: "run the gate for every provider model × {no latency, latency} × start {1, 2, 0.5} × outside {0, 10%} from the scenario, one row per run, against the issue's targets"},
			&cli.DurationFlag{Name: "duration", Usage: "simulated time per run, overriding the scenario's (--matrix: 1h unless given)"},
			&cli.BoolFlag{Name: "trace", Usage: "print each 429 and learner step of the gate run to stderr"},
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
			if c.Bool("trace") {
				s.Trace = c.App.ErrWriter
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("sim: --format %q: want text or json", format), exitUsage)
			}
			if c.IsSet("duration") {
				s.Duration = sim.Duration(c.Duration("duration"))
			} else if c.Bool("matrix") {
				s.Duration = sim.Duration(sim.MatrixDuration)
			}
			if c.Bool("matrix") {
				rows, err := sim.Matrix(s)
				if err != nil {
					return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
				}
				if format == "json" {
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(rows)
				}
				writeMatrixText(c.App.Writer, s, rows)
				return nil
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
	fmt.Fprintf(w, "scenario: %s offering %.2f× the limit for %s (seed %d)\n", plural(s.Sessions, "session", "sessions"), s.Demand, time.Duration(s.Duration), s.Seed)
	fmt.Fprintf(w, "provider: %s, %d TPM, %d RPM per %s window, Retry-After %s%s%s%s%s\n", s.Provider.Model, s.Provider.TPM, s.Provider.RPM,
		time.Duration(s.Window), time.Duration(s.Provider.RetryAfter), simIf(s.Provider.ComputeRetryAfter, " (or the real wait)"),
		simIf(s.Provider.Headers, ", rate-limit headers"), simIf(s.Provider.NamesLimit, ", 429s name the limit"), simIf(s.Provider.StatesLimit, ", 429s state the limits"))
	fmt.Fprintf(w, "network:  %s + up to %s each way; answers take %s + %s per output token\n", time.Duration(s.Network.Delay), time.Duration(s.Network.Jitter),
		time.Duration(s.Response.Base), time.Duration(s.Response.PerOutputToken))
	if s.MaxTokensShare > 0 {
		fmt.Fprintf(w, "calls:    %.0f%% send max_tokens %d\n", 100*s.MaxTokensShare, s.MaxTokens)
	}
	if s.Outside.Share > 0 {
		fmt.Fprintf(w, "outside:  another client spends %.0f%% of the true TPM (%s, %d-token calls)\n", 100*s.Outside.Share, s.Outside.Pattern, s.Outside.CallTokens)
	}
	fmt.Fprintf(w, "gate:     starts at %d TPM (%.2f× the truth), %d RPM, %s\n\n", s.StartTPM(), float64(s.StartTPM())/float64(s.Provider.TPM), s.StartRPM(), marginText(s.Gate))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "mode\tutilization")
	if s.Outside.Share > 0 {
		fmt.Fprint(tw, "\tof remaining")
	}
	fmt.Fprintln(tw, "\trequests\t429s\t(tok/req)\t429s/h\tlost\tcompleted\twait p50\twait p99\tfairness")
	for _, m := range sim.Modes {
		x, ok := r.Modes[m]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.3f", m, x.Utilization)
		if s.Outside.Share > 0 {
			fmt.Fprintf(tw, "\t%.3f", x.RemainingUtilization)
		}
		fmt.Fprintf(tw, "\t%.3f\t%d\t%d/%d\t%.1f\t%d\t%d\t%s\t%s\t%.3f\n", x.RequestUtilization, x.RateLimited, x.RateLimitedByTokens, x.RateLimitedByRequests, x.RateLimitedPerHour,
			x.Lost, x.Completed, time.Duration(x.WaitP50Ms)*time.Millisecond, time.Duration(x.WaitP99Ms)*time.Millisecond, x.Fairness)
	}
	tw.Flush()
	writeSimHowToRead(w, r)
	g, o := r.Modes[sim.ModeGate], r.Modes[sim.ModeOracle]
	if o.Utilization > 0 {
		fmt.Fprintf(w, "\ngate utilization: %.1f%% of the oracle's\n", 100*g.Utilization/o.Utilization)
	}
	if g.ConvergedAfterWindows != nil {
		fmt.Fprintf(w, "learned quota within ±5%% of the capacity left to the gate from window %d on; %d 429s since (%.2f/h); final quota %.0f, trigger %.0f\n",
			*g.ConvergedAfterWindows, *g.RateLimitedAfterConvergence, *g.RateLimitedPerHourAfterConvergence, g.FinalQuota, g.FinalTrigger)
	} else {
		fmt.Fprintf(w, "learned quota did not settle within ±5%% of the capacity left to the gate; final quota %.0f, trigger %.0f\n", g.FinalQuota, g.FinalTrigger)
	}
}

// writeSimHowToRead says what the columns mean and why the naive row can look
// better than the gate's: its figures count work the clients must redo.
func writeSimHowToRead(w io.Writer, r sim.Report) {
	fmt.Fprintln(w, "\nHow to read it: utilization is the share of the true limit the provider served; 429s, lost")
	fmt.Fprintln(w, "(calls that ran out of retries and failed) and the waits are what the clients felt. oracle is the")
	fmt.Fprintln(w, "gate told the true limit, gate learns it from 429s, naive is no gate: clients retry as the OpenAI SDK does.")
	n, ok := r.Modes[sim.ModeNaive]
	if !ok {
		return
	}
	fmt.Fprintf(w, "The naive row can look better (more served, no wait) because its clients hammer the provider:\n")
	fmt.Fprintf(w, "it took %d 429s and lost %d calls your program would have to redo. The gate's waits are its\n", n.RateLimited, n.Lost)
	g := r.Modes[sim.ModeGate]
	fmt.Fprintf(w, "queue: what it pays to see %d 429s and lose %d.\n", g.RateLimited, g.Lost)
}

func simIf(on bool, s string) string {
	if on {
		return s
	}
	return ""
}

// writeMatrixText prints one row per matrix run, then how many runs meet every
// target and how many miss each.
func writeMatrixText(w io.Writer, base sim.Scenario, rows []sim.MatrixRow) {
	fmt.Fprintf(w, "matrix: %s per run, %s window, %d TPM / %d RPM true limit, %s, %.0f%% max_tokens, headers %v, Retry-After %s\n",
		time.Duration(base.Duration), time.Duration(base.Window), base.Provider.TPM, base.Provider.RPM, marginText(base.Gate),
		100*base.MaxTokensShare, base.Provider.Headers, time.Duration(base.Provider.RetryAfter))
	fmt.Fprintln(w, "utilization is of the true TPM; remaining = the gate's share ÷ (true TPM − outside spend); oracle = the gate's admission with the truth known")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "model\tlatency\tstart\toutside\tsessions\tdemand\toracle\tutilization\tof remaining\t429s\t429s/h conv.\tconverged\tlost\tmisses")
	for _, r := range rows {
		perHour, conv := "-", "never"
		if r.ConvergedAfterWindows != nil {
			perHour, conv = fmt.Sprintf("%.1f", *r.RateLimitedPerHourAfterConvergence), fmt.Sprintf("%d", *r.ConvergedAfterWindows)
		}
		lat := "no"
		if r.Latency {
			lat = "yes"
		}
		misses := "-"
		if len(r.Misses) > 0 {
			misses = strings.Join(r.Misses, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.0f%%\t%d\t%.2f\t%.3f\t%.3f\t%.3f\t%d\t%s\t%s\t%d\t%s\n", r.Model, lat, r.Start, 100*r.Outside,
			r.Sessions, r.Demand, r.OracleUtilization, r.Utilization, r.RemainingUtilization, r.RateLimited, perHour, conv, r.Lost, misses)
	}
	tw.Flush()
	t := sim.Tally(rows)
	fmt.Fprintf(w, "\n%d of %d runs meet every target", t.Met, t.Runs)
	if len(t.Misses) > 0 {
		parts := make([]string, len(t.Misses))
		for i, m := range t.Misses {
			parts[i] = fmt.Sprintf("%s %d", m.Target, m.Runs)
		}
		fmt.Fprintf(w, "; runs missing each: %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// marginText names the gate's margin — a safety factor the scenario set, or
// the one the gate derives — and the admission settings the scenario changed.
func marginText(g sim.GateSpec) string {
	t := "margin derived by the gate"
	if g.SafetyFactor > 0 {
		t = fmt.Sprintf("safety factor %.2f", g.SafetyFactor)
	}
	if g.MarginSigmas != nil {
		t += fmt.Sprintf(", marginSigmas %g", *g.MarginSigmas)
	}
	if g.Pace != nil {
		t += fmt.Sprintf(", pace %g", *g.Pace)
		if *g.Pace == 0 {
			t += " (off)"
		}
	}
	if g.PaceBurst != nil {
		t += fmt.Sprintf(", paceBurst %g", *g.PaceBurst)
	}
	if g.CountsAt != "" && g.CountsAt != gate.CountsAtLearn {
		t += ", told the provider counts at " + g.CountsAt
	}
	return t
}
