// Package pause owns the queue's pause object, control/pause.json: which
// task types (or the whole queue) workers must not claim. Operators write it
// (Change, by compare-and-swap, so two pause or resume commands at once
// never lose each other's change); workers and the monitor read it at a
// bounded interval (Watch). It does not decide what a worker does with a
// paused task: that is the worker's (docs/pause.md).
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
)

// Key is the pause object's key under the queue's prefix.
const Key = "control/pause.json"

// DefaultInterval is how often a worker reads the pause object by default
// (worker.pause_check_interval), and how long the monitor trusts its read.
const DefaultInterval = 10 * time.Second

// State is the pause object's content. A missing object is the zero State:
// nothing paused.
type State struct {
	// Version grows by one at every write, so that every write changes the
	// bytes (invariant 2: a CAS on an ETag must see every change).
	Version int64 `json:"version"`
	// All pauses the whole queue: no task of any type is claimed.
	All bool `json:"all"`
	// Types are the paused task types, sorted.
	Types []string `json:"types"`
	// UpdatedAt and UpdatedBy say when (the writer's S3 time) and who
	// (user@host, or what the caller gave) last changed it; Reason is the
	// last change's reason, if one was given.
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// Paused reports whether tasks of type typ must not be claimed.
func (s State) Paused(typ string) bool {
	return s.All || slices.Contains(s.Types, typ)
}

// Any reports whether anything is paused.
func (s State) Any() bool { return s.All || len(s.Types) > 0 }

// ErrMalformed: the pause object exists and cannot be decoded.
var ErrMalformed = errors.New("malformed pause object")

// Read returns the pause object and its ETag; a missing object is the zero
// State and ETag "". One GET.
func Read(ctx context.Context, st s3store.Store) (State, string, error) {
	obj, err := st.Get(ctx, Key)
	if errors.Is(err, s3store.ErrNotFound) {
		return State{}, "", nil
	}
	if err != nil {
		return State{}, "", fmt.Errorf("read the pause object: %w", err)
	}
	s, err := Decode(obj.Body)
	return s, obj.ETag, err
}

// Decode parses a pause object's body.
func Decode(body []byte) (State, error) {
	var s State
	if err := json.Unmarshal(body, &s); err != nil {
		return State{}, fmt.Errorf("%w %s: %v", ErrMalformed, Key, err)
	}
	slices.Sort(s.Types)
	s.Types = slices.Compact(s.Types)
	return s, nil
}

// Pausing returns a change that pauses types, or the whole queue with none.
func Pausing(types ...string) func(*State) bool {
	return func(s *State) bool {
		if len(types) == 0 {
			if s.All {
				return false
			}
			s.All = true
			return true
		}
		changed := false
		for _, t := range types {
			if !slices.Contains(s.Types, t) {
				s.Types = append(s.Types, t)
				changed = true
			}
		}
		slices.Sort(s.Types)
		return changed
	}
}

// Resuming returns a change that resumes types, or everything with none:
// the whole-queue pause and every paused type. Resuming a type while the
// whole queue is paused takes it off the list; it runs once the queue is
// resumed.
func Resuming(types ...string) func(*State) bool {
	return func(s *State) bool {
		if len(types) == 0 {
			if !s.Any() {
				return false
			}
			s.All, s.Types = false, nil
			return true
		}
		n := len(s.Types)
		s.Types = slices.DeleteFunc(s.Types, func(t string) bool { return slices.Contains(types, t) })
		return len(s.Types) != n
	}
}

// maxAttempts bounds Change's read-modify-write rounds under contention.
const maxAttempts = 20

// Change applies change to the pause object by compare-and-swap: it reads
// the object, applies change, and writes it with If-Match on the ETag read
// (If-None-Match when it was missing); a lost race re-reads and applies
// change again. change reports whether it changed anything: nothing is
// written when it did not, so a retry after a write whose response was lost
// (the retry's 412, then a re-read that already holds the change) succeeds
// without writing twice. A malformed object is replaced. It returns the
// state now in the bucket.
func Change(ctx context.Context, st s3store.Store, now time.Time, by, reason string, change func(*State) bool) (State, error) {
	for range maxAttempts {
		s, etag, err := Read(ctx, st)
		if err != nil && !errors.Is(err, ErrMalformed) {
			return State{}, err
		}
		if !change(&s) {
			return s, nil
		}
		s.Version++
		s.UpdatedAt, s.UpdatedBy, s.Reason = now.UTC(), by, reason
		if s.Types == nil {
			s.Types = []string{}
		}
		body, err := json.Marshal(s)
		if err != nil {
			return State{}, fmt.Errorf("write the pause object: %w", err)
		}
		opts := s3store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}
		_, err = st.Put(ctx, Key, body, opts)
		switch {
		case err == nil:
			return s, nil
		case s3store.LostRace(err), errors.Is(err, s3store.ErrNotFound):
			continue // someone else changed it first: apply ours to theirs
		default:
			return State{}, fmt.Errorf("write the pause object: %w", err)
		}
	}
	return State{}, fmt.Errorf("write the pause object: %d rounds lost to concurrent writers", maxAttempts)
}

// Watch is a reader's view of the pause object, read again at most once per
// Interval: one GET per Interval, whatever the reader does meanwhile.
// Nothing guards it: one goroutine owns it.
//
// A missing object is "nothing paused" until the next read. A read that
// fails keeps the last state read, and so does a malformed object (logged
// once per version of it): bad bytes under the prefix neither pause a
// running fleet nor resume a paused one, and with no good read yet nothing
// is paused (invariant 7: bad data never blocks the queue).
//
// Until a read has answered (Known), the state is unknown: a reader that
// must not claim paused work treats that as everything paused while
// Settled is false, and a read that failed then is tried again after
// UnknownRetry rather than Interval. A worker started while the store
// fails does not claim a paused type on the strength of a read that never
// happened. The wait is bounded: one Interval after the first failed read,
// Settled turns true and the reader goes on as if nothing were paused (a
// policy that refuses the pause object must not stop a fleet silently).
type Watch struct {
	St       s3store.Store
	Local    clock.Local
	Interval time.Duration
	Log      *slog.Logger

	state State
	read  bool // a read was made
	known bool // a read has answered (the object, malformed, or missing)
	// giveUp: with no read answered, the local time after which the
	// reader stops waiting for one (Settled).
	giveUp time.Time
	next   time.Time // local time of the next read
	bad    string    // ETag of the malformed object last logged
	reads  int64
}

// Refresh reads the pause object if Interval has passed since the last
// read (or none was made), and reports whether the state changed.
func (w *Watch) Refresh(ctx context.Context) (changed bool) {
	now := w.Local.Now()
	if w.read && now.Before(w.next) {
		return false
	}
	w.next = now.Add(w.Interval)
	w.reads++
	s, etag, err := Read(ctx, w.St)
	switch {
	case errors.Is(err, ErrMalformed):
		if etag != w.bad {
			w.bad = etag
			w.Log.Error("the pause object is malformed; keeping the last good pause state (nothing paused if none was read); rewrite it with s3queue pause or resume",
				"key", Key, "err", err, "paused_types", w.state.Types, "paused_all", w.state.All)
		}
		w.read, w.known = true, true
		return false
	case err != nil:
		if ctx.Err() == nil {
			w.Log.Warn("read the pause object; keeping the last state read", "err", err, "known", w.known)
		}
		w.read = true
		if !w.known {
			if w.giveUp.IsZero() {
				w.giveUp = now.Add(w.Interval)
			}
			if now.Before(w.giveUp) {
				w.next = now.Add(min(w.Interval, UnknownRetry))
			}
		}
		return false
	}
	w.read, w.known = true, true
	changed = s.All != w.state.All || !slices.Equal(s.Types, w.state.Types)
	w.state = s
	return changed
}

// Expire makes the next Refresh read the object, however recent the last
// read: a reader that has not been reading (a standby that joins the
// fleet) must not act on an old state.
// Until a read answers, Known is false again, so that the reader acts on
// no state older than that (a worker whose first read fails claims nothing
// for up to an Interval; see Settled).
func (w *Watch) Expire() {
	w.next, w.known, w.read, w.giveUp = time.Time{}, false, false, time.Time{}
}

// State is the last state read.
func (w *Watch) State() State { return w.state }

// Known reports whether a read has answered yet: until one has, State is
// a guess (nothing paused) that a worker must not claim on.
func (w *Watch) Known() bool { return w.known }

// Settled reports whether the reader may act on State: a read has
// answered, or none has for an Interval since the first one failed.
func (w *Watch) Settled() bool {
	return w.known || w.read && !w.giveUp.IsZero() && !w.Local.Now().Before(w.giveUp)
}

// UnknownRetry is how soon a failed read is tried again while no read has
// answered yet.
const UnknownRetry = time.Second

// Until is how long until the next read is due.
func (w *Watch) Until() time.Duration {
	if !w.read {
		return 0
	}
	return max(w.next.Sub(w.Local.Now()), 0)
}

// Reads counts the reads made.
func (w *Watch) Reads() int64 { return w.reads }
