package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print gatectl's version and the commit it was built from (also: gatectl --version)",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("version: takes no arguments (got %q)", c.Args().Slice()), exitUsage)
			}
			printVersion(c.App.Writer)
			return nil
		},
	}
}

// buildVersion is what the binary knows about itself: the module version (the
// -ldflags one first, then the one `go install …@vX` records) and the VCS
// commit `go build` stamps in a git checkout.
type buildVersion struct {
	Version  string
	Commit   string // "" when the build had no VCS information (go run, go test)
	Time     string
	Modified bool
}

func readBuildVersion() buildVersion { return buildVersionOf(debug.ReadBuildInfo()) }

func buildVersionOf(bi *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: version}
	if !ok || bi == nil {
		return v
	}
	if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// versionString is the short form the help header shows.
func versionString() string { return readBuildVersion().short() }

func (v buildVersion) short() string {
	s := v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (" + c
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s
}

func printVersion(w io.Writer) { readBuildVersion().print(w) }

func (v buildVersion) print(w io.Writer) {
	fmt.Fprintf(w, "gatectl %s %s/%s %s\n", v.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
	switch {
	case v.Commit == "":
		fmt.Fprintln(w, "commit: unknown (no VCS information in this build: `go build` in a git checkout records it, unless -buildvcs=false is set (GOFLAGS); `go run` does not)")
	default:
		mod := ""
		if v.Modified {
			mod = " (with uncommitted changes)"
		}
		fmt.Fprintf(w, "commit: %s%s %s\n", v.Commit, mod, v.Time)
	}
}
