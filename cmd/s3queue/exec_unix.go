//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends SIGTERM (or SIGKILL) to the command's whole process
// group: the shell and everything it started.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	// With Setpgid the group id is the shell's pid.
	syscall.Kill(-cmd.Process.Pid, sig)
}
