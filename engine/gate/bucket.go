package gate

import (
	"github.com/gatectl/gatectl/engine"
	"math"
	"sync"
	"time"
)

// bucket is one provider/model's ledger. Every field below mu is guarded by it.
type bucket struct {
	l        *Ledger
	provider string
	model    string
	prov     *providerState
	limits   ModelLimits
	rpm      int // request budget (setRPMLocked), at least 1

	mu sync.Mutex
	// window is the window the bucket's learned state is counted in: the
	// configuration's when it was built or last reconfigured (see
	// reconfigureLocked).
	window time.Duration
	win    slidingWindow // calls keyed by admission: what a provider that counts on arrival holds
	// done holds settled calls keyed by when they settled: what a provider that
	// counts a call when it completes holds. atCompletion says which of the two
	// the provider behaves like (configured as countsAt, or learned from 429s —
	// voteLocked, rateViewLocked — or from the remaining tokens: headersview.go);
	// the admission check and the learner's readings use that one.
	done         slidingWindow
	atCompletion bool
	// out is the output axis: each call's output against a limit on output
	// tokens alone, when one is known (output.go).
	out outputAxis
	// arrivalAlone counts the 429s, a window or more apart, that refuted the
	// arrival view and not the completion view since a 429 last refuted the
	// completion view (or the view was switched or set); arrivalAloneAt is the
	// last of them.
	arrivalAlone   int
	arrivalAloneAt time.Time
	modeVotes      int // > 0: 429s the completion view explained better; < 0: the arrival view
	// The highest level each view held, plus the call's real cost, when it admitted
	// a call the provider then served: a lower bound on the limit in that view. A
	// 429 read well below it refutes the view (see voteLocked).
	servedArrival, servedDone servedLevel
	// servedFixed: the served levels of the arrival view's fixed part
	// (fixedwindow.go, the readings' vote), kept while the fixed part is.
	servedFixed servedLevel
	// Requests likewise, in each view: the count the call met, plus itself
	// (voteRequestsLocked; the view counted in: samecount.go).
	servedReqArrival, servedReqDone servedLevel
	doneRefutedAt                   time.Time // the last 429 that refuted the completion view
	rateViewAt                      time.Time // the last rate read that holds the completion view (rate.go)
	learn                           learner
	est                             estimator
	cooldownUntil                   time.Time
	reservedOpen                    int64   // reservations of tickets not yet settled
	land                            landing // the calls in flight as completions to come (landing.go)
	openVar                         float64 // invariant: the sum of the open tickets' cost variances
	openInputVar                    float64 // the part of openVar their inputs' estimates make (output.go)
	inFlight                        int
	perSession                      map[string]int // in flight per session; kept only with a cap

	// The calls admitted and not yet sent (Request.Sends): their share of the
	// arrival view, and how many.
	unsent      int64
	unsentCount int

	// Fixed windows read from the 429s' stated waits, the answers' stated
	// resets or the readings while the user has not said (fixedwindow.go):
	// learned, and the evidence toward a switch.
	fixedLearned bool
	fixedEv      fixedEvidence
	// fixedRefutedAt: the last token 429 whose fixed window served above what
	// it refused (fixedReadLocked).
	fixedRefutedAt time.Time
	// fixedByReadings: the fixed windows learned were the readings', which a
	// 429 the fixed window does not explain undoes (kept with the learned
	// quota).
	fixedByReadings bool

	slots []ticketSlot
	free  []int32

	waiters []*Waiter
	// looking is the waiter whose own look (Waiter.Poll) runs the dispatch,
	// nil for any other: a grant maxWait forces before the hard deadline is
	// its own look's (forcedDue).
	looking *Waiter
	// lastForced is when maxWait last forced a grant (forcedGapLocked).
	lastForced  time.Time
	round       uint64 // fair round of the last grant
	arrivals    uint64
	waits       int64
	rateLimited int64
	last429     time.Time

	// Limits the provider stated (Calibrate, or a 429's headers or words), per
	// minute; 0 when none. They override the configured ones, across reloads
	// too, until forgotten (see forgetStaleStatedLocked). Per axis: when the
	// figure was last stated, and whether it was adopted from a 429 — which,
	// unlike an answer's headers, no answer restates.
	statedTokens, statedRequests     int64
	tokensStatedAt, requestsStatedAt time.Time
	statedSpan                       time.Duration // the window statedTokens was last adopted in
	tokensBy429, requestsBy429       bool

	// The request axis: the window's request count at the last RPM 429 burst
	// (0: none), which caps the request limit until it relaxes.
	rpmTrigger int
	rpmBurst   time.Time
	// rpmBurstRefused: the RPM 429s of the current burst so far.
	rpmBurstRefused int
	lastRPMRelax    time.Time
	// rpmLearned is the request limit learned (0: none, the configured RPM
	// stands). Probe steps raise it while the request budget binds (the
	// configured RPM is a start, like the configured TPM); an RPM 429 that
	// answers a step, a second burst near the last one's count, or, counted at
	// completion, the axis's first 429 that names the request limit sets it
	// (see rpmLimitedLocked). A limit the provider states overrides it.
	rpmLearned int
	// rpmLearnedRead: rpmLearned was read at a 429 (a ceiling, or the level a
	// refused step set), not set by a probe step (see setRPMLocked).
	rpmLearnedRead bool
	// rpmConfigured is the configured RPM the request learning started from:
	// a reload that changes it starts the request axis again from the new
	// figure (it is a start, and the way to lower a limit probed above it).
	rpmConfigured int
	// The request probe (see probeRPMLocked): the last step (or the bucket's
	// birth, or a reset), the windows in its run, and the limit before the
	// step (0: no step to answer). While a step is tried — a window after it —
	// a call above rpmStepHeld, the request budget that held, goes one at a
	// time (stepNext), so a refused step costs one call.
	rpmStepAt   time.Time
	rpmRun      int
	rpmPreStep  int
	rpmStepHeld int
	// A trigger relaxation that raised the request budget is spaced the same
	// way (relaxRPMLocked): the budget that held before it, and until when.
	rpmRelaxHeld  int
	rpmRelaxUntil time.Time
	// rpmFreshAt: when the request axis last started from nothing (the
	// bucket's birth, a reset, a reload that changed rpm — not one that only
	// forgot what the axis learned); requests are paced for a window after it
	// (requestPacedLocked).
	rpmFreshAt time.Time
	// rpmBoundAt: the last time the request budget held a call back or an RPM
	// 429 came; the request pacer runs within two windows of it.
	rpmBoundAt time.Time
	// rpmRefused is the highest count an RPM 429 of the last burst was refused
	// at, and rpmRefusedAt when the burst began.
	rpmRefused   int
	rpmRefusedAt time.Time
	// rpmRefusedTokens is the token reading at that burst's first 429, when
	// the 429 did not name its limit (0 when it did): see countFellLocked.
	rpmRefusedTokens float64
	// tokenRead: the last unnamed 429 read as tokens, for the next to be
	// compared with (samecount.go).
	tokenRead tokenReadCount

	// How late the provider counts a call: admission→429 delays of recent 429s
	// (a ring), and the guard they set — entries stay that much longer than the
	// window, so the gate never frees a call the provider still holds.
	delays [8]time.Duration
	nDelay int
	// coldFrom (unix ns; 0 when none): the admission that found both windows
	// empty; its traffic keeps coldGuardFactor × the count guard until
	// coldUntil (unix ns; 0 when not cold) once a send is reported
	// (startColdLocked).
	coldFrom, coldUntil int64

	// The pacers (pacing.go): the tokens and the requests they allow now.
	pace, paceReq pacer

	// A step above the level that held (a probe or a relax) is tried one call
	// at a time: for a window after the raise, a call the old budget (stepHeld)
	// would have held back goes only once the one before it had time to be
	// refused (stepNext). stepHeld is 0 when no step is being tried.
	stepHeld  int64
	stepUntil time.Time
	stepNext  time.Time

	agedAt int64 // unix nanos of the last ageLocked pass

	// seenAt is the latest now the bucket saw (unix nanos; seen, as read) and
	// steppedAt the now at which it last followed a step of the wall clock
	// (followClockLocked).
	seenAt          int64
	seen, steppedAt time.Time

	// What the rate-limit headers say the provider decides a call on, while
	// the user has not said (decides.go).
	decides                      decidesEvidence // the answers read against the window as they arrive
	decidesAtSend                decidesEvidence // the same answers read against the window as their calls were sent
	sends                        *sendReadings   // the window as calls were sent (nil until headers state what is left)
	outside                      outsideSpend    // the others' spend on the key, read from the headers (outside.go)
	headersFitAt                 time.Time       // the remaining tokens last read as a sliding window counting the calls in flight (decides.go)
	byViews, byViewsAtSend       viewEvidence    // what the headers say was counted, less each view now and as the call was sent (headersview.go)
	refillRead                   bool            // the headers read as a refill: the others' spend is read from the reserve's slope
	firstViews, firstViewsAtSend viewEvidence    // the same, of the first window's answers
	decidesLearnedKnown          bool

	// What the calls admitted so far cost, all told (at their reservation while
	// in flight), and samples of it over the last windows: see rateSpentLocked.
	spent   float64
	spentAt [spentSamples]spentSample
	nSpent  int
	// The last grant, and the first after a window without any (unix nanos):
	// whatever the provider's reserve, it was full again then. refilledSpent is
	// the spend before that grant. See refillAllowsLocked.
	lastGrantAt, refilledAt int64
	refilledSpent           float64
	// spentFromIdle: the samples began with the model's first grant, and no
	// stored state said it had been busy: the reserve was full then.
	spentFromIdle bool
	// rateCap: the most a lone bucket's rate can be, by its 429s (rate.go).
	rateCap rateBound

	// With a shared window (shared.go): the tokens the other instances held at
	// the last answer (and their output, when the output window is shared),
	// and the refusal that holds calls at least holdNeed large until holdUntil
	// unless a release notification lifts it first.
	sharedOthers         int64
	sharedOthersOutput   int64
	sharedOthersOutputAt time.Time // when the store last said it
	sharedOutputsOpen    bool      // the calls in flight were added to the shared output window
	sharedHoldUntil      time.Time
	sharedHoldNeed       int64
	sharedHoldOutput     int64 // an output refusal's: a call with less output may fit
	sharedHoldReason     string
	// sharedAsking: how many instances compete for the model, at the shared
	// window's last answer (0: not known); each paces at its share.
	sharedAsking int
	// storeHoldUntil: a failClosed store did not answer (ErrStoreHolds); until
	// then no call of the model asks it again. Each held waiter asked on every
	// dispatch pass, and each pass runs over the whole queue: with hundreds
	// queued, the asking alone kept the bucket's lock busy.
	storeHoldUntil time.Time
	// alone: calls admitted while the store failed open, closed since, kept
	// for a window so recovery writes them to the shared window (shared.go).
	alone []aloneCall

	lastUsed time.Time // last admission, settlement or 429: the idle eviction's clock
	evicted  bool      // dropped from the ledger's map (Evict): a caller holding it must look the model up again
}

// ticketSlot remembers an open ticket. gen changes when the slot is reused, so a
// stale ticket cannot settle someone else's reservation.
type ticketSlot struct {
	gen      uint32
	open     bool
	seq      uint64
	reserved int64
	output   int64
	asked    bool
	guessed  bool    // the input was estimated from the request's size
	input    int64   // the input estimate
	variance float64 // the call's cost variance, in openVar while open
	inputVar float64 // of it, the input estimate's share (what aging keeps)
	output0  int64   // the output reserved at admission (output follows the call's age)
	admitted int64   // unix nanos; its send's, once a reported send moved its entry
	// sendPending: the caller reports the send (Request.Sends), and the level
	// the call was admitted at is read then. unsent is the call's share of the
	// arrival view until it is sent (in the bucket's unsent meanwhile).
	sendPending bool
	unsent      int64
	landing     int64 // its expected cost at the provider, in the bucket's land while open
	// The two views of the provider's window when the call was admitted (see
	// servedLevel).
	viewArrival, viewDone int64
	viewFixed             int64 // the arrival view's fixed part before the call (-1: not kept)
	// The request counts the call met, without it, in the arrival and the
	// completion view (servedReqArrival, servedReqDone).
	reqArrival, reqDone int32
	bytes               int
	session             string
	shared              string // the shared window's entry id; "" without one
	alone               bool   // admitted while the store failed open: not in the shared window yet
	paced               bool   // its reservation was charged to the token pacer
	outSeq              uint64 // its entry in the output window (output.go)
	settledElsewhere    bool   // closed by SettledElsewhere: another instance has its usage
}

// reconfigureLocked adopts a reloaded configuration (see Ledger.Reconfigure).
func (b *bucket) reconfigureLocked(now time.Time, cfg *Config) {
	b.forgetTokenReadLocked() // the learner's figures may move
	lim := cfg.Limits(b.provider + "/" + b.model)
	if b.statedTokens > 0 { // a stated limit supersedes the configured guess
		lim.TPM = int(scaleLimit(b.statedTokens, cfg.Window))
	}
	if b.statedRequests > 0 {
		lim.RPM = int(scaleLimit(b.statedRequests, cfg.Window))
	}
	if configured := cfg.Limits(b.provider + "/" + b.model).RPM; configured != b.rpmConfigured {
		b.rpmConfigured = configured
		b.forgetRequestLearningLocked(now)
		b.rpmFreshAt = now // a limit the gate has not seen: its first window is paced
	}
	was := b.decidesKnown()
	switch {
	case !cfg.Learn || b.l.shared != nil:
		// Nothing is read from the headers any more: what they taught goes
		// with what it was read from.
		b.decidesLearnedKnown = false
		b.forgetDecidesEvidenceLocked()
	case lim.Decides != "":
		// The user says what it decides on: the fit goes; the answers read
		// for the view stay (headersview.go), unless the user said known.
		b.decidesLearnedKnown = false
		// (The answers keep their first window: decides.since stays.)
		b.decides, b.decidesAtSend = decidesEvidence{since: b.decides.since, last: b.decides.last}, decidesEvidence{}
		if lim.Decides == DecidesKnown {
			b.forgetViewsLocked() // (the readings at the send stay: the others' spend reads them, outside.go)
		}
	}
	if known := lim.Decides == DecidesKnown || (lim.Decides == "" && b.decidesLearnedKnown); known != was {
		// The calls in flight are read in other units from now on: what was
		// read in the old ones goes (the level that held stays). Waiters are
		// sized again; calls in flight keep what they reserved until they
		// settle (ages bring those without max_tokens up to date, when used).
		b.forgetReadingsLocked()
		b.limits.Decides = lim.Decides
		b.resizeWaitersLocked()
	}
	wasFixed := b.fixedWindowsLocked()
	b.limits = lim
	if lim.Windows != "" || !cfg.Learn || b.l.shared != nil {
		b.fixedLearned, b.fixedEv, b.fixedByReadings = false, fixedEvidence{}, false // the user says now, or nothing is learned
	}
	if b.fixedWindowsLocked() != wasFixed {
		b.forgetReadingsLocked() // read in the other window
	}
	if atCompletion, set := lim.countView(); set {
		b.clearVotesLocked() // the user says how the provider counts: no votes
		b.rateViewAt = time.Time{}
		if atCompletion != b.atCompletion {
			b.atCompletion = atCompletion
			b.forgetReadingsLocked() // read in the other view
		}
	}
	// The window the bucket's state is counted in: not win.inner, which the
	// span's other callers (a 429's measured delay, a restore, a reset) set
	// from the configuration stored already when this reload had not reached
	// the bucket yet.
	windowChanged := b.window != cfg.Window
	if windowChanged || !cfg.Learn {
		// Request counts of the old window's length, or learned while learning
		// was on: the configured RPM stands again.
		b.forgetRequestLearningLocked(now)
	}
	if !cfg.Learn || b.l.shared != nil {
		b.outside = outsideSpend{} // not read now: readings from before would be stale when it is again
	}
	b.setRPMLocked()
	if windowChanged {
		b.coldFrom, b.coldUntil = 0, 0 // a start's period, in the old window's length
		// What was learned of the tokens, in the new window's units: the same
		// rate (as a stated limit is rescaled). Kept as it was, a shorter
		// window let the old window's budget through in each of its own, and
		// a longer one held the model at a fraction of its limit until the
		// slow re-probe, hours on.
		b.learn.rescale(float64(cfg.Window) / float64(b.window))
		b.out.trigger *= float64(cfg.Window) / float64(b.window)
		b.window = cfg.Window
		b.stepHeld = 0 // held in the old window's units
		// Levels served in the old window's units refute nothing in the new.
		b.servedArrival, b.servedDone, b.servedFixed = servedLevel{}, servedLevel{}, servedLevel{}
		b.servedReqArrival, b.servedReqDone = servedLevel{}, servedLevel{}
		b.forgetDecidesEvidenceLocked() // counts of the old window's length
		b.outside = outsideSpend{}      // and readings
		// A pause of the old window is no refill of the new one.
		b.lastGrantAt, b.refilledAt, b.refilledSpent = 0, 0, 0
		b.spentFromIdle, b.rateCap, b.rateViewAt = false, rateBound{}, time.Time{}
	}
	b.setSpanLocked(now, cfg)
	b.learn.enabled = cfg.Learn
	if start := float64(lim.TPM); start != b.learn.start {
		untouched := b.learn.quota == b.learn.start && b.learn.trigger == 0
		fresh := newLearner(lim.TPM, cfg.Learn, now)
		b.learn.start, b.learn.floor = fresh.start, fresh.floor
		if untouched {
			b.learn.quota = fresh.quota
		}
		b.learn.quota = max(b.learn.quota, b.learn.floor)
	}
	if b.statedTokens > 0 {
		// The stated limit in this window's units: what the learner may never
		// exceed (a window change rescales it), and no probe step from before
		// the reload to revert to.
		b.learn.stated, b.learn.preProbe = float64(lim.TPM), 0
		b.learn.quota = min(b.learn.quota, b.learn.stated)
		b.learn.trigger = min(b.learn.trigger, b.learn.stated)
		b.statedSpan = cfg.Window // the figure restated is the same limit, in these units now
	}
	b.learn.cap = float64(lim.MaxTPM)
	b.est.configuredReserve = cfg.OutputReserveTokens
	switch {
	case cfg.MaxInFlightPerSession > 0 && b.perSession == nil:
		// The calls already in flight count: each will leave its session's
		// count as it closes, and an uncounted one would take a counted one's
		// place, letting the session past the cap.
		b.perSession = make(map[string]int)
		for i := range b.slots {
			if sl := &b.slots[i]; sl.open {
				b.perSession[sl.session]++
			}
		}
	case cfg.MaxInFlightPerSession == 0:
		b.perSession = nil
	}
	b.dispatchLocked(now) // a larger budget may let waiters through
}

// newBucket builds the bucket of provider/model under cfg (the ledger's
// configuration when the caller looked: see bucketFor).
func newBucket(l *Ledger, cfg *Config, provider, model string, ps *providerState, now time.Time) *bucket {
	lim := cfg.Limits(provider + "/" + model)
	b := &bucket{
		l:             l,
		provider:      provider,
		model:         model,
		prov:          ps,
		limits:        lim,
		window:        cfg.Window,
		win:           newSlidingWindow(cfg.Window),
		done:          newSlidingWindow(cfg.Window),
		out:           outputAxis{win: newSlidingWindow(cfg.Window)},
		learn:         newLearner(lim.TPM, cfg.Learn, now),
		est:           newEstimator(cfg.OutputReserveTokens),
		lastUsed:      now,
		rpmStepAt:     now,
		rpmFreshAt:    now,
		rpmConfigured: lim.RPM,
		spentFromIdle: true,
	}
	b.atCompletion, _ = lim.countView()
	b.learn.cap = float64(lim.MaxTPM)
	b.setRPMLocked()
	b.setSpanLocked(now, cfg)
	if cfg.MaxInFlightPerSession > 0 {
		b.perSession = make(map[string]int)
	}
	if l.quotas != nil && cfg.Learn {
		if q, ok := l.quotas.Load(provider, model); ok {
			b.restoreLocked(q)
		}
	}
	return b
}

// factor is the share of a limit the gate spends: the safety factor the user
// configured (a hard cap), else 1 − baseMargin. The rest of the margin is not a
// share but the spread of what the calls in flight will really cost (margin).
func (b *bucket) factor() float64 {
	if f := b.limits.SafetyFactor; f > 0 {
		return f
	}
	return 1 - baseMargin
}

// baseMargin is the share of a limit kept free when the user set no safety
// factor: rounding, clock skew, and a provider that counts a few tokens more
// than it reports.
const baseMargin = 0.01

// expireLocked drops what left both windows at now.
func (b *bucket) expireLocked(now time.Time) {
	b.followClockLocked(now)
	if b.coldUntil != 0 && now.UnixNano() >= b.coldUntil {
		b.coldUntil = 0 // the first window's calls have left: the guard as measured
		b.setSpanLocked(now, b.l.conf())
	}
	b.win.expire(now)
	b.done.expire(now)
	b.out.win.expire(now)
}

// clockStep is how far the wall clock may move against the time that passed
// before the bucket takes it for a step (an NTP step, a date set by hand).
// With the system clock the time that passed is read from the monotonic
// clock, so a caller whose now was read a while before it took the lock is no
// step. A clock without a monotonic reading (a fake one, a test's) has only
// the wall time: there a now more than clockStep behind the latest one seen
// is taken for a step back, and one less is clamped, as callers racing to the
// lock read it milliseconds apart.
const clockStep = time.Second

// followClockLocked keeps what the bucket stamped in wall-clock nanoseconds
// (the windows' entries, the calls in flight, the pacers, the spend samples)
// at the same ages when the wall clock steps. Left as they were after a step
// back, the window's calls would leave it only once the clock caught up — a
// drain as long as the step, and past maxWait every call failed open: no gate
// for the step and a window; after a step forward they would leave early. A
// new field stamped in unix nanos belongs here. (What is kept as time.Time and
// read in this process carries the monotonic reading and needs nothing.)
func (b *bucket) followClockLocked(now time.Time) {
	at := now.UnixNano()
	var step int64
	switch {
	case b.seenAt == 0:
	case now != now.Round(0) && b.seen != b.seen.Round(0): // both carry a monotonic reading
		step = at - b.seenAt - int64(now.Sub(b.seen)) // how far the wall moved past the time that passed
	case at < b.seenAt:
		step = at - b.seenAt
	}
	if step >= -int64(clockStep) && step <= int64(clockStep) {
		if at > b.seenAt {
			b.seenAt, b.seen = at, now
		}
		return
	}
	b.seenAt, b.seen, b.steppedAt = at, now, now
	b.win.shift(step, now)
	b.done.shift(step, now)
	b.out.win.shift(step, now)
	for i := range b.slots {
		if s := &b.slots[i]; s.open {
			s.admitted += step
		}
	}
	for _, p := range []*int64{&b.agedAt, &b.lastGrantAt, &b.refilledAt, &b.pace.at, &b.paceReq.at, &b.coldFrom, &b.coldUntil} {
		if *p != 0 {
			*p += step
		}
	}
	for i := range min(b.nSpent, spentSamples) {
		b.spentAt[i].at += step
	}
	b.outside.refill = nil // the reserve's points, against sends stamped in the old frame: read afresh
}

// setSpanLocked sets both windows to the window plus the count guard, and
// their fixed parts (counted for the window current at now).
func (b *bucket) setSpanLocked(now time.Time, cfg *Config) {
	guard := b.guardFor(cfg)
	b.win.span = cfg.Window + guard
	b.done.span = b.win.span
	b.out.win.span = b.win.span
	b.win.setInner(cfg.Window, now)
	b.done.setInner(cfg.Window, now)
	b.out.win.setInner(cfg.Window, now)
	fixed := b.fixedWindowsLocked()
	// The arrival window keeps its fixed part while the windows may yet be
	// learned from the readings too (fixedwindow.go, fixedReadLocked).
	b.win.setFixed(fixed || b.fixedReadableLocked(cfg), cfg.Window, guard, now)
	b.done.setFixed(fixed, cfg.Window, guard, now)
}

// tokenBudget is the token budget: the learned one, held under the room
// other clients on the key leave when the headers say they spend (outside.go).
func (b *bucket) tokenBudget(now time.Time) int64 {
	budget := b.learnedTokenBudget()
	if room, ok := b.othersRoomLocked(now); ok {
		budget = min(budget, int64(room*b.factor()))
	}
	return budget
}

// learnedTokenBudget is min(learned quota, tightest trigger, maxTpm) × factor:
// what was learned of the provider (and the user's cap), which the room the
// others leave may hold the budget under. A call larger than it could never
// fit; one larger than the room only, waits for it.
func (b *bucket) learnedTokenBudget() int64 {
	return int64(b.learn.budget() * b.factor())
}

// countedLocked is the window the budgets hold against, in the view the bucket
// counts in: the calls admitted within the window, or — for a provider that
// counts a call when it completes — the calls that completed within it. Counted
// on arrival there, the gate's window drains a window after a burst was
// admitted while the provider holds the burst until a window after it
// completed, and the queue released then meets a full window: every call of
// that cohort gets a 429. Calls in flight are not in the completion window:
// such a provider does not count them when it decides on a call.
func (b *bucket) countedLocked() *slidingWindow { return b.viewWindow(b.atCompletion) }

// viewWindow is the window of the completion view or of the arrival view.
func (b *bucket) viewWindow(atCompletion bool) *slidingWindow {
	if atCompletion {
		return &b.done
	}
	return &b.win
}

// margin is the head room kept for the calls in flight and one more of
// variance v: MarginSigmas standard deviations of their summed cost. One margin
// for all of them — the spread of a sum grows with √N, not N — instead of a high
// quantile per call.
func (b *bucket) margin(v float64) int64 { return b.marginOf(b.openVar + v) }

// viewMarginLocked is the head room a call of variance v needs in the view the
// bucket counts in. On arrival: the margin over the calls in flight and this
// one. At completion the calls in flight are not in the provider's window (only
// the settled ones, known exactly): this call's own spread, and room for the
// calls that may complete while the gate cannot see it (landing.go).
func (b *bucket) viewMarginLocked(v float64) int64 {
	if b.atCompletion {
		return b.completionMarginLocked(v)
	}
	return b.margin(v)
}

// marginOf is MarginSigmas standard deviations of a cost of variance v.
func (b *bucket) marginOf(v float64) int64 {
	z := b.l.conf().MarginSigmas
	if z <= 0 || v <= 0 {
		return 0
	}
	return int64(math.Ceil(z * math.Sqrt(v)))
}

// snapshotLocked is what the learned store keeps of the model: the learner's
// state and the view it was read in.
func (b *bucket) snapshotLocked() LearnedQuota {
	q := b.learn.snapshot()
	q.CountsAt = CountsAtArrival
	if b.atCompletion {
		q.CountsAt = CountsAtCompletion
	}
	if b.decidesKnown() {
		q.Decides = DecidesKnown
	}
	q.DecidesLearned = b.limits.Decides == "" && b.decidesLearnedKnown
	q.Fixed = b.fixedWindowsLocked()
	q.FixedLearned = b.limits.Windows == "" && b.fixedLearned
	q.FixedByReadings = q.FixedLearned && b.fixedByReadings
	q.Window = b.window
	q.OutputTrigger, q.OutputLast429, q.OutputRelaxedAt = b.out.trigger, b.out.last429, b.out.relaxedAt
	q.OutputRefutedOTPM = b.out.refutedOTPM
	return q
}

// restoreLocked adopts a stored state. Readings taken in a view other than the
// one the user configured are dropped; without a configured view, the stored
// one comes with them. A record that does not say (from an older build) leaves
// the bucket's view as it is. Readings taken in other units (decides) are
// dropped too.
func (b *bucket) restoreLocked(q LearnedQuota) {
	q = q.inWindow(b.window)
	b.learn.restore(q)
	b.out.trigger, b.out.last429, b.out.refutedOTPM = q.OutputTrigger, q.OutputLast429, q.OutputRefutedOTPM
	// Another instance's relax step counts here too (LearnedQuota.OutputRelaxedAt).
	b.out.relaxedAt = maxTime(b.out.relaxedAt, q.OutputRelaxedAt)
	b.spentFromIdle = false // it was busy lately: its reserve may be anywhere
	b.forgetTokenReadLocked()
	if b.limits.Decides == "" && b.l.shared == nil && b.learn.enabled && q.DecidesLearned != b.decidesLearnedKnown {
		// What the headers said the provider decides on, the last time (not
		// what a user said then: that went with the setting). The calls
		// queued were sized for the other (with or without an output reserve).
		b.decidesLearnedKnown = q.DecidesLearned
		b.resizeWaitersLocked()
	}
	if (q.Decides == DecidesKnown) != b.decidesKnown() {
		b.forgetReadingsLocked()
	}
	if b.limits.Windows == "" && b.l.shared == nil && b.learn.enabled {
		b.fixedByReadings = q.FixedLearned && q.FixedByReadings
	}
	if b.limits.Windows == "" && b.l.shared == nil && b.learn.enabled && q.FixedLearned != b.fixedLearned {
		// What the stated waits, resets or readings said of the windows, the last time.
		b.fixedLearned, b.fixedEv = q.FixedLearned, fixedEvidence{}
		b.setSpanLocked(b.l.clock.Now(), b.l.conf())
	}
	if q.Fixed != b.fixedWindowsLocked() {
		b.forgetReadingsLocked() // read in the other windows
	}
	if q.CountsAt != CountsAtArrival && q.CountsAt != CountsAtCompletion {
		return
	}
	stored := q.CountsAt == CountsAtCompletion
	if _, set := b.limits.countView(); set {
		if stored != b.atCompletion {
			b.forgetReadingsLocked()
		}
		return
	}
	if stored != b.atCompletion {
		b.atCompletion = stored
		b.clearVotesLocked()
	}
	b.rateViewAt = time.Time{} // the store keeps the view, not why it was taken
}

// roundTripLocked is the longest recent admission→429 delay: a refused call's
// trip to the provider and back (0 before any 429).
func (b *bucket) roundTripLocked() time.Duration {
	var longest time.Duration
	for _, d := range b.delays[:min(b.nDelay, len(b.delays))] {
		longest = max(longest, d)
	}
	return longest
}

// guardFor is how long past the window an entry stays: the configured share of
// the window (coldGuardFactor times it while traffic starts cold), or 1.5 ×
// the longest recent admission→429 delay, at most 2% of the window — and never
// so long that a drain wait exceeds maxWait.
func (b *bucket) guardFor(cfg *Config) time.Duration {
	return b.guardOf(cfg, b.coldUntil != 0)
}

// warmGuardLocked is the guard without a cold start's factor: what the other
// instances on a shared window keep.
func (b *bucket) warmGuardLocked(cfg *Config) time.Duration { return b.guardOf(cfg, false) }

func (b *bucket) guardOf(cfg *Config, cold bool) time.Duration {
	g := time.Duration(cfg.CountGuard * float64(cfg.Window))
	if cold {
		g *= coldGuardFactor
	}
	g = max(g, b.roundTripLocked()*3/2)
	return max(0, min(g, cfg.Window/50, cfg.MaxWait-cfg.Window))
}

// coldGuardFactor is how much longer than the count guard the calls of
// traffic that starts into empty windows stay counted (still at most 2% of
// the window): 2% at the default 0.5%.
const coldGuardFactor = 4

// startColdLocked gives the calls of traffic that started into empty windows
// coldGuardFactor × the count guard, from the first send reported after it
// until the last of the first window's calls has left. Those are the calls a
// provider counts latest against their send: every session starts at once,
// each on a new connection, and a provider reads a call when it gets to it.
// Over real sockets (30 sessions, a 10 s window, the fake provider sharing
// two cores with the other cases' gates and sessions) calls written in the
// first half second were counted up to 145 ms after they were written (p90
// 33 ms), later ones within 20 ms; the default guard (0.5%, 50 ms) let some
// of the first window's calls leave the gate's window while the provider
// still held them, and the queue admitted at that edge took a 429. Only a
// reported send starts it: the lateness is the send's, and a caller that
// reports none (the simulator, whose provider counts a call a set latency
// after its admission) has none to guard against.
func (b *bucket) startColdLocked(now time.Time, cfg *Config) {
	until := b.coldFrom + int64(2*cfg.Window+cfg.Window/50)
	b.coldFrom = 0
	if until <= now.UnixNano() || until <= b.coldUntil {
		return
	}
	b.coldUntil = until // (a start within an earlier one's period extends it)
	b.setSpanLocked(now, cfg)
}

func (b *bucket) cooldownLeft(now time.Time) time.Duration {
	until := b.cooldownUntil
	if p := b.prov.cooldownUntil.Load(); p != nil && p.After(until) {
		until = *p
	}
	return max(until.Sub(now), 0)
}

// block says why a reservation of res for session cannot go now, and for how long
// at least: wait = max(cooldown left, TPM drain, RPM drain, pace, output drain). capped means the
// session's in-flight cap holds it until one of its calls settles.
func (b *bucket) block(now time.Time, res, out int64, variance, outVar float64, session string) (reason string, wait time.Duration, capped bool) {
	cd := b.cooldownLeft(now)
	budget, learned := b.tokenBudget(now), b.learnedTokenBudget()
	over := res > learned // it could never fit: it goes at once (fail open)
	var tpm time.Duration
	switch {
	case b.overCapLocked(res):
		// Larger than the user's cap: it could never fit, but it goes only
		// into an empty window — none admitted within it, none completed
		// within it — so a window holds at most one such call. Without a cap
		// (or under it, above a learned budget) it goes at once: fail open.
		capBudget := b.capBudgetLocked()
		a, _ := b.win.tokenDrain(now, capBudget, capBudget)
		d, _ := b.done.tokenDrain(now, capBudget, capBudget)
		tpm = max(a, d)
	case !over: // an over-budget reservation never waits for the window
		// (One larger than the room the others leave waits for an empty
		// window: it is theirs to share, not a limit it could never fit.)
		need := min(res+b.viewMarginLocked(variance), budget)
		if b.fixedWindowsLocked() {
			tpm = b.countedLocked().fixedDrain(now, need, budget) // the current fixed window, or the next edge
		} else {
			tpm, _ = b.countedLocked().tokenDrain(now, need, budget)
		}
	}
	rpm := b.requestDrainLocked(now)
	if rpm > 0 {
		b.rpmBoundAt = now
	}
	if rpm > 0 && cd == 0 {
		b.forgetStaleStatedLocked(now, false)
		b.relaxRPMLocked(now)
	}
	var pace time.Duration
	if !over { // an over-budget call goes at once (it could never fit): no pacing either
		pace = b.paceWaitLocked(now, res, budget)
		if b.aboveHeldLocked(now, res, variance) {
			pace = max(pace, b.stepNext.Sub(now))
		}
	}
	if b.aboveHeldRequestsLocked(now) {
		pace = max(pace, b.stepNext.Sub(now))
	}
	otpm := b.outputDrainLocked(now, out, outVar)
	wait = max(cd, tpm, rpm, pace, otpm)
	switch {
	case wait == 0:
	case cd == wait:
		reason = "cooldown"
	case tpm == wait:
		reason = "tpm"
	case rpm == wait:
		reason = "rpm"
	case otpm == wait:
		reason = "otpm"
	default:
		reason = "pace"
	}
	if b.perSession != nil && b.perSession[session] >= b.l.conf().MaxInFlightPerSession {
		capped = true
		if reason == "" {
			reason = "session-cap"
		}
	}
	if cd == 0 && (tpm > 0 || res > budget) {
		// the token budget — not RPM, not a cooldown — held this call back, or is too
		// small to hold it at all (a trigger set by outside traffic can shrink it
		// below every reservation: the relax rules must still see the pressure)
		b.forgetStaleStatedLocked(now, true)
		// No fast slow start with a shared window: the rate rule that reads a
		// bucket's lent reserve back is off there. (While the room the others
		// leave holds the budget under the learned one, a step raises a level
		// the room keeps untried; the room rises with the readings as their
		// spend falls, so that level is reached by degrees: outside.go.)
		if st, moved := b.learn.onTokenBlocked(now, b.l.conf().Window, b.l.shared == nil); moved {
			b.raisedLocked(now, budget)
			b.emitLearn(now, st)
		}
	}
	return reason, wait, capped
}

// capBudgetLocked is the token budget the user's cap allows (maxTpm less the
// margin every figure keeps); 0 without a cap.
func (b *bucket) capBudgetLocked() int64 {
	return int64(float64(b.limits.MaxTPM) * b.factor())
}

// overCapLocked says whether a reservation of res is larger than the user's
// token cap allows: such a call waits for an empty window (block).
func (b *bucket) overCapLocked(res int64) bool {
	return b.limits.MaxTPM > 0 && res > b.capBudgetLocked()
}

// decidesKnown says the provider decides a call on what it knows at arrival —
// the user said so (ModelLimits.Decides), or, while the user has not said,
// the rate-limit headers did (decides.go): a call in flight counts its input
// and max_tokens, and its output once it settles.
func (b *bucket) decidesKnown() bool {
	return b.limits.Decides == DecidesKnown || (b.limits.Decides == "" && b.decidesLearnedKnown)
}

// outputWhenWrittenLocked says a settled call's output counts from when it was
// written, not with the call's arrival: told the provider decides on what it
// knows, unless told it counts on arrival in a sliding window (which books the
// output in the call's entry; a fixed window counts it in the window current
// when it is written). Not with a shared window, whose entries are fixed at
// admission.
func (b *bucket) outputWhenWrittenLocked() bool {
	return b.decidesKnown() && (b.limits.CountsAt != CountsAtArrival || b.fixedWindowsLocked()) && b.l.shared == nil
}

// providerCostLocked is what the provider's view counts of a call in flight
// that reserved res, out of it for its output: its input and max_tokens when
// the provider decides on what it knows, else its input and the output the
// model usually writes (not a max_tokens far above it, which would inflate
// the learner's readings).
func (b *bucket) providerCostLocked(res, out int64) int64 {
	if b.decidesKnown() {
		return res
	}
	return res - out + b.est.expectedOutput(out)
}

// sizing is how a request is reserved.
type sizing struct {
	total, output, input int64
	asked, guessed       bool
	variance             float64 // of the whole cost
	inputVar             float64 // of it, the input estimate's share
}

// reservation sizes a request: estimated input + output reserve, and the
// variance of what it will really cost.
func (b *bucket) reservation(req Request) sizing {
	in := int64(req.InputTokens)
	guessed := in <= 0
	if guessed {
		in = b.est.input(req.InputBytes)
	}
	in = min(in, maxReservation) // as the output's: a library caller's absurd input must not wrap the window's sums
	asked := req.MaxTokens > 0
	inVar := b.est.inputVariance(in, guessed)
	if b.decidesKnown() {
		// The provider decides on the input and max_tokens and counts the
		// output once written, as the window does when the call settles: no
		// output to reserve before then, and no spread of one to cover.
		var out int64
		if asked {
			out = b.est.outputReserve(req.MaxTokens, false)
		}
		return sizing{total: in + out, output: out, input: in, asked: asked, guessed: guessed, variance: inVar, inputVar: inVar}
	}
	aging := b.agingLocked()
	out := b.est.outputReserve(req.MaxTokens, aging)
	return sizing{total: in + out, output: out, input: in, asked: asked, guessed: guessed,
		variance: b.est.outputVariance(asked, aging) + inVar, inputVar: inVar}
}

func (b *bucket) submitLocked(now time.Time, req Request) (Ticket, *Waiter) {
	b.expireLocked(now)
	b.ageLocked(now)
	b.lastUsed = now
	sz := b.reservation(req)
	res := sz.total
	dueNow := false // its forced grant is due: see below
	if len(b.waiters) == 0 {
		reason, wait, capped := b.block(now, res, sz.output, sz.variance, sz.variance-sz.inputVar, req.Session)
		if wait == 0 && !capped {
			id, sw, sreason := b.sharedReserveLocked(now, sz, false)
			if sw == 0 {
				return b.attachShared(b.grantLocked(now, req, sz, 0, ""), id), nil
			}
			reason, wait = sreason, sw
		}
		var id, sreason string
		if wait > b.l.conf().MaxWait && req.Pause != PauseSend {
			if w := b.refusedAtOnceLocked(now, req); w != nil {
				return Ticket{}, w
			}
		}
		if wait > b.l.conf().MaxWait {
			// Longer than maxWait: admitted at once (failing open), unless a
			// failClosed store does not answer — then queued with the forced
			// grant due, asked again with the queue (not at maxWait).
			id, _, sreason = b.sharedReserveLocked(now, sz, true)
			dueNow = sreason == storeReason
		}
		if wait > b.l.conf().MaxWait && !dueNow {
			t := b.attachShared(b.grantLocked(now, req, sz, 0, "max-wait"), id)
			t.FailOpen = true
			defer func() {
				if r := recover(); r != nil { // the event hook panicked: Submit fails open without t
					_ = b.closeSlotLocked(now, t, 0, nil)
					panic(r)
				}
			}()
			b.event(EventFailOpen, now, req.Session, "max-wait:"+reason, wait, res)
			return t, nil
		}
	}
	// Queue: round-robin across sessions, FIFO within one.
	queued := uint64(0)
	for _, w := range b.waiters {
		if w.req.Session == req.Session && w.req.Priority == req.Priority {
			queued++
		}
	}
	b.arrivals++
	w := &Waiter{
		b: b, req: req, reserved: res, size: sz,
		enqueued: now, round: b.round + queued + 1, arrival: b.arrivals,
		ready: make(chan struct{}), dueNow: dueNow,
	}
	b.waiters = append(b.waiters, w)
	defer func() {
		if r := recover(); r != nil {
			// The event hook panicked: Submit fails the call open, so nothing of
			// this waiter may stay behind (queued, it would be granted later and
			// never settled).
			b.abandonLocked(now, w)
			panic(r)
		}
	}()
	b.dispatchLocked(now)
	if w.granted {
		return w.ticket, nil
	}
	if !w.refusedUntil.IsZero() { // refused in a pause (pause.go): it never waited
		return Ticket{}, w
	}
	b.waits++
	b.event(EventWait, now, req.Session, w.reason, w.next.Sub(now), res)
	return Ticket{}, w
}

// deadlineLocked is when waiter w fails open whose wait runs past its
// maxWait: gate.maxWait after it queued (hard), less its share of the last
// tenth of maxWait (maxWaitShare) — at once, both, when its forced grant was
// due at its submission (dueNow). A wait that ends within maxWait is waited
// out: the spread moves only the grants maxWait forces.
//
// A burst queued within a second reached maxWait within that second, and
// every call of it was let through in one dispatch, into a window the gate
// held full: a cohort of 429s at the provider. Spread over the last tenth of
// maxWait (12 s of 120), the first of them meets the provider alone; its 429
// starts the model's cooldown, and the proxy sends none of the others into it
// (server/proxy_cooling.go). Earlier, never later: maxWait is a promise.
func (b *bucket) deadlineLocked(w *Waiter) (spread, hard time.Time) {
	if w.dueNow {
		return w.enqueued, w.enqueued
	}
	cfg := b.l.conf()
	mw := cfg.MaxWait
	early := time.Duration(min(cfg.Jitter, maxWaitSpread) * maxWaitShare(w.req.Session, w.arrival) * float64(mw))
	return w.enqueued.Add(mw - early), w.enqueued.Add(mw)
}

// maxWaitSpread is the share of maxWait over which the grants it forces are
// spread (deadlineLocked); Config.Jitter when smaller (none with 0).
const maxWaitSpread = 0.1

// forcedDue reports whether a waiter whose wait ends at until (its next drain
// time, or the one that holds the queue; capped: unknown, its session's call
// must settle) is forced through now, and when to look at it again otherwise.
// Before its hard deadline, only its own look forces it (own): a dispatch that
// another waiter's look or a settlement runs leaves it to its own, or every
// waiter whose point had passed went in that one dispatch — the cohort the
// spread is there to break (over real sockets, 7–19 refused at the provider
// within a few milliseconds where the spread allows two or three).
//
// Nor does it force one before forcedAfter, a gap after the last forced grant
// (forcedGapLocked): the first call maxWait lets through into a full window
// meets the provider alone, and its answer — a 429, whose cooldown the proxy
// sends none of the others into, or room — is back before the next goes.
// Neither moves a look past the hard deadline, where any dispatch forces it.
// What the gap holds back until then goes together there: a hundred grants fit
// in the last tenth of a 120 s maxWait at the least gap.
func forcedDue(now, until time.Time, capped, own bool, spread, hard, forcedAfter time.Time) (due bool, next time.Time) {
	overrun := capped || until.After(hard)
	switch {
	case !now.Before(hard):
		return true, time.Time{}
	case !overrun:
		return false, until
	case !now.Before(spread) && own && !now.Before(forcedAfter):
		return true, time.Time{}
	}
	// Its point ahead, or passed while another looks (its own look is due:
	// its caller's timer runs it), or inside the gap.
	if next = maxTime(maxTime(spread, forcedAfter), now); next.After(hard) {
		next = hard
	}
	return false, next
}

// forcedGapLocked is the least time between two grants maxWait forces before
// their hard deadlines: 1.5 × the longest recent admission→429 delay (a
// refused call's round trip), at most a fiftieth of the window (as the count
// guard), and at least a thousandth of maxWait (120 ms at 120 s).
func (b *bucket) forcedGapLocked() time.Duration {
	cfg := b.l.conf()
	return max(min(b.roundTripLocked()*3/2, cfg.Window/50), cfg.MaxWait/1000)
}

// maxWaitShare is a share in [0, 1) for a waiter from its session and its
// arrival number: a hash, not a draw, so the ledger's random source (and a
// seeded run's sequence) is not touched.
func maxWaitShare(session string, arrival uint64) float64 {
	h := uint64(14695981039346656037) // FNV-1a over the session
	for i := 0; i < len(session); i++ {
		h ^= uint64(session[i])
		h *= 1099511628211
	}
	h ^= arrival * 0x9e3779b97f4a7c15 // then splitmix64's finalizer
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}

// forcedReserveLocked asks the shared window for waiter w, past its maxWait:
// its max-wait grant fails open, and the other instances count it too. A
// failClosed store that does not answer holds it instead (held, w.next set),
// to ask again — or to be refused once the store is down — never a fail-open
// grant.
func (b *bucket) forcedReserveLocked(now time.Time, w *Waiter) (id string, held bool) {
	id, wait, reason := b.sharedReserveLocked(now, w.size, true)
	if reason == storeReason {
		w.next = now.Add(wait)
		return "", true
	}
	return id, false
}

// dispatchLocked grants, in fair order, every waiter that fits at now. A waiter
// that does not fit lets smaller ones behind it through (no head-of-line blocking)
// until it has waited half a window; from then on it holds everyone behind it, so
// a huge context cannot be starved by a stream of small requests.
func (b *bucket) dispatchLocked(now time.Time) {
	if len(b.waiters) == 0 {
		return
	}
	b.expireLocked(now)
	b.ageLocked(now)
	sortWaiters(b.waiters)
	pauseEnd := b.pauseEndLocked(now)
	forcedAfter := b.lastForced.Add(b.forcedGapLocked())
	var held *Waiter
	for _, w := range b.waiters {
		if w.granted || !w.refusedUntil.IsZero() {
			continue // granted or refused by a dispatch that a panicking event hook cut short
		}
		if pauseEnd.After(now) && b.refuseInPauseLocked(now, w, pauseEnd) {
			continue
		}
		spread, hard := b.deadlineLocked(w)
		if held != nil {
			if w.reason == "" {
				w.reason = "queue"
			}
			// Holding the queue never stretches a wait past maxWait. Its own
			// wait ends no sooner than the head's (held.until), which no
			// forced grant of the head shortens.
			if due, next := forcedDue(now, held.until, false, w == b.looking, spread, hard, forcedAfter); !due {
				w.next = next
				if held.next.Before(next) && held.next.After(now) { // looked at again with the head
					w.next = held.next
				}
				continue
			}
			id, held := b.forcedReserveLocked(now, w)
			if held {
				continue
			}
			b.grantWaiterLocked(now, w, "max-wait")
			b.attachWaiterShared(w, id)
			w.ticket.FailOpen = true
			b.lastForced, forcedAfter = now, now.Add(b.forcedGapLocked())
			b.event(EventFailOpen, now, w.req.Session, "max-wait:queue", now.Sub(w.enqueued), w.reserved)
			continue
		}
		if !w.size.asked && w.size.output == int64(b.est.configuredReserve) && b.est.calibrated() {
			// Sized at a cold start, with the configured output reserve, before
			// any output was learned: a queue formed then would hold it for
			// every call it lets through.
			w.size = b.reservation(w.req)
			w.reserved = w.size.total
		}
		reason, wait, capped := b.block(now, w.reserved, w.size.output, w.size.variance, w.size.variance-w.size.inputVar, w.req.Session)
		var id string
		if wait == 0 && !capped {
			var sw time.Duration
			var sreason string
			if id, sw, sreason = b.sharedReserveLocked(now, w.size, false); sw > 0 {
				reason, wait = sreason, sw
			}
		}
		w.until = now.Add(wait)
		due, next := forcedDue(now, w.until, capped, w == b.looking, spread, hard, forcedAfter)
		switch {
		case wait == 0 && !capped:
			b.grantWaiterLocked(now, w, "")
			b.attachWaiterShared(w, id)
			continue
		case due:
			var held bool
			if id, held = b.forcedReserveLocked(now, w); held {
				continue
			}
			b.grantWaiterLocked(now, w, "max-wait")
			b.attachWaiterShared(w, id)
			w.ticket.FailOpen = true
			b.lastForced, forcedAfter = now, now.Add(b.forcedGapLocked())
			b.event(EventFailOpen, now, w.req.Session, "max-wait:"+reason, now.Sub(w.enqueued), w.reserved)
			continue
		}
		if w.reason == "" {
			w.reason = reason
		}
		// A capped call is woken by the settlement that frees the cap, or at its
		// deadline; any other at its drain time, or where maxWait forces it.
		w.next = next
		if wait > 0 && now.Add(wait).Before(next) {
			w.next = now.Add(wait)
		}
		// Only a call the window holds back holds the queue: one held by its own
		// session's in-flight cap waits for that session, not for capacity.
		if now.Sub(w.enqueued) >= b.l.conf().Window/2 && !capped {
			held = w
		}
	}
	n := 0
	for _, w := range b.waiters {
		if !w.granted && w.refusedUntil.IsZero() {
			b.waiters[n] = w
			n++
		}
	}
	clear(b.waiters[n:])
	b.waiters = b.waiters[:n]
}

// resizeWaitersLocked sizes the waiting calls again, after what a call in
// flight counts changed (what the provider decides a call on).
func (b *bucket) resizeWaitersLocked() {
	for _, w := range b.waiters {
		if !w.granted {
			w.size = b.reservation(w.req)
			w.reserved = w.size.total
		}
	}
}

func (b *bucket) grantWaiterLocked(now time.Time, w *Waiter, reason string) {
	if reason == "" {
		reason = w.reason
	}
	w.ticket = b.grantLocked(now, w.req, w.size, now.Sub(w.enqueued), reason)
	w.granted = true
	if w.round > b.round {
		b.round = w.round
	}
	close(w.ready)
	if w.ticket.Waited > 0 {
		b.event(EventAdmitted, now, w.req.Session, w.ticket.Reason, w.ticket.Waited, w.reserved)
	}
}

func (b *bucket) removeWaiterLocked(w *Waiter) {
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return
		}
	}
}

// grantLocked records the reservation in the window and issues its ticket.
func (b *bucket) grantLocked(now time.Time, req Request, sz sizing, waited time.Duration, reason string) Ticket {
	res, out := sz.total, sz.output
	over := res > b.learnedTokenBudget()
	if over {
		reason = "over-budget"
		b.event(EventOverBudget, now, req.Session, reason, waited, res)
	}
	if (b.aboveHeldLocked(now, res, sz.variance) && !over) || b.aboveHeldRequestsLocked(now) {
		// (an over-budget call is not spaced, so it does not space others; a
		// fail-open grant past maxWait is, like any call above the old level)
		b.stepNext = now.Add(b.stepGapLocked())
	}
	// The clean-window record counts calls at their expected output, like the 429
	// reading; before any output was seen there is no expectation, and a reading
	// made of reserves would overstate it (and later raise a false leak warning).
	if !req.Sends {
		b.observeAdmitLocked(now, b.providerViewLocked()+float64(b.providerCostLocked(res, out)))
	}
	// Before any output was seen the arrival view counts calls in flight at their
	// whole reserve, far above what the provider holds: no level to record then.
	arrivalBefore := int64(-1)
	if b.est.meanOutput() >= 0 {
		arrivalBefore = int64(b.arrivalViewLocked()) - b.win.tail()
	}
	fixedBefore := int64(-1)
	if b.win.fixed.on && b.est.meanOutput() >= 0 {
		fixedBefore = int64(b.fixedArrivalViewLocked())
	}
	b.noteSpentLocked(now, float64(res))
	reqArrival, reqDone := b.providerRequestsIn(false), b.providerRequestsIn(true) // without this call
	if b.win.n == 0 && b.done.n == 0 {
		b.coldFrom = now.UnixNano() // traffic starts: cold once a send is reported
	}
	seq := b.win.add(now, res, out, sz.asked)
	outSeq := b.out.win.add(now, out, 0, false)
	var idx int32
	if n := len(b.free); n > 0 {
		idx = b.free[n-1]
		b.free = b.free[:n-1]
	} else {
		b.slots = append(b.slots, ticketSlot{})
		idx = int32(len(b.slots) - 1)
	}
	s := &b.slots[idx]
	s.open, s.seq, s.reserved, s.output, s.asked, s.bytes, s.session = true, seq, res, out, sz.asked, req.InputBytes, req.Session
	s.guessed, s.input, s.variance, s.admitted = sz.guessed, sz.input, sz.variance, now.UnixNano()
	s.inputVar, s.output0, s.sendPending = sz.inputVar, out, req.Sends
	s.outSeq = outSeq
	if req.Sends {
		s.unsent = b.providerCostLocked(res, out)
		b.unsent += s.unsent
		b.unsentCount++
	}
	s.viewArrival, s.viewDone, s.viewFixed = arrivalBefore, b.done.tokens-b.done.tail(), fixedBefore
	s.reqArrival, s.reqDone = int32(reqArrival), int32(reqDone)
	b.reservedOpen += res
	s.landing = b.providerCostLocked(res, out)
	if !req.Sends {
		b.land.open(s.landing) // (a call the caller sends later opens there: Sent)
	}
	b.openVar += sz.variance
	b.openInputVar += sz.inputVar
	if budget := b.tokenBudget(now); reason != "max-wait" && !over {
		// Only calls the pacer let through spend it (not fail-open or over-budget
		// ones), and never more than a budget below its burst: the longest pace
		// wait stays within window ÷ pace.
		b.spendPaceLocked(now, res, budget)
		s.paced = true
	}
	b.inFlight++
	if b.perSession != nil {
		b.perSession[req.Session]++
	}
	if !req.Sends {
		b.readAtSendLocked(now) // at the provider from now (else: Sent)
	}
	return Ticket{b: b, slot: idx, gen: s.gen, Reserved: res, ReservedOutput: out, Waited: waited, Reason: reason}
}

// observeAdmitLocked records the level a call was admitted at (reading: the
// provider's window with the call in it) for the clean-window record.
func (b *bucket) observeAdmitLocked(now time.Time, reading float64) {
	if b.est.meanOutput() < 0 {
		reading = 0
	}
	b.learn.observeAdmit(now, reading, b.l.conf().Window)
}

// closeLocked settles (u != nil) or releases a ticket.
func (b *bucket) closeLocked(now time.Time, t Ticket, tokens int64, u *Usage) error {
	if err := b.closeSlotLocked(now, t, tokens, u); err != nil {
		return err
	}
	b.dispatchLocked(now) // the refund may let waiters through
	return nil
}

// abandonLocked takes w out without dispatching (nor emitting): it leaves the
// queue, or gives back the grant nobody will use. For recovery from a panic.
func (b *bucket) abandonLocked(now time.Time, w *Waiter) {
	if w.cancelled {
		return
	}
	w.cancelled = true
	if w.granted {
		_ = b.closeSlotLocked(now, w.ticket, 0, nil)
		return
	}
	b.removeWaiterLocked(w)
}

// closeSlotLocked is closeLocked without the dispatch.
func (b *bucket) closeSlotLocked(now time.Time, t Ticket, tokens int64, u *Usage) error {
	if int(t.slot) >= len(b.slots) {
		return ErrTicketClosed
	}
	s := &b.slots[t.slot]
	if !s.open || s.gen != t.gen {
		return ErrTicketClosed
	}
	b.expireLocked(now)
	b.lastUsed = now
	var output int64 // what the call counts in the output window from now on
	switch {
	case s.sendPending && u == nil:
		b.out.win.drop(s.outSeq)
	case u != nil && u.OutputUnseen:
		output = max(s.output, u.OutputTokens) // what it wrote is not known: its reserve (brought up to its age)
	case u != nil:
		output = u.OutputTokens // what it wrote, as the provider corrects it at the end
	case tokens == 0:
		output = 0 // released: it wrote nothing the caller saw
	case s.settledElsewhere:
		// Another instance settled it with its whole cost, cache reads and
		// all, against an input this one only estimated: no output share can
		// be told from it. Its reserve.
		output = s.output
	default:
		// Abandoned, kept at what the provider is expected to count of a call
		// in flight: its input and expected output. The output part.
		output = min(s.output, max(0, tokens-s.input))
	}
	if !(s.sendPending && u == nil) {
		b.out.win.settle(s.outSeq, output)
	}
	if s.sendPending && u == nil {
		b.win.drop(s.seq) // released before it was sent: the provider never saw it
	} else if u != nil && b.outputWhenWrittenLocked() && u.OutputTokens > s.output0 {
		// The provider decided on the input and max_tokens and counts the
		// rest once written: from now, in the fixed window or from the
		// bucket current now (a sliding window counting on arrival adds it
		// to the call's entry, which this holds for as long, and a little
		// longer).
		written := u.OutputTokens - s.output0
		b.win.settle(s.seq, tokens-written)
		b.win.addOutput(now, written)
	} else {
		b.win.settle(s.seq, tokens) // false: it already left the window and counts no more
	}
	b.spent += float64(tokens - s.reserved)
	if tokens > 0 {
		b.done.addSettled(now, tokens)
	}
	b.reservedOpen -= s.reserved
	if u != nil {
		b.land.settled(time.Duration(now.UnixNano() - s.admitted))
	}
	if s.sendPending { // never sent: the provider never counted it
		b.unsent -= s.unsent
		b.unsentCount--
	} else {
		b.land.close(s.landing, b.inFlight == 1)
	}
	if b.openVar -= s.variance; b.openVar < 0 || b.inFlight == 1 {
		b.openVar = 0 // no float residue once nothing is open
	}
	if b.openInputVar -= s.inputVar; b.openInputVar < 0 || b.inFlight == 1 {
		b.openInputVar = 0
	}
	b.inFlight--
	if b.perSession != nil {
		if b.perSession[s.session]--; b.perSession[s.session] <= 0 {
			delete(b.perSession, s.session)
		}
	}
	if u != nil {
		in := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens // the whole input, which the body's size tells
		b.est.observe(s.bytes, in, u.OutputTokens, s.output0, s.asked)
		b.est.observeOutput(u.OutputTokens, float64(now.UnixNano()-s.admitted)/1e9, s.asked)
		if s.guessed {
			b.est.observeInput(s.input, in)
		}
		span := b.l.conf().Window
		counted := u.counted() // the provider's view: without the cache reads it does not count
		cost := counted + u.OutputTokens
		if b.decidesKnown() {
			cost = counted + s.output0 // what the provider decided on: the output came later
		}
		if s.viewArrival >= 0 {
			b.servedArrival.note(now, s.viewArrival+cost, span)
		}
		b.servedDone.note(now, s.viewDone+cost, span)
		if s.viewFixed >= 0 {
			b.servedFixed.note(now, s.viewFixed+cost, span)
		}
		if s.paced && u.CacheReadsUncounted && u.CacheReadTokens > 0 {
			// The pacer was charged the whole input the request's size
			// stood for; the provider counts none of its cache reads.
			b.refundPaceLocked(now, min(u.CacheReadTokens, s.input))
		}
		b.servedReqArrival.note(now, int64(s.reqArrival)+1, span)
		b.servedReqDone.note(now, int64(s.reqDone)+1, span)
	}
	b.closeSharedLocked(s.shared, tokens, output)
	if s.alone && !(s.sendPending && u == nil) {
		b.keepAloneLocked(now, s.admitted, tokens, output)
	}
	*s = ticketSlot{gen: s.gen + 1}
	b.free = append(b.free, t.slot)
	return nil
}

func (b *bucket) rateLimitedLocked(now time.Time, sig engine.RateLimit, retryAfter time.Duration, fallback bool) {
	b.expireLocked(now)
	if !sig.Admitted.IsZero() && sig.Admitted.Before(b.steppedAt) {
		// Admitted before the wall clock stepped: the windows' stamps moved
		// with the step, its time did not, and read against them it would
		// point at other calls.
		sig.Admitted = time.Time{}
	}
	if until := now.Add(retryAfter); until.After(b.cooldownUntil) {
		b.cooldownUntil = until // a shorter, later cooldown never shortens a longer one
	}
	b.sharedCooldownLocked(now, now.Add(retryAfter))
	b.rateLimited++
	b.last429 = now
	b.stepHeld = 0 // the step, if one was tried, is answered (the request step below)
	b.lastUsed = now
	cfg := b.l.conf()
	if sig.Unread || sig.Axis == engine.AxisOutputTokens {
		// Unread: the cooldown, and no lesson. About the output limit: the
		// output axis learns it (output.go), and the token window, whose
		// reading says nothing of it, is not taught. Either way the window
		// is not clean and the next probe waits a window, as for a 429 about
		// another limit.
		axis := engine.AxisUnknown
		if !sig.Unread {
			axis = sig.Axis
		}
		e := b.newEvent(EventRateLimited, now, "", "", 0, 0)
		e.RetryAfter, e.FromFallback, e.Reason = retryAfter, fallback, axis.String()
		b.l.emit(e)
		b.learn.noteOther429(now, cfg.Window)
		if axis == engine.AxisOutputTokens {
			b.sharedOutputReadLocked(now)
			b.outputRateLimitedLocked(now, sig.Admitted, sig.OutputInWords)
			b.saveLearnedLocked()
		}
		return
	}
	b.observeStatedWaitLocked(now, sig.Admitted, retryAfter, fallback) // before the reading: this 429 is read in the windows it tells
	if b.learn.enabled && !sig.Admitted.IsZero() && now.After(sig.Admitted) {
		b.delays[b.nDelay%len(b.delays)] = now.Sub(sig.Admitted)
		b.nDelay++
		b.setSpanLocked(now, cfg)
	}
	axis := b.axisLocked(now, sig.Axis, b.providerViewLocked())
	if sig.Axis == engine.AxisTokens {
		b.forgetTokenReadLocked() // the provider said tokens: the run was theirs
	}
	if sig.Axis == engine.AxisUnknown && axis == engine.AxisTokens && b.learn.enabled {
		// Read as tokens by the shares: unless its count is the last such
		// 429's while the tokens moved (samecount.go).
		count, reading := b.requestsMetLocked(now, sig.Admitted), b.providerViewLocked()
		if b.sameCountLocked(now, count, reading) {
			b.rereadAsRequestsLocked(now)
			axis = engine.AxisRequests
		} else {
			b.noteTokenReadLocked(now, count, reading)
		}
	}
	trigger, view := b.learn.trigger, b.atCompletion
	if axis == engine.AxisTokens {
		b.outside429Locked(now)
		b.fixedReadLocked(now, sig.Admitted, sig.Tokens) // before the views' vote: fixed windows count on arrival
	}
	refuted, bothRefuted := false, false
	if axis == engine.AxisTokens && b.learn.enabled && !b.fixedWindowsLocked() {
		// (Not in fixed windows: the provider counts on arrival in them, and a
		// sliding view refuted there is no drained reserve.)
		refuted, bothRefuted = b.voteLocked(now, sig.Admitted, sig.Tokens)
	}
	reading := b.providerViewLocked()
	// No sliding window explains a 429 that refutes both views; when it also
	// comes at a level the gate had held for a window (not a probe's
	// overshoot), it is a drained reserve, and what was spent tells the limit
	// (rate.go). So is one that does not refute both but drained a lone bucket
	// at the rate an earlier drain over another span bounded (drainsAgree).
	rate, rateOK := b.rateSpentLocked(now)
	// Held: nothing raised the budget within a window (not lastProbe: it also
	// moves each window the trigger holds a call back without a step) — or the
	// last raise relaxed the trigger toward the clean record, and a 429 that
	// refutes both views says that record was a reserve lent, not a level held;
	// or it moved the budget by less than a reading's spread (a probe step the
	// trigger clipped: a bucket's reserve, lent to a fast climb, then never read).
	steady := now.Sub(b.learn.lastRaise) >= cfg.Window || b.learn.raisedByRelax || b.learn.raisedLittle
	// Not with a shared window: the spend is this instance's, the reading everyone's.
	// And never below a few ordinary calls, like any reading the learner believes.
	othersSpend := b.othersSpendingLocked(now) // another client's calls refute both views too: no drained reserve
	// A lone bucket's rate bound allows what this 429's spend needs, and a
	// drain that does not refute both views may agree with an earlier one (rate.go).
	lone, drainsAgreed := true, false
	if axis == engine.AxisTokens && b.learn.enabled && b.l.shared == nil {
		refused := sig.Tokens
		if refused <= 0 {
			refused = int64(b.typicalCallLocked()) // a caller that did not say: an ordinary call
		}
		lb, ub, full := b.rateBoundsLocked(now, refused)
		lone = b.rateCapAllowsLocked(now, lb)
		if full && !othersSpend && !b.fixedWindowsLocked() {
			was, refill := rateBound{}, b.refillShareLocked(now)
			if b.rateCapStandsLocked(now) {
				was = b.rateCap
			}
			// (Not once the provider stated its limit: a bucket's statement is
			// its rate, and a drain below it is another client's or the
			// timing's, which the stated limit's rules read.)
			drainsAgreed = b.learn.stated <= 0 && drainsAgree(was, lb, ub, refill)
			b.lowerRateCapLocked(now, lb, ub, refill)
		}
	}
	byRate := b.l.shared == nil && (bothRefuted || drainsAgreed) && rateOK && rate < reading && steady && !othersSpend && lone &&
		rate >= lowCallsAlone*b.typicalCallLocked() && b.refillAllowsLocked(now, rate, sig.Tokens)
	e := b.newEvent(EventRateLimited, now, "", "", 0, 0)
	e.RetryAfter, e.FromFallback = retryAfter, fallback
	e.Reason = axis.String()
	b.l.emit(e)
	var steps []learnStep
	switch {
	case axis == engine.AxisRequests:
		// a request step or relaxation, if one was tried, is answered
		b.rpmBoundAt, b.rpmStepHeld, b.rpmRelaxHeld, b.rpmRelaxUntil = now, 0, 0, time.Time{}
		unnamed := 0.0 // the token reading of an unnamed 429 (countFellLocked)
		if sig.Axis == engine.AxisUnknown {
			unnamed = b.providerViewLocked()
		}
		b.voteRequestsLocked(now, sig.Admitted)
		b.rpmLimitedLocked(now, sig.Admitted, sig.Axis == engine.AxisRequests, unnamed)
		b.learn.noteOther429(now, cfg.Window) // not the token axis: teaches tokens nothing
	case !byRate && b.learn.suspect(now, reading, b.typicalCallLocked(), cfg.Window):
		steps = b.learn.onSuspect(now, reading, cfg.Window)
	default:
		// The provider held more than the reading by up to the refused call, and
		// the reading itself is off by the spread of the calls in flight. The
		// refused call is an estimate too: the provider decided on its whole
		// cost, output included (not when it decides on input and max_tokens,
		// which the gate knows).
		var spread float64
		if sig.Tokens > 0 && !b.decidesKnown() { // (a call of unknown size brackets nothing)
			spread = b.est.outputVariance(false, b.agingLocked())
		}
		if !b.atCompletion {
			spread += b.openVar
		}
		slack := float64(sig.Tokens + b.marginOf(spread))
		if byRate {
			b.emitLearn(now, learnStep{Kind: "rate", From: reading, To: rate, Reading: rate, Trigger: b.learn.trigger})
			b.rateViewLocked(now) // a lone bucket's: count at completion (rate.go)
			reading = rate
			b.learn.rateAt = now
			// Not a window reading: no refused call or calls in flight bracket
			// it, and the clean windows above it were the reserve it lent.
			slack = 0
		}
		// Read on arrival while the votes lean to completion (not a rate, which
		// no view reads).
		inDoubt := b.modeVotes > 0 && !b.atCompletion && !byRate
		inBurst := b.learn.inBurst(now, cfg.Window)
		// In the arrival view the calls in flight are estimates, and on a token
		// bucket or fixed windows (which the arrival view is kept for until a
		// rate is read) a served level describes a lent reserve or a burst at a
		// window's edge: only the completion view's served levels bound the
		// limit — and not at a 429 that refutes it (refused below what it served).
		if b.atCompletion && !byRate && !refuted {
			b.learn.servedInView = float64(b.servedDone.max(now, cfg.Window))
		}
		if b.atCompletion && !byRate {
			// At completion the reading may lack a call that completed while
			// the gate could not see it (landing.go).
			b.learn.unseen = float64(b.unseenLandingLocked())
		}
		// A rate says the levels served above it were the reserve lent: the
		// clean record may not lift the trigger back to them.
		b.learn.onArrival = !b.atCompletion && !byRate
		steps = b.learn.on429(now, reading, slack, refuted || byRate, inDoubt, cfg.Window)
		b.learn.servedInView, b.learn.unseen, b.learn.onArrival = 0, 0, false // they describe this 429 only
		if byRate && inBurst {
			steps = append(steps, b.learn.rateInBurst(reading)...)
		}
	}
	b.learn.toCompletion, b.learn.stepAtSwitch = false, false // they describe this 429 only
	if axis == engine.AxisTokens && b.learn.trigger != trigger {
		b.outsideTriggerSetLocked(b.atCompletion != view)
	}
	for _, st := range steps {
		b.emitLearn(now, st)
	}
}

// typicalCallLocked is the cost of an ordinary call: the recent mean input and
// the expected output (0 before anything settled).
func (b *bucket) typicalCallLocked() float64 {
	out := max(b.est.meanOutput(), 0)
	return float64(b.est.input(0) + out)
}

// resetLocked forgets what was learned about the model: quota, triggers, the
// clean-window record, the measured count delay, when the provider counts. The cooldown stays: it is the
// provider's instruction, not something learned.
func (b *bucket) resetLocked(now time.Time) {
	// A reset is how a user says the limit moved: a figure only a 429 stated
	// goes; one an answer's headers state stays (the next answer restates it).
	if b.tokensBy429 {
		b.forgetStatedTokensLocked(now)
	}
	if b.requestsBy429 {
		b.forgetStatedRequestsLocked(now)
	}
	b.learn.reset(now)
	b.forgetOutputLocked()
	if b.decidesLearnedKnown {
		b.switchDecidesLocked(now, false, 0) // read again from the headers
	}
	b.forgetDecidesEvidenceLocked()
	b.outside, b.headersFitAt = outsideSpend{}, time.Time{}
	b.forgetTokenReadLocked()
	b.stepHeld = 0
	b.forgetRequestLearningLocked(now)
	b.rpmFreshAt = now
	b.atCompletion, _ = b.limits.countView()
	b.clearVotesLocked()
	b.fixedLearned, b.fixedEv, b.fixedByReadings = false, fixedEvidence{}, false // read again from the stated waits, resets and readings
	b.servedArrival, b.servedDone, b.doneRefutedAt, b.rateViewAt = servedLevel{}, servedLevel{}, time.Time{}, time.Time{}
	b.servedFixed, b.fixedRefutedAt = servedLevel{}, time.Time{}
	b.servedReqArrival, b.servedReqDone = servedLevel{}, servedLevel{}
	b.delays, b.nDelay = [8]time.Duration{}, 0
	b.nSpent = 0 // the spend before a reset says nothing of the limit after it
	b.lastGrantAt, b.refilledAt, b.refilledSpent = 0, 0, 0
	b.spentFromIdle, b.rateCap = false, rateBound{} // (the reserve may be anywhere now)
	cfg := b.l.conf()
	b.setRPMLocked()
	b.setSpanLocked(now, cfg)
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	b.dispatchLocked(now)
}

func (b *bucket) emitLearn(now time.Time, st learnStep) {
	if st.SkippedRepeat {
		return // a retry storm is one sample: nothing moved, nothing to log
	}
	if b.l.quotas != nil {
		b.l.quotas.Save(b.provider, b.model, b.snapshotLocked())
	}
	kind := EventLearn
	if st.Kind == "leak" {
		kind = EventLeak
	}
	e := b.newEvent(kind, now, "", "", 0, 0)
	e.Step, e.From, e.To = st.Kind, st.From, st.To
	if st.Kind == "leak" {
		e.From = st.CleanMaxSeen
		e.To = st.Trigger
	}
	b.l.emit(e)
}

func (b *bucket) event(kind EventKind, now time.Time, session, reason string, wait time.Duration, res int64) {
	if b.l.onEvent == nil {
		return
	}
	b.l.emit(b.newEvent(kind, now, session, reason, wait, res))
}

func (b *bucket) newEvent(kind EventKind, now time.Time, session, reason string, wait time.Duration, res int64) Event {
	return Event{
		Kind: kind, At: now, Provider: b.provider, Model: b.model, Session: session, Reason: reason, Wait: wait,
		WindowTokens: b.admitCountLocked(), TokenBudget: b.tokenBudget(now), Reservation: res,
		Quota: b.learn.quota, Start: b.learn.start, Trigger: b.learn.trigger,
		Requests: b.requestCountLocked(), RPMBudget: b.rpm, CooldownLeft: b.cooldownLeft(now),
	}
}
