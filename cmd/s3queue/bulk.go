package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/retention"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// bulkParallel bounds the tasks a bulk operation works on at once.
const bulkParallel = 16

// bulkReport is the outcome of a bulk requeue, cancel or purge; its JSON
// fields are stable for scripts.
type bulkReport struct {
	Action string `json:"action"` // requeue, cancel or purge
	DryRun bool   `json:"dry_run"`
	// Matched counts the tasks the filters selected.
	Matched int `json:"matched"`
	// Done counts the tasks requeued, canceled or deleted (none in a dry
	// run).
	Done int `json:"done"`
	// CancelRequested counts the running tasks asked to stop (cancel).
	CancelRequested int `json:"cancel_requested"`
	// Skipped counts the tasks left alone because they changed since they
	// were selected (requeued, claimed, finished, deleted meanwhile: no
	// longer in a --status asked for, as the action read them) or, for purge,
	// are not yet old enough (a task with an idempotency key is kept 10
	// minutes after it finished).
	Skipped int `json:"skipped"`
	// Failed counts the tasks whose request failed (errors on stderr).
	Failed int `json:"failed"`
	// IDs are the tasks matched (dry run) or acted on (requeued, canceled
	// or asked to stop, deleted), oldest first.
	IDs []string `json:"ids"`
}

// bulkOp is one bulk command: its filter and what it does to each task.
type bulkOp struct {
	name string // requeue, cancel, purge
	past string // requeued, canceled, deleted
	f    filter
	dry  bool
	// keep, if set, further tests a listed object before any GET, and
	// match a task read (now is the S3 time the run started).
	keep  func(o s3store.ObjectInfo, now time.Time) bool
	match func(t *task.Task, now time.Time) bool
	// needNow: the filter's ages are measured against S3 time now.
	needNow bool
	// act does the operation to the selected task at key; it returns
	// whether the task was acted on (done), whether a running task was
	// asked to stop (cancel), or skipped for changing, or an error. It
	// checks f.statuses itself on the task it reads, inside the same CAS
	// or conditional DELETE that acts on it: the selection may have been
	// made on a listed size alone, which predates any change since (and
	// may misread an old object, see sizeAllows).
	act func(ctx context.Context, key, id string) (bulkResult, error)
}

type bulkResult int

const (
	bulkDone bulkResult = iota
	bulkRequested
	bulkSkipped
)

// bulk runs op over the tasks its filter selects and reports the counts:
// a table of the tasks with --dry-run, one summary line otherwise (--json:
// a bulkReport). It exits 1 if any task failed.
func (a *app) bulk(ctx context.Context, st s3store.Store, op bulkOp) error {
	rep := bulkReport{Action: op.name, DryRun: op.dry, IDs: []string{}}
	var err error
	s := &selector{st: st, f: op.f, onSkip: a.skipped, keep: op.keep, match: op.match}
	if op.needNow || op.f.olderThan > 0 || op.f.newerThan > 0 {
		if s.now, err = st.Now(ctx); err != nil {
			return fmt.Errorf("%s: read server time: %w", op.name, err)
		}
	}
	cs, err := s.candidates(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", op.name, err)
	}
	type target struct{ key, id string }
	var targets []target
	var shown []*task.Task
	if !op.dry && op.f.types == nil {
		// The sizes told the statuses: the operation's own read of each
		// task is the only one, and the status is decided on it (act).
		for _, c := range cs {
			targets = append(targets, target{c.key, c.id})
		}
	} else {
		err := s.each(ctx, cs, 0, func(c candidate, v taskio.Versioned) bool {
			targets = append(targets, target{c.key, c.id})
			if op.dry {
				shown = append(shown, v.Task)
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("%s: %w", op.name, err)
		}
	}
	rep.Matched = len(targets)
	if op.dry {
		for _, t := range targets {
			rep.IDs = append(rep.IDs, t.id)
		}
		return a.printBulk(rep, shown)
	}

	var mu sync.Mutex
	done := make([]bool, len(targets))
	var firstErr error
	progressed := 0
	p := a.startProgress(func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%s: %s %d/%d, %d %s, %d skipped, %d failed", op.name, bar(progressed, len(targets), 30),
			progressed, len(targets), rep.Done+rep.CancelRequested, op.past, rep.Skipped, rep.Failed)
	})
	sem := make(chan struct{}, bulkParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := op.act(ctx, t.key, t.id)
			mu.Lock()
			defer mu.Unlock()
			progressed++
			switch {
			case err != nil:
				rep.Failed++
				if firstErr == nil {
					firstErr = err
				}
				fmt.Fprintf(a.stderr, "s3queue: %s %s: %s\n", op.name, t.id, oneLine(cause(err).Error()))
			case res == bulkSkipped:
				rep.Skipped++
			case res == bulkRequested:
				rep.CancelRequested++
				done[i] = true
			default:
				rep.Done++
				done[i] = true
			}
		})
	}
	wg.Wait()
	p.stop()
	for i, t := range targets {
		if done[i] {
			rep.IDs = append(rep.IDs, t.id)
		}
	}
	if err := a.printBulk(rep, nil); err != nil {
		return err
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: interrupted after %d of %d tasks: %w", op.name, progressed, len(targets), ctx.Err())
	case rep.Failed > 0:
		return fmt.Errorf("%s: %d of %d tasks failed (first: %w)", op.name, rep.Failed, rep.Matched, cause(firstErr))
	}
	return nil
}

// printBulk prints a bulk operation's report; shown are the tasks of a dry
// run, printed as list prints them.
func (a *app) printBulk(rep bulkReport, shown []*task.Task) error {
	if a.jsonOut {
		return writeJSON(a.stdout, rep)
	}
	if rep.DryRun {
		if len(shown) > 0 {
			printList(a.stdout, shown)
		}
		fmt.Fprintf(a.stdout, "dry run: would %s %d tasks\n", rep.Action, rep.Matched)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "matched:\t%d\n", rep.Matched)
	fmt.Fprintf(tw, "%s:\t%d\n", pastOf(rep.Action), rep.Done)
	if rep.Action == "cancel" {
		fmt.Fprintf(tw, "cancel requested:\t%d\n", rep.CancelRequested)
	}
	fmt.Fprintf(tw, "skipped:\t%d\n", rep.Skipped)
	fmt.Fprintf(tw, "failed:\t%d\n", rep.Failed)
	return tw.Flush()
}

func pastOf(action string) string {
	switch action {
	case "requeue":
		return "requeued"
	case "cancel":
		return "canceled"
	}
	return "deleted"
}

// bulkFlags are the flags of the filter form of requeue, cancel and purge.
type bulkFlags struct {
	parse func(cmd string, defaults, allowed []task.Status) (filter, error)
	dry   *bool
	fs    *flag.FlagSet
}

func defineBulkFlags(fs *flag.FlagSet, statusHelp, olderHelp string, newer bool) bulkFlags {
	return bulkFlags{
		parse: filterFlags(fs, statusHelp, olderHelp, newer),
		dry:   fs.Bool("dry-run", false, "print the tasks the filters select and change nothing (one GET per task the key and size keep)"),
		fs:    fs,
	}
}

// filtering reports whether any filter flag was given.
func (b bulkFlags) filtering() bool {
	for _, f := range []string{"status", "type", "older-than", "newer-than"} {
		if isSet(b.fs, f) {
			return true
		}
	}
	return false
}

// form checks that a command with an ID form and a filter form got one of
// them; it reports whether it is the filter form.
func (b bulkFlags) form(cmd string, args []string, jsonOut bool) (bool, error) {
	switch {
	case len(args) > 1:
		return false, usageError("%s: want one task ID, or filters (--status, --type, --older-than, --newer-than) without an ID", cmd)
	case len(args) == 1 && b.filtering():
		return false, usageError("%s: give a task ID or filters, not both", cmd)
	case len(args) == 1 && (*b.dry || jsonOut):
		return false, usageError("%s: --dry-run and --json go with the filter form (--status, --type, --older-than, --newer-than)", cmd)
	case len(args) == 0 && !b.filtering():
		return false, usageError("%s: want a task ID, or filters: --status, --type, --older-than, --newer-than (run 's3queue help %s')", cmd, cmd)
	}
	return len(args) == 0, nil
}

// bulkRequeue requeues the dead or canceled tasks f selects.
func (a *app) bulkRequeue(ctx context.Context, f filter, dry bool) error {
	st, q, err := a.existingStoreQueue(ctx)
	if err != nil {
		return err
	}
	return a.bulk(ctx, st, bulkOp{name: "requeue", past: "requeued", f: f, dry: dry,
		act: func(ctx context.Context, _, id string) (bulkResult, error) {
			err := q.RequeueIf(ctx, id, f.statuses...)
			switch {
			case errors.Is(err, s3queue.ErrStatusChanged), errors.Is(err, s3queue.ErrNotRequeueable),
				errors.Is(err, s3queue.ErrNotFound), errors.Is(err, s3queue.ErrRetired):
				return bulkSkipped, nil
			case err != nil:
				return 0, err
			}
			return bulkDone, nil
		}})
}

// bulkCancel cancels the pending, blocked or running tasks f selects.
func (a *app) bulkCancel(ctx context.Context, f filter, dry bool) error {
	st, q, err := a.existingStoreQueue(ctx)
	if err != nil {
		return err
	}
	return a.bulk(ctx, st, bulkOp{name: "cancel", past: "canceled", f: f, dry: dry,
		act: func(ctx context.Context, _, id string) (bulkResult, error) {
			requested, err := q.CancelIf(ctx, id, f.statuses...)
			switch {
			case errors.Is(err, s3queue.ErrStatusChanged), errors.Is(err, s3queue.ErrTerminal), errors.Is(err, s3queue.ErrNotFound):
				return bulkSkipped, nil
			case err != nil:
				return 0, err
			case requested:
				return bulkRequested, nil
			}
			return bulkDone, nil
		}})
}

// purgeSlack is how much later than a task's own update time its object's
// LastModified may be (the writer's S3 clock against the server's): purge
// reads every finished object written less than --older-than + purgeSlack
// ago, to decide on the time the task says.
const purgeSlack = time.Minute

// purge deletes the finished tasks f selects that finished at least hold
// ago, as the monitor's retention does (internal/retention).
func (a *app) purge(ctx context.Context, f filter, hold time.Duration, dry bool) error {
	st, q, err := a.existingStoreQueue(ctx)
	if err != nil {
		return err
	}
	c := clock.New(st, clock.Config{})
	d := &retention.Deleter{Store: st, Clock: c, Local: clock.System(), DeleteHonoured: q.Manifest().DeleteHonoured(), Log: a.log,
		// Decided on the task Expire reads, whose ETag its deletion is
		// conditional on, not on the listed size.
		Only: func(t *task.Task) bool { return f.statuses == nil || slices.Contains(f.statuses, t.Status) }}
	var iv clock.Interval
	op := bulkOp{name: "purge", past: "deleted", f: f, dry: dry, needNow: hold > 0,
		act: func(ctx context.Context, key, id string) (bulkResult, error) {
			out, err := d.Expire(ctx, key, hold, iv)
			switch {
			case err != nil:
				return 0, err
			case out.Result == retention.Corrupt:
				a.skipped(key, out.Err)
				return bulkSkipped, nil
			case out.Result != retention.Deleted:
				return bulkSkipped, nil
			}
			return bulkDone, nil
		}}
	if !dry {
		if iv, err = c.Now(ctx); err != nil {
			return fmt.Errorf("purge: read server time: %w", err)
		}
	}
	if hold > 0 {
		// Only a task whose object was written at least hold ago (give or
		// take the writer's clock) can have finished that long ago.
		op.keep = func(o s3store.ObjectInfo, now time.Time) bool {
			return o.LastModified.Before(now.Add(-hold + purgeSlack))
		}
	}
	// A dry run shows what the deletion would do: the tasks that finished
	// long enough ago, keyed ones task.MinRetention at least.
	op.match = func(t *task.Task, now time.Time) bool {
		h := max(hold, t.MinRetention())
		return t.Retired || !t.UpdatedAt.Add(h).After(now)
	}
	op.needNow = true
	return a.bulk(ctx, st, op)
}

var purgeCommand = &command{
	name: "purge", nargs: 0, json: true,
	summary: "delete finished tasks, as the monitor's retention would",
	examples: []string{
		"s3queue purge --older-than 168h --dry-run",
		"s3queue purge --status succeeded --type thumbnail --older-than 24h",
	},
	details: "Deletes the finished tasks the filters select (--status, default succeeded,dead,canceled;\n" +
		"--type) that finished at least --older-than ago (S3 time), with their idempotency records, as\n" +
		"the monitor's retention does: each task is re-read and the decision (status, age) made on what\n" +
		"it says, not on the listing, and a task changed meanwhile is never deleted (DELETE If-Match\n" +
		"where the provider honours it, a tombstone written by CAS first elsewhere). A task with an\n" +
		"idempotency key is kept at least 10 minutes after it finished. Live tasks (pending, blocked,\n" +
		"running) are never touched.\n" +
		"Cost: one LIST per 1000 objects; then per task the size (which tells the status) and write time\n" +
		"keep, one GET and one DELETE (plus a PUT where conditional DELETE is not honoured, and a GET,\n" +
		"PUT and DELETE of its idempotency record if it has one); --type adds one GET per such task. It\n" +
		"prints the counts (--json: {action, dry_run, matched, done, cancel_requested, skipped, failed,\n" +
		"ids}; skipped: changed meanwhile or not old enough); --dry-run prints the tasks instead and\n" +
		"deletes nothing.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		bf := defineBulkFlags(fs, "delete the finished tasks with these `statuses` (comma-separated: succeeded, dead, canceled; default all three)",
			"only tasks that finished at least this `duration` ago (S3 time; default 0: all finished tasks)", false)
		return func(ctx context.Context, _ []string) error {
			finished := []task.Status{task.Succeeded, task.Dead, task.Canceled}
			f, err := bf.parse("purge", finished, finished)
			if err != nil {
				return err
			}
			// --older-than is measured from the end of the task here, not
			// from its creation: it is not a filter on the id.
			hold := f.olderThan
			f.olderThan = 0
			return a.purge(ctx, f, hold, *bf.dry)
		}
	},
}
