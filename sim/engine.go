package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
)

// gateAdapter is the simulator's only contact with the admission engine: every
// call into gate.Ledger goes through it, so a change to the engine's API is a
// change to this file alone. It holds one ledger for the single simulated
// provider/model. It is not safe for concurrent use (the simulation is
// single-threaded).
type gateAdapter struct {
	l *gate.Ledger
}

const (
	simProvider = "sim"
	simModel    = "model"
)

// gateLimits is what the adapter builds a ledger from.
type gateLimits struct {
	window       time.Duration
	tpm, rpm     int
	safetyFactor float64
	admission    GateSpec // its pace, paceBurst and marginSigmas, when set
	learn        bool
	countsAt     string // gate.ModelLimits.CountsAt: "" learns it
	decides      string // gate.ModelLimits.Decides: "" is whole
	windows      string // gate.ModelLimits.Windows: "" is sliding unless learned
	otpm         int    // gate.ModelLimits.OTPM: the output limit per window, 0 none
}

func newGateAdapter(lim gateLimits, clock engine.Clock, seed uint64, now time.Time, trace io.Writer) (*gateAdapter, error) {
	cfg := gate.DefaultConfig()
	cfg.Window = lim.window
	cfg.MaxWait = max(cfg.MaxWait, 2*cfg.Window)
	cfg.SafetyFactor = lim.safetyFactor
	cfg.Defaults = gate.ModelLimits{TPM: lim.tpm, RPM: lim.rpm, CountsAt: lim.countsAt, Decides: lim.decides, Windows: lim.windows, OTPM: lim.otpm}
	cfg.Learn = lim.learn
	lim.admission.applyAdmission(&cfg)
	opts := []gate.Option{gate.WithRand(rand.New(rand.NewPCG(seed, 0x717e7)))}
	if trace != nil {
		opts = append(opts, gate.WithEventHook(func(e gate.Event) {
			if e.Kind == gate.EventLearn || e.Kind == gate.EventRateLimited || e.Kind == gate.EventLeak || e.Kind == gate.EventFailOpen {
				fmt.Fprintf(trace, "%s %-12s %-8s %-8s from=%.0f to=%.0f quota=%.0f trig=%.0f win=%d budget=%d req=%d\n",
					e.At.Format("15:04:05.000"), e.Kind, e.Step, e.Reason, e.From, e.To, e.Quota, e.Trigger, e.WindowTokens, e.TokenBudget, e.Requests)
			}
		}))
	}
	l, err := gate.NewLedger(cfg, clock, opts...)
	if err != nil {
		return nil, err
	}
	l.BucketStatus(now, simProvider, simModel) // the model is known from the start
	return &gateAdapter{l: l}, nil
}

// admission is one call's place in the gate: a ticket once granted, a waiter
// while queued. The zero value is "not submitted".
type admission struct {
	ticket  gate.Ticket
	waiter  *gate.Waiter
	granted bool
}

// submit asks for admission at now. maxTokens 0 means the call sends none. It
// reports whether the call was granted at once; otherwise poll it.
func (g *gateAdapter) submit(now time.Time, session string, input, maxTokens int64, a *admission) bool {
	t, w := g.l.Submit(now, gate.Request{
		Provider: simProvider, Model: simModel, Session: session,
		InputTokens: int(input), MaxTokens: int(maxTokens),
	})
	*a = admission{ticket: t, waiter: w, granted: w == nil}
	return a.granted
}

// poll runs the gate's dispatch at now for a queued call.
func (g *gateAdapter) poll(now time.Time, a *admission) { a.waiter.Poll(now) }

// next is when a queued call should be polled again.
func (g *gateAdapter) next(a *admission) time.Time { return a.waiter.Next() }

// grant checks whether a queued call has been granted (by a poll, or by another
// call's settlement) and, if so, takes its ticket.
func (g *gateAdapter) grant(a *admission) bool {
	if a.granted {
		return true
	}
	t, ok := a.waiter.Ticket()
	if ok {
		a.ticket, a.waiter, a.granted = t, nil, true
	}
	return ok
}

// waited is how long admission held the granted call.
func (a *admission) waited() time.Duration { return a.ticket.Waited }

// settle closes a served call with its real usage.
func (g *gateAdapter) settle(now time.Time, a *admission, input, output int64) {
	_ = g.l.Settle(now, a.ticket, gate.Usage{InputTokens: input, OutputTokens: output})
}

// release closes a refused call: the provider counted nothing.
func (g *gateAdapter) release(now time.Time, a *admission) { _ = g.l.Release(now, a.ticket) }

// rateLimited reports a 429 received at now for a call admitted at admitted;
// statedTokens and statedRequests are the per-minute limits its words state (0:
// none).
func (g *gateAdapter) rateLimited(now time.Time, retryAfter time.Duration, ax axis, admitted time.Time, reserved, statedTokens, statedRequests int64) {
	ga := engine.AxisUnknown
	switch ax {
	case axisTokens:
		ga = engine.AxisTokens
	case axisRequests:
		ga = engine.AxisRequests
	case axisOutput:
		ga = engine.AxisOutputTokens
	}
	g.l.RateLimitedBy(now, simProvider, simModel, engine.RateLimit{RetryAfter: retryAfter, Axis: ga, Admitted: admitted, Tokens: reserved,
		StatedTokens: statedTokens, StatedRequests: statedRequests})
}

// calibrate passes the provider's rate-limit headers (per-minute figures, as
// x-ratelimit-limit-tokens and friends carry them, and the token reset) on
// the answer to a call sent at sent to the gate.
func (g *gateAdapter) calibrate(now, sent time.Time, h headers) {
	g.l.CalibrateAnswer(now, sent, simProvider, simModel, h.limitTokens, h.remainingTokens, h.limitRequests, h.remainingRequests)
	if h.tokensReset > 0 {
		g.l.ObserveTokensReset(now, simProvider, simModel, sent, engine.TokenReset{In: h.tokensReset})
	}
	if h.limitOutput > 0 {
		g.l.StateOutputLimit(now, simProvider, simModel, h.limitOutput)
	}
}

// decides is what the gate takes the provider to decide a call on now.
func (g *gateAdapter) decides(now time.Time) string {
	return g.l.BucketStatus(now, simProvider, simModel).Decides
}

// outputLimit is the output limit the engine holds to per window (configured,
// stated or learned; 0: none).
func (g *gateAdapter) outputLimit(now time.Time) float64 {
	return g.l.BucketStatus(now, simProvider, simModel).OutputLimit
}

// windows is how the engine took the provider's window to move: "fixed", or
// "" for sliding.
func (g *gateAdapter) windows(now time.Time) string {
	return g.l.BucketStatus(now, simProvider, simModel).Windows
}

// learned is the gate's learned token level, min(quota, trigger, the room
// the others' spend read from the headers leaves), and the first two parts.
func (g *gateAdapter) learned(now time.Time) (learned, quota, trigger float64) {
	st := g.l.BucketStatus(now, simProvider, simModel)
	learned = st.Quota
	if st.Trigger > 0 && st.Trigger < learned {
		learned = st.Trigger
	}
	if st.OthersSpend > 0 {
		learned = min(learned, st.Stated-float64(st.OthersSpend))
	}
	return learned, st.Quota, st.Trigger
}
