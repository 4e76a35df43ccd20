package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate sessions against a provider with a hidden quota (oracle, gate, naive)",
		Action: func(c *cli.Context) error {
			return errors.New("sim: not built yet")
		},
	}
}
