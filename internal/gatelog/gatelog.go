// Package gatelog turns the admission gate's events into log lines. A held call
// is silent to its client, so every wait must leave a trace, yet routine calls must
// not drown the log: nothing for a call that did not wait; one line per wait and per
// admission after a wait; one per 429, per learner step and for the leak signal.
package gatelog

import (
	"fmt"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/hashicorp/go-hclog"
)

// Every line carries "event" (the gate's event kind) and, where there is a wait,
// "wait_ms": with `log.format: json` the lines are what `gatectl report --log`
// reads back, so each must hold what the report counts.

// Hook returns an engine event hook that logs through logger.
func Hook(logger hclog.Logger) func(gate.Event) {
	return func(e gate.Event) {
		model := e.Provider + "/" + e.Model
		logger := logger.With("event", string(e.Kind))
		switch e.Kind {
		case gate.EventWait:
			logger.Info("holding call", append(reading(e), "model", model, "session", e.Session, "reason", e.Reason, "expected_wait", e.Wait.Round(time.Millisecond), "wait_ms", e.Wait.Milliseconds())...)
		case gate.EventAdmitted:
			logger.Info("admitted after wait", append(reading(e), "model", model, "session", e.Session, "reason", e.Reason, "waited", e.Wait.Round(time.Millisecond), "wait_ms", e.Wait.Milliseconds())...)
		case gate.EventFailOpen:
			logger.Warn("admitted without waiting (fail-open)", append(reading(e), "model", model, "session", e.Session, "reason", e.Reason, "wait", e.Wait.Round(time.Millisecond), "wait_ms", e.Wait.Milliseconds())...)
		case gate.EventOverBudget:
			logger.Warn("reservation exceeds the whole budget: admitted without waiting for the window to fit it (under a maxTpm it waits for an empty one)", append(reading(e), "model", model, "session", e.Session, "reason", e.Reason, "wait_ms", e.Wait.Milliseconds())...)
		case gate.EventRateLimited:
			src := "provider"
			if e.FromFallback {
				src = "fallback"
			}
			logger.Warn("rate limited: cooling down", "model", model, "cooldown", e.RetryAfter, "cooldown_from", src, "scope", scope(e))
		case gate.EventLearn:
			if e.Step == "decides" || e.Step == "count-mode" {
				// How the provider counts, not a figure: what it is taken to do now.
				kv := []any{"model", model, "step", e.Step, "now", e.Reason}
				if e.Step == "decides" {
					kv = append(kv, "slope", fmt.Sprintf("%.2f", e.To))
				}
				logger.Info("learned how the provider counts", kv...)
				return
			}
			// The fields stay what `gatectl report --log` reads back (step,
			// from, to, quota, trigger); only the words say what happened.
			switch e.Step {
			case "suspect":
				// Nothing moved: the 429 was not read as the limit.
				logger.Info("429 not taken as the limit: read below what the model is known to carry (a stated limit, or a window that passed without one), so timing or another client; cooling down, the learned quota stays",
					"model", model, "step", e.Step, "from", int64(e.From), "to", int64(e.To), "quota", int64(e.Quota), "trigger", trigger(e), "start", int64(e.Start), "token_budget", e.TokenBudget)
			case "reset":
				logger.Info("learned quota forgotten (reset): back to the start", "model", model, "step", e.Step, "from", int64(e.From), "to", int64(e.To), "quota", int64(e.Quota), "trigger", trigger(e), "start", int64(e.Start), "token_budget", e.TokenBudget)
			default:
				logger.Info("learned quota moved", "model", model, "step", e.Step, "from", int64(e.From), "to", int64(e.To), "quota", int64(e.Quota), "trigger", trigger(e), "start", int64(e.Start), "token_budget", e.TokenBudget)
			}
		case gate.EventLeak:
			logger.Warn("429 below a window that passed without one: another client is spending the same key; the learned upper bound is not trustworthy",
				"model", model, "clean_window", int64(e.From), "trigger", int64(e.To))
		}
	}
}

// reading is the window state logged with every wait.
func reading(e gate.Event) []any {
	return []any{
		"window_tokens", e.WindowTokens, "token_budget", e.TokenBudget, "reservation", e.Reservation,
		"quota", int64(e.Quota), "start", int64(e.Start), "trigger", trigger(e),
		"requests", e.Requests, "rpm_budget", e.RPMBudget, "cooldown_left", e.CooldownLeft.Round(time.Millisecond),
	}
}

func trigger(e gate.Event) any {
	if e.Trigger == 0 {
		return "not observed"
	}
	return int64(e.Trigger)
}

func scope(e gate.Event) string {
	if e.Model == "" {
		return "provider"
	}
	return "model"
}
