package integration

// What the fleet tests (fleet_*_test.go) share: a fleet of `s3queue worker`
// processes on one MinIO queue, their --events files, and a watch on
// fleet.json read with minio-go, kept as evidence for a failure report.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// The fleet's timings at the defaults, which the tests derive their bounds
// from (docs/shards.md; worker/keys.go and worker/standby.go define them).
// The tests leave these settings at their defaults.
const (
	// fleetBellPoll: the standbys of a fleet asleep with no member take
	// turns once per bell_poll fleet-wide; the first to read a ring
	// answers it by joining.
	fleetBellPoll = 1500 * time.Millisecond
	// fleetStartupPoll, fleetStartupWindow: a worker started less than
	// startupWindow ago reads fleet.json every startupPoll.
	fleetStartupPoll   = time.Second
	fleetStartupWindow = 30 * time.Second
	// fleetLook: a member behind a backlog looks at it, asks for members
	// and hands shares to members that are not busy, once a second.
	fleetLook = time.Second
	// fleetMemberTTL, fleetLeaseMargin: a member renews every member_ttl/3;
	// one whose renewal is overdue by lease_margin is suspect and serves
	// no shard; members re-read fleet.json every member_ttl/12 while
	// others serve too.
	fleetMemberTTL   = 30 * time.Second
	fleetLeaseMargin = 2 * time.Second
	// fleetDateResolution: S3's Date header has a 1 s resolution, so a
	// process learns that an S3 time has certainly passed up to a second
	// after it has.
	fleetDateResolution = time.Second
	// fleetWaitPollMax: `s3queue submit --wait` polls its task at least
	// once a second (--poll-max).
	fleetWaitPollMax = time.Second
)

// fleetRun is a fleet of `s3queue worker` processes on one MinIO queue.
type fleetRun struct {
	t       *testing.T
	q       minioQueue
	bin     string
	dir     string
	env     []string
	workers []*fleetWorker
	watch   *fleetWatch
}

// fleetWorker is one worker process of a fleetRun.
type fleetWorker struct {
	id      string
	started time.Time // just before its process started
	events  string    // its --events file
	log     string    // its stderr and stdout
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
}

// kill ends the worker with SIGKILL, as a machine that dies would, and
// waits for it to exit.
func (w *fleetWorker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", w.id, err)
	}
	<-w.done
}

// newFleetRun creates a queue of 16 shards (the default) on MinIO, builds
// the binary, and starts watching fleet.json; env is added to every
// s3queue process's environment. The queue's context ends after within.
func newFleetRun(t *testing.T, within time.Duration, env ...string) *fleetRun {
	t.Helper()
	return newFleetRunOf(t, buildCLI(t), within, env...)
}

// newFleetRunOf is newFleetRun with the binary bin.
func newFleetRunOf(t *testing.T, bin string, within time.Duration, env ...string) *fleetRun {
	t.Helper()
	q := newMinIOQueue(t, 16, within)
	f := &fleetRun{t: t, q: q, bin: bin, dir: t.TempDir()}
	f.env = append([]string{"S3QUEUE_STORE=" + q.url}, env...)
	f.watch = watchFleetJSON(t, q.srv.Minio(), q.bucket, "q/fleet.json")
	t.Cleanup(func() {
		if t.Failed() {
			f.report()
		}
	})
	return f
}

// start starts n workers w{first}..w{first+n-1} at once, each with args
// after `worker` and its own --events file; they are killed when t ends.
func (f *fleetRun) start(t *testing.T, first, n int, env []string, args ...string) []*fleetWorker {
	t.Helper()
	var out []*fleetWorker
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("w%d", i)
		w := &fleetWorker{id: id, events: filepath.Join(f.dir, id+".jsonl"), log: filepath.Join(f.dir, id+".log"), done: make(chan struct{})}
		logf, err := os.Create(w.log)
		if err != nil {
			t.Fatal(err)
		}
		w.cmd = exec.Command(f.bin, append(append([]string{"worker"}, args...), "--events", w.events)...)
		w.cmd.Env = append(append(append(os.Environ(), f.env...), env...), "S3QUEUE_WORKER_ID="+id)
		w.cmd.Stdout, w.cmd.Stderr = logf, logf
		w.started = time.Now()
		if err := w.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		go func() { _ = w.cmd.Wait(); logf.Close(); close(w.done) }()
		t.Cleanup(func() { _ = w.cmd.Process.Kill(); <-w.done })
		out = append(out, w)
	}
	f.workers = append(f.workers, out...)
	return out
}

// cli runs `s3queue args...` with stdin and returns its stdout.
func (f *fleetRun) cli(stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(f.q.ctx, f.bin, args...)
	cmd.Env = append(os.Environ(), f.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("s3queue %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// submitBatch submits n tasks of type typ with `s3queue submit --batch -`
// and returns their ids.
func (f *fleetRun) submitBatch(t *testing.T, n int, typ string) []string {
	t.Helper()
	out, err := f.cli(strings.Repeat(`{"type":"`+typ+`","input":{}}`+"\n", n), "submit", "--batch", "-")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			t.Fatalf("s3queue submit --batch printed %q", line)
		}
		ids = append(ids, fields[1])
	}
	if len(ids) != n {
		t.Fatalf("s3queue submit --batch printed %d ids for %d lines", len(ids), n)
	}
	return ids
}

// fleetEvent is one line of a worker's --events file.
type fleetEvent struct {
	Time   time.Time `json:"time"`
	Origin string    `json:"origin"`
	Kind   string    `json:"kind"`
	TaskID string    `json:"task_id"`
	Shard  *int      `json:"shard"`
}

// readEvents reads w's --events file; a last line still being written is left
// for the next read.
func (w *fleetWorker) readEvents(t *testing.T) []fleetEvent {
	t.Helper()
	b, err := os.ReadFile(w.events)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		return nil
	}
	var out []fleetEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e fleetEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v: %s", w.events, err, sc.Bytes())
		}
		out = append(out, e)
	}
	return out
}

// fleetTally is what the workers' events say of a set of tasks.
type fleetTally struct {
	// first is each task's first event of the kind tallied, by worker.
	first map[string]fleetEvent
	// times counts each task's events of the kind (more than one: it ran
	// twice).
	times map[string]int
	// byWorker counts the tasks each worker has events of the kind for;
	// firstAt is its first such event.
	byWorker map[string]int
	firstAt  map[string]time.Time
	last     time.Time
}

// tallyEvents counts the events of kind for the tasks in ids (every task if ids
// is nil), across workers ws.
func tallyEvents(t *testing.T, ws []*fleetWorker, kind string, ids map[string]bool) fleetTally {
	t.Helper()
	r := fleetTally{first: map[string]fleetEvent{}, times: map[string]int{}, byWorker: map[string]int{}, firstAt: map[string]time.Time{}}
	for _, w := range ws {
		r.byWorker[w.id] += 0
		for _, e := range w.readEvents(t) {
			if e.Kind != kind || (ids != nil && !ids[e.TaskID]) {
				continue
			}
			r.times[e.TaskID]++
			if prev, ok := r.first[e.TaskID]; !ok || e.Time.Before(prev.Time) {
				r.first[e.TaskID] = e
			}
			r.byWorker[w.id]++
			if at, ok := r.firstAt[w.id]; !ok || e.Time.Before(at) {
				r.firstAt[w.id] = e.Time
			}
			if e.Time.After(r.last) {
				r.last = e.Time
			}
		}
	}
	return r
}

// waitTasks polls the workers' events until every task in ids has an event
// of kind, and returns the tally; it fails the test when that has not
// happened within d.
func (f *fleetRun) waitTasks(t *testing.T, ws []*fleetWorker, kind string, ids []string, d time.Duration) fleetTally {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(d)
	for {
		r := tallyEvents(t, ws, kind, want)
		if len(r.first) == len(want) {
			return r
		}
		if time.Now().After(deadline) || f.q.ctx.Err() != nil {
			var missing []string
			for id := range want {
				if _, ok := r.first[id]; !ok {
					missing = append(missing, id)
				}
			}
			sort.Strings(missing)
			t.Fatalf("%d of %d tasks have no %s event within %v (per worker %v); without one: %s",
				len(missing), len(want), kind, d, r.byWorker, strings.Join(missing, " "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAsleep polls fleet.json until the fleet is asleep with no member (its
// standbys' turns are then the doorbell), and returns when it first saw it
// so; it fails the test when that has not happened within d.
func (f *fleetRun) waitAsleep(t *testing.T, d time.Duration) time.Time {
	t.Helper()
	at, err := f.asleepWithin(f.q.ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// asleepWithin is waitAsleep for any goroutine: it returns an error
// instead of failing the test, and gives up when ctx ends.
func (f *fleetRun) asleepWithin(ctx context.Context, d time.Duration) (time.Time, error) {
	_, at, err := f.fleetWithin(ctx, d, "asleep with no member", func(d *fleetDoc) bool { return d.Asleep && len(d.Members) == 0 })
	return at, err
}

// fleetWithin polls fleet.json until ok holds, and returns it and when it
// was read; the error says what it was after d, or when ctx ended.
func (f *fleetRun) fleetWithin(ctx context.Context, d time.Duration, what string, ok func(*fleetDoc) bool) (*fleetDoc, time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		doc, err := f.watch.read(ctx)
		if err == nil && doc != nil && ok(doc) {
			return doc, time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, time.Time{}, fmt.Errorf("fleet.json not %s within %v (last read: err %v; %s)", what, d, err, doc.summary())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitStartupOver waits until the newest worker has been running longer
// than the startup window, so that the standbys read at their turns' pace
// (bell_poll fleet-wide while asleep), not every second each.
func (f *fleetRun) waitStartupOver(t *testing.T) {
	t.Helper()
	var newest time.Time
	for _, w := range f.workers {
		if w.started.After(newest) {
			newest = w.started
		}
	}
	d := time.Until(newest.Add(fleetStartupWindow + time.Second))
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-f.q.ctx.Done():
		t.Fatal(f.q.ctx.Err())
	}
}

// report logs the fleet.json versions the watch saw, and each worker's
// fleet events and log lines (but those of each task that succeeded), for
// a failure report.
func (f *fleetRun) report() {
	f.t.Logf("%s: fleet.json as it changed (local time, version, summary):\n%s", f.q.bucket, f.watch.String())
	for _, w := range f.workers {
		var b strings.Builder
		var starts []string
		for _, e := range w.readEvents(f.t) {
			switch e.Kind {
			case "shard_acquired", "shard_released", "fleet_asleep", "fleet_woken":
				fmt.Fprintf(&b, "  %s %s shard %d\n", e.Time.Format("15:04:05.000"), e.Kind, shardOf(e))
			case "started":
				starts = append(starts, fmt.Sprintf("%s(%d)", e.Time.Format("05.0"), shardOf(e)))
			}
		}
		if len(starts) > 0 {
			fmt.Fprintf(&b, "  tasks started at (seconds of the minute, and the task's shard): %s\n", strings.Join(starts, " "))
		}
		logb, _ := os.ReadFile(w.log)
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(logb)), "\n") {
			if !strings.Contains(l, `msg="task succeeded"`) {
				lines = append(lines, "  "+l)
			}
		}
		f.t.Logf("%s (started %s) fleet events:\n%s%s log but its tasks' successes:\n%s",
			w.id, w.started.Format("15:04:05.000"), b.String(), w.id, strings.Join(lines, "\n"))
	}
}

func shardOf(e fleetEvent) int {
	if e.Shard == nil {
		return -1
	}
	return *e.Shard
}

// fleetDoc is what the tests read of fleet.json (shards.Fleet has the
// rest).
type fleetDoc struct {
	Version int64 `json:"version"`
	Members []struct {
		ID      string    `json:"id"`
		Renewed time.Time `json:"renewed"`
		Busy    bool      `json:"busy"`
		Slots   int       `json:"slots"`
	} `json:"members"`
	Standbys []struct {
		ID string `json:"id"`
	} `json:"standbys"`
	Want   int   `json:"want"`
	Asleep bool  `json:"asleep"`
	Ring   int64 `json:"ring"`
	Shards int   `json:"shards"`
}

func (d *fleetDoc) summary() string {
	if d == nil {
		return "no fleet.json"
	}
	var ms []string
	for _, m := range d.Members {
		s := m.ID + " renewed " + m.Renewed.Format("15:04:05")
		if m.Busy {
			s += " busy"
		}
		ms = append(ms, s)
	}
	var ss []string
	for _, s := range d.Standbys {
		ss = append(ss, s.ID)
	}
	return fmt.Sprintf("members [%s] standbys [%s] want %d asleep %v ring %d shards %d",
		strings.Join(ms, ", "), strings.Join(ss, " "), d.Want, d.Asleep, d.Ring, d.Shards)
}

// fleetWatch reads fleet.json with minio-go, independently of the
// project's store, every 200 ms while its test runs, and keeps each
// version it sees.
type fleetWatch struct {
	c           *minio.Client
	bucket, key string

	mu   sync.Mutex
	seen []fleetSeen
}

type fleetSeen struct {
	at  time.Time
	doc fleetDoc
}

func watchFleetJSON(t *testing.T, c *minio.Client, bucket, key string) *fleetWatch {
	w := &fleetWatch{c: c, bucket: bucket, key: key}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = w.read(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// read reads fleet.json (nil if there is none yet) and records it if its
// version is new.
func (w *fleetWatch) read(ctx context.Context) (*fleetDoc, error) {
	obj, err := w.c.GetObject(ctx, w.bucket, w.key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, nil
		}
		return nil, err
	}
	var d fleetDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("fleet.json: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.seen); n == 0 || w.seen[n-1].doc.Version != d.Version {
		w.seen = append(w.seen, fleetSeen{at: time.Now(), doc: d})
	}
	return &d, nil
}

// String lists the versions seen, one a line.
func (w *fleetWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, s := range w.seen {
		fmt.Fprintf(&b, "  %s v%d %s\n", s.at.Format("15:04:05.000"), s.doc.Version, s.doc.summary())
	}
	return b.String()
}
