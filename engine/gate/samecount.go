package gate

import (
	"math"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// A request limit read as tokens, told by its count.
//
// An unnamed 429 is read by shares (axisLocked): its window was refused for
// its requests when the count was near the request budget, or far nearer it
// than the token budget. Between the two a workload bound by requests is read
// as tokens: configured at twice the truth, calls of ~540 tokens against a
// limit of 200 requests and 200,000 tokens meet the limit at half the request
// budget and 0.28 of the token one. Each such 429 set a token trigger at the
// tokens of 200 calls, the next one a little lower (the calls' sizes vary),
// and a 429 that refuted both views was taken for a drained reserve and cut
// the trigger to a third below: 0.51–0.84 of the requests for the hour in the
// simulator at twice the truth, against 0.90–0.97 when the 429s name their
// limit (docs/benchmarks.md, "An unnamed 429 at the same count").
//
// Two 429s tell the axes apart where one cannot. A request limit refuses at
// its count, whatever the calls' sizes: the count holds and the tokens move
// with the sizes. A token limit refuses at its tokens, at a count that moves
// with the sizes. So a 429 read as tokens whose count is within
// sameCountShare of the last one read so — each the first of its burst (as
// the token learner counts bursts), within sameCountWindows of the run's
// first, at requestShareAlone of the request budget or more and under
// suspectRatio of it (there the shares decide), and at least lowCallsAlone
// calls; the run's first well under the token budget, no window of the last
// two serving a higher count, no stated limit — while the token reading moved
// by sameCountTokensMoved or more, is about requests. What the token learner
// took from the run is taken back (rereadAsRequestsLocked), and the two counts
// set the request ceiling as two RPM 429s do (rpmLimitedLocked). Not with a shared window (the count is this instance's,
// the limit everyone's).
//
// In the token-bound matrix no such pair comes: a window of 30–75 calls there
// holds at most a quarter of the request budget. Nor in a workload of calls
// small enough to fill 0.4 of the request budget at the token limit: a
// configured budget near the truth has its first 429 near the token budget,
// and a window of smaller calls serves a higher count.

// sameCountTokensMoved: the token reading must move by at least this share
// between the two 429s. A workload of calls of one size meets a request limit
// and a token limit at the same count and the same tokens; read as tokens,
// such a trigger already sits at the request limit's tokens.
const sameCountTokensMoved = 0.02

// sameCountShare: two counts within this share of each other are the same
// count. A request limit's counts move by a few requests: another client's
// calls on the key take some, and the first burst of a start above the limit
// counts calls that reached the provider after the refused one. Within 1%,
// 4 of the 48 runs bound by requests of seeds 1–2 were read again; within 3%,
// 9 (and none of 96 bound by tokens).
const sameCountShare = 0.03

// sameCountWindows: how far apart the two 429s may come. A token trigger set
// at the request limit's tokens holds the requests near it, so the next 429
// can be long in coming: over real sockets (2 s windows, calls of ~1,000
// tokens, one in ten asking max_tokens 4096) they came 18 and 35 windows
// apart. Within refusedAgainWindows (10), as the request ceiling's pair, no
// run there was read again. The guards above, not the distance, keep a token
// limit out: in the simulator 60 windows read the same runs as 10.
const sameCountWindows = 60

// tokenReadCount is the last unnamed 429 read as tokens (the first of its
// burst), and the token learner as it was before the first of a run of them.
type tokenReadCount struct {
	firstAt time.Time // the run's first; zero: none
	count   int       // the last one's: the requests it met (requestsMetLocked) …
	reading float64   // … and its token reading
	// The run's first came well under the token budget (suspectRatio of it):
	// the token axis was nowhere near refusing it.
	underBudget bool
	before      learner // the token learner before the run's first
	// The lone bucket's rate bound before the run's first (rate.go): the run's
	// 429s bounded it as tokens, and read again they were not about tokens.
	rateCap rateBound
	// The view before the run's first, and the rate read that held it: a rate
	// the run read moved the view (rateViewLocked), which goes back with it.
	atCompletion bool
	rateViewAt   time.Time
}

// sameCountLocked says whether an unnamed 429 at count requests and a token
// reading of reading, which the shares read as tokens, is the request limit's:
// see above.
func (b *bucket) sameCountLocked(now time.Time, count int, reading float64) bool {
	r := &b.tokenRead
	span := b.l.conf().Window
	if r.firstAt.IsZero() || !r.underBudget || now.Sub(r.firstAt) >= sameCountWindows*span || b.learn.inBurst(now, span) {
		return false
	}
	if b.l.shared != nil || !b.learn.enabled || b.statedRequests > 0 || b.statedTokens > 0 || count < lowCallsAlone {
		return false // (a count under lowCallsAlone sets no ceiling: rpmLimitedLocked)
	}
	if float64(abs(count-r.count)) > sameCountShare*float64(r.count) {
		return false // a count that moved: tokens
	}
	if served := b.servedRequestsLocked().max(now, span); float64(served) > (1+sameCountShare)*float64(count) {
		return false // a window passed at a higher count: not the limit
	}
	share := float64(min(count, r.count)+1) / float64(b.rpm)
	return share >= requestShareAlone && share < suspectRatio && r.reading > 0 &&
		math.Abs(reading-r.reading) >= sameCountTokensMoved*r.reading
}

// noteTokenReadLocked records an unnamed 429 read as tokens (the first of its
// burst) for sameCountLocked; the learner is kept as it was before the run's
// first.
func (b *bucket) noteTokenReadLocked(now time.Time, count int, reading float64) {
	span := b.l.conf().Window
	if b.learn.inBurst(now, span) {
		return // a burst's later 429s read a window its refusals changed
	}
	if b.tokenRead.firstAt.IsZero() || now.Sub(b.tokenRead.firstAt) >= sameCountWindows*span {
		b.tokenRead = tokenReadCount{firstAt: now, before: b.learn, rateCap: b.rateCap, atCompletion: b.atCompletion, rateViewAt: b.rateViewAt}
		b.tokenRead.underBudget = reading < suspectRatio*float64(b.tokenBudget(now))
	}
	b.tokenRead.count, b.tokenRead.reading = count, reading
}

// rereadAsRequestsLocked takes back what the token learner learned from the
// run of 429s read as tokens — the learner as it was before the first — and
// hands the run to the request axis as the burst before this one: this 429
// sets the request ceiling from the two counts.
func (b *bucket) rereadAsRequestsLocked(now time.Time) {
	r := b.tokenRead
	from := b.learn.budget()
	b.learn = r.before // its figures are the present ones: what moves them ends the run
	b.rateCap = r.rateCap
	if !b.rateViewAt.Equal(r.rateViewAt) {
		b.atCompletion, b.rateViewAt = r.atCompletion, r.rateViewAt // the run's rate moved the view
	}
	// The pair is the evidence, however far apart it came: the run's last is
	// the burst refused before, now, and rpmLimitedLocked sets the ceiling
	// from the two counts as from two RPM 429s — the count when they are
	// within a hundredth, else rpmStepDown below the lower. At the later count
	// alone, a provider that counts at completion took cohorts of 429s at the
	// ceiling's edge (15–17 in the hour, against 3–4, in the runs started at
	// twice the truth with another client on the key).
	b.rpmRefused, b.rpmRefusedAt, b.rpmRefusedTokens = r.count, now, r.reading
	b.forgetTokenReadLocked()
	e := b.newEvent(EventLearn, now, "", engine.AxisRequests.String(), 0, 0)
	e.Step, e.From, e.To = "reread-requests", from, b.learn.budget()
	b.l.emit(e)
}

// forgetTokenReadLocked drops the run of 429s read as tokens: the token
// learner no longer follows from its snapshot (a reload, a restore, a stated
// token limit dropped, a 429 that named its limit) or it was read again. A switch of the count view does not
// end the run: its 429s (refused below what was served, since the limit was
// the requests') are what switch it. Started at twice the truth against a
// provider that counts at completion, the second such 429 switched the view,
// and a run ended there, or its counts dropped, was never read again (0.52
// and 0.54 of the requests for the hour, against 0.92 and 0.98). The two
// views' counts differ by the calls in flight, a few hundredths of a
// minute's window of calls answered in a second or two: within
// sameCountShare.
func (b *bucket) forgetTokenReadLocked() { b.tokenRead = tokenReadCount{} }
