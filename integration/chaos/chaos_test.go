package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// TestChaos runs real `s3queue worker`, `monitor` and `submit` processes
// against a MinIO of its own while it kills workers and monitors (kill -9
// at random moments, and from inside the handler between the claim and the
// handler's start and between the handler's end and the commit), stops a
// worker with SIGTERM (drain), cuts a worker holding leases off from MinIO
// and heals it, kills MinIO with kill -9 and starts it again, runs workers
// and a monitor whose local clocks are minutes off, and plants corrupt
// and foreign objects in the queue. Then the checker reads the record
// (the handlers' runs files, `s3queue history --json`, the objects in the
// bucket) and proves that every task reached exactly one terminal state,
// the one its plan calls for; that no outcome was written twice or by a
// stale claim; that no slot ran two tasks at once and no dependent
// started before its parent's run ended; that every duplicate execution
// has a cause among the faults; and that no process crashed or spun.
//
// The short run (one round of each fault, about 270 tasks) is part of
// `make test`. S3QUEUE_CHAOS_SOAK=30m repeats the faults, in a random
// order, while producers keep submitting, for that long; S3QUEUE_CHAOS_SEED
// fixes the random choices (the timing is real and is not replayed).
// S3QUEUE_CHAOS_REPORT=FILE writes the figures to FILE as well, and
// S3QUEUE_CHAOS_DIR=DIR keeps the run's files (runs files, logs, events)
// in a new folder of DIR.
func TestChaos(t *testing.T) {
	soak := time.Duration(0)
	if v := os.Getenv("S3QUEUE_CHAOS_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("S3QUEUE_CHAOS_SOAK=%q: want a duration such as 30m", v)
		}
		soak = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("S3QUEUE_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("S3QUEUE_CHAOS_SEED=%q: want a number", v)
		}
		seed = n
	}
	t.Logf("seed %d (S3QUEUE_CHAOS_SEED=%d replays the choices)", seed, seed)
	began := time.Now()

	dir := t.TempDir()
	if keep := os.Getenv("S3QUEUE_CHAOS_DIR"); keep != "" {
		// The run's files (runs, logs, events, MinIO's data) stay there.
		dir = filepath.Join(keep, time.Now().Format("20060102-150405"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("the run's files are in %s", dir)
	}
	var bin string
	var buildErr error
	built := make(chan struct{})
	go func() { defer close(built); bin, buildErr = buildBinary(dir) }()
	srv := startMinIO(t, filepath.Join(dir, "minio"))
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	mc := srv.client(t)
	bucket := "chaos"
	if err := mc.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		t.Fatal(err)
	}

	r := &run{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), mc: mc, bucket: bucket, began: began}
	r.f = newFleet(t, bin, dir, srv, bucket)
	r.producers = []*proxy{newProxy(t, srv.addr), newProxy(t, srv.addr)}

	// The first wave creates the queue; the corrupt and foreign objects
	// go in before any worker or monitor starts.
	r.wave(0)
	r.plant()
	for _, skew := range []string{"", "7m", "-5m", ""} {
		r.f.startWorker(skew)
	}
	r.f.startMonitor("m1", "")
	r.f.startMonitor("m2", "4m")

	// Producers keep submitting waves while the faults come, one at a
	// time; the faults wait for the moment they are about (a worker with
	// a handler running) rather than for a fixed time.
	produceFor := 40 * time.Second
	if soak > 0 {
		produceFor = soak
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		next := time.Now()
		for w := 1; time.Since(began) < produceFor || w < 10; w++ {
			next = next.Add(4 * time.Second)
			time.Sleep(time.Until(next)) // the producers' pace, not a wait for work
			// A soak must not outrun the fleet: a backlog that only
			// grows proves nothing more. The next wave waits (up to
			// 2 minutes) for fewer than maxBacklog unfinished tasks.
			if r.waitBacklog(2 * time.Minute) {
				next = time.Now()
			}
			r.wave(w)
		}
	})
	faults := []func(){r.killWorker, r.killMonitor, r.drainWorker, r.cutWorker, r.killMinIO, r.killWorker}
	for round := 0; ; round++ {
		if round > 0 {
			r.mu.Lock()
			r.rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
			r.mu.Unlock()
		}
		for _, fault := range faults {
			r.pause(3 * time.Second)
			fault()
		}
		if soak == 0 || time.Since(began) > soak {
			break
		}
	}
	wg.Wait()
	t.Logf("%d tasks submitted; faults done at %v", len(r.specs), time.Since(began).Round(time.Second))

	r.waitFinished(3 * time.Minute)
	r.f.stopAll(shutdownGrace + 20*time.Second)
	rep := r.check()
	rep.wall = time.Since(began)
	out := rep.String()
	t.Log("\n" + out)
	if path := os.Getenv("S3QUEUE_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// taskTimeout is every task's timeout, so its lease.
const taskTimeout = 8 * time.Second

// spec is one task of the plan.
type spec struct {
	id    string
	kind  string // plain, slot, chain, fan, doomed, orphan (the child of a doomed task)
	ms    int
	fail  int // its attempts up to fail fail
	kill  string
	slot  string
	after []*spec
	delay string
	max   int
	want  string // the terminal status it must reach
}

func (s *spec) line() string {
	m := map[string]any{
		"type":         "chaos",
		"input":        fmt.Sprintf("ms=%d fail=%d kill=%s", s.ms, s.fail, s.kill),
		"timeout":      taskTimeout.String(),
		"max_attempts": s.max,
	}
	if s.slot != "" {
		m["slot"] = s.slot
	}
	if s.delay != "" {
		m["delay"] = s.delay
	}
	var after []string
	for _, p := range s.after {
		after = append(after, p.id)
	}
	if len(after) > 0 {
		m["after"] = after
	}
	if s.id != "" {
		m["id"] = s.id
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// run is one chaos run: the plan, the fleet, and what the faults did.
type run struct {
	t         *testing.T
	f         *fleet
	mc        *minio.Client
	bucket    string
	producers []*proxy
	began     time.Time

	mu      sync.Mutex
	rng     *rand.Rand
	specs   []*spec
	faults  map[string]int
	planted []planted
	drained []drainRecord
	read    map[string]readObject // task objects read, by key
}

type planted struct {
	key     string
	corrupt bool // a task object that cannot be read (reported), or a foreign object
}

// drainRecord is a worker stopped with SIGTERM and the executions it had
// running then: each must end and be committed by it.
type drainRecord struct {
	worker  string
	running []string // task ids
}

func (r *run) intn(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) count(fault string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.faults == nil {
		r.faults = map[string]int{}
	}
	r.faults[fault]++
}

// pause spaces the faults: the run goes on undisturbed for d.
func (r *run) pause(d time.Duration) { time.Sleep(d) }

// wave submits one wave of the plan: independent tasks (some failing their
// first attempt, a few long), tasks in three slots, a chain of three and a
// fan-in of three parents, every other wave a task bound to die with a
// dependent, and in the first waves the tasks whose handlers kill their
// worker. Parents are delayed 2s, so that their dependents are blocked
// when they arrive.
func (r *run) wave(w int) {
	var first, second, third []*spec
	add := func(list *[]*spec, s *spec) *spec {
		if s.max == 0 {
			s.max = 10
		}
		if s.want == "" {
			s.want = "succeeded"
		}
		*list = append(*list, s)
		return s
	}
	for i := range 14 {
		s := &spec{kind: "plain", ms: 100 + r.intn(1400)}
		if i%7 == 3 {
			s.fail = 1
		}
		if i%3 == 0 {
			// A slot of its own: no wait, but its end is passed on (a
			// marker, then the slot's release), as a parent's is.
			s.slot = fmt.Sprintf("own-%d-%d", w, i)
		}
		add(&first, s)
	}
	for range 2 {
		add(&first, &spec{kind: "plain", ms: 2500 + r.intn(1000)})
	}
	for i := range 3 {
		add(&first, &spec{kind: "slot", ms: 200 + r.intn(500), slot: fmt.Sprintf("slot-%c", 'a'+(w+i)%3)})
	}
	// Kill points, once per task, in the first waves of every round.
	switch w % 12 {
	case 1, 3:
		add(&first, &spec{kind: "plain", ms: 300, kill: "start"})
	case 2, 4:
		add(&first, &spec{kind: "plain", ms: 300, kill: "end"})
	case 5:
		add(&first, &spec{kind: "slot", ms: 300, slot: "slot-a", kill: "end"})
	}
	root := add(&first, &spec{kind: "chain", ms: 300 + r.intn(700), delay: "2s"})
	if w%12 == 6 {
		root.kill = "end"
	}
	mid := add(&second, &spec{kind: "chain", ms: 300 + r.intn(700), after: []*spec{root}})
	add(&third, &spec{kind: "chain", ms: 300 + r.intn(700), after: []*spec{mid}})
	var parents []*spec
	for range 3 {
		parents = append(parents, add(&first, &spec{kind: "fan", ms: 200 + r.intn(1500), delay: "2s"}))
	}
	add(&second, &spec{kind: "fan", ms: 200, after: parents})
	if w%2 == 0 {
		doomed := add(&first, &spec{kind: "doomed", ms: 200, fail: 99, max: 2, delay: "2s", want: "dead"})
		add(&second, &spec{kind: "orphan", ms: 200, after: []*spec{doomed}, want: "canceled"})
	}
	px := r.producers[w%len(r.producers)]
	for _, batch := range [][]*spec{first, second, third} {
		r.submit(px, batch)
	}
}

var unknownID = regexp.MustCompile(`"id": "([0-9A-Z]+)"`)

// submit submits batch until every task of it exists: a line that failed
// is submitted again, one whose outcome is unknown again under the id it
// was given (created once, as the CLI promises).
func (r *run) submit(px *proxy, batch []*spec) {
	t := r.t
	todo := batch
	deadline := time.Now().Add(2 * time.Minute)
	for len(todo) > 0 {
		lines := make([]string, len(todo))
		for i, s := range todo {
			lines[i] = s.line()
		}
		ids, errs, err := r.f.submitBatch(px, lines)
		if err != nil {
			t.Errorf("submit: %v", err)
			return
		}
		var again []*spec
		for i, s := range todo {
			switch {
			case ids[i] != "":
				if s.id != "" && s.id != ids[i] {
					t.Errorf("submit with id %s printed %s", s.id, ids[i])
				}
				s.id = ids[i]
				r.mu.Lock()
				r.specs = append(r.specs, s)
				r.mu.Unlock()
			default:
				if m := unknownID.FindStringSubmatch(errs[i]); m != nil {
					s.id = m[1]
				}
				r.count("submit lines failed and submitted again")
				again = append(again, s)
			}
		}
		todo = again
		if len(todo) > 0 {
			if time.Now().After(deadline) {
				t.Errorf("%d lines still not submitted after 2 minutes: %v", len(todo), errs)
				return
			}
			time.Sleep(time.Second) // a producer's back-off before it tries again
		}
	}
}

// plant writes objects no s3queue process wrote under the queue's prefix:
// task objects that are not JSON, of a foreign shape, of a future format,
// and objects of no known kind, between the real tasks of the shards.
func (r *run) plant() {
	t := r.t
	ctx := context.Background()
	r.mu.Lock()
	near := r.specs[0].id
	r.mu.Unlock()
	// Task ids near the real ones, so that the shard listings meet them
	// among the tasks.
	mk := func(c byte) string { return near[:len(near)-1] + string(c) }
	objs := []struct {
		key     string
		body    string
		corrupt bool
	}{
		{fmt.Sprintf("%s/tasks/000/%s.json", queuePrefix, mk('Z')), `{"format":2,"id":"` + mk('Z') + `","sta`, true},
		{fmt.Sprintf("%s/tasks/001/%s.json", queuePrefix, mk('Y')), `{"hello":"a foreign object"}`, true},
		{fmt.Sprintf("%s/tasks/002/%s.json", queuePrefix, mk('X')), `{"format":99,"id":"` + mk('X') + `","status":"pending"}`, true},
		{fmt.Sprintf("%s/tasks/003/README.txt", queuePrefix), "not a task", false},
		{fmt.Sprintf("%s/ready/001/garbage", queuePrefix), "\x00\x01 not a pointer", false},
		{fmt.Sprintf("%s/unknown/thing.bin", queuePrefix), "\xff\xfe", false},
	}
	for _, o := range objs {
		if _, err := r.mc.PutObject(ctx, r.bucket, o.key, strings.NewReader(o.body), int64(len(o.body)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("plant %s: %v", o.key, err)
		}
		r.planted = append(r.planted, planted{key: o.key, corrupt: o.corrupt})
		r.count("objects planted (corrupt or foreign)")
	}
}

// busyWorker waits (up to 20s) for a live worker that is not cut off and
// has a handler running, and returns it; nil if none came.
func (r *run) busyWorker() *proc {
	var found *proc
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var busy []*proc
		running := inFlight(r.f.dir)
		for _, p := range r.f.live("worker") {
			p.mu.Lock()
			cut := len(p.cut) > 0 && p.cut[len(p.cut)-1].to.IsZero()
			p.mu.Unlock()
			if !cut && len(running[p.name]) > 0 {
				busy = append(busy, p)
			}
		}
		if len(busy) > 0 {
			found = busy[r.intn(len(busy))]
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if found == nil {
		r.t.Logf("no worker had a handler running within 20s")
	}
	return found
}

// killWorker kills a worker with a handler running (SIGKILL).
func (r *run) killWorker() {
	p := r.busyWorker()
	if p == nil {
		return
	}
	p.signal(syscall.SIGKILL, fateKill)
	<-p.done
	r.count("kill -9 of a worker mid-run")
	r.t.Logf("%v: kill -9 %s", time.Since(r.began).Round(time.Second), p.name)
}

// killMonitor kills a monitor (SIGKILL); the supervisor starts it again.
func (r *run) killMonitor() {
	mons := r.f.live("monitor")
	if len(mons) == 0 {
		return
	}
	p := mons[r.intn(len(mons))]
	p.signal(syscall.SIGKILL, fateKill)
	<-p.done
	r.count("kill -9 of a monitor")
	r.t.Logf("%v: kill -9 monitor %s", time.Since(r.began).Round(time.Second), p.name)
}

// drainWorker stops a worker with handlers running by SIGTERM: it must
// finish them within shutdown_grace, commit them, and exit 0.
func (r *run) drainWorker() {
	p := r.busyWorker()
	if p == nil {
		return
	}
	running := inFlight(r.f.dir)[p.name]
	p.signal(syscall.SIGTERM, fateTerm)
	select {
	case <-p.done:
	case <-time.After(shutdownGrace + 15*time.Second):
		r.t.Errorf("%s did not exit within %v of SIGTERM", p.name, shutdownGrace+15*time.Second)
	}
	var ids []string
	for _, e := range running {
		ids = append(ids, e.task)
	}
	r.mu.Lock()
	r.drained = append(r.drained, drainRecord{worker: p.name, running: ids})
	r.mu.Unlock()
	r.count("SIGTERM of a worker mid-run (drain)")
	r.t.Logf("%v: SIGTERM %s with %d handlers running", time.Since(r.began).Round(time.Second), p.name, len(ids))
}

// cutWorker cuts a worker with handlers running (so holding their leases)
// off from MinIO for longer than a lease, then heals the network.
func (r *run) cutWorker() {
	p := r.busyWorker()
	if p == nil {
		return
	}
	p.mu.Lock()
	p.cut = append(p.cut, window{from: time.Now()})
	p.mu.Unlock()
	p.proxy.Cut()
	r.t.Logf("%v: cut %s off from MinIO", time.Since(r.began).Round(time.Second), p.name)
	// A lease is 8s (the tasks' timeout): the monitor takes the tasks
	// over while the worker is still cut off.
	time.Sleep(16 * time.Second) // the outage's length
	p.proxy.Heal()
	p.mu.Lock()
	p.cut[len(p.cut)-1].to = time.Now()
	p.mu.Unlock()
	r.count("network cut of a worker holding leases (16s)")
}

// killMinIO kills MinIO with SIGKILL and starts it again on the same data
// after 3s, at a moment when handlers of tasks whose end is passed on
// (a slot, dependents) are running: their commits write a marker first.
func (r *run) killMinIO() {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && r.passingOn() < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	from := time.Now()
	r.f.minio.kill()
	r.t.Logf("%v: kill -9 MinIO", time.Since(r.began).Round(time.Second))
	time.Sleep(3 * time.Second) // the outage's length
	if err := r.f.minio.start(context.Background()); err != nil {
		r.t.Fatalf("restart MinIO: %v", err)
	}
	r.f.mu.Lock()
	r.f.outages = append(r.f.outages, window{from: from, to: time.Now()})
	r.f.mu.Unlock()
	r.count("kill -9 of MinIO and restart")
	r.t.Logf("%v: MinIO back", time.Since(r.began).Round(time.Second))
}

// passingOn counts the handlers running now whose tasks pass their end on.
func (r *run) passingOn() int {
	r.mu.Lock()
	passes := map[string]bool{}
	for _, s := range r.specs {
		if s.slot != "" {
			passes[s.id] = true
		}
		for _, p := range s.after {
			passes[p.id] = true
		}
	}
	r.mu.Unlock()
	n := 0
	running := inFlight(r.f.dir)
	for _, p := range r.f.live("worker") {
		for _, e := range running[p.name] {
			if passes[e.task] {
				n++
			}
		}
	}
	return n
}

// maxBacklog bounds the unfinished tasks of the plan before a wave.
const maxBacklog = 150

// waitBacklog waits, up to within, until fewer than maxBacklog tasks of the
// plan are unfinished in the bucket; it reports whether it had to wait.
func (r *run) waitBacklog(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for waited := false; ; waited = true {
		objs, err := r.readTasks()
		r.mu.Lock()
		left := 0
		for _, s := range r.specs {
			if o, ok := objs[s.id]; !ok || !terminal(o.Status) {
				left++
			}
		}
		r.mu.Unlock()
		if err == nil && left < maxBacklog || time.Now().After(deadline) {
			if waited {
				r.count("waves that waited for the backlog")
			}
			return waited
		}
		time.Sleep(time.Second)
	}
}

// waitFinished waits until every task of the plan is in a terminal state
// in the bucket.
func (r *run) waitFinished(within time.Duration) {
	t := r.t
	done := map[string]bool{}
	var left []string
	deadline := time.Now().Add(within)
	for {
		objs, err := r.readTasks()
		left = left[:0]
		for _, s := range r.specs {
			if done[s.id] {
				continue
			}
			if o, ok := objs[s.id]; ok && terminal(o.Status) {
				done[s.id] = true
				continue
			}
			left = append(left, s.id)
		}
		if len(left) == 0 && err == nil {
			t.Logf("every task finished at %v", time.Since(r.began).Round(time.Second))
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Errorf("read the task objects: %v", err)
			}
			t.Errorf("%d tasks not finished %v after the faults ended (first: %v)", len(left), within, left[:min(5, len(left))])
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func terminal(status string) bool {
	return status == "succeeded" || status == "dead" || status == "canceled"
}
