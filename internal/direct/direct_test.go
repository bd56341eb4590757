package direct_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

var t0 = time.Date(2026, 11, 26, 10, 30, 15, 0, time.UTC)

func id(t *testing.T, at time.Time, b byte) string {
	t.Helper()
	s, err := task.NewID(at, strings.NewReader(strings.Repeat(string(rune('A'+b)), 10)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func put(t *testing.T, st s3store.Store, key string) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, nil, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestEntryKeysRoundTrip(t *testing.T) {
	tid := id(t, t0, 0)
	k := direct.EntryKey("w-1", t0, tid, 7)
	if want := "inbox/w-1/20261126-1030/" + tid + "~007"; k != want {
		t.Fatalf("EntryKey = %q, want %q", k, want)
	}
	e, err := direct.ParseEntry(k)
	if err != nil || e.Worker != "w-1" || e.ID != tid || e.Shard != 7 || !e.At.Equal(t0.Truncate(time.Minute)) {
		t.Fatalf("ParseEntry(%q) = %+v, %v", k, e, err)
	}
	o := direct.OverflowKey(e.Bucket, e.ID, e.Shard)
	if e2, err := direct.ParseEntry(o); err != nil || e2.Worker != "" || e2.ID != tid || e2.Shard != 7 {
		t.Fatalf("ParseEntry(%q) = %+v, %v", o, e2, err)
	}
	for _, bad := range []string{"inbox/w/20261126-1030/" + tid, "inbox/w/2026-11-26/" + tid + "~007", "inbox/w/20261126-1030/nope~007",
		"overflow/20261126-1030/" + tid + "~7", "tasks/000/" + tid + ".json", "inbox/a~b/20261126-1030/" + tid + "~007"} {
		if _, err := direct.ParseEntry(bad); err == nil {
			t.Errorf("ParseEntry(%q) accepted a malformed key", bad)
		}
	}
	if err := direct.CheckWorkerID("a/b"); err == nil {
		t.Error("a worker id with '/' was accepted")
	}
}

// The inbox scan finds every entry due by now from its cursor, in bucket
// order, with one LIST; stops at the first bucket to come; never moves
// its cursor past an entry not yet handled; and a fresh scan starts at
// the current bucket (trailing by its lag).
func TestInboxScanNeverSkipsABucket(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := t0
	old := id(t, now.Add(-3*time.Hour), 1)
	recent := id(t, now.Add(-2*time.Minute), 2)
	due := id(t, now.Add(-time.Second), 3)
	later := id(t, now.Add(2*time.Minute), 4)
	for _, e := range []struct {
		tid string
		at  time.Time
	}{{old, now.Add(-3 * time.Hour)}, {recent, now.Add(-2 * time.Minute)}, {due, now.Add(-time.Second)}, {later, now.Add(2 * time.Minute)}} {
		put(t, st, direct.EntryKey("w", e.at, e.tid, 0))
	}
	// A worker resuming a cursor from 4 hours ago finds all three due.
	s, capped := direct.NewScan(direct.Inbox("w"), direct.Bucket(now.Add(-4*time.Hour)), now, time.Minute, false)
	if capped {
		t.Fatal("a 4h-old cursor was capped")
	}
	before := st.Counts()
	cands, err := s.Next(ctx, st, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if lists := st.Counts().Sub(before).Of(s3store.OpList); lists != 1 {
		t.Errorf("%d LISTs for one scan, want 1", lists)
	}
	var got []string
	for _, c := range cands {
		got = append(got, c.ID)
		if !c.Inbox || !c.Pointer || c.Shard != 0 {
			t.Errorf("candidate %+v: want an inbox entry naming shard 0", c)
		}
	}
	if strings.Join(got, " ") != strings.Join([]string{old, recent, due}, " ") {
		t.Fatalf("scan found %v, want the three due entries in time order", got)
	}
	// Unhandled, the oldest holds the cursor.
	if c := s.Cursor(); c != direct.Bucket(now.Add(-3*time.Hour)) {
		t.Errorf("cursor %s, want the oldest unhandled entry's bucket", c)
	}
	// Handled (deleted by the claimer), the cursor trails now by the lag.
	for _, c := range cands {
		s.Seen(c, c.ETag)
		if err := st.Delete(ctx, c.Key, s3store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if cands, _ := s.Next(ctx, st, now, 100); len(cands) != 0 {
		t.Fatalf("handled entries listed again: %v", cands)
	}
	if c := s.Cursor(); c != direct.Bucket(now.Add(-time.Minute)) {
		t.Errorf("cursor %s, want %s (now less the lag)", c, direct.Bucket(now.Add(-time.Minute)))
	}
	// An entry that lands late in the bucket before the current one is found.
	late := id(t, now.Add(-50*time.Second), 5)
	put(t, st, direct.EntryKey("w", now.Add(-50*time.Second), late, 0))
	if cands, _ := s.Next(ctx, st, now, 100); len(cands) != 1 || cands[0].ID != late {
		t.Fatalf("a late entry in an earlier bucket: found %v", cands)
	}
	// The future bucket's entry comes when its minute does.
	if cands, _ := s.Next(ctx, st, now.Add(3*time.Minute), 100); len(cands) != 2 || cands[1].ID != later {
		t.Fatalf("at its minute, found %v, want the late one and %s", cands, later)
	}

	// A fresh scan starts at the current bucket, less the lag.
	fresh, _ := direct.NewScan(direct.Inbox("w"), "", now, time.Minute, false)
	if c := fresh.Cursor(); c != direct.Bucket(now.Add(-time.Minute)) {
		t.Errorf("fresh cursor %s, want %s", c, direct.Bucket(now.Add(-time.Minute)))
	}
	// A cursor older than 24h is capped.
	capScan, capped := direct.NewScan(direct.Inbox("w"), direct.Bucket(now.Add(-72*time.Hour)), now, time.Minute, false)
	if !capped || capScan.Cursor() != direct.Bucket(now.Add(-direct.MaxCursorAge)) {
		t.Errorf("a 72h-old cursor: capped %v at %s, want capped at %s", capped, capScan.Cursor(), direct.Bucket(now.Add(-direct.MaxCursorAge)))
	}
}

// holdLease writes worker w's lease as a live worker would, expiring at
// expires (S3 time), with its record.
func holdLease(t *testing.T, st s3store.Store, w string, types []string, expires time.Time) {
	t.Helper()
	rec, _ := json.Marshal(direct.Record{Worker: w, Types: types})
	body, _ := json.Marshal(map[string]any{"holder": w + "#1", "epoch": 1, "version": 1, "expires_at": expires, "data": json.RawMessage(rec)})
	if _, err := st.Put(context.Background(), direct.LeaseKey(w), body, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Recovery moves a dead worker's inbox to the overflow, leaves a live
// one's alone, is idempotent, and forgets the dead worker's lease an hour
// after its expiry.
func TestRecoverMovesDeadInboxesOnly(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := clock.Interval{Earliest: t0, Latest: t0.Add(time.Second)}
	holdLease(t, st, "live", []string{"job"}, t0.Add(time.Minute))
	holdLease(t, st, "dead", []string{"job"}, t0.Add(-time.Minute))
	var ids []string
	for i := range 3 {
		tid := id(t, t0.Add(time.Duration(i)*time.Hour), byte(i))
		ids = append(ids, tid)
		put(t, st, direct.EntryKey("dead", t0.Add(time.Duration(i)*time.Hour), tid, 1))
	}
	put(t, st, direct.EntryKey("live", t0, id(t, t0, 9), 1))
	for pass := range 2 {
		rec, err := direct.Recover(ctx, st, now, time.Second, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int{0: 3, 1: 0}[pass]; rec.Moved != want || rec.Forgotten != 0 {
			t.Errorf("pass %d: %+v, want %d moved, nothing forgotten", pass, rec, want)
		}
	}
	list := func(prefix string) []string {
		page, _ := st.List(ctx, prefix, s3store.ListOptions{})
		var out []string
		for _, o := range page.Objects {
			out = append(out, o.Key)
		}
		return out
	}
	if got := list(direct.Inbox("dead")); len(got) != 0 {
		t.Errorf("dead inbox still holds %v", got)
	}
	if got := list(direct.Inbox("live")); len(got) != 1 {
		t.Errorf("live inbox holds %v, want its one entry", got)
	}
	over := list(direct.OverflowPrefix)
	if len(over) != 3 {
		t.Fatalf("overflow holds %v, want the dead worker's 3 entries", over)
	}
	for i, k := range over {
		if e, err := direct.ParseEntry(k); err != nil || e.ID != ids[i] || e.Shard != 1 {
			t.Errorf("overflow entry %q: %+v %v", k, e, err)
		}
	}
	// An hour after its expiry the lease and doorbell go, after a last move.
	put(t, st, direct.BellKey("dead"))
	late := clock.Interval{Earliest: t0.Add(direct.ForgetAfter + time.Minute), Latest: t0.Add(direct.ForgetAfter + time.Minute)}
	holdLease(t, st, "live", []string{"job"}, late.Latest.Add(time.Minute))
	if rec, err := direct.Recover(ctx, st, late, time.Second, 0, true); err != nil || rec.Forgotten != 1 {
		t.Fatalf("late pass: %+v %v, want the dead lease forgotten", rec, err)
	}
	if _, err := lease.Peek(ctx, st, direct.LeaseKey("dead")); err == nil {
		t.Error("the dead worker's lease was kept")
	}
	if _, err := st.Head(ctx, direct.BellKey("dead")); err == nil {
		t.Error("the dead worker's doorbell was kept")
	}
	if _, err := lease.Peek(ctx, st, direct.LeaseKey("live")); err != nil {
		t.Errorf("the live lease: %v", err)
	}
}

// A producer routes only to live workers that run the type: round robin
// in turn, hash by the task id, random among them; none live is false.
func TestDirectorySelection(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	local := clock.NewManual(t0)
	now := clock.Interval{Earliest: t0, Latest: t0}
	holdLease(t, st, "a", []string{"job"}, t0.Add(time.Minute))
	holdLease(t, st, "b", []string{"job", "other"}, t0.Add(time.Minute))
	holdLease(t, st, "c", []string{"other"}, t0.Add(time.Minute))
	holdLease(t, st, "d", []string{"job"}, t0.Add(-time.Minute)) // expired
	d := &direct.Directory{St: st, Local: local, TTL: 30 * time.Second, Margin: time.Second, Selection: direct.RoundRobin,
		IntN: func(n int) int { return n - 1 }}
	before := st.Counts()
	seen := map[string]int{}
	for range 10 {
		w, ok, err := d.Pick(ctx, now, "job", "x")
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		seen[w.Worker]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Errorf("round robin picked %v, want a and b 5 times each", seen)
	}
	c := st.Counts().Sub(before)
	if c.Of(s3store.OpList) != 1 || c.Of(s3store.OpGet) != 4 {
		t.Errorf("10 picks within the TTL cost %s, want one LIST and a GET per lease", c)
	}
	if _, ok, _ := d.Pick(ctx, now, "nobody", "x"); ok {
		t.Error("picked a worker for a type nobody runs")
	}
	d.Selection = direct.Hash
	w1, _, _ := d.Pick(ctx, now, "job", "task-1")
	for range 5 {
		if w2, _, _ := d.Pick(ctx, now, "job", "task-1"); w2.Worker != w1.Worker {
			t.Fatalf("hash picked %s then %s for one task", w1.Worker, w2.Worker)
		}
	}
	d.Selection = direct.Random
	if w, _, _ := d.Pick(ctx, now, "job", "x"); w.Worker != "b" {
		t.Errorf("random picked %s, want the draw's (the last live one, b)", w.Worker)
	}
	// Once the TTL has passed, the view is read again.
	local.Advance(31 * time.Second)
	before = st.Counts()
	d.Pick(ctx, now, "job", "x")
	if c := st.Counts().Sub(before); c.Of(s3store.OpList) != 1 {
		t.Errorf("a pick after the TTL cost %s, want a new LIST", c)
	}
}

// holdBusy is holdLease for a worker whose slots were all taken.
func holdBusy(t *testing.T, st s3store.Store, w string, types []string, expires time.Time) {
	t.Helper()
	rec, _ := json.Marshal(direct.Record{Worker: w, Types: types, Busy: true})
	body, _ := json.Marshal(map[string]any{"holder": w + "#1", "epoch": 1, "version": 1, "expires_at": expires, "data": json.RawMessage(rec)})
	if _, err := st.Put(context.Background(), direct.LeaseKey(w), body, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Producers prefer workers that are not busy while there are any; a busy
// worker hands on only to one that is not busy and runs all its types.
func TestDirectoryPrefersWorkersThatAreNotBusy(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := clock.Interval{Earliest: t0, Latest: t0}
	holdBusy(t, st, "a", []string{"job"}, t0.Add(time.Minute))
	holdLease(t, st, "b", []string{"job"}, t0.Add(time.Minute))
	holdLease(t, st, "c", []string{"other"}, t0.Add(time.Minute))
	d := &direct.Directory{St: st, Local: clock.NewManual(t0), TTL: time.Minute, Margin: time.Second, Selection: direct.RoundRobin,
		IntN: func(int) int { return 0 }}
	for range 4 {
		if w, ok, _ := d.Pick(ctx, now, "job", "x"); !ok || w.Worker != "b" {
			t.Fatalf("picked %s, want b (a is busy)", w.Worker)
		}
	}
	if w, ok, _ := d.Other(ctx, now, "b", []string{"job"}); ok {
		t.Errorf("b handed on to %s; a is busy and c does not run job", w.Worker)
	}
	if w, ok, _ := d.Other(ctx, now, "a", []string{"job"}); !ok || w.Worker != "b" {
		t.Errorf("a handed on to %q, want b", w.Worker)
	}
	// With every worker busy, producers still route to one.
	holdBusy(t, st, "b", []string{"job"}, t0.Add(time.Minute))
	d.Forget()
	if _, ok, _ := d.Pick(ctx, now, "job", "x"); !ok {
		t.Error("no worker picked while all are busy")
	}
}

// An entry written again after it was handled and deleted (a move to the
// overflow that landed late) is handed out again, although every entry is
// an empty object with the same ETag (the simulator's seed 160038 left
// two overflow entries behind when the scan remembered ETags).
func TestAnEntryWrittenAgainIsHandedOutAgain(t *testing.T) {
	ctx := context.Background()
	st := emptyMD5{mem.New()}
	tid := id(t, t0, 1)
	key := direct.OverflowKey(direct.Bucket(t0), tid, 0)
	put(t, st, key)
	s, _ := direct.NewScan(direct.OverflowPrefix, "", t0, 0, true)
	cands, err := s.Next(ctx, st, t0.Add(time.Minute), 10)
	if err != nil || len(cands) != 1 {
		t.Fatalf("first listing: %v %v", cands, err)
	}
	s.Seen(cands[0], cands[0].ETag)
	if err := st.Delete(ctx, key, s3store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	put(t, st, key)
	if again, _ := s.Next(ctx, st, t0.Add(time.Minute), 10); len(again) != 1 {
		t.Fatalf("the entry written again was not handed out: %v", again)
	}
}

// emptyMD5 lists every object with the ETag S3 gives an empty body, its
// MD5, as S3 does for every inbox and overflow entry (the in-memory store
// makes each write's ETag unique).
type emptyMD5 struct{ s3store.Store }

func (e emptyMD5) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	page, err := e.Store.List(ctx, prefix, opts)
	for i := range page.Objects {
		page.Objects[i].ETag = "d41d8cd98f00b204e9800998ecf8427e"
	}
	return page, err
}

// deleteIgnoring ignores If-Match on DELETE, as MinIO and gofakes3 do.
type deleteIgnoring struct{ s3store.Store }

func (s deleteIgnoring) Delete(ctx context.Context, key string, _ s3store.DeleteOptions) error {
	return s.Store.Delete(ctx, key, s3store.DeleteOptions{})
}

// Forgetting a dead worker's lease races a process that takes the worker
// id over, at each of the forget's writes. Whatever the provider does with
// a conditional DELETE, the takeover either lands first and keeps its
// lease (the forget leaves it), or is refused while the forget is on its
// way and then takes the id once the lease is gone: a fresh lease is never
// deleted under its holder. (Where conditional DELETE is ignored, the
// forget's DELETE If-Match deleted a lease taken over since its read.)
func TestForgettingALeaseNeverDeletesATakeover(t *testing.T) {
	for _, provider := range []string{s3store.DeleteIgnored, s3store.DeleteHonoured} {
		for _, race := range []string{"at its first write", "just before its delete"} {
			t.Run(provider+"/"+race, func(t *testing.T) {
				ctx := context.Background()
				mst := mem.New()
				server := t0.Add(direct.ForgetAfter + time.Minute)
				mst.SetNow(func() time.Time { return server })
				var base s3store.Store = mst
				if provider == s3store.DeleteIgnored {
					base = deleteIgnoring{mst}
				}
				holdLease(t, base, "w1", []string{"job"}, t0.Add(-time.Minute))
				faulty := s3store.NewFaults(base)
				clk := clock.New(mst, clock.Config{})
				next := lease.New(base, clk, direct.LeaseKey("w1"), "w1#2", lease.Config{TTL: 20 * time.Second, Margin: time.Second})
				fired := false
				var takeover error
				take := func(string) {
					if !fired {
						fired = true
						takeover = next.Acquire(ctx)
					}
				}
				ops := []s3store.Op{s3store.OpPut, s3store.OpDelete}
				if race == "just before its delete" {
					ops = ops[1:]
				}
				for _, op := range ops {
					faulty.Inject(s3store.Fault{Op: op, KeyPrefix: direct.LeaseKey("w1"), Times: 1, Hook: take})
				}
				now := clock.Interval{Earliest: server, Latest: server.Add(time.Second)}
				if _, err := direct.Recover(ctx, faulty, now, time.Second, 0, provider == s3store.DeleteHonoured); err != nil {
					t.Fatal(err)
				}
				if !fired {
					t.Fatal("the forget made no write to the lease: the race was not exercised")
				}
				switch {
				case takeover == nil:
					if err := next.Renew(ctx); err != nil {
						t.Fatalf("the takeover's lease, after the forget: %v", err)
					}
				case errors.Is(takeover, lease.ErrHeld):
					// Refused while the forget was on its way: the id is
					// free once it is done.
					if err := next.Acquire(ctx); err != nil {
						t.Fatalf("acquire after the forget: %v", err)
					}
				default:
					t.Fatalf("takeover: %v", takeover)
				}
			})
		}
	}
}
