package retry

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Stats counts what the retry planner decided. Retries and MislabeledRetries are
// kept apart, like their budgets, so 429 retries and circuit replays can be told
// apart; ByProvider counts both.
type Stats struct {
	// Retries is how many retries were planned on the main budget, RATE_LIMIT
	// retries through the gate included.
	Retries int64 `json:"retries"`
	// MislabeledRetries is how many were planned on the mislabeled budget.
	MislabeledRetries int64 `json:"mislabeledRetries"`
	// Waited sums the planned waits of those retries. A rate limit's wait happens in
	// the gate's next admission, which the ledger reports, so it adds 0 here; so do
	// long-term QUOTA waits, counted in LongTermWaits.
	Waited time.Duration `json:"-"`
	// GaveUp is how many failures were given up because a budget was spent.
	GaveUp int64 `json:"gaveUp"`
	// NotRetried is how many failures were given up because their class is not
	// retried (AUTH, CONTEXT, a 400 outside the mislabeled window, ...).
	NotRetried int64 `json:"notRetried"`
	// HintlessCapacity counts capacity failures (RATE_LIMIT, OVERLOADED, SERVER)
	// that came without a wait hint, whatever was decided for them.
	HintlessCapacity int64 `json:"hintlessCapacity"`
	// Failovers and LongTermWaits count QUOTA failures moved to another route and
	// waited out long-term.
	Failovers     int64 `json:"failovers"`
	LongTermWaits int64 `json:"longTermWaits"`
	// ByProvider counts retries (both budgets) per provider; nil when there are none.
	ByProvider map[string]int64 `json:"byProvider,omitempty"`
	// ByClass counts retries (both budgets) per failure class; nil when there are none.
	ByClass map[engine.Class]int64 `json:"byClass,omitempty"`
	// Last is the last decision; nil when there is none.
	Last *Event `json:"last,omitempty"`
}

// Event is one decision of the planner with the failure it answered.
type Event struct {
	At       time.Time `json:"at"`
	Session  string    `json:"session"`
	Turn     string    `json:"turn"`
	Step     int       `json:"step"`
	Provider string    `json:"provider"`
	Model    string    `json:"model,omitempty"`
	Action   Action    `json:"action"`
}

// TurnStats is one session's counters for its current turn.
type TurnStats struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Stats   Stats  `json:"stats"`
}

// StatsSnapshot is a copy of the planner's counters: the lifetime ones and, per
// session, those of the session's current turn (a new turn starts them at zero).
type StatsSnapshot struct {
	Lifetime Stats                `json:"lifetime"`
	Turns    map[string]TurnStats `json:"turns"`
}

// MarshalJSON adds waitedMs to the JSON form.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats // drops this method
	return json.Marshal(struct {
		plain
		WaitedMs int64 `json:"waitedMs"`
	}{plain(s), s.Waited.Milliseconds()})
}

// UnmarshalJSON reads the JSON form back, waitedMs included.
func (s *Stats) UnmarshalJSON(b []byte) error {
	type plain Stats
	var v struct {
		plain
		WaitedMs int64 `json:"waitedMs"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Stats(v.plain)
	s.Waited = time.Duration(v.WaitedMs) * time.Millisecond
	return nil
}

// String renders the counters on one line:
//
//	retries 3 | waited 1m24s | gave up 1 | no-hint capacity failures 2 | mislabeled 400 retries 1 | nuaa×4 | last: nuaa 15s (1/3) — mislabeled 400
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "retries %d | waited %s | gave up %d | not retried %d | no-hint capacity failures %d | mislabeled 400 retries %d",
		s.Retries, s.Waited.Round(time.Millisecond), s.GaveUp, s.NotRetried, s.HintlessCapacity, s.MislabeledRetries)
	if s.Failovers > 0 || s.LongTermWaits > 0 {
		fmt.Fprintf(&b, " | failovers %d | long-term waits %d", s.Failovers, s.LongTermWaits)
	}
	if len(s.ByProvider) > 0 {
		b.WriteString(" |")
		for _, p := range slices.Sorted(maps.Keys(s.ByProvider)) {
			fmt.Fprintf(&b, " %s×%d", p, s.ByProvider[p])
		}
	}
	if e := s.Last; e != nil {
		a := e.Action
		fmt.Fprintf(&b, " | last: %s %s", e.Provider, a.Kind)
		if a.Kind == ActionRetry || a.Kind == ActionWaitLongTerm {
			fmt.Fprintf(&b, " %s", a.Delay)
		}
		if a.Rounds > 0 {
			fmt.Fprintf(&b, " (%d/%d)", a.Round, a.Rounds)
		}
		fmt.Fprintf(&b, " — %s", a.Reason)
	}
	return b.String()
}

func (s *Stats) clone() Stats {
	c := *s
	if s.ByProvider != nil {
		c.ByProvider = maps.Clone(s.ByProvider)
	}
	if s.ByClass != nil {
		c.ByClass = maps.Clone(s.ByClass)
	}
	if s.Last != nil {
		l := *s.Last
		c.Last = &l
	}
	return c
}

// add counts one decision. ev.Action.Kind and ev.Action.Budget tell what it was.
func (s *Stats) add(ev *Event, hintless bool) {
	a := &ev.Action
	if hintless {
		s.HintlessCapacity++
	}
	switch a.Kind {
	case ActionRetry:
		if a.Budget == BudgetMislabeled {
			s.MislabeledRetries++
		} else {
			s.Retries++
		}
		s.Waited += a.Delay
		if s.ByProvider == nil {
			s.ByProvider = make(map[string]int64)
		}
		s.ByProvider[ev.Provider]++
		if s.ByClass == nil {
			s.ByClass = make(map[engine.Class]int64)
		}
		s.ByClass[a.Class]++
	case ActionFailover:
		s.Failovers++
	case ActionWaitLongTerm:
		s.LongTermWaits++
	case ActionGiveUp:
		if a.Exhausted {
			s.GaveUp++
		} else {
			s.NotRetried++
		}
	}
	s.Last = ev
}

// retryStatsBook holds the planner's counters. Safe for concurrent use.
type retryStatsBook struct {
	mu    sync.Mutex
	life  Stats
	turns map[string]*retryTurnBook // by session; nil until the first decision
}

type retryTurnBook struct {
	turn  string
	seen  time.Time // when the session last had a decision (Prune uses it)
	stats Stats
}

// record counts ev in the lifetime and the session's turn counters. ev must not be
// changed afterwards: Last points to it (snapshots copy it).
//
// added reports that the session is new to the book.
func (b *retryStatsBook) record(ev *Event, hintless bool) (added bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.life.add(ev, hintless)
	if b.turns == nil {
		b.turns = make(map[string]*retryTurnBook)
	}
	t := b.turns[ev.Session]
	if t == nil {
		if len(b.turns) >= maxTurnBooks {
			b.dropOldestLocked(maxTurnBooks / 8)
		}
		t = &retryTurnBook{turn: ev.Turn}
		b.turns[ev.Session] = t
		added = true
	}
	if t.turn != ev.Turn {
		*t = retryTurnBook{turn: ev.Turn}
	}
	t.seen = ev.At
	t.stats.add(ev, hintless)
	return added
}

func (b *retryStatsBook) snapshot() StatsSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := StatsSnapshot{Lifetime: b.life.clone(), Turns: make(map[string]TurnStats, len(b.turns))}
	for sess, t := range b.turns {
		s.Turns[sess] = TurnStats{Session: sess, Turn: t.turn, Stats: t.stats.clone()}
	}
	return s
}

// lifetime copies the lifetime counters alone: /metrics reads them on every
// scrape, and copying every session's turn for that would cost O(sessions).
func (b *retryStatsBook) lifetime() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.life.clone()
}

func (b *retryStatsBook) session(sess string) (TurnStats, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.turns[sess]
	if !ok {
		return TurnStats{}, false
	}
	return TurnStats{Session: sess, Turn: t.turn, Stats: t.stats.clone()}, true
}

// maxTurnBooks bounds the sessions whose turn counters are kept. Session names
// are the client's, and the idle sweep (Planner.Prune) waits a day: a client
// inventing one per request must not grow the book for that long. Past the
// bound, the eighth of them with the oldest decisions go.
const maxTurnBooks = 1 << 16

// dropOldestLocked forgets the n sessions with the oldest last decision.
func (b *retryStatsBook) dropOldestLocked(n int) {
	ids := slices.Collect(maps.Keys(b.turns))
	slices.SortFunc(ids, func(x, y string) int { return b.turns[x].seen.Compare(b.turns[y].seen) })
	for _, id := range ids[:min(n, len(ids))] {
		delete(b.turns, id)
	}
}

// prune forgets the turn counters of sessions with no decision since before.
func (b *retryStatsBook) prune(before time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for sess, t := range b.turns {
		if t.seen.Before(before) {
			delete(b.turns, sess)
			n++
		}
	}
	return n
}
