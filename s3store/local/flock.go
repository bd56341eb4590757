//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package local

import (
	"os"
	"syscall"
)

// flockExclusive blocks until this descriptor holds an exclusive flock.
func flockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return os.NewSyscallError("flock", err)
		}
	}
}
