// The retry curve as the engine computes it (retry.Policy.BaseDelay and Curve):
// round n waits min(initialDelay·multiplierⁿ⁻¹, maxDelay); with jitter its
// longest wait is that × (1 + jitter), capped by maxDelay. validate mirrors
// retry.Policy.Validate, so the editor says what the server would refuse before
// it is sent; the server's answer still decides.
import { parseDuration } from "/ui/util.js";

export const maxRounds = 200;

export function curve(p) {
  const pts = [];
  let cum = 0;
  let cumLongest = 0;
  let initial = Math.min(p.initialDelay, p.maxDelay);
  for (let n = 1; n <= p.rounds; n++) {
    const delay = Math.min(initial * Math.pow(p.multiplier, n - 1), p.maxDelay);
    const longest = p.jitter > 0 ? Math.min(delay * (1 + p.jitter), p.maxDelay) : delay;
    cum += delay;
    cumLongest += longest;
    pts.push({ round: n, delay, longest, cum, cumLongest });
  }
  return pts;
}

// validate reads the editor's text fields: {values, errors: {field: message}, warnings}.
export function validate(text) {
  const errors = {};
  const warnings = [];
  const v = {};
  const rounds = String(text.rounds).trim();
  if (!/^\d+$/.test(rounds)) errors.rounds = `retry.rounds: must be a whole number between 0 and ${maxRounds} (got ${JSON.stringify(rounds)})`;
  else if (+rounds > maxRounds) errors.rounds = `retry.rounds: must be between 0 and ${maxRounds} (got ${rounds})`;
  else v.rounds = +rounds;
  for (const k of ["initialDelay", "maxDelay"]) {
    try {
      const ms = parseDuration(text[k]);
      if (ms <= 0) errors[k] = `retry.${k}: must be > 0 (got ${text[k]})`;
      else v[k] = ms;
    } catch (e) {
      errors[k] = `retry.${k}: ${e.message}`;
    }
  }
  const mult = Number(String(text.multiplier).trim());
  if (String(text.multiplier).trim() === "" || !Number.isFinite(mult) || mult < 1) {
    errors.multiplier = `retry.multiplier: must be a finite number >= 1 (got ${JSON.stringify(String(text.multiplier))})`;
  } else v.multiplier = mult;
  const jit = Number(String(text.jitter).trim());
  if (String(text.jitter).trim() === "" || !Number.isFinite(jit) || jit < 0 || jit > 1) {
    errors.jitter = `retry.jitter: must be between 0 and 1 (got ${JSON.stringify(String(text.jitter))})`;
  } else v.jitter = jit;
  if (v.initialDelay > v.maxDelay) {
    warnings.push(`initialDelay exceeds maxDelay: the first wait is capped at maxDelay`);
  }
  return { values: v, errors, warnings };
}
