package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// A paused type is not claimed by any worker of the fleet once their pause
// check has run; the other types run on; the paused tasks stay pending with
// no attempt used, and run once the type is resumed. Under direct dispatch
// too, where the paused tasks arrive in the workers' inboxes. And a
// whole-queue pause stops every claim until the resume.
func TestPauseStopsClaimsFleetWideUntilResume(t *testing.T) {
	for _, mode := range []shards.DispatchMode{shards.DispatchShared, shards.DispatchDirect} {
		t.Run(string(mode)+"/type", func(t *testing.T) { testPause(t, mode, "mail") })
		t.Run(string(mode)+"/queue", func(t *testing.T) { testPause(t, mode) })
	}
}

func testPause(t *testing.T, mode shards.DispatchMode, types ...string) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		const interval = 500 * time.Millisecond
		var mu sync.Mutex
		ran := map[string]time.Time{}
		h := func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			ran[tk.ID] = time.Now()
			mu.Unlock()
			return nil, nil
		}
		for _, id := range []string{"a", "b"} {
			cfg := f.fast(id)
			if mode == shards.DispatchDirect {
				cfg = f.directWorker(id)
			}
			cfg.PauseCheckInterval = interval
			w, err := worker.New(f.ctx, st, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("job", h)
			w.Handle("mail", h)
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan struct{})
			go func() { w.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		var p *producer.Producer
		if mode == shards.DispatchDirect {
			waitLive(t, st, 2)
			p = f.directProducer(st)
		} else {
			p = f.producer(st)
		}
		if _, err := pause.Change(f.ctx, st, time.Now(), "test", "", pause.Pausing(types...)); err != nil {
			t.Fatal(err)
		}
		pausedAt := time.Now()
		time.Sleep(interval) // virtual time: every worker has read the pause object since
		submit := func(typ string) (ids []string) {
			for range 6 {
				id, err := p.Submit(f.ctx, typ, nil, producer.Options{})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			return ids
		}
		mail, jobs := submit("mail"), submit("job")
		if len(types) > 0 {
			for _, id := range jobs {
				waitStatus(t, p, id, task.Succeeded)
			}
		}
		time.Sleep(5 * time.Second) // many polls, in virtual time
		paused := mail
		if len(types) == 0 {
			paused = append(paused, jobs...)
		}
		for _, id := range paused {
			tk, err := p.Get(f.ctx, id)
			if err != nil || tk.Status != task.Pending || tk.Attempt != 0 {
				t.Fatalf("paused task %s: %+v (%v), want pending with no attempt used", id, tk, err)
			}
		}
		mu.Lock()
		for id, at := range ran {
			if at.After(pausedAt.Add(interval)) && contains(paused, id) {
				t.Errorf("paused task %s ran at %v, after the pause and its check interval", id, at)
			}
		}
		mu.Unlock()
		if _, err := pause.Change(f.ctx, st, time.Now(), "test", "", pause.Resuming()); err != nil {
			t.Fatal(err)
		}
		for _, id := range paused {
			waitStatus(t, p, id, task.Succeeded)
		}
		for _, id := range paused {
			if tk, _ := p.Get(f.ctx, id); tk.Attempt != 1 {
				t.Errorf("resumed task %s ran at attempt %d, want 1", id, tk.Attempt)
			}
		}
	})
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// A direct-dispatch worker whose every slot is busy when the whole queue
// is paused still waits between steps: it hands nothing on while paused,
// and must not wait for a hand-on look that never comes (the simulator's
// seed 220125 hung in a busy loop: every wait was 0).
func TestAFullDirectWorkerPausedDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 1)
		cfg := f.directWorker("a")
		cfg.Concurrency, cfg.PauseCheckInterval = 1, 100*time.Millisecond
		w, err := worker.New(f.ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { <-release; return nil, nil })
		w.StepInbox(f.ctx) // the lease names the type
		waitLive(t, st, 1)
		f.submit(f.directProducer(st))
		if n, err := w.Poll(f.ctx); n != 1 || err != nil {
			t.Fatalf("poll claimed %d (%v), want the task: every slot busy", n, err)
		}
		w.StepInbox(f.ctx) // full: a look for work to hand on
		if _, err := pause.Change(f.ctx, st, time.Now(), "test", "", pause.Pausing()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(cfg.PollMax + cfg.PauseCheckInterval)
		w.Poll(f.ctx) // reads the pause
		if d := w.StepInbox(f.ctx); d <= 0 {
			t.Errorf("a full worker of a paused queue steps again in %v, want a wait", d)
		}
		close(release)
		w.Wait()
	})
}

// A handler that crashes under crash_policy requeue after its type was
// paused is not claimed again: its failed attempt is recorded, the task is
// pending again (no claim, no attempt burned during the pause), and it runs
// once the type is resumed.
func TestCrashRequeueOfAPausedTypeWaitsForTheResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const interval = 100 * time.Millisecond
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, CrashPolicy: worker.CrashRequeue, PauseCheckInterval: interval}, "mail")
		var mu sync.Mutex
		var attempts []int
		gate := make(chan struct{})
		s.w.Handle("mail", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			attempts = append(attempts, tk.Attempt)
			mu.Unlock()
			if tk.Attempt == 1 {
				<-gate
				panic("boom")
			}
			return nil, nil
		})
		if n := s.poll(t); n != 1 {
			t.Fatalf("claimed %d, want the task", n)
		}
		if _, err := pause.Change(ctx, s.st, time.Now(), "test", "", pause.Pausing("mail")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval)
		s.poll(t) // reads the pause
		close(gate)
		synctest.Wait() // the handler crashed, and its write landed
		for range 5 {
			time.Sleep(interval)
			s.poll(t)
		}
		mu.Lock()
		ran := slices.Clone(attempts)
		mu.Unlock()
		if !slices.Equal(ran, []int{1}) {
			t.Errorf("during the pause the handler ran at attempts %v, want [1]: a crashed task of a paused type is not claimed again", ran)
		}
		if tk := s.status(t, 0); tk.Status != task.Pending || tk.Attempt != 1 || tk.Claim != nil {
			t.Errorf("the crashed task is %s at attempt %d (claim %+v), want pending at 1, unclaimed", tk.Status, tk.Attempt, tk.Claim)
		}
		if st := s.w.Stats(); st.Requeued != 0 || st.Failed != 1 {
			t.Errorf("stats %+v: want 1 failure, no requeue", st)
		}
		if _, err := pause.Change(ctx, s.st, time.Now(), "test", "", pause.Resuming()); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			time.Sleep(interval)
			s.poll(t) // the resume announces the held task; a poll claims it
			if s.status(t, 0).Status == task.Succeeded {
				break
			}
		}
		if tk := s.status(t, 0); tk.Status != task.Succeeded || tk.Attempt != 2 {
			t.Errorf("after the resume the task is %s at attempt %d, want succeeded at 2", tk.Status, tk.Attempt)
		}
		s.w.Wait()
	})
}

// A resume whose announcement of a held task fails (a PUT of its ready
// pointer) is tried again at the next read of the pause object, though
// the pause did not change since: the task runs without waiting for the
// monitor's repair (there is no monitor here).
func TestAFailedResumeAnnouncementIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const interval = 100 * time.Millisecond
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, PauseCheckInterval: interval}, "job")
		close(s.release) // the handler returns at once
		if _, err := pause.Change(ctx, s.st, time.Now(), "test", "", pause.Pausing("job")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval)
		if n := s.poll(t); n != 0 {
			t.Fatalf("claimed %d of a paused type", n)
		}
		failed := make(chan string, 1)
		s.f.Inject(s3store.Fault{Op: s3store.OpPut, KeySuffix: ".ready", Err: s3store.ErrInjected503, Times: 1,
			Hook: func(key string) { failed <- key }})
		if _, err := pause.Change(ctx, s.st, time.Now(), "test", "", pause.Resuming()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval)
		s.poll(t) // reads the resume; the announcement fails
		select {
		case <-failed:
		default:
			t.Fatal("the resume made no announcement")
		}
		for range 5 {
			time.Sleep(interval)
			s.poll(t)
			if s.status(t, 0).Status == task.Succeeded {
				break
			}
		}
		if tk := s.status(t, 0); tk.Status != task.Succeeded || tk.Attempt != 1 {
			t.Errorf("the held task is %s at attempt %d, want succeeded at 1: the failed announcement is tried again", tk.Status, tk.Attempt)
		}
		s.w.Wait()
	})
}

// A worker whose first read of the pause object fails claims nothing until
// a read answers (tried again every pause.UnknownRetry): it must not run a
// paused type for a whole interval on a read that never happened (found by
// the simulator, seed 240140: a restarted direct-dispatch worker claimed a
// paused task from its inbox).
func TestAWorkerWhosePauseReadFailedClaimsNothingUntilOneAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, f, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []string{"mail", "job"} {
			if _, err := p.Submit(ctx, typ, nil, producer.Options{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		if _, err := pause.Change(ctx, f, time.Now(), "test", "", pause.Pausing("mail")); err != nil {
			t.Fatal(err)
		}
		f.Inject(s3store.Fault{Op: s3store.OpGet, KeySuffix: pause.Key, Err: s3store.ErrInjected503, Times: 1})
		w, err := worker.New(ctx, f, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Logger: quiet, PauseCheckInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var ran []string
		for _, typ := range []string{"mail", "job"} {
			w.Handle(typ, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				mu.Lock()
				ran = append(ran, tk.Type)
				mu.Unlock()
				return nil, nil
			})
		}
		poll := func() int {
			n, err := w.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			return n
		}
		if n := poll(); n != 0 {
			t.Fatalf("claimed %d tasks before any read of the pause object answered", n)
		}
		time.Sleep(pause.UnknownRetry)
		if n := poll(); n != 1 {
			t.Fatalf("claimed %d tasks once the pause was read, want 1 (job; mail is paused)", n)
		}
		w.Wait()
		if !slices.Equal(ran, []string{"job"}) {
			t.Fatalf("ran %v, want [job]", ran)
		}
	})
}

// A worker that can never read the pause object (a policy that refuses
// it) waits one interval for an answer, then claims as if nothing were
// paused: it must not stop silently.
func TestAWorkerThatCannotReadThePauseObjectGoesOnAfterAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, f, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Submit(ctx, "job", nil, producer.Options{}); err != nil {
			t.Fatal(err)
		}
		f.Inject(s3store.Fault{Op: s3store.OpGet, KeySuffix: pause.Key, Err: s3store.ErrInjected503, Times: 1 << 20})
		const interval = 10 * time.Second
		w, err := worker.New(ctx, f, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Logger: quiet, PauseCheckInterval: interval})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		poll := func() int {
			n, err := w.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			return n
		}
		if n := poll(); n != 0 {
			t.Fatalf("claimed %d tasks before any read of the pause object answered", n)
		}
		time.Sleep(interval / 2)
		if n := poll(); n != 0 {
			t.Fatalf("claimed %d tasks half an interval into the unanswered reads", n)
		}
		time.Sleep(interval)
		if n := poll(); n != 1 {
			t.Fatalf("claimed %d tasks an interval after the first failed read, want 1", n)
		}
		w.Wait()
	})
}
