package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/task"
)

// TestMain keeps the tests hermetic (no S3QUEUE_* from the caller's
// environment) and lets a test run this binary as the s3queue command:
// with S3QUEUE_TEST_RUN_MAIN=1 it runs main() instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("S3QUEUE_TEST_RUN_MAIN") == "1" {
		os.Unsetenv("S3QUEUE_TEST_RUN_MAIN")
		os.Args = append([]string{"s3queue"}, os.Args[1:]...)
		main()
		return
	}
	// The browser test's settings are the tests' own, not the command's:
	// kept before the environment is cleared.
	browser = browserEnv{chromium: os.Getenv("S3QUEUE_TEST_CHROMIUM"), require: os.Getenv("S3QUEUE_TEST_REQUIRE_BROWSER") != ""}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "S3QUEUE_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a worker's
// logs and a test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs one command line in process.
func cli(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb syncBuffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return cliResult{code, out.String(), errb.String()}
}

// must runs a command line that must succeed and returns its stdout.
func must(t *testing.T, args ...string) string {
	t.Helper()
	r := cli(t, "", args...)
	if r.code != 0 {
		t.Fatalf("s3queue %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// wantExit checks a command line's exit code and that stderr holds one
// "s3queue: " line containing want.
func wantExit(t *testing.T, r cliResult, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "s3queue: ") || !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want a line \"s3queue: ...%s...\"", r.stderr, want)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
		t.Errorf("stderr has a stack trace: %s", r.stderr)
	}
}

// newStore returns the URL of a fresh file:// store and its directory.
func newStore(t *testing.T) (url, dir string) {
	dir = t.TempDir()
	return "file://" + dir, dir
}

// openStore opens url for direct inspection by a test.
func openStore(t *testing.T, url string) s3store.Store {
	t.Helper()
	st, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storeKeys lists every key in the store.
func storeKeys(t *testing.T, url string) []string {
	t.Helper()
	page, err := openStore(t, url).List(context.Background(), "", s3store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

// getTask reads a task through `get --json`.
func getTask(t *testing.T, store, id string) *task.Task {
	t.Helper()
	out := must(t, "get", id, "--json", "--store", store)
	var tk task.Task
	if err := json.Unmarshal([]byte(out), &tk); err != nil {
		t.Fatalf("get --json printed %q: %v", out, err)
	}
	// get --json indents nested JSON too; compare it compact.
	tk.Input, tk.Result = compact(t, tk.Input), compact(t, tk.Result)
	return &tk
}

func compact(t *testing.T, b json.RawMessage) json.RawMessage {
	t.Helper()
	if len(b) == 0 {
		return b
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// waitFor polls cond until it holds or 20s pass: background work is
// waited for by looking at the store, never by sleeping a fixed time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeConfig writes a queue.toml into a fresh directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "queue.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// background runs a long-lived command (worker, monitor) until the
// returned stop function cancels it; stop returns its exit code.
func background(t *testing.T, args ...string) (stderr *syncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, strings.NewReader(""), &out, stderr) }()
	stopped := false
	var code int
	stop = func() int {
		if stopped {
			return code
		}
		stopped = true
		cancel()
		select {
		case code = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("s3queue %s did not stop within 30s; stderr:\n%s", strings.Join(args, " "), stderr)
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return stderr, stop
}
