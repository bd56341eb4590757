package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// UniquePlan is a third of the seeds' uniqueness windows: during the chaos
// phase, Producers processes submit, a window apart or so, tasks with
// one of two idempotency keys and one of two unique type-and-input keys,
// all with a window of For, so that submits meet within windows, right
// after they passed (racing on the record's replacement), and retention
// (resubmits of the racer) under the seed's faults.
type UniquePlan struct {
	For       time.Duration
	Producers int
}

func (u UniquePlan) String() string {
	return fmt.Sprintf("uniqueness windows of %v from %d producers", u.For, u.Producers)
}

// planUnique draws a third of the seeds' windows, from a source of its own
// (the other seeds' plans stay as they were).
func planUnique(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x0a1e5))
	if rng.IntN(3) != 0 {
		return
	}
	plan.Unique = &UniquePlan{For: time.Duration(1+rng.IntN(20)) * time.Second, Producers: 2 + rng.IntN(2)}
}

// uniques runs the plan's submitting producers until the chaos phase ends.
func (w *world) uniques() {
	u := w.plan.Unique
	// They stop well before the quiet tail, whose burst of long tasks may
	// occupy a small fleet: what they created is run by then.
	end := time.Now().Add(w.opts.Chaos - 4*time.Minute)
	var procs []*proc
	for i := range u.Producers {
		rng := rand.New(rand.NewPCG(w.plan.Seed, uint64(0x0a1e00+i)))
		procs = append(procs, w.spawn("p", fmt.Sprintf("pu%d", i+1), func(ctx context.Context, p *proc) {
			prod, ok := retry(ctx, func() (*producer.Producer, error) {
				return producer.New(ctx, p.h, w.producerConfig(p))
			})
			if !ok {
				return
			}
			// A bounded number of submits (the fleet must run what they
			// create within the bound), from a random start, each half a
			// window to a window and a half after the last: many land
			// within a window, and many right after one passed, where the
			// producers race to replace the record.
			n := 12 + rng.IntN(12)
			time.Sleep(time.Duration(rng.Int64N(int64(w.opts.Chaos / 3))))
			for j := 0; j < n && time.Now().Before(end) && ctx.Err() == nil; j++ {
				time.Sleep(u.For/2 + time.Duration(rng.Int64N(int64(u.For))))
				k := rng.IntN(2)
				opts := producer.Options{UniqueFor: u.For, MaxAttempts: 1 + rng.IntN(3)}
				input := fmt.Sprintf(`{"unique":%d}`, k)
				if rng.IntN(2) == 0 {
					opts.IdempotencyKey = fmt.Sprintf("win-%d", k)
					input = fmt.Sprintf(`{"win":%d}`, k)
				} else {
					opts.Unique = true
				}
				o := op{proc: p.name, kind: "submit", from: w.logLen()}
				o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(input), opts)
				o.to = w.logLen()
				o.key = opts.IdempotencyKey
				w.record(o)
				if o.err == nil {
					w.mu.Lock()
					w.acked[o.id] = ack{key: o.key, proc: p.name}
					w.mu.Unlock()
				}
			}
		}))
	}
	for _, p := range procs {
		<-p.done
	}
}

// window is what the checker knows of one idempotency record: the task it
// names, since when (the write that first named it), and its window.
type window struct {
	id        string
	since     time.Time
	uniqueFor time.Duration
}

// checkUnique proves that a key with a uniqueness window makes one task per
// window: its record names a new task only once the window of the task it
// named has passed (by the S3 time of the writes, whether the record was
// replaced or deleted and created again), and every task of such a key is
// one its record named before the task was created. Together: no two
// tasks of a key are created whose windows overlap.
func (w *world) checkUnique(log []Entry, add func(inv, id, format string, args ...any)) {
	last := make(map[string]window)           // record key -> the last task it named
	named := make(map[string]map[string]bool) // record key -> every task it named
	created := make(map[string]bool)
	for _, e := range log {
		switch {
		case strings.HasPrefix(e.Key, "idempotency/") && e.New != nil:
			rec, err := task.ParseIdempotencyRecord(e.New)
			if err != nil {
				continue
			}
			prev, ok := last[e.Key]
			if ok && prev.id == rec.ID {
				continue // a retirement
			}
			if ok && prev.uniqueFor > 0 && e.At.Before(prev.since.Add(prev.uniqueFor)) {
				add(InvUniqueWindow, rec.ID, "%s wrote record %s naming it at %s, within the %v window of task %s, named since %s",
					e.Proc, e.Key, e.At.Format("15:04:05.000"), prev.uniqueFor, prev.id, prev.since.Format("15:04:05.000"))
			}
			last[e.Key] = window{id: rec.ID, since: e.At, uniqueFor: rec.UniqueFor.D()}
			if named[e.Key] == nil {
				named[e.Key] = make(map[string]bool)
			}
			named[e.Key][rec.ID] = true
		case strings.HasPrefix(e.Key, "tasks/") && !shards.IsPointer(e.Key) && e.Old == nil && e.New != nil:
			t, err := task.Decode(e.New)
			if err != nil || t.IdempotencyKey == "" || t.UniqueFor == 0 || created[t.ID] {
				continue
			}
			created[t.ID] = true
			if rk := task.IdempotencyRecordKey(t.IdempotencyKey); !named[rk][t.ID] {
				add(InvUniqueWindow, t.ID, "%s created it at %s with key %q, which no record of the key named before", e.Proc, e.At.Format("15:04:05.000"), t.IdempotencyKey)
			}
		}
	}
}
