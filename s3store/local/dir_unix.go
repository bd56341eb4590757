//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// dirFD is an open directory of the store. Every file and directory below
// the root is reached from its parent's descriptor, one name at a time,
// with O_NOFOLLOW: a symbolic link anywhere below the root, whether it
// points out of the store or into it, is refused, never followed. (os.Root
// would keep paths inside the root, but it follows links that stay there,
// and ignores O_NOFOLLOW.)
type dirFD struct {
	fd   int
	path string // for messages
}

// openRootDir opens the store's own directory. Its path is the operator's
// to choose, links included.
func openRootDir(path string) (dirFD, error) {
	fd, err := eintr(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return dirFD{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return dirFD{fd: fd, path: path}, nil
}

func (d dirFD) close() { unix.Close(d.fd) }

// openDir opens the directory name in d.
func (d dirFD) openDir(name string) (dirFD, error) {
	fd, err := eintr(func() (int, error) {
		return unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return dirFD{}, d.error("open", name, err)
	}
	return dirFD{fd: fd, path: filepath.Join(d.path, name)}, nil
}

// openFile opens the file name in d, never through a link.
func (d dirFD) openFile(name string, flag int, perm uint32) (*os.File, error) {
	fd, err := eintr(func() (int, error) {
		return unix.Openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	})
	if err != nil {
		return nil, d.error("open", name, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

// mkdir makes the directory name in d, private to this user (the umask
// may only narrow it further).
func (d dirFD) mkdir(name string) error {
	_, err := eintr(func() (int, error) { return 0, unix.Mkdirat(d.fd, name, 0o700) })
	return d.error("mkdir", name, err)
}

// rename renames from to to, both in d: a link named to is replaced, not
// followed.
func (d dirFD) rename(from, to string) error {
	_, err := eintr(func() (int, error) { return 0, unix.Renameat(d.fd, from, d.fd, to) })
	return d.error("rename", to, err)
}

// remove removes the file name from d; a link is removed, not followed.
func (d dirFD) remove(name string) error {
	_, err := eintr(func() (int, error) { return 0, unix.Unlinkat(d.fd, name, 0) })
	return d.error("remove", name, err)
}

// rmdir removes the empty directory name from d.
func (d dirFD) rmdir(name string) error {
	_, err := eintr(func() (int, error) { return 0, unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR) })
	return d.error("rmdir", name, err)
}

// sync makes d's entries (a rename, a removal, a new directory) durable.
func (d dirFD) sync() error {
	_, err := eintr(func() (int, error) { return 0, unix.Fsync(d.fd) })
	if err != nil {
		return &fs.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// stat reports the size and modification time of name in d, not following
// a link.
func (d dirFD) stat(name string) (size int64, modified time.Time, err error) {
	var st unix.Stat_t
	_, err = eintr(func() (int, error) { return 0, unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err != nil {
		return 0, time.Time{}, d.error("stat", name, err)
	}
	sec, nsec := st.Mtim.Unix()
	return st.Size, time.Unix(sec, nsec), nil
}

// readDir lists d.
func (d dirFD) readDir() ([]fs.DirEntry, error) {
	fd, err := eintr(func() (int, error) { return unix.Dup(d.fd) })
	if err != nil {
		return nil, &fs.PathError{Op: "dup", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	return f.ReadDir(-1)
}

// flock blocks until d's descriptor holds an exclusive flock.
func flockExclusive(f *os.File) error {
	_, err := eintr(func() (int, error) { return 0, unix.Flock(int(f.Fd()), unix.LOCK_EX) })
	return os.NewSyscallError("flock", err)
}

// probeFlock takes and drops a shared flock on d, so a filesystem without
// flock fails when the store is opened rather than at its first write. It
// needs no write access and creates nothing; nothing else locks the root.
func (d dirFD) probeFlock() error {
	_, err := eintr(func() (int, error) { return 0, unix.Flock(d.fd, unix.LOCK_SH|unix.LOCK_NB) })
	if err == nil {
		_, err = eintr(func() (int, error) { return 0, unix.Flock(d.fd, unix.LOCK_UN) })
	}
	return os.NewSyscallError("flock", err)
}

// accessible reports whether this process may list and read dir, and with
// write also create and remove entries in it.
func accessible(dir string, write bool) error {
	mode := uint32(unix.R_OK | unix.X_OK)
	if write {
		mode |= unix.W_OK
	}
	return os.NewSyscallError("access", unix.Access(dir, mode))
}

// error names the path of a failed call on name in d. A call that failed
// on a symbolic link (ELOOP, or what the BSDs answer to O_NOFOLLOW) fails
// with errSymlink instead, whatever the call was.
func (d dirFD) error(op, name string, err error) error {
	if err == nil {
		return nil
	}
	path := filepath.Join(d.path, name)
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EEXIST) && d.isLink(name) {
		return &fs.PathError{Op: op, Path: path, Err: errSymlink}
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

func (d dirFD) isLink(name string) bool {
	var st unix.Stat_t
	_, err := eintr(func() (int, error) { return 0, unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return err == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK
}

// eintr calls f until it fails with something else than EINTR, which a
// raw system call may return when a signal (the runtime's preemption
// among them) arrives; the os package retries the same way.
func eintr[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != unix.EINTR {
			return v, err
		}
	}
}
