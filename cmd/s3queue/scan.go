package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// skipped reports an object under tasks/ that list or stats passed over
// because it is not a readable task (invariant 7: report and skip).
func (a *app) skipped(key string, err error) {
	fmt.Fprintf(a.stderr, "s3queue: skipping %s: %s\n", key, oneLine(err.Error()))
}

var listCommand = &command{
	name: "list", nargs: 0, json: true,
	summary: "list tasks, optionally of one status",
	examples: []string{
		"s3queue list --status dead",
		"s3queue list --limit 0 --json | jq -r '.[].id'",
	},
	details: "Operator tool: lists tasks/ and reads every task (one LIST per 1000 tasks plus one GET per\n" +
		"task read) until --limit tasks matched. Tasks come in key order: by shard, then oldest first.\n" +
		"Corrupt objects are reported on stderr and skipped.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var status string
		var limit int
		fs.StringVar(&status, "status", "", "only tasks with this `status`: pending, blocked, running, succeeded, dead or canceled (default all)")
		fs.IntVar(&limit, "limit", 100, "stop after `N` tasks; 0 lists all")
		return func(ctx context.Context, _ []string) error {
			var want task.Status
			if status != "" {
				s, err := task.ParseStatus(status)
				if err != nil {
					return usageError("list: --status %q: want pending, blocked, running, succeeded, dead or canceled", status)
				}
				want = s
			}
			if limit < 0 {
				return usageError("list: --limit %d must not be negative", limit)
			}
			var found []*task.Task
			q, err := a.existingQueue(ctx)
			switch {
			case errors.Is(err, s3queue.ErrNoQueue):
			case err != nil:
				return err
			default:
				found, err = q.List(ctx, s3queue.ListOptions{Status: want, Limit: limit})
				if err != nil {
					return cause(err)
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

var statuses = []task.Status{task.Pending, task.Blocked, task.Running, task.Succeeded, task.Dead, task.Canceled}

var statsCommand = &command{
	name: "stats", nargs: 0, json: true,
	summary: "count tasks by status and by shard; age of the oldest pending task",
	examples: []string{
		"s3queue stats",
		"s3queue stats --json | jq .by_status",
	},
	details: "Operator tool: reads every task (one LIST per 1000 tasks plus one GET per task).\n" +
		"Ages are measured in S3 time. Corrupt objects are reported on stderr and skipped.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, _ []string) error {
			qs := queueStats{ByStatus: map[task.Status]int{}, ByShard: map[int]map[task.Status]int{}}
			for _, s := range statuses {
				qs.ByStatus[s] = 0
			}
			q, err := a.existingQueue(ctx)
			noQueue := errors.Is(err, s3queue.ErrNoQueue)
			if err != nil && !noQueue {
				return err
			}
			if !noQueue {
				s, err := q.Stats(ctx)
				if err != nil {
					return cause(err)
				}
				qs = queueStats{ServerTime: s.ServerTime, Shards: s.Shards, Total: s.Total,
					ByStatus: s.ByStatus, ByShard: s.ByShard, Skipped: s.Skipped}
				if o := s.OldestPending; o != nil {
					qs.OldestPending = &oldestPending{ID: o.ID, AvailableAt: o.AvailableAt,
						AgeSeconds: s.ServerTime.Sub(o.AvailableAt).Round(time.Millisecond).Seconds()}
				}
			}
			if a.jsonOut {
				return writeJSON(a.stdout, qs)
			}
			if noQueue {
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
