//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// This platform has no flock (nor the *at system calls the store walks its
// tree with), so Open refuses it and nothing below is ever called.

var errNoFlock = fmt.Errorf("flock: %w", errors.ErrUnsupported)

type dirFD struct{ path string }

func openRootDir(string) (dirFD, error)                        { return dirFD{}, errNoFlock }
func (d dirFD) close()                                         {}
func (d dirFD) openDir(string) (dirFD, error)                  { return dirFD{}, errNoFlock }
func (d dirFD) openFile(string, int, uint32) (*os.File, error) { return nil, errNoFlock }
func (d dirFD) mkdir(string) error                             { return errNoFlock }
func (d dirFD) rename(string, string) error                    { return errNoFlock }
func (d dirFD) remove(string) error                            { return errNoFlock }
func (d dirFD) rmdir(string) error                             { return errNoFlock }
func (d dirFD) sync() error                                    { return errNoFlock }
func (d dirFD) stat(string) (int64, time.Time, error)          { return 0, time.Time{}, errNoFlock }
func (d dirFD) readDir() ([]fs.DirEntry, error)                { return nil, errNoFlock }
func (d dirFD) probeFlock() error                              { return errNoFlock }
func flockExclusive(*os.File) error                            { return errNoFlock }
func accessible(string, bool) error                            { return nil }
