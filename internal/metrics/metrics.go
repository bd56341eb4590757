package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/s3store"
)

// SpendWindow is how far back the spend-per-hour gauge looks: long enough
// to smooth a worker's polling rhythm, short enough to show a change of
// load within minutes.
const SpendWindow = 10 * time.Minute

// spendSlot is the resolution of the spend window.
const spendSlot = 10 * time.Second

// Registry holds one process's metrics. Its methods are safe for
// concurrent use.
type Registry struct {
	reg *prometheus.Registry
	// now is the clock of the spend window (time.Now; tests substitute).
	now    func() time.Time
	prices cost.Prices

	tasks    *prometheus.CounterVec
	handler  *prometheus.HistogramVec
	asleep   prometheus.Gauge
	dropped  *dropped
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	dollars  prometheus.Counter
	spend    *window

	queueDepth  *prometheus.GaugeVec
	queueOldest *prometheus.GaugeVec
	queueDead   *prometheus.GaugeVec // no labels: absent until SetQueue

	typesMu sync.Mutex
	types   map[string]bool // the type label values given out, at most MaxTypeLabels
}

// MaxTypeLabels bounds the distinct values of the type label of
// s3queue_tasks_total and s3queue_handler_duration_seconds in one
// registry: a monitor counts the events of every type it finds in the
// bucket, and task types are whatever producers write, so without a bound
// one careless producer (a type per customer, say) makes series without
// end. The first MaxTypeLabels types keep their names for the life of the
// process; events of any other type count under OtherType.
const MaxTypeLabels = 100

// OtherType is the type label of the types beyond MaxTypeLabels.
const OtherType = "other"

// typeLabel is the type label of an event of type typ.
func (r *Registry) typeLabel(typ string) string {
	r.typesMu.Lock()
	defer r.typesMu.Unlock()
	if r.types[typ] {
		return typ
	}
	if len(r.types) >= MaxTypeLabels {
		return OtherType
	}
	if r.types == nil {
		r.types = make(map[string]bool)
	}
	r.types[typ] = true
	return typ
}

// New returns a registry with the process's metrics, the Go runtime's and
// the process's (go_*, process_*).
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), now: time.Now, prices: cost.S3Standard}
	r.spend = newWindow(r.now(), SpendWindow, spendSlot)
	r.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3queue_tasks_total",
		Help: "Task events this process published, by task type and outcome (the event's kind: claimed, succeeded, failed, dead, ...).",
	}, []string{"type", "outcome"})
	r.handler = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "s3queue_handler_duration_seconds",
		Help:    "How long handlers ran, by task type and the attempt's outcome.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
	}, []string{"type", "outcome"})
	r.asleep = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3queue_fleet_asleep",
		Help: "1 while this worker sleeps at a doorbell (the fleet's, or its own inbox's under direct dispatch), else 0.",
	})
	r.dropped = &dropped{desc: prometheus.NewDesc("s3queue_events_dropped_total",
		"Events a subscriber of this process lost to a full buffer: metrics (these counters miss them), stream (GET /events clients).",
		[]string{"subscriber"}, nil)}
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3queue_s3_requests_total",
		Help: "S3 requests this process made, by operation (PUT, GET, HEAD, LIST, DELETE) and outcome (ok, not_found, precondition_failed, conflict, error).",
	}, []string{"op", "outcome"})
	r.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "s3queue_s3_request_duration_seconds",
		Help:    "Latency of S3 requests by operation, retries inside the client included.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"op"})
	r.dollars = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3queue_s3_spend_dollars_total",
		Help: "Estimated dollars of this process's S3 requests at S3 Standard list prices (the model of 's3queue cost').",
	})
	spend := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "s3queue_s3_spend_dollars_per_hour",
		Help: "Estimated S3 request spend per hour of this process, from its requests over the last 10 minutes (since start, if less).",
	}, func() float64 { return r.spend.perHour(r.now()) })
	r.queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_queue_depth",
		Help: "Tasks in the queue by shard and status, as the monitor's last sweep found them.",
	}, []string{"shard", "status"})
	r.queueOldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_queue_oldest_pending_seconds",
		Help: "Age of the oldest pending task by shard (0: none), as the monitor's last sweep found it.",
	}, []string{"shard"})
	r.queueDead = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_queue_dead_tasks",
		Help: "Dead tasks in the queue, as the monitor's last sweep found them.",
	}, nil)
	r.reg.MustRegister(r.tasks, r.handler, r.asleep, r.dropped, r.requests, r.latency, r.dollars, spend,
		r.queueDepth, r.queueOldest, r.queueDead,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every operation and outcome is exported from the start, at 0: a
	// rate() over a series that appears late misses its first requests.
	for _, op := range s3store.Ops() {
		for _, o := range outcomes {
			r.requests.WithLabelValues(op.String(), o.String())
		}
		r.latency.WithLabelValues(op.String())
	}
	return r
}

// outcomes are the outcomes of an S3 request, in s3store's order.
var outcomes = []s3store.Outcome{s3store.OutcomeOK, s3store.OutcomeNotFound, s3store.OutcomePrecondition,
	s3store.OutcomeConflict, s3store.OutcomeError}

// Names of event subscribers in s3queue_events_dropped_total.
const (
	SubscriberMetrics = "metrics"
	SubscriberStream  = "stream"
)

// Gatherer returns the registry, for tests and for other exporters.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Register adds a collector of the caller's to the registry.
func (r *Registry) Register(c prometheus.Collector) error { return r.reg.Register(c) }

// Handler serves the registry in the Prometheus text format (GET /metrics).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// metricsBuffer is the buffer of the metrics subscriber: a worker's burst
// of outcomes waits here instead of being lost to a scrape's lock.
const metricsBuffer = 8192

// Subscribe feeds the registry from bus: task events count in
// s3queue_tasks_total, outcomes with a handler's run time in
// s3queue_handler_duration_seconds, and the doorbell's sleep in
// s3queue_fleet_asleep. The subscription ends when the bus closes. Call it
// once per registry.
func (r *Registry) Subscribe(bus *events.Bus) *events.Subscription {
	sub := bus.Subscribe(SubscriberMetrics, metricsBuffer, r.Observe)
	r.dropped.sub.Store(sub)
	return sub
}

// dropped exports s3queue_events_dropped_total: the metrics
// subscription's drops, read from it at scrape time (the subscriber cannot
// count what never reaches it), and the stream's, added as its clients
// notice them.
type dropped struct {
	desc   *prometheus.Desc
	sub    atomic.Pointer[events.Subscription]
	stream atomic.Int64
}

func (d *dropped) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *dropped) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.sub.Load().Dropped()), SubscriberMetrics)
	ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.stream.Load()), SubscriberStream)
}

// Observe counts one event (the subscriber's function; tests call it
// directly).
func (r *Registry) Observe(e events.Event) {
	switch e.Kind {
	case events.FleetAsleep, events.InboxAsleep:
		r.asleep.Set(1)
		return
	case events.FleetWoken, events.InboxWoken:
		r.asleep.Set(0)
		return
	}
	if !taskKinds[e.Kind] {
		return
	}
	typ := r.typeLabel(e.Type)
	r.tasks.WithLabelValues(typ, string(e.Kind)).Inc()
	if e.Duration > 0 {
		r.handler.WithLabelValues(typ, string(e.Kind)).Observe(e.Duration.Seconds())
	}
}

// taskKinds are the kinds counted in s3queue_tasks_total: each concerns
// one task of a known type. (Corrupt is about an object, often with no
// type; the fleet and inbox kinds about the worker.)
var taskKinds = map[events.Kind]bool{
	events.Submitted: true, events.Claimed: true, events.Started: true, events.Succeeded: true,
	events.Failed: true, events.Retried: true, events.Dead: true, events.Snoozed: true,
	events.Canceled: true, events.CancelRequested: true, events.LeaseLost: true, events.Released: true,
	events.Rejected: true, events.Dropped: true, events.OutcomeRejected: true, events.Requeued: true,
	events.Redispatched: true, events.Repaired: true, events.Deleted: true,
	events.Blocked: true, events.Unblocked: true, events.DependencyFailed: true,
	events.SlotAcquired: true, events.SlotQueued: true, events.SlotReplaced: true, events.SlotRefused: true,
	events.SlotGranted: true, events.SlotFreed: true, events.RateLimited: true,
}

// CountStore counts the requests of c in s3queue_s3_requests_total and
// s3queue_s3_request_duration_seconds, and prices them (cost.S3Standard)
// in s3queue_s3_spend_dollars_total and the spend-per-hour gauge. It
// takes c's request hook (s3store.Counter.OnRequest): call it before the
// store is used.
func (r *Registry) CountStore(c *s3store.Counter) {
	c.OnRequest(r.request)
}

// request records one S3 request.
func (r *Registry) request(op s3store.Op, outcome s3store.Outcome, d time.Duration) {
	r.requests.WithLabelValues(op.String(), outcome.String()).Inc()
	r.latency.WithLabelValues(op.String()).Observe(d.Seconds())
	// S3 bills refused conditional writes and 404s too, as cost.FromCounts.
	if p := r.prices.Per(op); p > 0 {
		r.dollars.Add(p)
		r.spend.add(r.now(), p)
	}
}

// StreamDropped adds n events lost by a client of the event stream (GET
// /events) to s3queue_events_dropped_total{subscriber="stream"}.
func (r *Registry) StreamDropped(n int64) {
	if n > 0 {
		r.dropped.stream.Add(n)
	}
}

// QueueSnapshot is the queue's state as a monitor's sweep saw it, for the
// queue-level gauges.
type QueueSnapshot struct {
	// Shards has one entry per shard swept.
	Shards []ShardSnapshot
	// Dead is the number of dead tasks in the whole queue.
	Dead int
}

// ShardSnapshot counts one shard's tasks by status.
type ShardSnapshot struct {
	Shard                                                int
	Pending, Running, Blocked, Succeeded, Dead, Canceled int
	// OldestPending is the age of the shard's oldest pending task (by S3
	// time); 0 when it has none.
	OldestPending time.Duration
}

// SetQueue replaces the queue-level gauges with s: s3queue_queue_depth,
// s3queue_queue_oldest_pending_seconds and s3queue_queue_dead_tasks. A
// shard missing from s disappears from them. Only a process that calls
// it (the monitor) exports these gauges.
func (r *Registry) SetQueue(s QueueSnapshot) {
	r.queueDepth.Reset()
	r.queueOldest.Reset()
	for _, sh := range s.Shards {
		shard := strconv.Itoa(sh.Shard)
		for _, v := range []struct {
			status string
			n      int
		}{{"pending", sh.Pending}, {"running", sh.Running}, {"blocked", sh.Blocked},
			{"succeeded", sh.Succeeded}, {"dead", sh.Dead}, {"canceled", sh.Canceled}} {
			r.queueDepth.WithLabelValues(shard, v.status).Set(float64(v.n))
		}
		r.queueOldest.WithLabelValues(shard).Set(sh.OldestPending.Seconds())
	}
	r.queueDead.WithLabelValues().Set(float64(s.Dead))
}

// window sums values over a sliding span of time in slots.
type window struct {
	mu    sync.Mutex
	start time.Time
	slot  time.Duration
	sums  []float64
	idx   []int64 // the slot number each entry of sums holds
}

func newWindow(start time.Time, span, slot time.Duration) *window {
	n := int(span / slot)
	w := &window{start: start, slot: slot, sums: make([]float64, n), idx: make([]int64, n)}
	for i := range w.idx {
		w.idx[i] = -1
	}
	return w
}

func (w *window) slotOf(t time.Time) int64 {
	d := t.Sub(w.start)
	if d < 0 {
		return 0
	}
	return int64(d / w.slot)
}

func (w *window) add(t time.Time, v float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.slotOf(t)
	i := k % int64(len(w.sums))
	if w.idx[i] != k {
		w.idx[i], w.sums[i] = k, 0
	}
	w.sums[i] += v
}

// perHour is the sum of the window's slots, per hour of the time they
// cover: the current slot up to t and the full ones before it (between
// span-slot and span), but nothing before the window started.
func (w *window) perHour(t time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.slotOf(t)
	n := int64(len(w.sums))
	first := max(k-n+1, 0)
	var sum float64
	for i, at := range w.idx {
		if at >= first && at <= k {
			sum += w.sums[i]
		}
	}
	covered := t.Sub(w.start.Add(time.Duration(first) * w.slot))
	if covered < time.Second {
		covered = time.Second // a process seconds old: no estimate from a blip
	}
	return sum / covered.Hours()
}
