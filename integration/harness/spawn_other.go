//go:build !linux

package harness

import "os/exec"

func startChild(cmd *exec.Cmd) error { return cmd.Start() }
