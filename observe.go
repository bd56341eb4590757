package s3queue

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/internal/metrics"
	"github.com/s3queue/s3queue/s3store/storeurl"
)

// Metrics are the Prometheus metrics of a process's s3queue services, as
// `s3queue worker --http` and `s3queue monitor --http` export them
// (docs/operations.md lists them): task outcomes and handler durations,
// S3 requests with their latency and estimated cost, a worker's dispatch
// queues, leases and fleet membership, and a monitor's view of the
// queue's depth.
//
// Give one to Config.Metrics: Open then counts the queue's requests (the
// store is wrapped in a counter) and feeds the metrics from the queue's
// event bus (Config.Events, or a bus Open makes when that is nil, never
// closed); the first worker NewWorker makes adds its gauges, and the
// first monitor NewMonitor makes its queue-level gauges, read at each
// scrape. Mount Handler at /metrics, or add Gatherer to a registry of
// your own. A Metrics serves one Queue. It sends no request of its own.
type Metrics struct {
	reg *metrics.Registry

	mu      sync.Mutex
	queue   bool     // a Queue has taken it
	worker  bool     // a worker's gauges are watched
	monitor *Monitor // the queue-level gauges' source, if any
}

// NewMetrics returns the metrics, at zero, for Config.Metrics.
func NewMetrics() *Metrics {
	return &Metrics{reg: metrics.New(metrics.Config{Version: moduleVersion()})}
}

// moduleVersion is this module's version in the program's build, for
// s3queue_build_info.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return ""
}

const modulePath = "github.com/s3queue/s3queue"

// Handler serves the metrics in the Prometheus text format, with the Go
// runtime's and the process's (go_*, process_*): mount it at GET /metrics.
// It holds no task data.
func (m *Metrics) Handler() http.Handler {
	scrape := m.reg.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.refresh()
		scrape.ServeHTTP(w, r)
	})
}

// Gatherer returns the s3queue_* metrics alone, for a service that
// exports metrics of its own and the Go runtime's already:
//
//	reg := prometheus.NewRegistry() // or prometheus.DefaultGatherer
//	h := promhttp.HandlerFor(prometheus.Gatherers{reg, m.Gatherer()}, promhttp.HandlerOpts{})
func (m *Metrics) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		m.refresh()
		all, err := m.reg.Gatherer().Gather()
		own := all[:0]
		for _, f := range all {
			if strings.HasPrefix(f.GetName(), "s3queue_") {
				own = append(own, f)
			}
		}
		return own, err
	})
}

// refresh sets the queue-level gauges from the monitor's state.
func (m *Metrics) refresh() {
	m.mu.Lock()
	mon := m.monitor
	m.mu.Unlock()
	if mon != nil {
		m.reg.SetQueue(metrics.Snapshot(mon.State()))
	}
}

// take claims m for a Queue.
func (m *Metrics) take() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queue {
		return errors.New("Config.Metrics serves another queue already: make one per Queue with NewMetrics")
	}
	m.queue = true
	return nil
}

// watchWorker adds w's gauges, unless a worker's are watched already.
func (m *Metrics) watchWorker(w *Worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.worker {
		m.worker = true
		m.reg.WatchWorker(w)
	}
}

// watchMonitor makes mon the source of the queue-level gauges, unless
// another monitor is.
func (m *Metrics) watchMonitor(mon *Monitor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.monitor == nil {
		m.monitor = mon
	}
}

// DashboardConfig configures Queue.Dashboard.
type DashboardConfig struct {
	// Token, if set, enables the dashboard's actions (requeue, cancel,
	// requeue the dead of a type) for requests that carry it
	// (Authorization: Bearer TOKEN), and its API's reads need it too.
	// Empty: the dashboard is read-only, and its reads are open. It never
	// appears in a response or a log line.
	Token string
	// Logger logs each action and each refused token (default
	// Config.Logger).
	Logger *slog.Logger
}

// Dashboard returns the web dashboard of `s3queue monitor --http`
// (docs/dashboard.md) over mon, a monitor of this queue, and the queue's
// task operations: an http.Handler to mount at / or, its paths being
// relative, under a prefix with http.StripPrefix:
//
//	mux.Handle("/s3queue/", http.StripPrefix("/s3queue", dash))
//
// A page view costs the bucket nothing (the monitor's state is in
// memory); a task's detail costs a GET. The newest dead tasks show when
// Config.Monitor.DeadList is set; the monitor's spend when the queue has
// Config.Metrics (which counts its requests) and an s3:// store. Unlike
// the command's server, it checks no Host header: put it behind the
// service's own access control, and set a Token before exposing it.
func (q *Queue) Dashboard(mon *Monitor, cfg DashboardConfig) (http.Handler, error) {
	if mon == nil {
		return nil, errors.New("s3queue: dashboard: nil monitor")
	}
	if cfg.Logger == nil {
		cfg.Logger = q.cfg.Logger
	}
	d, err := dashboard.New(dashboard.Config{State: mon, Tasks: q, Token: cfg.Token, NoSpend: q.noSpend(), Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("s3queue: %w", err)
	}
	return d, nil
}

// noSpend says why the queue's requests cost nothing, or "" if they are
// S3's (or the store was built in code, and may be).
func (q *Queue) noSpend() string {
	if q.cfg.Store == "" {
		return ""
	}
	spec, err := storeurl.Parse(q.cfg.Store)
	if err != nil || spec.Scheme == storeurl.SchemeS3 {
		return ""
	}
	return "a " + spec.Scheme + ":// store: its requests cost nothing (the spend shown for an s3:// store is the monitor's requests at S3 Standard prices)"
}
