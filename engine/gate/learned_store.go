package gate

import (
	"sync"
	"time"
)

// LearnedQuota is one model's learned state, as a shared store would hold it.
type LearnedQuota struct {
	Quota   float64   `json:"quota"`
	Trigger float64   `json:"trigger"` // 0: not observed
	LastCut time.Time `json:"lastCut"`
	Last429 time.Time `json:"last429"`

	// The learner's per-window flags. Shared, they make several instances one
	// learner: a window one instance saw a 429 in is not clean for the others,
	// and a probe or relax one instance made counts for all of them (each
	// instance would otherwise probe once per window, compounding the step).
	// LastProbe is never zero in a record that carries them (the learner's
	// birth counts as a probe); an older record without them leaves them as
	// they are. A record from before LastRaise takes the later of LastProbe and
	// LastRelax for it (what "held for a window" asked of then).
	CleanMax    float64   `json:"cleanMax,omitempty"`   // the clean-window record
	LastProbe   time.Time `json:"lastProbe,omitzero"`   // the last probe step, trusted 429 or trigger-bound window
	ProbeRun    int       `json:"probeRun,omitempty"`   // steps in the current run of probes
	PreProbe    float64   `json:"preProbe,omitempty"`   // the quota before the last probe
	PrevCut     time.Time `json:"prevCut,omitzero"`     // the previous trusted burst's first 429
	LastRelax   time.Time `json:"lastRelax,omitzero"`   // the last slow re-probe of the trigger
	LastRaise   time.Time `json:"lastRaise,omitzero"`   // the last probe or relax step that raised the budget
	Relaxed     bool      `json:"relaxed,omitempty"`    // relaxed toward the clean record since the last trusted 429
	LastSuspect time.Time `json:"lastSuspect,omitzero"` // the first 429 of the current suspect series
	Suspects    int       `json:"suspects,omitempty"`   // 429s in that series, on every instance
	// The first trigger's one probe step: armed or in flight (from FirstFrom),
	// and whether it was given already — one step for all instances, not one each.
	FirstProbe int     `json:"firstProbe,omitempty"`
	FirstFrom  float64 `json:"firstFrom,omitempty"`
	FirstUsed  bool    `json:"firstUsed,omitempty"`
	// AgainProbeAt: when a trigger a second 429 lowered last got that step.
	AgainProbeAt time.Time `json:"againProbeAt,omitzero"`
	// RefusedLevel is the trigger the last trusted 429 set (a second 429 there
	// is read as it is); CountsAt, the view the readings were taken in
	// (CountsAtArrival or CountsAtCompletion; "" in a record from before it:
	// the view is then unknown, and the bucket keeps its own).
	RefusedLevel float64 `json:"refusedLevel,omitempty"`
	CountsAt     string  `json:"countsAt,omitempty"`
	// Decides is the units the readings were taken in: DecidesKnown when the
	// calls in flight were read at their input and max_tokens, "" when at
	// their expected output (the default, and every older record).
	Decides string `json:"decides,omitempty"`
	// DecidesLearned: DecidesKnown was read from the provider's rate-limit
	// headers, not configured (decides.go).
	DecidesLearned bool `json:"decidesLearned,omitempty"`
	// Fixed: the readings were taken in fixed windows (fixedwindow.go);
	// FixedLearned: those were learned (the 429s' stated waits, the answers'
	// stated resets, or the readings), not configured; FixedByReadings: from
	// the readings, which a 429 the fixed window does not explain undoes.
	Fixed           bool `json:"fixed,omitempty"`
	FixedLearned    bool `json:"fixedLearned,omitempty"`
	FixedByReadings bool `json:"fixedByReadings,omitempty"`
	// Window is the window the figures are per (0 in a record from before it:
	// taken as the bucket's). A record from an instance with another window is
	// adopted at the same rate, as a reload that changes the window converts.
	Window time.Duration `json:"window,omitempty"`
	// OutputTrigger is the output axis's trigger (output.go): the output
	// window's reading at the last 429 about the output, or a relax step
	// from it; 0: none. OutputLast429 is that 429, and OutputRelaxedAt the
	// last relax step: shared as LastRelax is, so instances that all see the
	// shared window hold calls back step once a window between them, not
	// once each (the steps would compound).
	OutputTrigger   float64   `json:"outputTrigger,omitempty"`
	OutputLast429   time.Time `json:"outputLast429,omitzero"`
	OutputRelaxedAt time.Time `json:"outputRelaxedAt,omitzero"`
	// OutputRefutedOTPM: the configured output limit that 429 refuted,
	// answering a relax step toward it (output.go, refutedOTPM); 0: none.
	OutputRefutedOTPM int `json:"outputRefutedOtpm,omitempty"`
}

// inWindow is q's token figures converted to a window of to, at the same rate
// (q unchanged when it does not say its window, or says this one): the record's
// share of what learner.rescale converts on a reload.
func (q LearnedQuota) inWindow(to time.Duration) LearnedQuota {
	if q.Window <= 0 || to <= 0 || q.Window == to {
		return q
	}
	r := float64(to) / float64(q.Window)
	q.Quota, q.Trigger, q.CleanMax = q.Quota*r, q.Trigger*r, q.CleanMax*r
	q.PreProbe, q.FirstFrom, q.RefusedLevel = q.PreProbe*r, q.FirstFrom*r, q.RefusedLevel*r
	q.OutputTrigger *= r
	q.Window = to
	return q
}

// LearnedStore keeps learned quotas outside one ledger: the seam for a store shared
// by several gatectl processes. The ledger loads a model's state when it first
// sees the model and saves it after every learner step, with the model's bucket
// locked (so both must be quick). Without a store, learned state lives in memory
// and a restart learns again — deliberately, since a persisted
// quota may be stale.
type LearnedStore interface {
	Load(provider, model string) (LearnedQuota, bool)
	Save(provider, model string, q LearnedQuota)
}

// WithLearnedStore shares learned quotas through s.
func WithLearnedStore(s LearnedStore) Option { return func(l *Ledger) { l.quotas = s } }

// MemoryLearnedStore is a LearnedStore in memory, safe for concurrent use; ledgers in
// one process can share it. Its zero value is ready.
type MemoryLearnedStore struct {
	mu sync.Mutex
	m  map[bucketKey]LearnedQuota
}

// Load returns the stored state of provider/model.
func (s *MemoryLearnedStore) Load(provider, model string) (LearnedQuota, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.m[bucketKey{provider, model}]
	return q, ok
}

// Save stores the state of provider/model.
func (s *MemoryLearnedStore) Save(provider, model string, q LearnedQuota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[bucketKey]LearnedQuota)
	}
	s.m[bucketKey{provider, model}] = q
}

var _ LearnedStore = (*MemoryLearnedStore)(nil)

// restore adopts a stored state, never below the floor, and — as everything
// the learner sets — never above the limit the provider states here: the
// record may be another instance's from before its headers said so, and
// restating the same figure would not bring it down again.
func (l *learner) restore(q LearnedQuota) {
	if q.Quota > 0 {
		l.quota = max(q.Quota, l.floor)
	}
	l.trigger, l.lastCut, l.last429 = q.Trigger, q.LastCut, q.Last429
	if l.stated > 0 {
		l.quota = max(l.floor, min(l.quota, l.stated))
		l.trigger = min(l.trigger, l.stated)
	}
	l.burstStart = q.LastCut // a 429 in the same window elsewhere is the same burst
	if q.LastProbe.IsZero() {
		return // a record without the per-window flags
	}
	l.cleanMax, l.lastProbe, l.probeRun, l.preProbe = q.CleanMax, q.LastProbe, q.ProbeRun, q.PreProbe
	l.prevCut, l.lastRelax, l.relaxed, l.lastRaise = q.PrevCut, q.LastRelax, q.Relaxed, q.LastRaise
	if l.lastRaise.IsZero() {
		l.lastRaise = maxTime(q.LastProbe, q.LastRelax)
	}
	l.lastSuspect, l.suspects = q.LastSuspect, q.Suspects
	l.firstProbe, l.firstFrom, l.firstUsed = q.FirstProbe, q.FirstFrom, q.FirstUsed
	l.againProbeAt = q.AgainProbeAt
	l.refusedLevel = q.RefusedLevel
	// last429 came along: a window another instance saw a 429 in is not clean here.
}

func (l *learner) snapshot() LearnedQuota {
	return LearnedQuota{Quota: l.quota, Trigger: l.trigger, LastCut: l.lastCut, Last429: l.last429,
		CleanMax: l.cleanMax, LastProbe: l.lastProbe, ProbeRun: l.probeRun, PreProbe: l.preProbe,
		PrevCut: l.prevCut, LastRelax: l.lastRelax, LastRaise: l.lastRaise, Relaxed: l.relaxed,
		LastSuspect: l.lastSuspect, Suspects: l.suspects,
		FirstProbe: l.firstProbe, FirstFrom: l.firstFrom, FirstUsed: l.firstUsed,
		AgainProbeAt: l.againProbeAt, RefusedLevel: l.refusedLevel}
}
