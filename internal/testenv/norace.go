//go:build !race

package testenv

// RaceEnabled reports whether the tests were built with the race detector.
const RaceEnabled = false
