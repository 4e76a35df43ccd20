package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/snapshot"
)

// runBackoff runs `gatectl backoff args...` and returns stdout and the error.
func runBackoff(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"gatectl", "backoff"}, args...))
	return out.String(), err
}

func writeBackoffConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gatectl.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBackoffDefaultText(t *testing.T) {
	got, err := runBackoff(t)
	if err != nil {
		t.Fatal(err)
	}
	full := strings.Repeat("█", 40)
	want := `retry backoff: 8 rounds · first 2s · ×2 · cap 1m · jitter ±20%

round     wait  longest  cum. longest
    1       2s     2.4s          2.4s  █▍
    2       4s     4.8s          7.2s  ██▋
    3       8s     9.6s         16.8s  █████▍
    4      16s    19.2s           36s  ██████████▋
    5      32s    38.4s       1m14.4s  █████████████████████▍
    6       1m       1m       2m14.4s  ` + full + ` cap
    7       1m       1m       3m14.4s  ` + full + ` cap
    8       1m       1m       4m14.4s  ` + full + ` cap

cumulative wait: 4m2s; longest with jitter (+20% a round, capped): 4m14.4s
a provider's Retry-After replaces a round's wait when under the cap (1m); hints are clamped to 1s–5m
retried: RATE_LIMIT, OVERLOADED, SERVER, TIMEOUT, TRANSPORT
not retried: QUOTA, AUTH, INVALID_REQUEST, CONTEXT, UNKNOWN
QUOTA fails over or waits long-term where pools and quota retry apply
mislabeled 400s: own budget of 3 rounds from 15s, doubling, within 10m of a capacity failure
no HTTP answer, retries by kind (retry.transport): dns 0, refused 1, reset the curve, timeout 1
`
	if got != want {
		t.Errorf("gatectl backoff =\n%s\nwant\n%s", got, want)
	}
}

func TestBackoffJSON(t *testing.T) {
	got, err := runBackoff(t, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var out backoffJSON
	if err := json.Unmarshal([]byte(got), &out); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	if out.Rounds != 8 || len(out.Curve) != 8 || out.TotalMs != 242000 || out.TotalLongestMs != 254400 ||
		out.InitialDelayMs != 2000 || out.MaxDelayMs != 60000 || out.Multiplier != 2 || out.Jitter != 0.2 ||
		out.HintClampMs != [2]int64{1000, 300000} || len(out.RetryOn) != 5 || !out.RespectRetryAfter {
		t.Errorf("json = %+v", out)
	}
	if r := out.Curve[4]; r != (backoffJSONRound{5, 32000, 38400, 62000, 74400}) {
		t.Errorf("round 5 = %+v", r)
	}
}

func TestBackoffConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		args    []string
		want    []string // substrings of stdout
		wantErr string   // substring of the error
	}{
		{
			name: "a tuned curve",
			yaml: "retry:\n  rounds: 4\n  initialDelay: 500ms\n  multiplier: 3\n  maxDelay: 10s\n  jitter: 0\n  retryOn: [RATE_LIMIT, QUOTA]\n",
			want: []string{
				"retry backoff: 4 rounds · first 500ms · ×3 · cap 10s · jitter ±0%",
				"    1    500ms    500ms         500ms  ██\n",
				"    4      10s      10s         16.5s  " + strings.Repeat("█", 40) + " cap\n",
				"cumulative wait: 16.5s; longest with jitter (+0% a round, capped): 16.5s",
				"retried: RATE_LIMIT, QUOTA\n",
				"not retried: OVERLOADED, SERVER, TIMEOUT, TRANSPORT, AUTH, INVALID_REQUEST, CONTEXT, UNKNOWN\n",
			},
		},
		{
			name: "rounds 0",
			yaml: "retry:\n  rounds: 0\n",
			want: []string{"retry.rounds is 0: gatectl never retries on the curve."},
		},
		{
			name: "hints ignored, mislabeled off",
			yaml: "retry:\n  respectRetryAfter: false\n  mislabeled: {enabled: false}\n",
			want: []string{"provider Retry-After hints are ignored (retry.respectRetryAfter: false)"},
		},
		{
			name:    "json with a config",
			yaml:    "retry:\n  rounds: 2\n  jitter: 0.5\n",
			args:    []string{"--format", "json"},
			want:    []string{`"rounds": 2`, `"totalMs": 6000`, `"totalLongestMs": 9000`},
			wantErr: "",
		},
		{
			name:    "an invalid config names the path",
			yaml:    "retry:\n  rounds: 500\n",
			wantErr: "retry.rounds",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", writeBackoffConfig(t, tt.yaml)}, tt.args...)
			got, err := runBackoff(t, args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("output does not contain %q:\n%s", w, got)
				}
			}
			if tt.name == "hints ignored, mislabeled off" && strings.Contains(got, "mislabeled 400s") {
				t.Errorf("mislabeled line printed while off:\n%s", got)
			}
		})
	}
}

func TestBackoffErrors(t *testing.T) {
	if _, err := runBackoff(t, "--format", "xml"); err == nil || !strings.Contains(err.Error(), `--format must be text or json (got "xml")`) {
		t.Errorf("bad format: %v", err)
	}
	if _, err := runBackoff(t, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing config file was accepted")
	}
}

func TestBackoffRetryPolicyFromConfig(t *testing.T) {
	r := config.Default().Retry
	r.Rounds, r.InitialDelay, r.Multiplier, r.MaxDelay, r.Jitter = 5, time.Second, 1.5, 30*time.Second, 0.1
	r.RespectRetryAfter, r.HintlessBackoff = false, true
	r.RetryOn = []engine.Class{"RATE_LIMIT", "AUTH"}
	r.HintClamp.Min, r.HintClamp.Max = 2*time.Second, time.Minute
	r.Mislabeled = config.Mislabeled{Enabled: true, Rounds: 2, InitialDelay: 5 * time.Second, Evidence: time.Minute}
	p, err := snapshot.RetryPolicy(r)
	if err != nil {
		t.Fatal(err)
	}
	want := retry.DefaultPolicy()
	want.Rounds, want.InitialDelay, want.Multiplier, want.MaxDelay, want.Jitter = 5, time.Second, 1.5, 30*time.Second, 0.1
	want.RespectRetryAfter, want.HintlessBackoff = false, true
	want.HintClamp = retry.Clamp{Min: 2 * time.Second, Max: time.Minute}
	want.Mislabeled = retry.Mislabeled{Enabled: true, Rounds: 2, InitialDelay: 5 * time.Second, Evidence: time.Minute}
	want.RetryOn = []engine.Class{engine.ClassRateLimit, engine.ClassAuth}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("policy = %+v\nwant     %+v", p, want)
	}

	r.RetryOn = []engine.Class{"RATE_LIMIT", "NOPE"}
	if _, err := snapshot.RetryPolicy(r); err == nil || !strings.Contains(err.Error(), "retry.retryOn[1]") {
		t.Errorf("unknown class: %v", err)
	}
	r.RetryOn = nil
	r.Jitter = 3
	if _, err := snapshot.RetryPolicy(r); err == nil || !strings.Contains(err.Error(), "retry.jitter") {
		t.Errorf("bad jitter: %v", err)
	}
}
