package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// Worker is what the registry reads from a worker at scrape time;
// *worker.Worker has it.
type Worker interface {
	QueueStates() []worker.QueueState
	QueueWait() map[string]worker.Histogram
	Member() (bool, shards.Assignment)
	Stats() worker.Stats
}

var _ Worker = (*worker.Worker)(nil)

// WatchWorker exports w's dispatch queues, task lease renewals and
// losses, and fleet membership, read from it at each scrape (a read of
// its counters under its pools' locks; no request). Call it once per
// registry.
func (r *Registry) WatchWorker(w Worker) {
	r.reg.MustRegister(&workerCollector{w: w})
}

var (
	descInFlight = prometheus.NewDesc("s3queue_dispatch_in_flight",
		"Handlers running in the worker's pool.", []string{"pool"}, nil)
	descPending = prometheus.NewDesc("s3queue_dispatch_pending",
		"Tasks the worker's pool claimed that wait for a handler.", []string{"pool"}, nil)
	descWaiting = prometheus.NewDesc("s3queue_dispatch_waiting",
		"Tasks found due by the pool's last poll and not accepted (no room).", []string{"pool"}, nil)
	descMaxInFlight = prometheus.NewDesc("s3queue_dispatch_max_in_flight",
		"The pool's bound on running handlers (no series: unbounded).", []string{"pool"}, nil)
	descWait = prometheus.NewDesc("s3queue_dispatch_wait_seconds",
		"Time from discovery (listing) to dispatch (a handler starts), by pool.", []string{"pool"}, nil)
	descRenewals = prometheus.NewDesc("s3queue_lease_renewals_total",
		"Task lease renewals by outcome: ok (written), error (a request failed; retried before the lease runs out).", []string{"outcome"}, nil)
	descLost = prometheus.NewDesc("s3queue_leases_lost_total",
		"Task leases this worker lost: its handler was canceled (or the claimed task never started) and another worker may run the task.", nil, nil)
	descMember = prometheus.NewDesc("s3queue_fleet_member",
		"1 while the worker is a member of the fleet (polls shards of its own), 0 while it stands by.", nil, nil)
	descOwned = prometheus.NewDesc("s3queue_fleet_shards_owned",
		"Active shards the worker polls at full speed as a fleet member.", nil, nil)
	descDraining = prometheus.NewDesc("s3queue_fleet_shards_draining",
		"Inactive shards the worker sweeps slowly for leftovers.", nil, nil)
)

type workerCollector struct{ w Worker }

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descPending, descWaiting, descMaxInFlight, descWait,
		descRenewals, descLost, descMember, descOwned, descDraining} {
		ch <- d
	}
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range c.w.QueueStates() {
		gauge(descInFlight, float64(s.InFlight), s.Pool)
		gauge(descPending, float64(s.Pending), s.Pool)
		gauge(descWaiting, float64(s.Waiting), s.Pool)
		if s.MaxInFlight >= 0 { // worker.Unbounded: no series
			gauge(descMaxInFlight, float64(s.MaxInFlight), s.Pool)
		}
	}
	for pool, h := range c.w.QueueWait() {
		ch <- waitHistogram(h, pool)
	}
	st := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(st.Renewed), "ok")
	ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(st.RenewFailed), "error")
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(st.LeaseLost))
	member, a := c.w.Member()
	m := 0.0
	if member {
		m = 1
	}
	gauge(descMember, m)
	gauge(descOwned, float64(len(a.Own)))
	gauge(descDraining, float64(len(a.Drain)))
}

// waitHistogram converts a pool's wait histogram (milliseconds, a count
// per bucket and one for the overflow) to Prometheus's (seconds,
// cumulative counts).
func waitHistogram(h worker.Histogram, pool string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		buckets[b/float64(time.Second/time.Millisecond)] = cum
	}
	return prometheus.MustNewConstHistogram(descWait, h.Count, h.SumMs/1000, buckets, pool)
}
