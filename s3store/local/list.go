package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/s3queue/s3queue/s3store"
)

// List implements s3store.List: one page of the keys that start with
// prefix, after opts.StartAfter, in byte order. MaxKeys 0 (or less) means
// s3store.DefaultMaxKeys.
//
// Only the directory the prefix names and the subtrees that can hold keys
// after StartAfter are read, and the walk stops once the page is full, so a
// page costs about its own size plus the sort of the directories it passes
// through.
func (s *Store) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return s3store.ListPage{}, err
	}
	defer s.publishNow()
	l := &lister{startAfter: opts.StartAfter, limit: opts.MaxKeys}
	if l.limit <= 0 {
		l.limit = s3store.DefaultMaxKeys
	}
	dir, partial := splitKey(prefix)
	if !validDir(dir) {
		return s3store.ListPage{}, nil // no key can start with prefix
	}
	c, err := s.openDirs(dirNames(dir), false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.missing = true
	case err != nil:
		return s3store.ListPage{}, s.opError("list", prefix, err)
	default:
		err = l.visit(c.leaf(), dir, partial)
		c.close()
		if err != nil {
			return s3store.ListPage{}, s.opError("list", prefix, err)
		}
	}
	if l.missing {
		// A directory the walk needed was missing: fine, unless it is the
		// store's own.
		if problem := s.rootProblem(false); problem != nil {
			return s3store.ListPage{}, s.opError("list", prefix, problem)
		}
	}
	return l.page, nil
}

type lister struct {
	startAfter string
	limit      int
	page       s3store.ListPage
	done       bool
	missing    bool // a directory was missing
}

// entry is one directory entry, named by the smallest string its keys can
// start with: the key itself for an object, "<key>/" for a directory.
type entry struct {
	name  string // on disk
	key   string
	isDir bool
}

// visit lists the keys in dir, all of which start with base, whose next
// segment starts with partial.
//
// Directory order is not key order ("a-c" sorts before "a/b", but a.dir
// before a-c.obj), so each directory's entries are sorted by key. The keys
// under a directory entry "<x>/" form one contiguous run in key order, since
// no other entry's key starts with "<x>/"; a depth-first walk in that order
// therefore yields keys in order.
func (l *lister) visit(dir dirFD, base, partial string) error {
	des, err := dir.readDir()
	if err != nil {
		return err
	}
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		seg, isDir, ok := decodeName(de)
		if !ok || !strings.HasPrefix(seg, partial) || (seg == "" && base == "") {
			continue
		}
		e := entry{name: de.Name(), key: base + seg, isDir: isDir}
		if isDir {
			e.key += "/"
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		if l.done {
			return nil
		}
		if e.isDir {
			// Every key below starts with e.key: when StartAfter sorts
			// after e.key without starting with it, so do all of them.
			if e.key < l.startAfter && !strings.HasPrefix(l.startAfter, e.key) {
				continue
			}
			sub, err := dir.openDir(e.name)
			if errors.Is(err, fs.ErrNotExist) {
				l.missing = true
				continue // pruned by a concurrent delete
			}
			if err != nil {
				return err
			}
			err = l.visit(sub, e.key, "")
			sub.close()
			if err != nil {
				return err
			}
			continue
		}
		if e.key <= l.startAfter {
			continue
		}
		h, size, err := listInfo(dir, e.name)
		if errors.Is(err, errNoObject) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return fmt.Errorf("read %q: %w", e.key, err)
		}
		if len(l.page.Objects) == l.limit {
			l.page.Truncated, l.done = true, true
			return nil
		}
		l.page.Objects = append(l.page.Objects, s3store.ObjectInfo{Key: e.key, ETag: h.etag, Size: size, LastModified: h.modified})
	}
	return nil
}

// listInfo is readInfo for a listing, which one object file must never
// stop: a file that cannot even be opened (its permissions) is listed with
// what its directory entry says, and a Get of it reports why it cannot be
// read.
func listInfo(dir dirFD, name string) (header, int64, error) {
	h, size, err := readInfo(dir, name)
	switch {
	case errors.Is(err, errSymlink):
		// Replaced by a link since the directory was read: a link is
		// no object, and a listing skips links.
		return header{}, 0, errNoObject
	case err == nil, errors.Is(err, errNoObject):
		return h, size, err
	}
	size, modified, serr := dir.stat(name)
	if errors.Is(serr, fs.ErrNotExist) {
		return header{}, 0, errNoObject
	}
	if serr != nil {
		return header{}, 0, err
	}
	return rawHeader(size, modified), size, nil
}
