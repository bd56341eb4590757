package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/task"
)

// skipped reports an object under tasks/ that list or stats passed over
// because it is not a readable task (invariant 7: report and skip).
func (a *app) skipped(key string, err error) {
	fmt.Fprintf(a.stderr, "s3queue: skipping %s: %s\n", key, oneLine(err.Error()))
}

var listCommand = &command{
	name: "list", nargs: 0, json: true,
	summary: "list tasks, filtered by status, type and age, oldest or newest first",
	examples: []string{
		"s3queue list --status pending,blocked --limit 20",
		"s3queue list --status dead --type resize --older-than 1h --sort newest",
		"s3queue list --status dead --limit 100 --cursor 01M8AHG5VV8F97G35HQPT2NKJV --json",
	},
	details: "Lists tasks/ (one LIST per 1000 objects), keeps the tasks whose id (creation time) and object\n" +
		"size (which tells pending, blocked-or-running, or finished) pass the filters, sorts them by\n" +
		"creation time, and reads in full (one GET each) only those it prints; --type needs the GET of\n" +
		"each task the other filters keep, and --status dead (or succeeded, canceled, blocked, running)\n" +
		"reads the tasks its size class holds to tell them apart. --limit N prints at most N tasks; the\n" +
		"next page is --cursor the last id printed (text output says so on stderr). --json prints the\n" +
		"tasks as stored. Corrupt objects are reported on stderr and skipped.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		parse := filterFlags(fs, "only tasks with these `statuses` (comma-separated): pending, blocked, running, succeeded, dead, canceled (default all)",
			"only tasks created at least this `duration` ago (by the id's time; S3 time)", true)
		var limit int
		var sortBy, after string
		fs.IntVar(&limit, "limit", 100, "print at most `N` tasks; 0 prints all")
		fs.StringVar(&sortBy, "sort", "oldest", "`order` by creation time: oldest or newest first")
		fs.StringVar(&after, "cursor", "", "continue after the task with this `ID` (the last one of the previous page)")
		a.deprecatedFlag(fs, "after", "cursor", "submit --after is a dependency")
		return func(ctx context.Context, _ []string) error {
			f, err := parse("list", nil, statuses)
			if err != nil {
				return err
			}
			if limit < 0 {
				return usageError("list: --limit %d must not be negative", limit)
			}
			switch sortBy {
			case "oldest":
			case "newest":
				f.newest = true
			default:
				return usageError("list: --sort %q: want oldest or newest", sortBy)
			}
			if after != "" && !task.ValidID(after) {
				return usageError("list: --cursor %q is not a task id", after)
			}
			f.after = after
			found, more, err := a.list(ctx, f, limit)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return writeJSON(a.stdout, found)
			}
			printList(a.stdout, found)
			if more {
				fmt.Fprintf(a.stderr, "more tasks may match: continue with --cursor %s\n", found[len(found)-1].ID)
			}
			return nil
		}
	},
}

// list returns the tasks f selects, at most limit (0: all), and whether
// more candidates were left unread.
func (a *app) list(ctx context.Context, f filter, limit int) (found []*task.Task, more bool, err error) {
	found = []*task.Task{}
	st, _, err := a.existingStoreQueue(ctx)
	if err != nil {
		return nil, false, err
	}
	s := &selector{st: st, f: f, onSkip: a.skipped}
	if f.olderThan > 0 || f.newerThan > 0 {
		if s.now, err = st.Now(ctx); err != nil {
			return nil, false, fmt.Errorf("read server time: %w", err)
		}
	}
	cs, err := s.candidates(ctx)
	if err != nil {
		return nil, false, err
	}
	last := ""
	err = s.each(ctx, cs, limit, func(_ candidate, v taskio.Versioned) bool {
		found = append(found, v.Task)
		last = v.Task.ID
		return limit == 0 || len(found) < limit
	})
	if err != nil {
		return nil, false, err
	}
	if limit > 0 && len(found) == limit {
		i := slices.IndexFunc(cs, func(c candidate) bool { return c.id == last })
		more = i >= 0 && i < len(cs)-1
	}
	return found, more, nil
}

// printList prints tasks as list does. When some are running it adds
// the worker that holds each running task and when its lease runs out
// (S3 time), "-" for the others: who to look at for a task that seems
// stuck, and when the monitor may take it back.
func printList(w io.Writer, ts []*task.Task) {
	running := slices.ContainsFunc(ts, func(t *task.Task) bool { return t.Status == task.Running && t.Claim != nil })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "ID\tSTATUS\tTYPE\tPRIORITY\tATTEMPT\tSHARD\tUPDATED"
	if running {
		header += "\tWORKER\tLEASE UNTIL"
	}
	fmt.Fprintln(tw, header+"\tLAST ERROR")
	for _, t := range ts {
		le := oneLine(t.LastError)
		if len(le) > 60 {
			le = le[:57] + "..."
		}
		if le == "" {
			le = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t", t.ID, t.Status, t.Type, t.Priority, t.Attempt, t.MaxAttempts, t.Shard, fmtTime(t.UpdatedAt))
		if running {
			worker, until := "-", "-"
			if t.Status == task.Running && t.Claim != nil {
				worker, until = t.Claim.Worker, fmtTime(t.Claim.ExpiresAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t", worker, until)
		}
		fmt.Fprintf(tw, "%s\n", strings.ReplaceAll(le, "\t", " "))
	}
	tw.Flush()
}

// queueStats is the output of stats.
type queueStats struct {
	ServerTime time.Time                   `json:"server_time"`
	Shards     int                         `json:"shards"`
	Total      int                         `json:"total"`
	ByStatus   map[task.Status]int         `json:"by_status"`
	ByShard    map[int]map[task.Status]int `json:"by_shard"`
	// ByType counts the tasks of each type by status (every status has
	// an entry, zero or not), in the order of the types' names.
	ByType        []typeCount    `json:"by_type"`
	Skipped       int            `json:"skipped"`
	OldestPending *oldestPending `json:"oldest_pending,omitempty"`
}

// typeCount is one type's line of stats.
type typeCount struct {
	Type     string              `json:"type"`
	Total    int                 `json:"total"`
	ByStatus map[task.Status]int `json:"by_status"`
}

// typeCounts turns counts by type, then status, into stats' lines.
func typeCounts(byType map[string]map[task.Status]int) []typeCount {
	out := []typeCount{}
	for typ, byStatus := range byType {
		tc := typeCount{Type: typ, ByStatus: map[task.Status]int{}}
		for _, st := range statuses {
			tc.ByStatus[st] = byStatus[st]
			tc.Total += byStatus[st]
		}
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
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
	summary: "count tasks by status, by type and by shard; age of the oldest pending task",
	examples: []string{
		"s3queue stats",
		"s3queue stats --json | jq .by_type",
	},
	details: "Operator tool: reads every task (one LIST per 1000 tasks plus one GET per task: the type is\n" +
		"only in the task), then the server's time (one request). Ages are measured in S3 time. Corrupt\n" +
		"objects are reported on stderr and skipped. --json: {server_time, shards, total, by_status,\n" +
		"by_type, by_shard, skipped, oldest_pending}.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, _ []string) error {
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			s, err := q.Stats(ctx)
			if err != nil {
				return cause(err)
			}
			qs := queueStats{ServerTime: s.ServerTime, Shards: s.Shards, Total: s.Total,
				ByStatus: s.ByStatus, ByShard: s.ByShard, ByType: typeCounts(s.ByType), Skipped: s.Skipped}
			if o := s.OldestPending; o != nil {
				qs.OldestPending = &oldestPending{ID: o.ID, AvailableAt: o.AvailableAt,
					AgeSeconds: s.ServerTime.Sub(o.AvailableAt).Round(time.Millisecond).Seconds()}
			}
			if a.jsonOut {
				return writeJSON(a.stdout, qs)
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
	printByType(w, qs.ByType)
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

// printByType prints stats' table of counts by type and status.
func printByType(w io.Writer, byType []typeCount) {
	if len(byType) == 0 {
		return
	}
	fmt.Fprintln(w, "by type:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  TYPE\t")
	for _, s := range statuses {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(string(s)))
	}
	fmt.Fprintln(tw, "TOTAL\t")
	for _, tc := range byType {
		fmt.Fprintf(tw, "  %s\t", tc.Type)
		for _, s := range statuses {
			fmt.Fprintf(tw, "%d\t", tc.ByStatus[s])
		}
		fmt.Fprintf(tw, "%d\t\n", tc.Total)
	}
	tw.Flush()
}
