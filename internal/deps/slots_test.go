package deps_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// slotSetup is a one-shard queue with a producer, and the Env a worker
// or monitor passes ends on with.
func slotSetup(t *testing.T) (*producer.Producer, deps.Env, s3store.Store) {
	t.Helper()
	st := mem.New()
	p, err := producer.New(context.Background(), st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := clock.New(st, clock.Config{})
	return p, deps.Env{Store: st, Local: clock.System(), Now: c.Now, Counts: []int{1}}, st
}

func status(t *testing.T, p *producer.Producer, id string) task.Status {
	t.Helper()
	tk, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Status
}

// end records a task's end as a worker would (here: canceled) and passes
// its slot on.
func end(t *testing.T, p *producer.Producer, id string) {
	t.Helper()
	if _, err := p.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func TestSlotQueueIsFIFOAndAdvancesOnTheHoldersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, _, _ := slotSetup(t)
		var ids []string
		for range 3 {
			id, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "customer-42"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		want := []task.Status{task.Pending, task.Blocked, task.Blocked}
		for i, id := range ids {
			if got := status(t, p, id); got != want[i] {
				t.Errorf("task %d is %s, want %s", i, got, want[i])
			}
		}
		end(t, p, ids[0])
		if got := status(t, p, ids[1]); got != task.Pending {
			t.Errorf("after the holder ended, the first waiting task is %s, want pending", got)
		}
		if got := status(t, p, ids[2]); got != task.Blocked {
			t.Errorf("the second waiting task is %s, want still blocked", got)
		}
		// Another key is independent.
		other, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "customer-7"})
		if err != nil || status(t, p, other) != task.Pending {
			t.Errorf("a task of another key: %v, %s", err, status(t, p, other))
		}
	})
}

func TestSlotReplaceAndDropIfRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, _, st := slotSetup(t)
		holder, _ := p.Submit(ctx, "job", nil, producer.Options{Slot: "doc"})
		waiting, _ := p.Submit(ctx, "job", nil, producer.Options{Slot: "doc"})
		latest, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "doc", Admission: "replace"})
		if err != nil {
			t.Fatal(err)
		}
		if got := status(t, p, waiting); got != task.Canceled {
			t.Errorf("the replaced task is %s, want canceled", got)
		}
		// The holder was pending: asked to stop, it is canceled at once,
		// and the slot passes to the latest.
		if got := status(t, p, holder); got != task.Canceled {
			t.Errorf("the holder is %s, want canceled (asked to stop)", got)
		}
		if got := status(t, p, latest); got != task.Pending {
			t.Errorf("the latest is %s, want pending", got)
		}
		before, _ := st.List(ctx, "tasks/", s3store.ListOptions{})
		_, err = p.Submit(ctx, "job", nil, producer.Options{Slot: "doc", Admission: "drop-if-running"})
		if !errors.Is(err, producer.ErrSlotBusy) {
			t.Errorf("drop-if-running on a busy slot: %v, want ErrSlotBusy", err)
		}
		after, _ := st.List(ctx, "tasks/", s3store.ListOptions{})
		if len(after.Objects) != len(before.Objects) {
			t.Errorf("a refused submit created an object: %d tasks, then %d", len(before.Objects), len(after.Objects))
		}
		end(t, p, latest)
		if _, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "doc", Admission: "drop-if-running"}); err != nil {
			t.Errorf("drop-if-running on a free slot: %v", err)
		}
	})
}

// A submit that died between its slot write and its task write leaves a
// holder that never lands: the monitor's check passes it over after the
// grace period, and the task waiting behind it runs.
func TestSlotHolderThatNeverLandedIsPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, e, _ := slotSetup(t)
		ghost := deps.Member{ID: "01JNQ7ZK3M8X2V4T6R9W1Y5B0C", Shard: 0}
		if _, err := e.Admit(ctx, "k", ghost, deps.AdmitQueue); err != nil {
			t.Fatal(err)
		}
		waiting, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil || status(t, p, waiting) != task.Blocked {
			t.Fatalf("the task behind the ghost: %v %s", err, status(t, p, waiting))
		}
		seen := map[string]string{}
		if err := e.CheckHolders(ctx, seen); err != nil {
			t.Fatal(err)
		}
		if got := status(t, p, waiting); got != task.Blocked {
			t.Errorf("within the grace period the ghost keeps the slot; the task is %s", got)
		}
		time.Sleep(deps.Grace + 5*time.Second)
		if err := e.CheckHolders(ctx, seen); err != nil {
			t.Fatal(err)
		}
		if got := status(t, p, waiting); got != task.Pending {
			t.Errorf("after the grace period the task is %s, want pending", got)
		}
	})
}
