// Package gate is the admission gate: a ledger that decides when a call to a
// provider/model may be sent, so that many sessions share a quota they never
// see without the provider saying 429.
//
// # Model
//
// Each provider/model has a bucket. A bucket holds a sliding window of the
// calls it admitted — a reservation (input estimate + output reserve) while a
// call is in flight, its real usage once settled — and admits a call when
//
//	window + reservation + margin ≤ budget
//
// and its request count fits the request budget, and no cooldown runs. The
// budget is min(learned quota, trigger) × factor (held under the room other
// clients on the key leave, when the headers say they spend): the quota starts at the
// configured TPM (or the limit the provider states in its headers) and is
// learned from 429s; the trigger is the window reading at the last believed 429;
// factor is the user's safety factor when set, else 0.99. The margin is a few
// standard deviations of what the calls in flight will really cost, pooled over
// all of them. A call that does not fit waits in a fair queue (priority, then
// round-robin across sessions, FIFO within one), and grants are paced so a
// drained window never releases the whole queue in one instant.
//
// A provider may count a call when it arrives or when it completes. The bucket
// keeps both views — calls by admission time, and settled calls by settle time
// — and learns from where 429s fall which one the provider behaves like.
//
// # Invariants
//
//   - A cooldown is never shortened by a later, shorter one.
//   - The quota is cut at most once per window, and never below start ÷ 16.
//   - A reservation never goes below the request's own max_tokens.
//   - A 429 whose reading is far below what the provider is known to carry (a
//     stated limit, a window that passed cleanly) cools the model down but does
//     not become its trigger unless it repeats.
//   - The gate fails open: past maxWait, for a call it has no bucket for, or on
//     an internal panic, a call is admitted with FailOpen set. It never becomes
//     the outage.
//   - A call larger than the whole budget is admitted without waiting for the
//     window (it could never fit), but still waits out a cooldown.
//
// The reasons are in docs/RATIONALE.md.
//
// # Concurrency
//
// A Ledger is safe for concurrent use. Buckets are spread over shards, each with
// its own lock, and each bucket has its own mutex: calls on different models do
// not contend. Every method that depends on time takes now, or reads the
// injected engine.Clock; Admit is the only method that sleeps, on that clock's
// timers, so tests advance a fake clock instead of sleeping. Submit and
// Waiter.Poll are the same decisions without blocking, for the simulator and the
// decision API.
package gate
