package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
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
			"sessions, demand, provider {model, tpm, rpm, otpm, retryAfter, computeRetryAfter, headers, headersAt, namesLimit, statesLimit, decides},\n" +
			"network {delay, jitter}, response {base, perOutputToken}, outside {share, pattern, callTokens, every, warm, until},\n" +
			"gate {start, tpm, rpm, otpm, safetyFactor, pace, paceBurst, marginSigmas, countsAt, decides, windows}, promptTokens {median, p99},\n" +
			"outputTokens {median, p99}, maxTokensShare, maxTokens.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", Usage: "YAML scenario `FILE` (keys override the built-in scenario)"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text | json"},
			&cli.BoolFlag{Name: "matrix", Usage: "run the gate for every provider model × {no latency, latency} × start {1, 2, 0.5} × outside {0, 10%} from the scenario, one row per run, against the issue's targets"},
			&cli.DurationFlag{Name: "duration", Usage: "simulated time per run, overriding the scenario's (--matrix: 1h unless given)"},
			&cli.BoolFlag{Name: "trace", Usage: "print each 429, learner step and fail-open grant of the gate run to stderr"},
			&cli.StringFlag{Name: "seeds", Usage: "with --matrix: run it for each seed of `LIST` (1-6,9) and print the runs meeting every target, the 429s and the misses of each target, summed"},
			&cli.BoolFlag{Name: "nudges", Usage: "with --matrix: also run it with pace and paceBurst nudged by 1/70 (1.43%) or less, which no target depends on; the spread is the matrix's noise (docs/sim.md)"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("sim: takes no arguments (got %q); --scenario FILE names a scenario", c.Args().Slice()), exitUsage)
			}
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
			if (c.IsSet("seeds") || c.Bool("nudges")) && !c.Bool("matrix") {
				return cli.Exit("sim: --seeds and --nudges go with --matrix", exitUsage)
			}
			if c.Bool("matrix") && (c.IsSet("seeds") || c.Bool("nudges")) {
				seeds := []uint64{s.Seed}
				if c.IsSet("seeds") {
					var err error
					if seeds, err = parseSeeds(c.String("seeds")); err != nil {
						return cli.Exit(fmt.Sprintf("sim: --seeds: %v", err), exitUsage)
					}
				}
				nudges := sim.Nudges[:1:1] // a slice of its own: appending must not write into sim.Nudges
				if c.Bool("nudges") {
					nudges = sim.Nudges
				}
				rows, err := sim.Sweep(s, seeds, nudges)
				if err != nil {
					return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
				}
				if format == "json" {
					return writeJSONOut(c.App.Writer, rows)
				}
				writeSweepText(c.App.Writer, s, seeds, nudges, rows)
				return nil
			}
			if c.Bool("matrix") {
				rows, err := sim.Matrix(s)
				if err != nil {
					return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
				}
				if format == "json" {
					return writeJSONOut(c.App.Writer, rows)
				}
				writeMatrixText(c.App.Writer, s, rows)
				return nil
			}
			r, err := sim.Run(s)
			if err != nil {
				return cli.Exit(fmt.Sprintf("sim: %v", err), exitFailure)
			}
			if format == "json" {
				return writeJSONOut(c.App.Writer, r)
			}
			writeSimText(c.App.Writer, r)
			return nil
		},
	}
}

func writeSimText(w io.Writer, r sim.Report) {
	s := r.Scenario
	fmt.Fprintf(w, "scenario: %s offering %.2f× the limit for %s (seed %d)\n", plural(s.Sessions, "session", "sessions"), s.Demand, time.Duration(s.Duration), s.Seed)
	otpm := ""
	if s.Provider.OTPM > 0 {
		otpm = fmt.Sprintf(", %d OTPM", s.Provider.OTPM)
	}
	fmt.Fprintf(w, "provider: %s, %d TPM, %d RPM%s per %s window, Retry-After %s%s%s%s%s%s\n", s.Provider.Model, s.Provider.TPM, s.Provider.RPM,
		otpm, time.Duration(s.Window), time.Duration(s.Provider.RetryAfter), simIf(s.Provider.ComputeRetryAfter, " (or the real wait)"),
		simIf(s.Provider.Headers, ", rate-limit headers"), simIf(s.Provider.NamesLimit, ", 429s name the limit"), simIf(s.Provider.StatesLimit, ", 429s state the limits"),
		simIf(s.Provider.Decides == sim.DecidesKnown, ", decides on input + max_tokens"))
	fmt.Fprintf(w, "network:  %s + up to %s each way; answers take %s + %s per output token\n", time.Duration(s.Network.Delay), time.Duration(s.Network.Jitter),
		time.Duration(s.Response.Base), time.Duration(s.Response.PerOutputToken))
	if s.MaxTokensShare > 0 {
		fmt.Fprintf(w, "calls:    %.0f%% send max_tokens %d\n", 100*s.MaxTokensShare, s.MaxTokens)
	}
	if s.Outside.Share > 0 {
		until := ""
		if u := time.Duration(s.Outside.Until); u > 0 {
			until = fmt.Sprintf(", until %s", u)
		}
		fmt.Fprintf(w, "outside:  another client spends %.0f%% of the true TPM (%s, %d-token calls%s)\n", 100*s.Outside.Share, s.Outside.Pattern, s.Outside.CallTokens, until)
	}
	fmt.Fprintf(w, "gate:     starts at %d TPM (%.2f× the truth), %d RPM, %s\n\n", s.StartTPM(), float64(s.StartTPM())/float64(s.Provider.TPM), s.StartRPM(), marginText(s.Gate))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "mode\tutilization")
	after := s.Outside.Share > 0 && s.Outside.Until > 0 && s.Outside.Until < s.Duration
	output := s.Provider.OTPM > 0
	if output {
		fmt.Fprint(tw, "\toutput")
	}
	if s.Outside.Share > 0 {
		fmt.Fprint(tw, "\tof remaining")
	}
	if after {
		fmt.Fprint(tw, "\tafter it stopped")
	}
	fmt.Fprintf(tw, "\trequests\t429s\t(tok/req%s)\t429s/h\tlost\tcompleted\twait p50\twait p99\tfairness\n", simIf(output, "/out"))
	for _, m := range sim.Modes {
		x, ok := r.Modes[m]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.3f", m, x.Utilization)
		if output {
			fmt.Fprintf(tw, "\t%.3f", x.OutputUtilization)
		}
		if s.Outside.Share > 0 {
			fmt.Fprintf(tw, "\t%.3f", x.RemainingUtilization)
		}
		if after {
			fmt.Fprintf(tw, "\t%.3f", x.AfterOutside)
		}
		split := fmt.Sprintf("%d/%d", x.RateLimitedByTokens, x.RateLimitedByRequests)
		if output {
			split += fmt.Sprintf("/%d", x.RateLimitedByOutput)
		}
		fmt.Fprintf(tw, "\t%.3f\t%d\t%s\t%.1f\t%d\t%d\t%s\t%s\t%.3f\n", x.RequestUtilization, x.RateLimited, split, x.RateLimitedPerHour,
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
	fmt.Fprintf(w, "it took %s and lost %d calls your program would have to redo. The gate's waits are its\n", count429s(n.RateLimited), n.Lost)
	g := r.Modes[sim.ModeGate]
	fmt.Fprintf(w, "queue: what it pays to see %s and lose %d.\n", count429s(g.RateLimited), g.Lost)
}

// count429s says n 429s in words: "1 429", "3 429s".
func count429s(n int) string {
	if n == 1 {
		return "1 429"
	}
	return fmt.Sprintf("%d 429s", n)
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
	fmt.Fprintln(tw, "model\tlatency\tstart\toutside\tsessions\tdemand\toracle\tutilization\tof remaining\t429s\t429s/h conv.\tconverged\tlost\tmisses\toracle misses")
	for _, r := range rows {
		perHour, conv := "-", "never"
		if r.ConvergedAfterWindows != nil {
			perHour, conv = fmt.Sprintf("%.1f", *r.RateLimitedPerHourAfterConvergence), fmt.Sprintf("%d", *r.ConvergedAfterWindows)
		}
		lat := "no"
		if r.Latency {
			lat = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.0f%%\t%d\t%.2f\t%.3f\t%.3f\t%.3f\t%d\t%s\t%s\t%d\t%s\t%s\n", r.Model, lat, r.Start, 100*r.Outside,
			r.Sessions, r.Demand, r.OracleUtilization, r.Utilization, r.RemainingUtilization, r.RateLimited, perHour, conv, r.Lost,
			labelList(r.Misses), labelList(r.OracleMisses))
	}
	tw.Flush()
	t := sim.Tally(rows)
	fmt.Fprintf(w, "\n%d of %d runs meet every target, %d more miss only targets the oracle missed too", t.Met, t.Runs, t.OracleToo)
	if len(t.Misses) > 0 {
		parts := make([]string, len(t.Misses))
		for i, m := range t.Misses {
			parts[i] = fmt.Sprintf("%s %s", m.Target, missCount(m.Target, m.Runs, m.OracleToo))
		}
		fmt.Fprintf(w, "; runs missing each (of them, the oracle too): %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// labelList is a row's target labels, or "-" for none.
func labelList(labels []string) string {
	if len(labels) == 0 {
		return "-"
	}
	return strings.Join(labels, " ")
}

// missCount is how many runs missed a target, and in parentheses how many of
// them the oracle missed too — for the targets the oracle is judged by.
func missCount(target string, runs, oracleToo int) string {
	if !slices.Contains(sim.OracleLabels, target) {
		return fmt.Sprint(runs)
	}
	return fmt.Sprintf("%d (%d)", runs, oracleToo)
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
	if g.Decides == gate.DecidesKnown {
		t += ", told the provider decides on input + max_tokens"
	}
	if g.OTPM > 0 {
		t += fmt.Sprintf(", told OTPM %d", g.OTPM)
	}
	if g.Windows == gate.WindowsFixed {
		t += ", told the provider counts in fixed windows"
	}
	return t
}

// parseSeeds reads a list of seeds and ranges: "1-6,9". A seed listed twice
// would be counted twice in the sums, so it is refused.
func parseSeeds(list string) ([]uint64, error) {
	var seeds []uint64
	seen := map[uint64]bool{}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: want seeds and ranges such as 1-6,9", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 64); err != nil {
				return nil, fmt.Errorf("%q: want seeds and ranges such as 1-6,9", part)
			}
			if b < a {
				return nil, fmt.Errorf("%q: a range runs upward, such as 1-6", part)
			}
		}
		if b-a >= maxSweepSeeds || uint64(len(seeds))+b-a >= maxSweepSeeds {
			return nil, fmt.Errorf("%q: at most %d seeds", list, maxSweepSeeds)
		}
		for i := uint64(0); i <= b-a; i++ { // counted, not a+i <= b: b may be the largest uint64
			if seen[a+i] {
				return nil, fmt.Errorf("%q: seed %d is listed twice", list, a+i)
			}
			seen[a+i] = true
			seeds = append(seeds, a+i)
		}
	}
	return seeds, nil
}

// maxSweepSeeds bounds a sweep. A matrix of one seed takes a few seconds, so
// the bound with --nudges is about 1000 × 6 × 2 s: some hours, not days.
const maxSweepSeeds = 1000

// writeSweepText prints a sweep summed: one line per seed when there are no
// nudges, else one per nudge over all seeds; then the total, or the mean and
// range over the nudges.
func writeSweepText(w io.Writer, base sim.Scenario, seeds []uint64, nudges []sim.Nudge, rows []sim.SweepRow) {
	settings := map[string]bool{}
	for _, r := range rows {
		settings[r.Nudge] = true
	}
	fmt.Fprintf(w, "sweep: the matrix for %d seeds × %d settings, %s per run, %s\n", len(seeds), len(settings), time.Duration(base.Duration), marginText(base.Gate))
	fmt.Fprintln(w, "met = runs meeting every target; +oracle's = runs missing only targets the oracle missed too;")
	fmt.Fprintln(w, "misses = runs missing each target (of them, in parentheses, the runs whose oracle missed it too)")
	fmt.Fprintln(w)
	type sum struct {
		label                         string
		runs, met, oracleToo, limited int
		util                          float64
		misses, oracleMisses          map[string]int
	}
	var sums []*sum
	byKey := map[string]*sum{}
	for _, r := range rows {
		key := r.Nudge
		if len(nudges) == 1 {
			key = fmt.Sprintf("seed %d", r.Seed)
		}
		s, ok := byKey[key]
		if !ok {
			s = &sum{label: key, misses: map[string]int{}, oracleMisses: map[string]int{}}
			byKey[key] = s
			sums = append(sums, s)
		}
		s.runs += r.Runs
		s.met += r.Met
		s.oracleToo += r.OracleToo
		s.limited += r.RateLimited
		s.util += r.Utilization * float64(r.Runs)
		for k, v := range r.Misses {
			s.misses[k] += v
		}
		for k, v := range r.OracleMisses {
			s.oracleMisses[k] += v
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "\tmet\t+oracle's\truns\t429s\tutilization")
	for _, k := range sim.TargetLabels {
		fmt.Fprintf(tw, "\t%s", k)
	}
	fmt.Fprintln(tw)
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.4f", s.label, s.met, s.oracleToo, s.runs, s.limited, s.util/float64(max(1, s.runs)))
		for _, k := range sim.TargetLabels {
			fmt.Fprintf(tw, "\t%s", missCount(k, s.misses[k], s.oracleMisses[k]))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if len(nudges) == 1 {
		var met, oracleToo, runs, limited int
		for _, s := range sums {
			met, oracleToo, runs, limited = met+s.met, oracleToo+s.oracleToo, runs+s.runs, limited+s.limited
		}
		fmt.Fprintf(w, "\nall seeds: %d of %d runs meet every target, %d more miss only targets the oracle missed too; %d 429s\n", met, runs, oracleToo, limited)
		return
	}
	if len(sums) == 0 {
		return
	}
	if len(sums) == 1 {
		fmt.Fprintf(w, "\nthe nudges changed nothing (the pacer is off): %d of %d runs meet every target; %d 429s\n", sums[0].met, sums[0].runs, sums[0].limited)
		return
	}
	minMet, maxMet, minLim, maxLim := sums[0].met, sums[0].met, sums[0].limited, sums[0].limited
	minToo, maxToo := sums[0].oracleToo, sums[0].oracleToo
	var met, oracleToo, limited int
	for _, s := range sums {
		met, oracleToo, limited = met+s.met, oracleToo+s.oracleToo, limited+s.limited
		minMet, maxMet = min(minMet, s.met), max(maxMet, s.met)
		minToo, maxToo = min(minToo, s.oracleToo), max(maxToo, s.oracleToo)
		minLim, maxLim = min(minLim, s.limited), max(maxLim, s.limited)
	}
	n := float64(len(sums))
	fmt.Fprintf(w, "\nover the %d settings: %.1f runs meet every target (%d–%d), %.1f more miss only targets the oracle missed too (%d–%d), %.0f 429s (%d–%d)\n",
		len(sums), float64(met)/n, minMet, maxMet, float64(oracleToo)/n, minToo, maxToo, float64(limited)/n, minLim, maxLim)
}
