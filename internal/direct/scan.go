package direct

import (
	"context"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// MaxCursorAge caps how far back an inbox scan starts: a cursor older than
// this (a worker name resumed after days) starts here instead, with a
// warning; older entries are left to the monitor's repair of pending tasks
// nobody picked up.
const MaxCursorAge = 24 * time.Hour

// Scan lists an inbox, or the overflow, from a cursor: one LIST finds the
// entries due by now in every bucket from the cursor on, in time order, and
// stops at the first bucket still to come. Entries are deleted once their
// task is claimed or no longer pending (the claim's caller does that), so
// a listing returns little but the work waiting; the cursor never passes
// an entry not yet handled, and trails now by Lag, so an entry written
// late into an earlier bucket (a producer's clock a little behind, a slow
// PUT) is still found.
//
// Its candidates are shards.Candidate with Inbox set; a caller reports
// each with Seen or Failed, as for a shard scan.
type Scan struct {
	Prefix string        // Inbox(worker), or OverflowPrefix
	Lag    time.Duration // how late an entry may land in an earlier bucket and be found
	// Fixed keeps the cursor where it starts (the overflow, scanned from
	// its oldest bucket by every scavenger).
	Fixed bool

	cursor    string            // the oldest bucket not finished
	seen      map[string]string // key -> ETag of an entry given up (its task unreadable again and again)
	unsettled map[string]bool
	failed    map[string]readFailures
}

type readFailures struct {
	etag  string
	n     int
	first time.Time
}

// NewScan starts a scan of prefix at bucket cursor ("" starts at the
// bucket of now, for a fresh inbox, or at the first bucket with Fixed). A
// cursor older than MaxCursorAge before now is capped, and capped reports
// it.
func NewScan(prefix, cursor string, now time.Time, lag time.Duration, fixed bool) (s *Scan, capped bool) {
	s = &Scan{Prefix: prefix, Lag: lag, Fixed: fixed, seen: map[string]string{}, unsettled: map[string]bool{}, failed: map[string]readFailures{}}
	floor := Bucket(now.Add(-MaxCursorAge))
	switch {
	case fixed:
	case cursor == "":
		cursor = Bucket(now.Add(-lag))
	case cursor < floor:
		cursor, capped = floor, true
	}
	s.cursor = cursor
	return s, capped
}

// Cursor is the oldest bucket the scan has not finished.
func (s *Scan) Cursor() string { return s.cursor }

// Next lists from the cursor and returns up to max entries due by now (S3
// time: their task's id, which carries when it becomes due, is not later)
// that are not settled at their ETag.
func (s *Scan) Next(ctx context.Context, st s3store.Store, now time.Time, max int) ([]shards.Candidate, error) {
	after := s.Prefix
	if s.cursor != "" {
		after = s.Prefix + s.cursor // sorts before the bucket's entries
	}
	var out []shards.Candidate
	first := "" // bucket of the first entry listed that is not settled
	done := false
	for pages := 0; !done && pages < shards.MaxPages && len(out) < max; pages++ {
		page, err := st.List(ctx, s.Prefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return out, fmt.Errorf("scan %s: %w", s.Prefix, err)
		}
		for _, o := range page.Objects {
			e, err := ParseEntry(o.Key)
			if err != nil {
				continue // foreign object
			}
			// Ids sort by the time their task becomes due, and an entry's
			// bucket is that time's minute: the first entry not due yet
			// ends the due ones.
			if due, err := task.IDTime(e.ID); e.At.After(now) || err == nil && due.After(now) {
				done = true
				break
			}
			if etag, ok := s.seen[o.Key]; ok && etag == o.ETag {
				continue
			}
			if first == "" {
				first = e.Bucket
			}
			s.unsettled[o.Key] = true
			out = append(out, shards.Candidate{Key: o.Key, ID: e.ID, ETag: o.ETag, Avail: e.At, Pointer: true, Shard: e.Shard, Inbox: true})
			if len(out) >= max {
				done = true
				break
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	if !s.Fixed {
		c := Bucket(now.Add(-s.Lag))
		if first != "" && first < c {
			c = first
		}
		if c > s.cursor {
			s.cursor = c
			for k := range s.seen {
				if e, err := ParseEntry(k); err != nil || e.Bucket < c {
					delete(s.seen, k)
				}
			}
		}
	}
	return out, nil
}

// Seen records that c was handled: its caller deletes its entry. Nothing
// is remembered of it: every entry is an empty object, so one written
// again under the same key (a move to the overflow that landed late, after
// the entry was claimed and deleted) has the same ETag, and must be
// handed out again all the same (its task's read then finds it claimed).
func (s *Scan) Seen(c shards.Candidate, etag string) {
	delete(s.unsettled, c.Key)
	delete(s.failed, c.Key)
}

// Failed records that c's task could not be read at now (S3 time), and
// reports whether the scan gave up on it (shards.MaxReadFailures over at
// least Lag): it is then settled at its ETag.
func (s *Scan) Failed(c shards.Candidate, now time.Time) bool {
	f := s.failed[c.Key]
	if f.etag != c.ETag || f.n == 0 {
		f = readFailures{etag: c.ETag, first: now}
	}
	f.n++
	s.failed[c.Key] = f
	if f.n < shards.MaxReadFailures || now.Sub(f.first) < s.Lag {
		return false
	}
	s.Seen(c, c.ETag)
	s.seen[c.Key] = c.ETag // given up: not handed out again
	return true
}
