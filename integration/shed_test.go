package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// TestRejectLeavesTasksForOthers: a worker whose io pool (one handler, one
// task claimed ahead, reject) is full refuses the io tasks beyond two: they
// stay in the bucket unclaimed (pending, attempt 0, no claim in their
// history), its default pool meanwhile runs the tasks of other types found
// behind them, and a second worker runs the refused ones. Both workers are
// pinned to the queue's one shard (see dispatch_test.go).
//
// It also measures what a refusal costs the refusing worker: the refused
// task is read once (its type is in the object, not the key), and not
// again while it is unchanged and the io pool full, however many polls
// list it; the refusal is reported once.
func TestRejectLeavesTasksForOthers(t *testing.T) {
	q := newMinIOQueue(t, 1, 2*time.Minute)
	ctx := q.ctx
	gate := make(chan struct{}) // closed: w1's io handler returns
	var mu sync.Mutex
	refused := map[string]int{} // task id -> refusals by w1
	io := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-gate:
			return json.RawMessage(`"io done"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	fast := func(context.Context, *task.Task) (json.RawMessage, error) { return json.RawMessage(`"done"`), nil }
	rec1 := newRecorder(q.st, "w1")
	w1, err := worker.New(ctx, rec1, worker.Config{
		ID: "w1", OwnShards: []int{0}, Concurrency: 4, PollMin: 20 * time.Millisecond, PollMax: 200 * time.Millisecond,
		Pools: []worker.Pool{{Name: "io", MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.Reject}},
		Hooks: worker.Hooks{OnReject: func(qd worker.Queued) {
			mu.Lock()
			refused[qd.TaskID]++
			mu.Unlock()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w1.Handle("io", io)
	w1.Handle("cpu", fast)
	stop1 := runWorker(ctx, w1)

	submit := func(typ string, n int) []string {
		var ids []string
		for i := range n {
			id, err := q.prod.Submit(ctx, typ, map[string]int{"i": i}, producer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	ios := submit("io", 5)
	cpus := submit("cpu", 2) // behind the refused io tasks in the listing
	// The listing returns them in id order, not submit order (ids drawn in
	// one millisecond sort at random): the first two it returns are held.
	slices.Sort(ios)
	held, left := ios[:2], ios[2:]

	waitUntil(t, ctx, "w1 to refuse the io tasks beyond two", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range left {
			if refused[id] < 1 {
				return false
			}
		}
		return true
	})
	// Five more listings (poll_max is 200ms) that bring the refused tasks
	// again.
	listsNow := func() int {
		n := 0
		for _, r := range rec1.snapshot() {
			if r.op == s3store.OpList {
				n++
			}
		}
		return n
	}
	from := listsNow()
	waitUntil(t, ctx, "w1 to list five more times", 30*time.Second, func() bool { return listsNow() >= from+5 })
	mu.Lock()
	for _, id := range held {
		if refused[id] > 0 {
			t.Errorf("w1 refused %s, one of the two io tasks it had room for", id)
		}
	}
	for _, id := range left {
		if refused[id] != 1 {
			t.Errorf("w1 reported %d refusals of %s, want one: the task did not change", refused[id], id)
		}
	}
	mu.Unlock()
	for _, id := range left {
		tk, err := q.prod.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != task.Pending || tk.Attempt != 0 || tk.Claim != nil || len(tk.History) != 1 {
			t.Errorf("refused task %s: %s, attempt %d, claim %+v, history %+v: want pending, attempt 0, never claimed", id, tk.Status, tk.Attempt, tk.Claim, tk.History)
		}
	}
	for _, id := range held {
		if tk, err := q.prod.Get(ctx, id); err != nil || tk.Status != task.Running || tk.Claim.Worker != "w1" {
			t.Errorf("io task %s: %+v, %v: want running, claimed by w1", id, tk, err)
		}
	}
	// The default pool is not held up by the full io pool.
	waitSucceeded(t, ctx, q.prod, cpus, "w1's default pool to run the cpu tasks behind the refused io tasks")
	var ioState worker.QueueState
	for _, s := range w1.QueueStates() {
		if s.Pool == "io" {
			ioState = s
		}
	}
	if ioState.InFlight != 1 || ioState.Pending != 1 {
		t.Errorf("io pool gauges %+v: want 1 in flight, 1 pending", ioState)
	}
	t.Logf("io pool gauges with its queue full: %+v", ioState)

	// What a refusal costs w1: one GET of the refused task, whatever the
	// polls that list it again.
	reqs := rec1.snapshot()
	lists, gets := 0, 0
	for _, r := range reqs {
		switch {
		case r.op == s3store.OpList:
			lists++
		case r.op == s3store.OpGet && slices.ContainsFunc(left, func(id string) bool { return strings.Contains(r.key, id) }):
			gets++
		}
	}
	mu.Lock()
	n := 0
	for _, id := range left {
		n += refused[id]
	}
	mu.Unlock()
	t.Logf("w1 so far: %d LISTs, %d GETs of the %d refused tasks, %d refusals (%.2f GETs per refusal)", lists, gets, len(left), n, float64(gets)/float64(max(n, 1)))
	if gets != len(left) {
		t.Errorf("%d GETs of the %d refused tasks over %d LISTs, want one each", gets, len(left), lists)
	}

	// Another worker runs what w1 refused.
	w2, err := worker.New(ctx, q.st, worker.Config{ID: "w2", OwnShards: []int{0}, PollMin: 20 * time.Millisecond, PollMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w2.Handle("io", fast)
	stop2 := runWorker(ctx, w2)
	waitSucceeded(t, ctx, q.prod, left, "w2 to run the io tasks w1 refused")
	close(gate)
	waitSucceeded(t, ctx, q.prod, held, "w1 to finish its io tasks")
	for _, id := range append(slices.Clone(ios), cpus...) {
		tk, err := q.prod.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := "w1"
		if slices.Contains(left, id) {
			want = "w2"
		}
		last := tk.History[len(tk.History)-1]
		if tk.Attempt != 1 || countTransitions(*tk, task.Succeeded) != 1 || last.Worker != want {
			t.Errorf("task %s (%s): attempt %d, succeeded by %q, history %+v: want one attempt, succeeded once by %s", id, tk.Type, tk.Attempt, last.Worker, tk.History, want)
		}
	}
	stop2()
	stop1()
	if s := w1.Stats(); s.Refused < int64(len(left)) || s.Released != 0 || s.Dropped != 0 {
		t.Errorf("w1 stats %+v: want refusals, and nothing released or dropped", s)
	}
}

// TestReleaseCostOnMinIO measures what one release by a full drop-oldest
// pool costs, request by request, on MinIO: worker A (one handler, one
// task claimed ahead, poll_max 1s) holds T1 running and T2 pending; T3
// arrives; A claims T3 and releases T2; worker B, started then, claims T2.
// Every request either worker makes on T2's task object or a ready pointer
// to it is recorded.
func TestReleaseCostOnMinIO(t *testing.T) {
	q := newMinIOQueue(t, 1, 2*time.Minute)
	ctx := q.ctx
	var mu sync.Mutex
	var evs []worker.Event
	onEvent := func(e worker.Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
	}
	seen := func(kind worker.Kind, id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(evs, func(e worker.Event) bool { return e.Kind == kind && e.TaskID == id })
	}
	block := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	recA := newRecorder(q.st, "A")
	a, err := worker.New(ctx, recA, worker.Config{
		ID: "A", OwnShards: []int{0}, MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.DropOldest,
		PollMin: 20 * time.Millisecond, PollMax: time.Second, OnEvent: onEvent, ShutdownGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("job", block)
	stopA := runWorker(ctx, a)
	submit := func() string {
		id, err := q.prod.Submit(ctx, "job", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	t1, t2 := submit(), submit()
	waitUntil(t, ctx, "A to run T1 and hold T2", 30*time.Second, func() bool {
		return seen("started", t1) && seen("claimed", t2)
	})
	t3 := submit()
	waitUntil(t, ctx, "A to release T2 for T3", 30*time.Second, func() bool {
		return seen("released", t2) && seen("claimed", t3)
	})

	recB := newRecorder(q.st, "B")
	b, err := worker.New(ctx, recB, worker.Config{ID: "B", OwnShards: []int{0}, PollMin: 20 * time.Millisecond, PollMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	stopB := runWorker(ctx, b)
	waitSucceeded(t, ctx, q.prod, []string{t2}, "T2 to be run after its release")
	stopB()

	tk, err := q.prod.Get(ctx, t2)
	if err != nil {
		t.Fatal(err)
	}
	claimer := tk.History[len(tk.History)-1].Worker
	t.Logf("T2 %s at attempt %d by %s; history: %+v", tk.Status, tk.Attempt, claimer, tk.History)
	if tk.Attempt != 1 {
		t.Errorf("T2 succeeded at attempt %d after one release, want 1", tk.Attempt)
	}

	// A's requests on T2: the claim (GET, conditional PUT), then the
	// release. Cut at A's claim PUT: what follows is the release, and any
	// look A's later polls took at T2.
	onT2 := func(rs []request) []request {
		var out []request
		for _, r := range rs {
			if strings.Contains(r.key, t2) {
				out = append(out, r)
			}
		}
		return out
	}
	ra := onT2(recA.snapshot())
	claimPut := slices.IndexFunc(ra, func(r request) bool { return r.op == s3store.OpPut && !shards.IsPointer(r.key) })
	if claimPut < 0 {
		t.Fatalf("no claim PUT of T2 by A among %v", ra)
	}
	release := ra[claimPut+1:]
	t.Logf("A on T2, claim: %v", ra[:claimPut+1])
	t.Logf("A on T2, release and after: %v", release)
	var next []string // the claimer's requests on T2, timed from the release
	for _, r := range onT2(map[string]*recorder{"A": recA, "B": recB}[claimer].snapshot()) {
		if d := r.at.Sub(release[0].at); d > 0 {
			next = append(next, fmt.Sprintf("+%v %v", d.Round(time.Millisecond), r))
		}
	}
	t.Logf("%s on T2 after the release (the next claim): %v", claimer, next)
	// Everything A sent from its drop of T2 to the release's last request:
	// the release's own requests, and whatever A's poll sent meanwhile.
	var dropped time.Time
	mu.Lock()
	for _, e := range evs {
		if e.Kind == "dropped" && e.TaskID == t2 {
			dropped = e.Time
		}
	}
	mu.Unlock()
	var window []request
	for _, r := range recA.snapshot() {
		if !r.at.Before(dropped) && !r.at.After(release[len(release)-1].at) {
			window = append(window, r)
		}
	}
	t.Logf("A from its drop of T2 to the pointer PUT: %v", window)
	putTask, putPointer := 0, 0
	for _, r := range release {
		switch {
		case r.op == s3store.OpPut && shards.IsPointer(r.key):
			putPointer++
		case r.op == s3store.OpPut && r.cond == "if-match":
			putTask++
		}
	}
	if putTask != 1 || putPointer != 1 {
		t.Errorf("the release wrote the task %d times (conditional) and a pointer %d times: want 1 and 1", putTask, putPointer)
	}
	rb := onT2(recB.snapshot())
	if claimer == "B" {
		get := slices.IndexFunc(rb, func(r request) bool { return r.op == s3store.OpGet && !shards.IsPointer(r.key) })
		put := slices.IndexFunc(rb, func(r request) bool { return r.op == s3store.OpPut && r.cond == "if-match" })
		if get < 0 || put < get {
			t.Errorf("B's claim of T2 was not a GET then a conditional PUT: %v", rb)
		}
	}
	stopA()
}

// runWorker runs w until the returned stop is called (or ctx ends), and
// stop waits for Run to return.
func runWorker(ctx context.Context, w *worker.Worker) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		w.Run(wctx)
		close(done)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// waitSucceeded waits until every task of ids has succeeded.
func waitSucceeded(t *testing.T, ctx context.Context, p *producer.Producer, ids []string, what string) {
	t.Helper()
	waitUntil(t, ctx, what, time.Minute, func() bool {
		for _, id := range ids {
			tk, err := p.Get(ctx, id)
			if err != nil || tk.Status != task.Succeeded {
				return false
			}
		}
		return true
	})
}

// request is one request a recorder passed on.
type request struct {
	op   s3store.Op
	key  string
	cond string // "if-match", "if-none-match" or ""
	err  error
	at   time.Time // when its response came
}

func (r request) String() string {
	s := r.op.String() + " " + r.key
	if r.cond != "" {
		s += " (" + r.cond + ")"
	}
	if r.err != nil {
		s += fmt.Sprintf(": %s", s3store.OutcomeOf(r.err))
	}
	return s
}

// recorder is a store that records every request it passes on, in order;
// Now is recorded as the HEAD it costs.
type recorder struct {
	inner s3store.Store
	name  string
	mu    sync.Mutex
	log   []request
}

var _ s3store.Store = (*recorder)(nil)

func newRecorder(inner s3store.Store, name string) *recorder {
	return &recorder{inner: inner, name: name}
}

func (r *recorder) add(op s3store.Op, key, cond string, err error) {
	r.mu.Lock()
	r.log = append(r.log, request{op: op, key: key, cond: cond, err: err, at: time.Now()})
	r.mu.Unlock()
}

func (r *recorder) snapshot() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recorder) Get(ctx context.Context, key string) (s3store.Object, error) {
	o, err := r.inner.Get(ctx, key)
	r.add(s3store.OpGet, key, "", err)
	return o, err
}

func (r *recorder) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	o, err := r.inner.Head(ctx, key)
	r.add(s3store.OpHead, key, "", err)
	return o, err
}

func (r *recorder) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := r.inner.Put(ctx, key, body, opts)
	cond := ""
	switch {
	case opts.IfMatch != "":
		cond = "if-match"
	case opts.IfNoneMatch:
		cond = "if-none-match"
	}
	r.add(s3store.OpPut, key, cond, err)
	return etag, err
}

func (r *recorder) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	err := r.inner.Delete(ctx, key, opts)
	r.add(s3store.OpDelete, key, "", err)
	return err
}

func (r *recorder) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	p, err := r.inner.List(ctx, prefix, opts)
	r.add(s3store.OpList, prefix, "", err)
	return p, err
}

func (r *recorder) Now(ctx context.Context) (time.Time, error) {
	now, err := r.inner.Now(ctx)
	r.add(s3store.OpHead, "(clock)", "", err)
	return now, err
}

// WatchDates forwards the store's response dates, so the clocks above the
// recorder sync as on the bare store.
func (r *recorder) WatchDates(fn func(s3store.DateSample)) { s3store.WatchDates(r.inner, fn) }
