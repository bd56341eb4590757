package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storetest/fakes3"
	"github.com/s3queue/s3queue/task"
)

// taskGets is a store that counts the GETs of task objects.
type taskGets struct {
	s3store.Store
	n atomic.Int64
}

func (s *taskGets) Get(ctx context.Context, key string) (s3store.Object, error) {
	if strings.HasPrefix(key, "tasks/") {
		s.n.Add(1)
	}
	return s.Store.Get(ctx, key)
}

// runOn runs a command line on st and returns its result and the GETs of
// task objects it made.
func runOn(t *testing.T, st *taskGets, args ...string) (cliResult, int64) {
	t.Helper()
	var out, errb syncBuffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil },
		open: func(context.Context, string) (s3store.Store, error) { return st, nil }}
	before := st.n.Load()
	code := a.report(a.dispatch(context.Background(), append(args, "--store", "s3://counted")))
	return cliResult{code, out.String(), errb.String()}, st.n.Load() - before
}

func listIDs(t *testing.T, stdout string) []string {
	t.Helper()
	var ts []task.Task
	if err := json.Unmarshal([]byte(stdout), &ts); err != nil {
		t.Fatalf("list --json printed %q: %v", stdout, err)
	}
	ids := []string{}
	for _, tk := range ts {
		ids = append(ids, tk.ID)
	}
	return ids
}

// list filters by the key and the size before any GET, and reads only the
// tasks it prints when the size decides the filter.
func TestListFiltersWithoutReadingFilteredOutTasks(t *testing.T) {
	store, _ := newStore(t)
	var ids []string // in submission order, so oldest first
	for i := range 10 {
		typ := "a"
		if i >= 5 {
			typ = "b"
		}
		ids = append(ids, strings.TrimSpace(must(t, "submit", "--store", store, "--type", typ)))
		// Ids of one millisecond sort at random; keep them apart.
		waitFor(t, "the next millisecond", func() bool {
			id, _ := task.NewID(time.Now(), strings.NewReader(strings.Repeat("z", 64)))
			return id[:10] > ids[len(ids)-1][:10]
		})
	}
	for _, id := range ids[5:8] {
		must(t, "cancel", id, "--store", store)
	}
	st := &taskGets{Store: openStore(t, store)}

	r, gets := runOn(t, st, "list", "--status", "canceled", "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids[5:8]) || gets != 3 {
		t.Errorf("list --status canceled: %v with %d GETs, want %v with 3", got, gets, ids[5:8])
	}
	r, gets = runOn(t, st, "list", "--status", "pending", "--limit", "2", "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids[:2]) || gets != 2 {
		t.Errorf("list --status pending --limit 2: %v with %d GETs, want %v with 2", got, gets, ids[:2])
	}
	r, gets = runOn(t, st, "list", "--status", "pending,canceled", "--sort", "newest", "--limit", "3", "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, []string{ids[9], ids[8], ids[7]}) || gets != 3 {
		t.Errorf("list --sort newest --limit 3: %v with %d GETs", got, gets)
	}
	// --type needs the task: every pending one is read, two printed.
	r, gets = runOn(t, st, "list", "--status", "pending", "--type", "b", "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids[8:]) || gets != 7 {
		t.Errorf("list --status pending --type b: %v with %d GETs, want %v with 7", got, gets, ids[8:])
	}
	r, gets = runOn(t, st, "list", "--older-than", "1h", "--json")
	if got := listIDs(t, r.stdout); len(got) != 0 || gets != 0 {
		t.Errorf("list --older-than 1h: %v with %d GETs, want none", got, gets)
	}
	r, _ = runOn(t, st, "list", "--newer-than", "1h", "--limit", "0", "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids) {
		t.Errorf("list --newer-than 1h: %v, want all", got)
	}
	// Pages: --limit, then --cursor the last id printed.
	r, _ = runOn(t, st, "list", "--limit", "4")
	if !strings.Contains(r.stderr, "continue with --cursor "+ids[3]) || !strings.Contains(r.stdout, ids[3]) || strings.Contains(r.stdout, ids[4]) {
		t.Errorf("list --limit 4: stdout\n%s\nstderr %s", r.stdout, r.stderr)
	}
	r, _ = runOn(t, st, "list", "--limit", "4", "--cursor", ids[3], "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids[4:8]) {
		t.Errorf("second page: %v, want %v", got, ids[4:8])
	}
	// The old spelling still pages, with a note.
	r, _ = runOn(t, st, "list", "--limit", "4", "--after", ids[3], "--json")
	if got := listIDs(t, r.stdout); !slices.Equal(got, ids[4:8]) || r.stderr != "s3queue: note: list --after is deprecated: use --cursor (submit --after is a dependency)\n" {
		t.Errorf("second page by --after: %v, stderr %q; want %v and a note", got, r.stderr, ids[4:8])
	}
	r, _ = runOn(t, st, "list", "--limit", "4", "--cursor", ids[7])
	if strings.Contains(r.stderr, "continue") {
		t.Errorf("the last page says more may follow: %s", r.stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--status", "pending,done"}, `--status "pending,done"`},
		{[]string{"--sort", "sideways"}, `--sort "sideways": want oldest or newest`},
		{[]string{"--cursor", "nope"}, `--cursor "nope" is not a task id`},
		{[]string{"--older-than", "1h", "--newer-than", "1m"}, "select nothing"},
		{[]string{"--older-than", "-1h"}, "must not be negative"},
		{[]string{"--type", "bad type!"}, `--type "bad type!"`},
	} {
		r, _ := runOn(t, st, append([]string{"list"}, c.args...)...)
		wantExit(t, r, exitUsage, c.want)
	}
}

func TestStatsCountsByType(t *testing.T) {
	store, _ := newStore(t)
	for _, typ := range []string{"a", "a", "b"} {
		must(t, "submit", "--store", store, "--type", typ)
	}
	c := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "b"))
	must(t, "cancel", c, "--store", store)
	var qs queueStats
	if err := json.Unmarshal([]byte(must(t, "stats", "--store", store, "--json")), &qs); err != nil {
		t.Fatal(err)
	}
	if len(qs.ByType) != 2 || qs.ByType[0].Type != "a" || qs.ByType[0].Total != 2 || qs.ByType[0].ByStatus[task.Pending] != 2 || len(qs.ByType[0].ByStatus) != 6 ||
		qs.ByType[1].Type != "b" || qs.ByType[1].ByStatus[task.Pending] != 1 || qs.ByType[1].ByStatus[task.Canceled] != 1 || qs.ByType[1].Total != 2 {
		t.Errorf("by_type = %+v", qs.ByType)
	}
	text := must(t, "stats", "--store", store)
	if !regexp.MustCompile(`by type:\n\s+TYPE\s+PENDING.*\n\s+a\s+2\s+0\s+0\s+0\s+0\s+0\s+2\s*\n\s+b\s+1\s+0\s+0\s+0\s+0\s+1\s+2`).MatchString(text) {
		t.Errorf("stats lacks the table by type:\n%s", text)
	}
}

func bulkReportOf(t *testing.T, r cliResult) bulkReport {
	t.Helper()
	var rep bulkReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("exit %d, not a report: %q (%v); stderr %s", r.code, r.stdout, err, r.stderr)
	}
	return rep
}

// A bulk requeue brings back every dead task of a type; a dry run changes
// nothing.
func TestBulkRequeueOfDeadTasks(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+`
[handlers]
fail = "exit 3"
other = "exit 3"
ok = "true"
`)
	var fail []string
	for range 3 {
		fail = append(fail, submit(t, store, cfg, "fail", "--max-attempts", "1"))
	}
	other := submit(t, store, cfg, "other", "--max-attempts", "1")
	ok := submit(t, store, cfg, "ok")
	_, stop := background(t, "worker", "--store", store, "--config", cfg)
	if r := cli(t, "", append([]string{"wait", ok, other, "--store", store, "--poll-max", "50ms"}, fail...)...); r.code != exitDead {
		t.Fatalf("wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	stop()

	r := cli(t, "", "requeue", "--status", "dead", "--type", "fail", "--dry-run", "--store", store)
	if r.code != 0 || !strings.Contains(r.stdout, "dry run: would requeue 3 tasks") || !strings.Contains(r.stdout, fail[0]) || strings.Contains(r.stdout, other) {
		t.Errorf("requeue --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := getTask(t, store, fail[0]); got.Status != task.Dead {
		t.Errorf("a dry run changed the task: %s", got.Status)
	}
	r = cli(t, "", "requeue", "--status", "dead", "--type", "fail", "--json", "--store", store)
	if r.stderr != "" {
		t.Errorf("a bulk requeue wrote on stderr that is not a terminal: %q", r.stderr)
	}
	rep := bulkReportOf(t, r)
	slices.Sort(rep.IDs)
	if rep.Action != "requeue" || rep.Matched != 3 || rep.Done != 3 || rep.Failed != 0 || !slices.Equal(rep.IDs, fail) {
		t.Errorf("requeue --status dead --type fail: %+v", rep)
	}
	for _, id := range fail {
		if got := getTask(t, store, id); got.Status != task.Pending || got.Attempt != 0 {
			t.Errorf("task %s after the bulk requeue: %s, attempt %d", id, got.Status, got.Attempt)
		}
	}
	for id, want := range map[string]task.Status{other: task.Dead, ok: task.Succeeded} {
		if got := getTask(t, store, id); got.Status != want {
			t.Errorf("task %s outside the filter: %s, want %s", id, got.Status, want)
		}
	}
	text := must(t, "requeue", "--status", "dead", "--store", store)
	if !regexp.MustCompile(`^matched:\s+1\nrequeued:\s+1\n`).MatchString(text) {
		t.Errorf("requeue --status dead:\n%s", text)
	}
	wantExit(t, cli(t, "", "requeue", "--status", "pending", "--store", store), exitUsage, `--status "pending": want dead or canceled`)
	wantExit(t, cli(t, "", "requeue", "--store", store), exitUsage, "want a task ID, or filters")
	wantExit(t, cli(t, "", "requeue", ok, "--status", "dead", "--store", store), exitUsage, "a task ID or filters, not both")
	wantExit(t, cli(t, "", "requeue", ok, "--dry-run", "--store", store), exitUsage, "go with the filter form")
}

func TestBulkCancel(t *testing.T) {
	store, _ := newStore(t)
	var a, b []string
	for range 3 {
		a = append(a, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "a")))
		b = append(b, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "b")))
	}
	dependent := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "b", "--after", a[0]))
	rep := bulkReportOf(t, cli(t, "", "cancel", "--type", "a", "--dry-run", "--json", "--store", store))
	if !rep.DryRun || rep.Matched != 3 || rep.Done != 0 {
		t.Errorf("cancel --dry-run: %+v", rep)
	}
	rep = bulkReportOf(t, cli(t, "", "cancel", "--type", "a", "--json", "--store", store))
	if rep.Matched != 3 || rep.Done != 3 || rep.Skipped != 0 {
		t.Errorf("cancel --type a: %+v", rep)
	}
	for _, id := range a {
		if got := getTask(t, store, id); got.Status != task.Canceled {
			t.Errorf("task %s: %s", id, got.Status)
		}
	}
	for _, id := range b {
		if got := getTask(t, store, id); got.Status != task.Pending {
			t.Errorf("task %s of the other type: %s", id, got.Status)
		}
	}
	waitFor(t, "the dependent to be canceled with its parent", func() bool { return getTask(t, store, dependent).Status == task.Canceled })
	// The size tells live tasks apart: no filter needs a GET before
	// Cancel's own.
	rep = bulkReportOf(t, cli(t, "", "cancel", "--status", "pending,blocked,running", "--json", "--store", store))
	if rep.Matched != 3 || rep.Done != 3 {
		t.Errorf("cancel --status pending,blocked,running: %+v", rep)
	}
	wantExit(t, cli(t, "", "cancel", "--status", "succeeded", "--store", store), exitUsage, "want pending, blocked or running")
}

// purge deletes finished tasks as retention would, and leaves live tasks
// (and keyed ones finished less than 10 minutes ago) alone.
func TestPurgeLeavesLiveTasksAlone(t *testing.T) {
	store, _ := newStore(t)
	live := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	blocked := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--after", live))
	var done []string
	for range 3 {
		id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
		must(t, "cancel", id, "--store", store)
		done = append(done, id)
	}
	keyed := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--idempotency-key", "k1"))
	must(t, "cancel", keyed, "--store", store)

	// A task counts as finished once the S3 time (whole seconds on S3 and
	// in a file store) is certainly past its end.
	var r cliResult
	waitFor(t, "the canceled tasks to be certainly in the past", func() bool {
		r = cli(t, "", "purge", "--dry-run", "--store", store)
		return strings.Contains(r.stdout, "would purge 3 tasks")
	})
	if r.code != 0 || strings.Contains(r.stdout, keyed) || strings.Contains(r.stdout, live) || !strings.Contains(r.stdout, done[0]) {
		t.Errorf("purge --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep := bulkReportOf(t, cli(t, "", "purge", "--older-than", "1h", "--json", "--store", store))
	if rep.Matched != 0 {
		t.Errorf("purge --older-than 1h of tasks finished just now: %+v", rep)
	}
	rep = bulkReportOf(t, cli(t, "", "purge", "--json", "--store", store))
	if rep.Done != 3 || rep.Skipped != 1 || rep.Failed != 0 {
		t.Errorf("purge: %+v", rep)
	}
	for _, id := range done {
		wantExit(t, cli(t, "", "get", id, "--store", store), exitNotFound, "not found")
	}
	for id, want := range map[string]task.Status{live: task.Pending, blocked: task.Blocked, keyed: task.Canceled} {
		if got := getTask(t, store, id); got.Status != want {
			t.Errorf("task %s after purge: %s, want %s", id, got.Status, want)
		}
	}
	if !slices.Contains(storeKeys(t, store), task.IdempotencyRecordKey("k1")) {
		t.Errorf("the keyed task's record went without its task")
	}
	wantExit(t, cli(t, "", "purge", "--status", "pending", "--store", store), exitUsage, "want succeeded, dead or canceled")
	wantExit(t, cli(t, "", "purge", "--newer-than", "1h", "--store", store), exitUsage, "newer-than")
	wantExit(t, cli(t, "", "purge", "some-id", "--store", store), exitUsage, "unexpected argument")
}

func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		done, total int
		want        string
	}{{0, 10, "[..........]"}, {5, 10, "[#####.....]"}, {10, 10, "[##########]"}, {12, 10, "[##########]"}, {0, 0, "[          ]"}} {
		if got := bar(c.done, c.total, 10); got != c.want {
			t.Errorf("bar(%d, %d) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}

// Where the provider ignores a conditional DELETE (gofakes3, like MinIO),
// purge tombstones a task by CAS before deleting it, as retention does.
func TestPurgeWhereConditionalDeleteIsIgnored(t *testing.T) {
	srv := fakes3.Start(t)
	fakes3.SetCredentials(t)
	store := srv.StoreURL(t, "q")
	live := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	gone := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", gone, "--store", store)
	waitFor(t, "the canceled task to be certainly in the past", func() bool {
		return strings.Contains(must(t, "purge", "--dry-run", "--store", store), "would purge 1 tasks")
	})
	rep := bulkReportOf(t, cli(t, "", "purge", "--json", "--store", store))
	if rep.Done != 1 || !slices.Equal(rep.IDs, []string{gone}) {
		t.Errorf("purge: %+v", rep)
	}
	wantExit(t, cli(t, "", "get", gone, "--store", store), exitNotFound, "not found")
	if got := getTask(t, store, live); got.Status != task.Pending {
		t.Errorf("the live task after purge: %s", got.Status)
	}
}

// changing is a store on which a task changes between a bulk command's
// LIST and its action: after runs once when the first LIST of tasks/ has
// returned, and sizes replaces the listed size of some keys (as for an
// object written before the size told every status, whose size misreads
// it).
type changing struct {
	s3store.Store
	sizes map[string]int64
	after func()
	once  sync.Once
}

func (s *changing) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	page, err := s.Store.List(ctx, prefix, opts)
	if err != nil || !strings.HasPrefix(prefix, "tasks/") {
		return page, err
	}
	page.Objects = slices.Clone(page.Objects)
	for i, o := range page.Objects {
		if n, ok := s.sizes[o.Key]; ok {
			page.Objects[i].Size = n
		}
	}
	if s.after != nil {
		s.once.Do(s.after)
	}
	return page, nil
}

// taskObject returns the key and listed size of task id in st.
func taskObject(t *testing.T, st s3store.Store, id string) (string, int64) {
	t.Helper()
	page, err := st.List(context.Background(), "tasks/", s3store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range page.Objects {
		if _, got, err := task.ParseKey(o.Key); err == nil && got == id {
			return o.Key, o.Size
		}
	}
	t.Fatalf("task %s not listed", id)
	return "", 0
}

// rewrite changes task id in st by the transitions change makes, as a
// worker or another operator would.
func rewrite(t *testing.T, st s3store.Store, id string, change func(*task.Task) error) {
	t.Helper()
	ctx := context.Background()
	key, _ := taskObject(t, st, id)
	v, err := taskio.Load(ctx, st, key)
	if err == nil {
		err = change(v.Task)
	}
	if err == nil {
		_, err = taskio.Update(ctx, st, clock.System(), v.Task, v.ETag)
	}
	if err != nil {
		t.Errorf("rewrite task %s: %v", id, err)
	}
}

// claim starts an attempt of tk, as a worker would once it is due (its
// available time may be up to a second ahead of the local clock: the S3
// time of a file store is in whole seconds).
func claim(tk *task.Task) error { return tk.ClaimBy("w1", "c1", dueTime(tk)) }

func dueTime(tk *task.Task) time.Time {
	if now := time.Now(); now.After(tk.AvailableAt) {
		return now
	}
	return tk.AvailableAt
}

// die makes tk dead: claimed, then failed for good.
func die(tk *task.Task) error {
	if err := claim(tk); err != nil {
		return err
	}
	return tk.Fail("c1", "boom", true, dueTime(tk), nil)
}

// A pending task that a worker claims between cancel's LIST and its
// cancel is running: cancel --status pending leaves it alone (its handler
// is not told to stop), and costs no GET but the cancel's own.
func TestBulkCancelChecksTheStatusOnTheTaskItCancels(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	base := openStore(t, store)
	st := &taskGets{Store: &changing{Store: base, after: func() { rewrite(t, base, id, claim) }}}

	r, gets := runOn(t, st, "cancel", "--status", "pending", "--json")
	rep := bulkReportOf(t, r)
	if rep.Matched != 1 || rep.Done != 0 || rep.CancelRequested != 0 || rep.Skipped != 1 || rep.Failed != 0 || gets != 1 {
		t.Errorf("cancel --status pending of a task claimed meanwhile: %+v with %d GETs, want skipped with 1", rep, gets)
	}
	if got := getTask(t, store, id); got.Status != task.Running || got.CancelRequested {
		t.Errorf("the claimed task after cancel --status pending: %s, cancel requested %v", got.Status, got.CancelRequested)
	}
}

// A canceled task requeued and dead again between requeue's LIST and its
// requeue is left alone by requeue --status canceled.
func TestBulkRequeueChecksTheStatusOnTheTaskItRequeues(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", id, "--store", store)
	base := openStore(t, store)
	st := &taskGets{Store: &changing{Store: base, after: func() {
		rewrite(t, base, id, func(tk *task.Task) error {
			if err := tk.Requeue(dueTime(tk)); err != nil {
				return err
			}
			return die(tk)
		})
	}}}

	r, gets := runOn(t, st, "requeue", "--status", "canceled", "--json")
	rep := bulkReportOf(t, r)
	if rep.Matched != 1 || rep.Done != 0 || rep.Skipped != 1 || rep.Failed != 0 || gets != 1 {
		t.Errorf("requeue --status canceled of a task dead by now: %+v with %d GETs, want skipped with 1", rep, gets)
	}
	if got := getTask(t, store, id); got.Status != task.Dead {
		t.Errorf("the dead task after requeue --status canceled: %s", got.Status)
	}
}

// A dead task whose listed size says succeeded (an object written before
// the size told every status) is not deleted by purge --status succeeded:
// the decision is made on the task read.
func TestPurgeChecksTheStatusOnTheTaskItDeletes(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	base := openStore(t, store)
	rewrite(t, base, id, die)
	key, size := taskObject(t, base, id)
	if s, _ := task.StatusBySize(size); s != task.Dead {
		t.Fatalf("a dead task's size %d says %s", size, s)
	}
	// Old enough to purge, by S3 time (whole seconds in a file store).
	waitFor(t, "the dead task to be certainly in the past", func() bool {
		return strings.Contains(must(t, "purge", "--status", "dead", "--dry-run", "--store", store), "would purge 1 tasks")
	})
	st := &taskGets{Store: &changing{Store: base, sizes: map[string]int64{key: size - 2}}} // 1 modulo 8: succeeded

	r, gets := runOn(t, st, "purge", "--status", "succeeded", "--json")
	rep := bulkReportOf(t, r)
	if rep.Matched != 1 || rep.Done != 0 || rep.Skipped != 1 || rep.Failed != 0 || gets != 1 {
		t.Errorf("purge --status succeeded of a dead task listed as succeeded: %+v with %d GETs, want skipped with 1", rep, gets)
	}
	if got := getTask(t, store, id); got.Status != task.Dead {
		t.Errorf("the dead task after purge --status succeeded: %s", got.Status)
	}
	// It is still purged when asked for.
	rep = bulkReportOf(t, cli(t, "", "purge", "--status", "dead", "--json", "--store", store))
	if rep.Done != 1 || !slices.Equal(rep.IDs, []string{id}) {
		t.Errorf("purge --status dead: %+v", rep)
	}
}
