package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/snapshot"
)

func routesCommand() *cli.Command {
	return &cli.Command{
		Name:      "routes",
		Usage:     "each pool, route, last reading, score and exhaustion mark",
		ArgsUsage: "[POOL]",
		Description: "Runs the balance sources that are due (each bounded by its own timeout) and prints\n" +
			"every pool of the config, or only POOL: each route, its provider's last reading and\n" +
			"its age, the windows that weigh in the score, the score, the exhaustion mark, and\n" +
			"whether a starting session could be drawn onto it. A pool that refuses mid-session\n" +
			"switches says so in its header. --draw N shows how N draws would split.\n\n" +
			"By default it asks the running server at --addr (its readings, marks and draws);\n" +
			"--offline reads --config and runs the balance sources here instead.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "read the config and run its balance sources here, without a server"},
			configFlag(), // read with --offline
			addrFlag("server `URL` to ask (GET /gate/v1/routes)"),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
			&cli.IntFlag{Name: "draw", Usage: "draw `N` starting routes from each pool and show how they split"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed the draws (0: random)"},
		},
		Action: func(c *cli.Context) error {
			if err := flagsAfterArg(c); err != nil {
				return err
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("routes: --format must be text or json (got %q)", format), exitUsage)
			}
			n := c.Int("draw")
			if n < 0 {
				return cli.Exit(fmt.Sprintf("routes: --draw must be >= 0 (got %d)", n), exitUsage)
			}
			if !c.Bool("offline") {
				switch {
				case c.IsSet("config") && c.String("config") != os.Getenv("GATECTL_CONFIG"): // the variable is for every command; a flag here is a mistake
					return cli.Exit("routes: --config is read here only with --offline (a running server reads its own): use --offline --config FILE, or --addr URL", exitUsage)
				case c.IsSet("seed"):
					return cli.Exit("routes: --seed needs --offline (a running server draws from its own source)", exitUsage)
				}
				rep, err := routesFromServer(c.Context, c.String("addr"), c.Args().First(), n)
				if err != nil {
					return err
				}
				return writeRoutes(c, format, rep)
			}
			if c.IsSet("addr") {
				return cli.Exit("routes: --offline and --addr exclude each other", exitUsage)
			}
			hook := pluginHook(nil, "")
			defer hook.Close(context.Background())
			snap, err := snapshot.Load(c.Context, c.String("config"), snapshotOptions(nil, hook))
			if err != nil {
				return err
			}
			defer snap.Close()
			var rnd engine.Rand
			if seed := c.Uint64("seed"); seed != 0 {
				rnd = rand.New(rand.NewPCG(seed, seed))
			}
			rep, err := routesReport(c.Context, snap, c.Args().First(), n, rnd)
			if err != nil {
				return err
			}
			return writeRoutes(c, format, rep)
		},
	}
}

func writeRoutes(c *cli.Context, format string, rep routesOutput) error {
	if format == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeRoutesText(c.App.Writer, rep)
}

// routesFromServer asks a running server for its report (GET /gate/v1/routes),
// refreshing the balance sources that are due, as the offline mode does.
func routesFromServer(ctx context.Context, addr, poolName string, draws int) (routesOutput, error) {
	q := url.Values{"refresh": {"true"}}
	if poolName != "" {
		q.Set("pool", poolName)
	}
	if draws > 0 {
		q.Set("draw", strconv.Itoa(draws))
	}
	var rep routesOutput
	if err := apiGet(ctx, addr, "/gate/v1/routes?"+q.Encode(), &rep); err != nil {
		if isNotFound(err) && poolName != "" { // the server's "no such pool: ...", as the offline mode says it
			return routesOutput{}, fmt.Errorf("%w: %s", pool.ErrNoPool, strings.TrimPrefix(err.Error(), pool.ErrNoPool.Error()+": "))
		}
		return routesOutput{}, cli.Exit("routes: "+err.Error(), exitFailure)
	}
	return rep, nil
}

// flagsAfterArg accepts the flags that follow the command's one argument, as in
// `gatectl routes medium --offline --config FILE` or `gatectl reset a/m --addr URL`
// (urfave/cli stops parsing flags at the first argument). Errors name the command
// and its ArgsUsage.
func flagsAfterArg(c *cli.Context) error {
	rest := c.Args().Tail()
	if len(rest) == 0 {
		return nil
	}
	fs := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(fs); err != nil {
			return err
		}
	}
	if err := fs.Parse(rest); err != nil {
		return cli.Exit(fmt.Sprintf("%s: %v", c.Command.Name, err), exitUsage)
	}
	if fs.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("%s: at most one %s (got %q and %q)", c.Command.Name, strings.Trim(c.Command.ArgsUsage, "[]"), c.Args().First(), fs.Args()), exitUsage)
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if e := c.Set(f.Name, f.Value.String()); e != nil && err == nil {
			err = e
		}
	})
	return err
}

// routesOutput is the report with the draws and the scoring of each pool.
type routesOutput struct {
	pool.Report
	// Scoring names each pool's scorer: "default", or the expr/wasm the config
	// names and this build cannot run yet (its scores are then the default rule's).
	Scoring map[string]string `json:"scoring"`
	// Draws counts, per pool, where N draws landed, by route index (--draw N).
	Draws map[string][]int `json:"draws,omitempty"`
	// SourceErrors says, by provider, why its balance source's last read failed.
	SourceErrors map[string]string `json:"sourceErrors,omitempty"`
}

// routesReport runs the due balance sources of the selected pools and reports them.
func routesReport(ctx context.Context, snap *snapshot.Snapshot, poolName string, draws int, rnd engine.Rand) (routesOutput, error) {
	set, notes := snap.Balances, snap.Scoring
	q := pool.NewRouter(pool.RouterOptions{Pools: snap.Pools, Settings: snap.Quota, Readings: set, Rand: rnd})
	var sel []string
	if poolName != "" {
		sel = []string{poolName}
	}
	rep, err := q.Report(ctx, true, sel...)
	if err != nil {
		return routesOutput{}, err
	}
	out := routesOutput{Report: rep, Scoring: map[string]string{}}
	for prov, st := range set.Status() {
		if st.Err != nil {
			if out.SourceErrors == nil {
				out.SourceErrors = map[string]string{}
			}
			out.SourceErrors[prov] = st.Err.Error()
		}
	}
	for _, p := range rep.Pools {
		out.Scoring[p.Name] = notes[p.Name]
		if draws > 0 {
			counts, err := q.DrawCounts(ctx, p.Name, draws)
			if err != nil {
				return routesOutput{}, err
			}
			if out.Draws == nil {
				out.Draws = map[string][]int{}
			}
			out.Draws[p.Name] = counts
		}
	}
	return out, nil
}

func writeRoutesText(w io.Writer, rep routesOutput) error {
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	if len(rep.Pools) == 0 {
		_, err := fmt.Fprintln(w, "no pools configured")
		return err
	}
	for i, p := range rep.Pools {
		if i > 0 || len(rep.Warnings) > 0 {
			fmt.Fprintln(w)
		}
		head := "pool " + p.Name
		if !p.MidSessionSwitch {
			head += " (refuses mid-session switches: a started session waits on its route)"
		}
		if s := rep.Scoring[p.Name]; s != "" && s != "default" {
			head += "; scoring " + s
		}
		fmt.Fprintln(w, head)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		cols := "  ROUTE\tREMAINING\tAGE\tWINDOWS\tSCORE\tMARK\tUSABLE"
		counts := rep.Draws[p.Name]
		total := 0
		for _, n := range counts {
			total += n
		}
		if counts != nil {
			cols += "\tDRAWS"
		}
		fmt.Fprintln(tw, cols)
		for j, r := range p.Routes {
			line := []string{"  " + r.Route.String(), remainingText(r), ageText(r), windowsText(r), scoreText(r), markText(r, rep.At), usableText(r)}
			if counts != nil {
				line = append(line, fmt.Sprintf("%d (%.1f%%)", counts[j], 100*float64(counts[j])/float64(max(total, 1))))
			}
			fmt.Fprintln(tw, strings.Join(line, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range p.Routes {
			if strings.Contains(windowsText(r), "*") {
				fmt.Fprintln(w, "  WINDOWS lists remaining/capacity per window; * marks the windows the score weighs")
				break
			}
		}
		var noted []string
		for _, r := range p.Routes {
			if e := rep.SourceErrors[r.Provider]; e != "" && r.Reading == nil && !slices.Contains(noted, r.Provider) {
				noted = append(noted, r.Provider)
				fmt.Fprintf(w, "  no reading from %s: %s\n", r.Provider, e)
			}
		}
	}
	return nil
}

func remainingText(r pool.RouteReport) string {
	switch {
	case r.Reading == nil:
		return "-"
	case r.Reading.Remaining == nil && r.Reading.Error != "":
		return "error: " + r.Reading.Error
	case r.Reading.Remaining == nil:
		return "?"
	}
	return strconv.FormatFloat(*r.Reading.Remaining, 'g', 6, 64)
}

func ageText(r pool.RouteReport) string {
	if r.ReadingAgeMs == nil {
		return "-"
	}
	return (time.Duration(*r.ReadingAgeMs) * time.Millisecond).Round(time.Second).String()
}

// windowsText lists the reading's windows, remaining/capacity; a * marks the ones
// that weigh in the score.
func windowsText(r pool.RouteReport) string {
	if r.Reading == nil || len(r.Reading.Windows) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(r.Reading.Windows))
	for _, w := range r.Reading.Windows {
		s := w.Name + " " + strconv.FormatFloat(w.Remaining, 'g', 6, 64)
		if w.Capacity != nil {
			s += "/" + strconv.FormatFloat(*w.Capacity, 'g', 6, 64)
		}
		if slices.Contains(r.ScoringWindows, w.Name) {
			s += "*"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func scoreText(r pool.RouteReport) string {
	if r.Score == nil {
		if r.ScoreError != "" {
			return "unscored: " + r.ScoreError
		}
		return "unscored"
	}
	return strconv.FormatFloat(*r.Score, 'f', 4, 64)
}

func markText(r pool.RouteReport, now time.Time) string {
	if !r.Marked {
		return "-"
	}
	return "exhausted, lifts in " + r.MarkUntil.Sub(now).Round(time.Second).String()
}

func usableText(r pool.RouteReport) string {
	if r.Usable {
		return "yes"
	}
	return "no: " + r.Why
}
