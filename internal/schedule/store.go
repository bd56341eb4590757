package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// ErrNotFound: no schedule of that name.
var ErrNotFound = errors.New("no such schedule")

// Read returns schedule name's object, its compiled ticks and its ETag
// (one GET). A missing object is an error wrapping ErrNotFound, a bad one
// one wrapping ErrMalformed.
func Read(ctx context.Context, st s3store.Store, name string) (Schedule, Spec, string, error) {
	obj, err := st.Get(ctx, Key(name))
	if errors.Is(err, s3store.ErrNotFound) {
		return Schedule{}, Spec{}, "", fmt.Errorf("schedule %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Schedule{}, Spec{}, "", fmt.Errorf("read schedule %q: %w", name, err)
	}
	s, spec, err := Decode(obj.Body)
	if err != nil {
		return Schedule{}, Spec{}, obj.ETag, fmt.Errorf("schedule %s: %w", Key(name), err)
	}
	return s, spec, obj.ETag, nil
}

// ChangedKey is the schedules' change marker: every add, change of
// definition, pause, resume and removal writes it after its own write, so
// that a scheduler learns of changes with one GET of it per refresh
// instead of a LIST of schedules/ (a tick's record, which schedulers write
// themselves, does not touch it).
const ChangedKey = "control/schedules.json"

// markChanged writes the change marker after a change made at S3 time now
// by by: one PUT, tried up to three times. A marker that cannot be written
// fails nothing: the change itself stands, and schedulers list schedules/
// once every ListEvery whatever the marker says, so the change is seen
// within that.
func markChanged(ctx context.Context, st s3store.Store, now time.Time, by string) {
	body := fmt.Appendf(nil, "{\"changed_at\":%q,\"by\":%q}\n", now.UTC().Format(time.RFC3339Nano), by)
	for range 3 {
		if _, err := st.Put(ctx, ChangedKey, body, s3store.PutOptions{}); err == nil || ctx.Err() != nil {
			return
		}
	}
}

// Listed is one schedule object found by List.
type Listed struct {
	Name, ETag string
}

// List lists the schedule objects (one LIST per 1000). Keys under Prefix
// that name no schedule are left out.
func List(ctx context.Context, st s3store.Store) ([]Listed, error) {
	var out []Listed
	after := ""
	for {
		page, err := st.List(ctx, Prefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		for _, o := range page.Objects {
			if name := NameFromKey(o.Key); name != "" {
				out = append(out, Listed{Name: name, ETag: o.ETag})
			}
			after = o.Key
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
	}
}

// Change applies change to schedule name's object by compare-and-swap: it
// reads the object, applies change, and writes it with If-Match on the
// ETag read, or with If-None-Match when it was missing (exists false); a
// lost race reads again and applies change again (s3store.CAS.Retry, its
// pauses on the host's clock). change reports whether it changed anything
// (nothing is written when it did not) or an error to return. Every write
// bumps Version. A malformed object is given to change as missing, with
// its ETag, so that an add replaces it. It returns the schedule now in the
// bucket and the ETag written (or read).
func Change(ctx context.Context, st s3store.Store, name string, change func(s *Schedule, exists bool) (bool, error)) (Schedule, string, error) {
	return changeFrom(ctx, st, name, nil, "", change)
}

// changeFrom is Change, whose first round starts from read, a schedule
// just read at etag, instead of reading it again.
func changeFrom(ctx context.Context, st s3store.Store, name string, read *Schedule, readETag string, change func(s *Schedule, exists bool) (bool, error)) (Schedule, string, error) {
	var out Schedule
	var outETag string
	err := s3store.CAS{}.Retry(ctx, func(int) (bool, error) {
		var s Schedule
		var etag string
		var err error
		if read != nil {
			s, etag, read = *read, readETag, nil
		} else {
			s, _, etag, err = Read(ctx, st, name)
		}
		exists := err == nil
		switch {
		case err == nil, errors.Is(err, ErrNotFound):
		case errors.Is(err, ErrMalformed):
			s = Schedule{}
		default:
			out, outETag = Schedule{}, ""
			return false, err
		}
		ok, err := change(&s, exists)
		if err != nil || !ok {
			out, outETag = s, etag
			return false, err
		}
		s.Version++
		opts := s3store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}
		body := s.Encode()
		written, err := st.Put(ctx, Key(name), body, opts)
		if err != nil && !errors.Is(err, s3store.ErrNotFound) {
			// A write whose response was lost (the store's retry then
			// meets it: a 412, or an error after it landed) is ours all
			// the same: the object holds its bytes (every write grows the
			// version). Taken for another's, the retry found the change
			// made and reported nothing written (schedule.Put then wrote
			// no change marker, and schedulers learnt of the schedule at
			// their hourly listing). One GET, on the failure path only.
			if obj, gerr := st.Get(ctx, Key(name)); gerr == nil && bytes.Equal(obj.Body, body) {
				out, outETag = s, obj.ETag
				return false, nil
			}
		}
		switch {
		case err == nil:
			out, outETag = s, written
			return false, nil
		case s3store.LostRace(err), errors.Is(err, s3store.ErrNotFound):
			// Changed (or removed) meanwhile: apply ours to what is there now.
			out, outETag = Schedule{}, ""
			return true, fmt.Errorf("write schedule %q: %w", name, err)
		default:
			out, outETag = Schedule{}, ""
			return false, fmt.Errorf("write schedule %q: %w", name, err)
		}
	})
	return out, outETag, err
}

// Put adds schedule d, or changes its definition, at S3 time now, by
// CAS: a new schedule's first tick is the next one after now; a changed
// one keeps its state (cursor, paused flag). It reports whether it wrote.
func Put(ctx context.Context, st s3store.Store, d Definition, now time.Time, by string) (Schedule, bool, error) {
	if err := d.Validate(); err != nil {
		return Schedule{}, false, err
	}
	wrote := false
	s, _, err := Change(ctx, st, d.Name, func(s *Schedule, exists bool) (bool, error) {
		if exists && s.Definition.Same(d) {
			wrote = false
			return false, nil
		}
		if !exists {
			*s = Schedule{Cursor: now.UTC(), CreatedAt: now.UTC(), Version: s.Version}
		}
		s.Definition = d
		s.UpdatedAt, s.UpdatedBy = now.UTC(), by
		wrote = true
		return true, nil
	})
	if err == nil && wrote {
		markChanged(ctx, st, now, by)
	}
	return s, wrote, err
}

// SetPaused pauses or resumes schedule name at S3 time now. A resume
// moves the cursor to now: the ticks missed while it was paused are not
// submitted.
func SetPaused(ctx context.Context, st s3store.Store, name string, paused bool, now time.Time, by string) (Schedule, error) {
	s, _, err := Change(ctx, st, name, func(s *Schedule, exists bool) (bool, error) {
		if !exists {
			return false, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		if s.Paused == paused {
			return false, nil
		}
		s.Paused = paused
		if !paused && s.Cursor.Before(now) {
			s.Cursor = now.UTC()
		}
		s.UpdatedAt, s.UpdatedBy = now.UTC(), by
		return true, nil
	})
	if err == nil {
		markChanged(ctx, st, now, by)
	}
	return s, err
}

// Remove deletes schedule name's object (at S3 time now, by by): no tick after it is submitted
// (a scheduler's CAS on a missing object fails, and it forgets the
// schedule). Tasks already submitted stay.
func Remove(ctx context.Context, st s3store.Store, name string, now time.Time, by string) error {
	if _, err := st.Head(ctx, Key(name)); errors.Is(err, s3store.ErrNotFound) {
		return fmt.Errorf("schedule %q: %w", name, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("remove schedule %q: %w", name, err)
	}
	if err := st.Delete(ctx, Key(name), s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
		return fmt.Errorf("remove schedule %q: %w", name, err)
	}
	markChanged(ctx, st, now, by)
	return nil
}
