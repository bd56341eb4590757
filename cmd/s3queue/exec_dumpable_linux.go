package main

import "syscall"

// hideEnviron makes the worker non-dumpable: its /proc/PID/environ, mem
// and fd then belong to root, and a process of the same user (a handler,
// which reads its parent's as `/proc/$PPID/environ`) can neither read its
// environment, where the S3 credentials are, nor attach to it. The
// commands it starts are dumpable again at exec. It also turns off the
// worker's core dumps, and a debugger needs root to attach.
func hideEnviron() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
