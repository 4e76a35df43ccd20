package gate

import (
	"math"
	"slices"
)

// Estimator constants.
const (
	estimateDefaultBytesPerToken = 4.0 // a first request's heuristic, before anything was settled
	estimateRecentInputs         = 3   // seed 001: mean of the last three actual inputs
	estimateRatioSamples         = 16  // settled (bytes, tokens) pairs kept for the ratio
	reserveSamples               = 32  // real outputs kept for the reserve calibration
	reserveMinSamples            = 8   // calibrate only once this many outputs were seen
	reserveQuantile              = 0.95
	reserveHeadroom              = 1.25
	reserveMinTokens             = 256
)

// estimator learns, per model, how to size a reservation: the input from the
// request's size (bytes per token, learned from settled usage) and the output
// reserve from how much the model really wrote (seed 000's "estimate calibration").
// Its methods require the bucket's mutex. Fixed-size rings: no allocation.
type estimator struct {
	configuredReserve int

	recentInputs [estimateRecentInputs]int64
	nInputs      int

	ratioBytes  [estimateRatioSamples]int64
	ratioTokens [estimateRatioSamples]int64
	nRatio      int

	outputs    [reserveSamples]int64
	nOutputs   int
	outputSum  int64 // invariant: the sum of the outputs in the ring
	reserve    int64 // calibrated reserve; configuredReserve until calibrated
	driftSum   float64
	driftCount int64
}

func newEstimator(configuredReserve int) estimator {
	return estimator{configuredReserve: configuredReserve, reserve: int64(configuredReserve)}
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
// (the model may write that much), else the calibrated reserve.
func (e *estimator) outputReserve(maxTokens int) int64 {
	if maxTokens > 0 {
		return int64(maxTokens)
	}
	return e.reserve
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
	i := e.nOutputs % reserveSamples
	e.outputSum += outputTokens - e.outputs[i]
	e.outputs[i] = outputTokens
	e.nOutputs++
	if e.nOutputs%reserveMinSamples == 0 { // recalibrate every few samples: cheap on the settle path
		e.reserve = e.calibratedReserve()
	}
}

// calibratedReserve is a high quantile of recent real outputs with head room,
// between reserveMinTokens and four times the configured reserve.
func (e *estimator) calibratedReserve() int64 {
	n := min(e.nOutputs, reserveSamples)
	var buf [reserveSamples]int64
	copy(buf[:n], e.outputs[:n])
	s := buf[:n]
	slices.Sort(s)
	q := s[int(math.Ceil(reserveQuantile*float64(n)))-1]
	r := int64(math.Ceil(float64(q) * reserveHeadroom))
	return max(int64(reserveMinTokens), min(r, 4*int64(e.configuredReserve)))
}

// meanOutput is the mean of recent real outputs, or -1 before any was seen.
func (e *estimator) meanOutput() int64 {
	n := min(e.nOutputs, reserveSamples)
	if n == 0 {
		return -1
	}
	return e.outputSum / int64(n)
}

// expectedOutput is what a call reserving `reserved` output tokens will likely
// write: the recent mean, never more than it reserved; the reserve itself before
// anything was seen.
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
