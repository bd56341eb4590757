package metrics

import (
	"net/http"
	"runtime"
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

// Registry holds one process's metrics. Its methods are safe for
// concurrent use.
type Registry struct {
	reg    *prometheus.Registry
	prices cost.Prices

	submitted *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	events    *prometheus.CounterVec
	handler   *prometheus.HistogramVec
	asleep    prometheus.Gauge
	dropped   *dropped
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	dollars   prometheus.Counter // nil until CountStore counts a billed store

	stored      *prometheus.GaugeVec
	queueOldest *prometheus.GaugeVec

	typesMu sync.Mutex
	types   map[string]bool // the type label values given out, at most MaxTypeLabels
}

// Config is what a registry needs to know of its process.
type Config struct {
	// Version is the s3queue version, the version label of
	// s3queue_build_info ("(devel)" when empty).
	Version string
}

// MaxTypeLabels bounds the distinct values of the type label of
// s3queue_tasks_submitted_total, s3queue_task_attempts_total,
// s3queue_events_total and s3queue_handler_duration_seconds in one
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
func New(cfg Config) *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), prices: cost.S3Standard}
	r.submitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3queue_tasks_submitted_total",
		Help: "Tasks this process submitted (an idempotent repeat creates none), by task type.",
	}, []string{"type"})
	r.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3queue_task_attempts_total",
		Help: "Attempts this worker ended, one each, by task type and outcome: succeeded, failed (to be retried), dead, snoozed, canceled, released, outcome_rejected, lease_lost.",
	}, []string{"type", "outcome"})
	r.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3queue_events_total",
		Help: "Events this process published (its /events stream), one each, by kind and task type (empty for an event of no task).",
	}, []string{"kind", "type"})
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
	r.stored = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_tasks",
		Help: "Tasks stored in the bucket by shard and status (finished ones until retention deletes them), as the monitor's last sweep found them.",
	}, []string{"shard", "status"})
	r.queueOldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_queue_oldest_pending_seconds",
		Help: "Age of the oldest pending task by shard (no series: none pending), as the monitor's last sweep found it.",
	}, []string{"shard"})
	version := cfg.Version
	if version == "" {
		version = "(devel)"
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3queue_build_info",
		Help: "1, labeled with the s3queue version (as 's3queue version' prints it) and the Go version it was built with.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	r.reg.MustRegister(r.submitted, r.attempts, r.events, r.handler, r.asleep, r.dropped, r.requests, r.latency,
		r.stored, r.queueOldest, build,
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

// Subscribe feeds the registry from bus: every event counts in
// s3queue_events_total, submits in s3queue_tasks_submitted_total, the ends
// of a worker's attempts in s3queue_task_attempts_total (with a handler's
// run time in s3queue_handler_duration_seconds), and the doorbell's sleep
// sets s3queue_fleet_asleep. The subscription ends when the bus closes.
// Call it once per registry.
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
	case events.FleetWoken, events.InboxWoken:
		r.asleep.Set(0)
	}
	if !e.Kind.Known() {
		return // a kind this build does not know: no label of unbounded values
	}
	typ := ""
	if e.Type != "" {
		typ = r.typeLabel(e.Type)
	}
	r.events.WithLabelValues(string(e.Kind), typ).Inc()
	if e.Kind == events.Submitted {
		r.submitted.WithLabelValues(typ).Inc()
		return
	}
	if !attemptEnded(e) {
		return
	}
	r.attempts.WithLabelValues(typ, string(e.Kind)).Inc()
	if e.Duration > 0 {
		r.handler.WithLabelValues(typ, string(e.Kind)).Observe(e.Duration.Seconds())
	}
}

// attemptEnded reports whether e, published by a worker, ends one of its
// attempts: each claim (and each new attempt of a crashed handler's task
// requeued in place) ends in exactly one such event, so that the sum of
// s3queue_task_attempts_total over its labels is the number of attempts
// the worker ended. Retried follows a failed one and ends nothing; a lease
// lost while the handler ran is followed by the attempt's commit (its
// outcome, or outcome_rejected), so only a lease lost before the handler
// started (phase pending: no commit follows) ends the attempt. The
// monitor's and producer's dead and canceled end no attempt of theirs.
func attemptEnded(e events.Event) bool {
	if e.Source != events.SourceWorker {
		return false
	}
	switch e.Kind {
	case events.Succeeded, events.Failed, events.Dead, events.Snoozed, events.Canceled, events.Released,
		events.OutcomeRejected:
		return true
	case events.LeaseLost:
		return e.Phase == events.PhasePending
	}
	return false
}

// CountStore counts the requests of c in s3queue_s3_requests_total and
// s3queue_s3_request_duration_seconds. When billed, it also prices them
// (cost.S3Standard) in s3queue_s3_spend_dollars_total; a store whose
// requests cost nothing (file://, mem://) exports no spend, as the
// dashboard shows none for it. It takes c's request hook
// (s3store.Counter.OnRequest): call it once, before the store is used.
func (r *Registry) CountStore(c *s3store.Counter, billed bool) {
	if billed {
		r.dollars = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3queue_s3_spend_dollars_total",
			Help: "Estimated dollars of this process's S3 requests at S3 Standard list prices (the model of 's3queue cost').",
		})
		r.reg.MustRegister(r.dollars)
	}
	c.OnRequest(r.request)
}

// request records one S3 request.
func (r *Registry) request(op s3store.Op, outcome s3store.Outcome, d time.Duration) {
	r.requests.WithLabelValues(op.String(), outcome.String()).Inc()
	r.latency.WithLabelValues(op.String()).Observe(d.Seconds())
	// S3 bills refused conditional writes and 404s too, as cost.FromCounts.
	if p := r.prices.Per(op); p > 0 && r.dollars != nil {
		r.dollars.Add(p)
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
}

// ShardSnapshot counts one shard's tasks by status.
type ShardSnapshot struct {
	Shard                                                int
	Pending, Running, Blocked, Succeeded, Dead, Canceled int
	// AnyPending says the sweep found a pending task, and OldestPending
	// is then the age of the oldest (by S3 time).
	AnyPending    bool
	OldestPending time.Duration
}

// SetQueue replaces the queue-level gauges with s: s3queue_tasks and
// s3queue_queue_oldest_pending_seconds. A shard missing from s disappears
// from them, and from the second one a shard with no pending task. Only a
// process that calls it (the monitor) exports these gauges.
func (r *Registry) SetQueue(s QueueSnapshot) {
	r.stored.Reset()
	r.queueOldest.Reset()
	for _, sh := range s.Shards {
		shard := strconv.Itoa(sh.Shard)
		for _, v := range []struct {
			status string
			n      int
		}{{"pending", sh.Pending}, {"running", sh.Running}, {"blocked", sh.Blocked},
			{"succeeded", sh.Succeeded}, {"dead", sh.Dead}, {"canceled", sh.Canceled}} {
			r.stored.WithLabelValues(shard, v.status).Set(float64(v.n))
		}
		if sh.AnyPending {
			r.queueOldest.WithLabelValues(shard).Set(sh.OldestPending.Seconds())
		}
	}
}
