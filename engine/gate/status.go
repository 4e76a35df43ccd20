package gate

import (
	"math"
	"sort"
	"time"
)

// BucketStatus is a read-only snapshot of one model's ledger, for the API and CLI.
type BucketStatus struct {
	Provider       string  `json:"provider"`
	Model          string  `json:"model"`
	WindowTokens   int64   `json:"windowTokens"`   // tokens in the window the budget holds against (countsAt): reservations included on arrival, completed calls at completion
	WindowRequests int     `json:"windowRequests"` // requests in that window
	Reserved       int64   `json:"reserved"`       // reservations not settled yet
	InFlight       int     `json:"inFlight"`
	Waiting        int     `json:"waiting"`
	Quota          float64 `json:"quota"`   // learned quota
	Start          float64 `json:"start"`   // configured TPM: where learning started
	Trigger        float64 `json:"trigger"` // tightest window reading at a 429; 0 when none
	// Stated is the token limit the provider stated (its answers' rate-limit
	// headers, or a 429's headers or words), scaled to the window; 0 when it
	// stated none, or a 429's figure was forgotten (a reset, or 180 windows
	// without a 429 restating it).
	Stated float64 `json:"stated,omitempty"`
	// MaxTPM and MaxRPM are the caps the user set (maxTpm, maxRpm); 0: none.
	MaxTPM int `json:"maxTpm,omitempty"`
	MaxRPM int `json:"maxRpm,omitempty"`
	// OthersSpend is what the gate leaves other clients on the key in the
	// window — their spend read from the answers' remaining tokens, and half
	// its swing — while it holds the token budget under Stated less it; 0
	// when the readings do not say it plainly.
	OthersSpend   int64   `json:"othersSpend,omitempty"`
	TokenBudget   int64   `json:"tokenBudget"`   // min(quota, trigger, maxTpm, stated − othersSpend) × safety factor
	RPMBudget     int     `json:"rpmBudget"`     // the request budget (see setRPMLocked)
	CooldownMs    int64   `json:"cooldownMs"`    // cooldown left
	OutputReserve int64   `json:"outputReserve"` // what a call without max_tokens reserves now
	BytesPerToken float64 `json:"bytesPerToken"` // learned input ratio; 0 before any sized settle
	ReserveDrift  float64 `json:"reserveDrift"`  // mean (real − reserved output) ÷ reserved
	Waits         int64   `json:"waits"`         // calls held back so far
	RateLimited   int64   `json:"rateLimited"`   // 429s observed
	Last429       string  `json:"last429,omitempty"`
	// CountsAt is when the provider is taken to count a call: "arrival" or
	// "completion" (configured as countsAt, or learned from where its 429s fall).
	CountsAt string `json:"countsAt"`
	// Decides is what the provider is taken to decide a call on at its
	// arrival: "whole" (the default: outputs in flight get a margin) or
	// "known" (its input and max_tokens: configured, or read from its
	// rate-limit headers while decides is not configured).
	Decides string `json:"decides"`
	// Windows is "fixed" when the model counts in clock-aligned fixed windows
	// (configured as windows: fixed, or learned from the 429s' stated waits or
	// the answers' stated token resets);
	// WindowTokens is then the current one's.
	Windows string `json:"windows,omitempty"`
	// The output axis (when a limit on output tokens alone is known: otpm,
	// stated, or taught by a 429 about the output). OutputLimit is the limit
	// held to per window, OutputBudget it times the safety factor,
	// OutputWindow the output in the window (reserves of the calls in flight,
	// what the settled ones wrote), OutputStated the provider's figure and
	// OutputTrigger the reading at its last 429 about the output (0: none).
	OutputLimit   float64 `json:"outputLimit,omitempty"`
	OutputBudget  int64   `json:"outputBudget,omitempty"`
	OutputWindow  int64   `json:"outputWindow,omitempty"`
	OutputStated  float64 `json:"outputStated,omitempty"`
	OutputTrigger float64 `json:"outputTrigger,omitempty"`
	OTPM          int     `json:"otpm,omitempty"` // the configured output limit per window (otpm)
}

// Status returns a snapshot of every bucket at now, sorted by provider and model.
func (l *Ledger) Status(now time.Time) []BucketStatus {
	bs := l.allBuckets()
	out := make([]BucketStatus, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.status(now))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// EstimatedInput is the input the gate would reserve for req now: its
// InputTokens when given, else its estimate from InputBytes (the model's
// learned bytes per token). The decision API bounds a declared call with it.
func (l *Ledger) EstimatedInput(now time.Time, req Request) int64 {
	b := l.bucketFor(req.Provider, req.Model, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reservation(req).input
}

// BucketStatus returns one model's snapshot (a fresh bucket's when it was never used).
func (l *Ledger) BucketStatus(now time.Time, provider, model string) BucketStatus {
	return l.bucketFor(provider, model, now).status(now)
}

// CooldownLeft is how long provider/model still cools down: its own cooldown,
// its provider's, or — with a shared store — another instance's that the
// store's window answered with. It builds no bucket: a model the ledger does
// not hold yet has its provider's, or, when it would be folded into
// provider/(other) past MaxModels (bucketFor), that bucket's.
func (l *Ledger) CooldownLeft(now time.Time, provider, model string) time.Duration {
	b := l.existingBucket(provider, model)
	if b == nil && model != OtherModel {
		if cfg := l.conf(); cfg.MaxModels > 0 && l.nBuckets.Load() >= int64(cfg.MaxModels) {
			if _, listed := cfg.Models[provider+"/"+model]; !listed {
				b = l.existingBucket(provider, OtherModel)
			}
		}
	}
	if b == nil {
		l.mu.RLock()
		ps := l.providers[provider]
		l.mu.RUnlock()
		if ps == nil {
			return 0
		}
		if p := ps.cooldownUntil.Load(); p != nil {
			return max(p.Sub(now), 0)
		}
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pauseEndLocked(now).Sub(now)
}

// existingBucket is provider/model's bucket, or nil when the ledger holds none.
func (l *Ledger) existingBucket(provider, model string) *bucket {
	sh := l.shardOf(provider, model)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[bucketKey{provider, model}]
}

func (b *bucket) status(now time.Time) BucketStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statusLocked(now)
}

func (b *bucket) statusLocked(now time.Time) BucketStatus {
	b.expireLocked(now)
	s := BucketStatus{
		Provider: b.provider, Model: b.model,
		WindowTokens: b.admitCountLocked(), WindowRequests: b.requestCountLocked(),
		Reserved: b.reservedOpen, InFlight: b.inFlight, Waiting: len(b.waiters),
		Quota: b.learn.quota, Start: b.learn.start, Trigger: b.learn.trigger, Stated: b.learn.stated,
		MaxTPM: b.limits.MaxTPM, MaxRPM: b.limits.MaxRPM,
		TokenBudget: b.tokenBudget(now), RPMBudget: b.rpm,
		CooldownMs:    b.cooldownLeft(now).Milliseconds(),
		OutputReserve: b.est.outputReserve(0, b.agingLocked()), BytesPerToken: b.est.bytesPerToken(), ReserveDrift: b.est.drift(),
		Waits: b.waits, RateLimited: b.rateLimited, CountsAt: "arrival", Decides: DecidesWhole,
	}
	if room, ok := b.othersRoomLocked(now); ok && room < b.learn.budget() {
		s.OthersSpend = int64(math.Round(b.learn.stated - room))
	}
	if b.decidesKnown() {
		s.Decides, s.OutputReserve = DecidesKnown, 0 // a call without max_tokens reserves its input alone
	}
	if b.atCompletion {
		s.CountsAt = "completion"
	}
	if b.fixedWindowsLocked() {
		s.Windows = WindowsFixed
	}
	if !b.last429.IsZero() {
		s.Last429 = b.last429.UTC().Format(time.RFC3339)
	}
	if lim := b.outputLimitLocked(); lim > 0 {
		s.OutputLimit, s.OutputBudget, s.OutputWindow = lim, b.outputBudgetLocked(), b.out.win.tokens
		s.OutputStated, s.OutputTrigger, s.OTPM = b.outputStatedLocked(), b.out.trigger, b.limits.OTPM
	}
	return s
}
