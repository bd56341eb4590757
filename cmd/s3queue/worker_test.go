package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// fastWorker is a queue.toml for tests: quick polling, a lease margin
// small enough for 1-2s task timeouts, and quick retries.
const fastWorker = `
[worker]
poll_min = "20ms"
poll_max = "100ms"
lease_margin = "200ms"
shutdown_grace = "2s"
[submit]
retry_initial = "100ms"
retry_max = "200ms"
`

func submit(t *testing.T, store, cfg, typ string, extra ...string) string {
	t.Helper()
	args := append([]string{"submit", "--store", store, "--config", cfg, "--type", typ}, extra...)
	return strings.TrimSpace(must(t, args...))
}

// waitStatus waits until task id reaches one of the terminal statuses.
func waitTerminal(t *testing.T, store, id string) *task.Task {
	t.Helper()
	var got *task.Task
	waitFor(t, "task "+id+" to finish", func() bool {
		got = getTask(t, store, id)
		return got.Status.Terminal()
	})
	return got
}

func TestWorkerRunsExecHandlers(t *testing.T) {
	store, _ := newStore(t)
	marker := filepath.Join(t.TempDir(), "ran-once")
	cfg := writeConfig(t, fastWorker+`
[handlers]
echo = "cat"
fail = "echo 'disk on fire' >&2; exit 3"
`)
	echo := submit(t, store, cfg, "echo", "--input", `{"hello": "world"}`)
	text := submit(t, store, cfg, "text", "--input", `"ignored"`)
	env := submit(t, store, cfg, "env")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := submit(t, store, cfg, "trace", "--traceparent", tp)
	untraced := submit(t, store, cfg, "trace")
	fail := submit(t, store, cfg, "fail", "--max-attempts", "2")
	later := submit(t, store, cfg, "later")
	noInput := submit(t, store, cfg, "echo") // no input: empty stdout, no result

	stderr, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", "text=echo hello world",
		"--exec", `env=printf '{"id":"%s","attempt":"%s","type":"%s"}' "$S3QUEUE_TASK_ID" "$S3QUEUE_ATTEMPT" "$S3QUEUE_TASK_TYPE"`,
		"--exec", `trace=printf '"%s"' "$TRACEPARENT"`,
		"--exec", "later=if [ -e "+marker+" ]; then echo done; else touch "+marker+"; exit 75; fi",
	)

	t.Run("stdout JSON becomes the result", func(t *testing.T) {
		got := waitTerminal(t, store, echo)
		if got.Status != task.Succeeded || string(got.Result) != `{"hello":"world"}` {
			t.Errorf("echo: %s result %s (%s)", got.Status, got.Result, got.LastError)
		}
	})
	t.Run("other stdout becomes a JSON string", func(t *testing.T) {
		got := waitTerminal(t, store, text)
		if got.Status != task.Succeeded || string(got.Result) != `"hello world"` {
			t.Errorf("text: %s result %s", got.Status, got.Result)
		}
	})
	t.Run("empty stdout is no result", func(t *testing.T) {
		got := waitTerminal(t, store, noInput)
		if got.Status != task.Succeeded || len(got.Result) != 0 {
			t.Errorf("no input: %s result %q", got.Status, got.Result)
		}
	})
	t.Run("environment reaches the command", func(t *testing.T) {
		got := waitTerminal(t, store, env)
		want := fmt.Sprintf(`{"id":"%s","attempt":"1","type":"env"}`, env)
		if got.Status != task.Succeeded || string(got.Result) != want {
			t.Errorf("env: %s result %s, want %s", got.Status, got.Result, want)
		}
	})
	t.Run("the task's trace context reaches the command", func(t *testing.T) {
		if got := waitTerminal(t, store, traced); got.Status != task.Succeeded || string(got.Result) != `"`+tp+`"` {
			t.Errorf("traced: %s result %s, want TRACEPARENT %s", got.Status, got.Result, tp)
		}
		if got := waitTerminal(t, store, untraced); got.Status != task.Succeeded || string(got.Result) != `""` {
			t.Errorf("untraced: %s result %s, want no TRACEPARENT", got.Status, got.Result)
		}
	})
	t.Run("other exit codes fail the attempt and retry", func(t *testing.T) {
		got := waitTerminal(t, store, fail)
		if got.Status != task.Dead || got.Attempt != 2 {
			t.Errorf("fail: %s after %d attempts", got.Status, got.Attempt)
		}
		if !strings.Contains(got.LastError, "command exited with status 3") || !strings.Contains(got.LastError, "disk on fire") {
			t.Errorf("fail: last error %q lacks the status and stderr", got.LastError)
		}
		retried := false
		for _, h := range got.History {
			retried = retried || h.From == task.Running && h.To == task.Pending
		}
		if !retried {
			t.Errorf("fail: no retry in history %+v", got.History)
		}
	})
	t.Run("exit 75 runs again without using an attempt", func(t *testing.T) {
		got := waitTerminal(t, store, later)
		if got.Status != task.Succeeded || string(got.Result) != `"done"` {
			t.Errorf("later: %s result %s (%s)", got.Status, got.Result, got.LastError)
		}
		if got.Attempt != 1 {
			t.Errorf("later: attempt %d, want 1 (the exit-75 run must not count)", got.Attempt)
		}
		snoozed := false
		for _, h := range got.History {
			snoozed = snoozed || h.From == task.Running && h.To == task.Pending && strings.Contains(h.Reason, "exit 75")
		}
		if !snoozed {
			t.Errorf("later: no exit-75 transition in history %+v", got.History)
		}
	})
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d after cancel; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "worker started") || !strings.Contains(stderr.String(), "worker stopped") {
		t.Errorf("worker logs:\n%s", stderr)
	}
}

func TestWorkerKillsCommandAtTimeout(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The shell starts a background child, so killing only the shell would
	// leave it running: the whole process group must go.
	id := submit(t, store, cfg, "slow", "--timeout", "2s", "--max-attempts", "1")
	_, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", "slow=sleep 60 & echo $! > "+pidFile+"; wait")
	start := time.Now()
	got := waitTerminal(t, store, id)
	if got.Status != task.Dead || !strings.HasPrefix(got.LastError, "timed out after 2s: command killed") {
		t.Errorf("slow: %s, last error %q", got.Status, got.LastError)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the timeout kill took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	waitFor(t, "the command's child to be gone", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH || isZombie(pid)
	})
	stop()
}

// isZombie reports a process that exited but was not reaped yet (its
// parent, the killed shell, is gone, so init reaps it eventually).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] == "Z"
}

func TestWorkerCancelStopsRunningCommand(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	id := submit(t, store, cfg, "slow", "--timeout", "3s")
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "slow=sleep 60")
	waitFor(t, "the task to run", func() bool { return getTask(t, store, id).Status == task.Running })
	if out := must(t, "cancel", id, "--store", store); out != "cancel requested\n" {
		t.Errorf("cancel of a running task printed %q", out)
	}
	got := waitTerminal(t, store, id)
	if got.Status != task.Canceled {
		t.Errorf("status %s after cancel, want canceled (%s)", got.Status, got.LastError)
	}
	stop()
}

func TestWorkerLogsAsConfigured(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, "[log]\nformat = \"json\"\nlevel = \"debug\"\n[worker]\nid = \"json-worker\"\n")
	// A task, so that the worker has something to say at debug level.
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "x=cat")
	waitFor(t, "the worker to start", func() bool { return strings.Contains(stderr.String(), "worker started") })
	waitTerminal(t, store, id)
	stop()
	var started map[string]any
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "worker started") {
			if err := json.Unmarshal([]byte(line), &started); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
		}
	}
	if started["worker_id"] != "json-worker" || started["types"] != "x" {
		t.Errorf("worker started log = %v", started)
	}
	if !strings.Contains(stderr.String(), `"level":"DEBUG"`) {
		t.Errorf("level debug did not let debug lines through:\n%s", stderr)
	}
}

func TestMonitorAppliesRetention(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, "[monitor]\ninterval = \"100ms\"\nretention = \"1s\"\n")
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", id, "--store", store)
	_, stop := background(t, "monitor", "--store", store, "--config", cfg)
	waitFor(t, "retention to delete the canceled task", func() bool {
		return cli(t, "", "get", id, "--store", store).code == exitNotFound
	})
	if code := stop(); code != 0 {
		t.Errorf("monitor exit %d", code)
	}
}

// lyingStore ignores every PUT condition, as some S3 clones do.
type lyingStore struct{ *mem.Store }

func (s lyingStore) Put(ctx context.Context, key string, body []byte, _ s3store.PutOptions) (string, error) {
	return s.Store.Put(ctx, key, body, s3store.PutOptions{})
}

func TestUnsupportedProviderIsExit4(t *testing.T) {
	open := func(context.Context, string) (s3store.Store, error) { return lyingStore{mem.New()}, nil }
	for _, args := range [][]string{
		{"doctor", "--store", "s3://liar"},
		{"worker", "--store", "s3://liar", "--exec", "x=cat"},
		{"monitor", "--store", "s3://liar"},
		{"submit", "--store", "s3://liar", "--type", "x"},
		{"schedule", "add", "nightly", "--every", "1h", "--type", "x", "--store", "s3://liar"},
		{"pause", "--store", "s3://liar"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var out, errb syncBuffer
			a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil }, open: open}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code := a.report(a.dispatch(ctx, args))
			wantExit(t, cliResult{code, out.String(), errb.String()}, exitUnsupported, "does not honour conditional PUT")
			if args[0] == "doctor" && !strings.Contains(out.String(), "FAIL") {
				t.Errorf("doctor output does not show the failed checks:\n%s", out.String())
			}
		})
	}
}

// The built command drains on SIGTERM: the running task is handed back to
// the queue without using up an attempt, and the process exits 0.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	store, _ := newStore(t)
	cfg := writeConfig(t, strings.Replace(fastWorker, `shutdown_grace = "2s"`, `shutdown_grace = "300ms"`, 1))
	id := submit(t, store, cfg, "slow", "--timeout", "10s")
	cmd := exec.Command(os.Args[0], "worker", "--store", store, "--config", cfg, "--exec", "slow=sleep 60")
	cmd.Env = append(os.Environ(), "S3QUEUE_TEST_RUN_MAIN=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "the task to run", func() bool { return getTask(t, store, id).Status == task.Running })
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker exited with %v after SIGTERM; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("worker still running 20s after SIGTERM; stderr:\n%s", stderr.String())
	}
	got := getTask(t, store, id)
	if got.Status != task.Pending || got.Attempt != 0 {
		t.Errorf("after SIGTERM the task is %s at attempt %d, want pending at 0 (handed back)", got.Status, got.Attempt)
	}
}

// A second SIGTERM exits the worker at once and takes its running commands
// along: the shell and what it started, in their own process group, must
// not be left running re-parented to init (defect 15).
func TestSecondSIGTERMKillsRunningCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	store, _ := newStore(t)
	// A long grace: the worker must not end by draining.
	cfg := writeConfig(t, strings.Replace(fastWorker, `shutdown_grace = "2s"`, `shutdown_grace = "1m"`, 1))
	id := submit(t, store, cfg, "slow", "--timeout", "1m")
	pids := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(os.Args[0], "worker", "--store", store, "--config", cfg,
		"--exec", "slow=sleep 300 & echo $$ $! > "+pids+".tmp; mv "+pids+".tmp "+pids+"; wait")
	cmd.Env = append(os.Environ(), "S3QUEUE_TEST_RUN_MAIN=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var shell, child int
	waitFor(t, "the command to start", func() bool {
		b, err := os.ReadFile(pids)
		return err == nil && len(b) > 0
	})
	b, _ := os.ReadFile(pids)
	if n, err := fmt.Sscan(string(b), &shell, &child); n != 2 {
		t.Fatalf("pids file %q: %v", b, err)
	}
	t.Cleanup(func() { syscall.Kill(-shell, syscall.SIGKILL) })
	if got := getTask(t, store, id); got.Status != task.Running {
		t.Fatalf("task is %s, want running", got.Status)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Signals of one kind may merge while pending: signal until the worker
	// is gone. The first starts a drain of a minute; only a second one
	// ends the process now.
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	cmd.Process.Signal(syscall.SIGTERM)
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if time.Since(start) > 20*time.Second {
				t.Fatalf("worker still running 20s after repeated SIGTERMs; stderr:\n%s", stderr.String())
			}
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("worker ended with %v, want exit status %d; stderr:\n%s", err, 128+int(syscall.SIGTERM), stderr.String())
	}
	for _, pid := range []int{shell, child} {
		waitFor(t, fmt.Sprintf("process %d of the command to be gone", pid), func() bool {
			return syscall.Kill(pid, 0) == syscall.ESRCH || isZombie(pid)
		})
	}
}

// A store that will not heal ends the worker and the monitor with one
// message and exit 5, in bounded time: with the file store's directory
// removed under them, they once logged about 100,000 warnings in 4 s
// (defect 12).
func TestUnusableStoreEndsTheCommand(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--exec", "x=cat"},
		{"monitor"},
	} {
		t.Run(args[0], func(t *testing.T) {
			store, dir := newStore(t)
			cfg := writeConfig(t, fastWorker+"[monitor]\ninterval = \"50ms\"\n")
			submit(t, store, cfg, "x", "--delay", "1h")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append(args, "--store", store, "--config", cfg), strings.NewReader(""), &out, &stderr)
			}()
			waitFor(t, args[0]+" to start", func() bool { return strings.Contains(stderr.String(), args[0]+" started") })
			// Moved away in one step (a RemoveAll would race the
			// command's own writes): from here on the directory is gone.
			if err := os.Rename(dir, dir+".removed"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir + ".removed") })
			var code int
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s still running 20s after its store was removed; stderr:\n%s", args[0], stderr.String())
			}
			text := stderr.String()
			if code != exitUnusable {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUnusable, text)
			}
			var last string
			lines := strings.Split(strings.TrimSpace(text), "\n")
			for _, l := range lines {
				if strings.HasPrefix(l, "s3queue: ") {
					last = l
				}
			}
			if !strings.Contains(last, "is unusable") || !strings.Contains(last, "is gone") || strings.Count(text, "s3queue: ") != 1 {
				t.Errorf("want one final line saying the store is unusable because its directory is gone; stderr:\n%s", text)
			}
			// A step that meets the error on every shard it visits may say so
			// once per shard (16 here), but never again: no retry loop.
			if warns := strings.Count(text, "level=WARN") + strings.Count(text, "level=ERROR"); warns > 40 {
				t.Errorf("%d warnings and errors logged before stopping, want at most one per shard and a few; stderr:\n%s", warns, text)
			}
		})
	}
}

// scratchWatch records the provider check's writes (under doctor/).
type scratchWatch struct {
	s3store.Store
	mu     sync.Mutex
	writes []string
}

func (s *scratchWatch) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasPrefix(key, shards.ProviderCheckPrefix) {
		s.mu.Lock()
		s.writes = append(s.writes, key)
		s.mu.Unlock()
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *scratchWatch) checked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes) > 0
}

// The command that creates a queue checks the provider; the worker and
// monitor started on an existing queue trust its manifest and check
// nothing (about ten requests saved per start).
func TestWorkerAndMonitorTrustTheManifest(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--exec", "x=cat"},
		{"monitor"},
		{"submit", "--type", "x"},
	} {
		t.Run(args[0], func(t *testing.T) {
			store, _ := newStore(t)
			watch := func() *scratchWatch { return &scratchWatch{Store: openStore(t, store)} }
			start := func(w *scratchWatch) {
				var out, errb syncBuffer
				a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil },
					open: func(context.Context, string) (s3store.Store, error) { return w, nil }}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- a.dispatch(ctx, append(args, "--store", store)) }()
				if args[0] != "submit" {
					waitFor(t, args[0]+" to start", func() bool { return strings.Contains(errb.String(), args[0]+" started") })
					cancel()
				}
				if err := <-done; err != nil {
					t.Fatalf("%s: %v\n%s", args[0], err, errb.String())
				}
			}
			creator := watch()
			start(creator)
			if !creator.checked() {
				t.Errorf("%s created the queue without checking the provider", args[0])
			}
			later := watch()
			start(later)
			if later.checked() {
				t.Errorf("%s on an existing queue checked the provider again: wrote %v", args[0], later.writes)
			}
		})
	}
}

// --pool gives a type handlers of its own: with slow=1, one slow command
// runs at a time while the fast ones run beside it in the default pool.
func TestWorkerPoolBoundsAType(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	cfg := writeConfig(t, fastWorker)
	var slow, fast []string
	for range 3 {
		slow = append(slow, submit(t, store, cfg, "slow"))
		fast = append(fast, submit(t, store, cfg, "fast"))
	}
	// Each slow command leaves a file while it runs.
	slowCmd := `touch ` + dir + `/run.$S3QUEUE_TASK_ID; while [ ! -e ` + release + ` ]; do sleep 0.05; done; ` +
		`n=$(ls ` + dir + ` | grep -c '^run\.'); rm ` + dir + `/run.$S3QUEUE_TASK_ID; echo $n`
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", "slow="+slowCmd, "--exec", "fast=echo 1", "--pool", "slow=1")
	for _, id := range fast {
		if got := waitTerminal(t, store, id); got.Status != task.Succeeded {
			t.Errorf("fast task %s: %s, want succeeded while a slow one holds its pool", id, got.Status)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range slow {
		got := waitTerminal(t, store, id)
		// The result is how many slow commands were running as it ended.
		if got.Status != task.Succeeded || string(got.Result) != "1" {
			t.Errorf("slow task %s: %s with %s running at once, want succeeded with 1", id, got.Status, got.Result)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "pools=\"default=4/block slow=1/block\"") {
		t.Errorf("the start-up line does not list the pools:\n%s", stderr)
	}
}

func TestWorkerPoolFlagErrors(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct{ flag, want string }{
		{"slow", `want NAME=N[:TYPE,...], got "slow"`},
		{"slow=two", `--pool "slow=two": pool slow: invalid limit "two": want a positive integer, "unbounded" (or 0) or "auto"`},
		{"slow=-1", `pool slow: invalid limit "-1"`},
		{"a=1:x,x y", `pool a: `},
	} {
		r := cli(t, "", "worker", "--store", store, "--exec", "slow=true", "--pool", tc.flag)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--pool %s: exit %d, stderr %q; want exit 2 and %q", tc.flag, r.code, r.stderr, tc.want)
		}
	}
	r := cli(t, "", "worker", "--store", store, "--exec", "slow=true", "--pool", "a=1:slow", "--pool", "b=1:slow")
	if r.code != 2 || !strings.Contains(r.stderr, `type "slow" is in pools "a" and "b"`) {
		t.Errorf("a type in two pools: exit %d, stderr %q", r.code, r.stderr)
	}
}

// --pool NAME=N reads N as queue.toml reads pools.NAME.max_in_flight: 0
// or "unbounded" is no bound, "auto" is the concurrency.
func TestWorkerPoolFlagMeansWhatTheFileMeans(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct{ file, flag, want string }{
		{"0", "0", "default=4/block slow=unbounded/block"},
		{`"unbounded"`, "unbounded", "default=4/block slow=unbounded/block"},
		{`"auto"`, "auto", "default=4/block slow=4/block"},
		{"3", "3", "default=4/block slow=3/block"},
	} {
		fromFile := writeConfig(t, "[log]\nformat = \"json\"\n[pools.slow]\nmax_in_flight = "+tc.file+"\n")
		noPools := writeConfig(t, "[log]\nformat = \"json\"\n")
		file := startedLog(t, "worker", "--store", store, "--config", fromFile, "--exec", "slow=true")
		flag := startedLog(t, "worker", "--store", store, "--config", noPools, "--exec", "slow=true", "--pool", "slow="+tc.flag)
		if file["pools"] != tc.want || flag["pools"] != tc.want {
			t.Errorf("max_in_flight = %s started pools=%v; --pool slow=%s pools=%v; want both %q", tc.file, file["pools"], tc.flag, flag["pools"], tc.want)
		}
	}
}

// A --pool for a type the worker has no handler for is started, with a
// warning naming the type: nothing would ever run in that pool.
func TestWorkerWarnsOfAPoolWithoutHandler(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, "[log]\nformat = \"json\"\n")
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "job=cat", "--pool", "p=2:nosuch,job")
	waitFor(t, "the worker to start", func() bool { return strings.Contains(stderr.String(), "worker started") })
	if code := stop(); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, stderr)
	}
	var warned []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"type":"nosuch"`) || !strings.Contains(warned[0], `type \"nosuch\" has no handler`) {
		t.Errorf("want one warning naming type nosuch (and none for job), got:\n%s", strings.Join(warned, "\n"))
	}
}

// A start-up flag the worker or monitor cannot use is bad usage, exit 2,
// whichever flag it is, before the store is opened.
func TestBadStartUpFlagsExit2(t *testing.T) {
	store, dir := newStore(t)
	for _, args := range [][]string{
		{"worker", "--exec", "x=cat", "--events", "/nonexistent/dir/x"},
		{"worker", "--exec", "x=cat", "--http", "not an address"},
		{"monitor", "--events", "/nonexistent/dir/x"},
		{"monitor", "--http", "not an address"},
	} {
		r := cli(t, "", append(args, "--store", store)...)
		wantExit(t, r, exitUsage, args[0]+": --"+strings.TrimPrefix(args[len(args)-2], "--"))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused start-up touched the store: %v", entries)
	}
}

// A command killed by a signal the worker did not send is a crash: under
// crash_policy = "requeue" the task runs again at once, at the next
// attempt, without the retry delay.
func TestWorkerCrashRequeue(t *testing.T) {
	store, _ := newStore(t)
	marker := filepath.Join(t.TempDir(), "crashed-once")
	text := strings.Replace(fastWorker, "[submit]", "crash_policy = \"requeue\"\n[submit]", 1)
	text = strings.NewReplacer(`retry_initial = "100ms"`, `retry_initial = "1h"`, `retry_max = "200ms"`, `retry_max = "2h"`).Replace(text)
	cfg := writeConfig(t, text)
	id := submit(t, store, cfg, "crashy")
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", "crashy=if [ -e "+marker+" ]; then echo ok; else touch "+marker+"; kill -SEGV $$; fi")
	got := waitTerminal(t, store, id)
	if got.Status != task.Succeeded || got.Attempt != 2 {
		t.Errorf("the crashed task is %s at attempt %d, want succeeded at attempt 2 (requeued at once, not after the 1h retry delay)", got.Status, got.Attempt)
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d; stderr:\n%s", code, stderr)
	}
}

// Exit 75 backs off as retries do (the n-th snooze waits the retry
// policy's delay for n), each run learns how often the task snoozed
// (S3QUEUE_SNOOZES; S3QUEUE_ATTEMPT stays 1: a snooze gives its attempt
// back), get shows the count, and a task canceled while it waits after a
// snooze keeps the attempt that ran (issue 26, items 6 and 9).
func TestExit75BacksOffAndCountsSnoozes(t *testing.T) {
	store, _ := newStore(t)
	runs := filepath.Join(t.TempDir(), "runs")
	worker, _, _ := strings.Cut(fastWorker, "[submit]")
	cfg := writeConfig(t, worker+`
[submit]
retry_initial = "100ms"
retry_max = "1h"
retry_jitter = 0
`)
	// Three snoozes, then success: 100ms, 200ms, 400ms.
	later := submit(t, store, cfg, "later")
	// One snooze, then a wait of an hour: canceled while it waits.
	stuck := submit(t, store, writeConfig(t, worker+`
[submit]
retry_initial = "1h"
retry_max = "1h"
`), "stuck", "--max-attempts", "2")
	_, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", `later=echo "$S3QUEUE_ATTEMPT $S3QUEUE_SNOOZES" >> `+runs+`; [ "$S3QUEUE_SNOOZES" -ge 3 ] || exit 75`,
		"--exec", "stuck=exit 75")
	got := waitTerminal(t, store, later)
	waitFor(t, "the stuck task's snooze", func() bool { return getTask(t, store, stuck).Snoozes == 1 })
	if code := stop(); code != 0 {
		t.Fatalf("worker exit %d", code)
	}

	if got.Status != task.Succeeded || got.Attempt != 1 || got.Snoozes != 3 {
		t.Errorf("later: %s, attempt %d, snoozes %d; want succeeded at attempt 1 after 3 snoozes", got.Status, got.Attempt, got.Snoozes)
	}
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if want := "1 0\n1 1\n1 2\n1 3\n"; string(b) != want {
		t.Errorf("the runs saw S3QUEUE_ATTEMPT and S3QUEUE_SNOOZES\n%s, want\n%s", b, want)
	}
	var delays []string
	for _, h := range got.History {
		if h.From == task.Running && h.To == task.Pending {
			d, _, _ := strings.Cut(strings.TrimPrefix(h.Reason, "snoozed: retry after "), ":")
			delays = append(delays, d)
			if !strings.Contains(h.Reason, "exit 75") {
				t.Errorf("snooze %q: want the exit code", h.Reason)
			}
		}
	}
	if got, want := strings.Join(delays, " "), "100ms 200ms 400ms"; got != want {
		t.Errorf("the snoozes waited %s, want %s (the retry policy's backoff)", got, want)
	}
	if out := must(t, "get", later, "--store", store); !regexp.MustCompile(`(?m)^snoozes:\s+3\b`).MatchString(out) {
		t.Errorf("get does not show the snoozes:\n%s", out)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(must(t, "get", stuck, "--json", "--store", store)), &raw); err != nil || raw["snoozes"] != 1.0 {
		t.Errorf("get --json: snoozes %v (%v), want 1", raw["snoozes"], err)
	}
	var none map[string]any
	if err := json.Unmarshal([]byte(must(t, "get", submit(t, store, cfg, "new"), "--json", "--store", store)), &none); err != nil || none["snoozes"] != 0.0 {
		t.Errorf("get --json of a task that never snoozed: snoozes %v (%v), want 0", none["snoozes"], err)
	}

	// Canceled while it waits after its snooze: the attempt that ran counts.
	must(t, "cancel", stuck, "--store", store)
	c := getTask(t, store, stuck)
	if last := c.History[len(c.History)-1]; c.Status != task.Canceled || c.Attempt != 1 || last.From != task.Pending || last.Attempt != 1 {
		t.Errorf("canceled after a snooze: %s, attempt %d, last transition %+v; want canceled, attempt 1", c.Status, c.Attempt, last)
	}
	if out := must(t, "list", "--status", "canceled", "--store", store); !strings.Contains(lineWith(out, stuck), "1/2") {
		t.Errorf("list shows the canceled task without its attempt:\n%s", out)
	}
	if out := must(t, "history", stuck, "--store", store); !regexp.MustCompile(`pending→canceled\s+1\s`).MatchString(out) {
		t.Errorf("history:\n%s", out)
	}
}

// The times history, get and list show are the S3 clock's best estimate,
// not the upper bound a worker decides leases by (which ran a second
// ahead): on the embedded store, whose clock is exact, every recorded time
// of a task lies between the wall-clock times around its life, and a task
// submitted after another finished reads as updated after it (issue 26.8).
func TestRecordedTimesAreTheServersTime(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	const slack = 20 * time.Millisecond
	before := time.Now()
	first := submit(t, store, cfg, "echo")
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "echo=cat")
	done := waitTerminal(t, store, first)
	after := time.Now()
	second := submit(t, store, cfg, "echo")
	stop()

	if done.Status != task.Succeeded || len(done.History) < 3 {
		t.Fatalf("first task %s, history %+v", done.Status, done.History)
	}
	for _, h := range done.History {
		if h.At.Before(before.Add(-slack)) || h.At.After(after.Add(slack)) {
			t.Errorf("%s→%s recorded at %s, outside the task's life [%s, %s]", h.From, h.To,
				fmtTime(h.At), fmtTime(before), fmtTime(after))
		}
	}
	if u := done.UpdatedAt; u.After(after.Add(slack)) {
		t.Errorf("updated %s, after the task was seen finished at %s", fmtTime(u), fmtTime(after))
	}
	if s := getTask(t, store, second); !s.CreatedAt.After(done.UpdatedAt) {
		t.Errorf("a task submitted after another finished reads as created at %s, before that one's end at %s",
			fmtTime(s.CreatedAt), fmtTime(done.UpdatedAt))
	}
}
