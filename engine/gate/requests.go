package gate

import (
	"math"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The request axis: the request limit the budget derives from, which limit a
// 429 was about, and what a request 429 teaches — the trigger, the ceiling,
// the probe steps above the configured RPM. Its state is the bucket's fields
// under "The request axis" (bucket.go).

// rpmLimitLocked is the request limit the budget derives from: the stated RPM,
// else the learned one, else the configured RPM — never above the user's cap.
func (b *bucket) rpmLimitLocked() int {
	limit := b.rpmLearned
	if b.statedRequests > 0 || b.rpmLearned == 0 {
		limit = b.limits.RPM
	}
	if c := b.limits.MaxRPM; c > 0 {
		limit = min(limit, c) // the user's cap: the budget keeps its margin below it, as below a stated limit
	}
	return limit
}

// setRPMLocked derives the request budget from the request limit and the RPM
// trigger.
//
// A limit the provider stated, the one configured, or a level a probe step set
// is a figure: the derived margin (baseMargin) is kept of it in whole requests
// only — a provider counts requests exactly, one per call, and 1% rounded down
// took a whole request from every such limit under a hundred (2 of a stated 3,
// and a first step from 10 to 11 that moved nothing). A level read at a 429 (a
// trigger, a ceiling, the level a refused step sets) keeps the 1% rounded
// down: it is the count of a moment the provider refused, and the gate does
// not sit exactly there — the refused step's level taken as a figure took
// 344 429s over the 96 runs bound by requests, against 308. The user's cap,
// when it binds, is a figure. A safety factor the user set is a share of
// either, rounded down.
func (b *bucket) setRPMLocked() {
	rpm := b.rpmLimitLocked()
	// The user's cap, when it binds, is a figure (kept in whole requests), not
	// a level read at a 429.
	capBinds := b.limits.MaxRPM > 0 && b.rpmLearned > b.limits.MaxRPM
	read := b.statedRequests == 0 && b.rpmLearned > 0 && b.rpmLearnedRead && !capBinds
	if b.rpmTrigger > 0 && b.rpmTrigger < rpm {
		rpm, read = b.rpmTrigger, true
	}
	switch {
	case read || b.limits.SafetyFactor > 0:
		b.rpm = max(1, int(float64(rpm)*b.factor()))
	default:
		b.rpm = max(1, rpm-int(float64(rpm)*baseMargin))
	}
}

// requestsMetLocked is the request count the refused call met at the provider:
// the window's, in the view the gate counts in, as of admitted (the time the
// call's entry counts from; zero: unknown, now).
func (b *bucket) requestsMetLocked(now, admitted time.Time) int {
	return b.requestsMetIn(now, admitted, b.atCompletion)
}

// requestsMetIn is requestsMetLocked in the completion view or the arrival view.
func (b *bucket) requestsMetIn(now, admitted time.Time, atCompletion bool) int {
	count := b.requestCountIn(atCompletion)
	switch {
	case atCompletion:
	case !admitted.IsZero() && admitted.Before(now):
		// The calls admitted after it, before its 429 came back a round trip
		// later, were not in the window the provider refused it at: a cohort
		// released at once took 429s at counts 22 and 23 of a limit of 20. Nor
		// were the calls admitted before it and not sent by then (those after
		// it are among the first).
		count -= b.win.requestsAfter(admitted.UnixNano()) + b.unsentSinceLocked(admitted.UnixNano())
	default:
		count -= b.unsentCount
	}
	return max(count, 0) // (in fixed windows a call admitted before the edge met the last window's count)
}

// unsentSinceLocked is how many calls admitted at or before at (unix nanos)
// are still not sent. It scans the tickets: only a request 429 asks.
func (b *bucket) unsentSinceLocked(at int64) int {
	if b.unsentCount == 0 {
		return 0
	}
	n := 0
	for i := range b.slots {
		if s := &b.slots[i]; s.open && s.sendPending && s.admitted <= at {
			n++
		}
	}
	return n
}

// axisLocked decides which limit a 429 was about. The caller's word wins; when
// it had none, a window whose tokens were well under the token budget was
// refused for its requests when its count was near the request budget
// (suspectRatio of it: another client on the key takes the rest), near the
// count an RPM 429 was refused at within refusedAgainWindows (a trigger relaxing
// back toward a configured RPM above the truth), or — while a request probe
// step is tried — near the budget that held before it (a step refused just
// above that level, a token bucket's reserve running out below a count it
// served). Read as tokens, such 429s set a token trigger at a seventh of the
// token limit. A window nearly empty (a cooldown drained it) is none of these:
// its 429 goes to the token learner, which cools down on it. Two more rules,
// each the other's guard: a window far nearer the request budget than a token
// figure someone gave (requestShareAlone) is about requests, and one refused
// at a fallen count with as many tokens (countFellLocked) is about tokens.
func (b *bucket) axisLocked(now time.Time, said engine.Axis, reading float64) engine.Axis {
	if said != engine.AxisUnknown {
		return said
	}
	n := b.providerRequestsLocked()
	if b.countFellLocked(now, n, reading) {
		return engine.AxisTokens
	}
	atRequests := float64(n+1) >= suspectRatio*float64(b.rpm) || b.nearRefusedCountLocked(now, n) ||
		b.requestStepTriedLocked(now) && float64(n+1) >= suspectRatio*float64(b.rpmStepHeld)
	budget := float64(b.tokenBudget(now))
	if atRequests && reading < suspectRatio*budget {
		return engine.AxisRequests
	}
	tokenFigure := b.statedTokens > 0 || b.l.conf().tpmGiven(b.provider+"/"+b.model) // not the placeholder
	if share := float64(n+1) / float64(b.rpm); tokenFigure && b.l.shared == nil && share >= requestShareAlone && reading < budget*share/requestShareLead {
		return engine.AxisRequests
	}
	return engine.AxisTokens
}

// An unnamed 429 whose window holds requestShareAlone of the request budget or
// more, and a requestShareLead times smaller share of the token budget, is
// about requests — when the token figure is one someone gave (configured, or
// stated by the provider), not the default, and not with a shared window (the
// count is this instance's, the token reading everyone's). Configured at twice the truth on
// both axes, a workload bound by requests meets its first 429 at half the
// request budget and a sixteenth of the token one; read as tokens, it set a
// token trigger that a call's reservation and the margin then bit into
// (0.54–0.74 of the requests for the hour, 0.87–0.97 now). Under the default
// tpm, a placeholder ten or more times most keys' limit, a token 429 has just
// such shares: read as requests there, a workload bound by tokens fell from
// 0.81–0.89 of the limit to 0.56–0.69.
const (
	requestShareAlone = 0.4
	requestShareLead  = 4
)

// rpmLimitedLocked learns from an RPM 429: the window's request count caps the
// request budget. Within one window the highest count of the burst stands.
//
// A 429 that answers a probe step (within a window of it) sets the learned
// limit at once: to the count less the refused call, between the level that
// held before the step and the step. The calls above the level that held went
// one at a time, so on a sliding window the count is the limit's; without
// this, the limit stood at the level before the last step — a slow start from
// half the limit stopped at 0.80 of it.
//
// The trigger relaxes (relaxRPMLocked), so that a 429 far below the limit —
// another client's calls on the key — heals. But a trigger relaxed up to the
// limit is refused again, and relaxing again after each 429 took one every
// one to two windows for as long as the configured RPM stood above the truth
// (44 an hour at twice it on a sliding window, 90 on fixed windows, 176 on a
// provider that counts at completion). So a second burst within
// refusedAgainWindows of the last, at a count at least suspectRatio of the one
// refused then (not another client's dip), sets the ceiling the trigger
// relaxes to: the count, when it is the count refused before (a sliding window
// refuses at its limit, exactly); when it is not, rpmStepDown below the lower
// of the two. Counted at completion the first 429 that names the request
// limit sets it already (not far below a count served lately): the count of
// completions the provider refused at bounds what the key leaves this
// instance from above. A token bucket refuses where its lent reserve runs out, higher
// after a cooldown refilled it and lower as it drains, and a provider that
// counts at completion at counts the calls in flight blur: a served count
// there is no lower bound of the limit. A 429 never raises the limit; never
// below 1/learnFloorDivisor of the configured RPM, and re-probed like a
// trigger (relaxRPMLocked). Not with a shared window: the count is this
// instance's, the provider's limit everyone's.
func (b *bucket) rpmLimitedLocked(now, admitted time.Time, named bool, unnamedReading float64) {
	if !b.learn.enabled {
		return
	}
	count := b.requestsMetLocked(now, admitted)
	if count < lowCallsAlone && float64(count) < suspectRatio*float64(b.rpm) {
		// A window nearly empty (a cooldown drained it, another client filled
		// the key): not the gate's count. A cooldown only — a trigger of one
		// request would take many windows to relax.
		return
	}
	n := max(1, count)
	span := b.l.conf().Window
	inBurst := !b.rpmBurst.IsZero() && now.Sub(b.rpmBurst) < span
	if inBurst && !b.atCompletion {
		// The calls this burst refused before stay counted on arrival, but the
		// provider never counted them: taken as they are, a burst's later
		// 429s read counts above the limit, its highest became the count
		// refused, and the next burst's count at the limit was "another
		// count" that stepped the ceiling 0.93 below it.
		n = max(1, n-b.rpmBurstRefused)
	}
	// What the provider held: on arrival the count less the refused call,
	// which stays counted once released; the completion view never counted it.
	// (Nor is it added there: a provider that counts at completion can hold
	// more than its limit, the calls it let in completing after its check, so
	// that count bounds the limit from above — docs/RATIONALE.md, "An RPM
	// 429's count is the count at the refused call's admission".)
	held := n
	if !b.atCompletion {
		held = max(1, n-1)
	}
	if inBurst {
		b.rpmBurstRefused++
		if n > b.rpmRefused { // the burst's highest count, with its own tokens
			b.rpmRefused, b.rpmRefusedTokens = n, unnamedReading
		}
	} else {
		learns := b.statedRequests == 0 && b.l.shared == nil
		answered := b.rpmPreStep > 0 && now.Sub(b.rpmStepAt) < span
		again := b.nearRefusedCountLocked(now, n)
		switch {
		case learns && answered:
			b.setRPMLearnedLocked(now, min(b.rpmLimitLocked(), max(b.rpmPreStep, held)), true, "rpm-ceiling")
		case learns && named && b.atCompletion && b.rpmRefusedAt.IsZero() && !b.servedFarAboveLocked(now, held):
			// The axis's first RPM 429, counted at completion: the provider
			// refused because the completions in its window (this instance's,
			// and any other client's) had reached its limit, and the count is
			// this instance's completions as the gate saw them, a window
			// each. So what the key leaves this instance is at most about the
			// count: it is the ceiling at once. Taken as a trigger, it relaxed
			// a request a window, and the step above the count was refused a
			// few windows later: a second 429, and its cooldown, inside the
			// windows after learning. Only when the 429 named the request
			// limit (an unnamed one read as requests may be a token 429, whose
			// trigger must relax), and not far below a count the provider
			// served within two windows (another client's passing burst).
			b.setRPMLearnedLocked(now, min(b.rpmLimitLocked(), held), true, "rpm-ceiling")
		case learns && again:
			ceiling := n
			if abs(n-b.rpmRefused) > max(1, b.rpmRefused/rpmSameCount) {
				// not the count refused before: below the lower of the two
				ceiling = int(rpmStepDown * float64(min(n, b.rpmRefused)))
			}
			b.setRPMLearnedLocked(now, min(ceiling, b.rpmLimitLocked()), true, "rpm-ceiling")
		case learns && b.rpmLearnedRead && b.rpmRefused > 0 && n+1 >= b.rpm:
			// Refused again at a ceiling's budget, long after: a token
			// bucket's reserve, drained at a few requests a window above its
			// rate (a 429 every quarter hour), or a limit that fell.
			b.setRPMLearnedLocked(now, min(int(rpmStepDown*float64(n)), b.rpmLimitLocked()), true, "rpm-ceiling")
		}
		b.rpmPreStep, b.rpmRun = 0, 0
		b.rpmRefused, b.rpmRefusedAt, b.rpmRefusedTokens = n, now, unnamedReading
		b.rpmBurst, b.rpmTrigger, b.rpmBurstRefused = now, n, 1
	}
	if n > b.rpmTrigger {
		b.rpmTrigger = n
	}
	b.lastRPMRelax = now
	b.setRPMLocked()
}

// servedFarAboveLocked says whether the provider served, within the last two
// windows, a request count in the view counted in that held is under
// suspectRatio of: a 429 at held is then another client's passing burst, not
// the limit.
func (b *bucket) servedFarAboveLocked(now time.Time, held int) bool {
	return float64(held) < suspectRatio*float64(b.servedRequestsLocked().max(now, b.l.conf().Window))
}

// countFellLocked says whether an unnamed 429 at n requests and a token
// reading of reading is about tokens, though the last unnamed one was read as
// requests:
// refused within refusedAgainWindows at a count countFell or more below that
// one's, while the tokens in the window fell by at most half as much. A request limit refuses at its count,
// whatever the calls' sizes; a token limit at its tokens, at fewer calls when
// they are larger. A token 429 read as requests (its shares looked like
// requests', or its count was near one refused before) would otherwise set
// each later one's count as the request ceiling, lower and lower; read as
// tokens, it sets the token trigger, and the request trigger the first one
// set relaxes as any (5% a window while it binds; an unnamed 429 never sets
// the ceiling at once). Not within a window of the
// first (its burst's later 429s read a window its refusals changed), nor with
// a shared window (the count is this instance's, the tokens everyone's).
func (b *bucket) countFellLocked(now time.Time, n int, reading float64) bool {
	span := b.l.conf().Window
	if b.rpmRefused <= 0 || b.rpmRefusedTokens <= 0 || b.l.shared != nil ||
		now.Sub(b.rpmRefusedAt) < span || now.Sub(b.rpmRefusedAt) >= refusedAgainWindows*span {
		return false // not within the burst itself: its later 429s read a window its refusals changed
	}
	countDrop := 1 - float64(n)/float64(b.rpmRefused)
	tokenDrop := 1 - reading/b.rpmRefusedTokens
	return countDrop >= countFell && tokenDrop <= countDrop/2
}

// countFell: a count at least 10% under the one refused before is another
// count; the tokens then fell by at most half as much (a token bucket's
// request reserve running out refuses at a lower count, and fewer calls hold
// proportionally fewer tokens).
const countFell = 0.1

// nearRefusedCountLocked says whether a count of n requests is near the count
// the last RPM 429 burst was refused at — at least suspectRatio of it, not
// another client's dip — within refusedAgainWindows.
func (b *bucket) nearRefusedCountLocked(now time.Time, n int) bool {
	return b.rpmRefused > 0 && now.Sub(b.rpmRefusedAt) < refusedAgainWindows*b.l.conf().Window &&
		float64(n) >= suspectRatio*float64(b.rpmRefused)
}

// setRPMLearnedLocked sets the learned request limit, no lower than
// 1/learnFloorDivisor of the configured RPM — read: a count read at a 429, or
// a level a probe step or a refused step set — and says so with the step's
// name (rpm-ceiling: set by 429s; rpm-probe: a probe step).
func (b *bucket) setRPMLearnedLocked(now time.Time, limit int, read bool, step string) {
	limit = max(limit, b.limits.RPM/learnFloorDivisor, 1)
	if limit == b.limits.RPM {
		limit, read = 0, false // the configured RPM is the limit
	}
	if limit == b.rpmLearned {
		if read != b.rpmLearnedRead {
			b.rpmLearnedRead = read
			b.setRPMLocked()
		}
		return
	}
	from := b.rpmLimitLocked()
	b.rpmLearned, b.rpmLearnedRead = limit, read
	b.setRPMLocked() // the event carries the budget it sets
	e := b.newEvent(EventLearn, now, "", "", 0, 0)
	e.Step, e.From, e.To = step, float64(from), float64(b.rpmLimitLocked())
	b.l.emit(e)
}

// The request ceiling (see rpmLimitedLocked): a count within 1/rpmSameCount (at
// least one request) of the one refused before is the ceiling; another sets it
// rpmStepDown below the lower of the two. In an RPM-bound workload of small
// calls whose 429s name the request limit, 0.93 took a token bucket configured
// at twice its rate from 26 429s an hour to 7; stepping down only below a lower
// count left 15 (the second count was the higher one). Same within a twentieth
// at first; once the request limit was probed above the configured RPM, a token
// bucket's lent reserve let the count reach 1.4× its rate, and its counts,
// falling a few requests at each burst, were each taken as the ceiling: a 429
// every two or three minutes for the hour (the workloads bound by requests, 96
// runs: 504 429s, against 324 at a hundredth).
const (
	rpmSameCount = 100
	rpmStepDown  = 0.93
)

// relaxRPMLocked is called when the request budget holds a call back. An RPM
// trigger rises by 5% (at least one request) for each window that happens
// without an RPM 429, until it no longer binds: up to the request limit; the
// calls above the budget that held go one at a time for a window, as a probe
// step's do. Once no trigger binds, the limit itself is probed
// (probeRPMLocked).
func (b *bucket) relaxRPMLocked(now time.Time) {
	span := b.l.conf().Window
	if now.Sub(b.lastRPMRelax) < span {
		return
	}
	switch {
	case b.rpmTrigger > 0:
		b.lastRPMRelax = now
		held := b.rpm
		b.rpmTrigger += max(1, b.rpmTrigger/20)
		if b.rpmTrigger >= b.rpmLimitLocked() {
			b.rpmTrigger = 0
		}
		b.setRPMLocked()
		if b.rpm > held {
			// A step above the level that held, as a probe step is: its calls
			// above it go one at a time for a window. Unspaced, the window's
			// drain let two calls past the count a 429 was refused at in the
			// same millisecond, and both were refused.
			b.rpmRelaxHeld, b.rpmRelaxUntil = held, now.Add(span)
		}
	case b.rpmProbeDueLocked(now, span):
		b.probeRPMLocked(now, span)
	}
}

// rpmProbeDueLocked says whether the request limit may be stepped up now: a
// full window since the last step (or the bucket's birth), and
// triggerReprobeWindows since the last RPM 429 — a limit never refused is
// probed at once. Not above a limit the provider states or the user's cap, not
// while learning is off, and not with a shared window (the counts there are
// everyone's).
func (b *bucket) rpmProbeDueLocked(now time.Time, span time.Duration) bool {
	if !b.learn.enabled || b.statedRequests > 0 || b.l.shared != nil || now.Sub(b.rpmStepAt) < span {
		return false
	}
	if c := b.limits.MaxRPM; c > 0 && b.rpmLimitLocked() >= c {
		return false // at the user's cap
	}
	return b.rpmRefusedAt.IsZero() || now.Sub(b.rpmRefusedAt) >= triggerReprobeWindows*span
}

// probeRPMLocked steps the request limit up, as the token learner probes its
// quota: the configured RPM is where learning starts, not the truth (the
// default, 60, is far below what most keys allow). Before any RPM 429 the
// steps are a slow start — × 1.05, 1.1025, … for consecutive windows, the
// step no larger than × 1.05^learnProbeMaxRun — so half the limit is made up
// in about five windows; after one, × 1.05 a window (at least one request), so
// a raised limit, or a ceiling another client's calls set, is found again in
// a few windows once the wait is over. The calls above the level that held go
// one at a time for a window (aboveHeldRequestsLocked).
func (b *bucket) probeRPMLocked(now time.Time, span time.Duration) {
	if b.rpmRefusedAt.IsZero() && now.Sub(b.rpmStepAt) < 2*span {
		b.rpmRun = min(b.rpmRun+1, learnProbeMaxRun)
	} else {
		b.rpmRun = 1
	}
	from := b.rpmLimitLocked()
	to := max(from+1, int(float64(from)*math.Pow(learnProbeFactor, float64(b.rpmRun))))
	if c := b.limits.MaxRPM; c > 0 {
		to = min(to, c)
	}
	b.rpmPreStep, b.rpmStepAt, b.lastRPMRelax = from, now, now
	b.rpmStepHeld = b.rpm
	b.setRPMLearnedLocked(now, to, false, "rpm-probe")
}

// aboveHeldRequestsLocked reports whether a call now would take the window's
// request count above the request budget that held before the last probe
// step or trigger relaxation, while that step is tried (a window after it).
func (b *bucket) aboveHeldRequestsLocked(now time.Time) bool {
	count := b.requestCountLocked() + 1
	if b.rpmRelaxHeld > 0 && now.Before(b.rpmRelaxUntil) && count > b.rpmRelaxHeld {
		return true
	}
	return b.requestStepTriedLocked(now) && count > b.rpmStepHeld
}

// requestStepTriedLocked says whether a request probe step is being tried: a
// window after it, until a 429 answers it.
func (b *bucket) requestStepTriedLocked(now time.Time) bool {
	return b.rpmStepHeld > 0 && now.Before(b.rpmStepAt.Add(b.l.conf().Window))
}

// forgetRequestLearningLocked drops what the request axis learned: the request
// limit is the configured (or stated) one again, probed from it a window on.
func (b *bucket) forgetRequestLearningLocked(now time.Time) {
	b.rpmTrigger, b.rpmBurst, b.lastRPMRelax = 0, time.Time{}, time.Time{}
	b.rpmLearned, b.rpmLearnedRead, b.rpmRefused, b.rpmRefusedAt = 0, false, 0, time.Time{}
	b.rpmRefusedTokens = 0
	b.rpmStepAt, b.rpmRun, b.rpmPreStep, b.rpmStepHeld = now, 0, 0, 0
	b.rpmRelaxHeld, b.rpmRelaxUntil = 0, time.Time{}
}

func abs[T ~int | ~int64](x T) T {
	if x < 0 {
		return -x
	}
	return x
}
