//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package local

import (
	"errors"
	"fmt"
	"os"
)

// flockExclusive fails: this platform has no flock, so Open refuses it.
func flockExclusive(*os.File) error {
	return fmt.Errorf("flock: %w", errors.ErrUnsupported)
}

// accessible: without flock the store never opens.
func accessible(string) error { return nil }
