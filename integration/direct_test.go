package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// directConfig is the queue.toml of the direct-dispatch tests: short
// leases and scavenges, so that a killed worker's inbox is recovered
// within seconds.
const directConfig = `
[queue]
dispatch_mode = "direct"
[queue.direct_dispatch]
worker_discovery_cache_ttl_secs = 1
[worker]
concurrency = 2
poll_max = "500ms"
lease_margin = "500ms"
lease_duration_secs = 4
lease_renewal_interval_secs = 1
overflow_scavenge_interval_secs = 2
[monitor]
interval = "500ms"
repair_after = "2s"
stale_after = "2s"
`

// directHandler records each run in the worker's own file and takes 300ms.
const directHandler = `echo "$S3QUEUE_TASK_ID" >> "$RUNS"; sleep 0.3`

// TestDirectDispatchSurvivesKilledWorkers: three `s3queue worker`
// processes and an `s3queue monitor` on MinIO, the queue in direct
// dispatch; a Go producer routes 90 tasks to the workers' inboxes, and the
// worker with the fullest inbox is killed (SIGKILL) before it could run
// them. Its lease expires, a scavenger moves its inbox to the overflow,
// and the other workers claim every entry: every task succeeds, nothing is
// left in inbox/ or overflow/, and only the tasks the killed worker was
// running ran twice. A second worker started with a live worker's id is
// refused, and so is a worker configured for the shared mode.
func TestDirectDispatchSurvivesKilledWorkers(t *testing.T) {
	start := time.Now()
	srv := harness.MinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bucket := srv.NewBucket(t)
	url := srv.StoreURL(bucket, "q")
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := producer.New(ctx, st, producer.Config{Shards: 4, LeaseMargin: 500 * time.Millisecond,
		DispatchMode: shards.DispatchDirect, DiscoveryTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bin := buildCLI(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "queue.toml")
	if err := os.WriteFile(cfg, []byte(directConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"S3QUEUE_STORE=" + url}
	workers := map[string]*cliProcess{}
	runsOf := func(name string) string { return filepath.Join(dir, "runs-"+name) }
	startWorker := func(name string) {
		workers[name] = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+name, "RUNS="+runsOf(name)),
			"worker", "--config", cfg, "--exec", "job="+directHandler)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		startWorker(name)
	}
	startCLI(t, bin, env, "monitor", "--config", cfg)
	waitUntil(t, ctx, "three live workers that run job", time.Minute, func() bool {
		ws, _ := direct.ReadWorkers(ctx, st)
		n := 0
		for _, w := range ws {
			if w.Runs("job") {
				n++
			}
		}
		return n == 3
	})

	// A second process with a live worker's id is refused, naming it.
	dup := exec.CommandContext(ctx, bin, "worker", "--config", cfg, "--exec", "job=true")
	dup.Env = append(os.Environ(), append(slices.Clone(env), "S3QUEUE_WORKER_ID=w2")...)
	out, err := dup.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), `worker id "w2" is in use`) {
		t.Errorf("a second worker w2: %v\n%s", err, out)
	}
	// A worker configured for the shared mode refuses the direct queue.
	shared := exec.CommandContext(ctx, bin, "worker", "--exec", "job=true")
	shared.Env = append(os.Environ(), append(slices.Clone(env), "S3QUEUE_WORKER_ID=w9")...)
	out, err = shared.CombinedOutput()
	if !errors.As(err, &exit) || !strings.Contains(string(out), `set dispatch_mode = "direct"`) {
		t.Errorf("a shared-mode worker on the direct queue: %v\n%s", err, out)
	}

	t.Logf("three workers live after %v", time.Since(start).Round(100*time.Millisecond))
	var ids []string
	for range 90 {
		id, err := prod.Submit(ctx, "job", nil, producer.Options{Timeout: 3 * time.Second, MaxAttempts: 20})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Kill the worker with the fullest inbox at once: 30 tasks of 300ms on
	// 2 slots take it 4.5s, so most wait in its inbox.
	victim, most := "", -1
	for name := range workers {
		if n := len(listPrefix(ctx, t, srv.Minio(), bucket, "q/"+direct.Inbox(name))); n > most {
			victim, most = name, n
		}
	}
	workers[victim].kill(t)
	t.Logf("killed %s with %d entries in its inbox", victim, most)
	if most < 10 {
		t.Fatalf("the fullest inbox held %d entries: the test kills too late to mean anything", most)
	}
	startWorker("w4")

	killedAt := time.Now()
	waitUntil(t, ctx, "every task to succeed", 3*time.Minute, func() bool {
		for _, id := range ids {
			tk, err := prod.Get(ctx, id)
			if err != nil || tk.Status != task.Succeeded {
				return false
			}
		}
		return true
	})
	t.Logf("every task succeeded %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))
	waitUntil(t, ctx, "inbox/ and overflow/ to empty", time.Minute, func() bool {
		return len(listPrefix(ctx, t, srv.Minio(), bucket, "q/"+direct.InboxPrefix))+
			len(listPrefix(ctx, t, srv.Minio(), bucket, "q/"+direct.OverflowPrefix)) == 0
	})
	runs := map[string]int{}
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		b, err := os.ReadFile(runsOf(name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, id := range strings.Fields(string(b)) {
			runs[id]++
		}
	}
	twice := 0
	for _, id := range ids {
		switch n := runs[id]; {
		case n == 0:
			t.Errorf("task %s succeeded without a recorded run", id)
		case n > 1:
			twice++
		}
	}
	// Only the tasks the killed worker had started (2 slots) may run again.
	if twice > 2 {
		t.Errorf("%d tasks ran more than once, want at most the killed worker's 2", twice)
	}
	for name, p := range workers {
		if name != victim {
			p.stop(t)
		}
	}
	t.Logf("%d tasks; %d entries recovered from %s's inbox; %d ran twice", len(ids), most, victim, twice)
}
