package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/server"
)

func resetCommand() *cli.Command {
	return &cli.Command{
		Name:      "reset",
		Usage:     "make the gate forget what it learned about one model",
		ArgsUsage: "PROVIDER/MODEL",
		Description: "Asks a running server (POST /gate/v1/models/{provider}/{model}/reset) to forget the\n" +
			"model's learned quota, its token and request triggers, its clean-window record and its\n" +
			"measured count delay, and to start again from the configured (or provider-stated) limit.\n" +
			"A running cooldown stays. Use it when a trigger came from someone else's traffic on the\n" +
			"same key, or when the provider raised your limit. The model may contain slashes:\n" +
			"`gatectl reset openrouter/deepseek/deepseek-chat` resets deepseek/deepseek-chat on\n" +
			"openrouter.",
		Flags: []cli.Flag{
			addrFlag("server `URL`"),
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			if err := flagsAfterArg(c); err != nil {
				return err
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("reset: --format must be text or json (got %q)", format), exitUsage)
			}
			if c.Args().Len() == 0 { // more than one is flagsAfterArg's error
				return cli.Exit("reset: give PROVIDER/MODEL, e.g. gatectl reset deepseek/deepseek-chat", exitUsage)
			}
			provider, model, err := parseResetTarget(c.Args().First())
			if err != nil {
				return cli.Exit("reset: "+err.Error(), exitUsage)
			}
			var out server.APIModelReset
			if err := apiPost(c.Context, c.String("addr"), resetPath(provider, model), &out); err != nil {
				return cli.Exit("reset: "+err.Error(), exitFailure)
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return writeResetText(c.App.Writer, out)
		},
	}
}

// parseResetTarget splits PROVIDER/MODEL at the first slash: the model keeps the
// rest, slashes included.
func parseResetTarget(arg string) (provider, model string, err error) {
	provider, model, ok := strings.Cut(arg, "/")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q is not PROVIDER/MODEL (e.g. deepseek/deepseek-chat; `gatectl status` lists the models the gate knows by that name)", arg)
	case provider == "":
		return "", "", fmt.Errorf("%q has no provider before the slash (want PROVIDER/MODEL)", arg)
	case model == "":
		return "", "", fmt.Errorf("%q has no model after the slash (want PROVIDER/MODEL)", arg)
	}
	return provider, model, nil
}

// resetPath is the endpoint for provider/model, each path segment escaped.
func resetPath(provider, model string) string {
	segs := strings.Split(model, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/gate/v1/models/" + url.PathEscape(provider) + "/" + strings.Join(segs, "/") + "/reset"
}

// writeResetText prints one line: the model, its quota and trigger before and
// after the reset, and the cooldown the reset kept.
func writeResetText(w io.Writer, r server.APIModelReset) error {
	st := r.Status
	line := fmt.Sprintf("reset %s/%s: quota %s → %s, trigger %s → %s", r.Provider, r.Model,
		tokensText(r.Before.Quota), tokensText(st.Quota), resetTriggerText(r.Before.Trigger), resetTriggerText(st.Trigger))
	if r.Before.Model == "" { // a server from before the answer said what it forgot
		line = fmt.Sprintf("reset %s/%s: quota %s, trigger %s", r.Provider, r.Model, tokensText(st.Quota), resetTriggerText(st.Trigger))
	}
	if st.CooldownMs > 0 {
		line += ", cooldown " + cooldownText(st) + " left (kept)"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// tokensText is a token figure as the reset line shows it.
func tokensText(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// resetTriggerText is a trigger, or "none" when no 429 set one.
func resetTriggerText(v float64) string {
	if v > 0 {
		return tokensText(v)
	}
	return "none"
}
