package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// zeros is a seeded source that always draws zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Every random draw comes from Config.Rand: the default id and claim ids
// are the source's bytes, so a seeded run is reproducible.
func TestRandIsTheSourceOfIDsAndClaims(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Rand: zeros{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.ID(), "-000000") {
		t.Fatalf("default worker id %q did not come from Rand", w.ID())
	}
	var claimID string
	w.Handle("job", func(_ context.Context, t *task.Task) (json.RawMessage, error) {
		claimID = t.Claim.ID
		return nil, nil
	})
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "job", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Poll(ctx); n != 1 || err != nil {
		t.Fatalf("poll claimed %d: %v", n, err)
	}
	w.Wait()
	if tk, err := p.Get(ctx, id); err != nil || tk.Status != task.Succeeded {
		t.Fatalf("task: %+v %v", tk, err)
	}
	if claimID != strings.Repeat("0", 24) {
		t.Fatalf("claim id %q did not come from Rand", claimID)
	}
}

// A claim whose PUT landed but whose response was lost, so that the store's
// retry met its own write as a 412, is the worker's claim: the task runs at
// once instead of waiting, running under a claim nobody runs, until its
// lease expires and burns the attempt (with max_attempts 1: dead, never run).
func TestLostClaimResponseStillRunsTheTask(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "job", nil, producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { ran++; return nil, nil })
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1})
	if n, err := w.Poll(ctx); n != 1 || err != nil {
		t.Fatalf("poll claimed %d (%v), want the task whose claim response was lost", n, err)
	}
	w.Wait()
	tk, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Status != task.Succeeded || ran != 1 || tk.Attempt != 1 {
		t.Fatalf("task %s after %d runs (attempt %d), want succeeded after one run", tk.Status, ran, tk.Attempt)
	}
}

// A task object whose every read fails with something other than
// not-found or corrupt (a 403 on that one object) is reported and skipped
// after a few tries; it never pins the shard's scan, which keeps delivering
// the tasks submitted after it, and past eight pages of history, at one
// LIST a poll.
func TestUnreadableObjectDoesNotStarveTheShard(t *testing.T) {
	ctx := context.Background()
	faults := s3store.NewFaults(mem.New())
	st := s3store.NewCounter(faults)
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	bad, _ := task.NewID(now.Add(-time.Minute), strings.NewReader(strings.Repeat("b", 16)))
	badKey := task.Key(0, bad)
	st.Put(ctx, badKey, []byte("{}\n\n"), s3store.PutOptions{})
	faults.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: badKey, Err: errors.New("403 access denied")})
	// More finished tasks after it than a scan's eight pages (1000 keys each).
	for i := 0; i < 8*s3store.DefaultMaxKeys+10; i++ {
		id, _ := task.NewID(now.Add(-50*time.Second+time.Duration(i)*time.Millisecond), strings.NewReader(strings.Repeat("f", 16)))
		st.Put(ctx, task.Key(0, id), []byte("{}\n"), s3store.PutOptions{})
	}
	var corrupt atomic.Int64
	w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, ScanLag: time.Millisecond, Logger: quiet,
		OnEvent: func(e worker.Event) {
			if e.Kind == "corrupt" {
				corrupt.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 10; i++ {
		id, err := p.Submit(ctx, "job", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			w.Poll(ctx)
			w.Wait()
			if tk, _ := p.Get(ctx, id); tk.Status == task.Succeeded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %d submitted after an unreadable object was never run (corrupt reports: %d)", i, corrupt.Load())
			}
		}
	}
	if corrupt.Load() != 1 {
		t.Fatalf("the unreadable object was reported %d times, want once", corrupt.Load())
	}
	before := st.Counts().Of(s3store.OpList)
	for i := 0; i < 5; i++ {
		w.Poll(ctx)
	}
	if lists := st.Counts().Of(s3store.OpList) - before; lists > 5 {
		t.Fatalf("5 idle polls cost %d LISTs", lists)
	}
}

// A member whose slots all filled without leaving work behind, and whose
// handlers then keep running while a backlog arrives, still sees the
// backlog (it peeks while full) and asks for help: a standby joins.
func TestAFullMemberSeesALaterBacklogAndAsksForHelp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := s3store.NewCounter(mem.New())
		f := newFleet(t, st, 4)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		started := make(chan string, 100)
		block := func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			started <- tk.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}
		w0 := f.start(f.fast("first"), nil, block) // 2 slots
		waitFor(t, "the first worker to join", 10*time.Second, func() bool { m, _ := w0.Member(); return m })
		p := f.producer(st)
		for i := 0; i < 2; i++ {
			f.submit(p)
		}
		for i := 0; i < 2; i++ {
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the member did not fill its slots")
			}
		}
		w1 := f.start(f.fast("standby"), nil, block)
		for i := 0; i < 6; i++ {
			f.submit(p)
		}
		waitFor(t, "the standby to join the full member", 10*time.Second, func() bool { m, _ := w1.Member(); return m })
	})
}

// Once Run has returned, no lease renewal is sent: a handler that ignores
// its shutdown keeps running in the host process, but its lease expires so
// the monitor can re-dispatch the task.
func TestNoRenewalAfterRunReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		faults := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, faults, producer.Config{Shards: 1, LeaseMargin: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var afterRun atomic.Bool
		var writes atomic.Int64
		faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: task.Key(0, id), Hook: func(string) {
			if afterRun.Load() {
				writes.Add(1)
			}
		}})
		w, err := worker.New(ctx, faults, worker.Config{Shards: 1, OwnShards: []int{0}, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
			LeaseMargin: 100 * time.Millisecond, ShutdownGrace: 50 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) {
			close(started)
			<-release // ignores its context
			return nil, nil
		})
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { w.Run(runCtx); close(ran) }()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the task was not claimed")
		}
		stop()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return while a handler ignored its shutdown")
		}
		afterRun.Store(true)
		tk, err := p.Get(ctx, id)
		if err != nil || tk.Status != task.Running {
			t.Fatalf("task after Run returned: %+v %v", tk, err)
		}
		// Wait past the lease's expiry, by several renewal intervals.
		expires := tk.Claim.ExpiresAt
		waitFor(t, "the lease to expire", 10*time.Second, func() bool { return time.Now().After(expires.Add(500 * time.Millisecond)) })
		if n := writes.Load(); n > 0 {
			t.Fatalf("%d writes to the task after Run returned, want none", n)
		}
		if now, _ := p.Get(ctx, id); now.Version != tk.Version {
			t.Fatalf("the task was renewed after Run returned: version %d -> %d", tk.Version, now.Version)
		}
	})
}

// A worker that stops (SIGTERM ends Run's context) leaves the fleet at
// once, even as its last member, so a worker started right after (a
// restart) joins and claims at once instead of idling until the old entry
// expires (member_ttl + lease_margin, 32 s by default).
func TestARestartedWorkerJoinsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		slow := func(id string) worker.Config {
			cfg := f.fast(id)
			cfg.MemberTTL = 30 * time.Second // the old entry would outlive the test's wait
			return cfg
		}
		old := f.start(slow("old"), nil, nil)
		waitFor(t, "the first worker to join", 10*time.Second, func() bool { m, _ := old.Member(); return m })
		f.stop("old")
		fl, _, err := shards.ReadFleet(f.ctx, st)
		if err != nil || len(fl.Members) != 0 {
			t.Fatalf("fleet after the last member stopped: %+v %v; want no members", fl, err)
		}
		ran := make(chan string, 1)
		w := f.start(slow("new"), nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			ran <- tk.ID
			return nil, nil
		})
		p := f.producer(st)
		id := f.submit(p)
		expectRun(t, ran, id, 5*time.Second, func() string {
			m, _ := w.Member()
			return fmt.Sprintf("the restarted worker did not run a task within 5s (member: %v)", m)
		})
	})
}

// lineCounter is a slog handler that counts records.
type lineCounter struct{ n *atomic.Int64 }

func (h lineCounter) Enabled(context.Context, slog.Level) bool  { return true }
func (h lineCounter) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h lineCounter) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h lineCounter) WithGroup(string) slog.Handler             { return h }

// A store that fails every request (the directory removed under a running
// worker, an outage) costs a few requests and log lines a second while the
// worker backs off, not a hot loop (before: ~100,000 warnings in 4 s).
func TestAFailingStoreIsRetriedWithBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		faults := s3store.NewFaults(mem.New())
		st := s3store.NewCounter(faults)
		f := newFleet(t, st, 2)
		var lines atomic.Int64
		cfg := f.fast("w")
		cfg.Logger = slog.New(lineCounter{&lines})
		w := f.start(cfg, nil, nil)
		waitFor(t, "the worker to join", 10*time.Second, func() bool { m, _ := w.Member(); return m })
		for _, op := range s3store.Ops() {
			faults.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
		}
		before, logged := st.Counts().Total(), lines.Load()
		// Past a renewal, the entry's expiry, and several retries.
		const window = 2 * time.Second
		time.Sleep(window) // a rate over a fixed window, not a wait for work
		reqs, logs := st.Counts().Total()-before, lines.Load()-logged
		t.Logf("in %v of failures: %d requests, %d log lines (%s)", window, reqs, logs, st.Counts())
		// MemberTTL 600ms, PollMax 50ms: polls at most every 50ms, fleet
		// requests backing off from 10ms to 100ms.
		if reqs > 150 || logs > 100 {
			t.Fatalf("%d requests and %d log lines in %v of a failing store: a hot loop", reqs, logs, window)
		}
	})
}

// An error that will not heal (s3store.ErrUnusable: the bucket or root
// gone, access denied) ends Run with that error, after handing back what
// it can: here LISTs are denied, and the running task is released.
func TestAnUnusableStoreEndsRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      []s3store.Op
		handBack bool // a task is running, and handed back
	}{
		{"every request refused", s3store.Ops(), false},
		{"listing refused, the running task handed back", []s3store.Op{s3store.OpList}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				faults := s3store.NewFaults(mem.New())
				p, err := producer.New(ctx, faults, producer.Config{Shards: 1})
				if err != nil {
					t.Fatal(err)
				}
				var id string
				if tc.handBack {
					if id, err = p.Submit(ctx, "job", nil, producer.Options{}); err != nil {
						t.Fatal(err)
					}
				}
				w, err := worker.New(ctx, faults, worker.Config{Shards: 1, Dedicated: true, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
					LeaseMargin: 100 * time.Millisecond, MemberTTL: 600 * time.Millisecond, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				started := make(chan struct{})
				w.Handle("job", func(hctx context.Context, _ *task.Task) (json.RawMessage, error) {
					close(started)
					<-hctx.Done()
					return nil, context.Cause(hctx)
				})
				ran := make(chan error, 1)
				go func() { ran <- w.Run(ctx) }()
				if tc.handBack {
					select {
					case <-started:
					case <-ctx.Done():
						t.Fatal("the task was not claimed")
					}
				} else {
					waitFor(t, "the worker to join", 10*time.Second, func() bool { m, _ := w.Member(); return m })
				}
				gone := fmt.Errorf("%w: access denied", s3store.ErrUnusable)
				for _, op := range tc.ops {
					faults.Inject(s3store.Fault{Op: op, Err: gone})
				}
				select {
				case err := <-ran:
					if !errors.Is(err, s3store.ErrUnusable) {
						t.Fatalf("Run returned %v, want the unusable store's error", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Run did not end on an unusable store")
				}
				if tc.handBack {
					if tk, err := p.Get(ctx, id); err != nil || tk.Status != task.Pending {
						t.Fatalf("task after Run ended: %+v %v, want it handed back (pending)", tk, err)
					}
				}
			})
		})
	}
}

// A worker that claims a task through a ready pointer leaves the pointer
// for the monitor when the task's id is older than shards.FloorLag (the
// task may lie below the monitor's sweep floor, which the monitor lowers
// before deleting the pointer); its own scan settles the pointer and does
// not read it again. A pointer to a younger task is deleted as before.
func TestAPointerToAnOldTaskIsLeftForTheMonitor(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  time.Duration
		kept bool
	}{
		{"young task: pointer deleted", 10 * time.Second, false},
		{"task older than FloorLag: pointer kept", 2 * shards.FloorLag, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := s3store.NewCounter(mem.New())
			w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, ScanLookback: time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
			now := time.Now()
			id, _ := task.NewID(now.Add(-tc.age), strings.NewReader(strings.Repeat("o", 16)))
			tk, err := task.New(id, 0, task.Spec{Type: "job"}, now.Add(-tc.age))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := task.Marshal(tk)
			for len(body)%4 != 0 {
				body = append(body, '\n') // pending by size
			}
			st.Put(ctx, tk.Key(), body, s3store.PutOptions{})
			// Requeued, or recreated: behind every cursor, announced.
			if err := shards.Announce(ctx, st, tk, now, -1); err != nil {
				t.Fatal(err)
			}
			pointer := shards.PointerKey(0, 0, id, now)
			if n, err := w.Poll(ctx); n != 1 || err != nil {
				t.Fatalf("poll claimed %d (%v), want the task through its pointer", n, err)
			}
			w.Wait()
			_, err = st.Head(ctx, pointer)
			if kept := err == nil; kept != tc.kept {
				t.Fatalf("pointer kept = %v (%v), want %v", kept, err, tc.kept)
			}
			before := st.Counts().Of(s3store.OpGet)
			if n, err := w.Poll(ctx); n != 0 || err != nil {
				t.Fatalf("second poll claimed %d (%v)", n, err)
			}
			if gets := st.Counts().Of(s3store.OpGet) - before; gets != 0 {
				t.Fatalf("the scan read the task again through its kept pointer (%d GETs)", gets)
			}
		})
	}
}

// The worker paces its polls by Config.Local, not by the host's clock: on
// a manual clock, Run polls its shard once, then not again however long the
// host waits, until the manual clock has moved on by the poll interval.
func TestTheLocalClockPacesPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := s3store.NewCounter(mem.New())
		local := clock.NewManual(time.Now())
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, PollMin: time.Second, PollMax: time.Second,
			Local: local, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		ran := make(chan struct{})
		go func() { w.Run(ctx); close(ran) }()
		lists := func() int64 { synctest.Wait(); return st.Counts().Of(s3store.OpList) }
		first := lists()
		if first == 0 {
			t.Fatal("Run did not poll at once")
		}
		time.Sleep(time.Minute) // host time only
		if n := lists(); n != first {
			t.Fatalf("%d LISTs after a minute of host time with the local clock stopped, want %d", n, first)
		}
		local.Advance(time.Second)
		if n := lists(); n <= first {
			t.Fatalf("no poll after the local clock moved on by the poll interval (%d LISTs)", n)
		}
		cancel()
		<-ran
	})
}

// An outcome whose PUT failed, whose read-back said it had not landed, and
// whose re-read before the next try failed too, is tried again like a
// failed write: it lands, instead of leaving the task running under a
// lease nobody renews until the monitor re-dispatches it (sim seed 510504).
func TestACommitWhoseReReadFailsIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			// The commit's PUT fails without landing; its read-back
			// succeeds; the next read of the task fails.
			key := tk.Key()
			st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: key, Err: s3store.ErrInjected503, Times: 1})
			st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: key, Times: 1, Hook: func(string) {
				st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: key, Err: s3store.ErrInjected500, Times: 1})
			}})
			return nil, nil
		})
		if n, err := w.Poll(ctx); n != 1 || err != nil {
			t.Fatalf("poll claimed %d: %v", n, err)
		}
		w.Wait()
		tk, err := p.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != task.Succeeded {
			t.Fatalf("task %s after its commit met a failed PUT and a failed re-read, want succeeded", tk.Status)
		}
	})
}
