// Command gatectl is the rate-limit, retry and quota gate for LLM traffic.
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/gatectl/gatectl/internal/suggest"
	"github.com/urfave/cli/v2"
)

// Exit codes. 1 is a user error (bad config, bad input); 2 is a usage error.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		if msg := err.Error(); msg != "" { // an empty message: the command already said what was wrong
			fmt.Fprintln(os.Stderr, "gatectl:", msg)
		}
		code := exitFailure
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

// The help lists commands by category, in the order a newcomer needs them;
// urfave/cli sorts categories by name, hence the numbers.
const (
	catRun     = "1. Try it and run it"
	catConfig  = "2. Write and test a config"
	catServer  = "3. Ask a running server"
	catVersion = "4. About"
)

// categories places every command; one added without an entry here lands in
// catServer when it talks to a server (it has --addr), else in catConfig.
var categories = map[string]string{
	"demo": catRun, "serve": catRun,
	"check": catConfig, "classify": catConfig, "backoff": catConfig, "sim": catConfig, "plugin": catConfig,
	"status": catServer, "routes": catServer, "failures": catServer, "reset": catServer,
	"settings": catServer, "stats": catServer, "report": catServer,
	"version": catVersion,
}

// commandOrder is the order of the commands in the help, most used first.
var commandOrder = []string{"demo", "serve", "check", "classify", "backoff", "sim", "plugin",
	"status", "routes", "failures", "reset", "settings", "stats", "report", "version"}

func init() {
	cli.VersionPrinter = func(c *cli.Context) { printVersion(c.App.Writer) }
}

// newApp builds the CLI. Tests call it with their own Writer and ErrWriter.
func newApp() *cli.App {
	app := &cli.App{
		Name:    "gatectl",
		Usage:   "rate-limit, retry and quota gate for LLM traffic",
		Version: versionString(),
		Commands: []*cli.Command{
			demoCommand(),
			versionCommand(),
			simCommand(),
			backoffCommand(),
			routesCommand(),
			statusCommand(),
			resetCommand(),
			failuresCommand(),
			settingsCommand(),
			statsCommand(),
			reportCommand(),
			classifyCommand(),
			serveCommand(),
			checkCommand(),
			pluginCommand(),
		},
		// Without a command: the help. With an unknown one: what it may have meant.
		Action:         unknownCommand,
		ExitErrHandler: func(c *cli.Context, err error) {}, // errors are returned, main prints them
	}
	app.OnUsageError = usageError
	for _, cmd := range app.Commands {
		if cmd.Category == "" {
			cmd.Category = categoryOf(cmd)
		}
		withUsageErrors(cmd)
	}
	// Within a category, the order of commandOrder (the help keeps the slice's order).
	rank := func(c *cli.Command) int {
		if i := slices.Index(commandOrder, c.Name); i >= 0 {
			return i
		}
		return len(commandOrder)
	}
	sort.SliceStable(app.Commands, func(i, j int) bool { return rank(app.Commands[i]) < rank(app.Commands[j]) })
	return app
}

// usageError answers a flag the CLI library could not parse (an unknown
// flag, one without its value, a bad duration) with a usage error: exit 2,
// as every other usage error, and one line rather than the whole help page.
func usageError(c *cli.Context, err error, _ bool) error {
	name := "gatectl" // HelpName is the command's path: "gatectl settings get"
	if c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	return cli.Exit(fmt.Sprintf("%s: %v (%s --help)", strings.TrimPrefix(name, "gatectl "), err, name), exitUsage)
}

// withUsageErrors gives cmd and its subcommands usageError, and a command
// with subcommands an answer for one it does not have (the library's own
// says "No help topic" and exits 3).
func withUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = usageError
	if len(cmd.Subcommands) > 0 && cmd.Action == nil {
		cmd.Action = func(c *cli.Context) error {
			if !c.Args().Present() {
				return cli.ShowSubcommandHelp(c)
			}
			return notACommand(cmd.Subcommands, c.Args().First(), "gatectl "+cmd.Name)
		}
	}
	for _, sub := range cmd.Subcommands {
		withUsageErrors(sub)
	}
}

func categoryOf(cmd *cli.Command) string {
	if cat, ok := categories[cmd.Name]; ok {
		return cat
	}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == "addr" {
				return catServer
			}
		}
	}
	return catConfig
}

// unknownCommand is the app's own action: reached with no command (help) or a
// word that is not one (an error with the nearest command names).
func unknownCommand(c *cli.Context) error {
	if !c.Args().Present() {
		return cli.ShowAppHelp(c)
	}
	return notACommand(c.App.Commands, c.Args().First(), "gatectl")
}

// notACommand is the usage error for word, not one of cmds (the commands of
// parent: "gatectl", "gatectl settings"), with what it may have meant.
func notACommand(cmds []*cli.Command, word, parent string) error {
	msg := fmt.Sprintf("%q is not a %s command", word, parent)
	if s := suggestCommands(cmds, word); len(s) > 0 {
		msg += "; did you mean " + quoteOr(s) + "?"
	}
	return cli.Exit(msg+" ("+parent+" --help lists them)", exitUsage)
}

// suggestCommands returns the visible command names within a small edit
// distance of word (or that it is a prefix of), nearest first.
func suggestCommands(cmds []*cli.Command, word string) []string {
	var names []string
	for _, cmd := range cmds {
		if !cmd.Hidden {
			names = append(names, cmd.Names()...)
		}
	}
	return suggest.Near(word, names)
}

// quoteOr writes ["a" "b" "c"] as `"a", "b" or "c"`.
func quoteOr(s []string) string {
	out := ""
	for i, w := range s {
		switch {
		case i == 0:
		case i == len(s)-1:
			out += " or "
		default:
			out += ", "
		}
		out += fmt.Sprintf("%q", w)
	}
	return out
}

// plural is "1 provider", "2 providers".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
