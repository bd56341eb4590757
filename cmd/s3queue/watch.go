package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// watch prints t, then polls it and prints each change until it finishes
// or ctx ends; the exit code says how it ended, as wait's does.
func (a *app) watch(ctx context.Context, q *s3queue.Queue, t *task.Task, poll time.Duration) error {
	if err := a.printWatched(nil, t); err != nil {
		return err
	}
	p := newPoller(poll)
	for !t.Status.Terminal() {
		if err := p.sleep(ctx); err != nil {
			return fmt.Errorf("get: stopped watching task %s (%s): %w", t.ID, t.Status, err)
		}
		next, err := q.Get(ctx, t.ID)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("get: stopped watching task %s (%s): %w", t.ID, t.Status, ctx.Err())
			}
			return taskError(t.ID, err)
		}
		if changed(t, next) {
			if err := a.printWatched(t, next); err != nil {
				return err
			}
			p.reset()
		}
		t = next
	}
	return verdict("get", []outcome{outcomeOf(t)}, 0, false)
}

// changed reports whether a watcher has something new to print.
func changed(old, t *task.Task) bool {
	return old.Status != t.Status || old.Attempt != t.Attempt || old.Snoozes != t.Snoozes || old.LastError != t.LastError ||
		old.CancelRequested != t.CancelRequested || (old.Claim == nil) != (t.Claim == nil) ||
		old.Claim != nil && t.Claim != nil && old.Claim.Worker != t.Claim.Worker
}

// printWatched prints the first read of a watched task (old nil) in full,
// and each later one as a line that says what changed; with --json, each
// read as one JSON line.
func (a *app) printWatched(old, t *task.Task) error {
	if a.jsonOut {
		b, err := json.Marshal(taskJSON(t))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	if old == nil {
		printTask(a.stdout, t, nil)
		fmt.Fprintln(a.stdout)
		return nil
	}
	var parts []string
	if old.Status != t.Status {
		parts = append(parts, fmt.Sprintf("%s→%s", old.Status, t.Status))
	} else {
		parts = append(parts, string(t.Status))
	}
	parts = append(parts, fmt.Sprintf("attempt %d/%d", t.Attempt, t.MaxAttempts))
	if t.Snoozes > 0 {
		parts = append(parts, fmt.Sprintf("snoozes %d", t.Snoozes))
	}
	if t.Claim != nil && t.Status == task.Running {
		parts = append(parts, "worker "+t.Claim.Worker)
	}
	if t.CancelRequested && !old.CancelRequested {
		parts = append(parts, "cancel requested")
	}
	switch {
	case t.Status == task.Succeeded && len(t.Result) > 0:
		parts = append(parts, "result "+detail(outcomeOf(t)))
	case t.LastError != "" && t.LastError != old.LastError:
		parts = append(parts, "error: "+detail(outcomeOf(t)))
	}
	_, err := fmt.Fprintf(a.stdout, "%s  %s\n", fmtTime(t.UpdatedAt), strings.Join(parts, "  "))
	return err
}
