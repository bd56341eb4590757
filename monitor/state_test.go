package monitor_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// getsByKey counts the GETs of each key, to show what the dead-letter list
// reads.
type getsByKey struct {
	s3store.Store
	mu   sync.Mutex
	gets map[string]int
}

func (g *getsByKey) Get(ctx context.Context, key string) (s3store.Object, error) {
	g.mu.Lock()
	g.gets[key]++
	g.mu.Unlock()
	return g.Store.Get(ctx, key)
}

func (g *getsByKey) Unwrap() s3store.Store { return g.Store }

func (g *getsByKey) of(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gets[key]
}

// The monitor's State counts tasks by status from its sweeps' listings
// alone, counts each ended task once in the minute it ended, keeps the
// newest dead tasks read once each, and costs no request to take; it stays
// right as the floor rises past finished tasks and after a full walk.
func TestStateCountsWhatTheSweepsListed(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	counter := s3store.NewCounter(mst)
	st := &getsByKey{Store: counter, gets: map[string]int{}}
	p, err := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { iv, _ := clk.Now(ctx); return iv.Latest }
	submit := func() taskio.Versioned {
		t.Helper()
		id, err := p.Submit(ctx, "mail", nil, producer.Options{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		v, err := taskio.LoadID(ctx, st, id, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	end := func(v taskio.Versioned, how task.Status, msg string) taskio.Versioned {
		t.Helper()
		if err := v.Task.ClaimBy("w", "c", now()); err != nil {
			t.Fatal(err)
		}
		v, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag)
		if err != nil {
			t.Fatal(err)
		}
		if how == task.Succeeded {
			err = v.Task.Succeed("c", nil, now())
		} else {
			err = v.Task.Fail("c", msg, true, now(), func() float64 { return 0.5 })
		}
		if err != nil {
			t.Fatal(err)
		}
		if v, err = taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var ok1, ok2, dead1, dead2, dead3 taskio.Versioned
	ok1, ok2 = end(submit(), task.Succeeded, ""), end(submit(), task.Succeeded, "")
	dead1 = end(submit(), task.Dead, "smtp: 550 no such user")
	*srv = srv.Add(time.Second)
	dead2 = end(submit(), task.Dead, "smtp: timeout")
	canceled := submit()
	if _, err := p.Cancel(ctx, canceled.Task.ID); err != nil {
		t.Fatal(err)
	}
	waiting := submit()

	m, err := monitor.New(ctx, st, monitor.Config{Shards: 1, PageSize: 3, Interval: 5 * time.Second, Clock: clk, DeadList: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := m.State(); len(s.Shards) != 0 || !s.At.IsZero() {
		t.Fatalf("State before the first tick: %+v, want empty", s)
	}
	tick := func() {
		t.Helper()
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweeps := func(n int) {
		t.Helper()
		want := m.Stats().SweepsCompleted + n
		for i := 0; i < 50 && m.Stats().SweepsCompleted < want; i++ {
			tick()
		}
		if m.Stats().SweepsCompleted < want {
			t.Fatalf("%d sweeps did not complete in 50 ticks", n)
		}
	}
	check := func(what string, want map[task.Status]int, ended [3]int) monitor.State {
		t.Helper()
		before := counter.Counts()
		s := m.State()
		if d := counter.Counts().Sub(before); d.Total() != 0 {
			t.Fatalf("%s: State made requests: %v", what, d)
		}
		if len(s.Shards) != 1 {
			t.Fatalf("%s: %d shards in State, want 1", what, len(s.Shards))
		}
		for _, status := range []task.Status{task.Pending, task.Running, task.Blocked, task.Succeeded, task.Dead, task.Canceled} {
			if got := s.Shards[0].Counts[status]; got != want[status] {
				t.Errorf("%s: %d %s, want %d (counts %v)", what, got, status, want[status], s.Shards[0].Counts)
			}
			if s.Totals[status] != s.Shards[0].Counts[status] {
				t.Errorf("%s: totals %v differ from the only shard's %v", what, s.Totals, s.Shards[0].Counts)
			}
		}
		var got [3]int
		for _, mn := range s.Minutes {
			got[0] += mn.Succeeded
			got[1] += mn.Dead
			got[2] += mn.Canceled
		}
		if got != ended {
			t.Errorf("%s: the last hour's minutes count %v tasks ended (succeeded, dead, canceled), want %v", what, got, ended)
		}
		if len(s.Minutes) != 60 {
			t.Errorf("%s: %d minutes, want 60", what, len(s.Minutes))
		}
		if s.Requests == nil || s.Requests.Total["LIST"] == 0 {
			t.Errorf("%s: the monitor's request counts are missing: %+v", what, s.Requests)
		}
		return s
	}

	sweeps(1)
	s := check("first sweep", map[task.Status]int{task.Pending: 1, task.Succeeded: 2, task.Dead: 2, task.Canceled: 1}, [3]int{2, 2, 1})
	if s.Shards[0].Depth != 1 {
		t.Errorf("depth %d, want the one pending task", s.Shards[0].Depth)
	}
	idTime, _ := task.IDTime(waiting.Task.ID)
	if !s.Shards[0].OldestPending.Equal(idTime) || s.Shards[0].OldestPendingSecs <= 0 {
		t.Errorf("oldest pending %v (%vs), want the waiting task's id time %v", s.Shards[0].OldestPending, s.Shards[0].OldestPendingSecs, idTime)
	}
	tick() // the dead-letter list reads its candidates at the end of a tick
	s = m.State()
	if len(s.Dead) != 2 || s.Dead[0].ID != dead2.Task.ID || s.Dead[1].ID != dead1.Task.ID {
		t.Fatalf("dead list %+v, want the two dead tasks, newest first", s.Dead)
	}
	if d := s.Dead[1]; d.Type != "mail" || d.LastError != "smtp: 550 no such user" || d.Attempts != 1 || d.Ended.IsZero() {
		t.Errorf("dead task %+v: want its type, last error, attempts and end", d)
	}

	// Many sweeps later, with the floor past the finished tasks: the same
	// counts, nothing ended counted twice, each dead task read once.
	*srv = srv.Add(2 * time.Minute)
	sweeps(3)
	check("floor risen", map[task.Status]int{task.Pending: 1, task.Succeeded: 2, task.Dead: 2, task.Canceled: 1}, [3]int{2, 2, 1})
	for _, v := range []taskio.Versioned{dead1, dead2} {
		if n := st.of(v.Task.Key()); n != 2 { // the test's own LoadID, and the list's one read
			t.Errorf("dead task %s read %d times, want once by the dead-letter list", v.Task.ID, n-1)
		}
	}
	if st.of(ok1.Task.Key())+st.of(ok2.Task.Key()) != 2 {
		t.Errorf("the monitor read a succeeded task; sizes say what they are")
	}

	// A new dead task, newer than the others, pushes the oldest off the
	// capped list; the pending one ends; both are counted once.
	dead3 = end(submit(), task.Dead, "smtp: refused")
	end(waiting, task.Succeeded, "")
	sweeps(2)
	tick()
	s = check("more ended", map[task.Status]int{task.Succeeded: 3, task.Dead: 3, task.Canceled: 1}, [3]int{3, 3, 1})
	if len(s.Dead) != 2 || s.Dead[0].ID != dead3.Task.ID || s.Dead[1].ID != dead2.Task.ID {
		t.Fatalf("dead list %+v, want the two newest dead tasks", s.Dead)
	}
	if !s.Shards[0].OldestPending.IsZero() {
		t.Errorf("oldest pending %v with no task pending", s.Shards[0].OldestPending)
	}

	// A requeued dead task leaves the dead list and counts as pending.
	if err := p.Requeue(ctx, dead3.Task.ID); err != nil {
		t.Fatal(err)
	}
	sweeps(1)
	s = check("requeued", map[task.Status]int{task.Pending: 1, task.Succeeded: 3, task.Dead: 2, task.Canceled: 1}, [3]int{3, 3, 1})
	for _, d := range s.Dead {
		if d.ID == dead3.Task.ID {
			t.Fatalf("the requeued task is still on the dead list: %+v", s.Dead)
		}
	}

	// The full walk below the floor recounts the history: the same counts.
	*srv = srv.Add(7 * time.Hour)
	walked := m.State().Shards[0].Walked
	for i := 0; i < 50 && m.State().Shards[0].Walked.Equal(walked); i++ {
		tick()
	}
	s = m.State()
	if s.Shards[0].Walked.Equal(walked) {
		t.Fatal("no full walk ended in 50 ticks")
	}
	for status, want := range map[task.Status]int{task.Succeeded: 3, task.Dead: 2, task.Canceled: 1} {
		if got := s.Shards[0].Counts[status]; got != want {
			t.Errorf("after the full walk: %d %s, want %d (%v)", got, status, want, s.Shards[0].Counts)
		}
	}
	for _, mn := range s.Minutes {
		if mn.Succeeded+mn.Dead+mn.Canceled != 0 {
			t.Errorf("minute %v of the last hour counts tasks that ended 7 hours ago", mn.Start)
		}
	}
	if !strings.Contains(s.Monitor, "-") || !s.Leading {
		t.Errorf("state names monitor %q, leading %v", s.Monitor, s.Leading)
	}
}

// Tasks deleted behind the monitor's back (a purge, a lifecycle rule, a
// person at the console) leave its counts and its dead-letter list at the
// next sweep, even once the floor has risen past them: a shard whose
// history fits in the sweep's page is listed whole at every sweep, at no
// extra cost. A history longer than that is left to the full walk, and
// State says so (Whole false).
func TestStateFollowsDeletionsWithinOneSweep(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	counter := s3store.NewCounter(mst)
	p, err := producer.New(ctx, counter, producer.Config{Shards: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { iv, _ := clk.Now(ctx); return iv.Latest }
	end := func(how task.Status) taskio.Versioned {
		t.Helper()
		id, err := p.Submit(ctx, "mail", nil, producer.Options{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		v, err := taskio.LoadID(ctx, counter, id, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		if how == task.Canceled {
			if _, err := p.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
			return v
		}
		if err := v.Task.ClaimBy("w", "c", now()); err != nil {
			t.Fatal(err)
		}
		if v, err = taskio.Update(ctx, counter, clock.System(), v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
		if how == task.Succeeded {
			err = v.Task.Succeed("c", nil, now())
		} else {
			err = v.Task.Fail("c", "boom", true, now(), func() float64 { return 0.5 })
		}
		if err != nil {
			t.Fatal(err)
		}
		if v, err = taskio.Update(ctx, counter, clock.System(), v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var all []taskio.Versioned
	for _, how := range []task.Status{task.Succeeded, task.Succeeded, task.Succeeded, task.Dead, task.Dead, task.Canceled, task.Canceled} {
		all = append(all, end(how))
	}
	m, err := monitor.New(ctx, counter, monitor.Config{Shards: 1, PageSize: 10, Interval: 5 * time.Second,
		SweepMax: time.Minute, Clock: clk, DeadList: 10})
	if err != nil {
		t.Fatal(err)
	}
	tick := func() {
		t.Helper()
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweeps := func(n int) {
		t.Helper()
		want := m.Stats().SweepsCompleted + n
		for i := 0; i < 50 && m.Stats().SweepsCompleted < want; i++ {
			tick()
		}
		if m.Stats().SweepsCompleted < want {
			t.Fatalf("%d sweeps did not complete in 50 ticks", n)
		}
	}
	check := func(what string, succeeded, dead, canceled int, whole bool) {
		t.Helper()
		s := m.State()
		c := s.Shards[0].Counts
		if c[task.Succeeded] != succeeded || c[task.Dead] != dead || c[task.Canceled] != canceled {
			t.Errorf("%s: counts %v, want %d succeeded, %d dead, %d canceled", what, c, succeeded, dead, canceled)
		}
		if s.Totals[task.Succeeded] != succeeded || s.Totals[task.Dead] != dead {
			t.Errorf("%s: totals %v", what, s.Totals)
		}
		if len(s.Dead) != dead {
			t.Errorf("%s: %d tasks on the dead-letter list (%+v), want %d", what, len(s.Dead), s.Dead, dead)
		}
		for _, d := range s.Dead {
			if _, err := p.Get(ctx, d.ID); err != nil {
				t.Errorf("%s: the dead-letter list has %s, which is gone: %v", what, d.ID, err)
			}
		}
		if s.Shards[0].Whole != whole {
			t.Errorf("%s: whole %v, want %v", what, s.Shards[0].Whole, whole)
		}
	}
	// The floor rises past the finished tasks.
	*srv = srv.Add(2 * time.Minute)
	sweeps(3)
	tick() // the dead-letter list reads its candidates
	check("before", 3, 2, 2, true)
	for _, v := range []taskio.Versioned{all[0], all[1], all[3], all[5]} {
		if err := mst.Delete(ctx, v.Task.Key(), s3store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := counter.Counts()
	sweeps(1)
	check("one sweep after the deletions", 1, 1, 1, true)
	if d := counter.Counts().Sub(before); d.Of(s3store.OpList) != 1 {
		t.Errorf("the sweep made %d LISTs, want 1: a history that fits in its page costs nothing more", d.Of(s3store.OpList))
	}

	// A history longer than the room the sweep's page leaves: sweeps start
	// at the floor, and say the counts below it are the full walk's.
	for range 12 {
		end(task.Succeeded)
	}
	*srv = srv.Add(2 * time.Minute)
	sweeps(3)
	check("a long history", 13, 1, 1, false)
}
