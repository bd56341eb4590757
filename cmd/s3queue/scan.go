package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// scanParallel bounds the GETs a scan has in flight.
const scanParallel = 16

// scanned is one object under tasks/: a task, or why it was skipped.
type scanned struct {
	Key  string
	Task *task.Task
	Err  error
}

// scanTasks lists every object under tasks/ in key order (shard, then id)
// and loads each one (one GET per task), calling fn in key order until it
// returns false. The queue's own ready pointers (index entries beside the
// tasks) are passed over silently. Other objects that are not task objects
// come with Err set, so the caller reports and skips them (invariant 7).
func scanTasks(ctx context.Context, st s3store.Store, fn func(scanned) bool) error {
	after := ""
	for {
		page, err := st.List(ctx, "tasks/", s3store.ListOptions{StartAfter: after})
		if err != nil {
			return fmt.Errorf("list tasks: %w", err)
		}
		objs := taskObjects(page.Objects)
		for len(objs) > 0 {
			n := min(len(objs), 2*scanParallel)
			batch := loadBatch(ctx, st, objs[:n])
			for _, s := range batch {
				if errors.Is(s.Err, context.Canceled) || errors.Is(s.Err, context.DeadlineExceeded) {
					return s.Err
				}
				if !fn(s) {
					return nil
				}
			}
			objs = objs[n:]
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// taskObjects drops the queue's ready pointers from a listing: they are
// not tasks, and not foreign either. A key that only ends like one but does
// not parse stays, to be reported.
func taskObjects(objs []s3store.ObjectInfo) []s3store.ObjectInfo {
	out := objs[:0:0]
	for _, o := range objs {
		if shards.IsPointer(o.Key) {
			if _, err := shards.ParsePointerKey(o.Key); err == nil {
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

func loadBatch(ctx context.Context, st s3store.Store, objs []s3store.ObjectInfo) []scanned {
	out := make([]scanned, len(objs))
	sem := make(chan struct{}, scanParallel)
	var wg sync.WaitGroup
	for i, o := range objs {
		out[i].Key = o.Key
		if _, _, err := task.ParseKey(o.Key); err != nil {
			out[i].Err = fmt.Errorf("not a task object key: %w", err)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := taskio.Load(ctx, st, o.Key)
			out[i].Task, out[i].Err = v.Task, err
		}()
	}
	wg.Wait()
	return out
}

// skipped reports an object a scan could not use. A task deleted between
// LIST and GET (retention) is not worth a line.
func (a *app) skipped(s scanned) bool {
	if errors.Is(s.Err, s3store.ErrNotFound) {
		return false
	}
	fmt.Fprintf(a.stderr, "s3queue: skipping %s: %s\n", s.Key, oneLine(s.Err.Error()))
	return true
}

var listCommand = &command{
	name: "list", nargs: 0, json: true,
	summary: "list tasks, optionally of one status",
	details: "Operator tool: lists tasks/ and reads every task (one LIST per 1000 tasks plus one GET per\n" +
		"task read) until --limit tasks matched. Tasks come in key order: by shard, then oldest first.\n" +
		"Corrupt objects are reported on stderr and skipped.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var status string
		var limit int
		fs.StringVar(&status, "status", "", "only tasks with this `status`: pending, running, succeeded, dead or canceled (default all)")
		fs.IntVar(&limit, "limit", 100, "stop after `N` tasks; 0 lists all")
		return func(ctx context.Context, _ []string) error {
			var want task.Status
			if status != "" {
				s, err := task.ParseStatus(status)
				if err != nil {
					return usageError("list: --status %q: want pending, running, succeeded, dead or canceled", status)
				}
				want = s
			}
			if limit < 0 {
				return usageError("list: --limit %d must not be negative", limit)
			}
			st, _, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			var found []*task.Task
			if _, err := a.openExisting(ctx, st); err != nil && !errors.Is(err, errNoQueue) {
				return err
			} else if err == nil {
				err = scanTasks(ctx, st, func(s scanned) bool {
					if s.Err != nil {
						a.skipped(s)
						return true
					}
					if want == "" || s.Task.Status == want {
						found = append(found, s.Task)
					}
					return limit == 0 || len(found) < limit
				})
				if err != nil {
					return err
				}
			}
			if a.jsonOut {
				if found == nil {
					found = []*task.Task{}
				}
				return writeJSON(a.stdout, found)
			}
			printList(a.stdout, found)
			return nil
		}
	},
}

func printList(w io.Writer, ts []*task.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tATTEMPT\tSHARD\tUPDATED\tLAST ERROR")
	for _, t := range ts {
		le := oneLine(t.LastError)
		if len(le) > 60 {
			le = le[:57] + "..."
		}
		if le == "" {
			le = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", t.ID, t.Status, t.Type, t.Attempt, t.MaxAttempts, t.Shard, fmtTime(t.UpdatedAt), strings.ReplaceAll(le, "\t", " "))
	}
	tw.Flush()
}

// queueStats is the output of stats.
type queueStats struct {
	ServerTime    time.Time                   `json:"server_time"`
	Shards        int                         `json:"shards"`
	Total         int                         `json:"total"`
	ByStatus      map[task.Status]int         `json:"by_status"`
	ByShard       map[int]map[task.Status]int `json:"by_shard"`
	Skipped       int                         `json:"skipped"`
	OldestPending *oldestPending              `json:"oldest_pending,omitempty"`
}

type oldestPending struct {
	ID          string    `json:"id"`
	AvailableAt time.Time `json:"available_at"`
	// AgeSeconds is how long the task has been due (S3 time); negative
	// when it is not due yet.
	AgeSeconds float64 `json:"age_seconds"`
}

var statuses = []task.Status{task.Pending, task.Running, task.Succeeded, task.Dead, task.Canceled}

var statsCommand = &command{
	name: "stats", nargs: 0, json: true,
	summary: "count tasks by status and by shard; age of the oldest pending task",
	details: "Operator tool: reads every task (one LIST per 1000 tasks plus one GET per task).\n" +
		"Ages are measured in S3 time. Corrupt objects are reported on stderr and skipped.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, _ []string) error {
			st, _, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			qs := queueStats{ByStatus: map[task.Status]int{}, ByShard: map[int]map[task.Status]int{}}
			for _, s := range statuses {
				qs.ByStatus[s] = 0
			}
			m, err := a.openExisting(ctx, st)
			if err != nil && !errors.Is(err, errNoQueue) {
				return err
			}
			if err == nil {
				qs.Shards = m.Shards
				var oldest *task.Task
				err = scanTasks(ctx, st, func(s scanned) bool {
					if s.Err != nil {
						if a.skipped(s) {
							qs.Skipped++
						}
						return true
					}
					t := s.Task
					qs.Total++
					qs.ByStatus[t.Status]++
					if qs.ByShard[t.Shard] == nil {
						qs.ByShard[t.Shard] = map[task.Status]int{}
					}
					qs.ByShard[t.Shard][t.Status]++
					if t.Status == task.Pending && (oldest == nil || t.AvailableAt.Before(oldest.AvailableAt)) {
						oldest = t
					}
					return true
				})
				if err != nil {
					return err
				}
				now, err := st.Now(ctx)
				if err != nil {
					return fmt.Errorf("read server time: %w", err)
				}
				qs.ServerTime = now.UTC()
				if oldest != nil {
					qs.OldestPending = &oldestPending{ID: oldest.ID, AvailableAt: oldest.AvailableAt,
						AgeSeconds: now.Sub(oldest.AvailableAt).Round(time.Millisecond).Seconds()}
				}
			}
			if a.jsonOut {
				return writeJSON(a.stdout, qs)
			}
			if errors.Is(err, errNoQueue) {
				fmt.Fprintln(a.stdout, "no queue in this store yet")
				return nil
			}
			printStats(a.stdout, qs)
			return nil
		}
	},
}

func printStats(w io.Writer, qs queueStats) {
	fmt.Fprintf(w, "tasks: %d in %d shards", qs.Total, qs.Shards)
	if qs.Skipped > 0 {
		fmt.Fprintf(w, " (%d objects skipped)", qs.Skipped)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, s := range statuses {
		fmt.Fprintf(tw, "  %s\t%d\t\n", s, qs.ByStatus[s])
	}
	tw.Flush()
	if o := qs.OldestPending; o != nil {
		age := time.Duration(o.AgeSeconds * float64(time.Second)).Round(time.Second)
		if age >= 0 {
			fmt.Fprintf(w, "oldest pending: %s, due for %v (since %s)\n", o.ID, age, fmtTime(o.AvailableAt))
		} else {
			fmt.Fprintf(w, "oldest pending: %s, due in %v (at %s)\n", o.ID, -age, fmtTime(o.AvailableAt))
		}
	} else {
		fmt.Fprintln(w, "oldest pending: none")
	}
	if len(qs.ByShard) == 0 {
		return
	}
	fmt.Fprintln(w, "by shard:")
	ids := make([]int, 0, len(qs.ByShard))
	for id := range qs.ByShard {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  SHARD\t")
	for _, s := range statuses {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(string(s)))
	}
	fmt.Fprintln(tw, "TOTAL\t")
	for _, id := range ids {
		fmt.Fprintf(tw, "  %s\t", task.ShardName(id))
		total := 0
		for _, s := range statuses {
			n := qs.ByShard[id][s]
			total += n
			fmt.Fprintf(tw, "%d\t", n)
		}
		fmt.Fprintf(tw, "%d\t\n", total)
	}
	tw.Flush()
}
