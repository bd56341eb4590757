package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/task"
)

// A handler runs without the worker's S3 credentials (it could rewrite any
// task with them, or print them into its task's error), its Pod Identity
// token and the dashboard's token, but with the rest of the worker's
// environment, the token file's path included.
func TestHandlersDoNotInheritTheWorkersCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAWORKER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
	t.Setenv("AWS_SESSION_TOKEN", "worker-token")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token")
	t.Setenv("S3QUEUE_DASHBOARD_TOKEN", "dashboard-token-0123456789")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token")
	t.Setenv("AWS_REGION", "eu-west-3")
	h := execHandler{typ: "env", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		command: `printf '"%s|%s|%s|%s|%s|%s|%s"' "${AWS_ACCESS_KEY_ID-unset}" "${AWS_SECRET_ACCESS_KEY-unset}" "${AWS_SESSION_TOKEN-unset}" ` +
			`"${AWS_CONTAINER_AUTHORIZATION_TOKEN-unset}" "${S3QUEUE_DASHBOARD_TOKEN-unset}" "${AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE##*/}" "$AWS_REGION"`}
	got, err := h.handle(context.Background(), &task.Task{ID: "01JDXYZ0000000000000000000", Type: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"unset|unset|unset|unset|unset|eks-pod-identity-token|eu-west-3"`; string(got) != want {
		t.Errorf("handler saw %s, want %s", got, want)
	}
}

// The AWS SDK for Go v2's environment variables (config/env_config.go and
// resolve_credentials.go, v1.33), with AWS_SECURITY_TOKEN, which older
// SDKs and boto read: those holding a credential, and the rest, which name
// places and settings.
var (
	sdkCredentialEnv = []string{
		"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY",
		"AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
	}
	sdkOtherEnv = []string{
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS",
		"AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE",
		"AWS_USE_FIPS_ENDPOINT", "AWS_ACCOUNT_ID", "AWS_SDK_UA_APP_ID", "AWS_LOGIN_CACHE_DIRECTORY",
		"AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_S3_DISABLE_EXPRESS_SESSION_AUTH",
	}
	// Credentials of the S3 servers a worker is deployed beside, and
	// s3queue's own secrets.
	otherCredentialEnv = []string{
		"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY", "MINIO_KMS_SECRET_KEY",
		"S3QUEUE_DASHBOARD_TOKEN", "S3QUEUE_TEST_ACCESS_KEY", "S3QUEUE_TEST_SECRET_KEY",
	}
)

func TestCredentialEnvNames(t *testing.T) {
	for _, name := range append(append([]string{}, sdkCredentialEnv...), otherCredentialEnv...) {
		if !credentialEnv(name) {
			t.Errorf("%s is not taken for a credential: handlers would inherit it", name)
		}
	}
	// What configures s3queue (a handler may run it) or the handler's own
	// SDK, names a path, or is the user's own passes.
	others := append(append([]string{}, sdkOtherEnv...), "MINIO_ROOT_PASSWORD_FILE", "MINIO_ENDPOINT",
		config.EnvStore, config.EnvTaskID, "GITHUB_TOKEN", "DATABASE_PASSWORD", "PATH", "HOME")
	for _, key := range config.Keys() {
		others = append(others, config.EnvName(key))
	}
	for _, name := range others {
		if credentialEnv(name) {
			t.Errorf("%s is taken for a credential: handlers would not inherit it", name)
		}
	}
}

// A secret in a failed command's stderr is cut out of the task's error,
// also where the 2 KiB tail starts in the middle of it.
func TestRedactTail(t *testing.T) {
	secrets := []string{"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "short-but-8"}
	for _, tc := range []struct {
		name, raw string
		n         int
		cut       bool
		want      string
	}{
		{"none", "disk on fire\n", 100, false, "disk on fire\n"},
		{"whole", "key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY pw=short-but-8!", 100, false, "key=[REDACTED] pw=[REDACTED]!"},
		{"twice in a row", "short-but-8short-but-8.", 100, false, "[REDACTED]."},
		{"tail starts inside it", "xx wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY end", 10, false, "...[REDACTED] end"},
		// A buffer that lost its start, holding n bytes and the longest
		// secret's length, may begin with the end of a secret: it lies
		// before the n bytes kept.
		{"fragment before the tail", "EXAMPLEKEY" + strings.Repeat(".", 30) + "the last 20 bytes...", 20, true, "...the last 20 bytes..."},
		{"cut buffer", "tail", 100, true, "...tail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactTail([]byte(tc.raw), tc.n, tc.cut, secrets); got != tc.want {
				t.Errorf("redactTail(%q, %d) = %q, want %q", tc.raw, tc.n, got, tc.want)
			}
		})
	}
}

// What a user meets: a worker started with every credential name in its
// environment (as an env file for a worker and MinIO side by side would
// have it). A handler that prints its environment sees none of them and
// the rest of the environment; a failing handler that prints the shared
// credentials file (the same keys, found another way) leaves [REDACTED] in
// the task's error; and no secret value reaches `get`, the events or the
// worker's own log at debug level.
func TestWorkerBinaryKeepsCredentialsFromHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	dir := t.TempDir()
	secrets := map[string]string{}
	var environ []string
	for _, name := range append(append([]string{}, sdkCredentialEnv...), otherCredentialEnv...) {
		secrets[name] = "secret-of-" + strings.ToLower(name) + "-0123456789"
		environ = append(environ, name+"="+secrets[name])
	}
	credFile := filepath.Join(dir, "credentials")
	if err := os.WriteFile(credFile, []byte("[default]\naws_access_key_id = "+secrets["AWS_ACCESS_KEY_ID"]+
		"\naws_secret_access_key = "+secrets["AWS_SECRET_ACCESS_KEY"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	passed := map[string]string{
		"AWS_REGION": "eu-west-3", "AWS_PROFILE": "handler", "AWS_SHARED_CREDENTIALS_FILE": credFile,
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "http://169.254.170.23/v1/credentials",
		"MINIO_ROOT_PASSWORD_FILE":               "/run/secrets/minio",
		"MY_APP_SETTING":                         "kept",
		"GITHUB_TOKEN":                           "the-users-own-token", // not the worker's: passes
	}
	for k, v := range passed {
		environ = append(environ, k+"="+v)
	}

	envID := submit(t, store, cfg, "env")
	leakID := submit(t, store, cfg, "leak", "--max-attempts", "1")
	events := filepath.Join(dir, "events.jsonl")
	cmd := exec.Command(os.Args[0], "--log-level", "debug", "worker", "--store", store, "--config", cfg, "--events", events,
		"--exec", "env=env", "--exec", `leak=echo "cannot reach S3 with:" >&2; cat "$AWS_SHARED_CREDENTIALS_FILE" >&2; exit 3`)
	cmd.Env = append(append(os.Environ(), environ...), "S3QUEUE_TEST_RUN_MAIN=1")
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	envTask := waitTerminal(t, store, envID)
	leakTask := waitTerminal(t, store, leakID)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("worker: %v; stderr:\n%s", err, stderr.String())
	}

	var printed string
	if err := json.Unmarshal(envTask.Result, &printed); envTask.Status != task.Succeeded || err != nil {
		t.Fatalf("env: %s, result %s (%v), error %q", envTask.Status, envTask.Result, err, envTask.LastError)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(printed, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			seen[k] = v
		}
	}
	for name := range secrets {
		if v, ok := seen[name]; ok {
			t.Errorf("the handler inherited %s=%s", name, v)
		}
	}
	for name, want := range passed {
		if seen[name] != want {
			t.Errorf("the handler saw %s=%q, want %q", name, seen[name], want)
		}
	}
	if seen["PATH"] == "" || seen[config.EnvTaskID] != envID {
		t.Errorf("the handler saw PATH=%q %s=%q: the rest of the environment must pass", seen["PATH"], config.EnvTaskID, seen[config.EnvTaskID])
	}

	want := "cannot reach S3 with: [default] aws_access_key_id = [REDACTED] aws_secret_access_key = [REDACTED]"
	if leakTask.Status != task.Dead || !strings.Contains(strings.Join(strings.Fields(leakTask.LastError), " "), want) {
		t.Errorf("leak: %s with error %q, want dead with %q", leakTask.Status, leakTask.LastError, want)
	}
	got := must(t, "get", leakID, "--json", "--store", store) + must(t, "history", leakID, "--store", store)
	eventsText, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(eventsText), "[REDACTED]") {
		t.Errorf("the events do not show the failure's redacted error:\n%s", eventsText)
	}
	for _, out := range []struct{ what, text string }{
		{"env's result", printed}, {"get and history", got}, {"the events", string(eventsText)}, {"the worker's log", stderr.String()},
	} {
		for name, v := range secrets {
			if strings.Contains(out.text, v) {
				t.Errorf("%s show the value of %s:\n%s", out.what, name, out.text)
			}
		}
	}
}

// --handler-env passes only the variables it names, credentials never; a
// credential named there is a usage error.
func TestHandlerEnvAllowlist(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "worker-secret-0123456789")
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("MY_APP_SETTING", "kept")
	t.Setenv("MY_OTHER", "kept too")
	t.Setenv("UNLISTED", "dropped")
	id := submit(t, store, cfg, "env")
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--handler-env", "PATH, MY_*", "--handler-env", "AWS_*",
		"--exec", `env=printf '"%s|%s|%s|%s|%s|%s|%s"' "${AWS_SECRET_ACCESS_KEY-unset}" "${AWS_REGION-unset}" "${MY_APP_SETTING-unset}" `+
			`"${MY_OTHER-unset}" "${UNLISTED-unset}" "${HOME-unset}" "${S3QUEUE_TASK_TYPE-unset}"`)
	got := waitTerminal(t, store, id)
	stop()
	if want := `"unset|eu-west-3|kept|kept too|unset|unset|env"`; got.Status != task.Succeeded || string(got.Result) != want {
		t.Errorf("handler saw %s (%s %q), want %s", got.Result, got.Status, got.LastError, want)
	}

	for bad, want := range map[string]string{
		"PATH,AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY holds a credential, which handlers never inherit",
		"MINIO_ROOT_PASSWORD":        "MINIO_ROOT_PASSWORD holds a credential",
		"A=B":                        `want NAME or PREFIX* separated by commas, got "A=B"`,
	} {
		r := cli(t, "", "worker", "--store", store, "--handler-env", bad, "--exec", "env=env")
		wantExit(t, r, exitUsage, "--handler-env "+strconv.Quote(bad)+": "+want)
	}
}

// A handler cannot read the credentials from the worker's own environment
// instead of its own: /proc/$PPID/environ is closed to the worker's user
// (Linux; the worker is not dumpable). Root reads it anyway, so as root the
// test runs the binary as nobody.
func TestHandlerCannotReadTheWorkersEnviron(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("hideEnviron is Linux only")
	}
	dir, err := os.MkdirTemp("", "environ")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := os.Args[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// nobody must be able to run the binary: copy it out of the
		// build directory, which is root's alone.
		bin = filepath.Join(dir, "s3queue.test")
		b, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	const secret = "worker-secret-0123456789"
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "S3QUEUE_TEST_RUN_MAIN=1", "AWS_SECRET_ACCESS_KEY="+secret)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	store := "file://" + filepath.Join(dir, "queue")
	if out, err := command("submit", "--store", store, "--type", "peek").CombinedOutput(); err != nil {
		t.Fatalf("submit: %v: %s", err, out)
	}
	seen := filepath.Join(dir, "seen")
	worker := command("worker", "--store", store, "--exec",
		`peek={ tr '\0' '\n' < /proc/$PPID/environ; } > seen.tmp 2>&1; mv seen.tmp seen`)
	var stderr syncBuffer
	worker.Stderr = &stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer worker.Process.Kill()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker's log:\n%s", stderr.String())
		}
	})
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	waitFor(t, "the handler to run", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("worker exited: %v\n%s", err, stderr.String())
		default:
		}
		_, err := os.Stat(seen)
		return err == nil
	})
	worker.Process.Signal(syscall.SIGTERM)
	<-exited
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || !strings.Contains(string(b), "Permission denied") {
		t.Errorf("the handler read its worker's environment:\n%s\nworker's log:\n%s", b, stderr.String())
	}
}
