package gate

import "time"

// EventKind names what a Event reports.
type EventKind string

// Gate events. A call that did not wait produces none (so the log stays
// quiet for normal calls).
const (
	EventWait        EventKind = "wait"        // a call was held back; Wait is the expected wait
	EventAdmitted    EventKind = "admitted"    // a held call was let through; Wait is the real wait
	EventFailOpen    EventKind = "fail-open"   // admitted without waiting because waiting would break the gate's promise
	EventOverBudget  EventKind = "over-budget" // a reservation larger than the whole budget, admitted without waiting for the window
	EventRateLimited EventKind = "rate-limited"
	EventLearn       EventKind = "learn" // the learned quota or trigger moved; Step says how
	EventLeak        EventKind = "leak"  // a trigger below a clean window: another client spends the same key
)

// Event is one line of the gate's visibility (the log lines), also
// streamed by the server's event feed.
type Event struct {
	Kind     EventKind
	At       time.Time
	Provider string
	Model    string
	Session  string
	// Reason is why a call waited or failed open: cooldown, tpm, rpm, otpm, pace, over-budget,
	// session-cap, queue, store, max-wait, no-bucket, internal.
	Reason       string
	Wait         time.Duration
	WindowTokens int64
	TokenBudget  int64 // min(quota, trigger, maxTpm, the room the others leave) × safety factor
	Reservation  int64
	Quota        float64
	Start        float64
	Trigger      float64 // 0: not observed
	Requests     int
	RPMBudget    int
	CooldownLeft time.Duration
	// Learn events.
	// Step: cut, probe, relax, revert, trigger, leak, suspect, rate,
	// calibrate, count-mode, decides (Reason known or whole, learned from the
	// rate-limit headers; To is the slope it read), reset, unstated,
	// unstated-rpm, rpm-ceiling, rpm-probe (From and To are then the request
	// limit per window, not the budget), reread-requests (unnamed 429s read
	// as tokens were the request limit's: From and To are the token budget
	// before and after what they taught it was taken back), output-stated,
	// output-trigger, output-relax (the output axis: From and To are its
	// limit per window; output.go).
	Step string
	From float64
	To   float64
	// Rate-limited events.
	RetryAfter   time.Duration
	FromFallback bool
}
