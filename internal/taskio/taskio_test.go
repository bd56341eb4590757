package taskio_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// Every write keeps the size hint true, whatever the JSON's length: the
// size says the status exactly (task.StatusBySize), a pending task is a
// multiple of 4 bytes, a finished one odd. Scans, the monitor and its
// dashboard decide what to read, and what to count, by it.
func TestWritesKeepTheSizeHint(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	check := func(v taskio.Versioned, what string) {
		t.Helper()
		o, err := st.Head(ctx, v.Task.Key())
		if err != nil {
			t.Fatal(err)
		}
		pending, finished := task.PendingBySize(o.Size), task.FinishedBySize(o.Size)
		if s, ok := task.StatusBySize(o.Size); !ok || s != v.Task.Status {
			t.Fatalf("%s: %s task of %d bytes reads as %q by size", what, v.Task.Status, o.Size, s)
		}
		if pending != (v.Task.Status == task.Pending) || finished != v.Task.Status.Terminal() {
			t.Fatalf("%s: %s task of %d bytes reads as pending %v, finished %v", what, v.Task.Status, o.Size, pending, finished)
		}
		if got, err := taskio.Load(ctx, st, v.Task.Key()); err != nil || got.Task.Status != v.Task.Status {
			t.Fatalf("%s: the padded object does not load back: %v", what, err)
		}
	}
	newTask := func(n int, tag string) taskio.Versioned {
		t.Helper()
		id, err := task.NewID(now, strings.NewReader(strings.Repeat(tag+string(rune('a'+n)), 16)))
		if err != nil {
			t.Fatal(err)
		}
		input, _ := json.Marshal(strings.Repeat("x", n))
		tk, err := task.New(id, 0, task.Spec{Type: "t", Input: input}, now)
		if err != nil {
			t.Fatal(err)
		}
		v, err := taskio.Create(ctx, st, clock.System(), tk)
		if err != nil {
			t.Fatal(err)
		}
		check(v, "submitted")
		return v
	}
	update := func(v taskio.Versioned, what string) taskio.Versioned {
		t.Helper()
		v, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag)
		if err != nil {
			t.Fatal(err)
		}
		check(v, what)
		return v
	}
	for n := range 16 { // inputs of every length modulo 8, twice over
		for _, end := range []task.Status{task.Succeeded, task.Dead} {
			v := newTask(n, string(end[:1]))
			if err := v.Task.ClaimBy("w", "c1", now); err != nil {
				t.Fatal(err)
			}
			v = update(v, "claimed")
			var err error
			if end == task.Succeeded {
				err = v.Task.Succeed("c1", nil, now)
			} else {
				err = v.Task.Fail("c1", "boom", true, now, func() float64 { return 0.5 })
			}
			if err != nil {
				t.Fatal(err)
			}
			update(v, string(end))
		}
		v := newTask(n, "c")
		if _, err := v.Task.Cancel(now); err != nil {
			t.Fatal(err)
		}
		update(v, "canceled")
		// A deadline: its field and the dead write that ends the task
		// unstarted keep the hint too.
		v = newTask(n, "l")
		v.Task.Deadline = now.Add(time.Duration(n) * time.Millisecond)
		v = update(v, "with a deadline")
		if err := v.Task.MissDeadline(now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		update(v, "past its deadline")
	}
}

// A write whose response is lost, so that the store's retry meets the
// write itself and reports 412, is the caller's write all the same; a 412
// from someone else's write is not. Both creates and updates.
func TestALostResponseIsToldApartFromALostRace(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	now := time.Now()
	id, _ := task.NewID(now, strings.NewReader(strings.Repeat("q", 16)))
	tk, err := task.New(id, 0, task.Spec{Type: "t"}, now)
	if err != nil {
		t.Fatal(err)
	}
	lost := s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1}

	st.Inject(lost)
	v, err := taskio.Create(ctx, st, clock.System(), tk)
	if err != nil {
		t.Fatalf("create whose response was lost: %v", err)
	}
	other, _ := task.New(id, 0, task.Spec{Type: "t"}, now.Add(time.Millisecond)) // another producer, the same id
	if _, err := taskio.Create(ctx, st, clock.System(), other); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("a second create of the same id: got %v, want a precondition failure", err)
	}

	mine := v.Task.Clone()
	if err := mine.ClaimBy("w1", "claim-1", now); err != nil {
		t.Fatal(err)
	}
	st.Inject(lost)
	got, err := taskio.Update(ctx, st, clock.System(), mine, v.ETag)
	if err != nil {
		t.Fatalf("claim whose response was lost: %v", err)
	}
	if cur, _ := taskio.Load(ctx, st, tk.Key()); cur.ETag != got.ETag || cur.Task.Claim.ID != "claim-1" {
		t.Fatalf("the claim that landed is %+v at %s, reported %s", cur.Task.Claim, cur.ETag, got.ETag)
	}

	theirs := v.Task.Clone() // a second claimant who read the same version
	if err := theirs.ClaimBy("w2", "claim-2", now); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), theirs, v.ETag); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("a claim that lost the race: got %v, want a precondition failure", err)
	}
}

// When the read-back fails too (the outage that lost the response goes
// on), it is tried again: a producer told "failed" about a task that
// exists would submit it twice.
func TestALostResponseIsRecognisedThroughAFailingReadBack(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	now := time.Now()
	id, _ := task.NewID(now, strings.NewReader(strings.Repeat("r", 16)))
	tk, err := task.New(id, 0, task.Spec{Type: "t"}, now)
	if err != nil {
		t.Fatal(err)
	}
	st.Inject(s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrInjected500, AfterWrite: true, Times: 1})
	st.Inject(s3store.Fault{Op: s3store.OpGet, Err: s3store.ErrInjected503, Times: 2})
	if _, err := taskio.Create(ctx, st, clock.System(), tk); err != nil {
		t.Fatalf("a create that landed, its response lost and its first reads back failing: %v", err)
	}
}

// When every read back fails (4 over 2.1 s), a write whose request may
// have landed has an unknown outcome (ErrUnknownOutcome), which is no lost
// race: a 412 to an If-Match write may be the store's retry meeting the
// write itself. A 412 to a create stays one: the key exists.
func TestAWriteThatCannotBeReadBackHasAnUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	for _, tc := range []struct {
		name    string
		err     error
		create  bool
		unknown bool
	}{
		{"a create answered 500", s3store.ErrInjected500, true, true},
		{"an update answered 500", s3store.ErrInjected500, false, true},
		{"an update answered 412", s3store.ErrPreconditionFailed, false, true},
		{"a create answered 412", s3store.ErrPreconditionFailed, true, false},
		{"an update answered 409", s3store.ErrConflict, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := s3store.NewFaults(mem.New())
				id, _ := task.NewID(now, strings.NewReader(strings.Repeat("u", 16)))
				tk, err := task.New(id, 0, task.Spec{Type: "t"}, now)
				if err != nil {
					t.Fatal(err)
				}
				write := func() error {
					_, err := taskio.Create(ctx, st, clock.System(), tk)
					return err
				}
				if tc.create && errors.Is(tc.err, s3store.ErrPreconditionFailed) {
					// The key exists: someone's create (ours, its response
					// lost, or another's) got there first.
					if err := write(); err != nil {
						t.Fatal(err)
					}
				}
				if !tc.create {
					v, err := taskio.Create(ctx, st, clock.System(), tk)
					if err != nil {
						t.Fatal(err)
					}
					mine := v.Task.Clone()
					if err := mine.ClaimBy("w", "c", now); err != nil {
						t.Fatal(err)
					}
					write = func() error {
						_, err := taskio.Update(ctx, st, clock.System(), mine, v.ETag)
						return err
					}
				}
				// A 500 or an update's 412 after the write applied (its
				// response lost); a 409, or a create's 412, refused it.
				landed := !errors.Is(tc.err, s3store.ErrConflict) && !(tc.create && errors.Is(tc.err, s3store.ErrPreconditionFailed))
				st.Inject(s3store.Fault{Op: s3store.OpPut, Err: tc.err, AfterWrite: landed, Times: 1})
				st.Inject(s3store.Fault{Op: s3store.OpGet, Err: s3store.ErrInjected503, Times: 4})
				err = write()
				if got := errors.Is(err, taskio.ErrUnknownOutcome); got != tc.unknown || err == nil {
					t.Fatalf("error %v: unknown outcome %v, want %v", err, got, tc.unknown)
				}
				if tc.unknown && s3store.LostRace(err) {
					t.Fatalf("error %v: a lost race, want none", err)
				}
			})
		})
	}
}

// A write that landed with its response lost, and that someone else has
// written over since (a worker claimed the task just created, a cancel was
// requested of the task just claimed), still landed; the ETag it reports
// makes the next conditional write fail, so its caller re-reads.
func TestALostResponseIsRecognisedAfterTheTaskMovedOn(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	st := s3store.NewFaults(inner)
	now := time.Now()
	id, _ := task.NewID(now, strings.NewReader(strings.Repeat("s", 16)))
	tk, err := task.New(id, 0, task.Spec{Type: "t"}, now)
	if err != nil {
		t.Fatal(err)
	}
	// meanwhile is what another process does between the write and its
	// read-back.
	meanwhile := func(change func(*task.Task) error) {
		st.Inject(s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrInjected500, AfterWrite: true, Times: 1})
		st.Inject(s3store.Fault{Op: s3store.OpGet, Times: 1, Hook: func(string) {
			v, err := taskio.Load(ctx, inner, tk.Key())
			if err == nil {
				err = change(v.Task)
			}
			if err == nil {
				_, err = taskio.Update(ctx, inner, clock.System(), v.Task, v.ETag)
			}
			if err != nil {
				t.Errorf("meanwhile: %v", err)
			}
		}})
	}

	meanwhile(func(x *task.Task) error { return x.ClaimBy("w2", "theirs", now) })
	v, err := taskio.Create(ctx, st, clock.System(), tk)
	if err != nil {
		t.Fatalf("a create that landed and was claimed before its read-back: %v", err)
	}
	if v.ETag != taskio.StaleETag {
		t.Fatalf("create: reported ETag %q, want the stale marker", v.ETag)
	}

	cur, _ := taskio.Load(ctx, inner, tk.Key())
	done := cur.Task.Clone()
	if err := done.Fail("theirs", "boom", false, now.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	meanwhile(func(x *task.Task) error { _, err := x.Cancel(now.Add(2 * time.Second)); return err })
	if _, err := taskio.Update(ctx, st, clock.System(), done, cur.ETag); err != nil {
		t.Fatalf("an update that landed and was written over before its read-back: %v", err)
	}

	late := cur.Task.Clone() // a write that lost the race is still told so
	if err := late.Succeed("theirs", nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), late, cur.ETag); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("a write that lost the race: got %v, want a precondition failure", err)
	}
}

// A task stays in the shard it was placed in when the queue is resharded:
// LoadID finds it by trying each count, and pays a GET per count tried.
func TestLoadIDFindsATaskPlacedUnderAnEarlierShardCount(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	i := 0 // every id drawn is new
	place := func(n int, differ bool) string {
		t.Helper()
		for {
			i++
			id, err := task.NewID(now, strings.NewReader(strings.Repeat(string(rune('a'+i%26)), 8)+strings.Repeat(string(rune('A'+i/26)), 8)))
			if err != nil {
				t.Fatal(err)
			}
			if (task.ShardFor(id, 16) != task.ShardFor(id, 32)) != differ {
				continue
			}
			tk, err := task.New(id, task.ShardFor(id, n), task.Spec{Type: "t"}, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := taskio.Create(ctx, st, clock.System(), tk); err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	old := place(16, true)   // placed under 16 shards, somewhere else under 32
	cur := place(32, true)   // placed under 32 shards
	same := place(16, false) // in the same shard under both
	counts := []int{32, 16}  // the manifest's Counts after 16 -> 32
	for _, tc := range []struct {
		name string
		id   string
		gets int64
	}{{"a task placed under the current count", cur, 1}, {"a task placed under an older count", old, 2}, {"a task whose shard did not move", same, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			ctr := s3store.NewCounter(st)
			v, err := taskio.LoadID(ctx, ctr, tc.id, counts)
			if err != nil || v.Task.ID != tc.id {
				t.Fatalf("LoadID: %v", err)
			}
			if c := ctr.Counts(); c.Total() != tc.gets || c.Of(s3store.OpGet) != tc.gets {
				t.Fatalf("LoadID made %s, want %d GET", c, tc.gets)
			}
		})
	}
	t.Run("an unknown id is not found under any count", func(t *testing.T) {
		id, _ := task.NewID(now, strings.NewReader(strings.Repeat("z", 16)))
		if _, err := taskio.LoadID(ctx, st, id, counts); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("LoadID of an unknown id: %v, want not found", err)
		}
	})
}
