package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// The pace of a wait's polls: one GET per unfinished task per poll, the
// first after pollFirst, each interval pollGrowth times the one before
// (back to pollFirst when a task changes: a task just claimed may end
// soon),
// up to --poll-max (pollMax by default). The default cap is a second, so a
// wait returns within about a second of the task's end: a task that runs
// ten minutes costs about 600 GETs (a quarter of a thousandth of a dollar
// on S3 Standard), and a longer cap trades that for a later answer.
const (
	pollFirst  = 250 * time.Millisecond
	pollGrowth = 1.25
	pollMax    = time.Second
)

// poller paces polls: each wait is pollGrowth times the one before, up to
// max; reset starts again from pollFirst (a task that just changed is
// likely to change again soon).
type poller struct {
	next, max time.Duration
}

func newPoller(max time.Duration) *poller {
	return &poller{next: min(pollFirst, max), max: max}
}

// sleep waits for the next poll; it returns ctx's error if ctx ends first.
func (p *poller) sleep(ctx context.Context) error {
	t := time.NewTimer(p.next)
	defer t.Stop()
	p.next = min(time.Duration(float64(p.next)*pollGrowth), p.max)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *poller) reset() { p.next = min(pollFirst, p.max) }

// pollMaxFlag defines --poll-max on fs.
func pollMaxFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("poll-max", pollMax, "longest `interval` between two polls (they start at 250ms and grow by a quarter each time); each poll is one GET per unfinished task")
}

// outcome is one task's line in the output of wait and submit --wait; its
// JSON fields are stable for scripts.
type outcome struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Status      task.Status     `json:"status"`
	Finished    bool            `json:"finished"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	UpdatedAt   time.Time       `json:"updated_at"`
	Result      json.RawMessage `json:"result"`
	LastError   string          `json:"last_error"`
}

func outcomeOf(t *task.Task) outcome {
	return outcome{ID: t.ID, Type: t.Type, Status: t.Status, Finished: t.Status.Terminal(), Attempt: t.Attempt,
		MaxAttempts: t.MaxAttempts, UpdatedAt: t.UpdatedAt.UTC(), Result: t.Result, LastError: t.LastError}
}

var waitCommand = &command{
	name: "wait", args: "ID...", nargs: -1, json: true,
	summary: "wait until tasks finish, print how each ended, and exit with a code that says it",
	examples: []string{
		"s3queue wait 01M8AHG5TJ57JN0X6S7S5PM513 --wait-timeout 10m",
		"s3queue wait 01M8AHG5TJ57JN0X6S7S5PM513 01M8AHG5VV8F97G35HQPT2NKJV --json | jq -r '.[].status'",
	},
	details: "Polls each unfinished task with one GET per poll; the interval starts at 250ms and grows by\n" +
		"a quarter each poll up to --poll-max (1s). A blocked, pending or running task is waited on.\n" +
		"Prints one line per task (--json: an array of {id, type, status, finished, attempt,\n" +
		"max_attempts, updated_at, result, last_error}). Exit 0 when every task succeeded, 6 when one\n" +
		"ended dead, 7 when one was canceled (and none dead), 8 when --wait-timeout passed first (the\n" +
		"unfinished tasks are printed as they stand), 3 when a task does not exist.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		timeout := waitTimeoutFlag(fs)
		a.deprecatedFlag(fs, "timeout", "wait-timeout", "submit --timeout is the lease of an attempt")
		poll := pollMaxFlag(fs)
		return func(ctx context.Context, ids []string) error {
			if len(ids) == 0 {
				return usageError("wait: want at least one task ID (usage: s3queue wait ID... [--wait-timeout D])")
			}
			if err := checkWaitFlags("wait", *timeout, *poll); err != nil {
				return err
			}
			for _, id := range ids {
				if !task.ValidID(id) {
					return usageError("wait: %q is not a task id", id)
				}
			}
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			return a.waitAndReport(ctx, "wait", q, ids, *timeout, *poll)
		}
	},
}

// waitTimeoutFlag defines --wait-timeout, the limit of a wait: one name in
// wait and submit --wait, where --timeout is the lease of an attempt.
func waitTimeoutFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("wait-timeout", 0, "give up waiting after this `duration` (exit 8); 0 waits as long as it takes")
}

// checkWaitFlags refuses a negative wait timeout and a poll cap that is
// not positive.
func checkWaitFlags(cmd string, timeout, poll time.Duration) error {
	if timeout < 0 {
		return usageError("%s: --wait-timeout %v must not be negative (0 waits as long as it takes)", cmd, timeout)
	}
	if poll <= 0 {
		return usageError("%s: --poll-max %v must be positive", cmd, poll)
	}
	return nil
}

// waitAndReport waits for the tasks ids of q to finish, at most timeout
// (0: no limit), prints their outcome, and returns the error whose exit
// code says how they ended.
func (a *app) waitAndReport(ctx context.Context, cmd string, q *s3queue.Queue, ids []string, timeout, poll time.Duration) error {
	got, err := waitTasks(ctx, q, ids, timeout, poll)
	if err != nil && !errors.Is(err, errWaitTimeout) {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	outs := make([]outcome, len(got))
	for i, t := range got {
		outs[i] = outcomeOf(t)
	}
	if a.jsonOut {
		if werr := writeJSON(a.stdout, outs); werr != nil {
			return werr
		}
	} else {
		printOutcomes(a.stdout, outs)
	}
	return verdict(cmd, outs, timeout, err != nil)
}

// waitParallel bounds the GETs one poll of a wait has in flight.
const waitParallel = 16

// errWaitTimeout: the wait's timeout passed before every task finished.
var errWaitTimeout = errors.New("timeout")

// waitTasks polls the tasks ids until each has finished or timeout (0: no
// limit) has passed, and returns the last read of each, in the order of
// ids. A task that does not exist ends the wait with exit 3. When the
// timeout passes it returns the tasks as they stand and errWaitTimeout.
func waitTasks(ctx context.Context, q *s3queue.Queue, ids []string, timeout, poll time.Duration) ([]*task.Task, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	got := make([]*task.Task, len(ids))
	p := newPoller(poll)
	for {
		reads, errs := make([]*task.Task, len(ids)), make([]error, len(ids))
		sem := make(chan struct{}, waitParallel)
		var wg sync.WaitGroup
		for i, id := range ids {
			if got[i] != nil && got[i].Status.Terminal() {
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				reads[i], errs[i] = q.Get(ctx, id)
			})
		}
		wg.Wait()
		open := 0
		for i, id := range ids {
			if got[i] != nil && got[i].Status.Terminal() {
				continue
			}
			if err := errs[i]; err != nil && !(errors.Is(err, s3queue.ErrResultUnavailable) && reads[i] != nil) {
				// (A result stored apart that cannot be read does not
				// change how the task ended.)
				if ctx.Err() != nil {
					return got, fmt.Errorf("interrupted: %w", ctx.Err())
				}
				return got, taskError(id, err)
			}
			t := reads[i]
			if got[i] != nil && (t.Status != got[i].Status || t.Attempt != got[i].Attempt) {
				p.reset()
			}
			got[i] = t
			if !t.Status.Terminal() {
				open++
			}
		}
		if open == 0 {
			return got, nil
		}
		sleep, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.sleep(sleep) }()
		select {
		case err := <-done:
			cancel()
			if err != nil {
				return got, fmt.Errorf("interrupted: %w", err)
			}
		case <-expired:
			cancel()
			<-done
			return got, errWaitTimeout
		}
	}
}

// verdict is the error (nil: exit 0) that says how the tasks ended.
func verdict(cmd string, outs []outcome, timeout time.Duration, timedOut bool) error {
	var dead, canceled, open int
	for _, o := range outs {
		switch {
		case !o.Finished:
			open++
		case o.Status == task.Dead:
			dead++
		case o.Status == task.Canceled:
			canceled++
		}
	}
	switch {
	case timedOut || open > 0:
		return withCode(exitTimeout, fmt.Errorf("%s: %d of %d tasks not finished after %v", cmd, open, len(outs), timeout))
	case dead > 0:
		return withCode(exitDead, fmt.Errorf("%s: %d of %d tasks dead", cmd, dead, len(outs)))
	case canceled > 0:
		return withCode(exitCanceled, fmt.Errorf("%s: %d of %d tasks canceled", cmd, canceled, len(outs)))
	}
	return nil
}

// printOutcomes prints one aligned line per task.
func printOutcomes(w io.Writer, outs []outcome) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tATTEMPT\tUPDATED\tRESULT / LAST ERROR")
	for _, o := range outs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", o.ID, o.Status, o.Type, o.Attempt, o.MaxAttempts, fmtTime(o.UpdatedAt), detail(o))
	}
	tw.Flush()
}

// detail is what an outcome line says after the columns: the result of a
// task that succeeded, the last error of one that did not.
func detail(o outcome) string {
	s := "-"
	switch {
	case o.Status == task.Succeeded && len(o.Result) > 0:
		s = string(o.Result)
	case o.LastError != "":
		s = oneLine(o.LastError)
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strings.ReplaceAll(s, "\t", " ")
}
