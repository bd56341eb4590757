package shards

import (
	"context"
	"fmt"
	"slices"
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
	// PointersOnly hands out ready pointers only: under direct dispatch a
	// new task reaches a worker through its inbox, and the shards carry
	// the re-dispatched ones (a task object is settled unread, as a
	// finished one is).
	PointersOnly bool

	cursor time.Time // keys up to here are settled
	// resume is a key of the cursor's time (resumeAt) up to which every
	// key of that time is settled: a listing from the cursor starts after
	// it, not before the first key of that time. A millisecond can hold
	// more keys than one Next lists (MaxPages pages: a pause lifted writes
	// a pointer per task at one instant, kept until the monitor lowers its
	// floor), and a cursor that is only a time would list the same
	// settled keys at every poll and never reach the ones after them.
	resume    string
	resumeAt  time.Time
	lagged    time.Time            // S3 time of the last scan that started behind the cursor
	seen      map[string]string    // key -> ETag last settled
	unsettled map[string]time.Time // handed out, not yet settled: the cursor waits for them
	failed    map[string]readFailures
	pruneAt   int // size of seen that triggers the next pruning
	window    []Candidate
	nextDue   time.Time // the time of the first key not yet due that the last listing reached
}

// readFailures counts the failed reads of one candidate at one ETag.
type readFailures struct {
	etag  string
	n     int
	first time.Time // S3 time of the first
}

// MaxReadFailures is how many times a candidate's read may fail (with
// anything but not-found or corrupt, which settle it at once), over at
// least the scan's Lag, before the scan gives up on it: a bad object is
// reported and skipped, and never holds the cursor (invariant 7).
const MaxReadFailures = 5

// MaxPages bounds the LISTs of one Next.
const MaxPages = 8

// NewScan starts a scan of shard at from (ids older than from are left to
// the ready index and the monitor).
func NewScan(shard int, from time.Time, lag time.Duration) *Scan {
	return &Scan{Shard: shard, Lag: lag, PageSize: s3store.DefaultMaxKeys, cursor: from,
		seen: make(map[string]string), unsettled: make(map[string]time.Time), failed: make(map[string]readFailures)}
}

// Candidate is a task object, or a ready pointer to one, that may hold
// claimable work.
type Candidate struct {
	Key     string // the listed key: a task object or a pointer
	ID      string // the task's id
	ETag    string
	Avail   time.Time // from the key
	Pointer bool      // Key is a ready pointer to task ID
	// Inbox: Key is a direct-dispatch inbox or overflow entry
	// (internal/direct), deleted once its task is claimed or needs it no
	// more, whatever the task's age.
	Inbox bool
	// Shard is the shard of task ID when Key is a ready pointer that names
	// it, else -1 (see TaskKey).
	Shard int
	// Priority is what the listed size says of a pending task object
	// (task.PriorityBySize); the default for a pointer or an object whose
	// size does not say pending.
	Priority task.Priority
	// Pending: the listed size says the task object is pending
	// (task.PendingBySize); false for a pointer.
	Pending bool
}

// TaskKey returns the key of the task c stands for, and false for a ready
// pointer written before pointers named their task's shard: that task is
// found by trying each of the manifest's counts (taskio.LoadID).
func (c Candidate) TaskKey() (string, bool) {
	switch {
	case !c.Pointer:
		return c.Key, true
	case c.Shard >= 0:
		return task.Key(c.Shard, c.ID), true
	}
	return "", false
}

// Next lists the shard and returns up to max objects due by now that it has
// not settled at their current ETag.
//
// The due candidates of its first page (the window: up to PageSize keys
// from where it starts) come first, highest priority first and, within a
// priority, in key order (oldest first); candidates of later pages, listed
// only when the window holds fewer than max, follow in key order. A
// window candidate not handed out stays unsettled, unread: the cursor
// does not pass it, so the next listing starts at or before it and it is
// in that window too. A low task is thus passed by at most the due tasks
// of one page after it (docs/scheduling.md#priorities).
//
// Finished task objects (known by their
// size, see task.FinishedBySize) are settled without being handed out, so a scan
// that starts far back crosses them at a page per LIST. Callers report each
// candidate with Seen once handled, or with Failed when its read failed;
// the cursor does not pass one they have not, so a candidate whose read
// failed, or that the caller held and threw away, is listed again.
//
// A candidate handed out and never settled cannot hold the cursor for
// ever: a listing that passes where its key was and does not return it
// proves it gone (a ready pointer someone else used, a task retention
// deleted), and settles it; a key whose read keeps failing is given up by
// Failed.
func (s *Scan) Next(ctx context.Context, st s3store.Store, now time.Time, max int) ([]Candidate, error) {
	return s.NextAhead(ctx, st, now, max, nil)
}

// Ahead is the first LIST of a Next, sent ahead of it (ListAhead) while
// the caller still handles what the last Next returned.
type Ahead struct {
	after  string
	lagged bool      // it starts behind the cursor (see Next)
	at     time.Time // the S3 time it was sent at
	done   chan struct{}
	page   s3store.ListPage
	err    error
}

// Done is closed once the LIST has answered.
func (a *Ahead) Done() <-chan struct{} { return a.done }

// ListAhead sends the first LIST of the next Next now, from where that
// Next would start at S3 time now, and returns without waiting for it.
// The caller hands it to NextAhead before it calls Next or ListAhead
// again; it may call Seen and Failed meanwhile.
func (s *Scan) ListAhead(ctx context.Context, st s3store.Store, now time.Time) *Ahead {
	after, lagged := s.start(now)
	a := &Ahead{after: after, lagged: lagged, at: now, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.page, a.err = st.List(ctx, TasksPrefix(s.Shard), s3store.ListOptions{StartAfter: after, MaxKeys: s.PageSize})
	}()
	return a
}

// start is where a Next at S3 time now starts listing (after that key),
// and whether it is the scan behind the cursor due once per Lag.
func (s *Scan) start(now time.Time) (after string, lagged bool) {
	start := s.cursor
	if !now.Before(s.lagged.Add(s.Lag)) {
		start, lagged = s.cursor.Add(-2*s.Lag), true
	}
	// A candidate left unsettled behind the cursor (one that landed late,
	// found by a scan that started behind it and not handed out, or handed
	// out and not settled) is listed again by the next listing, not by the
	// next scan behind the cursor a Lag later: that scan hands out a
	// listing's worth, and with slots free (the others held for a rate
	// limit's window) the rest of what it found must not wait a Lag each.
	fromResume := start.Equal(s.cursor) && s.resume != "" && s.resumeAt.Equal(s.cursor)
	for _, at := range s.unsettled {
		if at.Before(start) {
			start = at
		}
		if !at.After(s.cursor) {
			fromResume = false // it may sort before resume: list it again
		}
	}
	if fromResume {
		// A key of the cursor's time that lands before resume, late, is
		// found by the next scan behind the cursor, as one that lands
		// behind the cursor's time is.
		return s.resume, lagged
	}
	return TasksPrefix(s.Shard) + lowID(start), lagged
}

// NextAhead is Next, with its first LIST the one a sent ahead (nil: none),
// judged as a Next made when a was sent. Since then the scan has only
// settled keys (Seen, Failed), so a starts no later than where this Next
// would: it covers every key this one would list (the keys between are
// settled, and skipped as in any listing). A scan behind the cursor that
// came due meanwhile waits for the next Next. Should a start later all
// the same, its page is dropped and the shard listed afresh.
func (s *Scan) NextAhead(ctx context.Context, st s3store.Store, now time.Time, max int, a *Ahead) ([]Candidate, error) {
	after, lagged := s.start(now)
	var first *s3store.ListPage
	if a != nil {
		<-a.done
		if a.err != nil {
			return nil, fmt.Errorf("scan shard %d: %w", s.Shard, a.err)
		}
		if a.after <= after || lagged && !a.lagged {
			after, lagged, first, now = a.after, a.lagged, &a.page, a.at
		}
	}
	if lagged {
		s.lagged = now
	}
	l := listing{after: after}
	if len(s.unsettled) > 0 {
		l.waiting = make(map[string]bool, len(s.unsettled))
		for k := range s.unsettled {
			l.waiting[k] = true
		}
	}
	defer s.settleGone(&l)
	var out []Candidate
	// contiguous: every key this listing returned so far was settled, so
	// a settled key of the cursor's time may move resume.
	contiguous := true
	settled := func(c Candidate) {
		if contiguous && c.Avail.Equal(s.cursor) && c.Key > s.resume {
			s.resume, s.resumeAt = c.Key, s.cursor
		}
	}
	s.window = s.window[:0]
	// handOut orders the window and keeps the first max of it.
	handOut := func(out []Candidate) []Candidate {
		s.window = append(s.window, out...)
		slices.SortStableFunc(out, func(a, b Candidate) int { return a.Priority.Rank() - b.Priority.Rank() })
		return out[:min(len(out), max)]
	}
	for pages := 0; pages < MaxPages && len(out) < max; pages++ {
		var page s3store.ListPage
		if pages == 0 && first != nil {
			page = *first
		} else {
			var err error
			if page, err = st.List(ctx, TasksPrefix(s.Shard), s3store.ListOptions{StartAfter: after, MaxKeys: s.PageSize}); err != nil {
				return out, fmt.Errorf("scan shard %d: %w", s.Shard, err)
			}
		}
		for _, o := range page.Objects {
			l.through = o.Key
			delete(l.waiting, o.Key)
			c, ok := parseCandidate(o)
			if !ok {
				continue // foreign object; the monitor reports it
			}
			if c.Avail.After(now) {
				s.nextDue = c.Avail
				if pages == 0 {
					out = handOut(out)
				}
				return out, nil
			}
			l.due = c.Avail
			if e, ok := s.seen[o.Key]; ok && (e == o.ETag || e == Settled) {
				delete(s.unsettled, o.Key)
				s.advance(c.Avail)
				settled(c)
				continue
			}
			if !c.Pointer && (s.PointersOnly || task.FinishedBySize(o.Size)) {
				s.Seen(c, Settled)
				settled(c)
				continue
			}
			contiguous = false
			s.unsettled[o.Key] = c.Avail
			out = append(out, c)
			if pages > 0 && len(out) >= max {
				return out, nil
			}
		}
		if pages == 0 {
			out = handOut(out)
		}
		if !page.Truncated || len(page.Objects) == 0 {
			l.end = true
			s.nextDue = time.Time{} // nothing after: no key waits to come due
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	return out, nil
}

// listing is the key range one Next covered: every key after `after` up to
// and including `through` (to the end of the shard if end) was returned.
type listing struct {
	after, through string
	end            bool
	waiting        map[string]bool // keys unsettled before it that it has not returned (yet)
	due            time.Time       // the time of the last due key it examined
}

// settleGone settles the unsettled keys that l covered and did not return:
// they are gone, and nothing of theirs is left to handle.
func (s *Scan) settleGone(l *listing) {
	if l.through == "" && !l.end {
		return
	}
	gone := false
	for k := range l.waiting {
		if _, ok := s.unsettled[k]; ok && k > l.after && (l.end || k <= l.through) {
			delete(s.unsettled, k)
			delete(s.failed, k)
			gone = true
		}
	}
	if gone && !l.due.IsZero() {
		// Every key up to l.due is now settled, or handed out and waiting.
		s.advance(l.due)
	}
}

// FirstDue returns the first key of shard, listed from the time from on,
// that stands for due work at now: a pending task object (by its size)
// or a ready pointer; "" if one LIST finds none. It reads no object.
func FirstDue(ctx context.Context, st s3store.Store, shard int, from, now time.Time) (string, error) {
	page, err := st.List(ctx, TasksPrefix(shard), s3store.ListOptions{StartAfter: KeyBefore(shard, from), MaxKeys: s3store.DefaultMaxKeys})
	if err != nil {
		return "", fmt.Errorf("list shard %d: %w", shard, err)
	}
	for _, o := range page.Objects {
		c, ok := parseCandidate(o)
		if !ok {
			continue
		}
		if c.Avail.After(now) {
			break
		}
		if c.Pointer || task.PendingBySize(o.Size) {
			return o.Key, nil
		}
	}
	return "", nil
}

func parseCandidate(o s3store.ObjectInfo) (Candidate, bool) {
	if IsPointer(o.Key) {
		p, err := ParsePointerKey(o.Key)
		if err != nil {
			return Candidate{}, false
		}
		return Candidate{Key: o.Key, ID: p.ID, ETag: o.ETag, Avail: p.At, Pointer: true, Shard: p.Shard}, true
	}
	_, id, err := task.ParseKey(o.Key)
	if err != nil {
		return Candidate{}, false
	}
	at, _ := task.IDTime(id)
	p, _ := task.PriorityBySize(o.Size)
	return Candidate{Key: o.Key, ID: id, ETag: o.ETag, Avail: at, Shard: -1, Priority: p, Pending: task.PendingBySize(o.Size)}, true
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
	delete(s.failed, c.Key)
	s.advance(c.Avail)
}

// Failed records that c could not be read at now (S3 time) for a reason
// other than not-found or corrupt (those are settled with Seen: a 403, a
// 500 after the store's retries). It reports whether the scan gave up on
// c: once c has failed MaxReadFailures times at its ETag, over at least
// Lag, it is settled at that ETag, never handed out again unless it
// changes, and the caller reports it as skipped. Until then it is listed
// again, and the cursor waits for it.
func (s *Scan) Failed(c Candidate, now time.Time) bool {
	f := s.failed[c.Key]
	if f.etag != c.ETag || f.n == 0 {
		f = readFailures{etag: c.ETag, first: now}
	}
	f.n++
	s.failed[c.Key] = f
	if f.n < MaxReadFailures || now.Sub(f.first) < s.Lag {
		return false
	}
	s.Seen(c, c.ETag)
	return true
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
	// Forget keys the next scan will not list again, each time the map
	// has doubled: a cursor crossing thousands of settled keys one by one
	// (after a pin is released) must not rescan the map at every key.
	if len(s.seen) > max(1024, s.pruneAt) {
		horizon := s.cursor.Add(-2*s.Lag - time.Second)
		for k := range s.seen {
			c, ok := parseCandidate(s3store.ObjectInfo{Key: k})
			if !ok || c.Avail.Before(horizon) {
				delete(s.seen, k)
			}
		}
		s.pruneAt = 2 * len(s.seen)
	}
}

// Window returns the due candidates of the last Next's first page, in key
// order, handed out or not: what its priority order chose from. It is
// valid until the next Next.
func (s *Scan) Window() []Candidate { return s.window }

// UnsettledAfter returns the earliest time after `after` of a key the scan
// handed out and has not settled (zero if none): a delayed task listed
// while its time may have come, not claimed because it certainly had not.
func (s *Scan) UnsettledAfter(after time.Time) time.Time {
	var at time.Time
	for _, u := range s.unsettled {
		if u.After(after) && (at.IsZero() || u.Before(at)) {
			at = u
		}
	}
	return at
}

// NextDue is the time of the first key not yet due that the last listing
// to reach one found (a delayed task, a retry's pointer), zero if the last
// listing that reached the end of the shard found none: when a sleeping
// fleet must look again.
func (s *Scan) NextDue() time.Time { return s.nextDue }

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
