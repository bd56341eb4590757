package monitor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

// The repair does not announce (nor keep reading) the pending tasks of a
// paused type: they are pending on purpose. Once the type is resumed, the
// next repair announces them like any task that lost its way.
func TestRepairSkipsPausedTypesUntilTheResume(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	local := clock.NewManual(time.Now())
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	if _, err := pause.Change(ctx, st, *srv, "test", "", pause.Pausing("mail")); err != nil {
		t.Fatal(err)
	}
	p.Submit(ctx, "mail", nil, producer.Options{})
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, RepairAfter: time.Minute, Clock: clk, Local: local})
	m.Tick(ctx)
	for range 3 {
		*srv = srv.Add(2 * time.Minute)
		local.Advance(2 * time.Minute)
		m.Tick(ctx)
	}
	if s := m.Stats(); s.Repaired != 0 || s.Loaded > 1 {
		t.Fatalf("while paused the repair announced %d and read %d tasks, want none announced and one read (to learn the type)", s.Repaired, s.Loaded)
	}
	if _, err := pause.Change(ctx, st, *srv, "test", "", pause.Resuming("mail")); err != nil {
		t.Fatal(err)
	}
	*srv = srv.Add(2 * time.Minute)
	local.Advance(2 * time.Minute)
	m.Tick(ctx)
	if s := m.Stats(); s.Repaired != 1 {
		t.Fatalf("after the resume the repair announced %d tasks, want 1", s.Repaired)
	}
}

// pointerWrites counts the writes and deletes of ready pointers and the
// GETs of task objects.
type pointerWrites struct {
	s3store.Store
	puts, deletes, taskGets int
}

func (s *pointerWrites) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if shards.IsPointer(key) {
		s.puts++
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *pointerWrites) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	if shards.IsPointer(key) {
		s.deletes++
	}
	return s.Store.Delete(ctx, key, opts)
}

func (s *pointerWrites) Get(ctx context.Context, key string) (s3store.Object, error) {
	if strings.HasPrefix(key, "tasks/") {
		s.taskGets++
	}
	return s.Store.Get(ctx, key)
}

// A ready pointer to a pending task of a paused type (or of a paused queue)
// is left where it is while the pause lasts: not replaced by a fresh one
// every repair_after (a PUT and a DELETE each time, and a new key ahead of
// every scan and sweep), nor deleted. The monitor does not keep reading the
// task either. After the resume the pointer is dealt with as usual and the
// task is announced.
func TestAPointerToAPausedTaskIsLeftAloneWhilePaused(t *testing.T) {
	for _, c := range []struct {
		name         string
		whole, fresh bool
	}{{"type", false, false}, {"queue", true, false}, {"type, a monitor started during the pause", false, true}} {
		whole := c.whole
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem, srv, clk := fakeTime()
			st := &pointerWrites{Store: mem}
			local := clock.NewManual(time.Now())
			p, _ := producer.New(ctx, mem, producer.Config{Shards: 1})
			id, _ := p.Submit(ctx, "mail", nil, producer.Options{})
			m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, RepairAfter: time.Minute, Clock: clk, Local: local})
			step := func(d time.Duration) {
				for range d / (5 * time.Second) {
					*srv = srv.Add(5 * time.Second)
					local.Advance(5 * time.Second)
					if _, err := m.Tick(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			step(2 * time.Minute) // nobody claims it: the repair announces it
			if n := pointersTo(ctx, mem, id); n != 1 || m.Stats().Repaired == 0 {
				t.Fatalf("%d pointers, %d repaired before the pause: want the task announced", n, m.Stats().Repaired)
			}
			change := pause.Pausing("mail")
			if whole {
				change = pause.Pausing()
			}
			if _, err := pause.Change(ctx, mem, *srv, "test", "", change); err != nil {
				t.Fatal(err)
			}
			if c.fresh {
				// It knows nothing of the task: it reads it once, at the
				// pointer, and learns its type there.
				m, _ = monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, RepairAfter: time.Minute, Clock: clk, Local: local})
			}
			st.puts, st.deletes, st.taskGets = 0, 0, 0
			repaired := m.Stats().Repaired
			step(6 * time.Minute)
			if st.puts != 0 || st.deletes != 0 || m.Stats().Repaired != repaired {
				t.Fatalf("over 6 repair_after periods of the pause the monitor wrote %d pointers, deleted %d and repaired %d tasks: want none",
					st.puts, st.deletes, m.Stats().Repaired-repaired)
			}
			if st.taskGets > 1 {
				t.Fatalf("the monitor read the paused task %d times over 6 minutes, want at most once", st.taskGets)
			}
			if n := pointersTo(ctx, mem, id); n != 1 {
				t.Fatalf("%d pointers to the paused task, want its one pointer left where it was", n)
			}
			if _, err := pause.Change(ctx, mem, *srv, "test", "", pause.Resuming()); err != nil {
				t.Fatal(err)
			}
			step(2 * time.Minute)
			if m.Stats().Repaired == repaired || pointersTo(ctx, mem, id) == 0 {
				t.Fatalf("after the resume: %d repaired, %d pointers; want the task announced again",
					m.Stats().Repaired-repaired, pointersTo(ctx, mem, id))
			}
		})
	}
}
