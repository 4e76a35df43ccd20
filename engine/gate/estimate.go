package gate

import (
	"math"
)

// Estimator constants.
const (
	estimateDefaultBytesPerToken = 4.0     // a first request's heuristic, before anything was settled
	estimateRecentInputs         = 3       // cold start: the mean of the last three actual inputs is the best guess without a size
	estimateRatioSamples         = 16      // settled (bytes, tokens) pairs kept for the ratio
	reserveSamples               = 32      // real outputs kept for the reserve calibration
	reserveMinSamples            = 8       // calibrate only once this many outputs were seen
	maxReservation               = 1 << 40 // far above any model's output, far below int64 overflow
)

// estimator learns, per model, how to size a reservation: the input from the
// request's size (bytes per token, learned from settled usage) and the output
// from how much the model really wrote. Its methods require the bucket's mutex.
// Fixed-size rings: no allocation.
//
// A call without max_tokens reserves the expected output — the mean of recent
// outputs, each weighted by how long its call was in flight, because a call
// still in flight is by that very fact likelier a long one — and adds its
// variance to the pool the bucket's margin covers (see bucket.margin). Before
// reserveMinSamples outputs were seen it reserves the configured reserve.
type estimator struct {
	configuredReserve int

	recentInputs [estimateRecentInputs]int64
	nInputs      int

	ratioBytes  [estimateRatioSamples]int64
	ratioTokens [estimateRatioSamples]int64
	nRatio      int

	driftSum   float64
	driftCount int64

	// Latency-weighted outputs of calls that did not ask max_tokens: a ring of
	// (weight, output) with running sums Σw, Σw·o, Σw·o².
	wWeight   [reserveSamples]float64
	wOutput   [reserveSamples]float64
	nWeighted int
	sumW      float64
	sumWO     float64
	sumWO2    float64
	outMean   float64 // Σw·o ÷ Σw, refreshed on each sample
	outVar    float64 // weighted variance of the output, refreshed likewise
	allMean   float64 // outputs of every settled call (asked or not), exponentially weighted: the readings' expectation
	nAll      int64

	// Input estimates made from the request's size: the mean squared relative
	// error against the real input (exponentially weighted).
	inErrSq float64
	nInErr  int

	model outputModel
}

func newEstimator(configuredReserve int) estimator {
	return estimator{configuredReserve: configuredReserve}
}

// input estimates the input tokens of a request of inputBytes bytes.
func (e *estimator) input(inputBytes int) int64 {
	if inputBytes > 0 {
		if bpt := e.bytesPerToken(); bpt > 0 {
			return int64(math.Ceil(float64(inputBytes) / bpt))
		}
	}
	if e.nInputs > 0 { // cold start: the mean of the last three actuals
		n := min(e.nInputs, estimateRecentInputs)
		var sum int64
		for i := 0; i < n; i++ {
			sum += e.recentInputs[i]
		}
		return sum / int64(n)
	}
	if inputBytes > 0 {
		return int64(math.Ceil(float64(inputBytes) / estimateDefaultBytesPerToken))
	}
	return 0
}

// bytesPerToken is the learned ratio, or 0 before any sized request settled.
func (e *estimator) bytesPerToken() float64 {
	n := min(e.nRatio, estimateRatioSamples)
	var b, t int64
	for i := 0; i < n; i++ {
		b += e.ratioBytes[i]
		t += e.ratioTokens[i]
	}
	if t == 0 {
		return 0
	}
	return float64(b) / float64(t)
}

// outputReserve is the output to reserve: max_tokens when the request asks for it
// (the model may write that much, and providers that count at arrival count it
// whole), else the expected output once enough outputs were seen, else the
// configured reserve.
//
// With aging (the calls' reservations follow their age, see aging.go) a call
// without max_tokens reserves the plain mean output: it starts at age 0.
func (e *estimator) outputReserve(maxTokens int, aging bool) int64 {
	if maxTokens > 0 {
		return min(int64(maxTokens), maxReservation) // a library caller's absurd max_tokens must not wrap the window's sums
	}
	if aging {
		return max(1, int64(math.Ceil(e.model.mean0)))
	}
	if e.nWeighted >= reserveMinSamples {
		return max(1, int64(math.Ceil(e.outMean)))
	}
	return int64(e.configuredReserve)
}

// calibrated says whether a call without max_tokens reserves a learned
// output, not the configured reserve.
func (e *estimator) calibrated() bool { return e.nWeighted >= reserveMinSamples }

// outputVariance is the variance of what a call's output will really be, when
// it reserved the expected output (not max_tokens): a fresh call's under ages,
// else the latency-weighted one.
func (e *estimator) outputVariance(asked, aging bool) float64 {
	switch {
	case asked:
		return 0
	case aging:
		return e.model.variance0
	case e.nWeighted >= reserveMinSamples:
		return e.outVar
	}
	return 0
}

// inputVariance is the variance of an input estimate in made from the
// request's size (0 when the input was given).
func (e *estimator) inputVariance(in int64, inputGuessed bool) float64 {
	if !inputGuessed || e.nInErr == 0 {
		return 0
	}
	return e.inErrSq * float64(in) * float64(in)
}

// observeInput learns how far an input estimate made from the request's size
// was from the real input.
func (e *estimator) observeInput(estimated, real int64) {
	if estimated <= 0 || real <= 0 {
		return
	}
	r := float64(real-estimated) / float64(estimated)
	const a = 1.0 / 16 // about the last sixteen estimates
	if e.nInErr == 0 {
		e.inErrSq = r * r
	} else {
		e.inErrSq += a * (r*r - e.inErrSq)
	}
	e.nInErr++
}

// observeOutput adds one settled call's output, weighted by the time it was in
// flight (seconds, at least a millisecond).
func (e *estimator) observeOutput(output int64, inFlight float64, asked bool) {
	if e.nAll == 0 {
		e.allMean = float64(output)
	} else {
		e.allMean += (float64(output) - e.allMean) / reserveSamples
	}
	e.nAll++
	if asked {
		return
	}
	if inFlight > 0 { // a clock that stepped back says nothing of the pace
		e.model.observe(output, inFlight)
	}
	w := math.Max(inFlight, 0.001)
	o := float64(output)
	i := e.nWeighted % reserveSamples
	if e.nWeighted >= reserveSamples {
		ow, oo := e.wWeight[i], e.wOutput[i]
		e.sumW -= ow
		e.sumWO -= ow * oo
		e.sumWO2 -= ow * oo * oo
	}
	e.wWeight[i], e.wOutput[i] = w, o
	e.sumW += w
	e.sumWO += w * o
	e.sumWO2 += w * o * o
	e.nWeighted++
	if e.nWeighted%reserveSamples == 0 { // refresh the sums: no float drift over time
		e.sumW, e.sumWO, e.sumWO2 = 0, 0, 0
		for j := range e.wWeight {
			e.sumW += e.wWeight[j]
			e.sumWO += e.wWeight[j] * e.wOutput[j]
			e.sumWO2 += e.wWeight[j] * e.wOutput[j] * e.wOutput[j]
		}
	}
	if e.sumW > 0 {
		e.outMean = e.sumWO / e.sumW
		e.outVar = math.Max(0, e.sumWO2/e.sumW-e.outMean*e.outMean)
	}
}

// observe learns from one settled request.
func (e *estimator) observe(inputBytes int, inputTokens, outputTokens, reservedOutput int64, askedMaxTokens bool) {
	if inputTokens > 0 {
		e.recentInputs[e.nInputs%estimateRecentInputs] = inputTokens
		e.nInputs++
		if inputBytes > 0 {
			i := e.nRatio % estimateRatioSamples
			e.ratioBytes[i], e.ratioTokens[i] = int64(inputBytes), inputTokens
			e.nRatio++
		}
	}
	if reservedOutput > 0 {
		e.driftSum += float64(outputTokens-reservedOutput) / float64(reservedOutput)
		e.driftCount++
	}
	if askedMaxTokens {
		return // the request chose its own reserve; it says nothing about the default
	}
}

// meanOutput is what a call in flight is expected to write: the latency-weighted
// mean of recent outputs of calls without max_tokens, else the mean of every
// output seen, or -1 before any was seen.
func (e *estimator) meanOutput() int64 {
	if e.nWeighted > 0 {
		return int64(math.Round(e.outMean))
	}
	if e.nAll == 0 {
		return -1
	}
	return int64(math.Round(e.allMean))
}

// expectedOutput is what a call reserving `reserved` output tokens will likely
// write: the expected output, never more than it reserved; the reserve itself
// before anything was seen.
func (e *estimator) expectedOutput(reserved int64) int64 {
	if m := e.meanOutput(); m >= 0 {
		return min(m, reserved)
	}
	return reserved
}

// drift is the mean relative error of reserved output against real output
// (negative: the reserve was too large).
func (e *estimator) drift() float64 {
	if e.driftCount == 0 {
		return 0
	}
	return e.driftSum / float64(e.driftCount)
}
