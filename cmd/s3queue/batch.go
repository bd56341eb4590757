package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/s3queue/s3queue/producer"
	"io"
	"os"
	"sync"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// maxBatchLine bounds one line of a --batch file: the largest input submit
// reads, and room for the options around it. A longer line is an error of
// that line, and its bytes are skipped without being held.
const maxBatchLine = maxRawInput + 64<<10

// batchLine is one line of a --batch file: a task to submit. The fields
// are the flags of a single submit; a field left out takes the flag's
// value, and then [submit]'s default.
type batchLine struct {
	Type           *string         `json:"type"`
	Input          json.RawMessage `json:"input"`
	Delay          *string         `json:"delay"`
	At             *string         `json:"at"`
	Deadline       *string         `json:"deadline"`
	MaxAttempts    *int            `json:"max_attempts"`
	Timeout        *string         `json:"timeout"`
	IdempotencyKey string          `json:"idempotency_key"`
	Unique         *bool           `json:"unique"`
	UniqueFor      *string         `json:"unique_for"`
	Key            *string         `json:"key"`
	After          []string        `json:"after"`
	OnDepFailure   *string         `json:"on_dep_failure"`
	Slot           *string         `json:"slot"`
	Admission      *string         `json:"admission"`
	Priority       *string         `json:"priority"`
	ID             string          `json:"id"`
}

// batchDefaults are what the flags give every line.
type batchDefaults struct {
	typ  string
	opts s3queue.SubmitOptions
}

// parseLine returns the request line describes. Its errors are the
// line's, checked before anything is sent, as a single submit's are.
func parseLine(line []byte, d batchDefaults) (s3queue.Request, error) {
	var l batchLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return s3queue.Request{}, fmt.Errorf("not a JSON object of a task: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return s3queue.Request{}, errors.New("more than one JSON value on the line")
	}
	r := s3queue.Request{Type: d.typ, Options: d.opts}
	var input json.RawMessage
	if l.Type != nil {
		r.Type = *l.Type
	}
	if r.Type == "" {
		return r, errors.New(`no task type: set "type" (or --type for every line)`)
	}
	if len(l.Input) > 0 && !bytes.Equal(l.Input, []byte("null")) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, l.Input); err != nil {
			return r, fmt.Errorf("input: %v", err)
		}
		if buf.Len() > task.MaxInputBytes {
			return r, fmt.Errorf("input is %d bytes of compact JSON, over the limit of %s", buf.Len(), inputLimit)
		}
		input = json.RawMessage(buf.Bytes())
		r.Input = input
	}
	o := &r.Options
	switch {
	case l.At != nil && l.Delay != nil:
		return r, errors.New(`"at" and "delay" exclude each other`)
	case l.At != nil:
		t, err := time.Parse(time.RFC3339, *l.At)
		if err != nil {
			return r, fmt.Errorf(`"at" %q is not an RFC 3339 time like 2026-01-02T15:04:05Z`, *l.At)
		}
		o.RunAt, o.Delay = t, 0
	case l.Delay != nil:
		d, err := time.ParseDuration(*l.Delay)
		if err != nil || d < 0 {
			return r, fmt.Errorf(`"delay" %q: want a Go duration like "90s" or "1h", not negative`, *l.Delay)
		}
		o.RunAt, o.Delay = time.Time{}, d
	}
	if l.Deadline != nil {
		at, in, err := parseDeadline(*l.Deadline)
		if err != nil {
			return r, fmt.Errorf(`"deadline" %v`, err)
		}
		o.Deadline, o.DeadlineIn = at, in
	}
	if l.MaxAttempts != nil {
		if *l.MaxAttempts <= 0 {
			return r, fmt.Errorf(`"max_attempts" %d: want 1..%d (leave it out for the default)`, *l.MaxAttempts, task.MaxAttemptsLimit)
		}
		o.MaxAttempts = *l.MaxAttempts
	}
	if l.Timeout != nil {
		d, err := time.ParseDuration(*l.Timeout)
		if err != nil || d <= 0 {
			return r, fmt.Errorf(`"timeout" %q: want a Go duration of %s..%s`, *l.Timeout, settings.ShortDuration(task.MinTimeout), settings.ShortDuration(task.MaxTimeout))
		}
		o.Timeout = d
	}
	if l.Key != nil {
		o.ShardKey = *l.Key
	}
	if l.Priority != nil {
		p, err := task.ParsePriority(*l.Priority)
		if err != nil || *l.Priority == "" {
			return r, fmt.Errorf(`"priority" %q: want "high", "default" or "low"`, *l.Priority)
		}
		o.Priority = p
	}
	o.IdempotencyKey = l.IdempotencyKey
	if l.ID != "" && !task.ValidID(l.ID) {
		return r, fmt.Errorf(`"id" %q is not a task id`, l.ID)
	}
	o.ID = l.ID
	if l.Unique != nil {
		o.Unique = *l.Unique
	}
	if l.UniqueFor != nil {
		d, err := time.ParseDuration(*l.UniqueFor)
		if err != nil || d <= 0 {
			return r, fmt.Errorf(`"unique_for" %q: want a Go duration of %s..%s`, *l.UniqueFor, settings.ShortDuration(task.MinUniqueFor), settings.ShortDuration(task.MaxUniqueFor))
		}
		o.UniqueFor = d
	}
	if l.After != nil {
		// Even [] replaces --after: the line runs after nothing.
		o.DependsOn = l.After
	}
	if l.Slot != nil {
		o.Slot = *l.Slot
	}
	if l.Admission != nil {
		a, err := producer.ParseAdmission(*l.Admission)
		if err != nil || *l.Admission == "" {
			return r, fmt.Errorf(`"admission" %q: want "queue", "replace" or "drop-if-running"`, *l.Admission)
		}
		o.Admission = a
		if o.Slot == "" {
			return r, errors.New(`"admission" needs "slot" (or --slot)`)
		}
	}
	if l.OnDepFailure != nil {
		switch d := task.DepFailure(*l.OnDepFailure); d {
		case task.DepCancel, task.DepFail:
			o.OnDepFailure = d
		default:
			return r, fmt.Errorf(`"on_dep_failure" %q: want "cancel" or "fail"`, *l.OnDepFailure)
		}
		if len(o.DependsOn) == 0 {
			return r, errors.New(`"on_dep_failure" needs "after" (or --after)`)
		}
	}
	if err := checkSpec(r.Type, input, *o); err != nil {
		return r, err
	}
	return r, nil
}

// submitBatch submits one task per line of the file at path ("-": stdin)
// through a bounded submitter, and prints each line's outcome as it comes.
// It holds no more lines than the submitter does: a line is read only once
// the submitter accepts the one before (under the default block policy).
func (a *app) submitBatch(ctx context.Context, path string, d batchDefaults) error {
	in := a.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usageError("submit: --batch: %v", err)
		}
		defer f.Close()
		in = f
	}
	_, q, err := a.queue(ctx)
	if err != nil {
		return err
	}
	b := &batch{out: a.stdout}
	s, err := q.NewSubmitter(s3queue.SubmitterConfig{OnResult: b.outcome})
	if err != nil {
		return usageError("submit: %v", cause(err))
	}
	stopProgress := a.batchProgress(s, b)

	lines := newLineReader(in, maxBatchLine)
	var readErr error
	for !b.unusable() {
		line, n, tooLong, err := lines.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
		if !tooLong && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		b.read(n)
		if tooLong {
			b.invalid(n, fmt.Errorf("line is over %d bytes", maxBatchLine))
			continue
		}
		r, err := parseLine(line, d)
		if err != nil {
			b.invalid(n, err)
			continue
		}
		if err := s.Add(ctx, r, n); err != nil {
			b.refused(n, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	// Interrupted or not, what was accepted is drained: a second signal
	// ends the command at once.
	closeErr := s.Close(context.WithoutCancel(ctx))
	stopProgress()
	return b.verdict(ctx, readErr, closeErr)
}

// batch collects the outcomes of a --batch run and prints them.
type batch struct {
	out io.Writer

	mu                sync.Mutex
	lines, last       int // lines read (not blank), number of the last one
	submitted, failed int // failed: not submitted (store errors, drops, refusals)
	bad               int // malformed or invalid lines
	unknown           int // lines whose outcome is unknown (s3queue.ErrOutcomeUnknown)
	storeErr          error
}

func (b *batch) read(n int) {
	b.mu.Lock()
	b.lines++
	b.last = n
	b.mu.Unlock()
}

// outcome prints an accepted line's outcome (the submitter's callback).
func (b *batch) outcome(o s3queue.SubmitOutcome) {
	n := o.Tag.(int)
	if o.Err != nil {
		b.mu.Lock()
		if errors.Is(o.Err, s3store.ErrUnusable) && b.storeErr == nil {
			b.storeErr = o.Err
		}
		b.mu.Unlock()
		if badSubmit(o.Err) {
			// A dependency that names no task: a bad line, as a single
			// submit's is.
			b.fail(n, refused(o.Err), &b.bad)
			return
		}
		if errors.Is(o.Err, s3queue.ErrOutcomeUnknown) {
			// Its task may exist: the line again with "id" makes sure.
			b.fail(n, fmt.Errorf("task %s: %w; submit the line again with \"id\": %q to make sure it exists, once", o.ID, s3queue.ErrOutcomeUnknown, o.ID), &b.unknown)
			return
		}
		b.fail(n, cause(o.Err), &b.failed)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.submitted++
	fmt.Fprintf(b.out, "%d %s\n", n, o.ID)
}

// invalid prints the error of a line that was not submitted because it is
// malformed or invalid.
func (b *batch) invalid(n int, err error) { b.fail(n, err, &b.bad) }

// refused prints the error of a line the submitter did not accept.
func (b *batch) refused(n int, err error) { b.fail(n, cause(err), &b.failed) }

func (b *batch) fail(n int, err error, count *int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*count++
	fmt.Fprintf(b.out, "%d error: %s\n", n, oneLine(err.Error()))
}

// unusable reports whether the store said it cannot serve requests: then
// the rest of the lines would fail too, and reading stops.
func (b *batch) unusable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.storeErr != nil
}

// verdict is the command's error once every line is accounted for.
func (b *batch) verdict(ctx context.Context, readErr, closeErr error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.storeErr != nil:
		return fmt.Errorf("submit: stopped after line %d: %w", b.last, cause(b.storeErr))
	case readErr != nil:
		return fmt.Errorf("submit: read --batch after line %d: %w", b.last, readErr)
	case ctx.Err() != nil:
		return fmt.Errorf("submit: interrupted after line %d (%d submitted): %w", b.last, b.submitted, ctx.Err())
	case closeErr != nil:
		return fmt.Errorf("submit: %w", cause(closeErr))
	}
	notDone := b.failed + b.bad + b.unknown
	if notDone == 0 {
		return nil
	}
	unknown := ""
	if b.unknown > 0 {
		unknown = fmt.Sprintf(", %d whose outcome is unknown", b.unknown)
	}
	msg := fmt.Errorf("submit: %d of %d lines not submitted (%d malformed or invalid, %d failed%s); see the errors on stdout",
		notDone, b.lines, b.bad, b.failed, unknown)
	switch {
	case b.failed > 0:
		return msg
	case b.unknown > 0:
		return withCode(exitUnknown, msg)
	}
	return withCode(exitUsage, msg)
}

// batchProgress draws a progress line on stderr while a batch runs, only
// when stderr is a terminal; it returns the function that ends it.
func (a *app) batchProgress(s *s3queue.Submitter, b *batch) (stop func()) {
	p := a.startProgress(func() string {
		st := s.State()
		b.mu.Lock()
		lines, bad := b.lines, b.bad
		b.mu.Unlock()
		return fmt.Sprintf("submit: %d lines read, %d submitted, %d failed, %d in flight, %d pending",
			lines, st.Submitted, st.Failed+st.Dropped+st.Refused+int64(bad), st.InFlight, st.Pending)
	})
	return p.stop
}

// lineReader reads numbered lines of at most max bytes, holding no more:
// the bytes of a longer line are skipped.
type lineReader struct {
	r   *bufio.Reader
	max int
	n   int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line end, and its number; a line
// over max bytes comes back empty with tooLong. The line is valid until
// the next call. At the end it returns io.EOF.
func (l *lineReader) next() (line []byte, n int, tooLong bool, err error) {
	l.buf = l.buf[:0]
	started := false
	for {
		frag, err := l.r.ReadSlice('\n')
		started = started || len(frag) > 0
		if !tooLong && len(l.buf)+len(frag) <= l.max+2 { // the line end does not count
			l.buf = append(l.buf, frag...)
		} else {
			tooLong, l.buf = true, l.buf[:0]
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && !started:
			return nil, l.n, false, io.EOF
		case err != nil && err != io.EOF:
			return nil, l.n + 1, false, err
		}
		l.n++
		line = bytes.TrimSuffix(bytes.TrimSuffix(l.buf, []byte("\n")), []byte("\r"))
		if len(line) > l.max {
			tooLong, line = true, nil
		}
		return line, l.n, tooLong, nil
	}
}
