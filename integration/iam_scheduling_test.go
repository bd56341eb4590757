package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/task"
)

// The roles' policies of deploy/iam cover what issue 15's features write:
// a worker's rate limit counter (ratelimits/) and results stored apart
// (results/), a producer's lane entries (lanes/), the monitor's result TTL
// (results/) and schedules (schedules/).
func TestIAMPoliciesCoverTheSchedulingFeatures(t *testing.T) {
	srv := harness.MinIO(t)
	bin := buildCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bucket := shortBucket(t, ctx, srv)
	store := srv.StoreURL(bucket, storePrefix)
	creds := map[string]roleCreds{}
	for _, role := range iamRoles {
		creds[role] = assumeRole(t, srv, role, bucket, storePrefix)
	}
	as := func(role string, extra ...string) []string { return append(creds[role].env(store), extra...) }

	worker := startAs(t, bin, "worker", as("worker", "S3QUEUE_WORKER_RESULT_INLINE_MAX=1024"), "worker",
		"--exec", "big=head -c 3000 /dev/zero | tr '\\0' x", "--exec", "lim=echo 1", "--rate-limit", "lim=5/s")
	waitUntil(t, ctx, "the worker creates the queue", time.Minute, func() bool {
		_, err := srv.Minio().StatObject(ctx, bucket, storePrefix+"/queue.json", minio.StatObjectOptions{})
		return err == nil
	})
	submit := func(args ...string) string {
		return mustCLI(t, ctx, bin, as("producer"), append([]string{"submit"}, args...)...)
	}
	big := submit("--type", "big")
	lim := submit("--type", "lim", "--priority", "high")
	status := func(id string) string {
		r := execCLI(t, ctx, bin, as("viewer"), "get", id, "--json")
		var tk task.Task
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &tk) != nil {
			return "exit " + r.stderr
		}
		return string(tk.Status)
	}
	for _, id := range []string{big, lim} {
		waitUntil(t, ctx, "task "+id+" succeeded", 30*time.Second, func() bool { return status(id) == "succeeded" })
	}
	mustCLI(t, ctx, bin, as("operator"), "schedule", "add", "beat", "--every", "2s", "--type", "lim")
	monitor := startAs(t, bin, "monitor", as("monitor", "S3QUEUE_MONITOR_INTERVAL=200ms", "S3QUEUE_MONITOR_RESULT_TTL=1s"), "monitor")
	time.Sleep(8 * time.Second)
	monitor.stop(t)
	worker.stop(t)
	for name, p := range map[string]*cliProcess{"worker": worker, "monitor": monitor} {
		out := p.stderr.String()
		if strings.Contains(strings.ToLower(out), "access denied") || strings.Contains(out, "level=ERROR") {
			t.Errorf("the %s met a refusal under its own policy:\n%s", name, out)
		}
	}
}
