package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// batchResults parses what submit --batch printed: line number → id or
// "error: ...". Each line must be reported once.
func batchResults(t *testing.T, stdout string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if l == "" {
			continue
		}
		num, rest, ok := strings.Cut(l, " ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			t.Fatalf("result %q is not \"LINE ID\" or \"LINE error: ...\"", l)
		}
		if _, dup := out[n]; dup {
			t.Fatalf("line %d reported twice:\n%s", n, stdout)
		}
		out[n] = rest
	}
	return out
}

func TestSubmitBatch(t *testing.T) {
	store, _ := newStore(t)
	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	lines := strings.Join([]string{
		`{"type": "resize", "input": {"w": 10,  "h": 20}}`,
		``, // blank lines are skipped, and still counted
		`{"input": [1, 2]}`,
		`{"type": "mail", "max_attempts": 5, "timeout": "2m", "key": "customer-7", "delay": "1h"}`,
		`{"type": "mail", "at": "` + at.Format(time.RFC3339) + `", "input": null}`,
		`{"type": "report", "idempotency_key": "r-1"}`,
		`{"type": "report", "idempotency_key": "r-1"}`,
	}, "\n") // no newline after the last line
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	os.WriteFile(file, []byte(lines), 0o644)
	r := cli(t, "", "submit", "--store", store, "--batch", file, "--type", "sum", "--max-attempts", "2")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := batchResults(t, r.stdout)
	if len(res) != 6 {
		t.Fatalf("%d results for 6 lines:\n%s", len(res), r.stdout)
	}
	for n, v := range res {
		if !task.ValidID(v) {
			t.Fatalf("line %d: %q, not a task id", n, v)
		}
	}
	if got := getTask(t, store, res[1]); got.Type != "resize" || string(got.Input) != `{"w":10,"h":20}` || got.MaxAttempts != 2 {
		t.Errorf("line 1: %+v", got)
	}
	if got := getTask(t, store, res[3]); got.Type != "sum" || string(got.Input) != `[1,2]` {
		t.Errorf("line 3 did not take --type: %+v", got)
	}
	got := getTask(t, store, res[4])
	if got.MaxAttempts != 5 || got.Timeout.D() != 2*time.Minute || got.ShardKey != "customer-7" {
		t.Errorf("line 4's options not applied: %+v", got)
	}
	if d := got.AvailableAt.Sub(got.CreatedAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("line 4's delay of 1h made the task available %v after creation", d)
	}
	if got := getTask(t, store, res[5]); !got.AvailableAt.Equal(at) || len(got.Input) != 0 {
		t.Errorf("line 5: available %v, input %s; want %v and no input", got.AvailableAt, got.Input, at)
	}
	if res[6] != res[7] {
		t.Errorf("the same idempotency key gave two tasks: %s %s", res[6], res[7])
	}

	// From stdin, the same.
	r = cli(t, `{"type": "x", "input": 1}`+"\n", "submit", "--store", store, "--batch", "-")
	if res := batchResults(t, r.stdout); r.code != 0 || len(res) != 1 || !task.ValidID(res[1]) {
		t.Errorf("stdin: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// A malformed or invalid line is an error of that line; the others are
// submitted, and the command exits 2.
func TestSubmitBatchReportsBadLinesAndGoesOn(t *testing.T) {
	store, _ := newStore(t)
	long := `{"type": "x", "input": "` + strings.Repeat("y", maxBatchLine) + `"}`
	lines := []string{
		`{"type": "ok", "input": 1}`,
		`{not json`,
		`{"type": "ok", "inptu": 1}`,
		`{"input": 1}`,
		`{"type": "has space"}`,
		`{"type": "ok", "delay": "soon"}`,
		`{"type": "ok", "at": "tomorrow"}`,
		`{"type": "ok", "delay": "1s", "at": "2030-01-01T00:00:00Z"}`,
		`{"type": "ok", "max_attempts": 0}`,
		`{"type": "ok", "timeout": "-1s"}`,
		`{"type": "ok"} {"type": "ok"}`,
		`[1, 2]`,
		long,
		`{"type": "ok", "input": "` + strings.Repeat("z", task.MaxInputBytes) + `"}`,
		`{"type": "ok", "input": 2}`,
	}
	wants := map[int]string{
		2: "not a JSON object of a task", 3: `unknown field "inptu"`, 4: "no task type", 5: "type",
		6: `"delay" "soon"`, 7: `"at" "tomorrow" is not an RFC 3339 time`, 8: `"at" and "delay" exclude each other`,
		9: `"max_attempts" 0: want 1..1000`, 10: `"timeout" "-1s"`, 11: "more than one JSON value",
		12: "not a JSON object of a task", 13: fmt.Sprintf("line is over %d bytes", maxBatchLine), 14: "over the limit of 262144",
	}
	r := cli(t, strings.Join(lines, "\n")+"\n", "submit", "--store", store, "--batch", "-")
	wantExit(t, r, exitUsage, "13 of 15 lines not submitted (13 malformed or invalid, 0 failed)")
	res := batchResults(t, r.stdout)
	if len(res) != len(lines) {
		t.Fatalf("%d results for %d lines:\n%s", len(res), len(lines), r.stdout)
	}
	for n, want := range wants {
		if !strings.HasPrefix(res[n], "error: ") || !strings.Contains(res[n], want) {
			t.Errorf("line %d: %q, want an error containing %q", n, res[n], want)
		}
	}
	for _, n := range []int{1, 15} {
		if !task.ValidID(res[n]) {
			t.Errorf("line %d: %q, want a task id", n, res[n])
		}
	}
}

// A line the store refuses fails alone, with exit 1.
func TestSubmitBatchFailedLineIsExit1(t *testing.T) {
	store, _ := newStore(t)
	// A timeout of twice the lease margin or less is refused by the producer.
	r := cli(t, `{"type": "a"}`+"\n"+`{"type": "b", "timeout": "3s"}`+"\n"+`{"type": "c"}`+"\n"+`{"nope": 1}`+"\n",
		"submit", "--store", store, "--batch", "-")
	wantExit(t, r, exitRuntime, "2 of 4 lines not submitted (1 malformed or invalid, 1 failed)")
	res := batchResults(t, r.stdout)
	if !strings.Contains(res[2], "error: submit: timeout 3s is too short") || !task.ValidID(res[1]) || !task.ValidID(res[3]) {
		t.Errorf("results %v", res)
	}
}

func TestSubmitBatchUsageErrors(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch", "-", "--input", "1"}, "--batch and --input exclude each other"},
		{[]string{"--batch", "-", "--input-file", "x"}, "--batch and --input-file exclude each other"},
		{[]string{"--batch", "-", "--idempotency-key", "k"}, "--batch and --idempotency-key exclude each other"},
		{[]string{"--batch", "/nonexistent/tasks.jsonl"}, "submit: --batch: open /nonexistent/tasks.jsonl"},
		{[]string{"--batch", "-", "--type", "bad type"}, "submit: --type:"},
		{[]string{"--batch", "-", "--max-attempts", "0"}, "--max-attempts 0: want 1..1000"},
	} {
		r := cli(t, "", append([]string{"submit", "--store", store}, tc.args...)...)
		wantExit(t, r, exitUsage, tc.want)
	}
	if keys := storeKeys(t, store); len(keys) != 0 {
		t.Errorf("usage errors wrote %v", keys)
	}
}

// lineSource serves n lines of the same length, a little at a time, and
// counts the bytes read from it.
type lineSource struct {
	line   []byte
	n      int
	served atomic.Int64
	eof    chan struct{}
	once   sync.Once
	i, off int
}

func newLineSource(n int) *lineSource {
	return &lineSource{line: []byte(`{"type": "t", "input": "abcdefgh"}` + "\n"), n: n, eof: make(chan struct{})}
}

func (s *lineSource) Read(p []byte) (int, error) {
	if s.i == s.n {
		s.once.Do(func() { close(s.eof) })
		return 0, io.EOF
	}
	p = p[:min(len(p), 512)]
	k := 0
	for k < len(p) && s.i < s.n {
		c := copy(p[k:], s.line[s.off:])
		k += c
		s.off += c
		if s.off == len(s.line) {
			s.i, s.off = s.i+1, 0
		}
	}
	s.served.Add(int64(k))
	return k, nil
}

// batchStore checks, at each task PUT, that the command has read no more
// lines than the submitter may hold; hold, if set, keeps task PUTs waiting
// until it is closed.
type batchStore struct {
	*mem.Store
	src       *lineSource
	mostLines int // lines held besides those whose PUT has begun
	hold      <-chan struct{}

	mu       sync.Mutex
	puts     int
	overRead string
}

func (s *batchStore) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasPrefix(key, "tasks/") {
		s.mu.Lock()
		s.puts++
		// The lines held, and at most one read (512 bytes) buffered
		// beyond them.
		served := int(s.src.served.Load())
		if served > (s.puts+s.mostLines)*len(s.src.line)+512 && s.overRead == "" {
			s.overRead = fmt.Sprintf("%d bytes (%d lines) read at the PUT of task %d", served, served/len(s.src.line), s.puts)
		}
		s.mu.Unlock()
		if s.hold != nil {
			select {
			case <-s.hold:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	return s.Store.Put(ctx, key, body, opts)
}

// runBatch runs submit --batch - on st with stdin src and the environment
// env.
func runBatch(t *testing.T, st s3store.Store, src io.Reader, env ...string) cliResult {
	t.Helper()
	var out, errb syncBuffer
	a := &app{stdin: src, stdout: &out, stderr: &errb, environ: func() []string { return env },
		open: func(context.Context, string) (s3store.Store, error) { return st, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.report(a.dispatch(ctx, []string{"submit", "--store", "s3://batch", "--batch", "-"}))
	return cliResult{code, out.String(), errb.String()}
}

// The command reads a line only once the submitter has room for it: it
// holds at most batch_parallelism + max_queue_depth lines (and the one it
// is adding), however long the input is.
func TestSubmitBatchHoldsFewLines(t *testing.T) {
	const lines, parallel, depth = 3000, 2, 3
	src := newLineSource(lines)
	// Begun PUTs aside: up to parallel submissions before their PUT, depth
	// pending, one waiting in Add and one being parsed.
	st := &batchStore{Store: mem.New(), src: src, mostLines: parallel + depth + 2}
	r := runBatch(t, st, src, "S3QUEUE_PRODUCER_BATCH_PARALLELISM=2", "S3QUEUE_PRODUCER_MAX_QUEUE_DEPTH=3")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if res := batchResults(t, r.stdout); len(res) != lines {
		t.Fatalf("%d results for %d lines", len(res), lines)
	}
	if st.overRead != "" {
		t.Errorf("the command read ahead of the submitter: %s (at most %d + PUTs begun)", st.overRead, st.mostLines)
	}
}

// Under queue_policy = "reject", lines that find the submitter full are
// errors of their own, and the command exits 1.
func TestSubmitBatchRejectPolicy(t *testing.T) {
	const lines = 10
	src := newLineSource(lines)
	// Task PUTs wait until every line has been read, so the buffer fills.
	st := &batchStore{Store: mem.New(), src: src, mostLines: lines, hold: src.eof}
	r := runBatch(t, st, src, "S3QUEUE_PRODUCER_BATCH_PARALLELISM=1", "S3QUEUE_PRODUCER_MAX_QUEUE_DEPTH=1", "S3QUEUE_PRODUCER_QUEUE_POLICY=reject")
	res := batchResults(t, r.stdout)
	if len(res) != lines {
		t.Fatalf("%d results for %d lines:\n%s", len(res), lines, r.stdout)
	}
	submitted := 0
	for n, v := range res {
		switch {
		case task.ValidID(v):
			submitted++
		case !strings.HasPrefix(v, "error: submitter queue full"):
			t.Errorf("line %d: %q", n, v)
		}
	}
	// One in flight (or not yet taken) and one pending at most.
	if submitted < 1 || submitted > 2 {
		t.Errorf("%d lines submitted, want 1 or 2:\n%s", submitted, r.stdout)
	}
	wantExit(t, r, exitRuntime, fmt.Sprintf("%d of %d lines not submitted (0 malformed or invalid, %d failed)", lines-submitted, lines, lines-submitted))
}

// Every key a --batch line accepts is named in submit --help and in
// docs/cli.md's table of batch fields.
func TestBatchKeysAreDocumented(t *testing.T) {
	help := must(t, "submit", "--help")
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	fields := reflect.TypeOf(batchLine{})
	for i := range fields.NumField() {
		key, _, _ := strings.Cut(fields.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(help, `"`+key+`":`) {
			t.Errorf("submit --help does not list the batch key %q", key)
		}
		if !strings.Contains(string(doc), "| `"+key+"` | ") {
			t.Errorf("docs/cli.md's batch fields lack %q", key)
		}
	}
}
