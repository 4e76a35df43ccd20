package sim

import (
	"container/heap"
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
	simProvider    = "sim"
	simModel       = "model"
	gateMaxRetries = 6 // seed 000's maxRetriesPerStep
	naiveRetries   = 2
	convergedBand  = 0.05
)

// Metrics is one mode's result.
type Metrics struct {
	// Utilization is the provider-counted tokens served ÷ (true TPM × windows).
	Utilization        float64 `json:"utilization"`
	RateLimited        int     `json:"rateLimited"`
	RateLimitedPerHour float64 `json:"rateLimitedPerHour"`
	Lost               int     `json:"lost"`      // requests that never succeeded
	Completed          int     `json:"completed"` // requests that succeeded
	WaitP50Ms          int64   `json:"waitP50Ms"`
	WaitP99Ms          int64   `json:"waitP99Ms"`
	Fairness           float64 `json:"fairness"` // Jain's index of tokens served per session
	// Gate only: the first window after which the learned quota, min(quota,
	// trigger), stays within ±5% of the truth; null when it never settles.
	ConvergedAfterWindows *int `json:"convergedAfterWindows,omitempty"`
	// Gate only: 429s from the convergence window on, and per hour of that span.
	RateLimitedAfterConvergence        *int     `json:"rateLimitedAfterConvergence,omitempty"`
	RateLimitedPerHourAfterConvergence *float64 `json:"rateLimitedPerHourAfterConvergence,omitempty"`
	// Engine modes: the learned quota and trigger at the end.
	FinalQuota   float64 `json:"finalQuota,omitempty"`
	FinalTrigger float64 `json:"finalTrigger,omitempty"`
	// LearnedPerWindow is min(quota, trigger) ÷ truth at the end of each window (gate).
	LearnedPerWindow []float64 `json:"-"`
}

// Report is the result of one scenario in every mode.
type Report struct {
	Scenario Scenario           `json:"scenario"`
	Modes    map[string]Metrics `json:"modes"`
}

// Run simulates s in every mode on the same trace.
func Run(s Scenario) (Report, error) {
	if err := s.Validate(); err != nil {
		return Report{}, err
	}
	r := Report{Scenario: s, Modes: map[string]Metrics{}}
	for _, m := range Modes {
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
	rng          *rand.Rand
	promptMu     float64
	promptSigma  float64
	outputMu     float64
	outputSigma  float64
	thinkMeanSec float64
}

type job struct {
	prompt, output int64
	think          time.Duration
}

func (t *trace) next() job {
	p := math.Exp(t.promptMu + t.promptSigma*t.rng.NormFloat64())
	o := math.Exp(t.outputMu + t.outputSigma*t.rng.NormFloat64())
	th := t.rng.ExpFloat64() * t.thinkMeanSec
	return job{prompt: max(1, int64(p)), output: max(1, int64(o)), think: time.Duration(th * float64(time.Second))}
}

const z99 = 2.3263478740408408 // the standard normal's 99th percentile

func lognormal(spec SizeSpec) (mu, sigma float64) {
	return math.Log(spec.Median), math.Log(spec.P99/spec.Median) / z99
}

// latency is how long the simulated provider takes to answer: 0.5 s plus 100
// output tokens a second.
func latency(output int64) time.Duration {
	return 500*time.Millisecond + time.Duration(output)*10*time.Millisecond
}

// thinkMean makes the closed loop offer demand × the true limit: each session's
// cycle (latency + think) carries the mean request.
func thinkMean(s Scenario) float64 {
	pm, ps := lognormal(s.Prompt)
	om, os := lognormal(s.Output)
	meanP := math.Exp(pm + ps*ps/2)
	meanO := math.Exp(om + os*os/2)
	perSessionPerSec := s.Demand * float64(s.Provider.TPM) / time.Duration(s.Window).Seconds() / float64(s.Sessions)
	cycle := (meanP + meanO) / perSessionPerSec
	return math.Max(0, cycle-latency(int64(meanO)).Seconds())
}

type session struct {
	id       int
	trace    trace
	cur      job
	attempt  int
	waited   time.Duration
	ticket   gate.Ticket
	waiter   *gate.Waiter
	gen      int // invalidates stale poll events
	served   int64
	inFlight bool
}

type event struct {
	at   time.Time
	seq  uint64
	kind int
	s    *session
	gen  int
}

const (
	evIssue = iota
	evPoll
	evComplete
	evRetry
	evSample
)

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
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
	ledger   *gate.Ledger
	provider *provider
	rng      *rand.Rand
	q        eventQueue
	seq      uint64
	sessions []*session
	waits    []time.Duration
	times429 []time.Time
	lost     int
	done     int
	learned  []float64
}

func runMode(s Scenario, mode string) (Metrics, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &runner{
		s: s, mode: mode, start: start, end: start.Add(time.Duration(s.Duration)),
		clock:    engine.NewFakeClock(start),
		provider: newProvider(s.Provider, time.Duration(s.Window)),
		rng:      rand.New(rand.NewPCG(s.Seed, 0x5eed)),
	}
	if mode != ModeNaive {
		cfg := gate.DefaultConfig()
		cfg.Window = time.Duration(s.Window)
		cfg.MaxWait = max(cfg.MaxWait, 2*cfg.Window)
		cfg.SafetyFactor = s.Gate.SafetyFactor
		cfg.Defaults = gate.ModelLimits{TPM: s.Gate.TPM, RPM: s.Gate.RPM}
		cfg.Learn = true
		if mode == ModeOracle {
			cfg.Defaults = gate.ModelLimits{TPM: s.Provider.TPM, RPM: s.Provider.RPM}
			cfg.Learn = false
		}
		l, err := gate.NewLedger(cfg, r.clock, gate.WithRand(rand.New(rand.NewPCG(s.Seed, 0x717e7))))
		if err != nil {
			return Metrics{}, err
		}
		r.ledger = l
		r.ledger.BucketStatus(start, simProvider, simModel) // the model is known from the start
	}
	pm, ps := lognormal(s.Prompt)
	om, os := lognormal(s.Output)
	think := thinkMean(s)
	for i := 0; i < s.Sessions; i++ {
		ss := &session{id: i, trace: trace{
			rng:      rand.New(rand.NewPCG(s.Seed, uint64(i)+1)),
			promptMu: pm, promptSigma: ps, outputMu: om, outputSigma: os, thinkMeanSec: think,
		}}
		r.sessions = append(r.sessions, ss)
		// stagger the first requests over the first second, as sessions come up
		r.push(start.Add(time.Duration(ss.trace.rng.Float64()*float64(time.Second))), evIssue, ss)
	}
	if mode == ModeGate {
		r.push(start.Add(time.Duration(s.Window)), evSample, nil)
	}
	for r.q.Len() > 0 {
		e := heap.Pop(&r.q).(event)
		if e.at.After(r.end) {
			break
		}
		r.clock.Set(e.at)
		r.handle(e)
		r.sweep(e.at)
	}
	return r.metrics(), nil
}

func (r *runner) push(at time.Time, kind int, s *session) {
	r.seq++
	gen := 0
	if s != nil {
		gen = s.gen
	}
	heap.Push(&r.q, event{at: at, seq: r.seq, kind: kind, s: s, gen: gen})
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
		if s.waiter != nil && e.gen == s.gen {
			s.waiter.Poll(now)
			// a grant is picked up by sweep; otherwise poll again at its next time
			if _, ok := s.waiter.Ticket(); !ok {
				r.schedulePoll(s)
			}
		}
	case evRetry:
		r.send(now, s)
	case evComplete:
		s.inFlight = false
		if r.ledger != nil {
			r.ledger.Settle(now, s.ticket, gate.Usage{InputTokens: s.cur.prompt, OutputTokens: s.cur.output})
		}
		s.served += s.cur.prompt + s.cur.output
		r.done++
		r.waits = append(r.waits, s.waited)
		r.push(now.Add(s.cur.think), evIssue, s)
	case evSample:
		st := r.ledger.BucketStatus(now, simProvider, simModel)
		learned := st.Quota
		if st.Trigger > 0 && st.Trigger < learned {
			learned = st.Trigger
		}
		r.learned = append(r.learned, learned/float64(r.s.Provider.TPM))
		r.push(now.Add(time.Duration(r.s.Window)), evSample, nil)
	}
}

// try asks for admission (engine modes) or sends at once (naive).
func (r *runner) try(now time.Time, s *session) {
	if r.ledger == nil {
		r.send(now, s)
		return
	}
	t, w := r.ledger.Submit(now, gate.Request{
		Provider: simProvider, Model: simModel, Session: sessionName(s.id),
		InputTokens: int(s.cur.prompt),
	})
	if w == nil {
		s.ticket = t
		s.waited += t.Waited
		r.send(now, s)
		return
	}
	s.waiter = w
	s.gen++
	r.schedulePoll(s)
}

func (r *runner) schedulePoll(s *session) {
	next := s.waiter.Next()
	if d := next.Sub(r.clock.Now()); d > 0 {
		next = next.Add(time.Duration(r.rng.Float64() * 0.1 * float64(d))) // the engine's jitter
	}
	r.push(next, evPoll, s)
}

// sweep sends every waiter the last event granted (a settlement's refund or a
// poll may admit several at once).
func (r *runner) sweep(now time.Time) {
	if r.ledger == nil {
		return
	}
	for _, s := range r.sessions {
		if s.waiter == nil {
			continue
		}
		if t, ok := s.waiter.Ticket(); ok {
			s.waiter = nil
			s.gen++
			s.ticket = t
			s.waited += t.Waited
			r.send(now, s)
		}
	}
}

func (r *runner) send(now time.Time, s *session) {
	tokens := s.cur.prompt + s.cur.output
	if r.provider.offer(now, tokens) {
		s.inFlight = true
		r.push(now.Add(latency(s.cur.output)), evComplete, s)
		return
	}
	r.times429 = append(r.times429, now)
	retryAfter := time.Duration(r.s.Provider.RetryAfter)
	if r.ledger != nil {
		r.ledger.RateLimited(now, simProvider, simModel, retryAfter)
		r.ledger.Release(now, s.ticket) // the provider counted nothing
		if s.attempt >= gateMaxRetries {
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

func (r *runner) metrics() Metrics {
	windows := time.Duration(r.s.Duration).Seconds() / time.Duration(r.s.Window).Seconds()
	hours := time.Duration(r.s.Duration).Hours()
	m := Metrics{
		Utilization:        float64(r.provider.served) / (float64(r.s.Provider.TPM) * windows),
		RateLimited:        len(r.times429),
		RateLimitedPerHour: float64(len(r.times429)) / hours,
		Lost:               r.lost,
		Completed:          r.done,
		Fairness:           jain(r.sessions),
	}
	sort.Slice(r.waits, func(i, j int) bool { return r.waits[i] < r.waits[j] })
	m.WaitP50Ms = quantile(r.waits, 0.50).Milliseconds()
	m.WaitP99Ms = quantile(r.waits, 0.99).Milliseconds()
	if r.ledger != nil {
		st := r.ledger.BucketStatus(r.end, simProvider, simModel)
		m.FinalQuota, m.FinalTrigger = st.Quota, st.Trigger
	}
	if r.mode == ModeGate {
		m.LearnedPerWindow = r.learned
		if c, ok := convergedAfter(r.learned); ok {
			m.ConvergedAfterWindows = &c
			from := r.start.Add(time.Duration(c) * time.Duration(r.s.Window))
			n := 0
			for _, t := range r.times429 {
				if !t.Before(from) {
					n++
				}
			}
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

// convergedAfter returns the first window after which every sample stays within
// the band around 1 (samples are learned ÷ truth at the end of windows 1, 2, …).
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

// provider enforces a hidden TPM/RPM on a sliding window, counting a request's
// whole cost (input and output) when it arrives, and refusing with a 429 (counting
// nothing) when it would go over.
type provider struct {
	tpm, rpm int64
	window   time.Duration
	entries  []provEntry
	tokens   int64
	served   int64
}

type provEntry struct {
	at     time.Time
	tokens int64
}

func newProvider(p ProviderSpec, window time.Duration) *provider {
	return &provider{tpm: int64(p.TPM), rpm: int64(p.RPM), window: window}
}

func (p *provider) offer(now time.Time, tokens int64) bool {
	cutoff := now.Add(-p.window)
	i := 0
	for i < len(p.entries) && !p.entries[i].at.After(cutoff) {
		p.tokens -= p.entries[i].tokens
		i++
	}
	p.entries = p.entries[i:]
	if p.tokens+tokens > p.tpm || int64(len(p.entries))+1 > p.rpm {
		return false
	}
	p.entries = append(p.entries, provEntry{now, tokens})
	p.tokens += tokens
	p.served += tokens
	return true
}
