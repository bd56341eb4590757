package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/integration/harness"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// envImage names the s3queue image of the code under test, built by
// scripts/image.sh (scripts/servers.sh runs it when Docker answers).
const envImage = "S3QUEUE_TEST_IMAGE"

// deployImage returns the s3queue image, or skips the test where no
// Docker engine answers (the harness then runs the servers as processes,
// and no container can run). With an engine, a missing image fails: the
// test command builds one every run.
func deployImage(t *testing.T) string {
	t.Helper()
	if err := harness.DockerAvailable(); err != nil {
		t.Skipf("no Docker engine, so no s3queue container can run: %v", err)
	}
	image := os.Getenv(envImage)
	if image == "" {
		t.Fatalf("%s is unset: run the tests with `make test` (or eval \"$(scripts/image.sh)\") to build the s3queue image", envImage)
	}
	return image
}

// The image runs as a real worker and a real monitor against MinIO, each in
// its own container on one Docker network, as deploy/docker-compose.yml
// runs them: the tasks submitted from here all succeed, a SIGTERM makes the
// worker finish the task it is running before it exits 0 (the drain that
// deploy/k8s sizes terminationGracePeriodSeconds to), and neither
// container's output shows the secret key.
func TestImageRunsAWorkerAndAMonitor(t *testing.T) {
	image := deployImage(t)
	nw := harness.NewNetwork(t)
	srv := nw.StartOn(t, harness.MinIOName, "minio")
	bucket := srv.NewBucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The producer: this test, through the Go API, on the published port.
	// It creates the queue.
	q, err := s3queue.Open(ctx, s3queue.Config{Store: srv.StoreURL(bucket, "queue")})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"S3QUEUE_STORE":         srv.NetworkStoreURL(bucket, "queue"),
		"AWS_ACCESS_KEY_ID":     srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY": srv.SecretKey,
		"AWS_REGION":            srv.Region,
		"S3QUEUE_LOG_FORMAT":    "json",
	}
	// The image has a shell (gosh) and s3queue, nothing else: the handlers
	// use shell builtins. hold spins until the test creates /tmp/release.
	worker := runS3queue(t, ctx, image, nw, "worker", env, wait.ForLog(`"msg":"worker started"`),
		"worker",
		"--exec", `echo=read -r x; echo "{\"n\":$x}"`,
		"--exec", `hold=while [ ! -e /tmp/release ]; do :; done; echo '"released"'`)
	monitorEnv := map[string]string{"S3QUEUE_MONITOR_INTERVAL": "1s"}
	for k, v := range env {
		monitorEnv[k] = v
	}
	monitor := runS3queue(t, ctx, image, nw, "monitor", monitorEnv, wait.ForLog(`"msg":"monitor started"`), "monitor")

	const n = 20
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = q.Submit(ctx, "echo", i, s3queue.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		tk := waitStatus(t, ctx, q, id, s3queue.Succeeded)
		var got struct{ N int }
		if err := json.Unmarshal(tk.Result, &got); err != nil || got.N != i {
			t.Errorf("task %s: result %s, want {\"n\":%d}", id, tk.Result, i)
		}
	}

	// Drain: SIGTERM while a handler runs. The worker says it is draining,
	// the task is still its own (running, not handed back), and once the
	// handler ends the outcome is committed and the worker exits 0.
	held, err := q.Submit(ctx, "hold", nil, s3queue.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ctx, q, held, s3queue.Running)
	stopped := make(chan error, 1)
	go func() {
		grace := time.Minute // the SIGKILL after it would fail the exit code check
		stopped <- worker.Stop(ctx, &grace)
	}()
	waitLog(t, ctx, worker, `"msg":"worker draining: no new claims; waiting for running tasks"`)
	if tk, err := q.Get(ctx, held); err != nil || tk.Status != s3queue.Running {
		t.Fatalf("after SIGTERM, held task: %+v, %v; want still running on the draining worker", tk, err)
	}
	if code, out, err := worker.Exec(ctx, []string{"/bin/sh", "-c", "echo go > /tmp/release"}, tcexec.Multiplexed()); err != nil || code != 0 {
		b, _ := io.ReadAll(out)
		t.Fatalf("release the held task: exit %d, %v: %s", code, err, b)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop the worker: %v", err)
	}
	if code := exitCode(t, ctx, worker); code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0\n%s", code, logsOf(t, worker))
	}
	if tk := waitStatus(t, ctx, q, held, s3queue.Succeeded); string(tk.Result) != `"released"` {
		t.Errorf("held task result %s, want \"released\"", tk.Result)
	}
	if logs := logsOf(t, worker); !strings.Contains(logs, `"msg":"worker stopped"`) || !strings.Contains(logs, `"released":0`) {
		t.Errorf("worker log lacks a stop with nothing handed back:\n%s", logs)
	}

	grace := 30 * time.Second
	if err := monitor.Stop(ctx, &grace); err != nil {
		t.Fatalf("stop the monitor: %v", err)
	}
	if code := exitCode(t, ctx, monitor); code != 0 {
		t.Errorf("monitor exited %d after SIGTERM, want 0\n%s", code, logsOf(t, monitor))
	}
	for name, c := range map[string]*testcontainers.DockerContainer{"worker": worker, "monitor": monitor} {
		logs := logsOf(t, c)
		if strings.Contains(logs, srv.SecretKey) {
			t.Errorf("the %s container's output contains the secret key:\n%s", name, logs)
		}
		if !strings.Contains(logs, `"msg":"`+name+` stopped"`) {
			t.Errorf("the %s container's output lacks its stop line:\n%s", name, logs)
		}
	}
}

// runS3queue starts the image with args on nw and removes the container
// when the test ends.
func runS3queue(t *testing.T, ctx context.Context, image string, nw *harness.Network, name string, env map[string]string, ready wait.Strategy, args ...string) *testcontainers.DockerContainer {
	t.Helper()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd(args...),
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(map[string]string{"s3queue.test": t.Name()}),
		network.WithNetworkName([]string{name}, nw.Name),
		testcontainers.WithWaitStrategyAndDeadline(time.Minute, ready),
	)
	t.Cleanup(func() {
		if ctr == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			t.Logf("%s container output:\n%s", name, logsOf(t, ctr))
		}
		if err := ctr.Terminate(ctx); err != nil {
			t.Logf("remove the %s container: %v", name, err)
		}
	})
	if err != nil {
		t.Fatalf("start the %s container from %s: %v", name, image, err)
	}
	return ctr
}

// waitStatus polls task id until it has status want (failing the test at
// ctx's deadline) and returns it.
func waitStatus(t *testing.T, ctx context.Context, q *s3queue.Queue, id string, want s3queue.Status) *s3queue.Task {
	t.Helper()
	for {
		tk, err := q.Get(ctx, id)
		if err == nil && tk.Status == want {
			return tk
		}
		select {
		case <-ctx.Done():
			t.Fatalf("task %s: %+v, %v; want %s", id, tk, err, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitLog polls the container's output until it contains line.
func waitLog(t *testing.T, ctx context.Context, c *testcontainers.DockerContainer, line string) {
	t.Helper()
	for !strings.Contains(logsOf(t, c), line) {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s in the container's output:\n%s", line, logsOf(t, c))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func logsOf(t *testing.T, c *testcontainers.DockerContainer) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func exitCode(t *testing.T, ctx context.Context, c *testcontainers.DockerContainer) int {
	t.Helper()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatalf("container state: %v", err)
	}
	if st.Running {
		t.Fatalf("container still running")
	}
	return st.ExitCode
}
