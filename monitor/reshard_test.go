package monitor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A ready pointer written before pointers named their task's shard, left
// over from before a reshard, is resolved by trying each of the manifest's
// counts: the monitor finds its task where it was placed, keeps the pointer
// while the task is not due (a pointer to a task it could not find would
// go), and once the task is due announces it afresh with a pointer that
// names the shard.
func TestTheMonitorResolvesAnOldPointerAfterAReshard(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, err := producer.New(ctx, st, producer.Config{Shards: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for id == "" || task.ShardFor(id, 2) == task.ShardFor(id, 4) {
		if id, err = p.Submit(ctx, "t", nil, producer.Options{Delay: 5 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := shards.Reshard(ctx, st, 4); err != nil {
		t.Fatal(err)
	}
	m, err := monitor.New(ctx, st, monitor.Config{Interval: 5 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := task.NewID(*srv, strings.NewReader(strings.Repeat("0", 16)))
	old := shards.TasksPrefix(3) + at[:10] + "~" + id + ".ready"
	st.Put(ctx, old, nil, s3store.PutOptions{})
	ticks := func(n int) {
		for range n {
			*srv = srv.Add(5 * time.Second)
			if _, err := m.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ticks(30) // 2.5 minutes: past the pointer's grace, the task not due yet
	if _, err := st.Head(ctx, old); err != nil {
		t.Fatalf("the old pointer to a task not due yet was deleted (%v): the monitor did not find its task", err)
	}
	ticks(60) // 5 more minutes: the task is due
	if _, err := st.Head(ctx, old); err == nil {
		t.Fatal("the old pointer is still there")
	}
	announced := false
	for _, s := range []int{0, 1, 2, 3} {
		page, _ := st.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
		for _, o := range page.Objects {
			if ptr, err := shards.ParsePointerKey(o.Key); err == nil && ptr.ID == id {
				announced = ptr.Shard == task.ShardFor(id, 2)
			}
		}
	}
	if !announced {
		t.Fatal("the monitor did not announce the task afresh with a pointer naming its shard")
	}
}

// A monitor opened before a reshard learns the new count from the fleet
// object and sweeps the new shards: a task in shard 3 whose worker died is
// re-dispatched.
func TestTheMonitorLearnsANewShardCount(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	f := shards.Fleet{Members: []shards.Member{{ID: "w", Joined: *srv, ExpiresAt: srv.Add(time.Hour), Types: []string{"t"}}}}
	if _, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, shards.Fleet{}, "", func(x *shards.Fleet) bool { *x = f; return true }); err != nil {
		t.Fatal(err)
	}
	m, err := monitor.New(ctx, st, monitor.Config{Shards: 2, Interval: 5 * time.Second, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Reshard(ctx, st, 4); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(ctx, st, producer.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var v taskio.Versioned
	for v.Task == nil || v.Task.Shard != 3 {
		id, err := p.Submit(ctx, "t", nil, producer.Options{ShardKey: fmt.Sprint(time.Now().UnixNano()), Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		v, _ = taskio.LoadID(ctx, st, id, []int{4})
	}
	at, _ := clk.Now(ctx)
	if err := v.Task.ClaimBy("w", "claim-1", at.Latest); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 24; i++ { // two minutes: the lease expires, the task is stale
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := p.Get(ctx, v.Task.ID); got.Status != task.Pending {
		t.Fatalf("task in shard 3 is %s, want pending again: the monitor never swept the new shard", got.Status)
	}
}
