package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/gatectl/gatectl/config"
)

// Summary is the effective settings as log key/values, for the one info line the
// server writes at start and after each reload or settings change: the gate
// with its window and margins, the retry curve, the quota handling. Durations
// are strings ("1m0s"), so a JSON log shows them as the text log does.
func Summary(c *config.Config) []any {
	g, r, q := c.Gate, c.Retry, c.Quota
	safety := "derived"
	if g.SafetyFactor > 0 {
		safety = fmt.Sprint(g.SafetyFactor)
	}
	pace := "off"
	if g.Pace > 0 {
		pace = fmt.Sprintf("%g× budget, burst %g", g.Pace, g.PaceBurst)
	}
	retryOn := make([]string, len(r.RetryOn))
	for i, cl := range r.RetryOn {
		retryOn[i] = string(cl)
	}
	return []any{
		"gate", "active", "window", g.Window.String(), "safety", safety, "pace", pace, "max_wait", g.MaxWait.String(),
		"learn", g.Learn, "default_tpm", g.Defaults.TPM, "default_rpm", g.Defaults.RPM, "models", len(g.Models),
		"retry_rounds", r.Rounds, "retry_curve", curve(r.InitialDelay, r.Multiplier, r.MaxDelay, r.Jitter),
		"retry_on", strings.Join(retryOn, ","), "respect_retry_after", r.RespectRetryAfter,
		"mislabeled_rounds", mislabeled(c),
		"quota_enabled", q.DefaultEnabled, "quota_long_term_delay", q.LongTermDelay.String(),
		"quota_exhausted_cooldown", q.ExhaustedCooldown.String(), "quota_fail_open", q.FailOpen,
	}
}

func curve(initial time.Duration, mult float64, maxDelay time.Duration, jitter float64) string {
	return fmt.Sprintf("%s×%g up to %s ±%g%%", initial, mult, maxDelay, jitter*100)
}

func mislabeled(c *config.Config) any {
	if !c.Retry.Mislabeled.Enabled {
		return "off"
	}
	return c.Retry.Mislabeled.Rounds
}
