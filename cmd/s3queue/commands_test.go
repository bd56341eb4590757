package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storetest/fakes3"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

func TestSubmitGetHistory(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "resize", "--input", `{ "w": 10,  "h": 20 }`))
	if !task.ValidID(id) {
		t.Fatalf("submit printed %q, not a task id", id)
	}

	got := getTask(t, store, id)
	if got.ID != id || got.Type != "resize" || got.Status != task.Pending || string(got.Input) != `{"w":10,"h":20}` {
		t.Errorf("task = %+v", got)
	}
	if got.MaxAttempts != 3 || got.Timeout.D() != 30*time.Second {
		t.Errorf("defaults not applied: max_attempts %d timeout %v", got.MaxAttempts, got.Timeout)
	}

	text := must(t, "get", id, "--store", store)
	for _, want := range []string{"id:", id, "status:", "pending", "attempt:", "0 of 3", `{"w":10,"h":20}`} {
		if !strings.Contains(text, want) {
			t.Errorf("get output lacks %q:\n%s", want, text)
		}
	}

	hist := must(t, "history", "--store", store, id)
	if !strings.Contains(hist, "(new)→pending") || !strings.Contains(hist, "submitted") || !strings.Contains(hist, "TIME") {
		t.Errorf("history output:\n%s", hist)
	}
	var transitions []task.Transition
	if err := json.Unmarshal([]byte(must(t, "history", id, "--json", "--store", store)), &transitions); err != nil || len(transitions) != 1 || transitions[0].To != task.Pending {
		t.Errorf("history --json: %v %+v", err, transitions)
	}
}

func TestSubmitInputSources(t *testing.T) {
	store, _ := newStore(t)
	r := cli(t, "[1, 2,\n 3]\n", "submit", "--store", store, "--type", "sum", "--input-file", "-")
	if r.code != 0 {
		t.Fatalf("stdin input: exit %d: %s", r.code, r.stderr)
	}
	if got := getTask(t, store, strings.TrimSpace(r.stdout)); string(got.Input) != "[1,2,3]" {
		t.Errorf("input from stdin = %s", got.Input)
	}

	file := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(file, []byte(`{"from":"file"}`), 0o644)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "sum", "--input-file", file))
	if got := getTask(t, store, id); string(got.Input) != `{"from":"file"}` {
		t.Errorf("input from file = %s", got.Input)
	}

	id = strings.TrimSpace(must(t, "submit", "--store", store, "--type", "noinput"))
	if got := getTask(t, store, id); len(got.Input) != 0 {
		t.Errorf("task without input has input %s", got.Input)
	}
}

func TestSubmitOptions(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--max-attempts", "5", "--timeout", "2m",
		"--delay", "1h", "--key", "customer-7"))
	got := getTask(t, store, id)
	if got.MaxAttempts != 5 || got.Timeout.D() != 2*time.Minute || got.ShardKey != "customer-7" {
		t.Errorf("options not applied: %+v", got)
	}
	if d := got.AvailableAt.Sub(got.CreatedAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("--delay 1h made the task available %v after creation", d)
	}
	other := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--key", "customer-7"))
	if getTask(t, store, other).Shard != got.Shard {
		t.Errorf("tasks with the same --key landed in different shards")
	}

	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	id = strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--at", at.Format(time.RFC3339)))
	if got := getTask(t, store, id); !got.AvailableAt.Equal(at) {
		t.Errorf("--at %v gave available_at %v", at, got.AvailableAt)
	}

	first := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--idempotency-key", "order-1"))
	second := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--idempotency-key", "order-1"))
	if first != second {
		t.Errorf("same idempotency key gave two tasks: %s %s", first, second)
	}
}

// --traceparent hands a script's trace context to the task: the workers'
// spans continue that trace (docs/tracing.md).
func TestSubmitTraceparent(t *testing.T) {
	store, _ := newStore(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--traceparent", tp))
	if got := getTask(t, store, id).Trace; got["traceparent"] != tp {
		t.Errorf("task's trace context %v, want traceparent %s", got, tp)
	}
	r := cli(t, `{"type": "x"}`+"\n", "submit", "--store", store, "--batch", "-", "--traceparent", tp)
	if r.code != 0 {
		t.Fatalf("batch: exit %d: %s", r.code, r.stderr)
	}
	line := strings.Fields(r.stdout)
	if len(line) != 2 || getTask(t, store, line[1]).Trace["traceparent"] != tp {
		t.Errorf("batch line %q: its task lacks the traceparent", r.stdout)
	}
	if id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x")); getTask(t, store, id).Trace != nil {
		t.Errorf("a submit without --traceparent carries a trace context")
	}
	if r := cli(t, "", "submit", "--store", store, "--type", "x", "--traceparent", "00-zz"); r.code != exitUsage || !strings.Contains(r.stderr, "traceparent") {
		t.Errorf("a malformed --traceparent: exit %d: %s", r.code, r.stderr)
	}
}

func TestSubmitDefaultsFromConfig(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, "[submit]\nmax_attempts = 7\ntimeout = \"45s\"\nretry_initial = \"3s\"\nretry_max = \"1m\"\nretry_multiplier = 3\nretry_jitter = 0.0\n")
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--config", cfg, "--type", "x"))
	got := getTask(t, store, id)
	want := task.RetryPolicy{InitialDelay: task.Duration(3 * time.Second), MaxDelay: task.Duration(time.Minute), Multiplier: 3, Jitter: 0}
	if got.MaxAttempts != 7 || got.Timeout.D() != 45*time.Second || got.Retry != want {
		t.Errorf("[submit] not applied: attempts %d timeout %v retry %+v", got.MaxAttempts, got.Timeout, got.Retry)
	}
	id = strings.TrimSpace(must(t, "submit", "--store", store, "--config", cfg, "--type", "x", "--max-attempts", "2", "--timeout", "5s"))
	if got := getTask(t, store, id); got.MaxAttempts != 2 || got.Timeout.D() != 5*time.Second {
		t.Errorf("flags did not win over [submit]: %d %v", got.MaxAttempts, got.Timeout)
	}
}

// Bad input is rejected before the store is opened: exit 2, nothing written.
func TestSubmitRejectsBadInputWithoutWriting(t *testing.T) {
	big := `"` + strings.Repeat("x", task.MaxInputBytes) + `"`
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"not JSON", "", []string{"--input", "{not json"}, "input is not valid JSON"},
		{"not JSON on stdin", "hello", []string{"--input-file", "-"}, "input is not valid JSON"},
		{"two values", "", []string{"--input", "1 2"}, "input is not valid JSON"},
		{"oversized", "", []string{"--input", big}, "over the limit of 262144"},
		{"oversized on stdin", strings.Repeat(" ", maxRawInput) + "1", []string{"--input-file", "-"}, "over the limit of 262144 bytes (256 KiB) of compact JSON"},
		{"empty", "", []string{"--input", ""}, "input is empty"},
		{"both inputs", "", []string{"--input", "1", "--input-file", "-"}, "exclude each other"},
		{"missing file", "", []string{"--input-file", "/nonexistent/in.json"}, "--input-file"},
		{"bad type", "", []string{"--type", "has space", "--input", "1"}, "type"},
		{"timeout too short", "", []string{"--timeout", "10ms"}, "timeout"},
		{"timeout 0", "", []string{"--timeout", "0"}, "--timeout 0s: want 1s..24h (leave the flag out for the default, 30s)"},
		{"negative timeout", "", []string{"--timeout", "-5s"}, "--timeout -5s: want"},
		{"max attempts 0", "", []string{"--max-attempts", "0"}, "--max-attempts 0: want 1..1000 (leave the flag out for the default, 3)"},
		{"negative max attempts", "", []string{"--max-attempts", "-2"}, "--max-attempts -2: want"},
		{"too many attempts", "", []string{"--max-attempts", "5000"}, "attempts"},
		{"bad --at", "", []string{"--at", "tomorrow"}, "RFC 3339"},
		{"--at and --delay", "", []string{"--at", "2030-01-01T00:00:00Z", "--delay", "1s"}, "exclude each other"},
		{"negative delay", "", []string{"--delay", "-1s"}, "must not be negative"},
		{"bad duration", "", []string{"--timeout", "soon"}, `--timeout "soon": want a duration such as 30s or 5m`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, dir := newStore(t)
			args := append([]string{"submit", "--store", store}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--type") {
				args = append(args, "--type", "x")
			}
			r := cli(t, tc.stdin, args...)
			wantExit(t, r, exitUsage, tc.want)
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a rejected submit wrote to the store: %v", entries)
			}
		})
	}
}

func TestSubmitWithoutType(t *testing.T) {
	store, _ := newStore(t)
	wantExit(t, cli(t, "", "submit", "--store", store), exitUsage, "--type is required")
}

func TestUnknownTaskIsExit3(t *testing.T) {
	store, _ := newStore(t)
	missing, _ := task.NewID(time.Now(), strings.NewReader(strings.Repeat("z", 64)))
	must(t, "submit", "--store", store, "--type", "x")
	for _, cmd := range []string{"get", "history", "cancel", "requeue"} {
		t.Run(cmd, func(t *testing.T) {
			wantExit(t, cli(t, "", cmd, missing, "--store", store), exitNotFound, "task "+missing+" not found")
			wantExit(t, cli(t, "", cmd, "not-an-id", "--store", store), exitNotFound, "task not-an-id not found")
		})
	}
	if keys := storeKeys(t, store); len(keys) != 2 { // queue.json and the task
		t.Errorf("reads wrote to the store: %v", keys)
	}
}

func TestCancelAndRequeue(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	if out := must(t, "cancel", id, "--store", store); out != "canceled\n" {
		t.Errorf("cancel printed %q", out)
	}
	if got := getTask(t, store, id); got.Status != task.Canceled {
		t.Errorf("status after cancel = %s", got.Status)
	}
	wantExit(t, cli(t, "", "cancel", id, "--store", store), exitRuntime, "already finished")

	if out := must(t, "requeue", id, "--store", store); out != "requeued\n" {
		t.Errorf("requeue printed %q", out)
	}
	if got := getTask(t, store, id); got.Status != task.Pending || got.Attempt != 0 {
		t.Errorf("after requeue: %s attempt %d", got.Status, got.Attempt)
	}
	wantExit(t, cli(t, "", "requeue", id, "--store", store), exitRuntime, "is pending: only dead or canceled tasks can be requeued")
	hist := must(t, "history", id, "--store", store)
	if !strings.Contains(hist, "pending→canceled") || !strings.Contains(hist, "canceled→pending") {
		t.Errorf("history lacks the cancel and requeue:\n%s", hist)
	}
}

func TestListAndStats(t *testing.T) {
	store, _ := newStore(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--input", `{"i":`+string(rune('0'+i))+`}`)))
	}
	must(t, "cancel", ids[2], "--store", store)
	// A corrupt object in a shard must be reported and skipped.
	st := openStore(t, store)
	badID, _ := task.NewID(time.Now(), strings.NewReader(strings.Repeat("q", 64)))
	badKey := task.Key(0, badID)
	if _, err := st.Put(context.Background(), badKey, []byte("{garbage"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Put(context.Background(), "tasks/000/README.txt", []byte("foreign"), s3store.PutOptions{})

	r := cli(t, "", "list", "--store", store, "--status", "pending", "--limit", "0")
	if r.code != 0 {
		t.Fatalf("list: exit %d: %s", r.code, r.stderr)
	}
	for i, id := range ids {
		if has := strings.Contains(r.stdout, id); has != (i != 2) {
			t.Errorf("list --status pending: task %d (%s) listed = %v\n%s", i, id, has, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "skipping "+badKey) || !strings.Contains(r.stderr, "skipping tasks/000/README.txt") {
		t.Errorf("corrupt objects not reported on stderr: %q", r.stderr)
	}

	r = cli(t, "", "list", "--store", store, "--status", "canceled", "--json")
	var listed []task.Task
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 1 || listed[0].ID != ids[2] {
		t.Errorf("list --status canceled --json: %v %s", err, r.stdout)
	}
	r = cli(t, "", "list", "--store", store, "--limit", "2", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 2 {
		t.Errorf("list --limit 2 gave %d tasks (%v)", len(listed), err)
	}
	wantExit(t, cli(t, "", "list", "--store", store, "--status", "done"), exitUsage, `--status "done"`)

	r = cli(t, "", "stats", "--store", store, "--json")
	var qs queueStats
	if err := json.Unmarshal([]byte(r.stdout), &qs); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	if qs.Total != 5 || qs.ByStatus[task.Pending] != 4 || qs.ByStatus[task.Canceled] != 1 || qs.Skipped != 2 || qs.Shards != 16 {
		t.Errorf("stats = %+v", qs)
	}
	if qs.OldestPending == nil || qs.OldestPending.ID != ids[0] && qs.OldestPending.AvailableAt.After(getTask(t, store, ids[0]).AvailableAt) {
		t.Errorf("oldest pending = %+v, want %s", qs.OldestPending, ids[0])
	}
	sum := 0
	for _, byStatus := range qs.ByShard {
		for _, n := range byStatus {
			sum += n
		}
	}
	if sum != 5 {
		t.Errorf("by-shard counts add up to %d, want 5", sum)
	}
	text := must(t, "stats", "--store", store)
	for _, re := range []string{`tasks: 5 in 16 shards`, `pending\s+4`, `canceled\s+1`, `oldest pending: \w{26}, due for`, `SHARD`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("stats output lacks %s:\n%s", re, text)
		}
	}
}

func TestStorePrecedence(t *testing.T) {
	fileStore, fileDir := newStore(t)
	envStore, envDir := newStore(t)
	flagStore, flagDir := newStore(t)
	cfg := writeConfig(t, "store = \""+fileStore+"\"\n")
	count := func(dir string) int {
		entries, _ := os.ReadDir(filepath.Join(dir))
		return len(entries)
	}

	must(t, "submit", "--config", cfg, "--type", "x")
	if count(fileDir) == 0 {
		t.Errorf("store from queue.toml not used")
	}
	t.Setenv("S3QUEUE_STORE", envStore)
	must(t, "submit", "--config", cfg, "--type", "x")
	if count(envDir) == 0 {
		t.Errorf("S3QUEUE_STORE did not win over queue.toml")
	}
	must(t, "submit", "--config", cfg, "--type", "x", "--store", flagStore)
	if count(flagDir) == 0 {
		t.Errorf("--store did not win over S3QUEUE_STORE")
	}
}

func TestUsageErrors(t *testing.T) {
	store, _ := newStore(t)
	badCfg := writeConfig(t, "[worker]\npol_min = \"1s\"\n")
	badVal := writeConfig(t, "[worker]\npoll_min = \"fast\"\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, exitUsage, "no command given"},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"submit", "--store", store, "--type", "x", "--bogus"}, exitUsage, "unknown flag --bogus"},
		{"unknown flag on get", []string{"get", "--verbose", "X"}, exitUsage, "-verbose"},
		{"missing argument", []string{"get", "--store", store}, exitUsage, "want ID"},
		{"extra argument", []string{"stats", "--store", store, "extra"}, exitUsage, `unexpected argument "extra"`},
		{"no store", []string{"stats"}, exitUsage, "no store"},
		{"malformed store URL", []string{"stats", "--store", "s3://"}, exitUsage, "missing bucket name"},
		{"store URL without scheme", []string{"stats", "--store", "/tmp/q"}, exitUsage, "file:///tmp/q"},
		{"credentials in store URL", []string{"stats", "--store", "s3://AKIA:hunter2@bucket/q"}, exitUsage, "credentials in the store URL are not accepted"},
		{"unknown config key", []string{"stats", "--store", store, "--config", badCfg}, exitUsage, "unknown key worker.pol_min"},
		{"bad config value", []string{"stats", "--store", store, "--config", badVal}, exitUsage, `worker.poll_min: invalid duration "fast"`},
		{"missing config", []string{"stats", "--store", store, "--config", "/nonexistent/queue.toml"}, exitUsage, "/nonexistent/queue.toml"},
		{"bad demo tasks", []string{"demo", "--tasks", "1"}, exitUsage, "--tasks 1 out of range"},
		{"demo takes no config", []string{"demo", "--config", badCfg}, exitUsage, "unknown flag --config"},
		{"worker without handlers", []string{"worker", "--store", store}, exitUsage, "no handlers"},
		{"bad --exec", []string{"worker", "--store", store, "--exec", "nocommand"}, exitUsage, "want TYPE=COMMAND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, "", tc.args...)
			wantExit(t, r, tc.code, tc.want)
			if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("error is not one line: %q", r.stderr)
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("secret printed: %q", r.stderr)
			}
		})
	}
}

func TestBadConfigFromEnvironment(t *testing.T) {
	store, _ := newStore(t)
	t.Setenv("S3QUEUE_WORKER_CONCURRENCY", "-3")
	wantExit(t, cli(t, "", "stats", "--store", store), exitUsage, "S3QUEUE_WORKER_CONCURRENCY: -3 must not be negative")
}

func TestLayoutMismatchIsAConfigError(t *testing.T) {
	store, _ := newStore(t)
	must(t, "submit", "--store", store, "--type", "x")
	cfg := writeConfig(t, "shards = 4\n")
	wantExit(t, cli(t, "", "stats", "--store", store, "--config", cfg), exitUsage, "layout mismatch")
}

func TestHelpAndVersion(t *testing.T) {
	out := must(t, "help")
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name) {
			t.Errorf("help does not list %s", c.name)
		}
	}
	for _, want := range []string{"Exit codes:", "3  not found: no task with that id, no schedule with that name, no queue in the store", "4  provider unsupported", "S3QUEUE_STORE"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	out = must(t, "help", "submit")
	for _, want := range []string{"-input-file", "-idempotency-key", "-store", "-config", "Exit codes:"} {
		if !strings.Contains(out, want) {
			t.Errorf("help submit lacks %q:\n%s", want, out)
		}
	}
	if out := must(t, "list", "--help"); !strings.Contains(out, "-status") || !strings.Contains(out, "-json") {
		t.Errorf("list --help:\n%s", out)
	}
	if out := must(t, "version"); !strings.HasPrefix(out, "s3queue ") {
		t.Errorf("version printed %q", out)
	}
	wantExit(t, cli(t, ""), exitUsage, "no command given (run 's3queue help'")
}

func TestDoctor(t *testing.T) {
	store, _ := newStore(t)
	out := must(t, "doctor", "--store", store)
	for _, re := range []string{`create-if-absent\s+ok`, `stale If-Match\s+ok`, `If-Match on missing key\s+ok`,
		`conditional DELETE\s+honoured`, `server time\s+\d{4}-`, `clock skew`, `queue\s+none yet`, `result\s+ok`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("doctor output lacks %s:\n%s", re, out)
		}
	}
	if keys := storeKeys(t, store); len(keys) != 0 {
		t.Errorf("doctor left objects behind: %v", keys)
	}
	must(t, "submit", "--store", store, "--type", "x")
	var d doctorReport
	if err := json.Unmarshal([]byte(must(t, "doctor", "--store", store, "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if !d.Supported || !d.Checks.CreateIfAbsent || d.Queue == nil || d.Queue.Shards != 16 {
		t.Errorf("doctor --json = %+v", d)
	}
}

// A mem:// store lives in one process: every command but the demo refuses
// it, before it writes anything, with a message saying why.
func TestOneShotCommandsRefuseMemStore(t *testing.T) {
	id, _ := task.NewID(time.Now(), strings.NewReader(strings.Repeat("m", 64)))
	for _, args := range [][]string{
		{"submit", "--type", "x"},
		{"get", id},
		{"history", id},
		{"cancel", id},
		{"requeue", id},
		{"list"},
		{"stats"},
		{"doctor"},
		{"worker", "--exec", "x=cat"},
		{"monitor"},
	} {
		t.Run(args[0], func(t *testing.T) {
			// worker and monitor would otherwise run until canceled.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out, errb syncBuffer
			code := run(ctx, append(args, "--store", "mem://q"), strings.NewReader(""), &out, &errb)
			r := cliResult{code, out.String(), errb.String()}
			wantExit(t, r, exitUsage, "a mem:// store lives only in the memory of this process")
			if r.stdout != "" {
				t.Errorf("printed %q", r.stdout)
			}
		})
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("S3QUEUE_STORE", "mem://")
		wantExit(t, cli(t, "", "submit", "--type", "x"), exitUsage, "vanish when 's3queue submit' exits")
	})
	t.Run("demo keeps it", func(t *testing.T) {
		// A canceled context stops the demo right after it opened its
		// store (a whole run takes seconds): it must get that far.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errb syncBuffer
		run(ctx, []string{"demo", "--tasks", "3", "--workers", "1", "--store", "mem://demo"}, strings.NewReader(""), &out, &errb)
		if strings.Contains(errb.String(), "mem://") || strings.Contains(errb.String(), "usage") {
			t.Errorf("demo --store mem:// refused: %s", errb.String())
		}
	})
}

// The queue's own ready pointers sit beside the tasks: list and stats pass
// over them without a word, and report only what is really foreign.
func TestListAndStatsPassOverReadyPointers(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", id, "--store", store)
	must(t, "requeue", id, "--store", store) // announces the task with a pointer
	st := openStore(t, store)
	tk := getTask(t, store, id)
	pointer := shards.PointerKey(tk.Shard, tk.Shard, id, time.Now())
	if _, err := st.Put(context.Background(), pointer, nil, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pointers := 0
	for _, k := range storeKeys(t, store) {
		if shards.IsPointer(k) {
			pointers++
		}
	}
	if pointers < 2 {
		t.Fatalf("want the requeue's pointer and ours in the store, have %v", storeKeys(t, store))
	}
	foreign := task.ShardName(tk.Shard)
	foreign = "tasks/" + foreign + "/notes.ready"
	st.Put(context.Background(), foreign, []byte("x"), s3store.PutOptions{})

	r := cli(t, "", "list", "--store", store)
	if r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("list: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Count(r.stderr, "skipping") != 1 || !strings.Contains(r.stderr, "skipping "+foreign) {
		t.Errorf("list reports %q, want only the foreign %s", r.stderr, foreign)
	}
	var qs queueStats
	r = cli(t, "", "stats", "--store", store, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &qs); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	if qs.Total != 1 || qs.Skipped != 1 || strings.Count(r.stderr, "skipping") != 1 {
		t.Errorf("stats: total %d skipped %d, want 1 and 1 (the foreign object only); stderr %q", qs.Total, qs.Skipped, r.stderr)
	}
}

// badFile puts a file in a file:// store's directory where the object key
// lives, bypassing the store: what a crash, a full disk or an operator may
// leave behind.
func badFile(t *testing.T, dir, key string, data []byte) {
	t.Helper()
	segs := strings.Split(key, "/")
	parts := []string{dir}
	for _, s := range segs[:len(segs)-1] {
		parts = append(parts, s+".dir")
	}
	parts = append(parts, segs[len(segs)-1]+".obj")
	path := filepath.Join(parts...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// One bad file in a file store's shard (empty, or cut inside the store's
// header) is reported and skipped: list and stats show every other task and
// exit 0, and a worker still serves the shard.
func TestBadFileDoesNotBlockAShard(t *testing.T) {
	store, dir := newStore(t)
	cfg := writeConfig(t, "shards = 1\n"+fastWorker)
	var ids []string
	for range 3 {
		ids = append(ids, submit(t, store, cfg, "x"))
	}
	// Keys before and after the good tasks: a zero-byte file, and one cut
	// inside the store's header.
	early, _ := task.NewID(time.Now().Add(-time.Minute), strings.NewReader(strings.Repeat("e", 64)))
	late, _ := task.NewID(time.Now().Add(time.Minute), strings.NewReader(strings.Repeat("l", 64)))
	badFile(t, dir, task.Key(0, early), nil)
	badFile(t, dir, task.Key(0, late), []byte("s3qobj1 0123"))

	r := cli(t, "", "list", "--store", store, "--config", cfg, "--limit", "0")
	if r.code != 0 {
		t.Fatalf("list: exit %d\n%s", r.code, r.stderr)
	}
	for _, id := range ids {
		if !strings.Contains(r.stdout, id) {
			t.Errorf("list lacks task %s:\n%s", id, r.stdout)
		}
	}
	for _, key := range []string{task.Key(0, early), task.Key(0, late)} {
		if !strings.Contains(r.stderr, "skipping "+key) {
			t.Errorf("list does not report %s: %q", key, r.stderr)
		}
	}
	r = cli(t, "", "stats", "--store", store, "--config", cfg, "--json")
	var qs queueStats
	if err := json.Unmarshal([]byte(r.stdout), &qs); r.code != 0 || err != nil {
		t.Fatalf("stats: exit %d %v\n%s", r.code, err, r.stderr)
	}
	if qs.Total != 3 || qs.Skipped != 2 {
		t.Errorf("stats: total %d skipped %d, want 3 and 2", qs.Total, qs.Skipped)
	}

	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "x=true")
	for _, id := range ids {
		if got := waitTerminal(t, store, id); got.Status != task.Succeeded {
			t.Errorf("task %s: %s", id, got.Status)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d", code)
	}
}

// gofakes3 answers 412 to If-Match on a missing key, without creating it:
// doctor accepts it and says what it measured, and a queue runs on it.
func TestGoFakeS3(t *testing.T) {
	srv := fakes3.Start(t)
	fakes3.SetCredentials(t)
	store := srv.StoreURL(t, "q")
	out := must(t, "doctor", "--store", store)
	for _, re := range []string{`If-Match on missing key\s+ok\s+refused with 412, nothing created`,
		`conditional DELETE\s+ignored`, `result\s+ok`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("doctor output lacks %s:\n%s", re, out)
		}
	}
	cfg := writeConfig(t, fastWorker)
	id := submit(t, store, cfg, "echo", "--input", `{"on":"gofakes3"}`)
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "echo=cat")
	if got := waitTerminal(t, store, id); got.Status != task.Succeeded || string(got.Result) != `{"on":"gofakes3"}` {
		t.Errorf("task on gofakes3: %s %s (%s)", got.Status, got.Result, got.LastError)
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d", code)
	}
}
