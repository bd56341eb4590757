package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// The dispatch queue's shedding policies against MinIO, through the
// s3queue binary as an operator runs it (docs/flow-control.md).
//
// Both workers are pinned to the queue's one shard (own_shards = [0]),
// not fleet members: a fleet of two on one shard gives the shard to one
// member and leaves the other standing by, so only pinning lets both see
// the same tasks. The cost is that a release is announced in the task's
// own shard rather than handed to an idle member's (there is no fleet to
// name one): the announcement to an idle member is the fleet tests' to
// cover.

// releaseTimeout is the lease of each task of TestReleaseOnDropWithTwoWorkers:
// long next to a poll (B's poll_max is the default 5s), so a claim after a
// release that came before the lease could have expired is proof that the
// release, not the expiry, made the task available.
const releaseTimeout = 30 * time.Second

// idUncertainty bounds how far a task's id time may lie from the S3 time of
// its submit. A one-shot `s3queue submit` has one sample of S3 time, a Date
// header of 1 s resolution, and mints its id at the middle of that interval
// (a second plus a round trip wide): tasks submitted within one S3 second
// get ids within milliseconds of each other, in no particular order. A task
// submitted once S3 time is past an id by more than this has a larger id
// (invariant 4, docs/architecture.md).
const idUncertainty = 2 * time.Second

// TestReleaseOnDropWithTwoWorkers: worker A (one handler that never ends
// while the test looks, max_queue_depth 2, drop-oldest, poll_max 1s) claims
// ahead; once its oldest pending task has waited poll_max it claims newer
// work and releases that task, which worker B (default settings, a fast
// handler) then runs, long before the released lease could have expired. A
// is then killed with SIGKILL while it holds pending tasks, and the monitor
// brings them back when their leases expire.
//
// Each step holds by construction, not by timing:
//   - a batch is submitted only once S3 time (a response's Date) is past the
//     ids of those before it by more than idUncertainty, so that it is newer
//     work for A (checked: its ids sort after theirs);
//   - A swaps its first pending tasks before B runs, and while B runs A swaps
//     only for tasks of a type B does not run ("solo"): B cannot claim the
//     new task between A's release and A's claim and leave A a task short.
//     Only B runs "job"; worker C, started after A's death, runs "solo".
//
// Checked from A's --events file and from `s3queue list/get --json`:
// exactly the swapped-out pending tasks were dropped, each then released;
// each release was followed by a claim long before the released lease could
// have expired; a released task succeeds with attempt 1 (the release used
// no attempt); every task ends succeeded exactly once, and none ran twice
// but the one A was running when it died.
func TestReleaseOnDropWithTwoWorkers(t *testing.T) {
	q := newMinIOQueue(t, 1, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	dir := t.TempDir()
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_OWN_SHARDS=0"}
	eventsA := filepath.Join(dir, "events-A.jsonl")
	runs := func(name string) string { return filepath.Join(dir, "runs-"+name) }
	record := `echo "$S3QUEUE_TASK_ID $S3QUEUE_ATTEMPT" >> "$RUNS"; `

	// A: one handler, whose run lasts until the task's timeout
	// (releaseTimeout), longer than the steps up to A's kill take (about
	// 8 s), or until A dies (exec: the worker's death signal reaches
	// sleep); two tasks claimed ahead.
	procA := startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID=A", "RUNS="+runs("A"),
		"S3QUEUE_WORKER_MAX_IN_FLIGHT=1", "S3QUEUE_WORKER_MAX_QUEUE_DEPTH=2",
		"S3QUEUE_WORKER_QUEUE_POLICY=drop-oldest", "S3QUEUE_WORKER_POLL_MAX=1s"),
		"worker", "--exec", "job="+record+"exec sleep 300", "--exec", "solo="+record+"exec sleep 300", "--events", eventsA)

	var ids []string
	// submit submits n tasks of typ, newer than every task before them.
	submit := func(typ string, n int) []string {
		var last time.Time
		for _, id := range ids {
			if at, _ := task.IDTime(id); at.After(last) {
				last = at
			}
		}
		if len(ids) > 0 {
			waitUntil(t, ctx, "S3 time to pass the submitted ids", 30*time.Second, func() bool {
				now, err := q.st.Now(ctx) // the Date of a response: S3 time is at least this
				if err != nil {
					t.Fatal(err)
				}
				return now.Sub(last) > idUncertainty
			})
		}
		var batch []string
		for range n {
			batch = append(batch, submitCLI(t, ctx, bin, env, typ, fmt.Sprintf(`{"n":%d}`, len(ids)+len(batch)), releaseTimeout))
		}
		for _, id := range batch {
			if slices.ContainsFunc(ids, func(old string) bool { return old >= id }) {
				at, _ := task.IDTime(id)
				t.Fatalf("task %s (id time %s), submitted after S3 time passed %s by %v, does not sort after every earlier id %v: ids do not follow submit time (invariant 4)",
					id, at.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano), idUncertainty, ids)
			}
		}
		ids = append(ids, batch...)
		return batch
	}
	// heldByA is the ids, sorted, of the tasks A holds in ts: claimed by it
	// and not finished, running or pending in its queue.
	heldByA := func(ts []task.Task) []string {
		var out []string
		for _, tk := range ts {
			if tk.Status == task.Running && tk.Claim.Worker == "A" {
				out = append(out, tk.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	succeeded := func(ts []task.Task) int {
		n := 0
		for _, tk := range ts {
			if tk.Status == task.Succeeded {
				n++
			}
		}
		return n
	}

	first := submit("job", 3)
	waitUntil(t, ctx, "A to start the first task and claim two ahead", 30*time.Second, func() bool {
		evs := readEvents(t, eventsA)
		return len(evs.ids("claimed", "")) >= 3 && len(evs.ids("started", "")) == 1
	})
	running := readEvents(t, eventsA).ids("started", "")[0]
	oldest := slices.DeleteFunc(slices.Clone(first), func(id string) bool { return id == running })

	// Newer work for a full A: once a pending task has waited poll_max, A
	// claims a new one and releases the oldest. B does not run yet, so
	// each claim after a release succeeds: A swaps both.
	second := submit("job", 2)
	want := append([]string{running}, second...)
	slices.Sort(want)
	waitUntil(t, ctx, "A to swap both pending tasks for the newer two", 30*time.Second, func() bool {
		return slices.Equal(heldByA(listCLI(t, ctx, bin, env)), want)
	})

	// B runs the two tasks A released, and is then idle.
	startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID=B", "RUNS="+runs("B")),
		"worker", "--exec", "job="+record+`echo '{"ok":true}'`)
	waitUntil(t, ctx, "B to run the two tasks A released", time.Minute, func() bool {
		return succeeded(listCLI(t, ctx, bin, env)) == len(oldest)
	})

	// Newer work only A runs: A swaps its two pending tasks for it, and
	// B, running, takes the two it released. Steady state: B has run
	// everything but what A holds: its running task and the two newest,
	// which it keeps (nothing newer to swap them for).
	third := submit("solo", 2)
	want = append([]string{running}, third...)
	slices.Sort(want)
	var held []task.Task
	waitUntil(t, ctx, "A to swap its pending tasks again and B to run the released ones", time.Minute, func() bool {
		ts := listCLI(t, ctx, bin, env)
		held = slices.DeleteFunc(slices.Clone(ts), func(tk task.Task) bool { return !slices.Contains(want, tk.ID) })
		return slices.Equal(heldByA(ts), want) && succeeded(ts) == len(ids)-len(want)
	})

	// What A's events say so far (before the kill, which may lose the
	// last lines): exactly the swapped-out tasks were dropped from
	// pending, each drop followed by its release.
	evs := readEvents(t, eventsA)
	drops, released := evs.ids("dropped", "pending"), evs.ids("released", "pending")
	t.Logf("A dropped %d pending tasks, released %d (over %d distinct tasks)", len(drops), len(released), len(distinct(drops)))
	swapped := append(slices.Clone(oldest), second...)
	slices.Sort(swapped)
	if got := slices.Sorted(slices.Values(distinct(drops))); !slices.Equal(got, swapped) {
		t.Errorf("A dropped from pending %v, want the tasks it swapped out %v", got, swapped)
	}
	if !slices.Equal(drops, released) {
		t.Errorf("dropped from pending %v, released %v: want each drop released, in order", drops, released)
	}
	for i, e := range evs {
		if e.Kind != "dropped" {
			continue
		}
		switch e.Phase {
		case "waiting":
			// A task older than every pending one, read for a full pool,
			// is itself the oldest entry: it is dropped unclaimed, and
			// there is nothing to release.
			if slices.ContainsFunc(evs[:i], func(n jsonEvent) bool { return n.TaskID == e.TaskID && n.Kind == "claimed" }) &&
				!slices.ContainsFunc(evs[:i], func(n jsonEvent) bool { return n.TaskID == e.TaskID && n.Kind == "released" }) {
				t.Errorf("A dropped %s in phase waiting while it held its claim", e.TaskID)
			}
			continue
		case "pending":
		default:
			t.Errorf("A dropped %s in phase %q, want pending or waiting", e.TaskID, e.Phase)
		}
		next := slices.IndexFunc(evs[i+1:], func(n jsonEvent) bool { return n.TaskID == e.TaskID })
		if next < 0 || evs[i+1+next].Kind != "released" {
			t.Errorf("A dropped %s, and the task's next event is not its release", e.TaskID)
		}
	}
	releasedBefore := distinct(released) // released, and done before the kill unless A holds it
	started := evs.ids("started", "")

	// SIGKILL A while it holds pending tasks: the monitor takes them back
	// as their leases expire; B runs the "job" A was running, and C the
	// two "solo" tasks.
	var pending []string
	for _, tk := range held {
		if !slices.Contains(started, tk.ID) {
			pending = append(pending, tk.ID)
		}
	}
	if len(pending) == 0 {
		t.Fatalf("A holds %v, all started: want pending tasks at the kill", taskIDs(held))
	}
	procA.kill(t)
	startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID=C", "RUNS="+runs("C")),
		"worker", "--exec", "solo="+record+`echo '{"ok":true}'`)
	eventsM := filepath.Join(dir, "events-M.jsonl")
	procM := startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_MONITOR_INTERVAL=500ms", "S3QUEUE_MONITOR_RETENTION=0"),
		"monitor", "--events", eventsM)
	var final []task.Task
	waitUntil(t, ctx, "every task to succeed after A's death", 90*time.Second, func() bool {
		final = listCLI(t, ctx, bin, env)
		for _, tk := range final {
			if tk.Status != task.Succeeded {
				return false
			}
		}
		return len(final) == len(ids)
	})
	redispatched := readEvents(t, eventsM).ids("redispatched", "")
	for _, tk := range held {
		if !slices.Contains(redispatched, tk.ID) {
			t.Errorf("task %s, held by A when it died, was not redispatched by the monitor (it redispatched %v)", tk.ID, redispatched)
		}
	}

	// Every task succeeded exactly once, its attempt the claims its history
	// counts less the releases; releases came before any lease expiry.
	byID := map[string]task.Task{}
	for _, tk := range final {
		byID[tk.ID] = tk
	}
	var gaps []time.Duration
	for _, id := range ids {
		tk, ok := byID[id]
		if !ok {
			t.Errorf("task %s is lost: `s3queue list` does not show it", id)
			continue
		}
		if n := countTransitions(tk, task.Succeeded); n != 1 {
			t.Errorf("task %s succeeded %d times in its history, want once", id, n)
		}
		if tk.HistoryDropped > 0 {
			t.Logf("task %s dropped %d transitions from its history: its claims are not all there to count", id, tk.HistoryDropped)
			continue
		}
		claims, releases := 0, 0
		var claimedAt time.Time
		for i, tr := range tk.History {
			switch {
			case tr.From == task.Pending && tr.To == task.Running:
				claims++
				claimedAt = tr.At
			case isRelease(tr):
				releases++
				if i+1 == len(tk.History) || tk.History[i+1].To != task.Running {
					t.Errorf("task %s: released at %s and then not claimed: %+v", id, tr.At, tk.History[i+1:])
					continue
				}
				next := tk.History[i+1]
				gaps = append(gaps, next.At.Sub(tr.At))
				// The released claim's lease ran at least releaseTimeout
				// from its claim: another worker could only have taken the
				// task by expiry after that.
				if expiry := claimedAt.Add(releaseTimeout); !next.At.Before(expiry) {
					t.Errorf("task %s: released at %s by %s, claimed again at %s by %s: not before the released lease could expire (%s)",
						id, tr.At.Format(time.RFC3339Nano), tr.Worker, next.At.Format(time.RFC3339Nano), next.Worker, expiry.Format(time.RFC3339Nano))
				}
			}
		}
		if tk.Attempt != claims-releases {
			t.Errorf("task %s succeeded at attempt %d, after %d claims and %d releases: want %d", id, tk.Attempt, claims, releases, claims-releases)
		}
	}
	t.Logf("release to next claim, from the task histories (S3 time): %v", gaps)

	// A released task that A did not hold at its death succeeds with
	// attempt 1, by `s3queue get`.
	checked := 0
	for _, id := range releasedBefore {
		if slices.ContainsFunc(held, func(tk task.Task) bool { return tk.ID == id }) {
			continue
		}
		tk := getCLI(t, ctx, bin, env, id)
		last := tk.History[len(tk.History)-1]
		if tk.Status != task.Succeeded || tk.Attempt != 1 {
			t.Errorf("released task %s: %s at attempt %d, want succeeded at attempt 1", id, tk.Status, tk.Attempt)
		}
		t.Logf("released task %s succeeded on %s at attempt %d", id, last.Worker, tk.Attempt)
		checked++
	}
	if checked == 0 {
		t.Errorf("every released task was still held by A at its death: no release was seen through to success")
	}

	// Handler runs: once each, but for the task A was running when killed.
	ran := map[string]int{}
	for _, name := range []string{"A", "B", "C"} {
		for _, id := range readRuns(t, runs(name)) {
			ran[id]++
		}
	}
	for _, id := range ids {
		want := 1
		if slices.Contains(started, id) {
			want = 2 // begun by A, killed with it, run again by B
		}
		if ran[id] != want {
			t.Errorf("task %s ran %d times, want %d", id, ran[id], want)
		}
	}
	procM.stop(t)
}

// isRelease reports whether tr is a release: a claim handed back, with its
// attempt, to pending.
func isRelease(tr task.Transition) bool {
	return tr.From == task.Running && tr.To == task.Pending && strings.HasPrefix(tr.Reason, "released")
}

func countTransitions(tk task.Task, to task.Status) int {
	n := 0
	for _, tr := range tk.History {
		if tr.To == to {
			n++
		}
	}
	return n
}

func taskIDs(ts []task.Task) []string {
	var out []string
	for _, tk := range ts {
		out = append(out, tk.ID)
	}
	return out
}

func distinct(ids []string) []string {
	var out []string
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// jsonEvent is one line of an --events file.
type jsonEvent struct {
	Time    time.Time `json:"time"`
	Origin  string    `json:"origin"`
	Kind    string    `json:"kind"`
	TaskID  string    `json:"task_id"`
	Attempt int       `json:"attempt"`
	Pool    string    `json:"pool"`
	Phase   string    `json:"phase"`
}

type jsonEvents []jsonEvent

// ids returns the task ids of the events of kind (and phase, if given), in
// order.
func (evs jsonEvents) ids(kind, phase string) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == kind && (phase == "" || e.Phase == phase) {
			out = append(out, e.TaskID)
		}
	}
	return out
}

// readEvents reads an --events file; a last line still being written is
// left for the next read.
func readEvents(t *testing.T, path string) jsonEvents {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out jsonEvents
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e jsonEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			if !bytes.HasSuffix(b, []byte("\n")) {
				break
			}
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		out = append(out, e)
	}
	return out
}

// runCLI runs `s3queue args...` with env and returns its stdout.
func runCLI(t *testing.T, ctx context.Context, bin string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("s3queue %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// submitCLI submits one task with `s3queue submit` and returns its id.
func submitCLI(t *testing.T, ctx context.Context, bin string, env []string, typ, input string, timeout time.Duration) string {
	t.Helper()
	out := runCLI(t, ctx, bin, env, "submit", "--type", typ, "--input", input, "--timeout", timeout.String())
	id := strings.TrimSpace(string(out))
	if _, err := task.IDTime(id); err != nil {
		t.Fatalf("s3queue submit printed %q, not a task id", out)
	}
	return id
}

// listCLI returns every task, by `s3queue list --json --limit 0`.
func listCLI(t *testing.T, ctx context.Context, bin string, env []string) []task.Task {
	t.Helper()
	var ts []task.Task
	if err := json.Unmarshal(runCLI(t, ctx, bin, env, "list", "--json", "--limit", "0"), &ts); err != nil {
		t.Fatalf("s3queue list --json: %v", err)
	}
	return ts
}

// getCLI returns one task, by `s3queue get ID --json`.
func getCLI(t *testing.T, ctx context.Context, bin string, env []string, id string) task.Task {
	t.Helper()
	var tk task.Task
	if err := json.Unmarshal(runCLI(t, ctx, bin, env, "get", id, "--json"), &tk); err != nil || tk.ID != id {
		t.Fatalf("s3queue get %s --json: %v (id %q)", id, err, tk.ID)
	}
	return tk
}
