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
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

var getCommand = &command{
	name: "get", args: "ID", nargs: 1, json: true,
	summary: "show a task: status, attempts, dependencies, input, result, last error",
	examples: []string{
		"s3queue get 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue get 01M8AHG5TJ57JN0X6S7S5PM513 --json | jq .result",
		"s3queue get 01M8AHG5TJ57JN0X6S7S5PM513 --watch",
	},
	details: "One GET. A task submitted with --after lists its dependencies, what became of each, and\n" +
		"those it still waits for. A task waiting for its slot names the task that holds the slot and\n" +
		"its own place in line (one GET more, of the slot object). --json prints the task object as\n" +
		"stored in the bucket, with snoozes (runs that exited 75 / asked to run again later) always present.\n" +
		"A result stored apart (larger than the workers' result_inline_max) costs one GET more; get\n" +
		"shows its first 1024 bytes ('s3queue result ID' prints it whole), --json includes it whole.\n" +
		"A result dropped by the monitor's result_ttl shows as \"expired at T\". A result object\n" +
		"that is missing or does not match the task's sha256 is an error (exit 1), after the task.\n" +
		"--watch prints the task, then one line per change (status, attempt, error) until it finishes\n" +
		"or Ctrl-C (--json: the task as one JSON line, again at each change); it polls with one GET\n" +
		"per poll, every 250ms growing to --poll-max (1s), and exits as 's3queue wait' does: 0\n" +
		"succeeded, 6 dead, 7 canceled, 1 interrupted.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		watch := fs.Bool("watch", false, "print each change of the task until it finishes (one GET per poll)")
		poll := pollMaxFlag(fs)
		return func(ctx context.Context, args []string) error {
			id := args[0]
			if !*watch && isSet(fs, "poll-max") {
				return usageError("get: --poll-max needs --watch")
			}
			if *poll <= 0 {
				return usageError("get: --poll-max %v must be positive", *poll)
			}
			st, q, err := a.existingStoreQueue(ctx)
			if err != nil {
				return err
			}
			t, err := q.Get(ctx, id)
			if errors.Is(err, s3queue.ErrResultUnavailable) && t != nil && !*watch {
				// The task, then what is wrong with its result.
				if a.jsonOut {
					writeJSON(a.stdout, taskJSON(t))
				} else {
					printTask(a.stdout, t, readSlotPlace(ctx, st, t))
				}
			}
			if err != nil {
				return taskError(id, err)
			}
			if *watch {
				return a.watch(ctx, q, t, *poll)
			}
			if a.jsonOut {
				return writeJSON(a.stdout, taskJSON(t))
			}
			printTask(a.stdout, t, readSlotPlace(ctx, st, t))
			return nil
		}
	},
}

// getJSON is get --json's task: the task object, with its snoozes even
// when there are none (the object leaves a 0 out).
type getJSON struct {
	*task.Task
	Snoozes int `json:"snoozes"`
}

func taskJSON(t *task.Task) getJSON { return getJSON{t, t.Snoozes} }

var historyCommand = &command{
	name: "history", args: "ID", nargs: 1, json: true,
	summary: "show a task's state transitions, oldest first, and the dependencies it still waits on",
	examples: []string{
		"s3queue history 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue history 01M8AHG5TJ57JN0X6S7S5PM513 --json | jq -r '.[].reason'",
	},
	details: "One GET: the history lives on the task object (at most 32 entries: the first transition and the last 31).\n" +
		"Each time is S3 time as the writing process's clock estimated it (within half a second: S3's Date has\n" +
		"whole seconds), not that machine's wall clock; a time is never before the one above it.\n" +
		"A task submitted with --after starts blocked; its dependencies' outcome moves it on\n" +
		"(blocked→pending \"dependencies succeeded\", or blocked→canceled \"dependency ID ended dead\").\n" +
		"Below the transitions, from the same GET: each dependency with what the task has learned of it\n" +
		"(a dependency that succeeds while others still run writes no transition; it shows here as\n" +
		"succeeded), the ones it still waits on, and its slot. --json prints the transitions only\n" +
		"('s3queue get ID --json' has the task's deps).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			t, err := q.Lookup(ctx, id) // the history only: not a result stored apart
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
	name: "cancel", args: "[ID]", nargs: -1, json: true,
	summary: "cancel a task, or the tasks the filters select",
	examples: []string{
		"s3queue cancel 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue cancel --status pending --type resize --older-than 24h --dry-run",
	},
	details: "A pending or blocked task is canceled at once (prints \"canceled\"); the tasks that wait for it\n" +
		"are canceled in turn (or dead, if submitted with --on-dep-failure fail). A running task is\n" +
		"asked to stop (prints \"cancel requested\"): its handler is stopped at the worker's next lease\n" +
		"renewal, and its dependents learn the outcome the worker records.\n" +
		"A finished task cannot be canceled (exit 1).\n" +
		"Without an ID, cancels every task the filters select (--status, default pending,blocked,running;\n" +
		"--type; --older-than and --newer-than by creation time): one LIST per 1000 objects (the size\n" +
		"tells the status), then per task Cancel's GET and PUT (plus one GET each with --type). The\n" +
		"status is checked again on the task Cancel reads, in the same CAS: a task no longer in a\n" +
		"--status given (a pending task claimed meanwhile, one that finished) is skipped. It prints the\n" +
		"counts (--json: {action, dry_run, matched, done, cancel_requested, skipped, failed, ids});\n" +
		"--dry-run prints the tasks instead and changes nothing. Exit 1 if any request failed.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		bf := defineBulkFlags(fs, "with no ID: cancel the tasks with these `statuses` (comma-separated: pending, blocked, running; default all three)",
			"with no ID: only tasks created at least this `duration` ago (by the id's time; S3 time)", true)
		return func(ctx context.Context, args []string) error {
			bulk, err := bf.form("cancel", args, a.jsonOut)
			if err != nil {
				return err
			}
			if bulk {
				live := []task.Status{task.Pending, task.Blocked, task.Running}
				f, err := bf.parse("cancel", live, live)
				if err != nil {
					return err
				}
				return a.bulkCancel(ctx, f, *bf.dry)
			}
			id := args[0]
			q, err := a.existingQueue(ctx)
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
	name: "requeue", args: "[ID]", nargs: -1, json: true,
	summary: "give a dead or canceled task a fresh start, or the tasks the filters select",
	examples: []string{
		"s3queue requeue 01M8AHG5VV8F97G35HQPT2NKJV",
		"s3queue requeue --status dead --type resize --older-than 1h --dry-run",
		"s3queue requeue --status dead --type resize --json",
	},
	details: "The task goes back to pending with a fresh budget of attempts (its last error is kept).\n" +
		"Without an ID, requeues every task the filters select (--status dead, canceled or both, the\n" +
		"default; --type; --older-than and --newer-than by creation time): one LIST per 1000 objects (the\n" +
		"size tells the status), then per task Requeue's GET, PUT and announcement PUT (plus one GET\n" +
		"each with --type). The status is checked again on the task Requeue reads, in the same CAS: a\n" +
		"task no longer in a --status given (requeued meanwhile, or canceled, requeued and now dead) is\n" +
		"skipped. It prints the counts (--json: {action, dry_run, matched, done, cancel_requested,\n" +
		"skipped, failed, ids}); --dry-run prints the tasks instead and changes nothing. Exit 1 if any\n" +
		"request failed.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		bf := defineBulkFlags(fs, "with no ID: requeue the tasks with these `statuses` (dead, canceled or dead,canceled, the default)",
			"with no ID: only tasks created at least this `duration` ago (by the id's time; S3 time)", true)
		return func(ctx context.Context, args []string) error {
			bulk, err := bf.form("requeue", args, a.jsonOut)
			if err != nil {
				return err
			}
			if bulk {
				ended := []task.Status{task.Dead, task.Canceled}
				f, err := bf.parse("requeue", ended, ended)
				if err != nil {
					return err
				}
				return a.bulkRequeue(ctx, f, *bf.dry)
			}
			id := args[0]
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			err = q.Requeue(ctx, id)
			if errors.Is(err, s3queue.ErrNotRequeueable) {
				t, gerr := q.Lookup(ctx, id)
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

// printTask prints get's rows of t; place, if not nil, is where t stands
// in its slot (readSlotPlace).
func printTask(w io.Writer, t *task.Task, place *slotPlace) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { printRow(tw, k, v) }
	row("id", t.ID)
	row("type", t.Type)
	row("status", string(t.Status))
	row("priority", t.Priority.String())
	row("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	row("snoozes", fmt.Sprintf("%d (runs that asked to run again later; past %d, each uses an attempt)", t.Snoozes, task.MaxSnoozes))
	row("shard", fmt.Sprint(t.Shard))
	row("created", fmtTime(t.CreatedAt))
	row("available", fmtTime(t.AvailableAt))
	if !t.Deadline.IsZero() {
		row("deadline", fmtTime(t.Deadline))
	}
	row("updated", fmtTime(t.UpdatedAt))
	row("timeout", t.Timeout.String())
	row("retry", fmt.Sprintf("initial %v, max %v, multiplier %v, jitter %v", t.Retry.InitialDelay, t.Retry.MaxDelay, t.Retry.Multiplier, t.Retry.Jitter))
	if t.Claim != nil {
		row("claim", fmt.Sprintf("worker %s, lease expires %s", t.Claim.Worker, fmtTime(t.Claim.ExpiresAt)))
	}
	if t.CancelRequested {
		row("cancel", "requested")
	}
	printDeps(row, t, place)
	if t.IdempotencyKey != "" {
		row("idempotency key", t.IdempotencyKey)
	}
	if t.UniqueFor > 0 {
		row("unique for", t.UniqueFor.D().String())
	}
	if t.ShardKey != "" {
		row("shard key", t.ShardKey)
	}
	row("input", rawOrDash(t.Input))
	switch {
	case t.ResultRef != nil && len(t.Result) > resultPreview:
		row("result", fmt.Sprintf("%s… (%d bytes stored apart at %s; 's3queue result %s' prints it whole)",
			t.Result[:resultPreview], t.ResultRef.Size, t.ResultRef.Key, t.ID))
	case len(t.Result) > 0:
		row("result", string(t.Result))
	case t.ResultRef != nil:
		row("result", fmt.Sprintf("unavailable (%d bytes stored apart at %s)", t.ResultRef.Size, t.ResultRef.Key))
	case !t.ResultExpiredAt.IsZero():
		row("result", "expired at "+fmtTime(t.ResultExpiredAt)+" (result_ttl)")
	}
	if t.LastError != "" {
		row("last error", oneLine(t.LastError))
	}
	tw.Flush()
}

// printDeps adds a task's dependencies to get's rows: one row per parent
// with what became of it, the parents it still waits for, what a failed
// one does, whether other tasks wait for this one, and its slot (with
// place, where it stands in it).
func printDeps(row func(k, v string), t *task.Task, place *slotPlace) {
	if len(t.Deps) > 0 {
		printWaits(row, t)
		policy := "cancel (a dependency that ends dead or canceled cancels this task)"
		if t.OnDepFailure == task.DepFail {
			policy = "fail (a dependency that ends dead or canceled makes this task dead)"
		}
		row("on dep failure", policy)
	}
	if t.Dependents {
		row("dependents", "yes: other tasks depend on this one")
	}
	if t.Slot != "" {
		row("slot", t.Slot+slotWait(t, place))
	}
}

// printWaits adds one row per dependency of t with what became of it,
// and the ones a blocked t still waits on.
func printWaits(row func(k, v string), t *task.Task) {
	for i, d := range t.Deps {
		k := ""
		if i == 0 {
			k = "depends on"
		}
		row(k, d.ID+"  "+depOutcome(t, d))
	}
	if w := t.Waiting(); t.Status == task.Blocked && len(w) > 0 {
		row("waiting on", fmt.Sprintf("%d of %d: %s", len(w), len(t.Deps), strings.Join(w, ", ")))
	}
}

// slotPlace is where a task waiting for its slot stands, as the slot
// object says.
type slotPlace struct {
	holder   string // the task that holds the slot ("" none: being passed on)
	position int    // 1: next in line; 0: not in the line
	waiting  int    // tasks in line
	err      error  // the slot object could not be read
}

// readSlotPlace reads the slot of t, if t waits for it (blocked with a
// slot and no dependencies): one GET of the slot object. Nil for any
// other task.
func readSlotPlace(ctx context.Context, st s3store.Store, t *task.Task) *slotPlace {
	if t.Slot == "" || t.Status != task.Blocked || len(t.Deps) > 0 {
		return nil
	}
	obj, err := st.Get(ctx, deps.SlotKey(t.Slot))
	if errors.Is(err, s3store.ErrNotFound) {
		return &slotPlace{}
	}
	if err != nil {
		return &slotPlace{err: err}
	}
	var s deps.Slot
	if err := json.Unmarshal(obj.Body, &s); err != nil || s.Key != t.Slot {
		return &slotPlace{err: fmt.Errorf("corrupt slot object %s", deps.SlotKey(t.Slot))}
	}
	p := &slotPlace{waiting: len(s.Queue)}
	if s.Holder != nil {
		p.holder = s.Holder.ID
	}
	for i, m := range s.Queue {
		if m.ID == t.ID {
			p.position = i + 1
		}
	}
	return p
}

// slotWait says what a task blocked for its slot waits for.
func slotWait(t *task.Task, p *slotPlace) string {
	switch {
	case t.Status != task.Blocked || len(t.Deps) > 0:
		return ""
	case p == nil:
		return "  (waiting for the task that holds it)"
	case p.err != nil:
		return fmt.Sprintf("  (waiting for the task that holds it; the slot could not be read: %s)", oneLine(p.err.Error()))
	case p.holder == t.ID:
		return "  (granted to this task: it becomes pending)"
	}
	var parts []string
	if p.holder != "" {
		parts = append(parts, "held by "+p.holder)
	} else {
		parts = append(parts, "no holder: being passed on")
	}
	if p.position > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d in line", p.position, p.waiting))
	} else {
		parts = append(parts, "not in its line (replaced, or passed over: the monitor cancels or admits it again)")
	}
	return "  (waiting: " + strings.Join(parts, "; ") + ")"
}

// depOutcome says what became of dependency d of t.
func depOutcome(t *task.Task, d task.Dep) string {
	switch {
	case d.Ended != "":
		return string(d.Ended)
	case t.Status == task.Blocked:
		return "waiting"
	}
	// Another dependency failed first, or the task was canceled: its end
	// no longer matters and was not recorded.
	return "not waited for"
}

// printRow is a row of a get's key: value table, with the colon left out
// of continuation rows.
func printRow(w io.Writer, k, v string) {
	if k == "" {
		fmt.Fprintf(w, "\t%s\n", v)
		return
	}
	fmt.Fprintf(w, "%s:\t%s\n", k, v)
}

// resultPreview is how much of a result stored apart get prints.
const resultPreview = 1024

var resultCommand = &command{
	name: "result", args: "ID", nargs: 1,
	summary: "write a succeeded task's result to stdout, as stored (JSON)",
	examples: []string{
		"s3queue result 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue result 01M8AHG5TJ57JN0X6S7S5PM513 > report.json",
		"s3queue result 01M8AHG5TJ57JN0X6S7S5PM513 | jq -r .url",
	},
	details: "Writes the result a succeeded task's handler returned, the compact JSON the task holds,\n" +
		"followed by a newline, and nothing else: for results too large to read in 'get'. One GET,\n" +
		"and one more for a result stored apart (larger than the workers' result_inline_max), whose\n" +
		"size and sha256 are checked against the task. Exit 1 with a message naming the task when it\n" +
		"has no result: not succeeded (yet), succeeded without one, its result dropped by the\n" +
		"monitor's result_ttl (\"expired at T\"), or its result object missing or not matching.\n" +
		"Exit 3 for an unknown id.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error {
			id := args[0]
			q, err := a.existingQueue(ctx)
			if err != nil {
				return err
			}
			t, err := q.Get(ctx, id)
			if err != nil {
				return taskError(id, err)
			}
			switch {
			case t.Status != task.Succeeded:
				return fmt.Errorf("task %s is %s: only a succeeded task has a result", id, t.Status)
			case !t.ResultExpiredAt.IsZero():
				return fmt.Errorf("task %s: its result expired at %s (result_ttl)", id, fmtTime(t.ResultExpiredAt))
			case len(t.Result) == 0:
				return fmt.Errorf("task %s succeeded without a result", id)
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", t.Result)
			return err
		}
	},
}

func rawOrDash(b json.RawMessage) string {
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

// printHistory prints t's transitions, then, from the same task object,
// its dependencies and its slot: a dependency that succeeds while others
// still run writes no transition, and this is where it shows.
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
	if len(t.Deps) == 0 && t.Slot == "" {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { printRow(tw, k, v) }
	printWaits(row, t)
	if t.Slot != "" {
		row("slot", t.Slot+slotWait(t, nil))
	}
	tw.Flush()
}
