//go:build race

package sim

// raceEnabled: the race detector slows the simulator some forty times; tests
// that pin the figures of the whole matrix skip under it (TestMatrix still runs
// the matrix's concurrency, on shorter runs).
const raceEnabled = true
