package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/task"
)

// The roles of docs/security.md, each with its policy in deploy/iam.
var iamRoles = []string{"producer", "worker", "monitor", "operator", "viewer"}

// roleCreds are temporary credentials scoped to one role's policy.
type roleCreds struct {
	accessKey, secretKey, token string
}

// env is the environment of an s3queue command run with these credentials
// on store.
func (c roleCreds) env(store string) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + c.accessKey,
		"AWS_SECRET_ACCESS_KEY=" + c.secretKey,
		"AWS_SESSION_TOKEN=" + c.token,
		"S3QUEUE_STORE=" + store,
	}
}

// assumeRole asks MinIO's STS for credentials whose rights are the root
// user's cut down to role's policy of deploy/iam (an inline session policy:
// MinIO's policy engine then decides every request as S3 would for an IAM
// user holding that policy), on bucket and prefix.
func assumeRole(t *testing.T, srv *harness.Server, role, bucket, prefix string) roleCreds {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "iam", role+".json"))
	if err != nil {
		t.Fatal(err)
	}
	policy := strings.NewReplacer("BUCKET", bucket, "PREFIX", prefix).Replace(string(raw))
	if !json.Valid([]byte(policy)) {
		t.Fatalf("deploy/iam/%s.json is not JSON", role)
	}
	// MinIO takes the policy compacted (its size limit counts every byte).
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(policy)); err != nil {
		t.Fatal(err)
	}
	sts, err := credentials.NewSTSAssumeRole(srv.Endpoint, credentials.STSAssumeRoleOptions{
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		Policy: compact.String(), Location: srv.Region, DurationSeconds: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := sts.GetWithContext(nil)
	if err != nil {
		t.Fatalf("assume the %s role: %v", role, err)
	}
	return roleCreds{v.AccessKeyID, v.SecretAccessKey, v.SessionToken}
}

// cliRun is one finished s3queue command.
type cliRun struct {
	code           int
	stdout, stderr string
}

// execCLI runs `s3queue args...` with env added to the test's own.
func execCLI(t *testing.T, ctx context.Context, bin string, env []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return cliRun{exit.ExitCode(), out.String(), errb.String()}
	case err != nil:
		t.Fatalf("s3queue %s: %v", strings.Join(args, " "), err)
	}
	return cliRun{0, out.String(), errb.String()}
}

// mustCLI runs a command that must succeed and returns its stdout, trimmed.
func mustCLI(t *testing.T, ctx context.Context, bin string, env []string, args ...string) string {
	t.Helper()
	r := execCLI(t, ctx, bin, env, args...)
	if r.code != 0 {
		t.Fatalf("s3queue %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// Each role's policy in deploy/iam, enforced by MinIO's policy engine
// through STS session policies, lets the role do its whole job with the
// real binary, and refuses what the role must not do: a worker run with
// the producer's policy stops at once with "access denied" and a non-zero
// exit, a producer cannot delete a task or reshard the queue, a viewer
// cannot cancel. No command prints any role's secret.
func TestIAMPoliciesOfEachRole(t *testing.T) {
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
	var outputs []string // every output, checked for secrets at the end
	defer func() {
		for _, out := range outputs {
			for role, c := range creds {
				if strings.Contains(out, c.secretKey) || strings.Contains(out, c.token) {
					t.Errorf("output shows the %s role's secret:\n%s", role, out)
				}
			}
		}
	}()

	// The worker creates the queue (the provider check under doctor/ and
	// the manifest) and runs what the producer submits.
	worker := startAs(t, bin, "worker", as("worker"), "worker", "--exec", "echo=cat", "--exec", "fail=exit 3")
	waitUntil(t, ctx, "the worker creates the queue", time.Minute, func() bool {
		_, err := srv.Minio().StatObject(ctx, bucket, storePrefix+"/queue.json", minio.StatObjectOptions{})
		return err == nil
	})

	// The producer: plain, idempotent (twice: the same id), dependent,
	// slotted and failing tasks.
	submit := func(args ...string) string {
		return mustCLI(t, ctx, bin, as("producer"), append([]string{"submit"}, args...)...)
	}
	plain := submit("--type", "echo", "--input", `{"n":1}`)
	keyed := submit("--type", "echo", "--input", `{"n":2}`, "--idempotency-key", "order-7")
	if again := submit("--type", "echo", "--input", `{"n":2}`, "--idempotency-key", "order-7"); again != keyed {
		t.Errorf("idempotent submit: %s, then %s", keyed, again)
	}
	child := submit("--type", "echo", "--input", `{"n":3}`, "--after", plain)
	slotted := submit("--type", "echo", "--input", `{"n":4}`, "--slot", "cat.png")
	failing := submit("--type", "fail", "--input", `{}`, "--max-attempts", "1")

	// The viewer follows them to their ends.
	status := func(id string) string {
		r := execCLI(t, ctx, bin, as("viewer"), "get", id, "--json")
		outputs = append(outputs, r.stdout, r.stderr)
		var tk task.Task
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &tk) != nil {
			return fmt.Sprintf("exit %d", r.code)
		}
		return string(tk.Status)
	}
	want := map[string]string{plain: "succeeded", keyed: "succeeded", child: "succeeded", slotted: "succeeded", failing: "dead"}
	for id, st := range want {
		waitUntil(t, ctx, "task "+id+" "+st, time.Minute, func() bool { return status(id) == st })
	}

	// The operator: cancel and requeue a task, reshard, stats.
	later := submit("--type", "echo", "--input", `{"n":5}`, "--delay", "1h")
	mustCLI(t, ctx, bin, as("operator"), "cancel", later)
	mustCLI(t, ctx, bin, as("operator"), "requeue", later)
	mustCLI(t, ctx, bin, as("operator"), "requeue", failing)
	mustCLI(t, ctx, bin, as("operator"), "reshard", "--shards", "20")
	outputs = append(outputs, mustCLI(t, ctx, bin, as("viewer"), "stats", "--json"))

	// The monitor, elected leader, sweeps and applies retention.
	monitor := startAs(t, bin, "monitor", as("monitor", "S3QUEUE_MONITOR_INTERVAL=200ms", "S3QUEUE_MONITOR_RETENTION=1s",
		"S3QUEUE_MONITOR_STALE_AFTER=1s", "S3QUEUE_MONITOR_FULL_SWEEP=1s", "S3QUEUE_MONITOR_LEADER=true"), "monitor")
	// (A keyed task is kept at least task.MinKeyedRetention, 10 minutes.)
	for _, id := range []string{plain, child, slotted} {
		waitUntil(t, ctx, "retention deletes "+id, time.Minute, func() bool { return status(id) == "exit 3" })
	}
	monitor.stop(t)
	worker.stop(t)
	for name, p := range map[string]*cliProcess{"worker": worker, "monitor": monitor} {
		out := p.stderr.String()
		outputs = append(outputs, out)
		if strings.Contains(out, "access denied") || strings.Contains(out, "level=ERROR") {
			t.Errorf("the %s met a refusal under its own policy:\n%s", name, out)
		}
	}

	// Refusals. A worker with the producer's credentials stops at its
	// first poll: the producer may not list tasks.
	impostor := execCLI(t, ctx, bin, as("producer"), "worker", "--exec", "echo=cat")
	outputs = append(outputs, impostor.stdout, impostor.stderr)
	t.Logf("worker with the producer's policy: exit %d: %s", impostor.code, impostor.stderr)
	if impostor.code == 0 || !strings.Contains(impostor.stderr, "access denied") {
		t.Errorf("worker with the producer's policy: exit %d, want a refusal\n%s", impostor.code, impostor.stderr)
	}
	// A producer can neither delete a task nor reshard the queue.
	producer, err := minio.New(strings.TrimPrefix(srv.Endpoint, "http://"), &minio.Options{
		Creds:  credentials.NewStaticV4(creds["producer"].accessKey, creds["producer"].secretKey, creds["producer"].token),
		Region: srv.Region, BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A task submitted now, that no monitor retires meanwhile.
	pending := submit("--type", "echo", "--delay", "1h")
	var key string
	for _, o := range listKeys(t, ctx, srv, bucket, storePrefix+"/tasks/") {
		if strings.HasSuffix(o, "/"+pending+".json") {
			key = o
		}
	}
	if key == "" {
		t.Fatalf("no task object of %s", pending)
	}
	err = producer.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
	if minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Errorf("producer deletes task object %s: %v, want AccessDenied", key, err)
	}
	if _, err := srv.Minio().StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err != nil {
		t.Errorf("task object %s after the producer's refused delete: %v", key, err)
	}
	for role, args := range map[string][]string{
		"producer": {"reshard", "--shards", "40"},
		"viewer":   {"cancel", pending},
	} {
		r := execCLI(t, ctx, bin, as(role), args...)
		outputs = append(outputs, r.stdout, r.stderr)
		if r.code == 0 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("%s: s3queue %s: exit %d, want a refusal\n%s", role, strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// startAs is startCLI for a command run as role: it names the process by
// its role, not by its environment, which holds the role's secret.
func startAs(t *testing.T, bin, role string, env []string, args ...string) *cliProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &cliProcess{name: args[0] + " as " + role, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
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

// shortBucket creates a bucket with a short name, removed when the test
// ends. A session policy, as AWS's, is limited to 2,048 characters, and the
// worker's names the bucket in twenty-odd ARNs: with NewBucket's long
// names it would not fit. (Attached to an IAM user or role, where the limit
// is 6,144 or more, the policies fit with any bucket name.)
func shortBucket(t *testing.T, ctx context.Context, srv *harness.Server) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "iam-" + hex.EncodeToString(b[:])
	if err := srv.Minio().MakeBucket(ctx, name, minio.MakeBucketOptions{Region: srv.Region}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Minio().RemoveBucketWithOptions(ctx, name, minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
			t.Logf("remove bucket %s: %v", name, err)
		}
	})
	return name
}

// listKeys lists every key under prefix with the root credentials.
func listKeys(t *testing.T, ctx context.Context, srv *harness.Server, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range srv.Minio().ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}
