//go:build unix

package balance

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd as the leader of a new process group and makes the
// context's cancellation kill the whole group.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killProcessGroup(cmd) }
}

// killProcessGroup sends SIGKILL to cmd's process group. A group with no member
// left reports os.ErrProcessDone. Call it only while the group is known to have a
// member (the leader not yet reaped, or descendants holding its pipes): the kernel
// keeps a group id reserved while any member lives, and may reuse it after.
func killProcessGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
