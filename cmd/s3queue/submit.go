package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
)

// maxRawInput bounds what submit reads before compacting: generous for
// pretty-printed JSON, small enough never to exhaust memory on a mistake
// like --input-file /dev/zero.
const maxRawInput = 4 * task.MaxInputBytes

// inputLimit says the one limit of a task's input, in errors.
var inputLimit = fmt.Sprintf("%d bytes (%d KiB) of compact JSON", task.MaxInputBytes, task.MaxInputBytes>>10)

var submitCommand = &command{
	name: "submit", nargs: 0, json: true,
	summary: "submit a task and print its id (or one task per JSON line with --batch)",
	examples: []string{
		`s3queue submit --type resize --input '{"url": "https://example.com/a.png"}'`,
		"s3queue submit --type resize --input-file job.json --priority high --deadline 10m --wait --wait-timeout 5m",
		`s3queue submit --type report --input '{"day": "2026-01-02"}' --unique --unique-for 1h`,
	},
	details: "The input must be JSON (at most 256 KiB once compacted); it is checked before the store is\n" +
		"opened, so bad input writes nothing (exit 2). Defaults come from [submit] in queue.toml.\n" +
		"--batch FILE|- submits one task per JSON line, {\"type\": ..., \"input\": ..., \"delay\": ...,\n" +
		"\"at\": ..., \"deadline\": ..., \"max_attempts\": ..., \"timeout\": ..., \"idempotency_key\": ..., \"unique\": true,\n" +
		"\"unique_for\": \"1h\", \"key\": ..., \"after\": [ID, ...], \"on_dep_failure\": ..., \"slot\": ..., \"admission\": ...,\n" +
		"\"priority\": ..., \"id\": ...}, through a bounded submitter ([producer] in queue.toml); the flags give the\n" +
		"lines' defaults. It prints \"LINE ID\" or \"LINE error: MESSAGE\"\n" +
		"per line as each finishes, and exits 1 if any line failed (9 if the only other outcomes were\n" +
		"unknown, 2 if the only failures were malformed or invalid lines).\n" +
		"A submit whose outcome is unknown (the store failed after the task may have been written, and\n" +
		"a minute of trying to learn which failed too) prints the id and exits 9: --id ID submits the\n" +
		"same task again safely (it is created once; a task of that id that exists is printed).\n" +
		"--after ID (repeatable) keeps the task blocked until task ID has succeeded; if ID ends dead\n" +
		"or canceled, the task is canceled (or dead, with --on-dep-failure fail). An --after that names\n" +
		"no task of this queue is refused (exit 2) and the task is not created. See docs/cli.md and\n" +
		"docs/dependencies.md.\n" +
		"--slot KEY runs at most one task of KEY at a time: a task submitted while another holds the\n" +
		"slot waits blocked and runs after it; --admission replace takes the place of the task waiting\n" +
		"next (canceled) and asks the holder to stop; drop-if-running refuses the submit (exit 1) while\n" +
		"the slot is busy. See docs/slots.md.\n" +
		"--idempotency-key KEY makes a second submit with KEY print the first task's id; --unique does\n" +
		"the same with a key derived from --type and the input (as Asynq's Unique). The key stays taken\n" +
		"until retention deletes its task, or with --unique-for DUR (1s..720h) until DUR after its\n" +
		"first submit (S3 time); then the next submit creates a new task. See docs/scheduling.md.\n" +
		"--deadline RFC3339|DURATION: the task is not started after this S3 time (a duration: this long\n" +
		"after the submit); a worker that finds it later ends it dead, and a command still running then\n" +
		"is killed (the task is dead, not retried). See docs/lifecycle.md.\n" +
		"--wait waits for the task to finish, as 's3queue wait' does: it prints the id at once, then\n" +
		"the outcome line (--json: the outcome as a one-element array instead of both), and exits 0\n" +
		"(succeeded), 6 (dead), 7 (canceled) or 8 (--wait-timeout passed first). --timeout is the\n" +
		"lease of one attempt, not the wait's.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			typ, input, inputFile, at, idemKey, shardKey, batch string
			deadline                                            string
			delay, timeout                                      time.Duration
			maxAttempts                                         int
			after                                               idList
			slot, admission                                     string
			priority                                            string
			onDepFailure                                        string
			wait, unique                                        bool
			uniqueFor                                           time.Duration
			traceparent                                         string
			id                                                  string
		)
		fs.StringVar(&typ, "type", "", "task `type` (required): selects the handler")
		fs.StringVar(&input, "input", "", "task input as JSON `text`")
		fs.StringVar(&inputFile, "input-file", "", "read the JSON input from `path` (- for stdin)")
		fs.DurationVar(&delay, "delay", 0, "make the task available after this `duration`")
		fs.StringVar(&at, "at", "", "make the task available at this RFC 3339 `time` (S3 time)")
		fs.StringVar(&deadline, "deadline", "", "do not start the task after this RFC 3339 `time|duration` (S3 time; a duration is from now); it ends dead")
		fs.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the task is dead (default [submit] max_attempts, 3)")
		fs.DurationVar(&timeout, "timeout", 0, "lease of one attempt, 1s..24h; a handler is stopped after it (default [submit] timeout, 30s)")
		fs.StringVar(&idemKey, "idempotency-key", "", "a second submit with the same `key` prints the first task's id")
		fs.BoolVar(&unique, "unique", false, "derive the idempotency key from --type and the input: the same type and input prints the first task's id")
		fs.DurationVar(&uniqueFor, "unique-for", 0, "with --idempotency-key or --unique: the key stays taken this `duration` (1s..720h) from its first submit, then frees for a new task (default: until retention deletes the task)")
		fs.StringVar(&shardKey, "key", "", "shard `key`: tasks with the same key share a shard")
		fs.StringVar(&priority, "priority", "default", "`high|default|low`: under a backlog a worker claims higher priorities first (docs/scheduling.md)")
		fs.Var(&after, "after", "run only after task `ID` has succeeded (repeatable, or comma-separated); the task is blocked until then")
		fs.StringVar(&onDepFailure, "on-dep-failure", string(task.DepCancel), "what a dependency that ends dead or canceled does: `cancel|fail` the task (fail: it ends dead)")
		fs.StringVar(&slot, "slot", "", "slot `key`: at most one task of the key runs at a time, fleet-wide")
		fs.StringVar(&admission, "admission", string(producer.AdmitQueue), "how the task takes its place in a busy slot: `queue|replace|drop-if-running`")
		fs.StringVar(&traceparent, "traceparent", "", "W3C trace context `header` (00-TRACEID-SPANID-FLAGS): the workers' spans continue that trace (docs/tracing.md)")
		fs.StringVar(&id, "id", "", "create the task under this task `ID`: one a submit printed with exit 9 (its outcome unknown), to submit the same task again; if it exists, its id is printed and nothing is created")
		fs.StringVar(&batch, "batch", "", "submit one task per JSON line of `file` (- for stdin); the other flags are the lines' defaults")
		fs.BoolVar(&wait, "wait", false, "wait until the task finishes; print its outcome and exit 0 (succeeded), 6 (dead), 7 (canceled) or 8 (timeout)")
		waitTimeout := waitTimeoutFlag(fs)
		poll := pollMaxFlag(fs)
		return func(ctx context.Context, _ []string) error {
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if !wait {
				for _, f := range []string{"wait-timeout", "poll-max", "json"} {
					if set[f] {
						return usageError("submit: --%s needs --wait", f)
					}
				}
			}
			if wait {
				if set["batch"] {
					return usageError("submit: --wait waits for a single task; with --batch, pass the printed ids to 's3queue wait'")
				}
				if err := checkWaitFlags("submit", *waitTimeout, *poll); err != nil {
					return err
				}
			}

			opts := a.cfg.SubmitOptions()
			// Zero means "the default" to the producer; a 0 the user typed
			// is a mistake to report, not a request for the default.
			if set["max-attempts"] {
				if maxAttempts <= 0 {
					return usageError("submit: --max-attempts %d: want 1..%d (leave the flag out for the default, %d)", maxAttempts, task.MaxAttemptsLimit, opts.MaxAttempts)
				}
				opts.MaxAttempts = maxAttempts
			}
			if set["timeout"] {
				if timeout <= 0 {
					return usageError("submit: --timeout %s: want %s..%s (leave the flag out for the default, %s)",
						settings.ShortDuration(timeout), settings.ShortDuration(task.MinTimeout), settings.ShortDuration(task.MaxTimeout), settings.ShortDuration(opts.Timeout))
				}
				opts.Timeout = timeout
			}
			if set["traceparent"] {
				// The command traces nothing itself: the task carries the
				// caller's trace context as it came (tracing.Inject).
				sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent}))
				if !sc.IsValid() {
					return usageError("submit: --traceparent %q is not a W3C traceparent like 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", traceparent)
				}
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
			opts.IdempotencyKey = idemKey
			opts.Unique = unique
			if set["unique-for"] {
				if uniqueFor <= 0 {
					return usageError("submit: --unique-for %s: want %s..%s (leave the flag out to keep the key until retention deletes the task)",
						settings.ShortDuration(uniqueFor), settings.ShortDuration(task.MinUniqueFor), settings.ShortDuration(task.MaxUniqueFor))
				}
				opts.UniqueFor = uniqueFor
			}
			opts.ShardKey = shardKey
			if set["priority"] {
				p, err := task.ParsePriority(priority)
				if err != nil || priority == "" {
					return usageError("submit: --priority %q: want high, default or low", priority)
				}
				opts.Priority = p
			}
			opts.DependsOn = after
			switch d := task.DepFailure(onDepFailure); d {
			case task.DepCancel, task.DepFail:
				opts.OnDepFailure = d
			default:
				return usageError("submit: --on-dep-failure %q: want cancel or fail", onDepFailure)
			}
			if set["on-dep-failure"] && !set["after"] && !set["batch"] {
				return usageError("submit: --on-dep-failure needs --after (it says what a failed dependency does)")
			}
			opts.Slot = slot
			adm, err := producer.ParseAdmission(admission)
			if err != nil {
				return usageError("submit: --admission %q: want queue, replace or drop-if-running", admission)
			}
			opts.Admission = adm
			if set["admission"] && !set["slot"] && !set["batch"] {
				return usageError("submit: --admission needs --slot")
			}
			switch {
			case set["at"] && set["delay"]:
				return usageError("submit: --at and --delay exclude each other")
			case set["at"]:
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return usageError("submit: --at %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", at)
				}
				opts.RunAt = t
			case delay < 0:
				return usageError("submit: --delay %v must not be negative", delay)
			default:
				opts.Delay = delay
			}
			if set["deadline"] {
				var err error
				if opts.Deadline, opts.DeadlineIn, err = parseDeadline(deadline); err != nil {
					return usageError("submit: --deadline %v", err)
				}
			}
			if set["id"] {
				switch {
				case !task.ValidID(id):
					return usageError("submit: --id %q is not a task id", id)
				case set["idempotency-key"] || set["unique"]:
					return usageError("submit: --id and --idempotency-key or --unique exclude each other (the key decides the id)")
				}
				opts.ID = id
			}
			if set["batch"] {
				for _, f := range []string{"input", "input-file", "idempotency-key", "id"} {
					if set[f] {
						return usageError("submit: --batch and --%s exclude each other (each line has its own)", f)
					}
				}
				if set["type"] {
					if err := task.ValidType(typ); err != nil {
						return usageError("submit: --type: %v", err)
					}
				}
				return a.submitBatch(ctx, batch, batchDefaults{typ: typ, opts: opts})
			}
			if !set["type"] {
				return usageError("submit: --type is required")
			}
			raw, err := readInput(a.stdin, set["input"], input, inputFile)
			if err != nil {
				return err
			}
			if err := validateSubmit(typ, raw, opts); err != nil {
				return err
			}

			_, q, err := a.queue(ctx)
			if err != nil {
				return err
			}
			id, err := q.Submit(ctx, typ, raw, opts)
			if errors.Is(err, producer.ErrOutcomeUnknown) {
				// Printed as a submitted id is: the task may exist.
				fmt.Fprintln(a.stdout, id)
				return unknownOutcome(id, err)
			}
			if err != nil {
				return submitError(err)
			}
			if !a.jsonOut {
				fmt.Fprintln(a.stdout, id)
			}
			if wait {
				return a.waitAndReport(ctx, "submit", q, []string{id}, *waitTimeout, *poll)
			}
			return nil
		}
	},
}

// submitError is the command's error for a submit the queue refused: a
// bad argument (an invalid spec, a dependency that names no task of the
// queue) exits 2, like bad input checked before the store is opened; a
// store's error keeps its own code.
func submitError(err error) error {
	if badSubmit(err) {
		return withCode(exitUsage, refused(err))
	}
	return cause(err)
}

// uncreatedID matches the id task.New names in the error of a task it
// refused to create ("new task 01M8…: invalid task: …").
var uncreatedID = regexp.MustCompile(`new task [0-9A-Z]{26}: `)

// refused is the cause of a submit the queue refused, without the id of
// the task that was never created: a user who looked it up would find
// nothing.
func refused(err error) error {
	return errors.New(uncreatedID.ReplaceAllString(cause(err).Error(), ""))
}

// unknownOutcome is the command's error for a submit whose outcome is
// unknown (exit 9): task id may exist, and a submit again under it
// (--id, or "id" on a batch line) makes sure it does, once.
func unknownOutcome(id string, err error) error {
	return withCode(exitUnknown, fmt.Errorf("submit: task %s: %w; submit it again with --id %s to make sure it exists, once (s3queue get %s says whether it does)", id, producer.ErrOutcomeUnknown, id, id))
}

// badSubmit reports whether a submit failed for what it asked, not for the
// store: it would fail again as it is.
func badSubmit(err error) bool {
	return errors.Is(err, task.ErrInvalid) || errors.Is(err, producer.ErrUnknownDependency) || errors.Is(err, producer.ErrDependencyNotMet)
}

// idList is a repeatable flag of task ids; each value may also list
// several, comma-separated (an id has no comma).
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }

func (l *idList) Set(v string) error {
	for id := range strings.SplitSeq(v, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			return errors.New("empty task id")
		}
		*l = append(*l, id)
	}
	return nil
}

// readInput returns the task input as compact JSON (nil for none).
func readInput(stdin io.Reader, haveText bool, text, file string) (json.RawMessage, error) {
	var raw []byte
	switch {
	case haveText && file != "":
		return nil, usageError("submit: --input and --input-file exclude each other")
	case haveText:
		raw = []byte(text)
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, maxRawInput+1))
		if err != nil {
			return nil, fmt.Errorf("submit: read input from stdin: %w", err)
		}
		raw = b
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, usageError("submit: --input-file: %v", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxRawInput+1))
		if err != nil {
			return nil, usageError("submit: --input-file: %v", err)
		}
		raw = b
	default:
		return nil, nil
	}
	if len(raw) > maxRawInput {
		// Read no further than maxRawInput; the one limit to tell is the
		// task's (this one only stops the read of a runaway file).
		return nil, usageError("submit: input is over the limit of %s", inputLimit)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, usageError("submit: input is empty (omit --input for a task without input)")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, usageError("submit: input is not valid JSON: %v", err)
	}
	if buf.Len() > task.MaxInputBytes {
		return nil, usageError("submit: input is %d bytes of compact JSON, over the limit of %s", buf.Len(), inputLimit)
	}
	return json.RawMessage(buf.Bytes()), nil
}

// validateSubmit checks everything task.New checks, before any request is
// made, so that a rejected submit writes nothing.
func validateSubmit(typ string, input json.RawMessage, opts s3queue.SubmitOptions) error {
	if err := checkSpec(typ, input, opts); err != nil {
		return usageError("submit: %v", err)
	}
	return nil
}

// checkSpec returns what task.New would refuse in a task of typ with input
// and opts. The local clock only fills in a time for the check; the task
// itself takes S3 time.
func checkSpec(typ string, input json.RawMessage, opts s3queue.SubmitOptions) error {
	id, err := task.NewID(time.Now(), rand.Reader)
	if err != nil {
		return err
	}
	key := opts.IdempotencyKey
	switch {
	case opts.Unique && key != "":
		return errors.New("--unique derives the idempotency key from the type and input: it cannot be combined with an idempotency key")
	case opts.Unique:
		key = task.UniqueKeyPrefix
	case strings.HasPrefix(key, task.UniqueKeyPrefix):
		return fmt.Errorf("idempotency key %q: keys beginning with %q are reserved for --unique", key, task.UniqueKeyPrefix)
	}
	if key != "" && (len(opts.DependsOn) > 0 || opts.Slot != "") {
		return errors.New("an idempotency key (or --unique) cannot be combined with --after or --slot")
	}
	spec := task.Spec{Type: typ, Input: input, MaxAttempts: opts.MaxAttempts, Retry: opts.Retry,
		Timeout: opts.Timeout, IdempotencyKey: key, UniqueFor: opts.UniqueFor, ShardKey: opts.ShardKey, Priority: opts.Priority,
		OnDepFailure: opts.OnDepFailure, Slot: opts.Slot}
	for _, d := range opts.DependsOn {
		spec.Deps = append(spec.Deps, task.Dep{ID: d})
	}
	// A deadline the task's own delay or time passes is refused whatever
	// S3 time says; the producer checks the rest on S3 time.
	switch {
	case opts.DeadlineIn > 0 && opts.DeadlineIn <= opts.Delay:
		return fmt.Errorf("--deadline %s is not after the task's availability (--delay %s): the task could never start",
			settings.ShortDuration(opts.DeadlineIn), settings.ShortDuration(opts.Delay))
	case !opts.Deadline.IsZero() && !opts.RunAt.IsZero() && !opts.Deadline.After(opts.RunAt):
		return fmt.Errorf("--deadline %s is not after the task's availability (--at %s): the task could never start",
			opts.Deadline.UTC().Format(time.RFC3339), opts.RunAt.UTC().Format(time.RFC3339))
	}
	if _, err := task.New(id, 0, spec, time.Now()); err != nil {
		// task.New names the throwaway id; the user never saw it.
		return errors.New(uncreatedID.ReplaceAllString(err.Error(), ""))
	}
	return nil
}

// parseDeadline reads a deadline: an RFC 3339 time (S3 time), or a
// positive Go duration, from the submit.
func parseDeadline(s string) (at time.Time, in time.Duration, err error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, 0, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Time{}, d, nil
	}
	return time.Time{}, 0, fmt.Errorf("%q: want an RFC 3339 time like 2026-01-02T15:04:05Z or a positive duration like 90s or 2h", s)
}
