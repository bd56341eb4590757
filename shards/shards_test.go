package shards_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

func TestManifest(t *testing.T) {
	ctx := context.Background()
	t.Run("a new queue gets the default shard count and others agree", func(t *testing.T) {
		st := mem.New()
		m, err := shards.Open(ctx, st, 0)
		if err != nil || m.Shards != shards.DefaultShards || m.Format != shards.FormatOriginal {
			t.Fatalf("open new queue: %+v %v", m, err)
		}
		if m2, err := shards.Open(ctx, st, shards.DefaultShards); err != nil || m2.Shards != m.Shards {
			t.Fatalf("reopen: %+v %v", m2, err)
		}
	})
	t.Run("a process configured with another shard count refuses to start", func(t *testing.T) {
		st := mem.New()
		if _, err := shards.Open(ctx, st, 8); err != nil {
			t.Fatal(err)
		}
		_, err := shards.Open(ctx, st, 16)
		if !errors.Is(err, shards.ErrLayoutMismatch) || !strings.Contains(err.Error(), "8 shards") {
			t.Fatalf("want a layout mismatch naming 8 shards, got %v", err)
		}
	})
	t.Run("a newer layout format is refused", func(t *testing.T) {
		st := mem.New()
		st.Put(ctx, shards.ManifestKey, []byte(`{"format":3,"shards":16}`), s3store.PutOptions{})
		if _, err := shards.Open(ctx, st, 0); !errors.Is(err, shards.ErrLayoutMismatch) {
			t.Fatalf("want ErrLayoutMismatch, got %v", err)
		}
	})
	t.Run("a corrupt manifest is a clear error", func(t *testing.T) {
		st := mem.New()
		st.Put(ctx, shards.ManifestKey, []byte(`garbage`), s3store.PutOptions{})
		if _, err := shards.Open(ctx, st, 0); err == nil || !strings.Contains(err.Error(), "not a valid s3queue manifest") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("racing creators agree", func(t *testing.T) {
		st := mem.New()
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			go func() { _, err := shards.Open(ctx, st, 4); errs <- err }()
		}
		for i := 0; i < 8; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestReadyPointers(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now().UTC().Truncate(time.Millisecond)
	id, _ := task.NewID(now.Add(-time.Hour), strings.NewReader(strings.Repeat("r", 16)))
	old := &task.Task{ID: id, Shard: 0, AvailableAt: now.Add(-time.Hour)}
	if err := shards.Announce(ctx, st, old, now, -1); err != nil {
		t.Fatal(err)
	}
	later := &task.Task{ID: id, Shard: 0, AvailableAt: now.Add(time.Minute)}
	if err := shards.Announce(ctx, st, later, now, -1); err != nil {
		t.Fatal(err)
	}
	page, _ := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	if len(page.Objects) != 2 {
		t.Fatalf("want 2 pointers, got %+v", page.Objects)
	}
	first, err := shards.ParsePointerKey(page.Objects[0].Key)
	if err != nil || first.ID != id || !first.At.Equal(now) {
		t.Fatalf("a pointer to an overdue task must be due now (ahead of scan cursors): %+v %v", first, err)
	}
	second, _ := shards.ParsePointerKey(page.Objects[1].Key)
	if !second.At.Equal(now.Add(time.Minute)) {
		t.Fatalf("a pointer to a delayed task must be due when the task is: %+v", second)
	}
	t.Run("a pointer names the task's own shard", func(t *testing.T) {
		tk := &task.Task{ID: id, Shard: 7, AvailableAt: now}
		if err := shards.Announce(ctx, st, tk, now, 2); err != nil {
			t.Fatal(err)
		}
		key := shards.PointerKey(2, 7, id, now)
		if !strings.HasSuffix(key, "~"+id+"~007.ready") {
			t.Fatalf("pointer key %s, want it to end ~ID~007.ready", key)
		}
		p, err := shards.ParsePointerKey(key)
		if err != nil || p.In != 2 || p.Shard != 7 || p.ID != id || !p.At.Equal(now) {
			t.Fatalf("parse %s: %+v %v", key, p, err)
		}
		if _, err := st.Head(ctx, key); err != nil {
			t.Fatalf("Announce wrote no pointer at %s: %v", key, err)
		}
	})
	t.Run("a pointer from before pointers named the shard still parses", func(t *testing.T) {
		key := shards.TasksPrefix(2) + id[:10] + "~" + id + ".ready"
		p, err := shards.ParsePointerKey(key)
		if err != nil || p.In != 2 || p.Shard != -1 || p.ID != id {
			t.Fatalf("parse %s: %+v %v, want shard -1 (unknown)", key, p, err)
		}
		if k, named := (shards.Candidate{Key: key, ID: id, Pointer: true, Shard: -1}).TaskKey(); named || k != "" {
			t.Fatalf("TaskKey of an old pointer: %q %v, want none", k, named)
		}
	})
	for _, bad := range []string{"tasks/000/x.ready", "tasks/000/0123456789~nope.ready", "ready/000/x",
		"tasks/000/0123456789~" + id + "~7.ready", "tasks/000/0123456789~" + id + "~abc.ready", "tasks/000/0123456789~" + id + "~1000.ready"} {
		if _, err := shards.ParsePointerKey(bad); err == nil {
			t.Fatalf("parsed %q", bad)
		}
	}
}

func TestScanFindsNewTasksOnceAndStopsAtTheFuture(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	put := func(at time.Time) string {
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat("x", 16)))
		if _, err := st.Put(ctx, task.Key(0, id), []byte("{}"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := put(now.Add(-3 * time.Second))
	b := put(now.Add(-time.Second))
	put(now.Add(time.Hour)) // not due
	s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
	c, err := s.Next(ctx, st, now, 10)
	if err != nil || len(c) != 2 || c[0].ID != a || c[1].ID != b {
		t.Fatalf("first scan = %+v %v, want a and b", c, err)
	}
	for _, x := range c {
		s.Seen(x, x.ETag)
	}
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 0 {
		t.Fatalf("second scan handed out %d seen keys again", len(c))
	}
	late := put(now.Add(-2 * time.Second)) // landed behind the cursor, within the lag
	c, _ = s.Next(ctx, st, now.Add(time.Second), 10)
	if len(c) != 0 {
		t.Fatalf("a scan within the lag of the last one started behind the cursor: %+v", c)
	}
	now = now.Add(5 * time.Second) // one lag later, a scan starts behind the cursor again
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 1 || c[0].ID != late {
		t.Fatalf("scan missed a task that landed within the lag: %+v", c)
	}
	s.Seen(c[0], c[0].ETag)
	// A retried task is found through its pointer, in the same listing.
	if err := shards.Announce(ctx, st, &task.Task{ID: a, Shard: 0, AvailableAt: now.Add(-time.Millisecond)}, now.Add(-time.Millisecond), -1); err != nil {
		t.Fatal(err)
	}
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 1 || !c[0].Pointer || c[0].ID != a {
		t.Fatalf("scan did not hand out the ready pointer: %+v", c)
	}
	if lists := st.Counts().Of(s3store.OpList); lists != 5 {
		t.Fatalf("5 scans made %d LISTs, want 5 (one page each)", lists)
	}
	if gets := st.Counts().Of(s3store.OpGet); gets != 0 {
		t.Fatalf("scans made %d GETs; they must read only the listing", gets)
	}
}

func TestScanCrossesFinishedTasksWithoutReadingThem(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	for i := 0; i < 50; i++ {
		id, _ := task.NewID(now.Add(time.Duration(i-60)*time.Second), strings.NewReader(strings.Repeat("f", 16)))
		st.Put(ctx, task.Key(0, id), []byte("{}\n"), s3store.PutOptions{}) // odd size: finished
	}
	fresh, _ := task.NewID(now.Add(-time.Second), strings.NewReader(strings.Repeat("n", 16)))
	st.Put(ctx, task.Key(0, fresh), []byte("{}"), s3store.PutOptions{}) // even: live
	s := shards.NewScan(0, now.Add(-time.Hour), 5*time.Second)
	c, err := s.Next(ctx, st, now, 1)
	if err != nil || len(c) != 1 || c[0].ID != fresh {
		t.Fatalf("first scan = %+v %v: want the live task, past 50 finished ones", c, err)
	}
	if st.Counts().Of(s3store.OpGet) != 0 {
		t.Fatal("the scan read objects")
	}
}

func TestScanCursorWaitsForUnsettledCandidates(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	mk := func(at time.Time, r string) string {
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat(r, 16)))
		st.Put(ctx, task.Key(0, id), []byte("{}"), s3store.PutOptions{})
		return id
	}
	failed := mk(now.Add(-30*time.Second), "a")
	later := mk(now.Add(-time.Second), "b")
	s := shards.NewScan(0, now.Add(-time.Minute), time.Second)
	c, _ := s.Next(ctx, st, now, 10)
	if len(c) != 2 {
		t.Fatalf("got %d candidates", len(c))
	}
	s.Seen(c[1], c[1].ETag) // the later one is handled; the first one's read failed
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 1 || c[0].ID != failed {
		t.Fatalf("after a failed read the scan handed out %+v; want %s again (later was %s)", c, failed, later)
	}
}

// Keys that land behind the cursor are found by the scan that starts
// behind it (once per Lag); those it leaves out of its hand-out are
// listed again by the very next scan, not a Lag later.
func TestScanListsAgainWhatItLeftBehindTheCursor(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	mk := func(at time.Time, r string) string {
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat(r, 16)))
		st.Put(ctx, task.Key(0, id), []byte("{}"), s3store.PutOptions{})
		return id
	}
	first := mk(now.Add(-time.Second), "z")
	s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
	c, _ := s.Next(ctx, st, now, 10)
	if len(c) != 1 || c[0].ID != first {
		t.Fatalf("first scan: %+v", c)
	}
	s.Seen(c[0], c[0].ETag) // the cursor passes it
	var late []string
	for _, r := range "abcdef" {
		late = append(late, mk(now.Add(-3*time.Second), string(r)))
	}
	if c, _ = s.Next(ctx, st, now, 10); len(c) != 0 {
		t.Fatalf("a scan from the cursor handed out %d keys behind it", len(c))
	}
	now = now.Add(5 * time.Second)
	if c, _ = s.Next(ctx, st, now, 4); len(c) != 4 {
		t.Fatalf("the scan behind the cursor handed out %d, want 4", len(c))
	}
	for _, k := range c {
		s.Seen(k, k.ETag)
	}
	c, _ = s.Next(ctx, st, now.Add(time.Second), 4)
	if len(c) != 2 || c[0].ID != late[4] || c[1].ID != late[5] {
		t.Fatalf("the next scan handed out %+v, want the last two late keys (%v)", c, late[4:])
	}
}

// ShardFor draws from the cache's source, so a seeded run routes alike.
func TestFleetCacheShardForDrawsFromRand(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	_, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, shards.Fleet{}, "", func(f *shards.Fleet) bool {
		for i := 0; i < 4; i++ {
			f.Members = append(f.Members, shards.Member{ID: string(rune('a' + i)), Joined: now.Add(time.Duration(i)), ExpiresAt: now.Add(time.Hour), Types: []string{"job"}})
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	c := shards.NewFleetCache(st, time.Second, clock.System(), rnd.New(strings.NewReader(strings.Repeat("\x00", 8)+strings.Repeat("\xff", 8))))
	iv := clock.Interval{Earliest: now, Latest: now}
	if s := c.ShardFor(ctx, "job", iv, 4); s != 0 {
		t.Fatalf("ShardFor with zero bytes = %d, want 0", s)
	}
	if s := c.ShardFor(ctx, "job", iv, 4); s != 3 {
		t.Fatalf("ShardFor with 0xff bytes = %d, want 3", s)
	}
}

// A candidate handed out and never settled must not hold the cursor for
// ever: the shard keeps delivering new tasks, at one LIST per scan, after a
// held pointer is deleted by someone else, after held candidates are
// thrown away and then used elsewhere, and after a read keeps failing.
func TestScanIsNotPinnedByCandidatesNeverSettled(t *testing.T) {
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	type bench struct {
		t    *testing.T
		st   *s3store.Counter
		s    *shards.Scan
		now  time.Time
		seed int
	}
	put := func(b *bench, at time.Time, body string) string {
		b.seed++
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat(string(rune('a'+b.seed%26)), 16)))
		if _, err := b.st.Put(ctx, task.Key(0, id), []byte(body), s3store.PutOptions{}); err != nil {
			b.t.Fatal(err)
		}
		return id
	}
	cases := []struct {
		name string
		// pin hands out candidates and leaves some unsettled for good.
		pin func(b *bench)
	}{
		{"a held pointer deleted by someone else", func(b *bench) {
			id := put(b, base, "{}\n\n")
			if err := shards.Announce(ctx, b.st, &task.Task{ID: id, Shard: 0}, b.now, -1); err != nil {
				b.t.Fatal(err)
			}
			c, _ := b.s.Next(ctx, b.st, b.now, 10)
			if len(c) != 2 || !c[1].Pointer {
				b.t.Fatalf("want the task and its pointer, got %+v", c)
			}
			b.s.Seen(c[0], shards.Settled)
			// c[1] is held; another member claims the task and deletes it.
			b.st.Delete(ctx, c[1].Key, s3store.DeleteOptions{})
		}},
		{"held candidates thrown away and used elsewhere", func(b *bench) {
			a := put(b, b.now.Add(-3*time.Second), "{}\n\n")
			put(b, b.now.Add(-2*time.Second), "{}\n\n")
			if err := shards.Announce(ctx, b.st, &task.Task{ID: a, Shard: 0}, b.now.Add(-time.Second), -1); err != nil {
				b.t.Fatal(err)
			}
			c, _ := b.s.Next(ctx, b.st, b.now, 10)
			if len(c) != 3 {
				b.t.Fatalf("want 3 candidates, got %+v", c)
			}
			// All three are thrown away (held past poll_max); meanwhile
			// another member finishes both tasks, retention deletes one,
			// and the pointer is used up.
			b.st.Put(ctx, c[0].Key, []byte("{}\n"), s3store.PutOptions{})
			b.st.Delete(ctx, c[1].Key, s3store.DeleteOptions{})
			b.st.Delete(ctx, c[2].Key, s3store.DeleteOptions{})
		}},
		{"a read that keeps failing", func(b *bench) {
			put(b, b.now.Add(-time.Second), "{}\n\n")
			for i := 0; ; i++ {
				c, _ := b.s.Next(ctx, b.st, b.now, 10)
				if i > 0 && len(c) == 0 {
					break // given up
				}
				if len(c) != 1 {
					b.t.Fatalf("want the unreadable task again, got %+v", c)
				}
				if b.s.Failed(c[0], b.now) != (i == shards.MaxReadFailures-1) {
					b.t.Fatalf("read failure %d: gave up too early or not at all", i+1)
				}
				if i > 100 {
					b.t.Fatal("never gave up on an unreadable object")
				}
				b.now = b.now.Add(b.s.Lag)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &bench{t: t, st: s3store.NewCounter(mem.New()), now: base.Add(time.Second)}
			b.s = shards.NewScan(0, base.Add(-time.Minute), 10*time.Millisecond)
			b.s.PageSize = 2
			tc.pin(b)
			// Many more keys than a scan's 8 pages of 2 land after the pin.
			for i := 0; i < 40; i++ {
				b.now = b.now.Add(100 * time.Millisecond)
				id := put(b, b.now.Add(-50*time.Millisecond), "{}\n\n")
				lists := b.st.Counts().Of(s3store.OpList)
				c, err := b.s.Next(ctx, b.st, b.now, 10)
				if err != nil || len(c) != 1 || c[0].ID != id {
					t.Fatalf("task %d after the pin: scan handed out %+v (%v), want only %s", i, c, err, id)
				}
				b.s.Seen(c[0], shards.Settled)
				if n := b.st.Counts().Of(s3store.OpList) - lists; n > 2 {
					t.Fatalf("task %d after the pin: a scan cost %d LISTs", i, n)
				}
			}
			if !b.s.Cursor().After(b.now.Add(-time.Second)) {
				t.Fatalf("the cursor stayed at %v", b.s.Cursor())
			}
		})
	}
}

// A listing's window (its first page) is handed out highest priority
// first, ties oldest first; a candidate left in the window holds the
// cursor, unread, and later pages never pass it.
func TestScanWindowHandsOutHigherPrioritiesFirst(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	prios := []task.Priority{task.PriorityLow, task.PriorityDefault, task.PriorityDefault, task.PriorityHigh, task.PriorityLow, task.PriorityHigh}
	ids := make([]string, len(prios))
	for i, p := range prios {
		ids[i], _ = task.NewID(now.Add(time.Duration(i-10)*time.Second), strings.NewReader(strings.Repeat("p", 16)))
		body := []byte(`{"x":1}`)
		body = append(body, strings.Repeat("\n", task.SizePaddingFor(len(body), task.Pending, p))...)
		if _, err := st.Put(ctx, task.Key(0, ids[i]), body, s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := func(cs []shards.Candidate) (out []int) {
		for _, c := range cs {
			out = append(out, slices.Index(ids, c.ID))
		}
		return out
	}
	t.Run("one page", func(t *testing.T) {
		s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
		c, err := s.Next(ctx, st, now, 3)
		if err != nil || !slices.Equal(got(c), []int{3, 5, 1}) {
			t.Fatalf("first listing handed out %v (%v), want the two high tasks, then the oldest default", got(c), err)
		}
		if w := got(s.Window()); !slices.Equal(w, []int{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("window = %v, want every due task in key order", w)
		}
		for _, x := range c {
			s.Seen(x, x.ETag)
		}
		if at, _ := task.IDTime(ids[0]); s.Cursor().After(at) {
			t.Fatal("the cursor passed the low task left in the window")
		}
		c, _ = s.Next(ctx, st, now, 3)
		if !slices.Equal(got(c), []int{2, 0, 4}) {
			t.Fatalf("second listing handed out %v, want the default, then the lows oldest first", got(c))
		}
		if n := st.Counts().Of(s3store.OpGet); n != 0 {
			t.Fatalf("the scans read %d objects", n)
		}
	})
	t.Run("later pages come after the window", func(t *testing.T) {
		s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
		s.PageSize = 3
		c, _ := s.Next(ctx, st, now, 2)
		if !slices.Equal(got(c), []int{1, 2}) {
			t.Fatalf("first listing handed out %v, want the defaults of the first page", got(c))
		}
		for _, x := range c {
			s.Seen(x, x.ETag)
		}
		c, _ = s.Next(ctx, st, now, 10)
		if !slices.Equal(got(c), []int{0, 3, 4, 5}) {
			t.Fatalf("second listing handed out %v: the low task of the window must come before the next page's", got(c))
		}
	})
}

// More keys settled at one instant than one Next lists (a pause lifted
// writes a ready pointer per task at one instant, kept for the monitor
// once their tasks ran) must not pin the scan there: the next Next lists
// after the last settled key of that instant and reaches the keys behind
// (sim seed 20660: a member's scan stuck for 7 minutes behind 31 pointers).
func TestAScanPassesMoreSettledKeysAtOneInstantThanOneNextLists(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	at := now.Add(-time.Minute).Truncate(time.Millisecond)
	for i := range 30 {
		id, _ := task.NewID(at.Add(-time.Hour), strings.NewReader(fmt.Sprintf("%010d%06d", i, i)))
		if err := shards.Announce(ctx, st, &task.Task{ID: id, Shard: 0, AvailableAt: at}, at, -1); err != nil {
			t.Fatal(err)
		}
	}
	later, _ := task.NewID(now.Add(-time.Second), strings.NewReader(strings.Repeat("l", 16)))
	if _, err := st.Put(ctx, task.Key(0, later), []byte("{}"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s := shards.NewScan(0, at.Add(-time.Second), time.Hour)
	s.PageSize = 3
	for range 20 {
		c, err := s.Next(ctx, st, now, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range c {
			if x.ID == later {
				return
			}
			s.Seen(x, shards.Settled) // its task already ran: settled
		}
	}
	t.Fatal("20 scans never reached the task behind 30 settled pointers of one instant")
}

// A listing sent ahead (ListAhead) while the candidates of the last one
// are still being settled hands out what a Next made when it was sent
// would: none of the keys settled meanwhile, the ones still under way
// again (the caller knows them), the next ones after them; and it costs no
// LIST of its own.
func TestScanListedAheadIsTheNextListing(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	var ids []string
	for i := range 10 {
		id, _ := task.NewID(now.Add(time.Duration(i-20)*time.Second), strings.NewReader(strings.Repeat("a", 16)))
		if _, err := st.Put(ctx, task.Key(0, id), []byte("{}"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
	first, err := s.Next(ctx, st, now, 4)
	if err != nil || len(first) != 4 || first[0].ID != ids[0] || first[3].ID != ids[3] {
		t.Fatalf("first listing = %+v %v, want the 4 oldest", first, err)
	}
	a := s.ListAhead(ctx, st, now)
	<-a.Done()
	// Settled while the listing ran: the first three; the fourth is
	// still under way.
	for _, c := range first[:3] {
		s.Seen(c, shards.Settled)
	}
	lists := st.Counts().Of(s3store.OpList)
	next, err := s.NextAhead(ctx, st, now, 4, a)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range next {
		got = append(got, c.ID)
	}
	if want := ids[3:7]; !slices.Equal(got, want) {
		t.Errorf("listing ahead handed out %v, want %v: the one under way, then the next three", got, want)
	}
	if n := st.Counts().Of(s3store.OpList); n != lists {
		t.Errorf("NextAhead made %d LISTs of its own, want none", n-lists)
	}
	for _, c := range next {
		s.Seen(c, shards.Settled)
	}
	if rest, _ := s.Next(ctx, st, now, 10); len(rest) != 3 || rest[0].ID != ids[7] {
		t.Errorf("the listing after it = %+v, want the last 3", rest)
	}
}

// A member whose clock runs behind joins after the members already in the
// fleet: no member already on a shard moves (a joiner stamped before them
// would take their index, and their shard).
func TestAJoinerNeverTakesAnEarlierMembersPlace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ahead := shards.Member{ID: "w-ahead", Joined: t0.Add(900 * time.Millisecond), ExpiresAt: t0.Add(time.Hour)}
	f := shards.Fleet{Members: []shards.Member{ahead}}
	behind := clock.Interval{Earliest: t0.Add(-time.Second), Latest: t0.Add(500 * time.Millisecond)}
	joined := f.JoinTime(behind)
	if !joined.After(ahead.Joined) {
		t.Fatalf("JoinTime = %v, not after the member already in (%v)", joined, ahead.Joined)
	}
	f.Members = append(f.Members, shards.Member{ID: "a-behind", Joined: joined, ExpiresAt: t0.Add(time.Hour)})
	a, ok := f.Assign("w-ahead", behind, time.Second, 8)
	if !ok || a.Index != 0 || !slices.Equal(a.Own, []int{0}) {
		t.Fatalf("the first member's share after a join: %+v (ok %v), want index 0 owning shard 0", a, ok)
	}
	if later := (clock.Interval{Earliest: t0.Add(2 * time.Second), Latest: t0.Add(3 * time.Second)}); !f.JoinTime(later).Equal(later.Latest) {
		t.Fatalf("JoinTime(%v) = %v, want its latest", later, f.JoinTime(later))
	}
}
