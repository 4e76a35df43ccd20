package gate

import (
	"math"
	"time"
)

// Another client on the key, read from the rate-limit headers.
//
// A provider that states its remaining tokens says what it counted: the limit
// less the remainder. The gate knows what it sent itself. What the provider
// counted past that is what others spend on the same key (and the spread of
// the calls in flight, whose outputs the gate only expects). A 429 below the
// stated limit sets a trigger there — what the other client left to the gate —
// and an answer restating the same limit keeps it (adoptStatedLocked). When the
// other client stops, nothing else lifts it: the gate holds at the trigger, so
// no window passes above it to relax toward, and the re-probe comes
// triggerReprobeWindows windows later (three hours at a 60 s window).
//
// So each answer is a reading of the others' spend, and at the end of each
// window the gate weighs the window's readings. A trigger rises only if the
// others were read to spend at least half of what it holds back from the
// stated limit when its 429 came (else the 429 was the gate's own excess), and
// it holds back at least outsideMinRoom of the limit. It rises when two windows
// in a row since that 429 read the others' spend under half of it, even at
// its highest, and varied as little as a sliding window's readings do (fixed
// windows restart their count at each edge, and their readings then say
// nothing plain of anyone's spend): to the stated limit less the highest
// reading of those windows. The windows of readings start over at each token
// 429; when the 429 that set the trigger also switched the view, the readings
// before it were in the wrong one, and the first whole window after it says
// what the others spend. Calls above the level that held go one at a time
// for a window, as after any raise. A 429 within two windows of a rise refutes
// it: the trigger is read there again as any 429's, and no rise is tried for
// triggerReprobeWindows windows. Without headers nothing reads the others'
// spend, and the re-probe is what finds the key free again.

// outsideSpend is the current and last window's readings of what the provider
// counted past the gate's own calls.
type outsideSpend struct {
	at                  time.Time // start of the current window of readings
	n                   int       // readings in it
	sum, sumSq, max     float64
	prevN               int
	prevMean, prevSD    float64
	prevMax             float64
	quiet               int     // windows in a row whose readings allow a rise
	quietMax            float64 // their highest reading
	at429               float64 // the others' spend read when a token 429 last moved the trigger
	before429           float64 // the others' spend read until the last token 429
	at429Pending        bool    // at429 is the next window's mean (outsideTriggerSetLocked)
	liftedAt, refutedAt time.Time
	others              othersSpend    // the same readings, tracked answer by answer for the room they leave
	moments             statedMoments  // the readings as the answers came and as their calls were sent: which moment to read
	refill              *refillReserve // a bucket's reserve since it was last full (refillspend.go); nil until headers state one
}

const (
	// outsideMinReadings: a window weighs in only with this many readings.
	outsideMinReadings = 20
	// outsideMaxSpread: how much the readings of a window may vary (a standard
	// deviation, as a share of the stated limit) for them to describe the
	// others' spend. In the simulator a sliding window's counted on arrival
	// vary by 0.7–3%, fixed windows' by 25–40%. Without it the matrix with
	// headers took 46 429s more at fixed windows (168 → 214).
	outsideMaxSpread = 0.035
	// outsideRoomShare: the window's highest reading must stay under this share
	// of what the trigger holds back from the stated limit.
	outsideRoomShare = 0.5
	// outsideMinRoom: a trigger this close to the stated limit is not lifted.
	// Noise at the limit sets one a few percent below it (stepDown); the
	// readings' own spread is as large.
	outsideMinRoom = 0.05
	// outsideQuietWindows: windows in a row that must allow a rise. Fixed
	// windows' readings vary by a third of the limit as a rule, but a window
	// of readings between two of their edges now and then varies little.
	outsideQuietWindows = 2
)

// observeOutsideLocked reads one answer's remaining tokens (the stated
// per-minute limit and remainder) as the others' spend: into the moving mean
// that sets the room they leave, and into the window's readings, at whose end
// it lifts a trigger that spend no longer explains.
func (b *bucket) observeOutsideLocked(now, sent time.Time, limitTokens, remainingTokens int64) {
	if !b.learn.enabled || b.l.shared != nil || b.learn.stated <= 0 {
		return // not learning, or the window is shared: its reading is everyone's
	}
	span := b.l.conf().Window
	b.expireLocked(now) // what left the provider's window is not the gate's spend now
	o := &b.outside
	if o.at.IsZero() || now.Before(o.at) {
		o.at = now
	}
	if now.Sub(o.at) >= span {
		o.roll(now)
		b.liftForOutsideLocked(now)
	}
	counted := float64(scaleLimit(limitTokens-remainingTokens, span))
	if limitTokens == remainingTokens {
		counted = 0
	}
	tail := b.win.tail()
	if b.atCompletion {
		tail = b.done.tail()
	}
	if b.fixedWindowsLocked() {
		tail = 0 // the fixed view's entries before the edge (the guard's) are the provider's too
	}
	// The window as the answered call was sent (decides.go), for the reading
	// at that moment. Not at fixed windows: their count restarts at each edge,
	// and no reading is taken at a send there (readAtSendLocked); one taken
	// before the gate took fixed windows is of a sliding window.
	var atSend sendReading
	found := false
	if !b.fixedWindowsLocked() {
		atSend, found = b.sendReadingLocked(sent)
	}
	r := b.othersAtStatedMomentLocked(counted-(b.providerViewLocked()-float64(tail)), counted, atSend, found)
	o.n++
	o.sum, o.sumSq = o.sum+r, o.sumSq+r*r
	switch x, ok := b.refillReadingLocked(now, sent, atSend, found, counted, b.learn.stated); {
	case !b.refillRead:
		o.others.add(now, r, span, b.learn.stated)
	case ok:
		o.others.add(now, x, refillStale*span, b.learn.stated) // a bucket's reserve: refillspend.go
	case counted <= (1-refillFull)*b.learn.stated:
		b.refillQuietLocked(now)
	default:
		b.refillHoldLocked(now)
	}
	if o.n == 1 || r > o.max {
		o.max = r
	}
}

// forgetReadingsLocked drops the learner's readings (see learner.forgetReadings)
// and the others' spend read with them: taken in another view or other units.
// A refused rise stays refused: the provider said so, in any units.
func (b *bucket) forgetReadingsLocked() {
	b.learn.forgetReadings()
	b.servedReqArrival, b.servedReqDone = servedLevel{}, servedLevel{} // the request levels served go with them
	// A rise refused stays refused, and a reserve followed stays: it is read
	// in no view.
	// The moment the provider states at is the provider's, in any view:
	// which one stays, its readings in the old view go.
	b.outside = outsideSpend{refutedAt: b.outside.refutedAt, refill: b.outside.refill, moments: statedMoments{useSent: b.outside.moments.useSent}}
}

// roll closes the current window of readings.
func (o *outsideSpend) roll(now time.Time) {
	o.prevN, o.prevMax, o.prevMean, o.prevSD = o.n, o.max, 0, 0
	if o.n > 0 {
		o.prevMean = o.sum / float64(o.n)
		o.prevSD = math.Sqrt(max(0, o.sumSq/float64(o.n)-o.prevMean*o.prevMean))
	}
	o.at, o.n, o.sum, o.sumSq, o.max = now, 0, 0, 0, 0
}

// liftForOutsideLocked, at the end of a window of readings, raises a trigger
// the others' spend set below the stated limit once two such windows in a row
// say they no longer spend what it holds back.
func (b *bucket) liftForOutsideLocked(now time.Time) {
	o := &b.outside
	l := &b.learn
	span := b.l.conf().Window
	stated := l.stated // the key's limit: what the readings are against
	room := stated - l.trigger
	if o.at429Pending && o.prevN >= outsideMinReadings {
		o.at429, o.at429Pending = o.prevMean, false
	}
	switch {
	case l.trigger <= 0 || room < outsideMinRoom*stated || o.prevN < outsideMinReadings || b.refillRead:
		// (A bucket's window readings say nothing of the others: its room
		// follows their spend read from the reserve, refillspend.go.)
		o.quiet = 0
		return
	case !o.refutedAt.IsZero() && now.Sub(o.refutedAt) < triggerReprobeWindows*span:
		o.quiet = 0
		return
	case o.at429 < outsideRoomShare*room:
		o.quiet = 0
		return // the last 429 came without the others spending what the trigger holds back: it was the gate's own
	case o.prevSD > outsideMaxSpread*stated || o.prevMax > outsideRoomShare*room:
		o.quiet = 0
		return
	}
	if o.quiet++; o.quiet == 1 {
		o.quietMax = o.prevMax
	}
	o.quietMax = max(o.quietMax, o.prevMax)
	if o.quiet < outsideQuietWindows {
		return
	}
	to := stated - max(0, o.quietMax)
	if c := l.ceiling(); c > 0 {
		to = min(to, c) // never above the user's cap
	}
	if to <= l.trigger*(1+baseMargin) {
		return
	}
	from, held := l.trigger, b.tokenBudget(now)
	l.trigger = to
	l.quota = math.Max(l.quota, to)
	l.preProbe = 0
	// A step of the learner's own, as a relax is: the first trigger's probe
	// step is not taken on top of it, the re-probe counts from it, and a 429
	// within a window of it is read as any 429 (not as a reserve drained).
	l.firstProbe, l.lastRelax = firstProbeDone, now
	// Not a step by little, whatever its size: a rise of its own.
	l.lastRaise, l.raisedByRelax, l.raisedLittle = now, false, false
	o.liftedAt, o.quiet = now, 0
	b.raisedLocked(now, held) // the calls above the level that held go one at a time
	b.emitLearn(now, learnStep{Kind: "outside", From: from, To: to, Trigger: to})
}

// outside429Locked is called at a token 429 before the learner reads it: it
// marks a rise the 429 refutes (one within two windows of it), keeps what the
// others were read to spend until then (outsideTriggerSetLocked takes it if
// the 429 moves the trigger), and starts the windows of readings over: quiet
// windows count from the 429, and none mixes readings from both sides of a
// switch of view the 429 may make.
func (b *bucket) outside429Locked(now time.Time) {
	o := &b.outside
	if !o.liftedAt.IsZero() && now.Sub(o.liftedAt) < 2*b.l.conf().Window {
		o.refutedAt, o.liftedAt = now, time.Time{}
	}
	if o.n >= outsideMinReadings || o.prevN >= outsideMinReadings {
		// What the others were read to spend when the 429 came: the moving
		// mean, which follows a client that began spending within the window;
		// the window's mean, while the moving mean holds too little.
		o.before429 = o.recentMean()
		if o.others.weight >= othersMinWeight {
			o.before429 = o.others.mean
		}
	} // else (a 429 soon after the last) what was read before that one stands
	o.roll(now)
	o.prevN, o.prevMean, o.prevSD, o.prevMax, o.quiet = 0, 0, 0, 0, 0
}

// outsideTriggerSetLocked is called after a token 429 moved the trigger: what
// the others were read to spend then says whose the trigger is — theirs to
// give back only if they spent it. When the 429 also switched the view, the
// readings before it were taken in the wrong one: the first window of
// readings after it says instead.
func (b *bucket) outsideTriggerSetLocked(viewSwitched bool) {
	o := &b.outside
	switch {
	case viewSwitched:
		o.at429, o.at429Pending = 0, true
	case o.at429Pending:
		// A later 429 of the burst: the first window after the switch still says.
	default:
		o.at429 = o.before429
	}
}

// recentMean is the current window's mean reading, or the last window's while
// the current one has few.
func (o *outsideSpend) recentMean() float64 {
	if o.n >= outsideMinReadings || (o.n > 0 && o.prevN == 0) {
		return o.sum / float64(o.n)
	}
	return o.prevMean
}

// The room the others leave. A trigger another client's spend set comes at
// the price of a 429, and when that client started with the gate — its share
// of the window still filling — the trigger is read too high and the next
// 429 follows at the cooldown's end: each idles the model for its Retry-After.
// The readings say it sooner. While they read others spending plainly (more
// than twice their own spread, and a hundredth of the limit), the token
// budget keeps under the stated limit less that spend, so the gate's level
// plus what the provider counted past it stays under the limit before any
// 429. Nothing is learned from it: the learner's trigger and quota go on as
// before; the room only caps the budget, and it rises by itself as the
// readings fall when the others stop (their calls leave the provider's
// window).
//
// One reading's error is the outputs in flight, which the gate only expects —
// the error the budget's margin is for already, and one long answer keeps it
// up for as long as it runs. So the spend is a moving mean with a time
// constant of a sixth of the window (ten seconds at a minute), long enough
// for the calls in flight to change: one that followed each reading closely
// (moving a fifth of the way to it) took part of that error for the others'
// spend.

// othersSpend is a moving mean of the readings of the others' spend: each
// moves it by step = 1 − exp(−(time since the last) ÷ τ), at least
// othersMinStep, so a burst of answers weighs little more than its time.
// Their spread moves alike, by step × the reading's squared distance from the
// mean before it: a reading after a pause (step near 1) is most of
// the mean, and its jump is most of the spread, so it reads plainly only
// once more readings agree with it. weight is how many readings the mean
// holds, decayed alike: one reading alone (the first, or the first after a
// pause) says nothing plainly. Once plain, the spend stays so until the mean
// falls under othersMinShare of the limit (or a window passes without an
// answer): the room follows the mean down instead of letting go at once
// when one reading's jump widens the spread — over real sockets, a room
// that came and went took a second 429 while the other client still spent.
type othersSpend struct {
	mean, variance, weight float64
	on                     bool      // the spend reads plainly
	at                     time.Time // the last reading (or answer that held it: refillHoldLocked)
}

const (
	// othersSpan: the mean's time constant τ is the window ÷ othersSpan. In
	// the simulator's matrix with headers (seeds 1–12, the mean of six nudged
	// settings, the room's first form), 7, 10 and 15 s at a minute's window
	// met every target in 304, 310 and 310 runs of 576, with 889, 897 and 930
	// 429s; without the room, 282 and 1,062.
	othersSpan = 6
	// othersPlain: the mean must exceed this many of the readings' standard
	// deviations, and othersMinShare of the stated limit. Without another
	// client the readings are noise about zero; a sliding view's readings of
	// fixed windows swing with the count that restarts at each edge.
	othersPlain    = 2
	othersMinShare = 0.01
	// othersMinStep: the least a reading moves the mean. At a busy gate the
	// mean is then over about the last fifty answers when they come faster
	// than fifty a τ. Over real sockets (30 sessions, a 10 s window, τ
	// 1.7 s), without it the answers that came in bursts weighed as little as
	// their milliseconds, the mean lagged what the other client spent, and a
	// second 429 idled a window: 0.64–0.72 of what it left once learned,
	// against 0.97 with it (in the simulator's matrix with headers about
	// even: 300 runs against 295 as set).
	othersMinStep = 0.02
	// othersMinWeight: the readings' weight the mean must hold before it
	// reads plainly, so one reading alone says nothing. In the simulator's
	// matrix with headers (seeds 1–12 as set, before the spend stayed plain
	// once read so), 1, 2 and 4 met every target in 315, 306 and 307 runs:
	// about even.
	othersMinWeight = 2
	// othersSwing: the room keeps this many of the readings' standard
	// deviations under the stated limit less the mean. The other client's
	// count in the window swings about its mean — over real sockets it spent
	// its tenth in calls of a quarter of it each — and a gate held at the
	// mean's room met such a swing about one run in four: a late 429 that
	// idled a window (0.69 of what it left, once learned). With half a
	// deviation, 20 runs of 20 took only the first 429 and read 0.93–0.96. In
	// the simulator's matrix with headers (seeds 1–12 as set) 0, ½, 1 and 2
	// met every target in 318, 318, 280 and 216 runs, with 880, 813, 788 and
	// 746 429s: the spread also holds the error of the gate's own calls in
	// flight, which the budget's margin is for already.
	othersSwing = 0.5
)

// add weighs in one reading r at now, of the others' spend against stated.
func (s *othersSpend) add(now time.Time, r float64, span time.Duration, stated float64) {
	if now.Sub(s.at) >= span {
		s.on = false // a window without an answer: nobody knows what they spend now
	}
	step := 1.0
	if s.weight > 0 {
		step = max(othersMinStep, 1-math.Exp(-float64(max(now.Sub(s.at), 0))/float64(span/othersSpan)))
	}
	d := r - s.mean
	s.mean += step * d
	s.variance = (1-step)*s.variance + step*d*d
	s.weight = (1-step)*s.weight + 1
	s.at = maxTime(s.at, now)
	switch {
	case s.mean <= othersMinShare*stated:
		s.on = false
	case !s.on:
		s.on = s.weight >= othersMinWeight && s.mean > othersPlain*math.Sqrt(s.variance)
	}
}

// othersSpendingLocked reports whether the readings of the others' spend
// count here (a stated limit, learning on, no shared window), the last came
// within a window (older, nobody knows what they spend now), and their mean
// says others spend a hundredth of the limit or more — plainly or not yet: a
// 429 then is not read as a drained reserve (bucket.go). Over real sockets, a
// 429 soon after a switch of view had started the readings over was read as
// the rate of the gate's own spend (0.60 of the limit), while the mean already
// said the other client spent a tenth.
func (b *bucket) othersSpendingLocked(now time.Time) bool {
	s, stated := &b.outside.others, b.learn.stated
	stale := b.l.conf().Window
	if b.refillRead {
		stale *= refillStale // a reserve is read only while drained: refillspend.go
	}
	if stated <= 0 || b.l.shared != nil || !b.learn.enabled || s.weight == 0 || now.Sub(s.at) >= stale {
		return false
	}
	return s.mean > othersMinShare*stated
}

// othersRoomLocked is the room the others leave the gate — the stated limit
// less their spend and othersSwing of its spread — and whether the readings
// say it plainly.
func (b *bucket) othersRoomLocked(now time.Time) (float64, bool) {
	s := &b.outside.others
	if !b.othersSpendingLocked(now) || !s.on {
		return 0, false
	}
	return max(b.learn.stated-s.mean-othersSwing*math.Sqrt(s.variance), 0), true
}

// The moment the provider states at.
//
// A provider states what it counted as of one moment: as it answers, or as
// the call arrived (OpenAI reserves a call's tokens as it creates the response
// and states its limits reflecting that). Read against the gate's view at the
// other moment, the
// others' spend takes in whatever the gate sent, or saw complete, in between
// — in a cohort most of the window — and swings with it: against the view
// as each answer came, a provider counting at completion and stating at
// arrival read another client's tenth at 0.00 ± 0.11 of the budget over real
// sockets, and at its send at 0.12 ± 0.04. Swinging so, the spend never read
// plainly, no room held the gate under what the other client left, and
// cooldowns' ends took 429s (two to four in 60 s, the trigger cut at each). So
// each answer is read at both moments, and the moment whose readings vary
// less is the one the provider states at: the other one's readings carry the
// gate's own traffic between the two. The answers' own moment until both
// have enough readings (and for an answer whose send was not named, or whose
// reading is gone); the other once its readings vary refillSwitch times less.
// The moment chosen is the provider's: it stays when the readings go with a
// switch of view, and the readings start over in the new one.

// statedMoments is the others' spend read at both moments (refillspend.go
// follows a bucket's reserve at both, alike).
type statedMoments struct {
	now, sent movingSpread
	useSent   bool
}

// statedMomentReadings: readings each moment needs before they are compared.
const statedMomentReadings = 30

// othersAtStatedMomentLocked is the others' spend one answer reads: r, read
// against the view now, or what counted reads against the view as its call
// was sent (s, when found), when that is the moment the provider states at.
func (b *bucket) othersAtStatedMomentLocked(r, counted float64, s sendReading, found bool) float64 {
	if !found {
		return r
	}
	view := s.arrival
	if b.atCompletion {
		view = s.done
	}
	atSend := counted - view
	m := &b.outside.moments
	m.now.add(r, refillVarSpan)
	m.sent.add(atSend, refillVarSpan)
	if m.now.readings >= statedMomentReadings { // (the two take their readings together)
		switch vNow, vSent := m.now.varianceRead(refillVarSpan), m.sent.varianceRead(refillVarSpan); {
		case m.useSent && vSent > refillSwitch*vNow:
			m.useSent = false
		case !m.useSent && vNow > refillSwitch*vSent:
			m.useSent = true
		}
	}
	if m.useSent {
		return atSend
	}
	return r
}
