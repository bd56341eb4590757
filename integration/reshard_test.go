package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// reshardConfig makes the worker and monitor processes quick to notice a
// dead member and an expired lease, and keeps every finished task (no
// retention), so that `get` can be asked about each one at the end.
const reshardConfig = `
[worker]
concurrency = 2
poll_min = "20ms"
poll_max = "200ms"
lease_margin = "200ms"
shutdown_grace = "2s"
member_ttl = "3s"
standby_poll = "1s"
drain_max = "2s"
dedicated = true
[monitor]
interval = "200ms"
repair_after = "2s"
stale_after = "500ms"
retention = "0"
`

// A reshard under load, with a worker killed at the same moment: a queue of
// 4 shards, a producer submitting steadily, 3 worker processes and a
// monitor process; mid-load `s3queue reshard --shards 8` runs while one
// worker gets SIGKILL. Every task submitted, before or after, reaches its
// final status, `s3queue get ID` finds each one, and no task ran twice
// except those the killed worker had started.
func TestReshardUnderLoad(t *testing.T) {
	srv := harness.MinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, bucket := openStore(t, srv, "queue")
	store := srv.StoreURL(bucket, "queue")
	bin := buildCLI(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "queue.toml")
	if err := os.WriteFile(cfg, []byte(reshardConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	// The queue, created with 4 shards by the producer that feeds it.
	prod, err := producer.New(ctx, st, producer.Config{Shards: 4, LeaseMargin: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	// Each run of a task appends "ID WORKER" to the worker's own file
	// before it works, so a run cut short by the kill is counted too.
	runs := func(name string) string { return filepath.Join(dir, "runs-"+name) }
	handler := `echo "$S3QUEUE_TASK_ID $RUNNER" >> "$RUNS"; sleep 0.3; echo '{"ok":true}'`
	procs := make(map[string]*cliProcess)
	for _, name := range []string{"w1", "w2", "w3"} {
		procs[name] = startCLI(t, bin, []string{"S3QUEUE_WORKER_ID=" + name, "RUNNER=" + name, "RUNS=" + runs(name)},
			"worker", "--store", store, "--config", cfg, "--exec", "job="+handler)
	}
	procs["m1"] = startCLI(t, bin, nil, "monitor", "--store", store, "--config", cfg)

	// The producer submits a task every 50 ms until told to stop.
	var mu sync.Mutex
	var before, after []string // ids submitted before and after the reshard began
	resharding := false
	stopSubmit := make(chan struct{})
	submitted := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stopSubmit:
				submitted <- nil
				return
			case <-tick.C:
			}
			id, err := prod.Submit(ctx, "job", map[string]int{"n": n}, producer.Options{Timeout: 3 * time.Second, MaxAttempts: 3})
			if err != nil {
				submitted <- fmt.Errorf("submit %d: %w", n, err)
				return
			}
			mu.Lock()
			if resharding {
				after = append(after, id)
			} else {
				before = append(before, id)
			}
			mu.Unlock()
		}
	}()

	// Load for a while, until the worker to be killed is running tasks.
	waitUntil(t, ctx, "w2 to run tasks", time.Minute, func() bool {
		select {
		case err := <-submitted:
			t.Fatalf("the producer stopped: %v", err)
		default:
		}
		return len(readRuns(t, runs("w2"))) >= 3
	})
	time.Sleep(time.Second) // more load: every worker busy, a backlog in each shard
	mu.Lock()
	resharding = true
	mu.Unlock()
	reshard := exec.CommandContext(ctx, bin, "reshard", "--shards", "8", "--store", store)
	var out strings.Builder
	reshard.Stdout, reshard.Stderr = &out, &out
	if err := reshard.Start(); err != nil {
		t.Fatal(err)
	}
	procs["w2"].kill(t)
	if err := reshard.Wait(); err != nil {
		t.Fatalf("s3queue reshard --shards 8: %v\n%s", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "resharded: 4 -> 8 shards") {
		t.Fatalf("s3queue reshard printed %q", got)
	}
	time.Sleep(3 * time.Second) // load after the reshard, seen by producer and workers
	close(stopSubmit)
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	all := append(append([]string(nil), before...), after...)
	mu.Unlock()
	t.Logf("%d tasks submitted before the reshard, %d after", len(before), len(after))
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("want tasks on both sides of the reshard: %d before, %d after", len(before), len(after))
	}

	// Every task reaches its final status: succeeded (the handler always
	// succeeds; the killed worker's tasks run again after their leases).
	waitUntil(t, ctx, "every task to succeed", time.Minute, func() bool {
		for _, id := range all {
			tk, err := prod.Get(ctx, id)
			if err != nil || tk.Status != task.Succeeded {
				return false
			}
		}
		return true
	})

	// The layout says 8 shards, with 4 before, and the fleet assigns by 8.
	m, err := shards.ReadManifest(ctx, st)
	if err != nil || m.Shards != 8 || len(m.Previous) != 1 || m.Previous[0] != 4 {
		t.Fatalf("manifest after the reshard: %+v, %v", m, err)
	}
	f, _, err := shards.ReadFleet(ctx, st)
	if err != nil || f.Shards != 8 {
		t.Fatalf("fleet after the reshard: shards %d, %v", f.Shards, err)
	}

	// `s3queue get ID` finds every task, placed before the reshard or after;
	// about half of those placed before are not where the new count puts
	// them, so get must try the old count.
	moved := 0
	for _, id := range before {
		tk, err := prod.Get(ctx, id)
		if err == nil && tk.Shard != task.ShardFor(id, 8) {
			moved++
		}
	}
	t.Logf("%d tasks placed before the reshard lie outside the shard the new count names", moved)
	if moved == 0 {
		t.Errorf("no task placed before the reshard needs the old count to be found: the test proves nothing about get")
	}
	for _, id := range all {
		cmd := exec.CommandContext(ctx, bin, "get", id, "--json", "--store", store)
		b, err := cmd.Output()
		var tk task.Task
		if err != nil || json.Unmarshal(b, &tk) != nil || tk.ID != id || tk.Status != task.Succeeded {
			t.Errorf("s3queue get %s: %v: %s", id, err, b)
		}
	}

	// No task ran twice, except those w2 had started when it was killed.
	ran := make(map[string][]string) // task id -> workers that started it
	for _, name := range []string{"w1", "w2", "w3"} {
		for _, id := range readRuns(t, runs(name)) {
			ran[id] = append(ran[id], name)
		}
	}
	again := 0
	for _, id := range all {
		by := ran[id]
		others := 0
		for _, w := range by {
			if w != "w2" {
				others++
			}
		}
		switch {
		case len(by) == 0:
			t.Errorf("task %s succeeded but no handler ran it", id)
		case others > 1 || len(by)-others > 1:
			t.Errorf("task %s ran %d times: %v", id, len(by), by)
		case len(by) > 1:
			again++
		}
	}
	t.Logf("%d tasks ran again after w2 was killed", again)

	for _, name := range []string{"w1", "w3", "m1"} {
		procs[name].stop(t)
	}
}

// buildCLI builds the s3queue binary into a temporary folder.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "s3queue")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/s3queue")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/s3queue: %v\n%s", err, out)
	}
	return bin
}

// cliProcess is a running s3queue command.
type cliProcess struct {
	name   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

// startCLI starts `s3queue args...` with env added to the test's own; it is
// killed when the test ends if still running.
func startCLI(t *testing.T, bin string, env []string, args ...string) *cliProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &cliProcess{name: strings.Join(append([]string{args[0]}, env...), " "), cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", p.name, p.stderr.String())
		}
	})
	return p
}

// kill ends the process with SIGKILL, as a machine that dies would.
func (p *cliProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

// stop ends the process with SIGTERM and checks that it exits cleanly.
func (p *cliProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM:\n%s", p.name, err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s still running 30s after SIGTERM", p.name)
	}
}

// lockedBuffer collects a process's stderr, safe for a concurrent read.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// readRuns returns the task ids in a worker's run file, one per run.
func readRuns(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id, _, ok := strings.Cut(sc.Text(), " "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitUntil polls cond until it holds, failing the test when it has not
// within d or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-deadline:
			t.Fatalf("%s did not happen within %v", what, d)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
