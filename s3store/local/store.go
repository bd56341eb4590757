package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
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

	root string
	// seen: the directory existed when the store was opened, or has
	// since. From then on its absence means it was removed, which no
	// write may paper over by making a new one.
	seen  atomic.Bool
	locks [lockShards]sync.Mutex
}

var _ s3store.Store = (*Store)(nil)

// Open opens the store in dir. A relative dir is made absolute against the
// working directory now.
//
// Open creates nothing and needs no write access. A directory that does
// not exist yet is an empty store, made (with its missing parents) by the
// first write: a reader pointed at the wrong directory finds nothing and
// leaves nothing behind. Reads take no lock, so a user who may only read
// the directory can read the store.
//
// Directories are made 0700 and files 0600, which the umask may narrow but
// not widen: object files hold tasks' inputs and results. Below dir, the
// store follows no symbolic link: a request that meets one fails with an
// error wrapping s3store.ErrUnusable, and nothing is read, written or
// removed through it.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("local: open: empty directory name")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", dir, err)
	}
	s := &Store{root: root}
	d, err := openRootDir(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		if problem := s.rootProblem(false); problem != nil {
			err = problem
		}
		return nil, fmt.Errorf("local: open %s: %w", root, err)
	}
	defer d.close()
	s.seen.Store(true)
	// A filesystem or platform without flock fails here rather than on
	// the first write.
	if err := d.probeFlock(); err != nil {
		return nil, fmt.Errorf("local: open %s: %w", root, err)
	}
	return s, nil
}

// Dir returns the absolute directory the store keeps its files in.
func (s *Store) Dir() string { return s.root }

// Conditions found by this package, turned into s3store sentinels by opError.
var (
	errNoObject     = errors.New("no such object")
	errETagMismatch = errors.New("etag does not match")
	errObjectExists = errors.New("object exists")
	errSymlink      = errors.New("a symbolic link, which the file store never follows (remove it)")
)

// opError wraps err for op on key. It is the one place where this backend's
// conditions become the store's sentinel errors.
//
// A missing file and a failed system call are checked against the root
// first: with the store's directory removed, replaced by a file or closed to
// us, every request fails (or finds nothing) until an operator acts, which
// is s3store.ErrUnusable, as a missing bucket is on S3, not a missing key
// or a passing failure. So is a symbolic link met below the root, and a
// permission refused to a write or a listing; a read of one object file
// closed to us is s3store.ErrAccessDenied alone, as an S3 object another
// account owns: one foreign file must not stop a process.
func (s *Store) opError(op, key string, err error) error {
	write := op == "put" || op == "delete"
	switch {
	case errors.Is(err, errETagMismatch), errors.Is(err, errObjectExists):
		err = fmt.Errorf("%w (%v)", s3store.ErrPreconditionFailed, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		switch problem := s.rootProblem(write); {
		case problem != nil:
			err = problem
		case errors.Is(err, errNoObject):
			err = s3store.ErrNotFound
		case errors.Is(err, errSymlink):
			err = fmt.Errorf("%w: %w", s3store.ErrUnusable, err)
		case denied(err) && (write || op == "list"):
			err = fmt.Errorf("%w: %w (%w)", s3store.ErrUnusable, s3store.ErrAccessDenied, err)
		case denied(err):
			err = fmt.Errorf("%w (%w)", s3store.ErrAccessDenied, err)
		}
	}
	return fmt.Errorf("local: %s %q: %w", op, key, err)
}

// denied reports whether err is the system refusing this user, or any
// writer (a read-only filesystem).
func denied(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// rootProblem reports why the store's directory cannot serve requests
// (writes when write is set), or nil: one stat (and one access check), on
// failure paths only.
func (s *Store) rootProblem(write bool) error {
	fi, err := os.Stat(s.root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !s.seen.Load() {
			return nil // not made yet: an empty store
		}
		return fmt.Errorf("%w: the store directory %s is gone", s3store.ErrUnusable, s.root)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w: permission denied on the store directory %s (%v)", s3store.ErrUnusable, s3store.ErrAccessDenied, s.root, err)
	case err != nil:
		return nil // not conclusive: let the request's own error speak
	case !fi.IsDir():
		return fmt.Errorf("%w: the store directory %s is not a directory", s3store.ErrUnusable, s.root)
	}
	if err := accessible(s.root, false); err != nil {
		return fmt.Errorf("%w: %w: permission denied on the store directory %s (%v)", s3store.ErrUnusable, s3store.ErrAccessDenied, s.root, err)
	}
	if !write {
		return nil
	}
	if err := accessible(s.root, true); err != nil {
		return fmt.Errorf("%w: %w: permission denied: this user may read the store directory %s but not write it (%v)", s3store.ErrUnusable, s3store.ErrAccessDenied, s.root, err)
	}
	return nil
}

// dirChain is the store's directory and directories below it, each the
// parent of the next, all open.
type dirChain []dirFD

func (c dirChain) root() dirFD { return c[0] }
func (c dirChain) leaf() dirFD { return c[len(c)-1] }

func (c dirChain) close() {
	for _, d := range c {
		d.close()
	}
}

// openDirs opens the store's directory and the directories names below it,
// outermost first; with create it makes those missing, and the store's own
// directory if it never existed. A missing one is fs.ErrNotExist.
func (s *Store) openDirs(names []string, create bool) (dirChain, error) {
	root, err := openRootDir(s.root)
	if errors.Is(err, fs.ErrNotExist) && create && !s.seen.Load() {
		// The first write to a new store makes its directory.
		if err := os.MkdirAll(s.root, 0o700); err != nil {
			return nil, err
		}
		root, err = openRootDir(s.root)
	}
	if err != nil {
		return nil, err
	}
	if !s.seen.Load() {
		s.seen.Store(true)
	}
	c := make(dirChain, 1, len(names)+1)
	c[0] = root
	for _, name := range names {
		d, err := openOrMake(c.leaf(), name, create)
		if err != nil {
			c.close()
			return nil, err
		}
		c = append(c, d)
	}
	return c, nil
}

// openOrMake opens the directory name in d, and with create makes it
// first if it is missing, syncing d so that it survives a crash.
func openOrMake(d dirFD, name string, create bool) (dirFD, error) {
	// A delete of the last key in a directory removes it (prune), possibly
	// between our mkdir and our open: try again then.
	const attempts = 10
	for i := 0; ; i++ {
		sub, err := d.openDir(name)
		if err == nil || !create || !errors.Is(err, fs.ErrNotExist) || i == attempts {
			return sub, err
		}
		switch err := d.mkdir(name); {
		case err == nil:
			if err := d.sync(); err != nil {
				return dirFD{}, err
			}
		case !errors.Is(err, fs.ErrExist):
			return dirFD{}, err
		}
	}
}

// noObject is err, but errNoObject when a directory on the way to an
// object was missing.
func noObject(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errNoObject
	}
	return err
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
	dirs, name := keyPath(key)
	c, err := s.openDirs(dirs, false)
	if err != nil {
		return s3store.Object{}, s.opError("get", key, noObject(err))
	}
	defer c.close()
	h, body, err := readObject(c.leaf(), name)
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
	dirs, name := keyPath(key)
	c, err := s.openDirs(dirs, false)
	if err != nil {
		return s3store.ObjectInfo{}, s.opError("head", key, noObject(err))
	}
	defer c.close()
	h, size, err := readInfo(c.leaf(), name)
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
	dirs, name := keyPath(key)
	// The body is written and synced outside the lock, which then covers
	// only the check, the rename and the directory fsync.
	h := newHeader(body, time.Now())
	c, tmp, err := s.writeTemp(dirs, name, opts, h, body)
	if err != nil {
		return "", err
	}
	defer c.close()
	dir := c.leaf()
	renamed := false
	defer func() {
		if !renamed {
			dir.remove(tmp)
		}
	}()
	unlock, err := s.lock(c.root(), key)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := checkPut(dir, name, opts); err != nil {
		return "", err
	}
	if err := dir.rename(tmp, name); err != nil {
		return "", err
	}
	renamed = true
	if err := dir.sync(); err != nil {
		return "", err
	}
	return h.etag, nil
}

// writeTemp opens the directories of an object, making those missing, and
// writes the object under a temporary name there (see writeTemp). A
// writer that lost a race learns it here, without paying for a write and
// an fsync; the check that counts is repeated under the lock.
func (s *Store) writeTemp(dirs []string, name string, opts s3store.PutOptions, h header, body []byte) (dirChain, string, error) {
	// A delete of the last key in the object's directory removes it
	// (prune) after we open it, and our create fails then: try again.
	const attempts = 10
	for i := 0; ; i++ {
		// An object an IfMatch names has its directories already.
		c, err := s.openDirs(dirs, opts.IfMatch == "")
		if err != nil {
			return nil, "", noObject(err)
		}
		if err := checkPut(c.leaf(), name, opts); err != nil {
			c.close()
			return nil, "", err
		}
		tmp, err := writeTemp(c.leaf(), h, body)
		if err == nil {
			return c, tmp, nil
		}
		c.close()
		if !errors.Is(err, fs.ErrNotExist) || i == attempts {
			return nil, "", err
		}
	}
}

// checkPut reports whether a put with opts may replace the object file name
// in d.
func checkPut(d dirFD, name string, opts s3store.PutOptions) error {
	if opts.IfMatch == "" && !opts.IfNoneMatch {
		return nil
	}
	h, _, err := readInfo(d, name)
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
	dirs, name := keyPath(key)
	c, err := s.openDirs(dirs, false)
	if errors.Is(err, fs.ErrNotExist) {
		// No directory, no object: done, unless the store's own
		// directory is gone.
		return s.rootProblem(true)
	}
	if err != nil {
		return err
	}
	defer c.close()
	removed, err := s.removeLocked(c, name, key, opts)
	if err != nil || !removed {
		return err
	}
	// Prune the directories this removal left empty, so deleted keys do
	// not leave an ever-growing tree behind. rmdir fails on a non-empty
	// directory, which is what stops it.
	for i := len(c) - 1; i > 0; i-- {
		if c[i-1].rmdir(dirs[i-1]) != nil {
			break
		}
	}
	return nil
}

// removeLocked removes the object file under the key's lock, so a
// conditional put cannot check an object that is then deleted under it.
func (s *Store) removeLocked(c dirChain, name, key string, opts s3store.DeleteOptions) (removed bool, err error) {
	unlock, err := s.lock(c.root(), key)
	if err != nil {
		return false, err
	}
	defer unlock()
	dir := c.leaf()
	if opts.IfMatch != "" {
		h, _, err := readInfo(dir, name)
		switch {
		case errors.Is(err, errNoObject):
			return false, nil
		case err != nil:
			return false, err
		case h.etag != opts.IfMatch:
			return false, errETagMismatch
		}
	}
	if err := dir.remove(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	// The directory may be gone already (a delete of its last other
	// object pruned it once this removal had emptied it): its descriptor
	// still syncs it.
	return true, dir.sync()
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
