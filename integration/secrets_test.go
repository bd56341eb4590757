package integration

import (
	"context"
	"encoding/json"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/task"
)

// The secret key never appears in what the binary prints — logs (at debug
// level), errors, --json output, events — whether the command works or
// fails: a wrong secret, an unreachable server, a missing bucket, the
// credentials put in the store URL, a handler that prints its environment.
func TestSecretsNeverPrinted(t *testing.T) {
	srv := harness.MinIO(t)
	bin := buildCLI(t)
	bucket := srv.NewBucket(t)
	store := srv.StoreURL(bucket, storePrefix)
	secret := srv.SecretKey
	const wrongSecret = "wrong-secret-c0ffee-do-not-print"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	good := []string{"S3QUEUE_STORE=" + store, "S3QUEUE_LOG_LEVEL=debug", "AWS_SECRET_ACCESS_KEY=" + secret}
	check := func(what string, outputs ...string) {
		t.Helper()
		for _, out := range outputs {
			for _, s := range []string{secret, wrongSecret} {
				if strings.Contains(out, s) {
					t.Errorf("%s printed a secret key:\n%s", what, out)
				}
			}
		}
	}
	// A command that must work, and one that must fail (and say why).
	ok := func(env []string, args ...string) string {
		t.Helper()
		r := execCLI(t, ctx, bin, env, args...)
		check("s3queue "+strings.Join(args, " "), r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("s3queue %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	fails := func(what string, env []string, args ...string) {
		t.Helper()
		r := execCLI(t, ctx, bin, env, args...)
		check(what+": s3queue "+strings.Join(args, " "), r.stdout, r.stderr)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "s3queue: ") {
			t.Errorf("%s: s3queue %s: exit %d, want an error\nstdout: %s\nstderr: %s", what, strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}

	ok(good, "doctor")
	ok(good, "doctor", "--json")
	id := ok(good, "submit", "--type", "echo", "--input", `{"n":1}`)
	leaky := ok(good, "submit", "--type", "leaky", "--max-attempts", "1")
	// The worker and the monitor, at debug level, events on stdout.
	for _, args := range [][]string{
		{"worker", "--events", "-", "--exec", "echo=cat", "--exec", "leaky=env >&2; echo \"AWS_REGION=$AWS_REGION\" >&2; exit 3"},
		{"monitor", "--events", "-"},
	} {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(cmd.Environ(), good...)
		var out, errb lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, ctx, args[0]+" at work", time.Minute, func() bool {
			if args[0] == "worker" {
				return strings.Contains(out.String(), `"succeeded"`) && strings.Contains(out.String(), `"dead"`)
			}
			return strings.Contains(errb.String(), "monitor started")
		})
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s after SIGTERM: %v\n%s", args[0], err, errb.String())
		}
		check(args[0], out.String(), errb.String())
	}
	for _, args := range [][]string{
		{"get", id, "--json"}, {"get", leaky}, {"get", leaky, "--json"}, {"history", leaky, "--json"},
		{"list", "--json"}, {"stats", "--json"}, {"stats"},
	} {
		ok(good, args...)
	}
	var dead task.Task
	if err := json.Unmarshal([]byte(ok(good, "get", leaky, "--json")), &dead); err != nil || dead.Status != task.Dead ||
		!strings.Contains(dead.LastError, "AWS_REGION="+srv.Region) {
		t.Errorf("the leaky handler's task: %+v, %v; want dead with its environment as the error", dead, err)
	}

	// Failures.
	wrong := []string{"S3QUEUE_STORE=" + store, "S3QUEUE_LOG_LEVEL=debug", "AWS_SECRET_ACCESS_KEY=" + wrongSecret}
	for _, args := range [][]string{{"doctor"}, {"doctor", "--json"}, {"stats", "--json"}, {"submit", "--type", "x"}, {"worker", "--exec", "x=cat"}, {"monitor"}} {
		fails("wrong secret", wrong, args...)
	}
	u, err := url.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("endpoint", "http://127.0.0.1:1")
	u.RawQuery = q.Encode()
	unreachable := []string{"S3QUEUE_STORE=" + u.String(), "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_MAX_ATTEMPTS=1"}
	fails("unreachable server", unreachable, "doctor", "--json")
	fails("unreachable server", unreachable, "stats", "--json")
	noBucket := []string{"S3QUEUE_STORE=" + srv.StoreURL("no-such-bucket-s3queue", storePrefix), "AWS_SECRET_ACCESS_KEY=" + secret}
	for _, args := range [][]string{{"doctor"}, {"submit", "--type", "x"}, {"worker", "--exec", "x=cat"}, {"monitor"}} {
		fails("missing bucket", noBucket, args...)
	}
	inURL := strings.Replace(store, "s3://", "s3://"+srv.AccessKey+":"+secret+"@", 1)
	fails("credentials in the URL", []string{"AWS_SECRET_ACCESS_KEY=" + secret}, "stats", "--store", inURL)
	fails("credentials in the URL", []string{"AWS_SECRET_ACCESS_KEY=" + secret}, "stats", "--store", store+"&secret_key="+secret)
	fails("credentials in the config", []string{"S3QUEUE_STORE=" + store + "&aws_secret_access_key=" + secret}, "doctor", "--json")
}
