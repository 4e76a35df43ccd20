// Command gatectl is the rate-limit, retry and quota gate for LLM traffic.
package main

import (
	"errors"
	"fmt"
	"os"

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

// newApp builds the CLI. Tests call it with their own Writer and ErrWriter.
func newApp() *cli.App {
	return &cli.App{
		Name:  "gatectl",
		Usage: "rate-limit, retry and quota gate for LLM traffic",
		Commands: []*cli.Command{
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
		ExitErrHandler: func(c *cli.Context, err error) {}, // errors are returned, main prints them
	}
}
