// Package fakeprovider is an OpenAI-compatible /v1/chat/completions handler with
// a hidden rate limit, for measuring the admission gate over real HTTP.
//
// The limit (Config.Limit, named as the simulator's provider models) is one of:
//
//   - SlidingArrival (the default): a sliding window of Tokens per Window
//     (40,000 per 10 s by default), counted when a request arrives at the
//     whole cost of the call: its prompt tokens plus the completion tokens it
//     will write;
//   - SlidingCompletion: the same window, but a call counts when its answer is
//     complete: a call is refused when the completed calls in the window plus
//     its own cost are over the limit (calls still being answered are not
//     counted yet), and the records count it in the window it completed in;
//   - TokenBucket: a reserve of Tokens, refilled continuously at Tokens per
//     Window and full at the start, that a call must find its whole cost in;
//   - FixedWindow: Tokens per clock-aligned window (multiples of Window since
//     the Unix epoch), counted on arrival, empty again at each boundary.
//
// With DecidesKnown a limit decides on what a provider can know when a request
// arrives — its prompt tokens plus its max_tokens (none: the prompt alone) —
// and counts the rest of the whole cost once the answer is written: in the
// sliding window at the call's arrival, from the bucket's reserve, or in the
// fixed window current then (what a call did not write is given back only to
// the window that counted it). SlidingCompletion counts at completion either
// way; there DecidesKnown only changes the cost a new call is checked with.
//
// Optionally a request limit (Requests per Window) as well, counted as the
// tokens are: in the sliding window (at completion with SlidingCompletion, on
// arrival otherwise, TokenBucket included), or in the same fixed windows with
// FixedWindow. A call that does not fit is answered 429 with Retry-After and an
// OpenAI-style body, and does not count.
//
// Everything a call costs is a function of its body, so runs are reproducible:
//
//   - prompt_tokens = ceil(len(body) / BytesPerToken), the body as it arrives
//     (a proxy that rewrites the body changes the count slightly, as a real
//     tokenizer would differ from a client's estimate);
//   - completion_tokens is drawn from a log-normal (OutputMedian, OutputSigma)
//     seeded by an FNV-64a hash of the body and Seed, capped at max_tokens /
//     max_completion_tokens when the request sets one.
//
// A response takes Latency + a uniform share of Jitter (also drawn from the
// hash) + PerOutputToken × completion_tokens. With Headers, every answer (429s
// included) carries x-ratelimit-{limit,remaining,reset}-{tokens,requests},
// scaled from the hidden window to per minute as OpenAI states them; the
// request headers only when Requests is set. They state the limit as the call
// left it on arrival: what is left once the call was counted or refused (with
// SlidingCompletion the call counts only later, so what the completed calls
// leave; with HeadersAtAnswer, what is left once it was counted as its answer
// is written), and when the window empties, the reserve is full or the fixed
// window ends.
//
// The provider records what it served, per fixed window counted from its epoch
// (see SetEpoch): tokens, requests and 429s, plus the times of the latest 429s.
// Memory is bounded: the sliding window holds at most one entry per token of
// the limit (with SlidingCompletion, plus the calls being answered, which the
// limit does not count), and the records keep the latest MaxWindows windows and
// MaxRefusals 429 times. It is safe for concurrent use.
package fakeprovider

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limit is how the provider counts calls against its limit.
type Limit string

// The limits, spelled as the simulator's provider models (scenario key
// provider.model).
const (
	SlidingArrival    Limit = "sliding-arrival"
	SlidingCompletion Limit = "sliding-completion"
	TokenBucket       Limit = "token-bucket"
	FixedWindow       Limit = "fixed-window"
)

// Defaults for a zero Config field.
const (
	DefaultTokens        = 40_000
	DefaultWindow        = 10 * time.Second
	DefaultOutputMedian  = 140
	DefaultBytesPerToken = 4
	DefaultMaxWindows    = 4096
	DefaultMaxRefusals   = 4096
	maxBody              = 32 << 20
)

// Config describes a fake provider. The zero value is a 40,000 tokens / 10 s
// provider with no request limit, no headers, no latency and a fixed output of
// 140 tokens.
type Config struct {
	Tokens   int64         // hidden limit: tokens per Window (default 40,000)
	Window   time.Duration // the limit's period: the window's span, the bucket's refill of Tokens (default 10 s)
	Requests int64         // hidden limit: requests per Window; 0 = none

	// RetryAfter is the wait a 429 states, written in whole seconds rounded up
	// (default Window).
	RetryAfter time.Duration
	// Headers sends the OpenAI x-ratelimit-* headers on every answer.
	Headers bool
	// HeadersAtAnswer states them as the answer is written rather than as the
	// call arrived: with SlidingCompletion, the window this call now counts
	// in. New panics when it is set with another Limit.
	HeadersAtAnswer bool
	// Limit is how the provider counts (see the package comment); "" is
	// SlidingArrival, and New panics on a value it does not know.
	Limit Limit
	// Unstated words a 429 without its figures: it names the limit (tokens or
	// requests per min) but not the limit, what was used or what was asked, as
	// Azure OpenAI's and many gateways' 429s do. By default a 429 states them in
	// OpenAI's words.
	Unstated bool
	// Unnamed words a 429 without even naming the limit — "Rate limit
	// exceeded", as a bare gateway answers — so the gate must tell tokens from
	// requests by its own window. It overrides Unstated.
	Unnamed bool
	// DecidesKnown decides on a request's prompt and max_tokens at arrival and
	// counts its output once written (see the package comment). By default a
	// request is decided on its whole cost, output included.
	DecidesKnown bool

	Latency        time.Duration // every answer takes at least this long
	Jitter         time.Duration // plus a uniform share of this
	PerOutputToken time.Duration // plus this per completion token

	OutputMedian  int     // median completion tokens (default 140)
	OutputSigma   float64 // log-normal spread of completion tokens; 0 = always OutputMedian
	BytesPerToken int     // prompt tokens = ceil(body bytes / this) (default 4)
	Seed          uint64  // mixed into every draw

	MaxWindows  int // per-window records kept (default 4096)
	MaxRefusals int // 429 times kept (default 4096)

	// Now is the provider's clock (default time.Now). Sleep waits d or until ctx
	// is done (default a timer); it is called only when an answer has latency.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration)
}

// Provider is the fake. Create it with New; serve it with ServeHTTP.
type Provider struct {
	c Config

	mu      sync.Mutex
	entries []entry // the sliding window, oldest first
	head    int     // entries[head:] are live
	used    int64   // tokens in the window
	seq     uint64  // the last entry's sequence number
	// TokenBucket: the reserve, and when it was last refilled (zero: full).
	level   float64
	levelAt time.Time
	// FixedWindow: the current window's index (Unix time ÷ Window) and what
	// it counted.
	fixedIndex            int64
	fixedUsed, fixedCalls int64

	epoch       time.Time
	windows     []WindowStats // windows[i] is window firstWindow+i
	firstWindow int
	refusals    []time.Duration // offsets from epoch of the latest 429s (ring)
	refHead     int
	served      int64 // requests answered 200 since the epoch
	tokens      int64 // tokens they counted
	refused     int64 // 429s since the epoch
	refusedRPM  int64 // of which on the request axis
	badRequests int64 // requests the fake could not read
	cutBodies   int64 // requests whose body stopped before its end
}

type entry struct {
	at     time.Time
	tokens int64
	seq    uint64
}

// WindowStats is what one fixed window [epoch + i·Window, epoch + (i+1)·Window) saw.
type WindowStats struct {
	Tokens   int64 // tokens counted for the requests served
	Requests int64 // requests served
	Refused  int64 // 429s answered
}

// Stats is a copy of the provider's records since its epoch.
type Stats struct {
	Epoch       time.Time
	Window      time.Duration
	Limit       int64         // tokens per window
	FirstWindow int           // the index of Windows[0] (> 0 once old windows were dropped)
	Windows     []WindowStats // up to the last window that saw a request
	Served      int64         // requests answered 200
	Tokens      int64         // tokens they counted
	Refused     int64         // 429s
	RefusedRPM  int64         // of which on the request limit
	BadRequests int64         // requests that were not a readable chat completion
	CutBodies   int64         // requests whose body stopped before its end (the client went away)
	Refusals    []time.Duration
}

// New returns a provider for c, its epoch now.
func New(c Config) *Provider {
	switch c.Limit {
	case "":
		c.Limit = SlidingArrival
	case SlidingArrival, SlidingCompletion, TokenBucket, FixedWindow:
	default:
		panic(fmt.Sprintf("fakeprovider: Limit %q is not one of %s, %s, %s, %s", c.Limit, SlidingArrival, SlidingCompletion, TokenBucket, FixedWindow))
	}
	if c.HeadersAtAnswer && c.Limit != SlidingCompletion {
		panic(fmt.Sprintf("fakeprovider: HeadersAtAnswer is for Limit %s, not %s", SlidingCompletion, c.Limit))
	}
	if c.Tokens <= 0 {
		c.Tokens = DefaultTokens
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = c.Window
	}
	if c.OutputMedian <= 0 {
		c.OutputMedian = DefaultOutputMedian
	}
	if c.BytesPerToken <= 0 {
		c.BytesPerToken = DefaultBytesPerToken
	}
	if c.MaxWindows <= 0 {
		c.MaxWindows = DefaultMaxWindows
	}
	if c.MaxRefusals <= 0 {
		c.MaxRefusals = DefaultMaxRefusals
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	return &Provider{c: c, epoch: c.Now()}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Config returns the provider's configuration with its defaults filled in.
func (p *Provider) Config() Config { return p.c }

// SetEpoch clears the records and counts windows from t. The hidden limit's
// window is left as it is.
func (p *Provider) SetEpoch(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = t
	p.windows, p.firstWindow = nil, 0
	p.refusals, p.refHead = nil, 0
	p.served, p.tokens, p.refused, p.refusedRPM, p.badRequests, p.cutBodies = 0, 0, 0, 0, 0, 0
}

// Stats returns a copy of the records.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Epoch: p.epoch, Window: p.c.Window, Limit: p.c.Tokens, FirstWindow: p.firstWindow,
		Windows: append([]WindowStats(nil), p.windows...), Served: p.served, Tokens: p.tokens,
		Refused: p.refused, RefusedRPM: p.refusedRPM, BadRequests: p.badRequests, CutBodies: p.cutBodies}
	s.Refusals = append(s.Refusals, p.refusals[p.refHead:]...)
	s.Refusals = append(s.Refusals, p.refusals[:p.refHead]...)
	return s
}

// WindowTokens is what the sliding window holds at now (SlidingArrival and
// SlidingCompletion): the figure the provider refuses against. 0 for the
// other limits.
// It only reads: a now ahead of the provider's clock drops nothing.
func (p *Provider) WindowTokens(now time.Time) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.Limit != SlidingArrival && p.c.Limit != SlidingCompletion {
		return 0
	}
	var n int64
	for _, e := range p.entries[p.head:] {
		if now.Before(e.at.Add(p.c.Window)) {
			n += e.tokens
		}
	}
	return n
}

// Usage is what a request body costs: its prompt tokens and the completion
// tokens the provider will write for it.
func (p *Provider) Usage(body []byte) (prompt, completion int64) {
	prompt, completion, _, _ = p.usage(body, readMaxTokens(body))
	return prompt, completion
}

// usage returns the cost of body and the two uniform draws left for latency.
func (p *Provider) usage(body []byte, maxTokens int64) (prompt, completion int64, jitter float64, capped bool) {
	bpt := int64(p.c.BytesPerToken)
	prompt = max(1, (int64(len(body))+bpt-1)/bpt)
	h := fnv.New64a()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], p.c.Seed)
	_, _ = h.Write(seed[:])
	_, _ = h.Write(body)
	x := h.Sum64()
	u1, u2, u3 := unit(&x), unit(&x), unit(&x)
	completion = int64(p.c.OutputMedian)
	if p.c.OutputSigma > 0 {
		z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2) // Box-Muller
		completion = int64(math.Round(float64(p.c.OutputMedian) * math.Exp(p.c.OutputSigma*z)))
	}
	completion = max(1, completion)
	if maxTokens > 0 && completion > maxTokens {
		completion, capped = maxTokens, true
	}
	return prompt, completion, u3, capped
}

// unit is splitmix64's next value as a float in (0, 1).
func unit(x *uint64) float64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return (float64(z>>11) + 0.5) / (1 << 53)
}

// verdict is the window's answer to one request.
type verdict struct {
	ok         bool
	rpm        bool  // refused on the request limit
	used       int64 // tokens in the window before this request
	requests   int64 // requests in the window before this request
	remaining  int64 // tokens left after the call was counted or refused (see the package comment)
	remReqs    int64
	resetToken time.Duration // until the window is empty
}

// held is what admit counted for a call, for settle: its sliding-window entry,
// or the fixed window it was counted in.
type held struct {
	seq   uint64
	fixed int64
}

// admit decides on a call of decide tokens at now and counts it, or refuses
// it; the records count its whole cost.
func (p *Provider) admit(now time.Time, decide, whole int64) (verdict, held) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.Limit == FixedWindow {
		return p.admitFixedLocked(now, decide, whole), held{fixed: p.fixedIndex}
	}
	p.expireLocked(now)
	v := verdict{used: p.used, requests: int64(len(p.entries) - p.head)}
	if p.c.Limit == TokenBucket {
		return p.admitBucketLocked(now, decide, whole, v), held{}
	}
	var h held
	switch {
	case p.used+decide > p.c.Tokens:
	case p.c.Requests > 0 && v.requests+1 > p.c.Requests:
		v.rpm = true
	case p.c.Limit == SlidingCompletion:
		v.ok = true // counted by complete, when the answer is written
		p.stateLocked(now, &v)
		return v, h
	default:
		v.ok = true
		p.seq++
		h.seq = p.seq
		p.entries = append(p.entries, entry{now, decide, p.seq})
		p.used += decide
	}
	p.stateLocked(now, &v)
	return p.recordLocked(now, whole, v), h
}

// expireLocked drops the sliding window's entries a window old at now.
func (p *Provider) expireLocked(now time.Time) {
	for p.head < len(p.entries) && !now.Before(p.entries[p.head].at.Add(p.c.Window)) {
		p.used -= p.entries[p.head].tokens
		p.head++
	}
	if p.head > 0 && p.head >= len(p.entries)/2 { // compact: the window stays bounded by the limit
		n := copy(p.entries, p.entries[p.head:])
		clear(p.entries[n:])
		p.entries, p.head = p.entries[:n], 0
	}
}

// settle counts the rest of a call's whole cost once its answer is written
// (DecidesKnown): delta = whole − what admit counted.
func (p *Provider) settle(h held, delta int64) {
	if delta == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.c.Limit {
	case FixedWindow:
		if i := p.c.Now().UnixNano() / int64(p.c.Window); i > p.fixedIndex {
			p.fixedIndex, p.fixedUsed, p.fixedCalls = i, 0, 0
		}
		if delta > 0 || p.fixedIndex == h.fixed {
			p.fixedUsed += delta
		}
	case TokenBucket:
		p.level = math.Min(float64(p.c.Tokens), p.level-float64(delta)) // a debt the refill pays
	default:
		live := p.entries[p.head:]
		i := sort.Search(len(live), func(i int) bool { return live[i].seq >= h.seq })
		if i < len(live) && live[i].seq == h.seq {
			live[i].tokens += delta
			p.used += delta
		}
	}
}

// stateLocked fills in what is left of the window at now and when it empties.
func (p *Provider) stateLocked(now time.Time, v *verdict) {
	v.remaining = max(0, p.c.Tokens-p.used)
	v.remReqs = max(0, p.c.Requests-int64(len(p.entries)-p.head))
	if n := len(p.entries); n > p.head {
		v.resetToken = p.entries[n-1].at.Add(p.c.Window).Sub(now)
	}
}

// complete counts a call admitted by SlidingCompletion when its answer is
// written, and states the window it leaves. The clock is read under the lock,
// so the window stays in time order.
func (p *Provider) complete(tokens int64) verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.c.Now()
	p.expireLocked(now)
	p.entries = append(p.entries, entry{now, tokens, 0})
	p.used += tokens
	v := verdict{ok: true}
	p.stateLocked(now, &v)
	return p.recordLocked(now, tokens, v)
}

// admitFixedLocked is admit for clock-aligned fixed windows; the request limit
// is counted in the same windows.
func (p *Provider) admitFixedLocked(now time.Time, tokens, whole int64) verdict {
	// Requests are timed before the lock: one timed just before the current
	// window began counts in it.
	if i := now.UnixNano() / int64(p.c.Window); i > p.fixedIndex {
		p.fixedIndex, p.fixedUsed, p.fixedCalls = i, 0, 0
	}
	v := verdict{used: p.fixedUsed, requests: p.fixedCalls}
	switch {
	case p.fixedUsed+tokens > p.c.Tokens:
	case p.c.Requests > 0 && p.fixedCalls+1 > p.c.Requests:
		v.rpm = true
	default:
		v.ok = true
		p.fixedUsed += tokens
		p.fixedCalls++
	}
	v.remaining = max(0, p.c.Tokens-p.fixedUsed)
	v.remReqs = max(0, p.c.Requests-p.fixedCalls)
	v.resetToken = time.Unix(0, (p.fixedIndex+1)*int64(p.c.Window)).Sub(now)
	return p.recordLocked(now, whole, v)
}

// admitBucketLocked is admit for a token bucket: the request limit stays a
// sliding window (its entries count requests only).
func (p *Provider) admitBucketLocked(now time.Time, tokens, whole int64, v verdict) verdict {
	rate := float64(p.c.Tokens) / p.c.Window.Seconds()
	if p.levelAt.IsZero() {
		p.level, p.levelAt = float64(p.c.Tokens), now
	} else if d := now.Sub(p.levelAt).Seconds(); d > 0 {
		// Requests are timed before the lock: one timed earlier than the last
		// refill must not move the refill back (the interval would count twice).
		p.level = math.Min(float64(p.c.Tokens), p.level+rate*d)
		p.levelAt = now
	}
	switch {
	case p.level < float64(tokens):
	case p.c.Requests > 0 && v.requests+1 > p.c.Requests:
		v.rpm = true
	default:
		v.ok = true
		p.level -= float64(tokens)
		p.entries = append(p.entries, entry{now, 0, 0})
	}
	v.remaining = int64(p.level)
	v.used = p.c.Tokens - v.remaining // as OpenAI states it: the limit less what is left
	v.remReqs = max(0, p.c.Requests-int64(len(p.entries)-p.head))
	v.resetToken = time.Duration((float64(p.c.Tokens) - p.level) / rate * float64(time.Second))
	return p.recordLocked(now, whole, v)
}

// recordLocked counts the answer in the records.
func (p *Provider) recordLocked(now time.Time, tokens int64, v verdict) verdict {
	w := p.windowLocked(now)
	if w == nil {
		return v
	}
	if v.ok {
		w.Tokens += tokens
		w.Requests++
		p.served++
		p.tokens += tokens
		return v
	}
	w.Refused++
	p.refused++
	if v.rpm {
		p.refusedRPM++
	}
	off := now.Sub(p.epoch)
	if len(p.refusals) < p.c.MaxRefusals {
		p.refusals = append(p.refusals, off)
	} else {
		p.refusals[p.refHead] = off
		p.refHead = (p.refHead + 1) % len(p.refusals)
	}
	return v
}

// windowLocked is the record of the fixed window holding now; nil before the
// epoch or in a window already dropped.
func (p *Provider) windowLocked(now time.Time) *WindowStats {
	if now.Before(p.epoch) {
		return nil
	}
	i := int(now.Sub(p.epoch) / p.c.Window)
	if i < p.firstWindow {
		return nil
	}
	for p.firstWindow+len(p.windows) <= i {
		p.windows = append(p.windows, WindowStats{})
	}
	if over := len(p.windows) - p.c.MaxWindows; over > 0 {
		n := copy(p.windows, p.windows[over:])
		p.windows = p.windows[:n]
		p.firstWindow += over
	}
	return &p.windows[i-p.firstWindow]
}

// perMinute scales a per-window figure to per minute.
func (p *Provider) perMinute(n int64) int64 {
	return int64(math.Round(float64(n) * float64(time.Minute) / float64(p.c.Window)))
}

// chatRequest is the part of a chat completion request the fake reads.
type chatRequest struct {
	Model               string   `json:"model"`
	Stream              bool     `json:"stream"`
	MaxTokens           *float64 `json:"max_tokens"`
	MaxCompletionTokens *float64 `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (r chatRequest) maxTokens() int64 {
	var n int64
	for _, v := range []*float64{r.MaxTokens, r.MaxCompletionTokens} {
		if v != nil && *v > 0 {
			n = max(n, int64(*v))
		}
	}
	return n
}

func readMaxTokens(body []byte) int64 {
	var r chatRequest
	_ = json.Unmarshal(body, &r)
	return r.maxTokens()
}

// ServeHTTP answers POST …/chat/completions; anything else is a 404.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		p.tally(&p.badRequests)
		writeError(w, http.StatusNotFound, "invalid_request_error", "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	now := p.c.Now() // counted when the request arrives: before its body is read
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		// The body stopped before its end: a client that went away while
		// writing it (a call cut mid-send), or one that sent less than it
		// said. Counted apart from unreadable requests: a caller that cut no
		// call should see none.
		p.tally(&p.cutBodies)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the body ended early")
		return
	}
	var req chatRequest
	if err = json.Unmarshal(body, &req); err != nil {
		p.tally(&p.badRequests)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the body is not a chat completion request")
		return
	}
	prompt, completion, jitter, capped := p.usage(body, req.maxTokens())
	decide := prompt + completion
	if p.c.DecidesKnown {
		decide = prompt + req.maxTokens()
	}
	v, h := p.admit(now, decide, prompt+completion)
	if p.c.Headers {
		p.rateLimitHeaders(w.Header(), v)
	}
	if !v.ok {
		p.refuse(w, req.Model, v, decide)
		return
	}
	if d := p.c.Latency + time.Duration(jitter*float64(p.c.Jitter)) + time.Duration(completion)*p.c.PerOutputToken; d > 0 {
		p.c.Sleep(r.Context(), d)
	}
	if p.c.Limit == SlidingCompletion {
		// Counted now at its whole cost — when the client went away, at the
		// moment it left. The headers state the window as the call found it,
		// or, HeadersAtAnswer, as it leaves it.
		if v := p.complete(prompt + completion); p.c.Headers && p.c.HeadersAtAnswer {
			p.rateLimitHeaders(w.Header(), v)
		}
	} else {
		p.settle(h, prompt+completion-decide) // nothing unless DecidesKnown
	}
	finish := "stop"
	if capped {
		finish = "length"
	}
	usage := map[string]int64{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	const id = "chatcmpl-fake"
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": now.Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
				"message": map[string]any{"role": "assistant", "content": strings.Repeat("tok ", int(completion))}}},
			"usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	chunk := func(choices []any, extra ...any) {
		m := map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": req.Model, "choices": choices}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		b, _ := json.Marshal(m)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	const perChunk = 16
	for left := completion; left > 0; left -= perChunk {
		chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"content": strings.Repeat("tok ", int(min(left, perChunk)))}}})
	}
	chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}})
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		chunk([]any{}, "usage", usage)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// tally counts one more in n, a record under p.mu.
func (p *Provider) tally(n *int64) {
	p.mu.Lock()
	*n++
	p.mu.Unlock()
}

// rateLimitHeaders writes OpenAI's x-ratelimit-* headers, per minute.
func (p *Provider) rateLimitHeaders(h http.Header, v verdict) {
	h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(p.perMinute(p.c.Tokens), 10))
	h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(p.perMinute(v.remaining), 10))
	h.Set("X-Ratelimit-Reset-Tokens", v.resetToken.Round(time.Millisecond).String())
	if p.c.Requests > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(p.perMinute(p.c.Requests), 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(p.perMinute(v.remReqs), 10))
		h.Set("X-Ratelimit-Reset-Requests", v.resetToken.Round(time.Millisecond).String())
	}
}

// refuse answers 429 in OpenAI's words. Limit and Used are per minute, as the
// headers state them; Requested is the call's own cost.
func (p *Provider) refuse(w http.ResponseWriter, model string, v verdict, cost int64) {
	secs := int64(math.Ceil(p.c.RetryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	var msg string
	switch {
	case p.c.Unnamed:
		msg = fmt.Sprintf("Rate limit exceeded for %s. Please try again in %ds.", model, secs)
	case p.c.Unstated && v.rpm:
		msg = fmt.Sprintf("Rate limit reached for %s on requests per min (RPM). Please try again in %ds.", model, secs)
	case p.c.Unstated:
		msg = fmt.Sprintf("Rate limit reached for %s on tokens per min (TPM). Please try again in %ds.", model, secs)
	case v.rpm:
		msg = fmt.Sprintf("Rate limit reached for %s in organization org-fake on requests per min (RPM): Limit %d, Used %d, Requested 1. Please try again in %ds.",
			model, p.perMinute(p.c.Requests), p.perMinute(v.requests), secs)
	default:
		msg = fmt.Sprintf("Rate limit reached for %s in organization org-fake on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %ds.",
			model, p.perMinute(p.c.Tokens), p.perMinute(v.used), p.perMinute(cost), secs)
	}
	typ := "tokens"
	switch {
	case p.c.Unnamed:
		typ = "rate_limit_error"
	case v.rpm:
		typ = "requests"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": "rate_limit_exceeded"}})
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ}})
}
