package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/wasm"
)

func pluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "plugin",
		Usage: "check gate/v1 WebAssembly plugins, or start a new one",
		Subcommands: []*cli.Command{
			pluginCheckCommand(),
			pluginNewCommand(),
		},
	}
}

func pluginCheckCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "check a module against the gate/v1 ABI, run its golden cases and time a call",
		ArgsUsage: "[flags] X.wasm",
		Description: "Loads X.wasm as the host would: lists its exports and imports, checks the\n" +
			"gate_abi_v1 marker and the entry point, refuses forbidden imports, starts an\n" +
			"instance (_initialize, gate_init), runs the golden cases and times --runs calls\n" +
			"of the first case's input. Cases come from --cases FILE, else from the sidecar\n" +
			"X.cases.yaml (or X.cases.json) beside the module, plus each --case. A cases file\n" +
			"is a list of cases or a mapping {config: {...}, cases: [...]}; a classifier case\n" +
			"is {name, input: <failure>, expect: {class, retryAfterMs, window, by} or\n" +
			"{abstain: true}}, a scorer's or balance parser's {name, input: <the module's\n" +
			"JSON input>, expect: <members of its output> or {abstain: true}}.\n" +
			"Exit status 1 when anything fails.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kind", Usage: "entry point to check: classify, score or balance (default: the one the module exports)"},
			&cli.StringFlag{Name: "cases", Usage: "golden cases `FILE` (YAML or JSON)"},
			&cli.GenericFlag{Name: "case", Value: &jsonList{}, Usage: "a golden case as `JSON` (repeatable), e.g. '{\"input\":{\"status\":429},\"expect\":{\"abstain\":true}}'"},
			&cli.StringFlag{Name: "plugin-config", Usage: "the config object handed to gate_init, as `JSON` (overrides the cases file's)"},
			&cli.IntFlag{Name: "runs", Value: 1000, Usage: "calls to time"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
			&cli.BoolFlag{Name: "verbose", Usage: "show the module's own stdout and stderr and its gate.log lines"},
		},
		Action: runPluginCheck,
	}
}

// pluginReport is what `gatectl plugin check` prints.
type pluginReport struct {
	Module  string     `json:"module"`
	Info    *wasm.Info `json:"info,omitempty"`
	Kind    wasm.Kind  `json:"kind,omitempty"`
	Cases   int        `json:"cases"`
	Failed  []string   `json:"failed,omitempty"`
	Errors  []string   `json:"errors,omitempty"`
	StartMs float64    `json:"startMs,omitempty"` // load: compile + first instance
	Timing  *timing    `json:"timing,omitempty"`
	OK      bool       `json:"ok"`
}

type timing struct {
	Runs  int     `json:"runs"`
	P50us float64 `json:"p50us"`
	P99us float64 `json:"p99us"`
	MaxUs float64 `json:"maxUs"`
}

func runPluginCheck(c *cli.Context) error {
	format := c.String("format")
	if format != "text" && format != "json" {
		return cli.Exit(fmt.Sprintf("plugin check: --format must be text or json (got %q)", format), exitUsage)
	}
	switch {
	case c.NArg() == 0:
		return cli.Exit("plugin check: want a module: gatectl plugin check [flags] X.wasm", exitUsage)
	case c.NArg() > 1:
		return cli.Exit(fmt.Sprintf("plugin check: want one module, got %q (flags go before the module)", c.Args().Slice()), exitUsage)
	}
	path := c.Args().First()
	rep := checkPlugin(c.Context, c, path)
	if format == "json" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(c.App.Writer, string(b))
	} else {
		writePluginReport(c.App.Writer, rep)
	}
	if !rep.OK {
		return cli.Exit(fmt.Sprintf("plugin check: %s failed", path), exitFailure)
	}
	return nil
}

// jsonList collects a repeatable flag whose values hold commas (JSON), which a
// StringSliceFlag would split.
type jsonList struct{ values []string }

func (l *jsonList) Set(v string) error { l.values = append(l.values, v); return nil }
func (l *jsonList) String() string     { return strings.Join(l.values, " ") }

func checkPlugin(ctx context.Context, c *cli.Context, path string) *pluginReport {
	rep := &pluginReport{Module: path}
	fail := func(err error) *pluginReport {
		rep.Errors = append(rep.Errors, errorLines(err)...)
		return rep
	}
	if ctx == nil {
		ctx = context.Background()
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	opts := wasm.HostOptions{}
	if c.Bool("verbose") {
		opts.Stderr = c.App.ErrWriter
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "gatectl", Level: hclog.Trace, Output: c.App.ErrWriter})
	}
	host, err := wasm.NewHost(opts)
	if err != nil {
		return fail(err)
	}
	defer host.Close(context.Background())
	name := filepath.Base(path)
	info, err := host.Inspect(ctx, name, bin)
	rep.Info = info
	if err != nil {
		return fail(err)
	}

	kind := wasm.Kind(c.String("kind"))
	if kind == "" {
		switch len(info.Kinds) {
		case 0:
			// An entry point with a wrong signature: load as that kind, so every
			// ABI problem is reported.
			for _, k := range wasm.Kinds {
				for _, e := range info.Exports {
					if e == k.Export() && kind == "" {
						kind = k
					}
				}
			}
			if kind == "" {
				return fail(fmt.Errorf("%s exports none of gate_classify, gate_score, gate_balance", name))
			}
		case 1:
			kind = info.Kinds[0]
		default:
			return fail(fmt.Errorf("%s exports several entry points; choose one with --kind", name))
		}
	}
	rep.Kind = kind

	cfg, cases, err := pluginCases(path, c.String("cases"), c.Generic("case").(*jsonList).values)
	if err != nil {
		return fail(err)
	}
	if s := c.String("plugin-config"); s != "" {
		cfg = nil
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			return fail(fmt.Errorf("--plugin-config: want a JSON object: %w", err))
		}
	}
	start := time.Now()
	// Deadlines are generous here: a check is about correctness; the timing
	// below shows how a call compares with the production deadline.
	p, err := host.LoadBytes(ctx, bin, wasm.Options{Kind: kind, Name: name, Config: cfg, Limits: wasm.Limits{Timeout: time.Second}})
	if err != nil {
		return fail(err)
	}
	defer p.Close()
	rep.StartMs = float64(time.Since(start).Microseconds()) / 1000
	rep.Cases = len(cases)
	if err := p.RunCases(ctx, cases); err != nil {
		rep.Failed = errorLines(err)
	}
	if n := c.Int("runs"); n > 0 {
		in, err := sampleInput(kind, cases)
		if err != nil {
			return fail(err)
		}
		t, err := timeCalls(ctx, p, in, n)
		if err != nil {
			rep.Errors = append(rep.Errors, "timing: "+err.Error())
		}
		rep.Timing = t
	}
	rep.OK = len(rep.Failed) == 0 && len(rep.Errors) == 0
	return rep
}

// pluginCases reads the cases file (or the sidecar) and the --case flags.
func pluginCases(module, file string, flags []string) (map[string]any, []map[string]any, error) {
	if file == "" {
		base := strings.TrimSuffix(module, ".wasm")
		for _, ext := range []string{".cases.yaml", ".cases.yml", ".cases.json"} {
			if _, err := os.Stat(base + ext); err == nil {
				file = base + ext
				break
			}
		}
	}
	var (
		cfg   map[string]any
		cases []map[string]any
	)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, err
		}
		var doc any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		switch d := doc.(type) {
		case nil:
		case []any:
			if cases, err = caseList(file, d); err != nil {
				return nil, nil, err
			}
		case map[string]any:
			for k := range d {
				if k != "config" && k != "cases" {
					return nil, nil, fmt.Errorf("%s: unknown key %q (valid: config, cases)", file, k)
				}
			}
			if c, ok := d["config"].(map[string]any); ok {
				cfg = c
			} else if d["config"] != nil {
				return nil, nil, fmt.Errorf("%s: config: want a mapping", file)
			}
			if l, ok := d["cases"].([]any); ok {
				if cases, err = caseList(file, l); err != nil {
					return nil, nil, err
				}
			} else if d["cases"] != nil {
				return nil, nil, fmt.Errorf("%s: cases: want a list", file)
			}
		default:
			return nil, nil, fmt.Errorf("%s: want a list of cases or a mapping {config, cases}", file)
		}
	}
	for i, s := range flags {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, nil, fmt.Errorf("--case %d: want a JSON object: %w", i+1, err)
		}
		cases = append(cases, m)
	}
	return cfg, cases, nil
}

func caseList(file string, l []any) ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(l))
	for i, x := range l {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: cases[%d]: want a mapping", file, i)
		}
		out = append(out, m)
	}
	return out, nil
}

// sampleInput is what the timing calls: the first case's input, else a typical
// input of the kind.
func sampleInput(kind wasm.Kind, cases []map[string]any) ([]byte, error) {
	if len(cases) > 0 {
		if in, ok := cases[0]["input"]; ok {
			return json.Marshal(in)
		}
	}
	switch kind {
	case wasm.KindClassify:
		return json.Marshal(engine.Failure{Status: 429, Headers: map[string]string{"retry-after": "20"},
			Body: `{"error":{"message":"Rate limit reached","type":"rate_limit"}}`})
	case wasm.KindScore:
		return []byte(`{"remaining":5,"capacity":20}`), nil
	}
	return []byte(`{"nowMs":0,"config":{},"fetch":{"status":200,"headers":{},"body":"{}"}}`), nil
}

// timeCalls times n pooled calls (after a warm-up) and reports percentiles.
// Failing calls are fine here (the cases judge correctness); a call that fails for
// want of an instance is reported.
func timeCalls(ctx context.Context, p *wasm.Plugin, in []byte, n int) (*timing, error) {
	for range min(n, 50) {
		p.Call(ctx, in)
	}
	d := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		_, _, err := p.Call(ctx, in)
		d = append(d, time.Since(t))
		if errors.Is(err, wasm.ErrQuarantined) || errors.Is(err, wasm.ErrInit) {
			return nil, err
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1000 }
	return &timing{Runs: n, P50us: us(d[n/2]), P99us: us(d[n*99/100]), MaxUs: us(d[n-1])}, nil
}

func writePluginReport(w io.Writer, rep *pluginReport) {
	fmt.Fprintf(w, "%s\n", rep.Module)
	if i := rep.Info; i != nil {
		fmt.Fprintf(w, "  sha256    %s (%d bytes)\n", i.SHA256, i.Size)
		fmt.Fprintf(w, "  abi       gate_abi_v1 %s, memory %s (%d pages at start)\n", yesNo(i.ABIMarker), yesNo(i.Memory), i.MemoryMinPages)
		kinds := make([]string, len(i.Kinds))
		for k, x := range i.Kinds {
			kinds[k] = string(x)
		}
		fmt.Fprintf(w, "  kinds     %s\n", orNone(strings.Join(kinds, ", ")))
		fmt.Fprintf(w, "  init      _initialize %s, gate_init %s\n", yesNo(i.Initialize), yesNo(i.Init))
		fmt.Fprintf(w, "  exports   %s\n", orNone(strings.Join(i.Exports, ", ")))
		fmt.Fprintf(w, "  imports   %s\n", orNone(strings.Join(i.Imports, ", ")))
	}
	if rep.StartMs > 0 {
		fmt.Fprintf(w, "  start     %.1fms (compile and first instance)\n", rep.StartMs)
	}
	if rep.Kind != "" && rep.Info != nil && rep.StartMs > 0 {
		fmt.Fprintf(w, "  cases     %d run, %d failed\n", rep.Cases, len(rep.Failed))
	}
	for _, f := range rep.Failed {
		fmt.Fprintf(w, "    FAIL %s\n", f)
	}
	if t := rep.Timing; t != nil {
		deadline := wasm.DefaultLimits(rep.Kind).Timeout
		fmt.Fprintf(w, "  timing    %d calls: p50 %.1fµs, p99 %.1fµs, max %.1fµs (deadline %s)\n", t.Runs, t.P50us, t.P99us, t.MaxUs, deadline)
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "  error     %s\n", e)
	}
	if rep.OK {
		fmt.Fprintln(w, "ok")
	} else {
		fmt.Fprintln(w, "FAILED")
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
