//go:build !race

package faultsuite

const raceEnabled = false
