package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
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

func TestTaskEventsCountByTypeAndOutcome(t *testing.T) {
	r := New()
	for _, e := range []events.Event{
		{Kind: events.Claimed, Type: "resize", TaskID: "a"},
		{Kind: events.Succeeded, Type: "resize", TaskID: "a", Duration: 30 * time.Millisecond},
		{Kind: events.Claimed, Type: "resize", TaskID: "b"},
		{Kind: events.Failed, Type: "resize", TaskID: "b", Duration: 2 * time.Second, Err: errors.New("x")},
		{Kind: events.Retried, Type: "resize", TaskID: "b"},
		{Kind: events.Succeeded, Type: "mail", TaskID: "c", Duration: 3 * time.Millisecond},
		{Kind: events.Released, Type: "mail", TaskID: "d"}, // never ran: no duration
		{Kind: events.Corrupt, Key: "tasks/000/x.json"},    // not a task's: not counted
		{Kind: events.ShardAcquired, Shard: 2},
	} {
		r.Observe(e)
	}
	compare(t, r, `
# HELP s3queue_tasks_total Task events this process published, by task type and outcome (the event's kind: claimed, succeeded, failed, dead, ...).
# TYPE s3queue_tasks_total counter
s3queue_tasks_total{outcome="claimed",type="resize"} 2
s3queue_tasks_total{outcome="failed",type="resize"} 1
s3queue_tasks_total{outcome="released",type="mail"} 1
s3queue_tasks_total{outcome="retried",type="resize"} 1
s3queue_tasks_total{outcome="succeeded",type="mail"} 1
s3queue_tasks_total{outcome="succeeded",type="resize"} 1
`, "s3queue_tasks_total")

	// The durations land in their buckets, by type and outcome; an
	// outcome without a run observes nothing.
	if n := testutil.CollectAndCount(r.handler); n != 3 {
		t.Errorf("%d handler-duration series, want 3 (resize succeeded, resize failed, mail succeeded)", n)
	}
	text := scrape(t, r)
	for _, line := range []string{
		`s3queue_handler_duration_seconds_bucket{outcome="succeeded",type="resize",le="0.025"} 0`,
		`s3queue_handler_duration_seconds_bucket{outcome="succeeded",type="resize",le="0.05"} 1`,
		`s3queue_handler_duration_seconds_bucket{outcome="failed",type="resize",le="1"} 0`,
		`s3queue_handler_duration_seconds_bucket{outcome="failed",type="resize",le="2.5"} 1`,
		`s3queue_handler_duration_seconds_sum{outcome="failed",type="resize"} 2`,
		`s3queue_handler_duration_seconds_count{outcome="succeeded",type="mail"} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
}

func TestFleetSleep(t *testing.T) {
	r := New()
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
	r := New()
	bus := events.NewBus()
	r.Subscribe(bus)
	bus.Publish(events.Event{Kind: events.Submitted, Type: "x"})
	bus.Close() // returns once the subscriber handled what it buffered
	compare(t, r, `
# HELP s3queue_tasks_total Task events this process published, by task type and outcome (the event's kind: claimed, succeeded, failed, dead, ...).
# TYPE s3queue_tasks_total counter
s3queue_tasks_total{outcome="submitted",type="x"} 1
`, "s3queue_tasks_total")
	r.StreamDropped(3)
	compare(t, r, `
# HELP s3queue_events_dropped_total Events a subscriber of this process lost to a full buffer: metrics (these counters miss them), stream (GET /events clients).
# TYPE s3queue_events_dropped_total counter
s3queue_events_dropped_total{subscriber="metrics"} 0
s3queue_events_dropped_total{subscriber="stream"} 3
`, "s3queue_events_dropped_total")
}

func TestS3RequestsAndSpend(t *testing.T) {
	r := New()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	r.spend = newWindow(now, SpendWindow, spendSlot)
	st := s3store.NewCounter(mem.New())
	r.CountStore(st)
	ctx := context.Background()

	// At 12:01: 1,000 PUTs (one refused), a GET that finds nothing, a
	// DELETE (free).
	now = now.Add(time.Minute)
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
	// 1,000 PUTs at $0.005 per 1,000 and a GET at $0.0004 per 1,000.
	wantDollars := 0.005 + 0.0000004
	if got := testutil.ToFloat64(r.dollars); !near(got, wantDollars) {
		t.Errorf("spend total $%v, want $%v", got, wantDollars)
	}

	spend := func() float64 { return r.spend.perHour(r.now()) }
	// At 12:02 the process has run two minutes: the window covers them.
	now = now.Add(time.Minute)
	if got, want := spend(), wantDollars/(2.0/60); !near(got, want) {
		t.Errorf("spend at 12:02 $%v/h, want $%v/h (2 minutes' requests over 2 minutes)", got, want)
	}
	// At 12:10 the window is full and holds them still. It covers its
	// last 59 whole slots and the current one up to now: at a slot's
	// start, 9m50s.
	full := SpendWindow - spendSlot
	now = now.Add(8 * time.Minute)
	if got, want := spend(), wantDollars/full.Hours(); !near(got, want) {
		t.Errorf("spend at 12:10 $%v/h, want $%v/h (over %v)", got, want, full)
	}
	// At 12:20 they have slid out of it.
	now = now.Add(10 * time.Minute)
	if got := spend(); got != 0 {
		t.Errorf("spend at 12:20 $%v/h, want 0: the requests were 19 minutes ago", got)
	}
	// The gauge in the scrape is the window's.
	now = now.Add(time.Minute)
	for range 100 {
		if _, err := st.List(ctx, "", s3store.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gauge := gather(t, r, "s3queue_s3_spend_dollars_per_hour")
	if want := 100 * 0.000005 / full.Hours(); !near(gauge, want) {
		t.Errorf("spend gauge $%v/h, want $%v/h", gauge, want)
	}
}

func TestSetQueue(t *testing.T) {
	r := New()
	if n := testutil.CollectAndCount(r.queueDead); n != 0 {
		t.Fatalf("a registry that never had a sweep exports %d dead-task gauges; want none", n)
	}
	r.SetQueue(QueueSnapshot{Dead: 4, Shards: []ShardSnapshot{
		{Shard: 0, Pending: 5, Running: 2, Dead: 3, OldestPending: 90 * time.Second},
		{Shard: 1, Succeeded: 7, Blocked: 1, Canceled: 2, Dead: 1},
	}})
	compare(t, r, `
# HELP s3queue_queue_depth Tasks in the queue by shard and status, as the monitor's last sweep found them.
# TYPE s3queue_queue_depth gauge
s3queue_queue_depth{shard="0",status="blocked"} 0
s3queue_queue_depth{shard="0",status="canceled"} 0
s3queue_queue_depth{shard="0",status="dead"} 3
s3queue_queue_depth{shard="0",status="pending"} 5
s3queue_queue_depth{shard="0",status="running"} 2
s3queue_queue_depth{shard="0",status="succeeded"} 0
s3queue_queue_depth{shard="1",status="blocked"} 1
s3queue_queue_depth{shard="1",status="canceled"} 2
s3queue_queue_depth{shard="1",status="dead"} 1
s3queue_queue_depth{shard="1",status="pending"} 0
s3queue_queue_depth{shard="1",status="running"} 0
s3queue_queue_depth{shard="1",status="succeeded"} 7
# HELP s3queue_queue_oldest_pending_seconds Age of the oldest pending task by shard (0: none), as the monitor's last sweep found it.
# TYPE s3queue_queue_oldest_pending_seconds gauge
s3queue_queue_oldest_pending_seconds{shard="0"} 90
s3queue_queue_oldest_pending_seconds{shard="1"} 0
# HELP s3queue_queue_dead_tasks Dead tasks in the queue, as the monitor's last sweep found them.
# TYPE s3queue_queue_dead_tasks gauge
s3queue_queue_dead_tasks 4
`, "s3queue_queue_depth", "s3queue_queue_oldest_pending_seconds", "s3queue_queue_dead_tasks")

	// After a reshard to one shard, shard 1 is gone from the gauges.
	r.SetQueue(QueueSnapshot{Shards: []ShardSnapshot{{Shard: 0, Pending: 1, OldestPending: time.Second}}})
	compare(t, r, `
# HELP s3queue_queue_oldest_pending_seconds Age of the oldest pending task by shard (0: none), as the monitor's last sweep found it.
# TYPE s3queue_queue_oldest_pending_seconds gauge
s3queue_queue_oldest_pending_seconds{shard="0"} 1
# HELP s3queue_queue_dead_tasks Dead tasks in the queue, as the monitor's last sweep found them.
# TYPE s3queue_queue_dead_tasks gauge
s3queue_queue_dead_tasks 0
`, "s3queue_queue_oldest_pending_seconds", "s3queue_queue_dead_tasks")
	if n := testutil.CollectAndCount(r.queueDepth); n != 6 {
		t.Errorf("%d depth series after the reshard, want 6 (one shard, six statuses)", n)
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
	r := New()
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
# HELP s3queue_dispatch_wait_seconds Time from discovery (listing) to dispatch (a handler starts), by pool.
# TYPE s3queue_dispatch_wait_seconds histogram
s3queue_dispatch_wait_seconds_bucket{pool="default",le="0.005"} 2
s3queue_dispatch_wait_seconds_bucket{pool="default",le="0.1"} 3
s3queue_dispatch_wait_seconds_bucket{pool="default",le="60"} 3
s3queue_dispatch_wait_seconds_bucket{pool="default",le="+Inf"} 4
s3queue_dispatch_wait_seconds_sum{pool="default"} 70.006
s3queue_dispatch_wait_seconds_count{pool="default"} 4
# HELP s3queue_lease_renewals_total Task lease renewals by result: ok (written), error (a request failed; retried before the lease runs out).
# TYPE s3queue_lease_renewals_total counter
s3queue_lease_renewals_total{result="error"} 1
s3queue_lease_renewals_total{result="ok"} 12
# HELP s3queue_leases_lost_total Task leases this worker lost: its handler was canceled (or the claimed task never started) and another worker may run the task.
# TYPE s3queue_leases_lost_total counter
s3queue_leases_lost_total 2
# HELP s3queue_fleet_member 1 while the worker is a member of the fleet (polls shards of its own), 0 while it stands by.
# TYPE s3queue_fleet_member gauge
s3queue_fleet_member 1
# HELP s3queue_fleet_shards_owned Active shards the worker polls at full speed as a fleet member.
# TYPE s3queue_fleet_shards_owned gauge
s3queue_fleet_shards_owned 2
`, "s3queue_dispatch_in_flight", "s3queue_dispatch_pending", "s3queue_dispatch_waiting", "s3queue_dispatch_wait_seconds",
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
