package sim

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// PriorityPlan is a third of the seeds' priorities: producers submit a
// quarter of their tasks high and a quarter low, and at Backlog into the
// chaos phase a producer submits a burst of Burst default tasks into one
// shard, faster than its member's few slots run them, then, Wait later
// (the member busy by then, and its fleet entry saying so: the high ones
// go through its lane too), Burst/2 high and low ones, alternately.
type PriorityPlan struct {
	Backlog, Wait time.Duration
	Burst         int
}

func (p PriorityPlan) String() string {
	return fmt.Sprintf("priorities, a backlog of %d at %v, high and low ones %v later", p.Burst, p.Backlog.Round(time.Second), p.Wait.Round(time.Second))
}

// planPriority draws a third of the seeds' priorities, from a source of
// its own (the other seeds' plans stay as they were).
func planPriority(plan *Plan, opts Options) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x9210))
	if rng.IntN(3) != 0 {
		return
	}
	plan.Priority = &PriorityPlan{Backlog: time.Minute + time.Duration(rng.Int64N(int64(opts.Chaos/2))), Burst: 8 + rng.IntN(12),
		Wait: 5*time.Second + time.Duration(rng.Int64N(int64(20*time.Second)))}
}

// priorityOf draws a submit's priority from prng (nil: the default).
func priorityOf(prng *rand.Rand) task.Priority {
	if prng == nil {
		return task.PriorityDefault
	}
	switch prng.IntN(4) {
	case 0:
		return task.PriorityHigh
	case 1:
		return task.PriorityLow
	}
	return task.PriorityDefault
}

// backlog submits the plan's burst into the shard of one shard key: the
// defaults one right after another, then, Wait later, high and low ones.
func (w *world) backlog() {
	pp := w.plan.Priority
	start := time.Now()
	p := w.spawn("p", "pprio", func(ctx context.Context, p *proc) {
		time.Sleep(time.Until(start.Add(pp.Backlog)))
		prod, ok := retry(ctx, func() (*producer.Producer, error) {
			return producer.New(ctx, p.h, w.producerConfig(p))
		})
		if !ok {
			return
		}
		for k := range pp.Burst + pp.Burst/2 {
			pr := task.PriorityDefault
			if k == pp.Burst {
				time.Sleep(pp.Wait)
			}
			if k >= pp.Burst {
				pr = []task.Priority{task.PriorityHigh, task.PriorityLow}[k%2]
			}
			o := op{proc: p.name, kind: "submit"}
			o.from = w.logLen()
			o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(fmt.Sprintf(`{"backlog":%d}`, k)), producer.Options{ShardKey: "backlog", Priority: pr})
			o.to = w.logLen()
			w.mu.Lock()
			w.ops = append(w.ops, o)
			if o.err == nil {
				w.acked[o.id] = ack{proc: p.name}
			}
			w.mu.Unlock()
		}
	})
	<-p.done
}

// scanEvent is one thing a worker's discovery told the simulator: a
// listing's window (attempt nil) or a candidate it attempts.
type scanEvent struct {
	shard   int
	window  []shards.Candidate
	attempt *shards.Candidate
}

// scanHooks records what worker process name's discovery does, for
// checkPriority.
func (w *world) scanHooks(name string) (func(int, []shards.Candidate), func(int, shards.Candidate)) {
	return func(shard int, window []shards.Candidate) {
			w.mu.Lock()
			w.scanLog[name] = append(w.scanLog[name], scanEvent{shard: shard, window: window})
			w.mu.Unlock()
		}, func(shard int, c shards.Candidate) {
			w.mu.Lock()
			w.scanLog[name] = append(w.scanLog[name], scanEvent{shard: shard, attempt: &c})
			w.mu.Unlock()
		}
}

// checkPriority proves, on every seed, that each member attempts the
// candidates of one listing's window in priority order (high first, then
// default, then low; within a priority, in key order, the oldest first):
// among the window's candidates it attempts before it lists the shard
// again, none comes after one that the order puts later. A candidate may
// be skipped (handed off to another member, or left when the listing is
// renewed), never taken out of order. It also proves that the priority a
// listing read from a pending task object's size is the task's own, and
// that every lane entry names a high task of its shard.
func (w *world) checkPriority(log []Entry, add func(inv, id, format string, args ...any)) {
	byETag := make(map[string]*task.Task)
	byID := make(map[string]*task.Task)
	for _, e := range log {
		if e.New == nil || !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) {
			continue
		}
		if t, err := task.Decode(e.New); err == nil {
			sum := md5.Sum(e.New)
			byETag[hex.EncodeToString(sum[:])] = t
			byID[t.ID] = t
		}
	}
	// A lane entry is written after its task, for a high one.
	for _, e := range log {
		if e.Op != s3store.OpPut || !strings.HasPrefix(e.Key, "lanes/") {
			continue // an entry is empty: its PUT is logged with New nil
		}
		shard, id, err := shards.ParseLaneKey(e.Key)
		if t := byID[id]; err != nil || t == nil || t.Shard != shard || t.Priority != task.PriorityHigh {
			add(InvPriority, id, "%s wrote lane entry %s for a task that is not a high one of its shard (%v)", e.Proc, e.Key, err)
		}
	}
	procs := make([]string, 0, len(w.scanLog))
	for name := range w.scanLog {
		procs = append(procs, name)
	}
	sort.Strings(procs)
	type window struct {
		order []shards.Candidate
		pos   map[string]int
		last  int // position of the last attempted
	}
	for _, name := range procs {
		cur := make(map[int]*window)
		for _, ev := range w.scanLog[name] {
			if ev.attempt == nil {
				order := slices.Clone(ev.window)
				slices.SortStableFunc(order, func(a, b shards.Candidate) int {
					if d := a.Priority.Rank() - b.Priority.Rank(); d != 0 {
						return d
					}
					return strings.Compare(a.Key, b.Key)
				})
				win := &window{order: order, pos: make(map[string]int, len(order)), last: -1}
				for i, c := range order {
					win.pos[c.Key] = i
					if t := byETag[c.ETag]; t != nil && !c.Pointer && t.Status == task.Pending && t.Priority.Rank() != c.Priority.Rank() {
						add(InvPriority, t.ID, "%s listed it as %s by its size, but the object says %s", name, c.Priority, t.Priority)
					}
				}
				cur[ev.shard] = win
				continue
			}
			win := cur[ev.shard]
			if win == nil {
				continue
			}
			i, ok := win.pos[ev.attempt.Key]
			if !ok {
				continue // a later page's, after the window's
			}
			if i < win.last {
				prev := win.order[win.last]
				add(InvPriority, ev.attempt.ID, "%s attempted it (%s) after %s (%s) from the same window of shard %d",
					name, ev.attempt.Priority, prev.ID, prev.Priority, ev.shard)
			}
			win.last = i
		}
	}
}
