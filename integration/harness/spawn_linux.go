package harness

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Child servers get SIGKILL when the test process dies, even by a panic or
// kill -9, so no stray server outlives a run. Pdeathsig fires when the
// *thread* that forked the child exits, so every child is forked from one
// goroutine locked to a thread that never exits.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for req := range spawnRequests {
			req.done <- req.cmd.Start()
		}
	}()
}

func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}
