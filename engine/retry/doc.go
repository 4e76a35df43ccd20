// Package retry plans what to do after a failed call: retry after a delay, fail
// over to another route, wait long-term for a spent allowance, or give up.
//
// # Model
//
// A Policy is the deployment's retry curve (rounds, initial delay, multiplier,
// cap, jitter), which classes it retries, how it clamps a provider's wait hint,
// and the separate budget for MISLABELED replays. The Planner applies it to one
// classified failure at a time: Plan takes the verdict and the session, turn and
// step it belongs to, and returns an Action.
//
//   - RATE_LIMIT: the cooldown is recorded in the gate (an engine.RateLimitSink),
//     which holds every session on the model; the call retries through admission
//     instead of sleeping on its own.
//   - QUOTA: handed to a QuotaRouter (the route pools), which fails over or arms
//     a long-term wait.
//   - MISLABELED (a 400 that is really a capacity problem): replays on its own
//     small budget.
//   - other retryable classes: the curve, or the provider's hint when it gave one.
//
// Budgets are counted per session, turn and step (BudgetKey) in a BudgetStore,
// so one session's storm cannot spend another's retries, and a restart does not
// refill them when the store persists. Stats records every decision.
//
// # Invariants
//
//   - A session never retries more rounds than its budget allows; a spent budget
//     answers give-up, never an unbounded loop.
//   - Every rate limit reaches the gate, whatever the session's budget.
//   - A store error does not fail the plan: the planner goes on in memory.
//
// # Concurrency
//
// A Planner is safe for concurrent use. One budget key's load-modify-save is
// serialised by a striped lock; different keys do not contend. Time is an input
// (Plan takes now) and jitter comes from an injected engine.Rand.
package retry
