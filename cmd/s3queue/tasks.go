package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

var getCommand = &command{
	name: "get", args: "ID", nargs: 1, json: true,
	summary: "show a task: status, attempts, input, result, last error",
	details: "One GET. --json prints the task object as stored in the bucket.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.taskQueue(ctx, id)
			if err != nil {
				return err
			}
			t, err := q.Get(ctx, id)
			if err != nil {
				return taskError(id, err)
			}
			if a.jsonOut {
				return writeJSON(a.stdout, t)
			}
			printTask(a.stdout, t)
			return nil
		}
	},
}

var historyCommand = &command{
	name: "history", args: "ID", nargs: 1, json: true,
	summary: "show a task's state transitions, oldest first",
	details: "One GET: the history lives on the task object (at most 32 entries: the first transition and the last 31).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.taskQueue(ctx, id)
			if err != nil {
				return err
			}
			t, err := q.Get(ctx, id)
			if err != nil {
				return taskError(id, err)
			}
			if a.jsonOut {
				return writeJSON(a.stdout, t.History)
			}
			printHistory(a.stdout, t)
			return nil
		}
	},
}

var cancelCommand = &command{
	name: "cancel", args: "ID", nargs: 1,
	summary: "cancel a task",
	details: "A pending task is canceled at once (prints \"canceled\"). A running task is asked to stop\n" +
		"(prints \"cancel requested\"): its handler is stopped at the worker's next lease renewal.\n" +
		"A finished task cannot be canceled (exit 1).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.taskQueue(ctx, id)
			if err != nil {
				return err
			}
			requested, err := q.Cancel(ctx, id)
			if errors.Is(err, s3queue.ErrTerminal) {
				return fmt.Errorf("task %s already finished; nothing to cancel", id)
			}
			if err != nil {
				return taskError(id, err)
			}
			if requested {
				fmt.Fprintln(a.stdout, "cancel requested")
			} else {
				fmt.Fprintln(a.stdout, "canceled")
			}
			return nil
		}
	},
}

var requeueCommand = &command{
	name: "requeue", args: "ID", nargs: 1,
	summary: "give a dead or canceled task a fresh start",
	details: "The task goes back to pending with a fresh budget of attempts (its last error is kept).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.taskQueue(ctx, id)
			if err != nil {
				return err
			}
			err = q.Requeue(ctx, id)
			if errors.Is(err, s3queue.ErrNotRequeueable) {
				t, gerr := q.Get(ctx, id)
				if gerr == nil {
					return fmt.Errorf("task %s is %s: only dead or canceled tasks can be requeued", id, t.Status)
				}
			}
			if err != nil {
				return taskError(id, err)
			}
			fmt.Fprintln(a.stdout, "requeued")
			return nil
		}
	},
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func printTask(w io.Writer, t *task.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", t.ID)
	row("type", t.Type)
	row("status", string(t.Status))
	row("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	row("shard", fmt.Sprint(t.Shard))
	row("created", fmtTime(t.CreatedAt))
	row("available", fmtTime(t.AvailableAt))
	row("updated", fmtTime(t.UpdatedAt))
	row("timeout", t.Timeout.String())
	row("retry", fmt.Sprintf("initial %v, max %v, multiplier %v, jitter %v", t.Retry.InitialDelay, t.Retry.MaxDelay, t.Retry.Multiplier, t.Retry.Jitter))
	if t.Claim != nil {
		row("claim", fmt.Sprintf("worker %s, lease expires %s", t.Claim.Worker, fmtTime(t.Claim.ExpiresAt)))
	}
	if t.CancelRequested {
		row("cancel", "requested")
	}
	if t.IdempotencyKey != "" {
		row("idempotency key", t.IdempotencyKey)
	}
	if t.ShardKey != "" {
		row("shard key", t.ShardKey)
	}
	row("input", rawOrDash(t.Input))
	if len(t.Result) > 0 {
		row("result", string(t.Result))
	}
	if t.LastError != "" {
		row("last error", oneLine(t.LastError))
	}
	tw.Flush()
}

func rawOrDash(b json.RawMessage) string {
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

func printHistory(w io.Writer, t *task.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTRANSITION\tATTEMPT\tWORKER\tREASON")
	for i, h := range t.History {
		if i == 1 && t.HistoryDropped > 0 {
			fmt.Fprintf(tw, "...\t(%d transitions dropped)\t\t\t\n", t.HistoryDropped)
		}
		from := string(h.From)
		if from == "" {
			from = "(new)"
		}
		worker := h.Worker
		if worker == "" {
			worker = "-"
		}
		fmt.Fprintf(tw, "%s\t%s→%s\t%d\t%s\t%s\n", fmtTime(h.At), from, h.To, h.Attempt, worker, strings.ReplaceAll(oneLine(h.Reason), "\t", " "))
	}
	tw.Flush()
}
