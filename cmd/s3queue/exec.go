package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

const (
	// exitRetryLater is the exit status (EX_TEMPFAIL) a command uses to ask
	// for another run later without using up an attempt.
	exitRetryLater = 75
	// stderrTail is how much of a failed command's stderr becomes the
	// task's error.
	stderrTail = 2 << 10
)

// killGrace is how long a command has between SIGTERM and SIGKILL once it
// must stop (timeout, lost lease, cancel, shutdown).
var killGrace = 3 * time.Second

// execHandler runs a task as an external command: /bin/sh -c COMMAND with
// the input on stdin and the result on stdout.
type execHandler struct {
	typ, command string
	log          *slog.Logger
	// max bounds the result (the worker's max_result_bytes; 0:
	// task.MaxResultBytes): stdout is kept up to it, so that a command's
	// large output is stored apart by the worker rather than refused.
	max int
	// env is what the command inherits of the worker's environment (nil:
	// all but the credentials, read at each run).
	env *handlerEnv
}

func (h execHandler) handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	cmd := exec.Command("/bin/sh", "-c", h.command)
	cmd.Stdin = bytes.NewReader(t.Input)
	limit := h.max
	if limit <= 0 {
		limit = task.MaxResultBytes
	}
	stdout := &cappedBuffer{max: limit}
	env := h.env
	if env == nil {
		e := newHandlerEnv(os.Environ(), nil)
		env = &e
	}
	// Room for the longest secret before the tail, so that one straddling
	// its start is still found and cut whole.
	longest := 0
	if len(env.secrets) > 0 {
		longest = len(env.secrets[0])
	}
	stderr := &tailBuffer{max: stderrTail + longest}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(slices.Clip(env.vars),
		config.EnvTaskID+"="+t.ID,
		config.EnvAttempt+"="+strconv.Itoa(t.Attempt),
		config.EnvSnoozes+"="+strconv.Itoa(t.Snoozes),
		config.EnvTaskType+"="+t.Type,
	)
	// The attempt's trace context, in OpenTelemetry's environment
	// carrier: a command that traces continues the task's trace
	// (docs/tracing.md).
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier[k]; v != "" {
			cmd.Env = append(cmd.Env, strings.ToUpper(k)+"="+v)
		}
	}
	// A process group of its own, so that stopping the command stops
	// everything it started.
	setProcessGroup(cmd)
	// A child that keeps stdout open after the command exits must not hold
	// the handler forever.
	cmd.WaitDelay = killGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	if !running.add(cmd) {
		// The process is exiting at once (a second signal): this command
		// must not outlive it.
		killGroup(cmd)
	}
	defer running.remove(cmd)
	h.log.Debug("command started", "task_id", t.ID, "type", h.typ, "attempt", t.Attempt, "pid", cmd.Process.Pid)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	// The worker ends ctx at the task's timeout, or at its deadline when
	// that comes first, and records which in the task's last error ("timed
	// out after 30s: command killed", "deadline passed at ... while
	// running: command killed").
	var err, stopped error
	select {
	case err = <-waited:
	case <-ctx.Done():
		stopped = fmt.Errorf("command stopped: %w", context.Cause(ctx))
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			stopped = errors.New("command killed")
		}
		err = stop(cmd, waited)
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// The command exited but left something holding its output.
		killGroup(cmd)
	}
	tail := stderr.tail(stderrTail, env.secrets)
	switch {
	case stopped != nil:
		return nil, withTail(stopped, tail)
	case cmd.ProcessState == nil:
		return nil, withTail(fmt.Errorf("command: %w", err), tail)
	}
	code := cmd.ProcessState.ExitCode()
	switch {
	case code == 0:
		if stdout.over {
			return nil, worker.Permanent(fmt.Errorf("command output is over the result limit of %d bytes", limit))
		}
		return result(stdout.Bytes(), limit)
	case code == exitRetryLater:
		// Backed off by the task's retry policy, by its snoozes so far.
		return nil, worker.RetryLater(withTail(fmt.Errorf("command asked to run again later (exit %d)", code), tail))
	case code < 0:
		// Killed by a signal the worker did not send (a segfault, the OOM
		// killer): a crash, which crash_policy handles.
		return nil, worker.Crashed(withTail(fmt.Errorf("command ended: %v", cmd.ProcessState), tail))
	case code > 128 && code <= 128+64:
		// The shell reports a command killed by signal N as 128+N.
		return nil, worker.Crashed(withTail(fmt.Errorf("command killed by signal %d (exit status %d)", code-128, code), tail))
	}
	return nil, withTail(fmt.Errorf("command exited with status %d", code), tail)
}

// running holds the commands running now, so that a forced exit (a second
// SIGTERM or SIGINT) takes their process groups along: being groups of
// their own, they get no signal meant for the worker, and would otherwise
// be left running, re-parented to init.
var running = &commandSet{cmds: map[*exec.Cmd]struct{}{}}

type commandSet struct {
	mu     sync.Mutex
	cmds   map[*exec.Cmd]struct{}
	killed bool
}

// add records a started command; false means killAll already ran, and the
// caller must kill the command itself.
func (s *commandSet) add(cmd *exec.Cmd) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed {
		return false
	}
	s.cmds[cmd] = struct{}{}
	return true
}

func (s *commandSet) remove(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cmds, cmd)
}

// killAll sends SIGKILL to the process group of every running command, and
// of every command started from now on.
func (s *commandSet) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = true
	for cmd := range s.cmds {
		killGroup(cmd)
	}
}

// stop terminates the command's process group, politely first.
func stop(cmd *exec.Cmd, waited <-chan error) error {
	signalGroup(cmd, false)
	grace := time.NewTimer(killGrace)
	defer grace.Stop()
	select {
	case err := <-waited:
		killGroup(cmd)
		return err
	case <-grace.C:
	}
	killGroup(cmd)
	return <-waited
}

func killGroup(cmd *exec.Cmd) { signalGroup(cmd, true) }

func withTail(err error, tail string) error {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, tail)
}

// result turns a command's stdout into the task's result: JSON as is, any
// other text as a JSON string (without its trailing newlines).
func result(out []byte, limit int) (json.RawMessage, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if json.Valid(out) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, out); err == nil && buf.Len() <= limit {
			return buf.Bytes(), nil
		}
	}
	b, err := json.Marshal(strings.TrimRight(string(out), "\r\n"))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, worker.Permanent(fmt.Errorf("command output is %d bytes as a JSON string, over the result limit of %d", len(b), limit))
	}
	return b, nil
}

// cappedBuffer keeps the first max bytes written and notes an overflow.
type cappedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - b.buf.Len()
	if len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

func (b *cappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

// tail returns the last n bytes written, without the secrets (redactTail).
func (b *tailBuffer) tail(n int, secrets []string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return redactTail(b.buf, n, b.cut, secrets)
}
