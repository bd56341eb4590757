package deps_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"

	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// A requeue whose task write loses a race is retried by the producer,
// and with it its admission to the slot. A retried admission must find
// the place the first one took: a canceled task requeued into its free
// slot holds it (pending), whether or not the task write was retried.
//
// Today the retry admits the task a second time: the first admission made
// it the holder, and AdmitRequeue reads a holder of the same id as the
// task's previous run, so it queues the task behind itself, at a new turn.
// The task is written blocked, and nothing runs the key until the
// monitor's CheckHolders passes the stale turn over, Grace (30s) after the
// slot's last write.
func TestSlotRequeueRetriedAfterALostRaceHoldsItsFreeSlot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lostRace bool
	}{{"first write lands", false}, {"first write loses a race", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				st := s3store.NewFaults(mem.New())
				p, err := producer.New(ctx, st, producer.Config{Shards: 1})
				if err != nil {
					t.Fatal(err)
				}
				id, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
				if tc.lostRace {
					// Another writer's change lands between the requeue's
					// read and its write: a 412, and the producer retries.
					st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Err: s3store.ErrPreconditionFailed, Times: 1})
				}
				if err := p.Requeue(ctx, id); err != nil {
					t.Fatal(err)
				}
				if got := status(t, p, id); got != task.Pending {
					t.Errorf("a task requeued into its free slot is %s, want pending", got)
				}
				s := readSlot(t, st, "k")
				if s.Holder == nil || s.Holder.ID != id || len(s.Queue) != 0 {
					t.Errorf("slot after the requeue: holder %+v, queue %+v; want the task as holder and no queue", s.Holder, s.Queue)
				}
			})
		})
	}
}

// readSlot reads the slot object of key.
func readSlot(t *testing.T, st s3store.Store, key string) deps.Slot {
	t.Helper()
	obj, err := st.Get(context.Background(), deps.SlotKey(key))
	if err != nil {
		t.Fatal(err)
	}
	var s deps.Slot
	if err := json.Unmarshal(obj.Body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
