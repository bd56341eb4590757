package main

import "syscall"

// setDeathSignal makes the kernel kill the command's shell when the worker
// dies, even by SIGKILL, which no handler sees. It reaches only the shell,
// not what the shell started: a forced exit kills the whole group too
// (commandSet.killAll). Linux sends it when the thread that started the
// shell exits; Go ends a thread only when a goroutine locked to it returns,
// which nothing that starts commands does.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
