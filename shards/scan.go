package shards

import (
	"context"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// TasksPrefix is the prefix of shard's canonical task objects.
func TasksPrefix(shard int) string { return "tasks/" + task.ShardName(shard) + "/" }

// Scan finds new work in one shard by listing its task objects in key
// order. Task ids sort by the time a task first becomes available, so the
// listing is a schedule: everything before "now" is due, and a cursor that
// trails the newest id seen finds every task submitted since, without a GET
// per task and without an index entry per task.
//
// A producer's PUT can land after later ids are already visible (clock
// uncertainty, a slow request), so one scan per Lag (by S3 time) starts
// 2×Lag before the cursor, and skips keys whose ETag it has already seen;
// the others start at the cursor. A key that lands up to Lag late is found
// by the next such scan, and a busy member does not re-list the last
// seconds of its shard on every poll (the server reads every key it lists). A task that lands even
// later is announced in the ready index by its producer, and the monitor's
// repair catches whatever else slips by (invariant 6).
type Scan struct {
	Shard int
	// Lag: how late a key may land and still be found by the scan.
	Lag time.Duration
	// PageSize bounds one LIST.
	PageSize int

	cursor    time.Time            // keys up to here are settled
	lagged    time.Time            // S3 time of the last scan that started behind the cursor
	seen      map[string]string    // key -> ETag last settled
	unsettled map[string]time.Time // handed out, not yet settled: the cursor waits for them
}

// NewScan starts a scan of shard at from (ids older than from are left to
// the ready index and the monitor).
func NewScan(shard int, from time.Time, lag time.Duration) *Scan {
	return &Scan{Shard: shard, Lag: lag, PageSize: s3store.DefaultMaxKeys, cursor: from,
		seen: make(map[string]string), unsettled: make(map[string]time.Time)}
}

// Candidate is a task object, or a ready pointer to one, that may hold
// claimable work.
type Candidate struct {
	Key     string // the listed key: a task object or a pointer
	ID      string // the task's id
	ETag    string
	Avail   time.Time // from the key
	Pointer bool      // Key is a ready pointer to task ID
}

// Next lists the shard and returns up to max objects due by now that it has
// not settled at their current ETag. Finished task objects (known by their
// size, see FinishedBySize) are settled without being handed out, so a scan
// that starts far back crosses them at a page per LIST. Callers report each
// candidate with Seen once handled; the cursor never passes one they have
// not, so a candidate whose read failed is listed again.
func (s *Scan) Next(ctx context.Context, st s3store.Store, now time.Time, max int) ([]Candidate, error) {
	start := s.cursor
	if !now.Before(s.lagged.Add(s.Lag)) {
		start, s.lagged = s.cursor.Add(-2*s.Lag), now
	}
	after := TasksPrefix(s.Shard) + lowID(start)
	var out []Candidate
	for pages := 0; pages < 8 && len(out) < max; pages++ {
		page, err := st.List(ctx, TasksPrefix(s.Shard), s3store.ListOptions{StartAfter: after, MaxKeys: s.PageSize})
		if err != nil {
			return out, fmt.Errorf("scan shard %d: %w", s.Shard, err)
		}
		for _, o := range page.Objects {
			c, ok := parseCandidate(o)
			if !ok {
				continue // foreign object; the monitor reports it
			}
			if c.Avail.After(now) {
				return out, nil
			}
			if e, ok := s.seen[o.Key]; ok && (e == o.ETag || e == Settled) {
				delete(s.unsettled, o.Key)
				s.advance(c.Avail)
				continue
			}
			if !c.Pointer && FinishedBySize(o.Size) {
				s.Seen(c, Settled)
				continue
			}
			s.unsettled[o.Key] = c.Avail
			out = append(out, c)
			if len(out) >= max {
				return out, nil
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	return out, nil
}

func parseCandidate(o s3store.ObjectInfo) (Candidate, bool) {
	if IsPointer(o.Key) {
		p, err := ParsePointerKey(o.Key)
		if err != nil {
			return Candidate{}, false
		}
		return Candidate{Key: o.Key, ID: p.ID, ETag: o.ETag, Avail: p.At, Pointer: true}, true
	}
	_, id, err := task.ParseKey(o.Key)
	if err != nil {
		return Candidate{}, false
	}
	at, _ := task.IDTime(id)
	return Candidate{Key: o.Key, ID: id, ETag: o.ETag, Avail: at}, true
}

// FinishedBySize reports what a task object's size says: odd sizes are
// finished tasks (succeeded, dead, canceled), even sizes are not. Writers
// pad the JSON with trailing newlines to keep this and PendingBySize true,
// so a LIST, which carries sizes, tells scans and sweeps which tasks are
// finished without a GET per task. It is a hint for cost only: every
// decision re-reads.
func FinishedBySize(size int64) bool { return size%2 == 1 }

// PendingBySize reports whether a task object's size says pending: a
// multiple of 4 bytes; a running task's size is 2 more than one. A hint for
// cost only, like FinishedBySize.
func PendingBySize(size int64) bool { return size%4 == 0 }

// SizePadding is how many bytes of padding (trailing newlines) a task
// object of n bytes with status s needs to keep FinishedBySize and
// PendingBySize true.
func SizePadding(n int, s task.Status) int {
	switch {
	case s.Terminal():
		return 1 - n%2
	case s == task.Pending:
		return (4 - n%4) % 4
	default:
		return (6 - n%4) % 4
	}
}

// Settled, passed to Seen, means "whatever its ETag, never hand this key
// out again": a task object that has left pending comes back only through a
// ready pointer, so its later writes need no second look.
const Settled = "*"

// Seen records that key was handled at etag (claimed, found running or
// finished, or not ours to run) and moves the cursor past it.
func (s *Scan) Seen(c Candidate, etag string) {
	s.seen[c.Key] = etag
	delete(s.unsettled, c.Key)
	s.advance(c.Avail)
}

func (s *Scan) advance(at time.Time) {
	for _, u := range s.unsettled {
		if u.Before(at) {
			at = u
		}
	}
	if !at.After(s.cursor) {
		return
	}
	s.cursor = at
	// Forget keys the next scan will not list again.
	horizon := s.cursor.Add(-2*s.Lag - time.Second)
	if len(s.seen) > 1024 {
		for k := range s.seen {
			c, ok := parseCandidate(s3store.ObjectInfo{Key: k})
			if !ok || c.Avail.Before(horizon) {
				delete(s.seen, k)
			}
		}
	}
}

// Cursor reports how far the scan has got.
func (s *Scan) Cursor() time.Time { return s.cursor }

// KeyBefore returns a key that sorts before every task object and ready
// pointer in shard whose time is t or later.
func KeyBefore(shard int, t time.Time) string { return TasksPrefix(shard) + lowID(t) }

// lowID returns a string that sorts before every id of time t or later.
func lowID(t time.Time) string {
	if t.UnixMilli() <= 0 {
		return ""
	}
	id, _ := task.NewID(t, zeroReader{})
	return id
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
