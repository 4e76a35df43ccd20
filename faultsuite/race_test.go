//go:build race

package faultsuite

// raceEnabled: the suite runs under the race detector, which slows its own
// clients (not the gatectl process, built without it) several times over.
const raceEnabled = true
