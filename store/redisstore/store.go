// Package redisstore keeps the gate's shared state on Redis, so several gatectl
// processes behave as one gate: the window entries and their reservations, the
// cooldowns and the learned quotas of every provider/model.
//
// Each admission is one round trip (a Lua script reads the window, checks it and
// reserves); keys carry the hash tag {provider/model}, so Redis Cluster keeps a
// model's keys on one slot; every key has a TTL. Waiting stays in each process:
// a waiter sleeps until the drain time Redis reported, or until a release on the
// model's channel wakes it.
//
// Redis down or slow is a policy (Options.OnError): every call has a deadline;
// after a failure the store is degraded — calls fail at once without touching
// the network — until a background ping succeeds. failOpen then lets each
// process's own gate decide alone; failClosed holds calls for refuseAfter from
// the outage's first failure, then refuses them (the server answers 503).
package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// The policies for a Redis that does not answer.
const (
	FailOpen   = "failOpen"
	FailClosed = "failClosed"
)

// Policies lists the values of Options.OnError.
var Policies = []string{FailOpen, FailClosed}

// Options configures the store (`store.redis` in the config).
type Options struct {
	URL       string        // redis://[user:password@]host:port/db, or rediss:// for TLS
	KeyPrefix string        // prepended to every key and channel
	Timeout   time.Duration // deadline of every call
	OnError   string        // failOpen | failClosed
	Cluster   bool          // connect as a Redis Cluster client
}

// Defaults of store.redis.
const (
	DefaultKeyPrefix = "gatectl:"
	DefaultTimeout   = 100 * time.Millisecond
)

// DefaultOptions are the defaults of store.redis (URL has none).
func DefaultOptions() Options {
	return Options{KeyPrefix: DefaultKeyPrefix, Timeout: DefaultTimeout, OnError: FailOpen}
}

// keyPrefixForbidden are the characters a key prefix must not hold: braces
// would make the prefix the hash tag of every key (and the notifications, read
// back by their {…} part, would be misparsed and dropped), and glob characters
// would widen the PSUBSCRIBE pattern to other prefixes' channels.
const keyPrefixForbidden = "{}*?[]\\"

// CheckKeyPrefix returns why prefix cannot be a key prefix, or "".
func CheckKeyPrefix(prefix string) string {
	if strings.ContainsAny(prefix, keyPrefixForbidden) {
		return "must not contain any of " + keyPrefixForbidden
	}
	return ""
}

// learnedTTL is how long a learned quota outlives its last change: a day of
// silence is long enough that learning again is safer than trusting it.
const learnedTTL = 24 * time.Hour

// pingEvery is how often a degraded store tries Redis again.
const pingEvery = 500 * time.Millisecond

// connectTimeout bounds making a connection, where the call deadline
// (Options.Timeout, 100 ms) bounds a call on one: a connection's set-up is a
// TCP handshake, HELLO (with AUTH) and SELECT before the call, several round
// trips. Under the call's deadline, a Redis 40 ms away never connected at all
// (the first PING took 166 ms, later ones 41). The store's probe — at Open,
// and while degraded — sets connections up with this deadline, and the pool
// keeps them for the calls that follow. A call that finds none idle (more at
// once than the probe made, or after one was dropped) still sets one up
// under its own deadline: on such a link the store then degrades and the
// probe sets them up again. (The client's MinIdleConns would not help: it
// dials them, but their set-up waits for the first call to use them.)
const connectTimeout = 2 * time.Second

// refuseAfter is how long a failClosed store holds calls once an outage
// began, before it refuses them: three probes' time (pingEvery), so a blip
// that a probe finds over costs the calls of that moment a wait, not a
// refusal. Under the proxy's default holdNotice (2 s), so a held stream is
// refused with a 503 before its keep-alive answer begins.
const refuseAfter = 1500 * time.Millisecond

// minIdleConns is how many connections the probe sets up at once.
const minIdleConns = 4

// ErrDegraded is what calls return while the store waits for Redis to answer again.
var ErrDegraded = errors.New("redisstore: Redis unavailable (degraded)")

// Store is the shared state on one Redis. Safe for concurrent use.
type Store struct {
	opts     Options
	c        redis.UniversalClient
	addr     string // host:port of the node (the nodes named, for a cluster), without credentials
	log      hclog.Logger
	instance string // tells this process's own notifications from others'

	degraded atomic.Bool
	errs     atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   sync.Once
	// bgMu guards stopping: no background goroutine is added (wg.Add) once
	// Close has begun waiting for them.
	bgMu     sync.Mutex
	stopping bool

	on          Handlers
	handlers    atomic.Pointer[Handlers] // on, for recover (which may run before Notify)
	marksRead   atomic.Bool              // the marks in Redis were handed to Handlers.Marked once
	degradedAt  atomic.Int64             // when the store last turned degraded, unix ms
	refuseAt    atomic.Int64             // when a failClosed store degraded now refuses calls: the outage's first failure + refuseAfter, unix ms
	recoveredAt atomic.Int64             // when the store last recovered, unix ms
	refuseAfter time.Duration            // refuseAfter (tests shorten it)
}

// Handlers receive the notifications of the other instances (Notify). Any may
// be nil.
type Handlers struct {
	Released func(provider, model string)                      // capacity came back in the model's window
	Learned  func(provider, model string, q gate.LearnedQuota) // another instance learned the model's quota
	Settled  func(ticket string, tokens int64)                 // an instance settled a ticket (maybe one of ours: SettleFor)
	Marked   func(provider string, at time.Time)               // another instance marked a provider exhausted
	// SessionChanged: another instance changed the session's settings.
	SessionChanged func(session string)
	// ProviderCooldown: another instance started a provider-wide cooldown
	// (a 429 that named no model) that ends at until.
	ProviderCooldown func(provider string, until time.Time)
	// Unmarked: another instance lifted a provider's exhaustion mark by hand at at.
	Unmarked func(provider string, at time.Time)
	// Route: another instance moved (or forgot, the zero route) a session's route.
	Route func(session string, r pool.SessionRoute)
	// Recovered: Redis answers again after an outage; the ledger writes back
	// what it admitted alone meanwhile (gate.Ledger.WriteBackAlone).
	Recovered func()
}

// Open connects to the Redis at opts.URL. A Redis that does not answer yet is
// not an error: the store starts degraded and recovers by itself.
func Open(opts Options, log hclog.Logger) (*Store, error) {
	d := DefaultOptions()
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = d.KeyPrefix
	}
	if opts.Timeout <= 0 {
		opts.Timeout = d.Timeout
	}
	if opts.OnError == "" {
		opts.OnError = d.OnError
	}
	if opts.OnError != FailOpen && opts.OnError != FailClosed {
		return nil, fmt.Errorf("redisstore: onError must be one of %s (got %q)", strings.Join(Policies, ", "), opts.OnError)
	}
	if msg := CheckKeyPrefix(opts.KeyPrefix); msg != "" {
		return nil, fmt.Errorf("redisstore: keyPrefix %s (got %q)", msg, opts.KeyPrefix)
	}
	c, addr, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	redis.SetLogger(quietLogger{log.Named("client")})
	var id [8]byte
	_, _ = rand.Read(id[:])
	s := &Store{opts: opts, c: c, addr: addr, log: log, instance: hex.EncodeToString(id[:]), stop: make(chan struct{}), refuseAfter: refuseAfter}
	if err := s.probe(); err != nil {
		s.fail(err)
	}
	return s, nil
}

// newClient connects to one node, or to a Redis Cluster (opts.Cluster: the URL
// names one node, more with ?addr=host:port). Every call has the deadline
// and no retry: a retry doubles a slow answer, and the policy decides instead.
func newClient(opts Options) (redis.UniversalClient, string, error) {
	if opts.Cluster {
		co, err := redis.ParseClusterURL(opts.URL)
		if err != nil {
			return nil, "", fmt.Errorf("redisstore: url: %w", redactURL(err, opts.URL, func(u string) error { _, err := redis.ParseClusterURL(u); return err }))
		}
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout = max(opts.Timeout, connectTimeout), opts.Timeout, opts.Timeout
		co.ContextTimeoutEnabled = true
		co.MaxRetries, co.MaxRedirects = -1, 3
		co.PoolSize = max(co.PoolSize, 32)
		return redis.NewClusterClient(co), strings.Join(co.Addrs, ","), nil
	}
	ro, err := redis.ParseURL(opts.URL)
	if err != nil {
		return nil, "", fmt.Errorf("redisstore: url: %w", redactURL(err, opts.URL, func(u string) error { _, err := redis.ParseURL(u); return err }))
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = max(opts.Timeout, connectTimeout), opts.Timeout, opts.Timeout
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1
	ro.PoolSize = max(ro.PoolSize, 32)
	return redis.NewClient(ro), ro.Addr, nil
}

// redactURL keeps a password in the URL out of an error message. The parser's
// message quotes the URL (escaped, so a search for the password's text would
// miss it), so a URL with a user:password part is parsed again without it: the
// message is about the rest, or says only that the user:password part is bad.
func redactURL(err error, url string, parse func(string) error) error {
	i := strings.LastIndex(url, "@")
	if i < 0 {
		return err
	}
	scheme, _, _ := strings.Cut(url, "://")
	bare := scheme + "://" + url[i+1:]
	if perr := parse(bare); perr != nil {
		return perr
	}
	return errors.New("the user:password part is not valid (not shown: it may hold a password)")
}

// Options returns the options the store runs with (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// Ping asks Redis to answer within the deadline.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return s.c.Ping(ctx).Err()
}

// Degraded reports whether the store is waiting for Redis to answer again.
func (s *Store) Degraded() bool { return s.degraded.Load() }

// Errors is how many calls failed since Open.
func (s *Store) Errors() int64 { return s.errs.Load() }

// Close stops the background work and closes the connections.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		s.bgMu.Lock()
		s.stopping = true
		close(s.stop)
		s.bgMu.Unlock()
		s.wg.Wait()
		err = s.c.Close()
	})
	return err
}

// fail counts a failed call and, on the first failure, turns degraded: calls
// fail at once until the background ping finds Redis again.
func (s *Store) fail(err error) {
	s.errs.Add(1)
	if s.degraded.Load() {
		return
	}
	// An outage's hold runs from its first failure: a store that recovers and
	// fails again within refuseAfter (a Redis the probe reaches and the calls
	// do not: slower than their deadline, or one model's key of the wrong
	// type) is still in the same outage, and starting the hold over at each
	// recovery held calls for ever. Set before degraded turns, so Available
	// never reads the last outage's time.
	now := time.Now()
	if at := s.refuseAt.Load(); at == 0 || now.Sub(time.UnixMilli(s.recoveredAt.Load())) >= s.refuseAfter {
		s.refuseAt.Store(now.Add(s.refuseAfter).UnixMilli())
	}
	if !s.degraded.CompareAndSwap(false, true) {
		return
	}
	s.degradedAt.Store(now.UnixMilli())
	s.log.Warn("shared store degraded: Redis does not answer", "policy", s.opts.OnError, "error", err)
	s.background(s.recover)
}

// background runs f in a goroutine Close waits for, unless Close has begun.
func (s *Store) background(f func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.stopping {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Store) recover() {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.probe(); err == nil {
				s.recoveredAt.Store(time.Now().UnixMilli())
				s.degraded.Store(false)
				s.log.Info("shared store recovered: Redis answers again")
				s.resync()
				if h := s.handlers.Load(); h != nil && h.Recovered != nil {
					h.Recovered()
				}
				return
			}
		}
	}
}

// probe asks whether Redis serves the store again: it answers, and takes a
// write — a Redis that answers PING but refuses writes (a replica, or one out
// of memory) fails every script, and a PING alone let the store recover and
// degrade again on each call. The deadline is connectTimeout: a connection
// made here is pooled for the calls that follow.
func (s *Store) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.opts.Timeout, connectTimeout))
	defer cancel()
	// minIdleConns PINGs at once: each takes a connection of its own, set up
	// (HELLO and all) under this deadline, not a call's, and pooled after.
	errs := make(chan error, minIdleConns)
	for range minIdleConns {
		go func() { errs <- s.c.Ping(ctx).Err() }()
	}
	var err error
	for range minIdleConns {
		err = cmp.Or(err, <-errs)
	}
	if err != nil {
		return err
	}
	// The scripts too: a script Redis does not hold costs a second round
	// trip (EVALSHA refused, then EVAL), past a call's deadline on a slow link.
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return err
		}
	}
	return s.c.Set(ctx, s.opts.KeyPrefix+"{health}", s.instance, time.Minute).Err()
}

// scripts are every script the store runs, loaded by the probe and by Check
// (TestEveryScriptIsPreloaded holds the list to the package's scripts).
var scripts = []*redis.Script{reserveScript, writeBackScript, closeScript, sentScript, outputWindowScript, cooldownScript, spendScript, providerCooldownScript, unmarkScript}

// resync hands the handlers what Notify reads at start and what the
// notifications lost during an outage carried: the provider-wide cooldowns now
// in Redis (the longest stands, so reading them again is harmless), and the
// exhaustion marks — all of them until they were read once (an instance that
// started while Redis was away never read them), after that only those set
// since the store turned degraded. An older one this instance had, and
// lifted meanwhile (by hand, by a reading), is still in Redis: adopting it
// would bring it back.
func (s *Store) resync() {
	h := s.handlers.Load()
	if h == nil {
		return
	}
	if h.Marked != nil {
		if marks := s.marks(); marks != nil {
			since := time.Time{}
			if s.marksRead.Swap(true) {
				since = time.UnixMilli(s.degradedAt.Load()).Add(-time.Second) // (clocks a little apart)
			}
			for p, at := range marks {
				if !at.Before(since) {
					h.Marked(p, at)
				}
			}
		}
	}
	if h.ProviderCooldown != nil {
		for p, until := range s.providerCooldowns() {
			h.ProviderCooldown(p, until)
		}
	}
}

// call runs f with the deadline, unless the store is degraded.
func (s *Store) call(f func(ctx context.Context) error) error {
	if s.degraded.Load() {
		return ErrDegraded
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	err := f(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		s.fail(err)
	}
	return err
}

// base is the key prefix of provider/model, with its hash tag.
func (s *Store) base(provider, model string) string {
	return s.opts.KeyPrefix + "{" + provider + "/" + model + "}:"
}

func (s *Store) channel(provider, model string) string { return s.base(provider, model) + "ev" }

// windowTTL keeps a model's window keys two windows past their last write.
func windowTTL(span time.Duration) int64 { return max(2*span.Milliseconds(), 1000) }

// Reserve implements gate.SharedWindow.
func (s *Store) Reserve(r gate.SharedReserve) (gate.SharedGrant, error) {
	k := s.base(r.Provider, r.Model)
	force, queued := "0", "0"
	if r.Force {
		force = "1"
	}
	if r.Queued {
		queued = "1"
	}
	var g gate.SharedGrant
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	nonce := hex.EncodeToString(rnd[:])
	err := s.call(func(ctx context.Context) error {
		// (The output window's keys go every time, so the instances' one is
		// always the tenth; a key named is not a key created.)
		keys := []string{k + "w", k + "t", k + "s", k + "q", k + "cd", k + "o", k + "ow", k + "ot", k + "os", k + "i"}
		args := []any{r.Now.UnixMilli(), r.Span.Milliseconds(), r.Tokens, r.Need, r.Budget, r.RPM, force, windowTTL(r.Span), nonce,
			0, 0, s.instance, max(r.ActiveSpan.Milliseconds(), 1), queued}
		if r.OutputBudget != 0 { // the output window, only for a model with an output limit
			args[9], args[10] = max(r.Output, 0), r.OutputBudget
		}
		if r.OutputBudget != 0 && len(r.OpenOutputs)+len(r.OutputBefore) > 0 {
			open := make([]any, 0, 2*len(r.OpenOutputs))
			for _, o := range r.OpenOutputs {
				if entry, _, ok := strings.Cut(o.ID, "-"); ok && o.Output > 0 {
					open = append(open, entry, o.Output)
				}
			}
			args = append(append(args, len(open)/2), open...)
			for _, c := range r.OutputBefore {
				if c.Output > 0 {
					args = append(args, c.At.UnixMilli(), c.Output)
				}
			}
		}
		v, err := reserveScript.Run(ctx, s.c, keys, args...).Slice()
		if err != nil {
			return err
		}
		if len(v) != 6 {
			return fmt.Errorf("redisstore: reserve answered %d values", len(v))
		}
		asking, _ := v[5].(int64)
		g.Instances = int(asking)
		g.WindowOutput, _ = v[4].(int64)
		if g.ID, _ = v[0].(string); g.ID != "" {
			g.ID += "-" + nonce // the entry, and the proof of holding it
		}
		wait, _ := v[1].(int64)
		g.Wait = time.Duration(wait) * time.Millisecond
		g.Reason, _ = v[2].(string)
		g.WindowTokens, _ = v[3].(int64)
		return nil
	})
	if err != nil && s.opts.OnError == FailClosed {
		err = fmt.Errorf("%w: %w", gate.ErrStoreHolds, err) // the call waits to ask again
	}
	return g, err
}

// writeBackChunk bounds one write-back call: a window of a busy model holds
// thousands of calls, and each call has the store's deadline.
const writeBackChunk = 500

// WriteBack implements gate.SharedWriteBack.
func (s *Store) WriteBack(provider, model string, now time.Time, span time.Duration, calls []gate.SharedCall) (int, error) {
	k := s.base(provider, model)
	cutoff := now.Add(-span).UnixMilli()
	for done := 0; done < len(calls); {
		chunk := calls[done:min(done+writeBackChunk, len(calls))]
		args := make([]any, 0, 2+3*len(chunk))
		args = append(args, cutoff, windowTTL(span))
		for _, c := range chunk {
			args = append(args, c.At.UnixMilli(), max(c.Tokens, 0), max(c.Output, 0))
		}
		err := s.call(func(ctx context.Context) error {
			return writeBackScript.Run(ctx, s.c, []string{k + "w", k + "t", k + "s", k + "q", k + "o", k + "ow", k + "ot", k + "os"}, args...).Err()
		})
		if err != nil {
			return done, err
		}
		done += len(chunk)
	}
	return len(calls), nil
}

// Settle implements gate.SharedWindow.
func (s *Store) Settle(provider, model, id string, tokens, output int64) error {
	_, _, err := s.settle(provider, model, id, tokens, output, "")
	return err
}

// ErrNotOpen is SettleFor's answer for an entry settled already or gone from the window.
var ErrNotOpen = errors.New("redisstore: the entry is settled already or left the window")

// SettleFor settles the entry of a ticket another instance issued, and tells
// that instance (its Notify onSettled receives ticket and tokens) so it drops
// its own record of the call without settling it twice; output is what the
// call wrote (0 for a release), which the output window takes when the entry
// has one. It returns the tokens the entry had reserved.
func (s *Store) SettleFor(provider, model, id string, tokens, output int64, ticket string) (reserved int64, err error) {
	if tokens < 0 {
		return 0, fmt.Errorf("redisstore: settle with %d tokens (-1 is AbandonFor's)", tokens)
	}
	refund, open, err := s.settle(provider, model, id, tokens, max(output, 0), "s "+strconv.FormatInt(tokens, 10)+" "+ticket)
	if err == nil && !open {
		return 0, ErrNotOpen // (a call that used more than it reserved is open: its refund is below 0)
	}
	return refund + tokens, err
}

// AbandonFor closes the entry of a ticket another instance issued whose call
// was sent and got no answer: the entry keeps its reservation (the provider
// had the call), and that instance is told as SettleFor tells it, with the
// tokens kept. It returns them.
func (s *Store) AbandonFor(provider, model, id, ticket string) (kept int64, err error) {
	kept, open, err := s.settle(provider, model, id, -1, -1, ticket)
	if err == nil && !open {
		return 0, ErrNotOpen
	}
	return kept, err
}

func (s *Store) settle(provider, model, id string, tokens, output int64, note string) (refund int64, open bool, err error) {
	entry, nonce, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false, nil
	}
	k := s.base(provider, model)
	err = s.call(func(ctx context.Context) error {
		var err error
		if output < 0 { // no output to settle: the token window's keys alone
			refund, err = closeScript.Run(ctx, s.c, []string{k + "w", k + "t", k + "s", k + "o"}, entry, tokens, s.channel(provider, model), note, nonce).Int64()
			return err
		}
		refund, err = closeScript.Run(ctx, s.c, []string{k + "w", k + "t", k + "s", k + "o", k + "ow", k + "ot", k + "os"},
			entry, tokens, s.channel(provider, model), note, nonce, output).Int64()
		return err
	})
	if errors.Is(err, redis.Nil) { // closed already, or gone from the window
		return 0, false, nil
	}
	return refund, err == nil, err
}

// Sent implements gate.SharedSends: entry id counts from at, when it is open
// and counted from earlier (moved). An entry settled or gone from the window
// answers gate.ErrSharedEntryClosed.
func (s *Store) Sent(provider, model, id string, at time.Time, span time.Duration) (moved bool, err error) {
	entry, nonce, ok := strings.Cut(id, "-")
	if !ok {
		return false, gate.ErrSharedEntryClosed
	}
	k := s.base(provider, model)
	var r int64
	err = s.call(func(ctx context.Context) error {
		var err error
		r, err = sentScript.Run(ctx, s.c, []string{k + "w", k + "t", k + "s", k + "o", k + "ow", k + "ot", k + "os"}, entry, at.UnixMilli(), nonce, windowTTL(span)).Int64()
		return err
	})
	switch {
	case err != nil:
		return false, err
	case r < 0:
		return false, gate.ErrSharedEntryClosed
	}
	return r == 1, nil
}

// Cooldown implements gate.SharedWindow.
func (s *Store) Cooldown(provider, model string, now, until time.Time, span time.Duration) (int64, error) {
	k := s.base(provider, model)
	var n int64
	err := s.call(func(ctx context.Context) error {
		var err error
		n, err = cooldownScript.Run(ctx, s.c, []string{k + "cd", k + "s"},
			until.UnixMilli(), max(until.Sub(now).Milliseconds(), 0)+1000).Int64()
		return err
	})
	return n, err
}

// OutputWindow implements gate.SharedOutputReading: the model's shared output
// window at now.
func (s *Store) OutputWindow(provider, model string, now time.Time, span time.Duration) (int64, error) {
	k := s.base(provider, model)
	var n int64
	err := s.call(func(ctx context.Context) error {
		var err error
		n, err = outputWindowScript.Run(ctx, s.c, []string{k + "ow", k + "ot", k + "os"}, now.UnixMilli(), span.Milliseconds(), windowTTL(span)).Int64()
		return err
	})
	return n, err
}

// Available implements gate.SharedWindow: under failClosed, a store degraded
// for refuseAfter refuses calls. Before that the calls wait (Reserve's
// gate.ErrStoreHolds) while the probe asks Redis again: one slow answer or
// dropped connection degrades the store, and refusing at once turned that
// blip into a 503 for every call of the process, queued ones included, all
// told to come back at the same second.
func (s *Store) Available() error {
	if s.opts.OnError != FailClosed || !s.degraded.Load() {
		return nil
	}
	if time.Now().UnixMilli() >= s.refuseAt.Load() {
		return gate.ErrStoreUnavailable
	}
	return nil
}

var _ gate.SharedWindow = (*Store)(nil)
var _ gate.SharedSends = (*Store)(nil)
var _ gate.SharedOutputReading = (*Store)(nil)

// Load implements gate.LearnedStore.
func (s *Store) Load(provider, model string) (gate.LearnedQuota, bool) {
	var q gate.LearnedQuota
	var raw []byte
	err := s.call(func(ctx context.Context) error {
		var err error
		raw, err = s.c.Get(ctx, s.base(provider, model)+"learn").Bytes()
		return err
	})
	if err != nil || json.Unmarshal(raw, &q) != nil {
		return q, false
	}
	return q, true
}

// Save implements gate.LearnedStore, and tells the other instances.
func (s *Store) Save(provider, model string, q gate.LearnedQuota) {
	raw, _ := json.Marshal(q)
	_ = s.call(func(ctx context.Context) error {
		k := s.base(provider, model) + "learn"
		p := s.c.Pipeline()
		p.Set(ctx, k, raw, learnedTTL)
		p.Publish(ctx, s.channel(provider, model), "l "+s.instance+" "+string(raw))
		_, err := p.Exec(ctx)
		return err
	})
}

var _ gate.LearnedStore = (*Store)(nil)

// Notify starts listening on every model's channel (and those of the marks,
// the provider-wide cooldowns, the sessions and their routes) and hands what arrives to h;
// the exhaustion marks and provider-wide cooldowns set so far are handed to
// h.Marked and h.ProviderCooldown first. The subscription survives Redis restarts (the client
// resubscribes).
func (s *Store) Notify(h Handlers) {
	s.on = h
	s.handlers.Store(&h)
	s.resync()
	ctx, cancel := context.WithCancel(context.Background())
	ps := s.c.PSubscribe(ctx, s.opts.KeyPrefix+"{*}:ev")
	started := s.background(func() {
		defer cancel()
		defer ps.Close()
		ch := ps.Channel()
		for {
			select {
			case <-s.stop:
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				s.dispatch(m.Channel, m.Payload)
			}
		}
	})
	if !started { // closed meanwhile
		ps.Close()
		cancel()
	}
}

// dispatch hands one notification to the ledger.
func (s *Store) dispatch(channel, payload string) {
	i, j := strings.Index(channel, "{"), strings.LastIndex(channel, "}")
	if i < 0 || j < i {
		return
	}
	switch channel[i+1 : j] {
	case "marks":
		s.dispatchMark(payload)
		return
	case "cooldowns":
		s.dispatchCooldown(payload)
		return
	case "routes":
		s.dispatchRoute(payload)
		return
	case "sessions":
		if rest, ok := strings.CutPrefix(payload, "x "); ok && s.on.SessionChanged != nil {
			if from, id, ok := strings.Cut(rest, " "); ok && from != s.instance {
				s.on.SessionChanged(id)
			}
		}
		return
	}
	provider, model, ok := strings.Cut(channel[i+1:j], "/")
	if !ok {
		return
	}
	switch {
	case payload == "r" && s.on.Released != nil:
		s.on.Released(provider, model)
	case strings.HasPrefix(payload, "s ") && s.on.Settled != nil:
		n, ticket, _ := strings.Cut(payload[2:], " ")
		if tokens, err := strconv.ParseInt(n, 10, 64); err == nil {
			s.on.Settled(ticket, tokens)
		}
	case strings.HasPrefix(payload, "l ") && s.on.Learned != nil:
		from, raw, _ := strings.Cut(payload[2:], " ")
		var q gate.LearnedQuota
		if from != s.instance && json.Unmarshal([]byte(raw), &q) == nil {
			s.on.Learned(provider, model, q)
		}
	}
}

// Shared is the shared view of one model, for `gatectl status`.
type Shared struct {
	Provider      string    `json:"provider"`
	Model         string    `json:"model"`
	WindowTokens  int64     `json:"windowTokens"`
	Requests      int64     `json:"requests"`
	CooldownUntil time.Time `json:"cooldownUntil,omitzero"`
}

// View reads the shared window of provider/model.
func (s *Store) View(provider, model string) (Shared, error) {
	v := Shared{Provider: provider, Model: model}
	k := s.base(provider, model)
	err := s.call(func(ctx context.Context) error {
		p := s.c.Pipeline()
		sum, card, cd := p.Get(ctx, k+"s"), p.ZCard(ctx, k+"w"), p.Get(ctx, k+"cd")
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		v.WindowTokens, _ = strconv.ParseInt(sum.Val(), 10, 64)
		v.Requests = card.Val()
		if ms, err := strconv.ParseInt(cd.Val(), 10, 64); err == nil {
			v.CooldownUntil = time.UnixMilli(ms)
		}
		return nil
	})
	return v, err
}

// quietLogger sends the Redis client's own messages (reconnect attempts, which
// repeat while Redis is down) to the debug level: the store logs the
// transitions that matter once each.
type quietLogger struct{ log hclog.Logger }

func (q quietLogger) Printf(_ context.Context, format string, v ...any) {
	q.log.Debug(fmt.Sprintf(format, v...))
}

// Check verifies the connection for `gatectl check`: Redis answers within the
// deadline and accepts the scripts (some managed services forbid Lua). It
// returns the round trip of a PING.
func (s *Store) Check(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	if err := s.Ping(ctx); err != nil {
		return 0, fmt.Errorf("no answer within %s: %w", s.opts.Timeout, err)
	}
	rtt := time.Since(t0)
	for _, sc := range scripts {
		c, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		err := sc.Load(c, s.c).Err()
		cancel()
		if err != nil {
			return rtt, fmt.Errorf("loading the gate's Lua scripts: %w", err)
		}
	}
	return rtt, nil
}

// Addr is the Redis address, without credentials: safe to print.
func (s *Store) Addr() string { return s.addr }
