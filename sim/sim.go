package sim

import (
	"container/heap"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// Modes, in report order.
const (
	ModeOracle = "oracle" // the engine's admission with the true limit known and fixed: what learning costs is measured against it
	ModeGate   = "gate"   // the real engine, learning from its configured start
	ModeNaive  = "naive"  // no gate; OpenAI-SDK retries: 2 retries, 0.5·2ⁿ s capped at 8 s, then the request is lost
)

// Modes lists the modes in report order.
var Modes = []string{ModeOracle, ModeGate, ModeNaive}

const (
	gateMaxAttempts = 6 // attempts a gated call makes before it counts as lost (the first and 5 retries)
	naiveRetries    = 2
	convergedBand   = 0.05
	outsideRetry    = time.Second // an outside call refused is sent again this much later
)

// Metrics is one mode's result.
type Metrics struct {
	// Utilization is every token the provider served (the sessions' and the
	// outside client's) ÷ (true TPM × windows). A token bucket starts full, so it
	// can exceed 1 by one window's worth over the run.
	Utilization float64 `json:"utilization"`
	// RemainingUtilization is what the sessions were served ÷ (true TPM × windows −
	// what the outside client was served): the use of the capacity left to the
	// gate. Without outside traffic it equals Utilization.
	RemainingUtilization float64 `json:"remainingUtilization"`
	// OutsideShare is what the outside client was served ÷ (true TPM × windows).
	OutsideShare float64 `json:"outsideShare,omitempty"`
	// AfterOutside is, when the outside client stopped (outside.until), what
	// the sessions were served from then on ÷ (true TPM × the windows left):
	// how much of the limit the gate takes back.
	AfterOutside float64 `json:"afterOutside,omitempty"`
	// RequestUtilization is every request the provider served ÷ (true RPM × windows).
	RequestUtilization float64 `json:"requestUtilization"`
	// RateLimited counts the sessions' 429s; ByTokens and ByRequests split it by
	// the limit that refused (whether or not the provider said so).
	RateLimited           int `json:"rateLimited"`
	RateLimitedByTokens   int `json:"rateLimitedByTokens"`
	RateLimitedByRequests int `json:"rateLimitedByRequests"`
	// With an output limit (provider.otpm): the sessions' 429s about it; the
	// output the provider served (the sessions' and the outside client's) ÷
	// (true OTPM × windows); with an outside client that writes output, the
	// sessions' ÷ (true OTPM × windows − the client's); and, engine modes,
	// the output limit the gate held to at the end (0: none).
	RateLimitedByOutput        int     `json:"rateLimitedByOutput"`
	OutputUtilization          float64 `json:"outputUtilization"`
	RemainingOutputUtilization float64 `json:"remainingOutputUtilization,omitempty"`
	FinalOutputLimit           float64 `json:"finalOutputLimit,omitempty"`
	RateLimitedPerHour         float64 `json:"rateLimitedPerHour"`
	OutsideRateLimited         int     `json:"outsideRateLimited,omitempty"` // the outside client's 429s
	Lost                       int     `json:"lost"`                         // requests that never succeeded
	Completed                  int     `json:"completed"`                    // requests that succeeded
	WaitP50Ms                  int64   `json:"waitP50Ms"`
	WaitP99Ms                  int64   `json:"waitP99Ms"`
	Fairness                   float64 `json:"fairness"` // Jain's index of tokens served per session
	// Gate only: the first window after which the learned quota, min(quota,
	// trigger, the room the others' spend leaves when the headers say it
	// plainly), stays within ±5% of the capacity left to the gate (the true
	// TPM less the outside share); null when it never settles.
	ConvergedAfterWindows *int `json:"convergedAfterWindows,omitempty"`
	// Gate only: 429s after convergence, and per hour from the convergence
	// window on. In the convergence window itself, only 429s that came with the
	// quota already in the band count (rateLimitedSince).
	RateLimitedAfterConvergence        *int     `json:"rateLimitedAfterConvergence,omitempty"`
	RateLimitedPerHourAfterConvergence *float64 `json:"rateLimitedPerHourAfterConvergence,omitempty"`
	// Gate only: the lowest trigger seen at the end of any window ÷ the capacity
	// left to the gate; 0 when no trigger was ever set. Below 0.95 with outside
	// traffic it is a false trigger: a reading under what the gate may use.
	LowestTrigger float64 `json:"lowestTrigger,omitempty"`
	// Engine modes: the learned quota and trigger at the end.
	FinalQuota   float64 `json:"finalQuota,omitempty"`
	FinalTrigger float64 `json:"finalTrigger,omitempty"`
	// FinalDecides is what the engine took the provider to decide a call on
	// at the end (whole or known): told, or read from the rate-limit headers.
	FinalDecides string `json:"finalDecides,omitempty"`
	// FinalWindows is "fixed" when the engine counted fixed windows at the
	// end: told, or read from the 429s' stated waits or the answers' stated
	// token resets.
	FinalWindows string `json:"finalWindows,omitempty"`
	// LearnedPerWindow is min(quota, trigger, the room) ÷ the capacity left to
	// the gate at the end of each window (gate).
	LearnedPerWindow []float64 `json:"-"`
}

// Report is the result of one scenario in every mode.
type Report struct {
	Scenario Scenario           `json:"scenario"`
	Modes    map[string]Metrics `json:"modes"`
}

// Run simulates s in every mode on the same trace.
func Run(s Scenario) (Report, error) { return RunModes(s, Modes...) }

// RunModes simulates s in the given modes on the same trace.
func RunModes(s Scenario, modes ...string) (Report, error) {
	if err := s.Validate(); err != nil {
		return Report{}, err
	}
	r := Report{Scenario: s, Modes: map[string]Metrics{}}
	for _, m := range modes {
		met, err := runMode(s, m)
		if err != nil {
			return r, err
		}
		r.Modes[m] = met
	}
	return r, nil
}

// trace draws each session's k-th request identically in every mode.
type trace struct {
	rng            *rand.Rand
	promptMu       float64
	promptSigma    float64
	outputMu       float64
	outputSigma    float64
	thinkMeanSec   float64
	maxTokensShare float64
	maxTokens      int64
	maxOutput      int64 // with provider.otpm, what it leaves the sessions: no call writes more (0: no cap)
}

type job struct {
	prompt, output int64
	maxTokens      int64 // the max_tokens the call sends; 0: none
	think          time.Duration
}

func (t *trace) next() job {
	p := math.Exp(t.promptMu + t.promptSigma*t.rng.NormFloat64())
	o := math.Exp(t.outputMu + t.outputSigma*t.rng.NormFloat64())
	th := t.rng.ExpFloat64() * t.thinkMeanSec
	j := job{prompt: max(1, int64(p)), output: max(1, int64(o)), think: time.Duration(th * float64(time.Second))}
	if t.maxTokensShare > 0 && t.rng.Float64() < t.maxTokensShare { // no draw without the share: older traces stay as they were
		j.maxTokens = t.maxTokens
		j.output = min(j.output, t.maxTokens)
	}
	if t.maxOutput > 0 {
		j.output = min(j.output, t.maxOutput) // it could never fit: no gate could save it
	}
	return j
}

const z99 = 2.3263478740408408 // the standard normal's 99th percentile

func lognormal(spec SizeSpec) (mu, sigma float64) {
	return math.Log(spec.Median), math.Log(spec.P99/spec.Median) / z99
}

// responseTime is how long the provider takes to answer a call writing output
// tokens.
func (s Scenario) responseTime(output int64) time.Duration {
	return time.Duration(s.Response.Base) + time.Duration(output)*time.Duration(s.Response.PerOutputToken)
}

// thinkMean makes the closed loop offer demand × the binding true limit: each
// session's cycle (round trip + response + think) carries the mean request.
func thinkMean(s Scenario) float64 {
	pm, ps := lognormal(s.Prompt)
	om, os := lognormal(s.Output)
	meanP := math.Exp(pm + ps*ps/2)
	meanO := math.Exp(om + os*os/2)
	win := time.Duration(s.Window).Seconds()
	// requests per second the provider allows: whichever limit binds first
	allowed := math.Min(float64(s.Provider.TPM)/(meanP+meanO), float64(s.Provider.RPM)) / win
	if s.Provider.OTPM > 0 {
		allowed = math.Min(allowed, float64(s.Provider.OTPM)/meanO/win)
	}
	perSession := s.Demand * allowed / float64(s.Sessions)
	trip := 2*time.Duration(s.Network.Delay) + time.Duration(s.Network.Jitter)
	return math.Max(0, 1/perSession-(s.responseTime(int64(meanO))+trip).Seconds())
}

type session struct {
	id      int
	trace   trace
	cur     job
	attempt int
	waited  time.Duration
	adm     admission
	queued  bool // waiting in the gate
	gen     int  // invalidates stale poll events
	served  int64
	sentAt  time.Time // when the current attempt left the gate (admitted)
	pending refusal   // the 429 on its way back to the gate
	held    held      // what the provider counted for the call in flight
	hdr     headers   // the headers on the answer on its way back
}

type event struct {
	at     time.Time
	seq    uint64
	kind   int
	s      *session // nil for outside calls and samples
	gen    int
	tokens int64 // outside calls: their cost
}

const (
	evIssue       = iota // a session starts its next call
	evPoll               // a queued call polls the gate
	evArrive             // a session's call reaches the provider
	evDone               // the provider finishes a session's call
	evAnswer             // the answer reaches the gate
	evRefused            // a 429 reaches the gate
	evRetry              // naive: a retry leaves
	evSample             // end of a window: sample the learned quota
	evOutsideTick        // the outside client's schedule
	evOutsideCall        // an outside call reaches the provider
	evOutsideDone        // the provider finishes an outside call
	evOutsideStop        // the outside client stops spending (outside.until)
)

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	// The outside client's stop comes last at its instant: a window sample
	// there judges the window that just ended, spent in with the client, against
	// the capacity it left.
	if si, sj := q[i].kind == evOutsideStop, q[j].kind == evOutsideStop; si != sj {
		return sj
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type runner struct {
	s        Scenario
	mode     string
	start    time.Time
	end      time.Time
	clock    *engine.FakeClock
	gate     *gateAdapter // nil in naive mode
	provider *provider
	rng      *rand.Rand // poll jitter
	net      *rand.Rand // network jitter
	q        eventQueue
	seq      uint64
	sessions []*session
	waits    []time.Duration
	times429 []time.Time // when each session 429 reached the gate
	// settled429 says, for each of times429 in gate mode, whether the learned
	// quota was already within the convergence band when that 429 arrived: a
	// 429 that brings the quota into the band is the last of its discovery, not
	// one after it.
	settled429 []bool
	lost       int
	done       int
	learned    []float64
	capacity   float64 // tokens per window left to the gate: true TPM less the outside share
	// lowestTrigger is the lowest non-zero trigger seen at a window sample,
	// ÷ the capacity then.
	lowestTrigger float64
	// stopped is when the outside client stopped (outside.until; zero: it
	// did not), and servedAtStop what the sessions had been served by then.
	stopped      time.Time
	servedAtStop int64
}

func runMode(s Scenario, mode string) (Metrics, error) {
	r, err := newRunner(s, mode)
	if err != nil {
		return Metrics{}, err
	}
	for r.step() {
	}
	return r.metrics(), nil
}

// newRunner sets up one mode's run with its first events queued.
func newRunner(s Scenario, mode string) (*runner, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := newProvider(s.Provider, time.Duration(s.Window))
	if err != nil {
		return nil, err
	}
	r := &runner{
		s: s, mode: mode, start: start, end: start.Add(time.Duration(s.Duration)),
		clock:    engine.NewFakeClock(start),
		provider: p,
		rng:      rand.New(rand.NewPCG(s.Seed, 0x5eed)),
		net:      rand.New(rand.NewPCG(s.Seed, 0x6e6574)),
		capacity: float64(s.Provider.TPM) * (1 - s.Outside.Share),
	}
	if mode != ModeNaive {
		lim := gateLimits{window: time.Duration(s.Window), tpm: s.StartTPM(), rpm: s.StartRPM(), safetyFactor: s.Gate.SafetyFactor, learn: true,
			admission: s.Gate}
		if mode == ModeOracle {
			// the truth, less what the outside client takes, known and fixed
			lim.tpm = int(r.capacity)
			lim.rpm = max(1, s.Provider.RPM-int(math.Ceil(r.outsideRequestsPerWindow())))
			lim.learn = false
			switch s.Provider.Model { // how it counts is part of the truth
			case LimitSlidingCompletion:
				lim.countsAt = gate.CountsAtCompletion
			case LimitFixedWindow:
				lim.windows = gate.WindowsFixed
			case LimitSlidingArrival, LimitTokenBucket:
				// Told the provider decides on what it knows, the output
				// counts with its call's arrival: the sliding window books it
				// in the call's entry; the bucket takes it when written, but
				// its reserve absorbs the difference (docs/gate.md, "When
				// the output counts"), as the docs advise.
				lim.countsAt = gate.CountsAtArrival
			}
			if s.Provider.Decides == DecidesKnown {
				lim.decides = gate.DecidesKnown // and what it decides a call on
			}
			lim.otpm = int(s.outputLeft()) // and the output limit, less the others' share
		}
		if mode == ModeGate {
			lim.countsAt = s.Gate.CountsAt // what the user tells the gate: "" learns it
			lim.decides = s.Gate.Decides
			lim.windows = s.Gate.Windows
			lim.otpm = s.Gate.OTPM
		}
		var trace io.Writer
		if mode == ModeGate {
			trace = s.Trace
		}
		if r.gate, err = newGateAdapter(lim, r.clock, s.Seed, start, trace); err != nil {
			return nil, err
		}
	}
	pm, ps := lognormal(s.Prompt)
	om, os := lognormal(s.Output)
	think := thinkMean(s)
	for i := 0; i < s.Sessions; i++ {
		ss := &session{id: i, trace: trace{
			rng:      rand.New(rand.NewPCG(s.Seed, uint64(i)+1)),
			promptMu: pm, promptSigma: ps, outputMu: om, outputSigma: os, thinkMeanSec: think,
			maxTokensShare: s.MaxTokensShare, maxTokens: int64(s.MaxTokens), maxOutput: s.outputLeft(),
		}}
		r.sessions = append(r.sessions, ss)
		// stagger the first requests over the first second, as sessions come up
		r.push(start.Add(time.Duration(ss.trace.rng.Float64()*float64(time.Second))), evIssue, ss)
	}
	if mode == ModeGate {
		r.push(start.Add(time.Duration(s.Window)), evSample, nil)
	}
	if s.Outside.Share > 0 {
		if s.Outside.Warm {
			r.warmOutside(start)
		}
		r.push(start.Add(r.outsidePeriod()/2), evOutsideTick, nil)
		if u := time.Duration(s.Outside.Until); u > 0 && u < time.Duration(s.Duration) {
			r.push(start.Add(u), evOutsideStop, nil)
		}
	}
	return r, nil
}

// step handles the next event; false when the run is over.
func (r *runner) step() bool {
	if r.q.Len() == 0 || r.q[0].at.After(r.end) {
		return false
	}
	e := heap.Pop(&r.q).(event)
	r.clock.Set(e.at)
	r.handle(e)
	r.sweep(e.at)
	return true
}

func (r *runner) push(at time.Time, kind int, s *session) {
	r.pushTokens(at, kind, s, 0)
}

func (r *runner) pushTokens(at time.Time, kind int, s *session, tokens int64) {
	r.seq++
	gen := 0
	if s != nil {
		gen = s.gen
	}
	heap.Push(&r.q, event{at: at, seq: r.seq, kind: kind, s: s, gen: gen, tokens: tokens})
}

// oneWay is one trip between the gate and the provider.
func (r *runner) oneWay() time.Duration {
	d := time.Duration(r.s.Network.Delay)
	if j := time.Duration(r.s.Network.Jitter); j > 0 {
		d += time.Duration(r.net.Float64() * float64(j))
	}
	return d
}

func (r *runner) handle(e event) {
	now := e.at
	s := e.s
	switch e.kind {
	case evIssue:
		s.cur = s.trace.next()
		s.attempt, s.waited = 0, 0
		r.try(now, s)
	case evPoll:
		if s.queued && e.gen == s.gen {
			r.gate.poll(now, &s.adm)
			// a grant is picked up by sweep; otherwise poll again at its next time
			if !r.gate.grant(&s.adm) {
				r.schedulePoll(s)
			}
		}
	case evRetry:
		r.send(now, s)
	case evArrive:
		ref, h := r.provider.offer(now, r.cost(s.cur), fromSessions)
		s.held = h
		if ref.axis != axisNone {
			r.push(now.Add(r.oneWay()), evRefused, s)
			s.pending = ref
			return
		}
		if r.s.Provider.HeadersAt == HeadersAtArrival {
			s.hdr = r.provider.headers(now)
		}
		r.push(now.Add(r.s.responseTime(s.cur.output)), evDone, s)
	case evDone:
		r.provider.done(now, r.cost(s.cur), s.held, fromSessions)
		if r.s.Provider.HeadersAt != HeadersAtArrival {
			s.hdr = r.provider.headers(now)
		}
		r.push(now.Add(r.oneWay()), evAnswer, s)
	case evAnswer:
		if r.gate != nil {
			r.gate.settle(now, &s.adm, s.cur.prompt, s.cur.output)
			if r.s.Provider.Headers && r.mode == ModeGate {
				r.gate.calibrate(now, s.sentAt, s.hdr)
			}
		}
		s.served += s.cur.prompt + s.cur.output
		r.done++
		r.waits = append(r.waits, s.waited)
		r.push(now.Add(s.cur.think), evIssue, s)
	case evRefused:
		r.refused(now, s)
	case evSample:
		learned, _, trig := r.gate.learned(now)
		r.learned = append(r.learned, learned/r.capacity)
		if trig > 0 && (r.lowestTrigger == 0 || trig/r.capacity < r.lowestTrigger) {
			r.lowestTrigger = trig / r.capacity
		}
		r.push(now.Add(time.Duration(r.s.Window)), evSample, nil)
	case evOutsideTick:
		r.outsideTick(now)
	case evOutsideCall:
		if r.outsideStopped(now) {
			return // outside.until: it gives up the calls it had not sent, refused ones waiting to be sent again too
		}
		if ref, _ := r.provider.offer(now, r.outsideCost(e.tokens), fromOutside); ref.axis != axisNone {
			r.pushTokens(now.Add(outsideRetry), evOutsideCall, nil, e.tokens)
			return
		}
		r.pushTokens(now.Add(time.Duration(r.s.Response.Base)), evOutsideDone, nil, e.tokens)
	case evOutsideDone:
		r.provider.done(now, r.outsideCost(e.tokens), held{}, fromOutside)
	case evOutsideStop:
		r.stopped, r.servedAtStop = now, r.provider.served[fromSessions]
		r.capacity = float64(r.s.Provider.TPM) // the whole limit is the gate's now
	}
}

// cost is what a session's call costs the provider: decided on its input and
// max_tokens when the provider decides on what it knows (provider.decides),
// else on its whole cost.
func (r *runner) cost(j job) cost {
	c := whole(j.prompt + j.output)
	c.outDecide, c.outWhole = j.output, j.output
	if r.s.Provider.Decides == DecidesKnown {
		c.decide = j.prompt + j.maxTokens
		c.outDecide = 0 // an output limit counts it as written
	}
	if j.maxTokens > 0 {
		c.outDecide = j.maxTokens // what an output limit counts at arrival
	}
	return c
}

// outsideCost is what an outside call of tokens costs the provider: known in
// full when it arrives, outside.outputShare of the output limit spread over
// the client's tokens.
func (r *runner) outsideCost(tokens int64) cost {
	c := whole(tokens)
	if o := r.s.Outside; o.OutputShare > 0 {
		c.outDecide = int64(math.Round(r.s.outsideCallOutput(float64(tokens))))
		c.outWhole = c.outDecide
	}
	return c
}

// try asks for admission (engine modes) or sends at once (naive).
func (r *runner) try(now time.Time, s *session) {
	if r.gate == nil {
		r.send(now, s)
		return
	}
	if r.gate.submit(now, sessionName(s.id), s.cur.prompt, s.cur.maxTokens, &s.adm) {
		s.waited += s.adm.waited()
		r.send(now, s)
		return
	}
	s.queued = true
	s.gen++
	r.schedulePoll(s)
}

func (r *runner) schedulePoll(s *session) {
	next := r.gate.next(&s.adm)
	if d := next.Sub(r.clock.Now()); d > 0 {
		next = next.Add(time.Duration(r.rng.Float64() * 0.1 * float64(d))) // the engine's jitter
	}
	r.push(next, evPoll, s)
}

// sweep sends every waiter the last event granted (a settlement's refund or a
// poll may admit several at once).
func (r *runner) sweep(now time.Time) {
	if r.gate == nil {
		return
	}
	for _, s := range r.sessions {
		if s.queued && r.gate.grant(&s.adm) {
			s.queued = false
			s.gen++
			s.waited += s.adm.waited()
			r.send(now, s)
		}
	}
}

// send lets an admitted call leave for the provider.
func (r *runner) send(now time.Time, s *session) {
	s.sentAt = now
	r.push(now.Add(r.oneWay()), evArrive, s)
}

// refused handles a 429 that has reached the gate at now.
func (r *runner) refused(now time.Time, s *session) {
	r.times429 = append(r.times429, now)
	if r.mode == ModeGate {
		learned, _, _ := r.gate.learned(now)
		r.settled429 = append(r.settled429, math.Abs(learned/r.capacity-1) <= convergedBand)
	}
	ref := s.pending
	if r.gate != nil {
		ax := axisNone
		if r.s.Provider.NamesLimit || ref.axis == axisOutput {
			ax = ref.axis // (a 429 about the output limit names it, as Anthropic's words and headers do)
		}
		reserved := s.adm.ticket.Reserved
		var stated headers // what the 429's words state: nothing unless provider.statesLimit
		if r.s.Provider.StatesLimit {
			// only the limit that refused, as OpenAI's words do
			h := r.provider.headers(now)
			switch ref.axis {
			case axisTokens:
				stated.limitTokens = h.limitTokens
			case axisRequests:
				stated.limitRequests = h.limitRequests
			}
		}
		r.gate.release(now, &s.adm) // the provider counted nothing; released first, as the proxy does
		r.gate.rateLimited(now, ref.retryAfter, ax, s.sentAt, reserved, stated.limitTokens, stated.limitRequests)
		if s.attempt+1 >= gateMaxAttempts { // attempt counts from 0: that was the last
			r.giveUp(now, s)
			return
		}
		s.attempt++
		r.try(now, s) // the wait happens in the next admission: nothing waits twice
		return
	}
	if s.attempt >= naiveRetries {
		r.giveUp(now, s)
		return
	}
	d := time.Duration(math.Min(0.5*math.Pow(2, float64(s.attempt)), 8) * float64(time.Second))
	s.attempt++
	s.waited += d
	r.push(now.Add(d), evRetry, s)
}

func (r *runner) giveUp(now time.Time, s *session) {
	r.lost++
	r.push(now.Add(s.cur.think), evIssue, s)
}

// outsidePeriod is the outside client's schedule step: one call (smooth) or one
// burst.
func (r *runner) outsidePeriod() time.Duration { return r.s.outsidePeriod() }

func (r *runner) outsideRequestsPerWindow() float64 {
	return r.s.Outside.Share * float64(r.s.Provider.TPM) / float64(max(1, r.s.Outside.CallTokens))
}

// warmOutside gives the provider the outside client's calls of the window
// before start, at the times its ticks would have sent them: the limiter holds
// them (and, counting on completion, their completions, up to start), but they
// are not counted as served in the run.
func (r *runner) warmOutside(start time.Time) {
	period := r.outsidePeriod()
	// the ticks before start fall at start + period/2 − k·period (k ≥ 1); the
	// window holds those after start − window, oldest first
	from := start.Add(-time.Duration(r.s.Window))
	n := 0
	for start.Add(period/2 - time.Duration(n+1)*period).After(from) {
		n++
	}
	for k := n; k >= 1; k-- {
		at := start.Add(period/2 - time.Duration(k)*period)
		for _, c := range r.outsideCalls() {
			if ax, _, _ := r.provider.lim.offer(at, whole(c)); ax == axisNone {
				done := at.Add(time.Duration(r.s.Response.Base))
				if done.After(start) {
					done = start
				}
				r.provider.lim.done(done, whole(c), held{})
				if out := r.outsideCost(c).outWhole; out > 0 && r.provider.out != nil {
					r.provider.out.add(at, out) // its output too
				}
			}
		}
	}
}

// outsideCalls are the calls one outside tick sends: one of callTokens
// (smooth), or a burst of share × tpm × every ÷ window tokens in calls of
// callTokens, the last one smaller.
func (r *runner) outsideCalls() []int64 {
	o := r.s.Outside
	if o.Pattern != OutsideBursts {
		return []int64{int64(o.CallTokens)}
	}
	var calls []int64
	left := r.s.outsideBurstTokens()
	for left > 0 {
		c := min(left, int64(o.CallTokens))
		calls = append(calls, c)
		left -= c
	}
	return calls
}

// outsideStopped says whether the outside client has stopped spending at now
// (outside.until; at or past the run's end it never does). It goes by the
// time, not by the stop's event: a call due at the very instant of the stop is
// given up whichever event comes first.
func (r *runner) outsideStopped(now time.Time) bool {
	u := time.Duration(r.s.Outside.Until)
	return u > 0 && u < time.Duration(r.s.Duration) && !now.Before(r.start.Add(u))
}

// outsideTick sends the outside client's next call (smooth) or burst.
func (r *runner) outsideTick(now time.Time) {
	if r.outsideStopped(now) {
		return // outside.until: it sends no more
	}
	for _, c := range r.outsideCalls() {
		r.pushTokens(now, evOutsideCall, nil, c)
	}
	r.push(now.Add(r.outsidePeriod()), evOutsideTick, nil)
}

func (r *runner) metrics() Metrics {
	windows := time.Duration(r.s.Duration).Seconds() / time.Duration(r.s.Window).Seconds()
	hours := time.Duration(r.s.Duration).Hours()
	p := r.provider
	truth := float64(r.s.Provider.TPM) * windows
	m := Metrics{
		Utilization:           float64(p.served[fromSessions]+p.served[fromOutside]) / truth,
		RemainingUtilization:  float64(p.served[fromSessions]) / (truth - float64(p.served[fromOutside])),
		OutsideShare:          float64(p.served[fromOutside]) / truth,
		RequestUtilization:    float64(p.requests[fromSessions]+p.requests[fromOutside]) / (float64(r.s.Provider.RPM) * windows),
		RateLimited:           len(r.times429),
		RateLimitedByTokens:   p.refusedBy[axisTokens],
		RateLimitedByRequests: p.refusedBy[axisRequests],
		RateLimitedPerHour:    float64(len(r.times429)) / hours,
		OutsideRateLimited:    p.refusedOut,
		Lost:                  r.lost,
		Completed:             r.done,
		Fairness:              jain(r.sessions),
	}
	if r.s.Provider.OTPM > 0 {
		outTruth := float64(r.s.Provider.OTPM) * windows
		m.RateLimitedByOutput = p.refusedBy[axisOutput]
		m.OutputUtilization = float64(p.outServed[fromSessions]+p.outServed[fromOutside]) / outTruth
		if p.outServed[fromOutside] > 0 {
			m.RemainingOutputUtilization = float64(p.outServed[fromSessions]) / (outTruth - float64(p.outServed[fromOutside]))
		}
	}
	if !r.stopped.IsZero() {
		left := r.end.Sub(r.stopped).Seconds() / time.Duration(r.s.Window).Seconds()
		m.AfterOutside = float64(p.served[fromSessions]-r.servedAtStop) / (float64(r.s.Provider.TPM) * left)
	}
	sort.Slice(r.waits, func(i, j int) bool { return r.waits[i] < r.waits[j] })
	m.WaitP50Ms = quantile(r.waits, 0.50).Milliseconds()
	m.WaitP99Ms = quantile(r.waits, 0.99).Milliseconds()
	if r.gate != nil {
		_, m.FinalQuota, m.FinalTrigger = r.gate.learned(r.end)
		m.FinalDecides = r.gate.decides(r.end)
		m.FinalWindows = r.gate.windows(r.end)
		m.FinalOutputLimit = r.gate.outputLimit(r.end)
	}
	if r.mode == ModeGate {
		m.LearnedPerWindow = r.learned
		m.LowestTrigger = r.lowestTrigger
		if c, ok := convergedAfter(r.learned); ok {
			m.ConvergedAfterWindows = &c
			from := r.start.Add(time.Duration(c) * time.Duration(r.s.Window))
			n := rateLimitedSince(r.times429, r.settled429, from, time.Duration(r.s.Window))
			span := r.end.Sub(from).Hours()
			perHour := 0.0
			if span > 0 {
				perHour = float64(n) / span
			}
			m.RateLimitedAfterConvergence, m.RateLimitedPerHourAfterConvergence = &n, &perHour
		}
	}
	return m
}

// rateLimitedSince counts the 429s after convergence, which the samples at
// window ends place somewhere in the window [from, from+window): a 429 in that
// window counts only if the learned quota was in the band already when it came
// (settled[i]); the one that brought it there ended the discovery. Every 429
// from the next window on counts.
func rateLimitedSince(times []time.Time, settled []bool, from time.Time, window time.Duration) int {
	n := 0
	for i, t := range times {
		if !t.Before(from.Add(window)) || (!t.Before(from) && settled[i]) {
			n++
		}
	}
	return n
}

// convergedAfter returns the first window after which every sample stays within
// the band around 1 (samples are learned ÷ capacity at the end of windows 1, 2, …).
func convergedAfter(samples []float64) (int, bool) {
	last := -1
	for i, v := range samples {
		if math.Abs(v-1) > convergedBand {
			last = i
		}
	}
	if last == len(samples)-1 {
		return 0, false
	}
	return last + 1, true
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, i)]
}

func jain(ss []*session) float64 {
	var sum, sq float64
	for _, s := range ss {
		x := float64(s.served)
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(ss)) * sq)
}

func sessionName(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return "s" + digits[i:i+1]
	}
	return sessionName(i/10) + digits[i%10:i%10+1]
}
