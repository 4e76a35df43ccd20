package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// An empty config file is not the embedded default: `check` and `serve` refuse
// it, naming the file, and exit non-zero. Only "no --config at all" is the default.
func TestEmptyConfigFileIsRefused(t *testing.T) {
	for name, content := range map[string]string{
		"empty":         "",
		"whitespace":    "\n   \n\n",
		"comments only": "# providers:\n#   deepseek: {kind: openai}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gatectl.yaml")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"check", "--config", path},
				{"serve", "--config", path, "--listen", "127.0.0.1:0", "--state-dir", t.TempDir()},
			} {
				out, errOut, err := runGatectl(t, "", args...)
				var exit cli.ExitCoder
				if err == nil || !errors.As(err, &exit) || exit.ExitCode() == 0 {
					t.Fatalf("%s: err = %v, want a non-zero exit\nstdout: %s", args[0], err, out)
				}
				msg := errOut + err.Error()
				if !strings.Contains(msg, path) || !strings.Contains(msg, "the file is empty") {
					t.Errorf("%s: the error should name %s and say it is empty:\n%s", args[0], path, msg)
				}
				if strings.Contains(out, "ok —") {
					t.Errorf("%s: reported ok: %s", args[0], out)
				}
			}
		})
	}
	// No config file at all still runs on the embedded default.
	out, _, err := runGatectl(t, "", "check")
	if err != nil || !strings.Contains(out, "(embedded default): ok") {
		t.Errorf("check without --config: %v\n%s", err, out)
	}
}
