package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/snapshot"
)

// backoffBarWidth is how many terminal cells the cap (retry.maxDelay) spans.
const backoffBarWidth = 40

func backoffCommand() *cli.Command {
	return &cli.Command{
		Name:  "backoff",
		Usage: "draw the retry curve: a bar a round, and the cumulative longest wait",
		Description: "Draws retry.rounds rounds of the backoff curve of the config (or of the defaults):\n" +
			"each round's wait without jitter and with jitter's upper bound, as a bar scaled to\n" +
			"retry.maxDelay, and the longest a turn can wait in all. A provider's Retry-After\n" +
			"replaces a round's wait when it is under the cap.",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("backoff: takes no arguments (got %q); --config FILE names a config", c.Args().Slice()), exitUsage)
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("backoff: --format must be text or json (got %q)", format), exitUsage)
			}
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return err
			}
			p, err := snapshot.RetryPolicy(cfg.Retry)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeBackoffJSON(c.App.Writer, p)
			}
			return writeBackoffText(c.App.Writer, p)
		},
	}
}

// writeBackoffText draws the curve: one bar per
// round scaled to the cap, and the cumulative longest wait.
func writeBackoffText(w io.Writer, p retry.Policy) error {
	var b strings.Builder
	fmt.Fprintf(&b, "retry backoff: %s · first %s · ×%s · cap %s · jitter ±%s%%\n",
		plural(p.Rounds, "round", "rounds"), backoffDur(p.InitialDelay), backoffNum(p.Multiplier), backoffDur(p.MaxDelay), backoffNum(p.Jitter*100))
	curve := p.Curve()
	if len(curve) == 0 {
		b.WriteString("\nretry.rounds is 0: gatectl never retries on the curve.\n")
	} else {
		b.WriteString("\nround     wait  longest  cum. longest\n")
		for _, pt := range curve {
			note := ""
			if pt.Delay >= p.MaxDelay {
				note = " cap"
			}
			fmt.Fprintf(&b, "%5d %8s %8s %13s  %s%s\n", pt.Round, backoffDur(pt.Delay), backoffDur(pt.Longest),
				backoffDur(pt.CumulativeLongest), backoffBar(pt.Delay, p.MaxDelay), note)
		}
		last := curve[len(curve)-1]
		fmt.Fprintf(&b, "\ncumulative wait: %s; longest with jitter (+%s%% a round, capped): %s\n",
			backoffDur(last.Cumulative), backoffNum(p.Jitter*100), backoffDur(last.CumulativeLongest))
	}
	if p.RespectRetryAfter {
		fmt.Fprintf(&b, "a provider's Retry-After replaces a round's wait when under the cap (%s); hints are clamped to %s–%s\n",
			backoffDur(p.MaxDelay), backoffDur(p.HintClamp.Min), backoffDur(p.HintClamp.Max))
	} else {
		b.WriteString("provider Retry-After hints are ignored (retry.respectRetryAfter: false)\n")
	}
	fmt.Fprintf(&b, "retried: %s\n", backoffClasses(p.RetryOn, func(c engine.Class) bool { return true }))
	fmt.Fprintf(&b, "not retried: %s\n", backoffClasses(engine.Classes, func(c engine.Class) bool {
		return c != engine.ClassMislabeled && !p.Retries(c)
	}))
	if !p.Retries(engine.ClassQuota) {
		b.WriteString("QUOTA fails over or waits long-term where pools and quota retry apply\n")
	}
	if m := p.Mislabeled; m.Enabled {
		fmt.Fprintf(&b, "mislabeled 400s: own budget of %s from %s, doubling, within %s of a capacity failure\n",
			plural(m.Rounds, "round", "rounds"), backoffDur(m.InitialDelay), backoffDur(m.Evidence))
	}
	if p.Rounds > 0 && (p.Retries(engine.ClassTransport) || p.Retries(engine.ClassTimeout)) {
		var kinds []string
		for _, k := range retry.TransportKinds {
			if n, ok := p.Transport.For(k); ok {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			} else {
				kinds = append(kinds, k+" the curve")
			}
		}
		fmt.Fprintf(&b, "no HTTP answer, retries by kind (retry.transport): %s\n", strings.Join(kinds, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// backoffBar renders d as a bar of eighth blocks, backoffBarWidth cells for max.
func backoffBar(d, max time.Duration) string {
	if max <= 0 || d <= 0 {
		return ""
	}
	eighths := int((float64(d)/float64(max))*backoffBarWidth*8 + 0.5)
	eighths = min(eighths, backoffBarWidth*8)
	if eighths == 0 {
		eighths = 1 // a wait is never drawn as nothing
	}
	partial := []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}
	return strings.Repeat("█", eighths/8) + partial[eighths%8]
}

// backoffDur renders a duration compactly: 2s, 2.4s, 1m, 4m14.4s, 1h, 500ms.
func backoffDur(d time.Duration) string {
	s := d.Round(time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func backoffNum(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", f), ".00") }

func backoffClasses(cs []engine.Class, keep func(engine.Class) bool) string {
	var names []string
	for _, c := range cs {
		if keep(c) {
			names = append(names, string(c))
		}
	}
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

type backoffJSONRound struct {
	Round               int   `json:"round"`
	DelayMs             int64 `json:"delayMs"`
	LongestMs           int64 `json:"longestMs"`
	CumulativeMs        int64 `json:"cumulativeMs"`
	CumulativeLongestMs int64 `json:"cumulativeLongestMs"`
}

type backoffJSON struct {
	Rounds            int                `json:"rounds"`
	InitialDelayMs    int64              `json:"initialDelayMs"`
	Multiplier        float64            `json:"multiplier"`
	MaxDelayMs        int64              `json:"maxDelayMs"`
	Jitter            float64            `json:"jitter"`
	RespectRetryAfter bool               `json:"respectRetryAfter"`
	HintClampMs       [2]int64           `json:"hintClampMs"`
	RetryOn           []engine.Class     `json:"retryOn"`
	Curve             []backoffJSONRound `json:"curve"`
	TotalMs           int64              `json:"totalMs"`
	TotalLongestMs    int64              `json:"totalLongestMs"`
}

func writeBackoffJSON(w io.Writer, p retry.Policy) error {
	out := backoffJSON{
		Rounds: p.Rounds, InitialDelayMs: p.InitialDelay.Milliseconds(), Multiplier: p.Multiplier,
		MaxDelayMs: p.MaxDelay.Milliseconds(), Jitter: p.Jitter, RespectRetryAfter: p.RespectRetryAfter,
		HintClampMs: [2]int64{p.HintClamp.Min.Milliseconds(), p.HintClamp.Max.Milliseconds()},
		RetryOn:     append([]engine.Class{}, p.RetryOn...),
		Curve:       []backoffJSONRound{},
	}
	for _, pt := range p.Curve() {
		out.Curve = append(out.Curve, backoffJSONRound{pt.Round, pt.Delay.Milliseconds(), pt.Longest.Milliseconds(),
			pt.Cumulative.Milliseconds(), pt.CumulativeLongest.Milliseconds()})
		out.TotalMs, out.TotalLongestMs = pt.Cumulative.Milliseconds(), pt.CumulativeLongest.Milliseconds()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
