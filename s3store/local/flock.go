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

// accessible reports whether this process may list, read and write in dir.
func accessible(dir string) error {
	return os.NewSyscallError("access", syscall.Access(dir, 0o7))
}
