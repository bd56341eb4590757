package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// transitionAt returns the time of t's first transition from → to (zero if
// none).
func transitionAt(t *task.Task, from, to task.Status) time.Time {
	for _, h := range t.History {
		if h.From == from && h.To == to {
			return h.At
		}
	}
	return time.Time{}
}

// waitPassedOn waits, while the worker still runs, until every end has
// been passed on: the worker deletes an end's marker after it settled the
// dependents, which may be after the last dependent is already terminal
// (a worker stopped earlier leaves the rest to the monitor's repair).
func waitPassedOn(t *testing.T, store string) {
	t.Helper()
	waitFor(t, "edges and markers to be removed", func() bool { return len(depKeys(t, store)) == 0 })
}

// depKeys lists the dependency objects left in the store: edges under
// deps/ and ended markers under ended/.
func depKeys(t *testing.T, store string) []string {
	t.Helper()
	var left []string
	for _, k := range storeKeys(t, store) {
		if strings.HasPrefix(k, "deps/") || strings.HasPrefix(k, "ended/") {
			left = append(left, k)
		}
	}
	return left
}

func TestSubmitAfterRunsAChainInOrder(t *testing.T) {
	store, _ := newStore(t)
	log := filepath.Join(t.TempDir(), "ran")
	cfg := writeConfig(t, fastWorker+`
[handlers]
step = "echo $S3QUEUE_TASK_ID >> `+log+`"
`)
	a := submit(t, store, cfg, "step")
	b := submit(t, store, cfg, "step", "--after", a)
	c := submit(t, store, cfg, "step", "--after", b)
	for _, id := range []string{b, c} {
		if got := getTask(t, store, id); got.Status != task.Blocked {
			t.Fatalf("task %s submitted with --after is %s, want blocked", id, got.Status)
		}
	}

	_, stop := background(t, "worker", "--store", store, "--config", cfg)
	last := waitTerminal(t, store, c)
	waitPassedOn(t, store)
	stop()
	tasks := []*task.Task{getTask(t, store, a), getTask(t, store, b), last}
	for _, tk := range tasks {
		if tk.Status != task.Succeeded {
			t.Fatalf("task %s is %s (%s), want succeeded", tk.ID, tk.Status, tk.LastError)
		}
	}
	// Each child was claimed only after its parent's success was recorded,
	// by the times in the history, and ran after it by the handlers' own log.
	for i := 1; i < len(tasks); i++ {
		parent, child := tasks[i-1], tasks[i]
		done := transitionAt(parent, task.Running, task.Succeeded)
		released := transitionAt(child, task.Blocked, task.Pending)
		claimed := transitionAt(child, task.Pending, task.Running)
		if done.IsZero() || released.IsZero() || claimed.IsZero() {
			t.Fatalf("histories lack a transition:\n%+v\n%+v", parent.History, child.History)
		}
		if claimed.Before(done) || released.Before(done) {
			t.Errorf("task %s released at %v and claimed at %v, before its parent succeeded at %v",
				child.ID, fmtTime(released), fmtTime(claimed), fmtTime(done))
		}
		if d := child.Deps; len(d) != 1 || d[0].ID != parent.ID || d[0].Ended != task.Succeeded {
			t.Errorf("task %s deps %+v, want its parent succeeded", child.ID, d)
		}
	}
	ran, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(ran)), []string{a, b, c}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("handlers ran %v, want %v", got, want)
	}
	hist := must(t, "history", b, "--store", store)
	if !regexp.MustCompile(`\(new\)→blocked .*submitted`).MatchString(hist) ||
		!regexp.MustCompile(`blocked→pending .*dependencies succeeded`).MatchString(hist) {
		t.Errorf("history of the middle task:\n%s", hist)
	}
}

func TestFailingParentCancelsItsDependents(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+`
[handlers]
boom = "echo 'no disk' >&2; exit 3"
step = "true"
`)
	// other succeeds first (the failing parent waits for it), so the join
	// learns one success before its other dependency fails.
	other := submit(t, store, cfg, "step")
	parent := submit(t, store, cfg, "boom", "--max-attempts", "1", "--after", other)
	child := submit(t, store, cfg, "step", "--after", parent)
	failed := submit(t, store, cfg, "step", "--after", child, "--on-dep-failure", "fail")
	join := submit(t, store, cfg, "step", "--after", other+","+failed)

	_, stop := background(t, "worker", "--store", store, "--config", cfg)
	got := waitTerminal(t, store, join)
	waitPassedOn(t, store)
	stop()

	if p := getTask(t, store, parent); p.Status != task.Dead {
		t.Fatalf("parent is %s, want dead", p.Status)
	}
	for _, tc := range []struct {
		id, what string
		want     task.Status
		reason   string
	}{
		{child, "child", task.Canceled, "canceled: dependency " + parent + " ended dead"},
		{failed, "grandchild under --on-dep-failure fail", task.Dead, "dead: dependency " + child + " ended canceled"},
		{join, "join of a succeeded and a failed task", task.Canceled, "canceled: dependency " + failed + " ended dead"},
	} {
		tk := getTask(t, store, tc.id)
		if tk.Status != tc.want {
			t.Errorf("%s is %s, want %s", tc.what, tk.Status, tc.want)
		}
		if tk.Attempt != 0 || !transitionAt(tk, task.Pending, task.Running).IsZero() {
			t.Errorf("%s ran: attempt %d, history %+v", tc.what, tk.Attempt, tk.History)
		}
		if h := tk.History[len(tk.History)-1]; h.From != task.Blocked || h.To != tc.want || h.Reason != tc.reason {
			t.Errorf("%s's last transition %s→%s %q, want blocked→%s %q", tc.what, h.From, h.To, h.Reason, tc.want, tc.reason)
		}
	}
	if len(got.Deps) != 2 || got.Deps[0] != (task.Dep{ID: other, Shard: got.Deps[0].Shard, Ended: task.Succeeded}) ||
		got.Deps[1].Ended != task.Dead {
		t.Errorf("join's deps %+v, want %s succeeded and %s dead", got.Deps, other, failed)
	}
	hist := must(t, "history", child, "--store", store)
	if !strings.Contains(hist, "blocked→canceled") || !strings.Contains(hist, "dependency "+parent+" ended dead") {
		t.Errorf("history of the canceled child:\n%s", hist)
	}

	// Each says why as its last error, down the chain, with the failed
	// parent's own error; wait and get show it.
	byChild := "dependency " + parent + " ended dead: "
	if le := getTask(t, store, child).LastError; !strings.HasPrefix(le, byChild) || !strings.Contains(le, "no disk") {
		t.Errorf("the canceled child's last error %q, want %q and the parent's error", le, byChild+"...")
	}
	if le, want := getTask(t, store, failed).LastError, "dependency "+child+" ended canceled: "+byChild; !strings.HasPrefix(le, want) {
		t.Errorf("the dead grandchild's last error %q, want %q...", le, want)
	}
	r := cli(t, "", "wait", child, "--store", store)
	out := r.stdout
	if line := lineWith(out, child); !strings.Contains(line, "canceled") || !strings.Contains(line, "dependency "+parent+" ended dead") {
		t.Errorf("wait on the canceled child:\n%s", out)
	}
	if out := must(t, "get", child, "--store", store); !strings.Contains(out, "dependency "+parent+" ended dead: ") {
		t.Errorf("get of the canceled child:\n%s", out)
	}
}

// lineWith returns the first line of out that contains s.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func TestSubmitAfterErrors(t *testing.T) {
	store, dir := newStore(t)
	unknown := "01M8AHG5TJ57JN0X6S7S5PM514"

	// Checked before the store is opened: nothing is written, not even
	// the queue.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--after", "nope"}, `dependency "nope" is not a task id`},
		{[]string{"--after", unknown, "--after", unknown}, "listed twice"},
		{[]string{"--after", unknown + ","}, "empty task id"},
		{[]string{"--after", unknown, "--on-dep-failure", "ignore"}, `--on-dep-failure "ignore": want cancel or fail`},
		{[]string{"--on-dep-failure", "fail"}, "--on-dep-failure needs --after"},
		{[]string{"--after", manyIDs(t, task.MaxDeps+1)}, fmt.Sprintf("over %d", task.MaxDeps)},
	} {
		args := append([]string{"submit", "--store", store, "--type", "x"}, tc.args...)
		wantExit(t, cli(t, "", args...), exitUsage, tc.want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused submits wrote %d entries", len(entries))
	}

	// An id no task of the queue has: a bad argument (exit 2) that names
	// the id, and no task is created.
	r := cli(t, "", "submit", "--store", store, "--type", "x", "--after", unknown)
	wantExit(t, r, exitUsage, "dependency "+unknown+": unknown dependency")
	if r.stdout != "" {
		t.Errorf("stdout %q, want no id", r.stdout)
	}
	if out := must(t, "list", "--store", store, "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("a task was created:\n%s", out)
	}
}

// mustID returns a fresh task id.
func mustID(t *testing.T) string {
	t.Helper()
	id, err := task.NewID(time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// manyIDs returns n distinct task ids, comma-separated.
func manyIDs(t *testing.T, n int) string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = mustID(t)
	}
	return strings.Join(ids, ",")
}

func TestGetShowsDependencies(t *testing.T) {
	store, _ := newStore(t)
	p1 := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	p2 := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	child := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "y", "--after", p1, "--after", p2))

	out := must(t, "get", child, "--store", store)
	for _, re := range []string{
		`status:\s+blocked`,
		`depends on:\s+` + p1 + `\s+waiting\n\s+` + p2 + `\s+waiting\n`,
		`waiting on:\s+2 of 2: ` + p1 + `, ` + p2,
		`on dep failure:\s+cancel`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("get of a blocked task lacks %s:\n%s", re, out)
		}
	}
	if out := must(t, "get", p1, "--store", store); !regexp.MustCompile(`dependents:\s+yes`).MatchString(out) {
		t.Errorf("get of a parent does not say others wait for it:\n%s", out)
	}
	list := must(t, "list", "--status", "blocked", "--store", store)
	if !strings.Contains(list, child) || strings.Contains(list, p1) {
		t.Errorf("list --status blocked:\n%s", list)
	}
	if st := must(t, "stats", "--store", store); !regexp.MustCompile(`blocked\s+1\n`).MatchString(st) ||
		!regexp.MustCompile(`pending\s+2\n`).MatchString(st) || !strings.Contains(st, "BLOCKED") {
		t.Errorf("stats:\n%s", st)
	}

	// Canceling a parent passes the cancel on at once.
	if out := must(t, "cancel", p2, "--store", store); strings.TrimSpace(out) != "canceled" {
		t.Fatalf("cancel printed %q", out)
	}
	out = must(t, "get", child, "--store", store)
	for _, re := range []string{
		`status:\s+canceled`,
		p1 + `\s+not waited for\n`,
		p2 + `\s+canceled\n`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("get of a canceled dependent lacks %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "waiting on") {
		t.Errorf("a canceled task still waits:\n%s", out)
	}

	// A parent that already ended is settled at submit.
	late := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "y", "--after", p2, "--on-dep-failure", "fail"))
	got := getTask(t, store, late)
	if got.Status != task.Dead || got.LastError != "dependency "+p2+" ended canceled" {
		t.Errorf("child of a canceled parent: %s %q, want dead", got.Status, got.LastError)
	}
	if st := must(t, "stats", "--store", store); !regexp.MustCompile(`blocked\s+0\n`).MatchString(st) {
		t.Errorf("stats after the cancel:\n%s", st)
	}
}

func TestSubmitBatchAfter(t *testing.T) {
	store, _ := newStore(t)
	parent := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	unknown := "01M8AHG5TJ57JN0X6S7S5PM514"
	lines := strings.Join([]string{
		`{"type": "y", "after": ["` + parent + `"]}`,
		`{"type": "y", "after": ["` + parent + `"], "on_dep_failure": "fail"}`,
		`{"type": "y"}`,
		`{"type": "y", "after": []}`,
		`{"type": "y", "after": ["` + unknown + `"]}`,
		`{"type": "y", "after": ["` + parent + `"], "on_dep_failure": "maybe"}`,
		`{"type": "y", "after": "` + parent + `"}`,
	}, "\n")
	// --after is the default of the lines without "after".
	other := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	r := cli(t, lines, "submit", "--store", store, "--batch", "-", "--after", other)
	if r.code != exitUsage {
		t.Fatalf("exit %d, want %d (only bad lines failed)\nstdout: %s\nstderr: %s", r.code, exitUsage, r.stdout, r.stderr)
	}
	res := batchResults(t, r.stdout)
	for n, want := range map[int]string{
		5: "dependency " + unknown + ": unknown dependency",
		6: `"on_dep_failure" "maybe": want "cancel" or "fail"`,
		7: `not a JSON object of a task`,
	} {
		if !strings.HasPrefix(res[n], "error: ") || !strings.Contains(res[n], want) {
			t.Errorf("line %d: %q, want an error with %q", n, res[n], want)
		}
	}
	if !strings.Contains(r.stderr, "3 of 7 lines not submitted (3 malformed or invalid, 0 failed)") {
		t.Errorf("stderr: %s", r.stderr)
	}
	for n, want := range map[int]struct {
		deps   []string
		policy task.DepFailure
	}{
		1: {[]string{parent}, ""},
		2: {[]string{parent}, task.DepFail},
		3: {[]string{other}, task.DepCancel},
		4: {nil, ""},
	} {
		got := getTask(t, store, res[n])
		var ids []string
		for _, d := range got.Deps {
			ids = append(ids, d.ID)
		}
		wantStatus := task.Blocked
		if len(want.deps) == 0 {
			wantStatus = task.Pending
		}
		if got.Status != wantStatus || fmt.Sprint(ids) != fmt.Sprint(want.deps) ||
			want.policy != "" && got.OnDepFailure != want.policy {
			t.Errorf("line %d: %s after %v on failure %q, want %s after %v on failure %q",
				n, got.Status, ids, got.OnDepFailure, wantStatus, want.deps, want.policy)
		}
	}
}

// Through the CLI: one task of a slot key runs at a time, the next waits
// blocked and runs after; drop-if-running on the busy slot creates nothing.
func TestSubmitSlot(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	first := submit(t, store, cfg, "job", "--slot", "customer-42")
	second := submit(t, store, cfg, "job", "--slot", "customer-42")
	if got := getTask(t, store, second); got.Status != task.Blocked {
		t.Fatalf("the second task of the slot is %s, want blocked", got.Status)
	}
	r := cli(t, "", "submit", "--store", store, "--config", cfg, "--type", "job", "--slot", "customer-42", "--admission", "drop-if-running")
	if r.code == 0 || !strings.Contains(r.stderr, "slot busy") || r.stdout != "" {
		t.Errorf("drop-if-running on a busy slot: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", "submit", "--store", store, "--config", cfg, "--type", "job", "--admission", "replace")
	if r.code != 2 || !strings.Contains(r.stderr, "--admission needs --slot") {
		t.Errorf("--admission without --slot: exit %d, stderr %q", r.code, r.stderr)
	}
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "job=echo ok", "--pool", "job=4")
	a, b := waitTerminal(t, store, first), waitTerminal(t, store, second)
	if a.Status != task.Succeeded || b.Status != task.Succeeded {
		t.Fatalf("slot tasks ended %s and %s, want both succeeded", a.Status, b.Status)
	}
	// The second was granted the slot only after the first succeeded.
	var done, granted time.Time
	for _, h := range a.History {
		if h.To == task.Succeeded {
			done = h.At
		}
	}
	for _, h := range b.History {
		if h.From == task.Blocked && h.To == task.Pending {
			granted = h.At
		}
	}
	if granted.IsZero() || granted.Before(done) {
		t.Errorf("the second task was granted the slot at %v, the first succeeded at %v", granted, done)
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d; stderr:\n%s", code, stderr)
	}
}

// history shows, below the transitions, each dependency with what the
// task learned of it, and the ones it still waits on: a dependency that
// succeeds while another still runs writes no transition.
func TestHistoryShowsDependencies(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	done := submit(t, store, cfg, "x")
	open := submit(t, store, cfg, "z") // no worker runs z
	child := submit(t, store, cfg, "y", "--after", done+","+open)
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "x=true")
	waitFor(t, "the child to learn its first dependency succeeded", func() bool {
		d := getTask(t, store, child).Deps
		return len(d) == 2 && d[0].Ended == task.Succeeded
	})
	stop()

	hist := must(t, "history", child, "--store", store)
	for _, re := range []string{
		`\(new\)→blocked .*submitted\n\n`,
		`depends on:\s+` + done + `\s+succeeded\n\s+` + open + `\s+waiting\n`,
		`waiting on:\s+1 of 2: ` + open + `\n`,
	} {
		if !regexp.MustCompile(re).MatchString(hist) {
			t.Errorf("history of a child with one dependency succeeded lacks %s:\n%s", re, hist)
		}
	}
	if n := strings.Count(hist, "→"); n != 1 {
		t.Errorf("history has %d transitions, want 1 (the success of a dependency is not one):\n%s", n, hist)
	}
	// --json stays the list of transitions.
	var tr []task.Transition
	if err := json.Unmarshal([]byte(must(t, "history", child, "--json", "--store", store)), &tr); err != nil || len(tr) != 1 {
		t.Errorf("history --json: %v, %d transitions", err, len(tr))
	}
	// A task without dependencies or slot prints the transitions alone.
	if h := must(t, "history", done, "--store", store); strings.Contains(h, "depends on") || strings.HasSuffix(h, "\n\n") {
		t.Errorf("history of a task without dependencies:\n%s", h)
	}

	if out := must(t, "cancel", open, "--store", store); strings.TrimSpace(out) != "canceled" {
		t.Fatalf("cancel printed %q", out)
	}
	hist = must(t, "history", child, "--store", store)
	for _, re := range []string{
		`blocked→canceled .*dependency ` + open + ` ended canceled`,
		`depends on:\s+` + done + `\s+succeeded\n\s+` + open + `\s+canceled\n`,
	} {
		if !regexp.MustCompile(re).MatchString(hist) {
			t.Errorf("history of a canceled child lacks %s:\n%s", re, hist)
		}
	}
	if strings.Contains(hist, "waiting on") {
		t.Errorf("a canceled child still waits:\n%s", hist)
	}

	// The requeue of a child whose dependency failed is refused, naming
	// the task once and the dependency.
	r := cli(t, "", "requeue", child, "--store", store)
	want := "s3queue: task " + child + ": a dependency has not succeeded: dependency " + open + " is canceled\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("requeue of the canceled child: exit %d, stderr %q, want exit 1 and %q", r.code, r.stderr, want)
	}
}

// get names the task holding the slot a task waits for, and where the
// task stands in line; history says it waits for its slot.
func TestGetNamesTheSlotHolder(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	holder := submit(t, store, cfg, "job", "--slot", "customer-42")
	first := submit(t, store, cfg, "job", "--slot", "customer-42")
	second := submit(t, store, cfg, "job", "--slot", "customer-42")
	for id, want := range map[string]string{
		first:  `slot:\s+customer-42  \(waiting: held by ` + holder + `; 1 of 2 in line\)\n`,
		second: `slot:\s+customer-42  \(waiting: held by ` + holder + `; 2 of 2 in line\)\n`,
		holder: `slot:\s+customer-42\n`,
	} {
		if out := must(t, "get", id, "--store", store); !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("get %s lacks %s:\n%s", id, want, out)
		}
	}
	if h := must(t, "history", second, "--store", store); !regexp.MustCompile(`\n\nslot:\s+customer-42  \(waiting for the task that holds it\)\n`).MatchString(h) {
		t.Errorf("history of a task waiting for its slot:\n%s", h)
	}
	// The holder's cancel passes the slot on: the first is pending, the
	// second next in line behind it.
	must(t, "cancel", holder, "--store", store)
	if out := must(t, "get", second, "--store", store); !regexp.MustCompile(`\(waiting: held by ` + first + `; 1 of 1 in line\)`).MatchString(out) {
		t.Errorf("get of the second after the holder's cancel:\n%s", out)
	}
}
