// Package report sums up what the admission gate did: per model, how many calls
// waited, how long in total and at most, for which reasons, the range of the
// token budget, each learner step, and the anomalies (over-budget admissions,
// fail-opens, leak warnings).
//
// A Book is fed the gate's events — live by the server (GET /gate/v1/report),
// or parsed back from a JSON log file by `gatectl report --log` — and answers
// for any period up to its retention. It is bounded whatever it is fed: counters
// sit in one-minute slots kept for Retention, at most MaxModels models are told
// apart (the rest count under OtherModel), and each model keeps its last
// MaxSteps learner steps and MaxAnomalies anomalies. A Book is safe for
// concurrent use.
package report

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// Bounds of a Book.
const (
	// Slot is the granularity of a period: ?since=90s covers two slots.
	Slot = time.Minute
	// Retention is how far back a period can reach in slots; a longer one (or
	// none) is answered from the counters since the start, which never expire.
	Retention = 24 * time.Hour
	// MaxModels models are told apart; later ones count under OtherModel.
	MaxModels = 1000
	// MaxSteps learner steps are kept per model, the newest.
	MaxSteps = 100
	// MaxAnomalies anomalies are kept per model, the newest.
	MaxAnomalies = 20
)

// OtherModel is the name the models past MaxModels are counted under.
const OtherModel = "(other models)"

// Kinds of events a Book counts; they are the gate's event kinds.
const (
	KindWait        = "wait"
	KindAdmitted    = "admitted"
	KindFailOpen    = "fail-open"
	KindOverBudget  = "over-budget"
	KindRateLimited = "rate-limited"
	KindLearn       = "learn"
	KindLeak        = "leak"
)

// Event is one gate event as the report needs it.
type Event struct {
	Kind  string
	At    time.Time
	Model string // "provider/model"
	// Reason is why a call waited or failed open.
	Reason string
	// Wait is the real wait of an admitted call.
	Wait time.Duration
	// TokenBudget is the model's effective token budget then; 0 when unknown.
	TokenBudget int64
	// Learn and leak events.
	Step     string
	From, To int64
	Quota    int64
	Trigger  int64
}

// Step is one move of the learner.
type Step struct {
	At      time.Time `json:"at"`
	Step    string    `json:"step"` // cut, probe, relax, trigger, reset, …
	From    int64     `json:"from"`
	To      int64     `json:"to"`
	Quota   int64     `json:"quota,omitempty"`
	Trigger int64     `json:"trigger,omitempty"`
}

// Anomaly is one over-budget admission, fail-open or leak warning.
type Anomaly struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // over-budget, fail-open, leak
	Reason string    `json:"reason,omitempty"`
	WaitMs int64     `json:"waitMs,omitempty"`
	From   int64     `json:"from,omitempty"` // leak: the clean window
	To     int64     `json:"to,omitempty"`   // leak: the trigger
}

// Range is the lowest and highest value seen.
type Range struct {
	Min int64 `json:"min"`
	Max int64 `json:"max"`
}

// Model is one model's summary over the period.
type Model struct {
	Model string `json:"model"`
	// Waited is how many calls were admitted after a wait; WaitTotalMs and
	// WaitMaxMs sum and bound their waits; Reasons counts them by reason.
	Waited      int64            `json:"waited"`
	WaitTotalMs int64            `json:"waitTotalMs"`
	WaitMaxMs   int64            `json:"waitMaxMs"`
	Reasons     map[string]int64 `json:"reasons,omitempty"`
	// Budget is the range of the effective token budget the events reported.
	Budget      *Range `json:"budget,omitempty"`
	RateLimited int64  `json:"rateLimited"`
	OverBudget  int64  `json:"overBudget"`
	FailOpen    int64  `json:"failOpen"`
	Leaks       int64  `json:"leaks"`
	// Steps are the learner's moves in the period, oldest first (at most MaxSteps).
	Steps []Step `json:"steps,omitempty"`
	// Anomalies are the latest over-budget admissions, fail-opens and leak
	// warnings of the period, oldest first (at most MaxAnomalies).
	Anomalies []Anomaly `json:"anomalies,omitempty"`
}

// Report is what the gate did in a period.
type Report struct {
	// From and To bound the period; From is the start of the counters when the
	// period reaches further back than the book remembers.
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Events int64     `json:"events"`
	Models []Model   `json:"models"`
}

// counts are the counters of one model over one slot (or since the start).
type counts struct {
	waited, waitTotal, waitMax int64 // waits in ms
	reasons                    map[string]int64
	budget                     *Range
	rateLimited, overBudget    int64
	failOpen, leaks, events    int64
}

func (c *counts) add(e *Event) {
	c.events++
	if e.TokenBudget > 0 {
		if c.budget == nil {
			c.budget = &Range{Min: e.TokenBudget, Max: e.TokenBudget}
		}
		c.budget.Min = min(c.budget.Min, e.TokenBudget)
		c.budget.Max = max(c.budget.Max, e.TokenBudget)
	}
	switch e.Kind {
	case KindAdmitted:
		ms := e.Wait.Milliseconds()
		c.waited++
		c.waitTotal += ms
		c.waitMax = max(c.waitMax, ms)
		if c.reasons == nil {
			c.reasons = map[string]int64{}
		}
		c.reasons[reasonKey(e.Reason)]++
	case KindRateLimited:
		c.rateLimited++
	case KindOverBudget:
		c.overBudget++
	case KindFailOpen:
		c.failOpen++
	case KindLeak:
		c.leaks++
	}
}

// reasonKey bounds the reasons: the gate's are few, but a log file may say anything.
func reasonKey(r string) string {
	if r == "" {
		return "unknown"
	}
	if len(r) > 64 {
		return r[:64]
	}
	return r
}

func (c *counts) merge(o *counts) {
	c.waited += o.waited
	c.waitTotal += o.waitTotal
	c.waitMax = max(c.waitMax, o.waitMax)
	for k, v := range o.reasons {
		if c.reasons == nil {
			c.reasons = map[string]int64{}
		}
		c.reasons[k] += v
	}
	if o.budget != nil {
		if c.budget == nil {
			r := *o.budget
			c.budget = &r
		} else {
			c.budget.Min = min(c.budget.Min, o.budget.Min)
			c.budget.Max = max(c.budget.Max, o.budget.Max)
		}
	}
	c.rateLimited += o.rateLimited
	c.overBudget += o.overBudget
	c.failOpen += o.failOpen
	c.leaks += o.leaks
	c.events += o.events
}

// slot is one minute of counters, by model.
type slot struct {
	start  time.Time
	models map[string]*counts
}

// history is what a model keeps besides counters: its newest steps and anomalies.
type history struct {
	steps     []Step
	anomalies []Anomaly
}

// Book aggregates gate events. The zero value is not usable; see New.
type Book struct {
	mu      sync.Mutex
	start   time.Time // first event (or New's start)
	life    map[string]*counts
	slots   []slot // oldest first, each Slot long, within Retention of the newest
	hist    map[string]*history
	lastAt  time.Time
	started bool
}

// New returns an empty book whose counters start at start (zero: at the first event).
func New(start time.Time) *Book {
	return &Book{start: start, started: !start.IsZero(), life: map[string]*counts{}, hist: map[string]*history{}}
}

// Observe counts one event. Events of kind "wait" (a call held, its wait still
// ahead) are not counted: its admission is.
func (b *Book) Observe(e Event) {
	if e.Kind == KindWait || e.Kind == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		b.start, b.started = e.At, true
	}
	if e.At.After(b.lastAt) {
		b.lastAt = e.At
	}
	name := b.modelName(e.Model)
	e.Model = name
	lc := b.life[name]
	if lc == nil {
		lc = &counts{}
		b.life[name] = lc
	}
	lc.add(&e)
	b.slotFor(e.At).add(name, &e)
	b.record(name, &e)
}

// modelName is model, or OtherModel once MaxModels models are known. mu is held.
func (b *Book) modelName(m string) string {
	if m == "" {
		m = "(unknown)"
	}
	if _, ok := b.life[m]; ok || len(b.life) < MaxModels {
		return m
	}
	return OtherModel
}

// slotFor returns the slot of t, making it (and dropping slots past Retention)
// as needed. An event older than every slot counts in the oldest. mu is held.
func (b *Book) slotFor(t time.Time) *slot {
	start := t.Truncate(Slot)
	n := len(b.slots)
	if n > 0 && !start.After(b.slots[n-1].start) {
		for i := n - 1; i >= 0; i-- {
			if !start.Before(b.slots[i].start) {
				return &b.slots[i]
			}
		}
		return &b.slots[0]
	}
	b.slots = append(b.slots, slot{start: start, models: map[string]*counts{}})
	cut := 0
	for cut < len(b.slots) && b.slots[cut].start.Before(start.Add(-Retention)) {
		cut++
	}
	if cut > 0 {
		b.slots = slices.Delete(b.slots, 0, cut)
	}
	return &b.slots[len(b.slots)-1]
}

func (s *slot) add(model string, e *Event) {
	c := s.models[model]
	if c == nil {
		c = &counts{}
		s.models[model] = c
	}
	c.add(e)
}

// record keeps learner steps and anomalies. mu is held.
func (b *Book) record(model string, e *Event) {
	h := b.hist[model]
	if h == nil {
		h = &history{}
		b.hist[model] = h
	}
	switch e.Kind {
	case KindLearn:
		h.steps = appendBounded(h.steps, Step{At: e.At, Step: e.Step, From: e.From, To: e.To, Quota: e.Quota, Trigger: e.Trigger}, MaxSteps)
	case KindOverBudget, KindFailOpen:
		h.anomalies = appendBounded(h.anomalies, Anomaly{At: e.At, Kind: e.Kind, Reason: e.Reason, WaitMs: e.Wait.Milliseconds()}, MaxAnomalies)
	case KindLeak:
		h.anomalies = appendBounded(h.anomalies, Anomaly{At: e.At, Kind: e.Kind, From: e.From, To: e.To}, MaxAnomalies)
	}
}

func appendBounded[T any](s []T, v T, limit int) []T {
	if len(s) >= limit {
		s = slices.Delete(s, 0, len(s)-limit+1)
	}
	return append(s, v)
}

// Report answers for the period of length since ending at now; since <= 0
// means since the start. A period reaching past Retention is answered from the
// counters since the start.
func (b *Book) Report(now time.Time, since time.Duration) Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := Report{From: b.start, To: now, Models: []Model{}}
	var from time.Time
	sum := b.life
	if since > 0 && since <= Retention {
		// The counters are kept in whole slots: the period starts at the slot
		// that holds now-since, and says so, and the steps and anomalies are
		// read over the same period as the counts.
		from = now.Add(-since).Truncate(Slot)
		if from.After(b.start) { // a period reaching before the start begins with it
			r.From = from
		}
		sum = map[string]*counts{}
		lo := from
		for i := range b.slots {
			if b.slots[i].start.Before(lo) || b.slots[i].start.After(now) {
				continue
			}
			for m, c := range b.slots[i].models {
				acc := sum[m]
				if acc == nil {
					acc = &counts{}
					sum[m] = acc
				}
				acc.merge(c)
			}
		}
	}
	for _, m := range slices.Sorted(maps.Keys(sum)) {
		c := sum[m]
		r.Events += c.events
		mr := Model{Model: m, Waited: c.waited, WaitTotalMs: c.waitTotal, WaitMaxMs: c.waitMax,
			Reasons: maps.Clone(c.reasons), RateLimited: c.rateLimited, OverBudget: c.overBudget,
			FailOpen: c.failOpen, Leaks: c.leaks}
		if c.budget != nil {
			rg := *c.budget
			mr.Budget = &rg
		}
		if h := b.hist[m]; h != nil {
			for _, s := range h.steps {
				if !s.At.Before(from) {
					mr.Steps = append(mr.Steps, s)
				}
			}
			for _, a := range h.anomalies {
				if !a.At.Before(from) {
					mr.Anomalies = append(mr.Anomalies, a)
				}
			}
		}
		r.Models = append(r.Models, mr)
	}
	sort.SliceStable(r.Models, func(i, j int) bool { return r.Models[i].Model < r.Models[j].Model })
	return r
}

// Last is the time of the newest event observed (zero: none).
func (b *Book) Last() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastAt
}
