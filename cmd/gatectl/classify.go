package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/failurejson"
	"github.com/gatectl/gatectl/rules"
	"github.com/gatectl/gatectl/snapshot"
)

func classifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "classify",
		Usage:     "classify failures read on stdin: one verdict a line",
		ArgsUsage: " ",
		Description: "Reads a failure on stdin, as JSON:\n" +
			`  {"status":429,"headers":{"retry-after":"28"},"body":"...","provider":"openai"}` + "\n" +
			"(with --jsonl, one failure a line; keys other than status, headers, body,\n" +
			"provider, model, errorKind and sinceCapacityMs are skipped, so captured\n" +
			"records classify as they are) and prints one verdict a line:\n" +
			`  {"class":"RATE_LIMIT","retryAfterMs":28000,"by":"builtin/rate-limit"}` + "\n" +
			"retryAfterMs is the provider's hint as sent (null when none); by names the\n" +
			"classifier and the rule that decided. The chain is the config's classifiers:\n" +
			"(rule files, in order), then the built-in rules, which always decide last.\n" +
			"--explain adds, after each verdict, what every classifier answered and every\n" +
			"rule that holds (lines starting with '#'). --show-builtin prints the built-in\n" +
			"rule file. A line that cannot be read is reported with its number; the others\n" +
			"are still classified, and the exit status is then 1.",
		Flags: []cli.Flag{
			configFlag(), // its classifiers, then the built-in rules; default: the built-in rules only
			&cli.StringSliceFlag{Name: "plugin", Usage: "add a wasm classifier `X.wasm` before the config's"},
			&cli.DurationFlag{Name: "plugin-timeout", Usage: "deadline of one --plugin call (default: the production limit, as serve applies it)"},
			&cli.BoolFlag{Name: "jsonl", Usage: "read one failure per line"},
			&cli.BoolFlag{Name: "explain", Usage: "show what every classifier and rule answered"},
			&cli.BoolFlag{Name: "show-builtin", Usage: "print the built-in rule file and exit"},
		},
		Action: runClassify,
	}
}

func runClassify(c *cli.Context) error {
	out, errOut := c.App.Writer, c.App.ErrWriter
	if out == nil {
		out = os.Stdout
	}
	if errOut == nil {
		errOut = os.Stderr
	}
	if c.Bool("show-builtin") {
		_, err := out.Write(rules.BuiltinSource())
		return err
	}
	chain, err := classifierChain(c.Context, c.String("config"), c.StringSlice("plugin"), c.Duration("plugin-timeout"))
	if err != nil {
		return err
	}
	chain = chain.WithErrorHook(func(link string, err error) {
		fmt.Fprintf(errOut, "gatectl: classify: classifier %s failed (next one asked): %v\n", link, err)
	})
	in := c.App.Reader
	if in == nil {
		in = os.Stdin
	}
	w := bufio.NewWriter(out)
	defer w.Flush()
	cl := &classifier{chain: chain, out: w, explain: c.Bool("explain")}
	var total, bad int
	report := func(line int, err error) {
		bad++
		w.Flush()
		fmt.Fprintf(errOut, "gatectl: classify: line %d: %v\n", line, err)
	}
	if c.Bool("jsonl") {
		total, err = classifyLines(c.Context, in, cl, report)
	} else {
		total, err = classifyStream(c.Context, in, cl, report)
	}
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return cli.Exit(fmt.Sprintf("classify: %d of %s could not be read", bad, plural(total, "input", "inputs")), exitFailure)
	}
	return nil
}

// classifierChain builds the chain `gatectl classify` asks: --plugin modules,
// the classifiers of the config at configPath (none when ""), then the built-in
// rules.
func classifierChain(ctx context.Context, configPath string, plugins []string, pluginTimeout time.Duration) (*engine.Chain, error) {
	links, err := pluginClassifiers(plugins, pluginTimeout) // plugin_classify.go
	if err != nil {
		return nil, fmt.Errorf("classify: %w", err)
	}
	// The config's chain ("" is the embedded default: the built-in rules alone).
	// The hook (and its host) lives as long as the process: the chain keeps using it.
	snap, err := snapshot.Load(ctx, configPath, snapshotOptions(nil, pluginHook(nil, "")))
	if err != nil {
		return nil, err
	}
	if len(links) == 0 {
		return snap.Chain, nil
	}
	return engine.NewChain(append(links, snap.Chain.Links()...)...), nil
}

// classifier classifies one failure and prints its verdict (and explanation).
type classifier struct {
	chain   *engine.Chain
	out     io.Writer
	explain bool
}

func (cl *classifier) classify(ctx context.Context, f *engine.Failure) error {
	var v engine.Verdict
	var answers []engine.Answer
	if cl.explain {
		answers, v = cl.chain.Explain(ctx, f)
	} else {
		var err error
		v, _, err = cl.chain.Classify(ctx, f)
		if err != nil {
			return err
		}
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := cl.out.Write(line); err != nil {
		return err
	}
	for i, a := range answers {
		var what string
		switch {
		case a.Err != "":
			what = "error: " + a.Err
		case !a.Decided:
			what = "abstains"
		default:
			what = describe(*a.Verdict)
			if a.Wins {
				what += "  <- decides"
			}
		}
		fmt.Fprintf(cl.out, "# %d %s: %s\n", i+1, a.Link, what)
		for _, d := range a.Detail {
			fmt.Fprintf(cl.out, "#     %s\n", d)
		}
	}
	if cl.explain && len(answers) == 0 {
		fmt.Fprintf(cl.out, "# the chain is empty: %s\n", describe(v))
	}
	return nil
}

func describe(v engine.Verdict) string {
	s := fmt.Sprintf("%s by %s", v.Class, v.By)
	if v.RetryAfterMs != nil {
		s += fmt.Sprintf(" retryAfterMs=%d", *v.RetryAfterMs)
	}
	if v.Window != "" {
		s += " window=" + v.Window
	}
	return s
}

// classifyLines reads one failure a line (blank lines are skipped).
func classifyLines(ctx context.Context, in io.Reader, cl *classifier, report func(int, error)) (int, error) {
	r := bufio.NewReader(in)
	total := 0
	for line := 1; ; line++ {
		text, readErr := r.ReadString('\n')
		if readErr != nil && readErr != io.EOF {
			return total, fmt.Errorf("classify: reading stdin: %w", readErr)
		}
		if strings.TrimSpace(text) != "" {
			total++
			f, err := decodeFailureRecord([]byte(text))
			if err != nil {
				what := "not a failure object"
				if !json.Valid([]byte(text)) {
					what = "not JSON"
				}
				report(line, fmt.Errorf("%s: %w", what, err))
			} else if err := cl.classify(ctx, f); err != nil {
				return total, err
			}
		}
		if readErr == io.EOF {
			return total, nil
		}
	}
}

// classifyStream reads failures as a stream of JSON values (one, usually, maybe
// pretty-printed over many lines). A value that is not JSON is reported with
// its line, and reading goes on from the next line that opens an object.
func classifyStream(ctx context.Context, in io.Reader, cl *classifier, report func(int, error)) (int, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return 0, fmt.Errorf("classify: reading stdin: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, cli.Exit("classify: no failure on stdin (want a JSON object; see --help)", exitUsage)
	}
	base := 0 // where dec began in data
	dec := json.NewDecoder(bytes.NewReader(data))
	total := 0
	for {
		start := base + int(dec.InputOffset())
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return total, nil
		}
		total++
		rest := data[start:]
		skipped := len(rest) - len(bytes.TrimLeft(rest, " \t\r\n"))
		line := 1 + bytes.Count(data[:start+skipped], []byte("\n"))
		if err != nil {
			at := start + skipped
			var se *json.SyntaxError
			if errors.As(err, &se) {
				at = min(base+int(se.Offset), len(data))
				line = 1 + bytes.Count(data[:at], []byte("\n"))
			}
			report(line, fmt.Errorf("not JSON: %w", err))
			// The decoder cannot resume inside bad JSON: start again at the
			// next line that opens an object.
			next := bytes.Index(data[min(max(at, start+skipped+1), len(data)):], []byte("\n{"))
			if next < 0 {
				return total, nil
			}
			base = min(max(at, start+skipped+1), len(data)) + next + 1
			dec = json.NewDecoder(bytes.NewReader(data[base:]))
			continue
		}
		f, err := decodeFailureRecord(raw)
		if err != nil {
			report(line, fmt.Errorf("not a failure object: %w", err))
			continue
		}
		if err := cl.classify(ctx, f); err != nil {
			return total, err
		}
	}
}

// decodeFailureRecord reads a captured record as failurejson.DecodeRecord does
// (keys that are not a failure's are skipped), but refuses a record that says
// nothing of a failure: {"code":429} would otherwise classify as an empty
// failure and look like an answer.
func decodeFailureRecord(data []byte) (*engine.Failure, error) {
	f, err := failurejson.DecodeRecord(data)
	if err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(data, &keys) == nil {
		for _, k := range []string{"status", "errorKind", "body"} {
			if _, ok := keys[k]; ok {
				return f, nil
			}
		}
		got := make([]string, 0, len(keys))
		for k := range keys {
			got = append(got, k)
		}
		slices.Sort(got)
		what := "no keys"
		if len(got) > 0 {
			what = "only " + strings.Join(got, ", ")
		}
		return nil, fmt.Errorf("no status, errorKind or body (got %s): a failure is an HTTP answer "+
			`({"status":429,"headers":{…},"body":"…"}) or a transport error ({"errorKind":"timeout"}); `+
			"the keys read are %s", what, strings.Join(failurejson.FailureKeys, ", "))
	}
	return f, nil
}
