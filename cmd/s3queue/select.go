package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// filter selects tasks for list and the bulk commands. It is applied in
// three steps, cheapest first, so that a task it leaves out costs no GET:
// the key (its id gives the creation time), the size of the listed object
// (which tells the status, see task.StatusBySize), and only then the task
// read in full (its exact status, and its type).
type filter struct {
	statuses  []task.Status // nil: all
	types     []string      // nil: all
	olderThan time.Duration // created at least this long ago (0: no bound)
	newerThan time.Duration // created less than this long ago (0: no bound)
	newest    bool          // newest first (default: oldest first)
	after     string        // continue after this id, in the sort order
}

// filterFlags defines the filter's flags on fs. statusHelp describes
// --status, olderHelp --older-than; --newer-than is defined only when
// newer. The returned function parses them, for command cmd, into a filter
// whose statuses default to defaults and must be among allowed.
func filterFlags(fs *flag.FlagSet, statusHelp, olderHelp string, newer bool) func(cmd string, defaults, allowed []task.Status) (filter, error) {
	status := fs.String("status", "", statusHelp)
	typ := fs.String("type", "", "only tasks of these `types` (comma-separated); needs a GET of each task that the other filters keep")
	older := fs.Duration("older-than", 0, olderHelp)
	var newerThan time.Duration
	if newer {
		fs.DurationVar(&newerThan, "newer-than", 0, "only tasks created less than this `duration` ago (by the id's time; S3 time)")
	}
	return func(cmd string, defaults, allowed []task.Status) (filter, error) {
		f := filter{statuses: defaults, olderThan: *older, newerThan: newerThan}
		if *status != "" {
			f.statuses = nil
			for s := range strings.SplitSeq(*status, ",") {
				st, err := task.ParseStatus(strings.TrimSpace(s))
				if err != nil || !slices.Contains(allowed, st) {
					return f, usageError("%s: --status %q: want %s (several comma-separated)", cmd, *status, statusList(allowed))
				}
				if !slices.Contains(f.statuses, st) {
					f.statuses = append(f.statuses, st)
				}
			}
		}
		if *typ != "" {
			for t := range strings.SplitSeq(*typ, ",") {
				t = strings.TrimSpace(t)
				if err := task.ValidType(t); err != nil {
					return f, usageError("%s: --type %q: %v", cmd, t, err)
				}
				f.types = append(f.types, t)
			}
		}
		if f.olderThan < 0 || f.newerThan < 0 {
			return f, usageError("%s: --older-than and --newer-than must not be negative", cmd)
		}
		if f.olderThan > 0 && f.newerThan > 0 && f.olderThan >= f.newerThan {
			return f, usageError("%s: --older-than %v and --newer-than %v select nothing", cmd, f.olderThan, f.newerThan)
		}
		return f, nil
	}
}

func statusList(ss []task.Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// sizeAllows reports whether an object of size holds a task of one of
// statuses, by the size hint (task.StatusBySize). A task read in full is
// checked again (matches), so an object the hint misjudges (one written
// before the hint told every status) is never acted on wrongly, at worst
// left out of the selection.
func sizeAllows(size int64, statuses []task.Status) bool {
	if statuses == nil {
		return true
	}
	s, ok := task.StatusBySize(size)
	return !ok || slices.Contains(statuses, s)
}

// candidate is a listed object that the key and size filters kept.
type candidate struct {
	key, id string
	size    int64
	modTime time.Time
}

// selection counts what a selector did, for its callers' reports.
type selection struct {
	listed     int // task objects listed
	candidates int // of them, kept by key and size
	read       int // GETs
	skipped    int // objects that are not readable tasks
}

// selector runs a filter over a store.
type selector struct {
	st     s3store.Store
	f      filter
	onSkip func(key string, err error)
	// keep, if set, is a further test of a listed object, before any GET
	// (purge: how long ago it was written), and match one of a task read.
	keep  func(o s3store.ObjectInfo, now time.Time) bool
	match func(t *task.Task, now time.Time) bool
	// now is the S3 time the ages are measured against.
	now time.Time

	sel selection
}

// candidates lists tasks/ and returns the keys the filter's key and size
// tests keep, in its sort order: one LIST per 1000 objects, no GET.
func (s *selector) candidates(ctx context.Context) ([]candidate, error) {
	var out []candidate
	after := ""
	for {
		page, err := s.st.List(ctx, "tasks/", s3store.ListOptions{StartAfter: after})
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		for _, o := range page.Objects {
			if shards.IsPointer(o.Key) {
				if _, err := shards.ParsePointerKey(o.Key); err == nil {
					continue
				}
			}
			_, id, err := task.ParseKey(o.Key)
			if err != nil {
				s.sel.skipped++
				s.onSkip(o.Key, fmt.Errorf("not a task object key: %w", err))
				continue
			}
			s.sel.listed++
			if !s.keepKey(id) || !sizeAllows(o.Size, s.f.statuses) || s.keep != nil && !s.keep(o, s.now) {
				continue
			}
			out = append(out, candidate{key: o.Key, id: id, size: o.Size, modTime: o.LastModified})
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	// Ids sort by their time; ties (one millisecond) by their random part.
	slices.SortFunc(out, func(a, b candidate) int {
		if s.f.newest {
			return strings.Compare(b.id, a.id)
		}
		return strings.Compare(a.id, b.id)
	})
	s.sel.candidates = len(out)
	return out, nil
}

// keepKey applies the filter's age bounds and cursor to a task id.
func (s *selector) keepKey(id string) bool {
	if s.f.after != "" && (!s.f.newest && id <= s.f.after || s.f.newest && id >= s.f.after) {
		return false
	}
	if s.f.olderThan == 0 && s.f.newerThan == 0 {
		return true
	}
	created, err := task.IDTime(id)
	if err != nil {
		return false
	}
	age := s.now.Sub(created)
	return (s.f.olderThan == 0 || age >= s.f.olderThan) && (s.f.newerThan == 0 || age < s.f.newerThan)
}

// matches applies the tests that need the task read in full.
func (s *selector) matches(t *task.Task) bool {
	return (s.f.statuses == nil || slices.Contains(s.f.statuses, t.Status)) &&
		(s.f.types == nil || slices.Contains(s.f.types, t.Type)) &&
		(s.match == nil || s.match(t, s.now))
}

// loadParallel bounds the GETs in flight while reading candidates.
const loadParallel = 16

// each reads the candidates in order, loadParallel at a time, and calls fn
// with each task that matches, until fn returns false. With want > 0 it
// reads no more at a time than the tasks still wanted, so that a listing
// whose filters the size decides reads only the tasks it prints. A task deleted
// since the LIST is passed over; an object that is not a readable task is
// reported and skipped.
func (s *selector) each(ctx context.Context, cs []candidate, want int, fn func(candidate, taskio.Versioned) bool) error {
	matched := 0
	for len(cs) > 0 {
		n := min(len(cs), loadParallel)
		if want > 0 {
			n = min(n, want-matched)
		}
		vs, errs := make([]taskio.Versioned, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { vs[i], errs[i] = taskio.Load(ctx, s.st, cs[i].key) })
		}
		wg.Wait()
		s.sel.read += n
		for i := range n {
			switch err := errs[i]; {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, s3store.ErrNotFound):
			case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
				s.sel.skipped++
				s.onSkip(cs[i].key, err)
			case err != nil:
				return fmt.Errorf("read %s: %w", cs[i].key, err)
			case s.matches(vs[i].Task):
				matched++
				if !fn(cs[i], vs[i]) {
					return nil
				}
			}
		}
		cs = cs[n:]
	}
	return nil
}
