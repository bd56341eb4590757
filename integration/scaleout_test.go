package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// TestAFleetLargerThanTheShardCountDrainsABacklogMinIO runs four `s3queue
// worker` processes with slow handlers on a queue of two shards, and a
// backlog submitted before any of them joined (so all of it lies in shard
// 0): the members, saturated, ask for more members than there are shards,
// the first member grows the shard count, the standbys join, and busy
// members hand the backlog to idle ones. Every worker claims tasks (each
// task's history names the worker that ran it), every task succeeds, and
// none runs twice (nothing is killed).
func TestAFleetLargerThanTheShardCountDrainsABacklogMinIO(t *testing.T) {
	q := newMinIOQueue(t, 2, 4*time.Minute)
	ctx, url, st, prod := q.ctx, q.url, q.st, q.prod
	const tasks = 80
	ids := make([]string, 0, tasks)
	for i := range tasks {
		id, err := prod.Submit(ctx, "slow", map[string]int{"i": i}, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	bin := filepath.Join(t.TempDir(), "s3queue")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/s3queue").CombinedOutput(); err != nil {
		t.Fatalf("build s3queue: %v\n%s", err, out)
	}
	env := append(os.Environ(), "S3QUEUE_STORE="+url,
		"S3QUEUE_WORKER_CONCURRENCY=1", "S3QUEUE_WORKER_STANDBY_POLL=1s", "S3QUEUE_WORKER_POLL_MAX=1s",
		"S3QUEUE_WORKER_RESHARD_AFTER=3s", "S3QUEUE_WORKER_SHUTDOWN_GRACE=5s")
	workers := []string{"w0", "w1", "w2", "w3"}
	var wg sync.WaitGroup
	var procs []*exec.Cmd
	for _, id := range workers {
		cmd := exec.Command(bin, "worker", "--exec", "slow=sleep 1; cat")
		cmd.Env = append(env, "S3QUEUE_WORKER_ID="+id)
		logf, err := os.Create(filepath.Join(t.TempDir(), id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		wg.Add(1)
		go func() { defer wg.Done(); cmd.Wait(); logf.Close() }()
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s's log:\n%s", id, b)
			}
		})
	}
	stop := func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
	}
	defer stop()

	ranBy := map[string]int{}
	for {
		done := 0
		for k := range ranBy {
			delete(ranBy, k)
		}
		for _, id := range ids {
			tk, err := prod.Get(ctx, id)
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			if tk.Status != task.Succeeded {
				continue
			}
			done++
			runs := 0
			for _, tr := range tk.History {
				if tr.To == task.Running {
					runs++
					ranBy[tr.Worker]++
				}
			}
			if runs != 1 {
				t.Fatalf("task %s ran %d times, want once (no worker was killed): %+v", id, runs, tk.History)
			}
		}
		if done == tasks {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of %d tasks succeeded", done, tasks)
		case <-time.After(time.Second):
		}
	}
	fl, _, err := shards.ReadFleet(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tasks run per worker: %v; the fleet assigns by %d shards", ranBy, fl.Shards)
	if fl.Shards < 4 {
		t.Errorf("the fleet assigns by %d shards, want the automatic reshard to have grown it to 4 or more", fl.Shards)
	}
	for _, id := range workers {
		if ranBy[id] == 0 {
			t.Errorf("worker %s ran no task (%v)", id, ranBy)
		}
	}
	if n := len(ranBy); n != len(workers) {
		t.Errorf("tasks ran by %d workers, want %d: %v", n, len(workers), fmt.Sprint(ranBy))
	}
}
