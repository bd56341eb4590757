package schedule_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestValidateNamesTheSchedule(t *testing.T) {
	for _, tc := range []struct {
		d    schedule.Definition
		want string
	}{
		{schedule.Definition{Name: "Bad Name", Cron: "* * * * *", Type: "t"}, `invalid schedule name "Bad Name"`},
		{schedule.Definition{Name: "a", Type: "t"}, `schedule "a": neither cron nor every`},
		{schedule.Definition{Name: "a", Cron: "* * * * *", Every: task.Duration(time.Minute), Type: "t"}, `schedule "a": both cron and every`},
		{schedule.Definition{Name: "a", Cron: "61 * * * *", Type: "t"}, `schedule "a": bad cron "61 * * * *"`},
		{schedule.Definition{Name: "a", Cron: "* * * *", Type: "t"}, `schedule "a": bad cron`},
		{schedule.Definition{Name: "a", Cron: "* * * * *", Timezone: "Mars/Olympus", Type: "t"}, `schedule "a": unknown time zone "Mars/Olympus"`},
		{schedule.Definition{Name: "a", Every: task.Duration(time.Minute), Timezone: "Europe/Paris", Type: "t"}, `timezone "Europe/Paris" applies to cron only`},
		{schedule.Definition{Name: "a", Every: task.Duration(500 * time.Millisecond), Type: "t"}, `shorter than 1s`},
		{schedule.Definition{Name: "a", Cron: "@every 1m", Type: "t"}, `use every`},
		{schedule.Definition{Name: "a", Cron: "@hourly"}, `no task type`},
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "t", Input: json.RawMessage("{")}, `not valid JSON`},
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "t", CatchUp: "all"}, `invalid catch_up "all"`},
		// What the producer would refuse at every tick is refused at once.
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "t", MaxAttempts: 1001}, `max_attempts 1001 is above 1000`},
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "t", Timeout: task.Duration(25 * time.Hour)}, `timeout 25h0m0s outside`},
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "t", Timeout: task.Duration(time.Millisecond)}, `timeout 1ms outside`},
		{schedule.Definition{Name: "a", Cron: "@hourly", Type: "a b"}, `may only contain`},
	} {
		err := tc.d.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.d, err, tc.want)
		}
	}
	for _, d := range []schedule.Definition{
		{Name: "ok", Cron: "*/5 * * * *", Type: "t"},
		{Name: "ok", Cron: "@daily", Timezone: "America/New_York", Type: "t"},
		{Name: "ok-2_x", Every: task.Duration(90 * time.Second), Type: "t", Input: json.RawMessage(`{"a":1}`), CatchUp: "none"},
	} {
		if err := d.Validate(); err != nil {
			t.Errorf("%+v: %v", d, err)
		}
	}
}

func TestEveryTicksAtMultiplesSinceTheEpoch(t *testing.T) {
	spec, _ := schedule.Definition{Name: "e", Every: task.Duration(90 * time.Second), Type: "t"}.Compile()
	at := mustTime(t, "2026-01-01T00:00:10Z")
	n := spec.Next(at)
	if n.Unix()%90 != 0 || !n.After(at) || n.Sub(at) > 90*time.Second {
		t.Errorf("Next(%v) = %v", at, n)
	}
	if spec.Next(n) != n.Add(90*time.Second) {
		t.Errorf("Next of a tick is not the one after")
	}
}

func TestCronInATimeZone(t *testing.T) {
	spec, err := schedule.Definition{Name: "c", Cron: "0 9 * * *", Timezone: "Europe/Paris", Type: "t"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	// 9:00 in Paris is 8:00 UTC in winter, 7:00 UTC in summer.
	if got := spec.Next(mustTime(t, "2026-01-10T12:00:00Z")); got != mustTime(t, "2026-01-11T08:00:00Z") {
		t.Errorf("winter: %v", got)
	}
	if got := spec.Next(mustTime(t, "2026-07-10T12:00:00Z")); got != mustTime(t, "2026-07-11T07:00:00Z") {
		t.Errorf("summer: %v", got)
	}
}

// What the cron library does at DST changes, as docs/scheduling.md says:
// a tick that falls in the skipped hour does not happen that day; a tick
// in the repeated hour happens twice (two instants, two tasks).
func TestCronAcrossDaylightSavingTime(t *testing.T) {
	spec, _ := schedule.Definition{Name: "c", Cron: "30 2 * * *", Timezone: "Europe/Paris", Type: "t"}.Compile()
	// 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
	got := spec.Next(mustTime(t, "2026-03-28T12:00:00Z"))
	if want := mustTime(t, "2026-03-30T00:30:00Z"); got != want { // 02:30 CEST the day after
		t.Errorf("skipped hour: tick at %v, want %v", got, want)
	}
	// 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
	first := spec.Next(mustTime(t, "2026-10-24T12:00:00Z"))
	if want := mustTime(t, "2026-10-25T00:30:00Z"); first != want { // 02:30 CEST
		t.Errorf("repeated hour: first tick %v, want %v", first, want)
	}
	if n, want := spec.Next(first), mustTime(t, "2026-10-25T01:30:00Z"); n != want { // 02:30 CET
		t.Errorf("repeated hour: second tick %v, want %v", n, want)
	}
}

func TestPlan(t *testing.T) {
	spec, _ := schedule.Definition{Name: "e", Every: task.Duration(10 * time.Second), Type: "t"}.Compile()
	t0 := mustTime(t, "2026-01-01T00:00:00Z")
	s := schedule.Schedule{Definition: schedule.Definition{Name: "e", Every: task.Duration(10 * time.Second), Type: "t"}, Cursor: t0}
	if st := s.Plan(spec, t0.Add(9*time.Second)); st.Submit || !st.Cursor.IsZero() || st.Next != t0.Add(10*time.Second) {
		t.Errorf("not due: %+v", st)
	}
	if st := s.Plan(spec, t0.Add(12*time.Second)); !st.Submit || st.Tick != t0.Add(10*time.Second) || st.Cursor != st.Tick {
		t.Errorf("one due: %+v", st)
	}
	st := s.Plan(spec, t0.Add(75*time.Second))
	if !st.Submit || st.Tick != t0.Add(70*time.Second) || st.Cursor != st.Tick || st.Skipped != 6 {
		t.Errorf("catch_up one: %+v", st)
	}
	s.CatchUp = schedule.CatchUpNone
	st = s.Plan(spec, t0.Add(75*time.Second))
	if st.Submit || st.Cursor != t0.Add(70*time.Second) || st.Skipped != 7 {
		t.Errorf("catch_up none: %+v", st)
	}
	s.Paused = true
	if st := s.Plan(spec, t0.Add(75*time.Second)); st.Submit || !st.Cursor.IsZero() {
		t.Errorf("paused: %+v", st)
	}
}

func TestCronCatchUpFindsTheLatestTick(t *testing.T) {
	d := schedule.Definition{Name: "c", Cron: "*/5 * * * *", Type: "t"}
	spec, _ := d.Compile()
	s := schedule.Schedule{Definition: d, Cursor: mustTime(t, "2025-01-01T00:00:00Z")}
	st := s.Plan(spec, mustTime(t, "2026-03-01T10:07:30Z"))
	if !st.Submit || st.Tick != mustTime(t, "2026-03-01T10:05:00Z") {
		t.Errorf("%+v", st)
	}
}

func TestIdempotencyKeyRoundTrips(t *testing.T) {
	at := mustTime(t, "2026-01-01T10:00:00Z")
	k := schedule.IdempotencyKey("nightly", at)
	if k != "schedule:nightly:2026-01-01T10:00:00Z" {
		t.Errorf("key %q", k)
	}
	if n, tick, ok := schedule.ParseIdempotencyKey(k); !ok || n != "nightly" || tick != at {
		t.Errorf("parsed %q %v %v", n, tick, ok)
	}
}

// fakeQueue is a producer whose idempotency keys make one task per key.
type fakeQueue struct {
	mu    sync.Mutex
	byKey map[string]string
	calls int
}

func (q *fakeQueue) submit(_ context.Context, s schedule.Submission) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls++
	if q.byKey == nil {
		q.byKey = make(map[string]string)
	}
	if id, ok := q.byKey[s.IdempotencyKey]; ok {
		return id, nil
	}
	id := "task-" + s.IdempotencyKey
	q.byKey[s.IdempotencyKey] = id
	return id, nil
}

func newScheduler(st *mem.Store, local *clock.Manual, q *fakeQueue) *schedule.Scheduler {
	return &schedule.Scheduler{Store: st, Clock: clock.New(st, clock.Config{Local: local}), Local: local,
		Submit: q.submit, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Two schedulers over one bucket: one task per tick, each tick recorded,
// pause stops the ticks, remove forgets the schedule.
func TestTwoSchedulersOneTaskPerTick(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	local := clock.NewManual(time.Now())
	st.SetNow(local.Now) // S3 time runs with the local clock
	q := &fakeQueue{}
	a, b := newScheduler(st, local, q), newScheduler(st, local, q)
	iv, _ := clock.New(st, clock.Config{Local: local}).Now(ctx)
	d := schedule.Definition{Name: "every5", Every: task.Duration(5 * time.Second), Type: "t"}
	if _, _, err := schedule.Put(ctx, st, d, iv.Latest, "test"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		for _, s := range []*schedule.Scheduler{a, b} {
			if _, err := s.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		local.Advance(time.Second)
	}
	s, _, _, err := schedule.Read(ctx, st, "every5")
	if err != nil {
		t.Fatal(err)
	}
	if len(q.byKey) < 3 || s.LastTask == "" || q.byKey[schedule.IdempotencyKey("every5", s.LastTick)] != s.LastTask {
		t.Errorf("tasks %v, schedule %+v", q.byKey, s)
	}
	// Every tick from the first up to the cursor has its one task.
	spec, _ := s.Compile()
	first := mustTime(t, "1970-01-01T00:00:00Z")
	for k := range q.byKey {
		_, tick, _ := schedule.ParseIdempotencyKey(k)
		if first.Unix() == 0 || tick.Before(first) {
			first = tick
		}
	}
	for tick := first; !tick.After(s.Cursor); tick = spec.Next(tick) {
		if _, ok := q.byKey[schedule.IdempotencyKey("every5", tick)]; !ok {
			t.Errorf("tick %v has no task", tick)
		}
	}
	n := len(q.byKey)
	if _, err := schedule.SetPaused(ctx, st, "every5", true, local.Now(), "test"); err != nil {
		t.Fatal(err)
	}
	for range 12 {
		local.Advance(time.Second)
		a.Step(ctx)
		b.Step(ctx)
	}
	if len(q.byKey) != n {
		t.Errorf("paused, yet %d tasks more", len(q.byKey)-n)
	}
	if err := schedule.Remove(ctx, st, "every5", local.Now(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.SetPaused(ctx, st, "every5", false, local.Now(), "test"); err == nil {
		t.Errorf("resume of a removed schedule succeeded")
	}
}

// The scheduler's own requests per tick (the submit's are the producer's):
// a GET of the schedule and its CAS PUT; a refresh is one LIST, with a GET
// only for a schedule another writer changed.
func TestRequestsPerTick(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	local := clock.NewManual(time.Now())
	base.SetNow(local.Now)
	st := s3store.NewCounter(base)
	q := &fakeQueue{}
	s := &schedule.Scheduler{Store: st, Clock: clock.New(st, clock.Config{Local: local}), Local: local, Submit: q.submit,
		Refresh: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := schedule.Definition{Name: "m", Every: task.Duration(time.Minute), Type: "t"}
	if _, _, err := schedule.Put(ctx, base, d, local.Now(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(ctx); err != nil { // the first listing
		t.Fatal(err)
	}
	before := st.Counts()
	const ticks = 30
	for range ticks * 60 {
		local.Advance(time.Second)
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after := st.Counts()
	gets, puts := after.Of(s3store.OpGet)-before.Of(s3store.OpGet), after.Of(s3store.OpPut)-before.Of(s3store.OpPut)
	t.Logf("per tick: GET %.2f PUT %.2f LIST %.2f", float64(gets)/ticks, float64(puts)/ticks, float64(after.Of(s3store.OpList)-before.Of(s3store.OpList))/ticks)
	if len(q.byKey) != ticks || gets != ticks || puts != ticks {
		t.Errorf("%d ticks: %d tasks, %d GET, %d PUT; want one task, one GET and one PUT per tick", ticks, len(q.byKey), gets, puts)
	}
}

// A scheduler with nothing changed costs one GET per refresh (the change
// marker), not a LIST of schedules/ (12.5 times the price): it lists once
// every ListEvery, and at the first refresh after a schedule is added,
// changed or removed.
func TestAnUnchangedScheduleCostsAGetPerRefresh(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	local := clock.NewManual(time.Now())
	base.SetNow(local.Now)
	st := s3store.NewCounter(base)
	q := &fakeQueue{}
	s := &schedule.Scheduler{Store: st, Clock: clock.New(st, clock.Config{Local: local}), Local: local, Submit: q.submit,
		Refresh: time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := s.Step(ctx); err != nil { // the first listing
		t.Fatal(err)
	}
	before := st.Counts()
	for range 30 {
		local.Advance(time.Minute)
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d := st.Counts().Sub(before)
	if d.Of(s3store.OpList) != 0 || d.Of(s3store.OpGet) != 30 {
		t.Fatalf("30 refreshes with no schedule and nothing changed: %s; want 30 GET of the marker and no LIST", d)
	}
	if _, _, err := schedule.Put(ctx, base, schedule.Definition{Name: "m", Every: task.Duration(time.Minute), Type: "t"}, local.Now(), "test"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		local.Advance(time.Minute)
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.byKey) == 0 {
		t.Fatal("a schedule added was not seen at the next refresh: no tick submitted in 3 minutes")
	}
	before = st.Counts()
	local.Advance(schedule.ListEvery)
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if n := st.Counts().Sub(before).Of(s3store.OpList); n != 1 {
		t.Fatalf("after ListEvery with nothing changed: %d LIST, want the hourly one", n)
	}
}

// A schedule added or changed whose write landed with its response lost
// (412 on the store's retry) is reported written, and writes the change
// marker: schedulers learn of it at their next refresh. (Before, the
// retry found the definition it asked for already there, reported nothing
// written and left the marker alone: the schedule waited for the hourly
// listing.)
func TestAScheduleWhoseResponseWasLostIsSeenAtTheNextRefresh(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	d := schedule.Definition{Name: "m", Every: task.Duration(time.Minute), Type: "t"}
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: schedule.Key("m"), Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1})
	_, wrote, err := schedule.Put(ctx, st, d, time.Now(), "test")
	if err != nil || !wrote {
		t.Fatalf("put: wrote %v, %v; want it written", wrote, err)
	}
	if _, err := st.Get(ctx, schedule.ChangedKey); err != nil {
		t.Fatalf("the change marker: %v", err)
	}
}
