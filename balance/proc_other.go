//go:build !unix

package balance

import "os/exec"

// ownProcessGroup has no process groups to use here: cancellation kills the
// script's own process (exec's default), and its children may outlive it.
func ownProcessGroup(cmd *exec.Cmd) {}

// killProcessGroup is a no-op where there are no process groups.
func killProcessGroup(cmd *exec.Cmd) error { return nil }
