package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Store is an s3store.Store in a directory. Several Stores, in this process
// or in others on this machine, may share one directory. It never returns
// s3store.ErrConflict: writes to a key are serialized by a lock, so a lost
// race shows as s3store.ErrPreconditionFailed.
//
// It implements s3store.DateWatcher: every call publishes this machine's
// time, which is the server time of a local store.
type Store struct {
	s3store.DateFanout

	root  string
	locks [lockShards]shardLock
}

var _ s3store.Store = (*Store)(nil)

// Open opens the store in dir, creating the directory if it is missing.
// A relative dir is made absolute against the working directory now.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("local: open: empty directory name")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("local: open %s: %w", root, err)
	}
	s := &Store{root: root}
	if err := s.initLocks(); err != nil {
		return nil, fmt.Errorf("local: open %s: %w", root, err)
	}
	// Take a lock once, so a filesystem or platform without flock fails
	// here rather than on the first write.
	unlock, err := s.lock("")
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", root, err)
	}
	unlock()
	return s, nil
}

// Dir returns the absolute directory the store keeps its files in.
func (s *Store) Dir() string { return s.root }

// Conditions found by this package, turned into s3store sentinels by opError.
var (
	errNoObject     = errors.New("no such object")
	errETagMismatch = errors.New("etag does not match")
	errObjectExists = errors.New("object exists")
)

// opError wraps err for op on key. It is the one place where this backend's
// conditions become the store's sentinel errors.
//
// A missing file and a failed system call are checked against the root
// first: with the store's directory removed, replaced by a file or closed to
// us, every request fails (or finds nothing) until an operator acts, which
// is s3store.ErrUnusable, as a missing bucket is on S3, not a missing key
// or a passing failure.
func (s *Store) opError(op, key string, err error) error {
	switch {
	case errors.Is(err, errETagMismatch), errors.Is(err, errObjectExists):
		err = fmt.Errorf("%w (%v)", s3store.ErrPreconditionFailed, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		if problem := s.rootProblem(); problem != nil {
			err = problem
		} else if errors.Is(err, errNoObject) {
			err = s3store.ErrNotFound
		}
	}
	return fmt.Errorf("local: %s %q: %w", op, key, err)
}

// rootProblem reports why the store's directory cannot serve requests, or
// nil: one stat (and one access check), on failure paths only.
func (s *Store) rootProblem() error {
	fi, err := os.Stat(s.root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: the store directory %s is gone", s3store.ErrUnusable, s.root)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: permission denied on the store directory %s (%v)", s3store.ErrUnusable, s.root, err)
	case err != nil:
		return nil // not conclusive: let the request's own error speak
	case !fi.IsDir():
		return fmt.Errorf("%w: the store directory %s is not a directory", s3store.ErrUnusable, s.root)
	}
	if err := accessible(s.root); err != nil {
		return fmt.Errorf("%w: permission denied on the store directory %s (%v)", s3store.ErrUnusable, s.root, err)
	}
	return nil
}

// Get implements s3store.Store. A missing key is s3store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (s3store.Object, error) {
	if err := ctx.Err(); err != nil {
		return s3store.Object{}, err
	}
	defer s.publishNow()
	if err := checkKey(key); err != nil {
		return s3store.Object{}, s.opError("get", key, err)
	}
	h, body, err := readObject(s.objectPath(key))
	if err != nil {
		return s3store.Object{}, s.opError("get", key, err)
	}
	return s3store.Object{Key: key, Body: body, ETag: h.etag, LastModified: h.modified}, nil
}

// Head implements s3store.Store. A missing key is s3store.ErrNotFound.
func (s *Store) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return s3store.ObjectInfo{}, err
	}
	defer s.publishNow()
	if err := checkKey(key); err != nil {
		return s3store.ObjectInfo{}, s.opError("head", key, err)
	}
	h, size, err := readInfo(s.objectPath(key))
	if err != nil {
		return s3store.ObjectInfo{}, s.opError("head", key, err)
	}
	return s3store.ObjectInfo{Key: key, ETag: h.etag, Size: size, LastModified: h.modified}, nil
}

// Put implements s3store.Store. With IfMatch it fails with
// s3store.ErrNotFound on a missing key and s3store.ErrPreconditionFailed on
// another ETag; with IfNoneMatch it fails with s3store.ErrPreconditionFailed
// when the key exists. The returned ETag is new on every write.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	defer s.publishNow()
	etag, err := s.put(key, body, opts)
	if err != nil {
		return "", s.opError("put", key, err)
	}
	return etag, nil
}

func (s *Store) put(key string, body []byte, opts s3store.PutOptions) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if opts.IfMatch != "" && opts.IfNoneMatch {
		return "", errors.New("both IfMatch and IfNoneMatch set")
	}
	path := s.objectPath(key)
	// A writer that lost a race learns it here without paying for a write
	// and an fsync; the check that counts is repeated under the lock.
	if err := checkPut(path, opts); err != nil {
		return "", err
	}
	// The body is written and synced outside the lock, which then covers
	// only the check, the rename and the directory fsync.
	h := newHeader(body, time.Now())
	tmp, err := s.writeTemp(filepath.Dir(path), h, body)
	if err != nil {
		return "", err
	}
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp)
		}
	}()
	unlock, err := s.lock(key)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := checkPut(path, opts); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	renamed = true
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	return h.etag, nil
}

// checkPut reports whether a put with opts may replace the object at path.
func checkPut(path string, opts s3store.PutOptions) error {
	if opts.IfMatch == "" && !opts.IfNoneMatch {
		return nil
	}
	h, _, err := readInfo(path)
	switch {
	case errors.Is(err, errNoObject):
		if opts.IfMatch != "" {
			return errNoObject
		}
		return nil
	case err != nil:
		return err
	case opts.IfNoneMatch:
		return errObjectExists
	case h.etag != opts.IfMatch:
		return errETagMismatch
	}
	return nil
}

// Delete implements s3store.Store. Deleting a missing key succeeds, with or
// without IfMatch; IfMatch on an object with another ETag fails with
// s3store.ErrPreconditionFailed, as on AWS.
func (s *Store) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer s.publishNow()
	if err := s.remove(key, opts); err != nil {
		return s.opError("delete", key, err)
	}
	return nil
}

func (s *Store) remove(key string, opts s3store.DeleteOptions) error {
	if err := checkKey(key); err != nil {
		return err
	}
	path := s.objectPath(key)
	removed, err := s.removeLocked(key, path, opts)
	if err != nil || !removed {
		return err
	}
	s.pruneDirs(filepath.Dir(path))
	return nil
}

// removeLocked removes the object file under the key's lock, so a
// conditional put cannot check an object that is then deleted under it.
func (s *Store) removeLocked(key, path string, opts s3store.DeleteOptions) (removed bool, err error) {
	unlock, err := s.lock(key)
	if err != nil {
		return false, err
	}
	defer unlock()
	if opts.IfMatch != "" {
		h, _, err := readInfo(path)
		switch {
		case errors.Is(err, errNoObject):
			return false, nil
		case err != nil:
			return false, err
		case h.etag != opts.IfMatch:
			return false, errETagMismatch
		}
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, err
	}
	// The directory is gone: a delete of its last other object pruned it
	// once this removal had emptied it, and its removal is as durable.
	return true, nil
}

// Now implements s3store.Store: a local store's server clock is this
// machine's.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return s.publishNow(), nil
}

// publishNow reports the current time as the Date of a response, as every
// S3 response carries one, and returns it. Date carries no monotonic
// reading, like a parsed header.
func (s *Store) publishNow() time.Time {
	now := time.Now()
	s.Publish(s3store.DateSample{Date: now.UTC(), Sent: now, Received: now})
	return now
}
