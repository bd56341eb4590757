package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/ratelimit"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Two workers with a limit of 3 starts per 2 s on type "api" never claim
// more than 3 of its tasks in one window of S3 time between them; every
// task still runs, none fails or uses an attempt waiting, and tasks of
// another type run at once, unslowed by the waiting ones.
func TestRateLimitFleetWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		limit := worker.RateLimit{N: 3, Interval: 2 * time.Second}
		var mu sync.Mutex
		ran := map[string]time.Time{}
		h := func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			ran[tk.ID] = time.Now()
			mu.Unlock()
			return nil, nil
		}
		var events []worker.Event
		for _, id := range []string{"a", "b"} {
			cfg := f.fast(id)
			cfg.Concurrency = 8
			cfg.Dedicated = true
			cfg.RateLimits = map[string]worker.RateLimit{"api": limit}
			cfg.OnEvent = func(e worker.Event) {
				if e.Kind == "rate_limited" {
					mu.Lock()
					events = append(events, e)
					mu.Unlock()
				}
			}
			w, err := worker.New(f.ctx, st, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("api", h)
			w.Handle("job", h)
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan struct{})
			go func() { w.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		p := f.producer(st)
		time.Sleep(time.Second) // both members joined
		var api, jobs []string
		for i := range 20 {
			id, err := p.Submit(f.ctx, "api", map[string]int{"i": i}, producer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			api = append(api, id)
		}
		submitted := time.Now()
		for i := range 6 {
			id, err := p.Submit(f.ctx, "job", map[string]int{"i": i}, producer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, id)
		}
		// 20 starts at 3 per 2 s take at least 6 whole windows.
		time.Sleep(20 * time.Second)
		perWindow := map[int64]int{}
		for _, id := range api {
			got, err := p.Get(f.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != task.Succeeded || got.Attempt != 1 {
				t.Errorf("api task %s: %s after %d attempts, want succeeded at the first", id, got.Status, got.Attempt)
			}
			for _, e := range got.History {
				if e.To == task.Running {
					perWindow[e.At.UnixNano()/int64(limit.Interval)]++
				}
			}
		}
		for k, n := range perWindow {
			if n > limit.N {
				t.Errorf("window starting %v has %d starts of api, over the limit %d", time.Unix(0, k*int64(limit.Interval)).UTC(), n, limit.N)
			}
		}
		if len(perWindow) < 20/limit.N {
			t.Errorf("20 starts in %d windows: the limit cannot have held", len(perWindow))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range jobs {
			if at, ok := ran[id]; !ok || at.Sub(submitted) > time.Second {
				t.Errorf("job %s ran %v after its submit, want at once (ran: %v)", id, at.Sub(submitted), ok)
			}
		}
		held := map[string]int{}
		for _, e := range events {
			held[e.TaskID]++
		}
		if len(held) == 0 {
			t.Error("no rate_limited event")
		}
		for id, n := range held {
			if n > 1 {
				t.Errorf("%d rate_limited events for task %s, want one per task held", n, id)
			}
		}
		c, _, err := ratelimit.Read(f.ctx, st, "api")
		if err != nil || c.Limit != limit.String() || c.Used < 1 {
			t.Errorf("counter %+v, %v", c, err)
		}
	})
}

// What a rate limit costs, on a backlog of 96 tasks at 24 starts per 10 s:
// one GET and one PUT of the counter per claim batch of the type (up to 8
// tasks), and one more GET of each task that waited for a window (read at
// discovery, read again before its claim); nothing while a window stays
// full. (The test polls every 200 ms of virtual time: its LISTs and its
// one GET per poll of the fleet object are the driving loop's.)
func TestRequestsPerTaskRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		kc := &keyCounter{Store: mem.New(), prefix: ratelimit.Prefix}
		st := s3store.NewCounter(kc)
		const n = 96
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		limit := worker.RateLimit{N: 24, Interval: 10 * time.Second}
		cfg := worker.Config{ID: "a", Shards: 1, Concurrency: 32, Dedicated: true, Logger: quiet,
			RateLimits: map[string]worker.RateLimit{"job": limit}}
		w, err := worker.New(ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		if _, err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		reqs := make([]producer.Request, n)
		for i := range reqs {
			reqs[i] = producer.Request{Type: "job", Input: map[string]int{"i": i}}
		}
		for _, r := range p.SubmitBatch(ctx, reqs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		before := st.Counts()
		gets0 := kc.taskGets.Load()
		polls := 0
		for w.Stats().Succeeded < n {
			if polls++; polls > 1000 {
				t.Fatalf("only %d of %d tasks done", w.Stats().Succeeded, n)
			}
			if _, err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			w.Wait()
			time.Sleep(200 * time.Millisecond)
		}
		c := st.Counts().Sub(before)
		per := func(op s3store.Op) float64 { return float64(c.Of(op)) / float64(n) }
		taskGets := kc.taskGets.Load() - gets0
		t.Logf("per task: PUT %.2f GET %.2f LIST %.3f HEAD %.3f (%s) in %d polls", per(s3store.OpPut), per(s3store.OpGet), per(s3store.OpList), per(s3store.OpHead), c, polls)
		t.Logf("of which the counter: GET %d PUT %d (%.3f each per task); the tasks' own GETs: %d (%.2f per task; %d of %d tasks waited for a window)",
			kc.gets.Load(), kc.puts.Load(), float64(kc.puts.Load())/n, taskGets, float64(taskGets)/n, n-limit.N, n)
		// One GET and one PUT of the counter per claim batch (up to 8
		// tasks), and one more per window for the batch that finds it full.
		windows := int64(n / limit.N)
		if max := int64(n/8) + windows; kc.gets.Load() > max || kc.puts.Load() > max {
			t.Errorf("counter: GET %d PUT %d for %d tasks in %d windows, want at most %d each", kc.gets.Load(), kc.puts.Load(), n, windows, max)
		}
		// A task read once at discovery, and once more before its claim if
		// it waited for a window.
		if taskGets > 2*n {
			t.Errorf("%d GETs of task objects for %d tasks, want at most 2 each", taskGets, n)
		}
		if got := per(s3store.OpPut) - float64(kc.puts.Load())/n; got > 2.01 {
			t.Errorf("PUTs per task beyond the counter's = %.2f, want the claim and the commit only", got)
		}
	})
}

// keyCounter counts the GETs and PUTs of keys under prefix.
type keyCounter struct {
	s3store.Store
	prefix               string
	gets, puts, taskGets atomic.Int64
}

func (k *keyCounter) Get(ctx context.Context, key string) (s3store.Object, error) {
	if strings.HasPrefix(key, k.prefix) {
		k.gets.Add(1)
	}
	if strings.HasPrefix(key, "tasks/") {
		k.taskGets.Add(1)
	}
	return k.Store.Get(ctx, key)
}

func (k *keyCounter) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasPrefix(key, k.prefix) {
		k.puts.Add(1)
	}
	return k.Store.Put(ctx, key, body, opts)
}

// A limit that cannot be kept is refused with one clear error.
func TestRateLimitConfigChecked(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		limits map[string]worker.RateLimit
		want   string
	}{
		{map[string]worker.RateLimit{"api": {N: 0, Interval: time.Second}}, "rate limit of api: want at least 1 start"},
		{map[string]worker.RateLimit{"api": {N: 3, Interval: time.Millisecond}}, "rate limit of api: the interval must be at least 1s"},
		{map[string]worker.RateLimit{"bad type!": {N: 3, Interval: time.Second}}, `rate limit of "bad type!"`},
	} {
		_, err := worker.New(ctx, mem.New(), worker.Config{ID: "a", Shards: 1, Logger: quiet, RateLimits: tc.limits})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.limits, err, tc.want)
		}
	}
}

// Tasks that landed behind the scan's cursor (ids dated before keys it has
// already passed: producers' clocks disagree by up to their uncertainty)
// are found by the next scan that starts behind the cursor, which hands
// out a listing's worth. When those are rate-limited tasks held for the
// next window, the slots stay free, and a task of another type found by
// the same scan but left out of its hand-out is claimed by the next poll,
// not a scan lag (5 s) later at the next scan behind the cursor.
func TestALateTaskBehindHeldRateLimitedTasksIsClaimedAtTheNextPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := mem.New()
		cfg := worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Concurrency: 8, Logger: quiet,
			RateLimits: map[string]worker.RateLimit{"api": {N: 1, Interval: time.Hour}}}
		w, err := worker.New(ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil }
		w.Handle("api", h)
		w.Handle("job", h)
		create := func(typ string, at time.Time, i int) string {
			t.Helper()
			id, err := task.NewID(at, strings.NewReader(strings.Repeat(string(rune('a'+i)), 16)))
			if err != nil {
				t.Fatal(err)
			}
			tk, err := task.New(id, 0, task.Spec{Type: typ, AvailableAt: at}, at)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := taskio.Create(ctx, st, clock.System(), tk); err != nil {
				t.Fatal(err)
			}
			return id
		}
		now := time.Now()
		create("job", now.Add(-time.Second), 0)
		// The first poll scans behind its cursor and claims the job: the
		// cursor passes its id.
		if n, err := w.Poll(ctx); n != 1 || err != nil {
			t.Fatalf("first poll claimed %d (%v), want the job", n, err)
		}
		w.Wait()
		// Twelve api tasks and a job land behind the cursor; the job's id
		// sorts after theirs.
		for i := range 12 {
			create("api", now.Add(-3*time.Second), 1+i)
		}
		late := create("job", now.Add(-2*time.Second), 99)
		// A scan lag later, a scan starts behind the cursor: it hands out
		// a listing's worth (9, for 8 free slots), all api tasks: one
		// claimed on the window's token, the others held.
		time.Sleep(5 * time.Second) // the default scan_lag
		if n, err := w.Poll(ctx); n != 1 || err != nil {
			t.Fatalf("the scan behind the cursor claimed %d (%v), want one api task on the window's token", n, err)
		}
		w.Wait()
		// The next poll, within the scan lag, claims the job.
		if n, err := w.Poll(ctx); n != 1 || err != nil {
			t.Fatalf("the next poll claimed %d (%v), want the job left out of the last hand-out: it waits a scan lag for the next scan behind the cursor", n, err)
		}
		w.Wait()
		if got, err := taskio.Load(ctx, st, task.Key(0, late)); err != nil || got.Task.Status != task.Succeeded {
			t.Fatalf("the late job: %+v, %v", got.Task, err)
		}
	})
}
