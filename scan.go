package s3queue

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// ListOptions selects the tasks of List.
type ListOptions struct {
	// Status keeps only the tasks with this status ("" keeps all).
	Status Status
	// Limit stops the listing once this many tasks matched (0: no limit).
	Limit int
}

// List returns the queue's tasks in key order: by shard, then oldest first.
// It is an operator's tool, and `s3queue list` is built on it: it lists
// every key under tasks/ and reads every task until Limit tasks matched, one
// LIST per 1000 keys and one GET per task read. Objects that are not
// readable tasks are reported (Config.OnSkip) and skipped; a task deleted
// between LIST and GET is passed over.
func (q *Queue) List(ctx context.Context, opts ListOptions) ([]*Task, error) {
	if opts.Status != "" {
		if _, err := task.ParseStatus(string(opts.Status)); err != nil {
			return nil, fmt.Errorf("s3queue: list: %w", err)
		}
	}
	if opts.Limit < 0 {
		return nil, fmt.Errorf("s3queue: list: limit %d must not be negative", opts.Limit)
	}
	var found []*Task
	_, err := q.scan(ctx, func(t *Task) bool {
		if opts.Status == "" || t.Status == opts.Status {
			found = append(found, t)
		}
		return opts.Limit == 0 || len(found) < opts.Limit
	})
	if err != nil {
		return nil, fmt.Errorf("s3queue: list: %w", err)
	}
	return found, nil
}

// Tasks iterates over the queue's tasks in List's order, without holding
// them all, for queues too big for one List: one LIST per 1000 keys and one
// GET per task read. Objects that are not readable tasks are reported
// (Config.OnSkip) and skipped; a task deleted between LIST and GET is
// passed over. An error ends the iteration, yielded with a nil task.
func (q *Queue) Tasks(ctx context.Context) iter.Seq2[*Task, error] {
	return func(yield func(*Task, error) bool) {
		if _, err := q.scan(ctx, func(t *Task) bool { return yield(t, nil) }); err != nil {
			yield(nil, fmt.Errorf("s3queue: tasks: %w", err))
		}
	}
}

// Stats counts the queue's tasks; `s3queue stats` prints it.
type Stats struct {
	// Shards is the queue's shard count.
	Shards int
	// Total counts the tasks read.
	Total int
	// ByStatus counts them by status; every status has an entry.
	ByStatus map[Status]int
	// ByShard counts them by shard, then status; shards without tasks
	// have no entry.
	ByShard map[int]map[Status]int
	// ByType counts them by type, then status; every type read has an
	// entry, with an entry for each of its statuses seen.
	ByType map[string]map[Status]int
	// Skipped counts the objects under tasks/ that are not readable tasks.
	Skipped int
	// OldestPending is the pending task that became available first
	// (nil when none is pending).
	OldestPending *Task
	// ServerTime is the store's time at the end of the count, as its
	// server reports it (whole seconds on S3): a pending task has been due
	// for ServerTime.Sub(OldestPending.AvailableAt).
	ServerTime time.Time
}

// Stats reads every task (one LIST per 1000 keys and one GET per task),
// counts them, then reads the server's time (one request). Objects that are
// not readable tasks are reported (Config.OnSkip), counted in Skipped and
// otherwise ignored.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	s, err := q.stats(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("s3queue: stats: %w", err)
	}
	return s, nil
}

func (q *Queue) stats(ctx context.Context) (Stats, error) {
	s := Stats{Shards: q.producer.Manifest().Shards, ByStatus: map[Status]int{}, ByShard: map[int]map[Status]int{}, ByType: map[string]map[Status]int{}}
	for _, st := range []Status{Pending, Blocked, Running, Succeeded, Dead, Canceled} {
		s.ByStatus[st] = 0
	}
	skipped, err := q.scan(ctx, func(t *Task) bool {
		s.Total++
		s.ByStatus[t.Status]++
		if s.ByShard[t.Shard] == nil {
			s.ByShard[t.Shard] = map[Status]int{}
		}
		s.ByShard[t.Shard][t.Status]++
		if s.ByType[t.Type] == nil {
			s.ByType[t.Type] = map[Status]int{}
		}
		s.ByType[t.Type][t.Status]++
		if t.Status == Pending && (s.OldestPending == nil || t.AvailableAt.Before(s.OldestPending.AvailableAt)) {
			s.OldestPending = t
		}
		return true
	})
	if err != nil {
		return Stats{}, err
	}
	s.Skipped = skipped
	// The server's own reading, not the clock's estimate: an operator
	// compares it with the tasks' times, which are the server's too.
	now, err := q.store.Now(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("read server time: %w", err)
	}
	s.ServerTime = now.UTC()
	return s, nil
}

// scanParallel bounds the GETs a scan has in flight.
const scanParallel = 16

// scan lists every object under tasks/ in key order and loads each task,
// calling fn in key order until it returns false. The queue's ready
// pointers, which sit beside the tasks, are passed over; other objects that
// are not tasks are reported and counted (invariant 7: report and skip).
func (q *Queue) scan(ctx context.Context, fn func(*Task) bool) (skipped int, err error) {
	after := ""
	for {
		page, err := q.store.List(ctx, "tasks/", s3store.ListOptions{StartAfter: after})
		if err != nil {
			return skipped, fmt.Errorf("list tasks: %w", err)
		}
		var keys []string
		for _, o := range page.Objects {
			if shards.IsPointer(o.Key) {
				if _, err := shards.ParsePointerKey(o.Key); err == nil {
					continue
				}
			}
			keys = append(keys, o.Key)
		}
		for len(keys) > 0 {
			n := min(len(keys), 2*scanParallel)
			tasks, errs := q.load(ctx, keys[:n])
			for i, t := range tasks {
				switch err := errs[i]; {
				case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
					return skipped, err
				case errors.Is(err, s3store.ErrNotFound):
					// Deleted by retention since the LIST.
				case err != nil:
					skipped++
					q.skip(keys[i], err)
				case !fn(t):
					return skipped, nil
				}
			}
			keys = keys[n:]
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return skipped, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// skip reports an object under tasks/ that is not a readable task.
func (q *Queue) skip(key string, err error) {
	if q.cfg.OnSkip != nil {
		q.cfg.OnSkip(key, err)
		return
	}
	q.log.Warn("skipped an object that is not a readable task", "key", key, "err", err)
}

// load reads the tasks at keys, scanParallel at a time.
func (q *Queue) load(ctx context.Context, keys []string) ([]*Task, []error) {
	tasks, errs := make([]*Task, len(keys)), make([]error, len(keys))
	sem := make(chan struct{}, scanParallel)
	var wg sync.WaitGroup
	for i, key := range keys {
		if _, _, err := task.ParseKey(key); err != nil {
			errs[i] = fmt.Errorf("not a task object key: %w", err)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := taskio.Load(ctx, q.store, key)
			tasks[i], errs[i] = v.Task, err
		})
	}
	wg.Wait()
	return tasks, errs
}
