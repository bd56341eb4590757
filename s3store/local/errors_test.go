package local

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/s3queue/s3queue/s3store"
)

// A permission refused is s3store.ErrAccessDenied; on a write or a listing
// it is also s3store.ErrUnusable (the store is closed to this user), but a
// read of one object may fail alone: one file closed to us must not stop
// a process, as with a foreign S3 object. (TestUnusableRoot covers the
// store's own directory, as a user other than root.)
func TestPermissionErrors(t *testing.T) {
	s := &Store{root: t.TempDir()}
	s.seen.Store(true)
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EPERM, syscall.EROFS} {
		denied := &fs.PathError{Op: "open", Path: s.root + "/a.obj", Err: errno}
		for op, unusable := range map[string]bool{"get": false, "head": false, "list": true, "put": true, "delete": true} {
			err := s.opError(op, "a", denied)
			if !errors.Is(err, s3store.ErrAccessDenied) || errors.Is(err, s3store.ErrUnusable) != unusable {
				t.Errorf("%s failing with %v: %v, want access denied (unusable: %v)", op, errno, err, unusable)
			}
		}
	}
}
