package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// compare checks the registry's families names against want (the text
// format, HELP and TYPE lines included).
func compare(t *testing.T, r *Registry, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// worker is an event a worker publishes.
func worker_(e events.Event) events.Event {
	e.Source = events.SourceWorker
	return e
}

// A user sums each task counter over its labels and gets a count that
// means something: tasks submitted, attempts ended, events published.
// One task's submit, claim and start never count as three tasks.
func TestTaskCountersSumToTasksAndAttempts(t *testing.T) {
	r := New(Config{})
	evs := []events.Event{
		// The producer submits three tasks.
		{Kind: events.Submitted, Source: events.SourceProducer, Type: "resize", TaskID: "a"},
		{Kind: events.Submitted, Source: events.SourceProducer, Type: "resize", TaskID: "b"},
		{Kind: events.Submitted, Source: events.SourceProducer, Type: "mail", TaskID: "c"},
		// a: one attempt, succeeded.
		worker_(events.Event{Kind: events.Claimed, Type: "resize", TaskID: "a"}),
		worker_(events.Event{Kind: events.Started, Type: "resize", TaskID: "a"}),
		worker_(events.Event{Kind: events.Succeeded, Type: "resize", TaskID: "a", Duration: 30 * time.Millisecond}),
		// b: failed and retried, then its lease was lost while it ran
		// and its outcome refused, then lost again before it started,
		// then dead.
		worker_(events.Event{Kind: events.Claimed, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Started, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Failed, Type: "resize", TaskID: "b", Duration: 2 * time.Second, Err: errors.New("x")}),
		worker_(events.Event{Kind: events.Retried, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Claimed, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Started, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.LeaseLost, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.OutcomeRejected, Type: "resize", TaskID: "b", Duration: time.Second}),
		worker_(events.Event{Kind: events.Claimed, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.LeaseLost, Type: "resize", TaskID: "b", Phase: events.PhasePending}),
		worker_(events.Event{Kind: events.Claimed, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Started, Type: "resize", TaskID: "b"}),
		worker_(events.Event{Kind: events.Dead, Type: "resize", TaskID: "b", Duration: time.Second}),
		// c: released unstarted (no duration), then succeeded.
		worker_(events.Event{Kind: events.Claimed, Type: "mail", TaskID: "c"}),
		worker_(events.Event{Kind: events.Released, Type: "mail", TaskID: "c"}),
		worker_(events.Event{Kind: events.Claimed, Type: "mail", TaskID: "c"}),
		worker_(events.Event{Kind: events.Started, Type: "mail", TaskID: "c"}),
		worker_(events.Event{Kind: events.Succeeded, Type: "mail", TaskID: "c", Duration: 3 * time.Millisecond}),
		// Not a worker's attempt: the monitor's dead (an expired
		// lease), a producer's cancel, an object's corruption, the fleet.
		{Kind: events.Redispatched, Source: events.SourceMonitor, Type: "mail", TaskID: "d"},
		{Kind: events.Dead, Source: events.SourceMonitor, Type: "mail", TaskID: "d"},
		{Kind: events.Canceled, Source: events.SourceProducer, Type: "mail", TaskID: "e"},
		worker_(events.Event{Kind: events.Corrupt, Key: "tasks/000/x.json"}),
		worker_(events.Event{Kind: events.ShardAcquired, Shard: 2}),
		worker_(events.Event{Kind: "no_such_kind", Type: "mail"}), // not counted at all
	}
	claims := 0
	for _, e := range evs {
		if e.Kind == events.Claimed {
			claims++
		}
		r.Observe(e)
	}
	compare(t, r, `
# HELP s3queue_task_attempts_total Attempts this worker ended, one each, by task type and outcome: succeeded, failed (to be retried), dead, snoozed, canceled, released, outcome_rejected, lease_lost.
# TYPE s3queue_task_attempts_total counter
s3queue_task_attempts_total{outcome="dead",type="resize"} 1
s3queue_task_attempts_total{outcome="failed",type="resize"} 1
s3queue_task_attempts_total{outcome="lease_lost",type="resize"} 1
s3queue_task_attempts_total{outcome="outcome_rejected",type="resize"} 1
s3queue_task_attempts_total{outcome="released",type="mail"} 1
s3queue_task_attempts_total{outcome="succeeded",type="mail"} 1
s3queue_task_attempts_total{outcome="succeeded",type="resize"} 1
# HELP s3queue_tasks_submitted_total Tasks this process submitted (an idempotent repeat creates none), by task type.
# TYPE s3queue_tasks_submitted_total counter
s3queue_tasks_submitted_total{type="mail"} 1
s3queue_tasks_submitted_total{type="resize"} 2
`, "s3queue_task_attempts_total", "s3queue_tasks_submitted_total")

	text := scrape(t, r)
	if got := sum(t, text, "s3queue_tasks_submitted_total"); got != 3 {
		t.Errorf("sum(s3queue_tasks_submitted_total) = %v, want 3: the tasks submitted", got)
	}
	if got := sum(t, text, "s3queue_task_attempts_total"); got != float64(claims) {
		t.Errorf("sum(s3queue_task_attempts_total) = %v, want %d: one per claim", got, claims)
	}
	if got := sum(t, text, "s3queue_events_total"); got != float64(len(evs)-1) {
		t.Errorf("sum(s3queue_events_total) = %v, want %d: every event of a known kind, once", got, len(evs)-1)
	}
	for _, line := range []string{
		`s3queue_events_total{kind="claimed",type="resize"} 5`,
		`s3queue_events_total{kind="lease_lost",type="resize"} 2`,
		`s3queue_events_total{kind="dead",type="mail"} 1`,
		`s3queue_events_total{kind="corrupt",type=""} 1`,
		`s3queue_events_total{kind="shard_acquired",type=""} 1`,
		// The durations land in their buckets, by type and the attempt's
		// outcome; an attempt that never ran observes nothing.
		`s3queue_handler_duration_seconds_bucket{outcome="succeeded",type="resize",le="0.025"} 0`,
		`s3queue_handler_duration_seconds_bucket{outcome="succeeded",type="resize",le="0.05"} 1`,
		`s3queue_handler_duration_seconds_bucket{outcome="failed",type="resize",le="1"} 0`,
		`s3queue_handler_duration_seconds_bucket{outcome="failed",type="resize",le="2.5"} 1`,
		`s3queue_handler_duration_seconds_sum{outcome="failed",type="resize"} 2`,
		`s3queue_handler_duration_seconds_count{outcome="succeeded",type="mail"} 1`,
		`s3queue_handler_duration_seconds_count{outcome="outcome_rejected",type="resize"} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if strings.Contains(text, `no_such_kind`) {
		t.Error("an unknown kind is a label value")
	}
	if n := testutil.CollectAndCount(r.handler); n != 5 {
		t.Errorf("%d handler-duration series, want 5", n)
	}
}

// sum is what sum(name) returns over a scrape: the series of name, added.
func sum(t *testing.T, text, name string) float64 {
	t.Helper()
	var total float64
	n := 0
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		total += f
		n++
	}
	if n == 0 {
		t.Fatalf("no series of %s in the scrape", name)
	}
	return total
}

func TestFleetSleep(t *testing.T) {
	r := New(Config{})
	gauge := func() float64 { return testutil.ToFloat64(r.asleep) }
	if gauge() != 0 {
		t.Fatalf("asleep %v at start", gauge())
	}
	r.Observe(events.Event{Kind: events.FleetAsleep})
	if gauge() != 1 {
		t.Errorf("asleep %v after fleet_asleep, want 1", gauge())
	}
	r.Observe(events.Event{Kind: events.FleetWoken})
	if gauge() != 0 {
		t.Errorf("asleep %v after fleet_woken, want 0", gauge())
	}
	r.Observe(events.Event{Kind: events.InboxAsleep})
	if gauge() != 1 {
		t.Errorf("asleep %v after inbox_asleep, want 1", gauge())
	}
}

// The subscriber feeds the registry from a bus, and its drops are
// exported.
func TestSubscribe(t *testing.T) {
	r := New(Config{})
	bus := events.NewBus()
	r.Subscribe(bus)
	bus.Publish(events.Event{Kind: events.Submitted, Type: "x"})
	bus.Close() // returns once the subscriber handled what it buffered
	compare(t, r, `
# HELP s3queue_tasks_submitted_total Tasks this process submitted (an idempotent repeat creates none), by task type.
# TYPE s3queue_tasks_submitted_total counter
s3queue_tasks_submitted_total{type="x"} 1
`, "s3queue_tasks_submitted_total")
	r.StreamDropped(3)
	compare(t, r, `
# HELP s3queue_events_dropped_total Events a subscriber of this process lost to a full buffer: metrics (these counters miss them), stream (GET /events clients).
# TYPE s3queue_events_dropped_total counter
s3queue_events_dropped_total{subscriber="metrics"} 0
s3queue_events_dropped_total{subscriber="stream"} 3
`, "s3queue_events_dropped_total")
}

func TestS3RequestsAndSpend(t *testing.T) {
	r := New(Config{})
	st := s3store.NewCounter(mem.New())
	r.CountStore(st, true)
	ctx := context.Background()

	// 1,000 PUTs (one refused), a GET that finds nothing, a DELETE
	// (free), 100 LISTs.
	for i := range 1000 {
		opts := s3store.PutOptions{}
		if i == 999 {
			opts.IfNoneMatch = true // the key exists: 412, billed all the same
		}
		if _, err := st.Put(ctx, "k", []byte{byte(i)}, opts); err != nil && !errors.Is(err, s3store.ErrPreconditionFailed) {
			t.Fatal(err)
		}
	}
	if _, err := st.Get(ctx, "missing"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "k", s3store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, r)
	for _, line := range []string{
		`s3queue_s3_requests_total{op="PUT",outcome="ok"} 999`,
		`s3queue_s3_requests_total{op="PUT",outcome="precondition_failed"} 1`,
		`s3queue_s3_requests_total{op="GET",outcome="not_found"} 1`,
		`s3queue_s3_requests_total{op="DELETE",outcome="ok"} 1`,
		`s3queue_s3_requests_total{op="LIST",outcome="ok"} 0`, // exported before the first LIST
		`s3queue_s3_request_duration_seconds_count{op="PUT"} 1000`,
		`s3queue_s3_request_duration_seconds_count{op="GET"} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if got := sum(t, text, "s3queue_s3_requests_total"); got != 1002 {
		t.Errorf("sum(s3queue_s3_requests_total) = %v, want 1002: every request once", got)
	}
	// 1,000 PUTs at $0.005 per 1,000 and a GET at $0.0004 per 1,000: a
	// counter, so that rate() gives the spend per second over any window.
	wantDollars := 0.005 + 0.0000004
	if got := gather(t, r, "s3queue_s3_spend_dollars_total"); !near(got, wantDollars) {
		t.Errorf("spend total $%v, want $%v", got, wantDollars)
	}
	for range 100 {
		if _, err := st.List(ctx, "", s3store.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := gather(t, r, "s3queue_s3_spend_dollars_total"), wantDollars+100*0.000005; !near(got, want) {
		t.Errorf("spend total after 100 LISTs $%v, want $%v", got, want)
	}
	if strings.Contains(scrape(t, r), "s3queue_s3_spend_dollars_per_hour") {
		t.Error("the scrape has a spend-per-hour gauge: rate(s3queue_s3_spend_dollars_total[1h]) * 3600 is it")
	}
}

// A store whose requests cost nothing (file://, mem://) has its requests
// counted and exports no spend, as the dashboard shows none: an absent
// series, not a 0 that reads as "free S3".
func TestUnbilledStoreExportsNoSpend(t *testing.T) {
	r := New(Config{})
	st := s3store.NewCounter(mem.New())
	r.CountStore(st, false)
	if _, err := st.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, r)
	if !strings.Contains(text, `s3queue_s3_requests_total{op="PUT",outcome="ok"} 1`+"\n") {
		t.Errorf("the PUT is not counted:\n%s", text)
	}
	if strings.Contains(text, "s3queue_s3_spend") {
		t.Errorf("an unbilled store exports a spend:\n%s", text)
	}
}

// s3queue_build_info says which build runs, as 's3queue version' does.
func TestBuildInfo(t *testing.T) {
	for _, tc := range []struct{ version, want string }{{"v1.2.3", "v1.2.3"}, {"", "(devel)"}} {
		r := New(Config{Version: tc.version})
		line := fmt.Sprintf("s3queue_build_info{goversion=%q,version=%q} 1\n", runtime.Version(), tc.want)
		if text := scrape(t, r); !strings.Contains(text, line) {
			t.Errorf("version %q: the scrape lacks %q", tc.version, line)
		}
	}
}

func TestSetQueue(t *testing.T) {
	r := New(Config{})
	if n := testutil.CollectAndCount(r.stored); n != 0 {
		t.Fatalf("a registry that never had a sweep exports %d s3queue_tasks series; want none", n)
	}
	r.SetQueue(QueueSnapshot{Shards: []ShardSnapshot{
		{Shard: 0, Pending: 5, Running: 2, Dead: 3, AnyPending: true, OldestPending: 90 * time.Second},
		{Shard: 1, Succeeded: 7, Blocked: 1, Canceled: 2, Dead: 1},
	}})
	compare(t, r, `
# HELP s3queue_tasks Tasks stored in the bucket by shard and status (finished ones until retention deletes them), as the monitor's last sweep found them.
# TYPE s3queue_tasks gauge
s3queue_tasks{shard="0",status="blocked"} 0
s3queue_tasks{shard="0",status="canceled"} 0
s3queue_tasks{shard="0",status="dead"} 3
s3queue_tasks{shard="0",status="pending"} 5
s3queue_tasks{shard="0",status="running"} 2
s3queue_tasks{shard="0",status="succeeded"} 0
s3queue_tasks{shard="1",status="blocked"} 1
s3queue_tasks{shard="1",status="canceled"} 2
s3queue_tasks{shard="1",status="dead"} 1
s3queue_tasks{shard="1",status="pending"} 0
s3queue_tasks{shard="1",status="running"} 0
s3queue_tasks{shard="1",status="succeeded"} 7
# HELP s3queue_queue_oldest_pending_seconds Age of the oldest pending task by shard (no series: none pending), as the monitor's last sweep found it.
# TYPE s3queue_queue_oldest_pending_seconds gauge
s3queue_queue_oldest_pending_seconds{shard="0"} 90
`, "s3queue_tasks", "s3queue_queue_oldest_pending_seconds")
	// What a user sums: the stored tasks, the dead ones (the old
	// s3queue_queue_dead_tasks), the live ones.
	text := scrape(t, r)
	if got := sum(t, text, "s3queue_tasks"); got != 21 {
		t.Errorf("sum(s3queue_tasks) = %v, want 21 stored tasks", got)
	}
	if got := sum(t, text, `s3queue_tasks{shard="0",status="dead"}`) + sum(t, text, `s3queue_tasks{shard="1",status="dead"}`); got != 4 {
		t.Errorf("dead tasks %v, want 4", got)
	}
	if strings.Contains(text, "s3queue_queue_dead_tasks") || strings.Contains(text, "s3queue_queue_depth") {
		t.Error("the scrape still has the old queue gauges")
	}

	// After a reshard to one shard, shard 1 is gone from the gauges; a
	// shard whose pending tasks all ran has no age.
	r.SetQueue(QueueSnapshot{Shards: []ShardSnapshot{{Shard: 0, Succeeded: 1}}})
	if n := testutil.CollectAndCount(r.queueOldest); n != 0 {
		t.Errorf("%d oldest-pending series with no pending task, want none", n)
	}
	if n := testutil.CollectAndCount(r.stored); n != 6 {
		t.Errorf("%d s3queue_tasks series after the reshard, want 6 (one shard, six statuses)", n)
	}
}

// fakeWorker is a worker's gauges, as a test sets them.
type fakeWorker struct {
	states []worker.QueueState
	wait   map[string]worker.Histogram
	member bool
	assign shards.Assignment
	stats  worker.Stats
}

func (f *fakeWorker) QueueStates() []worker.QueueState       { return f.states }
func (f *fakeWorker) QueueWait() map[string]worker.Histogram { return f.wait }
func (f *fakeWorker) Member() (bool, shards.Assignment)      { return f.member, f.assign }
func (f *fakeWorker) Stats() worker.Stats                    { return f.stats }

func TestWatchWorker(t *testing.T) {
	r := New(Config{})
	w := &fakeWorker{
		states: []worker.QueueState{
			{Pool: "default", InFlight: 3, Pending: 1, Waiting: 0, MaxInFlight: 4},
			{Pool: "io", InFlight: 0, Pending: 0, Waiting: 7, MaxInFlight: worker.Unbounded},
		},
		// 2 dispatches within 5ms, 1 within 100ms, 1 above a minute.
		wait: map[string]worker.Histogram{"default": {Bounds: []float64{5, 100, 60000},
			Counts: []uint64{2, 1, 0, 1}, Count: 4, SumMs: 70006}},
		member: true,
		assign: shards.Assignment{Own: []int{2, 3}, Drain: []int{7}},
		stats:  worker.Stats{Renewed: 12, RenewFailed: 1, LeaseLost: 2},
	}
	r.WatchWorker(w)
	compare(t, r, `
# HELP s3queue_dispatch_in_flight Handlers running in the worker's pool.
# TYPE s3queue_dispatch_in_flight gauge
s3queue_dispatch_in_flight{pool="default"} 3
s3queue_dispatch_in_flight{pool="io"} 0
# HELP s3queue_dispatch_pending Tasks the worker's pool claimed that wait for a handler.
# TYPE s3queue_dispatch_pending gauge
s3queue_dispatch_pending{pool="default"} 1
s3queue_dispatch_pending{pool="io"} 0
# HELP s3queue_dispatch_waiting Tasks found due by the pool's last poll and not accepted (no room).
# TYPE s3queue_dispatch_waiting gauge
s3queue_dispatch_waiting{pool="default"} 0
s3queue_dispatch_waiting{pool="io"} 7
# HELP s3queue_dispatch_max_in_flight The pool's bound on running handlers (no series: unbounded).
# TYPE s3queue_dispatch_max_in_flight gauge
s3queue_dispatch_max_in_flight{pool="default"} 4
# HELP s3queue_dispatch_wait_seconds Time from discovery (listing) to dispatch (a handler starts), by pool.
# TYPE s3queue_dispatch_wait_seconds histogram
s3queue_dispatch_wait_seconds_bucket{pool="default",le="0.005"} 2
s3queue_dispatch_wait_seconds_bucket{pool="default",le="0.1"} 3
s3queue_dispatch_wait_seconds_bucket{pool="default",le="60"} 3
s3queue_dispatch_wait_seconds_bucket{pool="default",le="+Inf"} 4
s3queue_dispatch_wait_seconds_sum{pool="default"} 70.006
s3queue_dispatch_wait_seconds_count{pool="default"} 4
# HELP s3queue_lease_renewals_total Task lease renewals by outcome: ok (written), error (a request failed; retried before the lease runs out).
# TYPE s3queue_lease_renewals_total counter
s3queue_lease_renewals_total{outcome="error"} 1
s3queue_lease_renewals_total{outcome="ok"} 12
# HELP s3queue_leases_lost_total Task leases this worker lost: its handler was canceled (or the claimed task never started) and another worker may run the task.
# TYPE s3queue_leases_lost_total counter
s3queue_leases_lost_total 2
# HELP s3queue_fleet_member 1 while the worker is a member of the fleet (polls shards of its own), 0 while it stands by.
# TYPE s3queue_fleet_member gauge
s3queue_fleet_member 1
# HELP s3queue_fleet_shards_owned Active shards the worker polls at full speed as a fleet member.
# TYPE s3queue_fleet_shards_owned gauge
s3queue_fleet_shards_owned 2
`, "s3queue_dispatch_in_flight", "s3queue_dispatch_pending", "s3queue_dispatch_waiting", "s3queue_dispatch_max_in_flight", "s3queue_dispatch_wait_seconds",
		"s3queue_lease_renewals_total", "s3queue_leases_lost_total", "s3queue_fleet_member", "s3queue_fleet_shards_owned")

	// Read at scrape time: a change shows at the next scrape.
	w.member, w.assign = false, shards.Assignment{}
	if got := gather(t, r, "s3queue_fleet_member"); got != 0 {
		t.Errorf("member %v after leaving, want 0", got)
	}
}

// scrape reads the registry through its HTTP handler, as Prometheus does.
func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gather returns the value of the one series of the gauge or counter
// name.
func gather(t *testing.T, r *Registry, name string) float64 {
	t.Helper()
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		if len(f.Metric) != 1 {
			t.Fatalf("%s has %d series, want 1", name, len(f.Metric))
		}
		m := f.Metric[0]
		if m.Gauge != nil {
			return m.Gauge.GetValue()
		}
		return m.Counter.GetValue()
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

func near(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(1, b)
}
