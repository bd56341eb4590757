package lifecycletest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Run runs the lifecycle suite. newStore must return an empty store each
// time it is called.
func Run(t *testing.T, newStore func(t *testing.T) s3store.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, setup(t, newStore))
		})
	}
}

var echo = func(_ context.Context, t *task.Task) (json.RawMessage, error) { return t.Input, nil }

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"happy path: every task succeeds once with its result", func(t *testing.T, e *env) {
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"echo": echo})
		var ids []string
		for i := 0; i < 12; i++ {
			ids = append(ids, e.submit("echo", map[string]int{"n": i}, producer.Options{}))
		}
		for i, id := range ids {
			got := e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
			if string(got.Result) != fmt.Sprintf(`{"n":%d}`, i) || got.Attempt != 1 {
				t.Fatalf("task %d: result %s attempt %d", i, got.Result, got.Attempt)
			}
			if n := e.executions(id); n != 1 {
				t.Fatalf("task %d ran %d times", i, n)
			}
			h := got.History
			if len(h) != 3 || h[0].To != task.Pending || h[1].To != task.Running || h[2].To != task.Succeeded {
				t.Fatalf("history = %+v", h)
			}
		}
	}},
	{"a failed attempt is retried after its backoff and then succeeds", func(t *testing.T, e *env) {
		var mu sync.Mutex
		failed := map[string]bool{}
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"flaky": func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			defer mu.Unlock()
			if !failed[tk.ID] {
				failed[tk.ID] = true
				return nil, errors.New("transient")
			}
			return json.RawMessage(`"ok"`), nil
		}})
		retry := task.RetryPolicy{InitialDelay: task.Duration(200 * time.Millisecond), MaxDelay: task.Duration(time.Second), Multiplier: 2}
		id := e.submit("flaky", nil, producer.Options{Retry: &retry})
		got := e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		if got.Attempt != 2 || got.LastError != "transient" {
			t.Fatalf("attempt %d last error %q, want 2 and transient", got.Attempt, got.LastError)
		}
	}},
	{"attempts exhausted or a permanent error dead-letter the task", func(t *testing.T, e *env) {
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{
			"broken": func(context.Context, *task.Task) (json.RawMessage, error) { return nil, errors.New("always") },
			"hopeless": func(context.Context, *task.Task) (json.RawMessage, error) {
				return nil, worker.Permanent(errors.New("bad input"))
			},
			"panicking": func(context.Context, *task.Task) (json.RawMessage, error) { panic("boom") },
		})
		retry := task.RetryPolicy{InitialDelay: task.Duration(50 * time.Millisecond), MaxDelay: task.Duration(100 * time.Millisecond), Multiplier: 2}
		broken := e.submit("broken", nil, producer.Options{MaxAttempts: 3, Retry: &retry})
		hopeless := e.submit("hopeless", nil, producer.Options{MaxAttempts: 5})
		panicking := e.submit("panicking", nil, producer.Options{MaxAttempts: 1})
		if got := e.waitStatus(broken, task.Dead, 30*time.Second, nil); got.Attempt != 3 || e.executions(broken) != 3 {
			t.Fatalf("broken: attempt %d executions %d, want 3 and 3", got.Attempt, e.executions(broken))
		}
		if got := e.waitStatus(hopeless, task.Dead, 30*time.Second, nil); got.Attempt != 1 {
			t.Fatalf("permanent error: attempt %d, want dead after 1", got.Attempt)
		}
		if got := e.waitStatus(panicking, task.Dead, 30*time.Second, nil); got.LastError == "" {
			t.Fatal("a panicking handler left no error")
		}
		if err := e.prod.Requeue(e.ctx, hopeless); err != nil {
			t.Fatalf("requeue: %v", err)
		}
		if got := e.waitStatus(hopeless, task.Dead, 30*time.Second, nil); e.executions(hopeless) != 2 || got.Attempt != 1 {
			t.Fatalf("requeued task: executions %d attempt %d, want 2 and 1", e.executions(hopeless), got.Attempt)
		}
	}},
	{"a killed worker's task is re-dispatched after its lease expires, and its late commit is rejected", func(t *testing.T, e *env) {
		faulty := s3store.NewFaults(e.st)
		release := make(chan struct{})
		first := make(chan string, 1)
		slow := func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			// Ignores its context, as a wedged handler would.
			first <- tk.ID
			<-release
			return json.RawMessage(`"from the old worker"`), nil
		}
		old := e.startWorker(e.workerConfig("old"), faulty, map[string]worker.Handler{"job": slow})
		id := e.submit("job", nil, producer.Options{Timeout: time.Second, MaxAttempts: 3})
		select {
		case <-first:
		case <-time.After(30 * time.Second):
			t.Fatal("old worker never started the task")
		}
		// The old worker is cut off from the bucket: it can neither renew
		// nor commit, as if it had crashed.
		faulty.Inject(s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrInjected503})
		faulty.Inject(s3store.Fault{Op: s3store.OpGet, Err: s3store.ErrInjected503})
		faulty.Inject(s3store.Fault{Op: s3store.OpList, Err: s3store.ErrInjected503})
		mon := e.monitor(monitor.Config{})
		e.startWorker(e.workerConfig("new"), nil, map[string]worker.Handler{"job": echo})
		got := e.waitStatus(id, task.Succeeded, 60*time.Second, nil)
		if got.Attempt != 2 || got.Claim != nil {
			t.Fatalf("re-dispatched task: attempt %d, want 2", got.Attempt)
		}
		if mon.Stats().Redispatched != 1 {
			t.Fatalf("monitor re-dispatched %d tasks, want 1", mon.Stats().Redispatched)
		}
		faulty.Clear()
		close(release)
		e.waitFor("the old worker's commit to be rejected", 30*time.Second, nil, func() bool { return old.Stats().Rejected == 1 })
		if final := e.get(id); final.Status != task.Succeeded || final.Result != nil && string(final.Result) == `"from the old worker"` {
			t.Fatalf("the old worker's late commit overwrote the outcome: %+v", final)
		}
		if n := e.executions(id); n != 2 {
			t.Fatalf("executions = %d, want 2 (one duplicate, counted)", n)
		}
	}},
	{"a retried task whose ready entry was lost is found again by the monitor's repair", func(t *testing.T, e *env) {
		faulty := s3store.NewFaults(e.st)
		// Every ready pointer this worker writes is lost.
		faulty.Inject(s3store.Fault{Op: s3store.OpPut, KeySuffix: ".ready", Err: s3store.ErrInjected503})
		var mu sync.Mutex
		tries := map[string]int{}
		cfg := e.workerConfig("w1")
		cfg.ScanLag = time.Millisecond // scans forget a task as soon as a later one is seen
		e.startWorker(cfg, faulty, map[string]worker.Handler{"echo": echo, "flaky": func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			defer mu.Unlock()
			tries[tk.ID]++
			if tries[tk.ID] == 1 {
				return nil, errors.New("first attempt fails")
			}
			return nil, nil
		}})
		retry := task.RetryPolicy{InitialDelay: task.Duration(time.Second), MaxDelay: task.Duration(time.Second), Multiplier: 1}
		// No shard key: with one member both tasks go to its one active
		// shard, so no pointer is written for them at submit.
		id := e.submit("flaky", nil, producer.Options{Retry: &retry})
		e.waitFor("the first attempt to fail", 30*time.Second, nil, func() bool { return e.get(id).Attempt == 1 && e.get(id).Status == task.Pending })
		// A later task moves the scan cursor past the retried one.
		e.waitStatus(e.submit("echo", nil, producer.Options{}), task.Succeeded, 30*time.Second, nil)
		mon := e.monitor(monitor.Config{RepairAfter: 500 * time.Millisecond})
		got := e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		if got.Attempt != 2 || mon.Stats().Repaired < 1 {
			t.Fatalf("attempt %d, repaired %d: want the monitor to have announced the retry", got.Attempt, mon.Stats().Repaired)
		}
	}},
	{"a commit whose response is lost is not mistaken for a lost lease", func(t *testing.T, e *env) {
		faulty := s3store.NewFaults(e.st)
		w := e.startWorker(e.workerConfig("w1"), faulty, map[string]worker.Handler{"echo": func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			// The commit's PUT will land, and its response will be lost.
			faulty.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrInjected503, AfterWrite: true, Times: 1})
			return json.RawMessage(`"ok"`), nil
		}})
		id := e.submit("echo", nil, producer.Options{})
		got := e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		e.waitFor("the worker to count the success", 10*time.Second, nil, func() bool { return w.Stats().Succeeded == 1 })
		if st := w.Stats(); st.Rejected != 0 || st.LeaseLost != 0 || got.Attempt != 1 {
			t.Fatalf("stats %+v attempt %d: a lost response must not count as a rejected outcome", st, got.Attempt)
		}
	}},
	{"a result too large to store dead-letters the task at once", func(t *testing.T, e *env) {
		cfg := e.workerConfig("w1")
		cfg.MaxResultBytes = 1 << 20
		e.startWorker(cfg, nil, map[string]worker.Handler{"big": func(context.Context, *task.Task) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`), nil
		}})
		id := e.submit("big", nil, producer.Options{MaxAttempts: 3})
		got := e.waitStatus(id, task.Dead, 30*time.Second, nil)
		if got.Attempt != 1 || !strings.Contains(got.LastError, "result") {
			t.Fatalf("attempt %d last error %q", got.Attempt, got.LastError)
		}
	}},
	{"a result over the inline limit is stored apart and read back", func(t *testing.T, e *env) {
		want := json.RawMessage(`"` + strings.Repeat("x", task.MaxResultBytes) + `"`)
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"big": func(context.Context, *task.Task) (json.RawMessage, error) {
			return want, nil
		}})
		id := e.submit("big", nil, producer.Options{MaxAttempts: 1})
		e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		got, err := e.prod.Get(e.ctx, id)
		if err != nil || got.ResultRef == nil || string(got.Result) != string(want) {
			t.Fatalf("result: ref %+v, %d bytes, %v", got.ResultRef, len(got.Result), err)
		}
	}},
	{"a task with a short lease and the default margin is renewed in time", func(t *testing.T, e *env) {
		cfg := e.workerConfig("w1")
		cfg.LeaseMargin = 2 * time.Second
		cfg.MemberTTL = 30 * time.Second
		w := e.startWorker(cfg, nil, map[string]worker.Handler{"sleep": func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			select {
			case <-time.After(2 * time.Second): // the work itself
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}})
		id := e.submit("sleep", nil, producer.Options{Timeout: 3 * time.Second, MaxAttempts: 1})
		e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		if w.Stats().LeaseLost != 0 {
			t.Fatal("the worker gave up a lease it could have renewed")
		}
	}},
	{"a long task's lease is renewed and it is never re-dispatched", func(t *testing.T, e *env) {
		// The work runs 5s of its 6s timeout (its handler's context ends
		// at the timeout). With a 2s margin the worker would give the
		// lease up 4s after its claim were it not renewed: it is renewed
		// every third of the lease (2s), twice before the work ends.
		cfg := e.workerConfig("w1")
		cfg.LeaseMargin = 2 * time.Second
		cfg.MemberTTL = 30 * time.Second
		mon := e.monitor(monitor.Config{})
		w := e.startWorker(cfg, nil, map[string]worker.Handler{"long": func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			select {
			case <-time.After(5 * time.Second): // the work itself
				return json.RawMessage(`"done"`), nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}})
		id := e.submit("long", nil, producer.Options{Timeout: 6 * time.Second})
		got := e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		if got.Attempt != 1 || mon.Stats().Redispatched != 0 || w.Stats().LeaseLost != 0 {
			t.Fatalf("attempt %d, re-dispatched %d, leases lost %d: want 1, 0, 0", got.Attempt, mon.Stats().Redispatched, w.Stats().LeaseLost)
		}
		if n := w.Stats().Renewed; n < 2 {
			t.Fatalf("%d lease renewals, want at least 2 (the lease would have been given up 4s after the claim)", n)
		}
		if n := e.executions(id); n != 1 {
			t.Fatalf("the long task ran %d times, want once", n)
		}
	}},
	{"cancel: a pending task at once, a running one through its handler's context", func(t *testing.T, e *env) {
		pending := e.submit("never-handled-here", nil, producer.Options{})
		if requested, err := e.prod.Cancel(e.ctx, pending); err != nil || requested {
			t.Fatalf("cancel pending: requested=%v err=%v", requested, err)
		}
		if got := e.get(pending); got.Status != task.Canceled {
			t.Fatalf("pending task after cancel: %s", got.Status)
		}
		causes := make(chan error, 1)
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"wait": func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		}})
		// A timeout long next to the renewals (every third of it) that
		// bring the cancel request: the handler's context would end at
		// the timeout.
		running := e.submit("wait", nil, producer.Options{Timeout: 10 * time.Second})
		e.waitStarted(running, 30*time.Second)
		if requested, err := e.prod.Cancel(e.ctx, running); err != nil || !requested {
			t.Fatalf("cancel running: requested=%v err=%v", requested, err)
		}
		select {
		case cause := <-causes:
			if !errors.Is(cause, worker.ErrCanceled) {
				t.Fatalf("handler context canceled with %v, want ErrCanceled", cause)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("handler context not canceled after the next renewal")
		}
		e.waitStatus(running, task.Canceled, 30*time.Second, nil)
		if _, err := e.prod.Cancel(e.ctx, running); !errors.Is(err, task.ErrTerminal) {
			t.Fatalf("cancel of a canceled task: %v, want ErrTerminal", err)
		}
	}},
	{"racing submits with one idempotency key create one task", func(t *testing.T, e *env) {
		const n = 8
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range ids {
			p, err := producer.New(e.ctx, e.st, producer.Config{Logger: e.log})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The same intent from each: a key reused with another input is a conflict.
				id, err := p.Submit(e.ctx, "echo", map[string]int{"order": 42}, producer.Options{IdempotencyKey: "order-42"})
				if err != nil {
					t.Errorf("submit %d: %v", i, err)
				}
				ids[i] = id
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("ids differ: %v", ids)
			}
		}
		total := 0
		for shard := 0; shard < 4; shard++ {
			page, err := e.st.List(e.ctx, fmt.Sprintf("tasks/%03d/", shard), s3store.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			total += len(page.Objects)
		}
		if total != 1 {
			t.Fatalf("%d task objects after racing submits, want 1", total)
		}
	}},
	{"a type no worker handles stays pending and is never claimed", func(t *testing.T, e *env) {
		e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"echo": echo})
		other := e.submit("other", nil, producer.Options{ShardKey: "k"})
		// Markers in the same shard, each submitted after the last one
		// succeeded: the worker has listed the shard at least three times
		// since the other task landed, and left it alone each time.
		for range 3 {
			marker := e.submit("echo", nil, producer.Options{ShardKey: "k"})
			e.waitStatus(marker, task.Succeeded, 30*time.Second, nil)
		}
		if got := e.get(other); got.Status != task.Pending || got.Attempt != 0 {
			t.Fatalf("unhandled task: %s attempt %d, want pending 0", got.Status, got.Attempt)
		}
	}},
	{"a corrupt task object is reported and skipped without blocking its shard", func(t *testing.T, e *env) {
		id := e.submit("echo", nil, producer.Options{ShardKey: "k"})
		shard := task.ShardFor(id, 4)
		badID, _ := task.NewID(time.Now().Add(-time.Second), zero{})
		if _, err := e.st.Put(e.ctx, task.Key(shard, badID), []byte("{not json}") /* even size: looks unfinished, so the monitor reads it soon rather than at retention */, s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		after := e.submit("echo", nil, producer.Options{ShardKey: "k"})
		w := e.startWorker(e.workerConfig("w1"), nil, map[string]worker.Handler{"echo": echo})
		e.waitStatus(id, task.Succeeded, 30*time.Second, nil)
		e.waitStatus(after, task.Succeeded, 30*time.Second, nil)
		// The tasks may arrive by their ready pointers (no member served
		// the shard when they were submitted) before the scan of their
		// shard reaches the corrupt key, so the report can come after them.
		e.waitFor("the worker to report the corrupt object", 10*time.Second, nil, func() bool { return w.Stats().Corrupt >= 1 })
		mon := e.monitor(monitor.Config{})
		e.waitFor("the monitor to report the corrupt object", 10*time.Second, nil, func() bool { return mon.Stats().Corrupt == 1 })
	}},
	{"several monitors re-dispatch each expired task exactly once", func(t *testing.T, e *env) {
		faulty := s3store.NewFaults(e.st)
		started := make(chan struct{}, 10)
		release := make(chan struct{})
		e.startWorker(e.workerConfig("doomed"), faulty, map[string]worker.Handler{"job": func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			// Wedged until the test ends, its context ignored: its
			// context ends at the 1s timeout, and an outcome written
			// before the worker is cut off would leave the monitors
			// nothing to re-dispatch.
			started <- struct{}{}
			<-release
			return nil, context.Cause(ctx)
		}})
		t.Cleanup(func() { close(release) }) // before the worker's cleanup: it waits for its handlers
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, e.submit("job", nil, producer.Options{Timeout: time.Second, MaxAttempts: 5}))
		}
		for range ids {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("tasks not started")
			}
		}
		faulty.Inject(s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrInjected503})
		faulty.Inject(s3store.Fault{Op: s3store.OpList, Err: s3store.ErrInjected503})
		faulty.Inject(s3store.Fault{Op: s3store.OpGet, Err: s3store.ErrInjected503})
		mons := []*monitor.Monitor{e.monitor(monitor.Config{}), e.monitor(monitor.Config{}), e.monitor(monitor.Config{})}
		for _, id := range ids {
			e.waitStatus(id, task.Pending, 30*time.Second, nil)
		}
		e.waitTicks(3, mons...)
		total := 0
		for _, m := range mons {
			total += m.Stats().Redispatched
		}
		if total != len(ids) {
			t.Fatalf("monitors re-dispatched %d times for %d tasks", total, len(ids))
		}
		for _, id := range ids {
			got := e.get(id)
			expired := 0
			for _, h := range got.History {
				if h.From == task.Running && h.To == task.Pending {
					expired++
				}
			}
			if got.Attempt != 1 || expired != 1 {
				t.Fatalf("task %s: attempt %d, %d expiries in history, want 1 and 1", id, got.Attempt, expired)
			}
		}
	}},
	{"a worker whose wall clock is 10 minutes off decides exactly as the others", func(t *testing.T, e *env) {
		for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
			cfg := e.workerConfig(fmt.Sprintf("skewed%+v", skew))
			cfg.Clock = clock.New(e.st, clock.Config{Local: clock.LocalFunc(func() time.Time { return time.Now().Add(skew) })})
			type start struct {
				id string
				at time.Time
			}
			starts := make(chan start, 10)
			srvClock := clock.New(e.st, clock.Config{})
			w := e.startWorker(cfg, nil, map[string]worker.Handler{"at" + skew.String(): func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
				iv, _ := srvClock.Now(ctx)
				starts <- start{tk.ID, iv.Latest}
				return nil, nil
			}})
			now := e.submit("at"+skew.String(), nil, producer.Options{})
			delayed := e.submit("at"+skew.String(), nil, producer.Options{Delay: 2 * time.Second, Timeout: time.Second})
			e.waitStatus(now, task.Succeeded, 30*time.Second, nil)
			d := e.waitStatus(delayed, task.Succeeded, 30*time.Second, nil)
			for i := 0; i < 2; i++ {
				s := <-starts
				if s.id == delayed && s.at.Before(d.AvailableAt) {
					t.Fatalf("skew %v: delayed task started at %v, before it was due at %v", skew, s.at, d.AvailableAt)
				}
			}
			if w.Stats().LeaseLost != 0 {
				t.Fatalf("skew %v: leases lost", skew)
			}
		}
	}},
	{"shutdown drains in-flight work and hands back what does not finish", func(t *testing.T, e *env) {
		release := make(chan struct{})
		cfg := e.workerConfig("w1")
		cfg.ShutdownGrace = 300 * time.Millisecond
		w, err := worker.New(e.ctx, e.st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("quick", e.counting(func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			<-release
			return nil, nil
		}))
		w.Handle("stuck", e.counting(func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}))
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		quick := e.submit("quick", nil, producer.Options{Timeout: 10 * time.Second})
		stuck := e.submit("stuck", nil, producer.Options{Timeout: 10 * time.Second})
		e.waitStarted(quick, 30*time.Second)
		e.waitFor("both tasks running", 30*time.Second, nil, func() bool { return e.executions(stuck) == 1 })
		cancel()
		close(release)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after shutdown")
		}
		if got := e.get(quick); got.Status != task.Succeeded {
			t.Fatalf("in-flight task not drained: %s", got.Status)
		}
		if got := e.get(stuck); got.Status != task.Pending || got.Attempt != 0 {
			t.Fatalf("unfinished task not handed back: %s attempt %d", got.Status, got.Attempt)
		}
	}},
}

type zero struct{}

func (zero) Read(p []byte) (int, error) { clear(p); return len(p), nil }
