//go:build !unix

package main

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}

// signalGroup kills the command; without process groups its children may
// survive it.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}
