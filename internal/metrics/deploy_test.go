package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// exported returns every s3queue_ series name a registry exports once
// everything that feeds it has happened (a histogram by its _bucket,
// _sum and _count too), and the families by name.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, f := range exportedFamilies(t) {
		n := f.GetName()
		names[n] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
}

// exportedFamilies returns the s3queue_ families of a registry fed with
// everything that feeds it (a worker's events and gauges, a billed
// store's requests, a monitor's sweep).
func exportedFamilies(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	r := New(Config{Version: "v0.0.0-test"})
	r.Observe(events.Event{Kind: events.Submitted, Source: events.SourceProducer, Type: "x"})
	r.Observe(events.Event{Kind: events.Succeeded, Source: events.SourceWorker, Type: "x", Duration: time.Second})
	r.Observe(events.Event{Kind: events.FleetAsleep, Source: events.SourceWorker})
	c := s3store.NewCounter(mem.New())
	r.CountStore(c, true)
	if _, err := c.Head(t.Context(), "k"); err == nil {
		t.Fatal("head of a missing key succeeded")
	}
	r.SetQueue(QueueSnapshot{Shards: []ShardSnapshot{{Shard: 0, Pending: 1, AnyPending: true, OldestPending: time.Second}}})
	r.WatchWorker(&fakeWorker{states: []worker.QueueState{{Pool: "default", MaxInFlight: 4}, {Pool: "io", MaxInFlight: worker.Unbounded}},
		wait: map[string]worker.Histogram{"default": {Bounds: []float64{1}, Counts: []uint64{0, 0}}}, assign: shards.Assignment{}})
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.MetricFamily
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "s3queue_") {
			out = append(out, f)
		}
	}
	return out
}

// labels is every label name the metrics use, and the one thing each
// names: a label means the same wherever it appears, and one thing has
// one label name (no result beside outcome, no kind of event called an
// outcome).
var labels = map[string]string{
	"type":       "a task's type (capped: other)",
	"outcome":    "how an attempt, a request or a renewal ended",
	"kind":       "an event's kind",
	"subscriber": "an event subscriber of the process",
	"op":         "an S3 operation",
	"pool":       "a worker's dispatch pool",
	"shard":      "a shard of the queue",
	"status":     "a task's status",
	"version":    "the s3queue version",
	"goversion":  "the Go version of the build",
}

// Prometheus practice, checked on what a scrape shows: counters end in
// _total and gauges do not, every label is one of labels, and no series
// holds a sentinel (a negative gauge for "unbounded", say).
func TestMetricsFollowPrometheusPractice(t *testing.T) {
	for _, f := range exportedFamilies(t) {
		n := f.GetName()
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(n, "_total") {
				t.Errorf("counter %s does not end in _total", n)
			}
		case dto.MetricType_GAUGE:
			if strings.HasSuffix(n, "_total") {
				t.Errorf("gauge %s ends in _total", n)
			}
			if strings.Contains(n, "_per_") {
				t.Errorf("gauge %s is a rate: export a counter and let PromQL's rate() compute it", n)
			}
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if _, ok := labels[l.GetName()]; !ok {
					t.Errorf("%s has a label %q the metrics do not otherwise use", n, l.GetName())
				}
			}
			if g := m.GetGauge(); g != nil && g.GetValue() < 0 {
				t.Errorf("%s%v = %v: a sentinel", n, m.Label, g.GetValue())
			}
		}
	}
	// The unbounded pool has no bound to show.
	for _, f := range exportedFamilies(t) {
		if f.GetName() == "s3queue_dispatch_max_in_flight" && len(f.Metric) != 1 {
			t.Errorf("s3queue_dispatch_max_in_flight has %d series, want 1: the unbounded pool has none", len(f.Metric))
		}
	}
}

var metricName = regexp.MustCompile(`\bs3queue_[a-z0-9_]+`)

// The dashboard and the alert rules in deploy/ name only metrics the
// registry exports, and docs/operations.md documents exactly those: a
// renamed metric fails here, not in an operator's empty panel.
func TestDeployAndDocsNameExportedMetrics(t *testing.T) {
	names := exported(t)
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	check := func(what string, refs []string) {
		t.Helper()
		if len(refs) == 0 {
			t.Errorf("%s names no s3queue metric", what)
		}
		for _, n := range refs {
			if !names[n] {
				t.Errorf("%s names %s, which the registry does not export", what, n)
			}
		}
	}

	t.Run("grafana dashboard", func(t *testing.T) {
		var dash struct {
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Type    string `json:"type"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal([]byte(read("../../deploy/grafana/s3queue-dashboard.json")), &dash); err != nil {
			t.Fatalf("the dashboard is not valid JSON: %v", err)
		}
		var refs []string
		panels := map[string]bool{}
		for _, p := range dash.Panels {
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				found := metricName.FindAllString(tg.Expr, -1)
				if len(found) == 0 {
					t.Errorf("panel %q: query %q names no s3queue metric", p.Title, tg.Expr)
				}
				refs = append(refs, found...)
				for _, n := range found {
					panels[n] = true
				}
			}
		}
		check("the dashboard", refs)
		// The panels the operations guide promises.
		for _, n := range []string{"s3queue_task_attempts_total", "s3queue_tasks_submitted_total", "s3queue_handler_duration_seconds_bucket",
			"s3queue_tasks", "s3queue_queue_oldest_pending_seconds", "s3queue_leases_lost_total",
			"s3queue_s3_requests_total", "s3queue_s3_spend_dollars_total"} {
			if !panels[n] {
				t.Errorf("no panel of the dashboard shows %s", n)
			}
		}
	})
	t.Run("alert rules", func(t *testing.T) {
		text := read("../../deploy/prometheus/alerts.yml")
		var refs []string
		for _, l := range strings.Split(text, "\n") {
			if e, ok := strings.CutPrefix(strings.TrimSpace(l), "expr:"); ok {
				refs = append(refs, metricName.FindAllString(e, -1)...)
			}
		}
		check("alerts.yml", refs)
		if n := strings.Count(text, "- alert:"); n < 4 {
			t.Errorf("%d alert rules, want at least 4 (oldest pending, dead rising, lease losses, spend)", n)
		}
	})
	t.Run("operations guide", func(t *testing.T) {
		doc, changelog, ok := strings.Cut(read("../../docs/operations.md"), "\n## Changelog\n")
		if !ok {
			t.Fatal("docs/operations.md has no Changelog section")
		}
		check("docs/operations.md", metricName.FindAllString(doc, -1))
		var missing []string
		for n := range names {
			if !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") &&
				!strings.Contains(doc, "`"+n+"`") {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("docs/operations.md does not document %v", missing)
		}
		// The changelog's rows name an old metric (exported no more, or
		// with other series) and what replaced it (exported), or none.
		if i := strings.Index(changelog, "\n## "); i >= 0 {
			changelog = changelog[:i]
		}
		rows := 0
		for _, l := range strings.Split(changelog, "\n") {
			cells := strings.Split(l, "|")
			if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "old" {
				continue
			}
			rows++
			for _, n := range metricName.FindAllString(cells[1], -1) {
				// A metric still exported changed its series: the new
				// cell names it again, or says which series went.
				if names[n] && !strings.Contains(cells[2], n) && !strings.Contains(cells[2], "no series") {
					t.Errorf("the changelog lists %s as old, but it is exported", n)
				}
			}
			for _, n := range metricName.FindAllString(cells[2], -1) {
				if !names[n] {
					t.Errorf("the changelog replaces with %s, which is not exported", n)
				}
			}
		}
		if rows < 5 {
			t.Errorf("the changelog has %d rows, want one per change (at least 5)", rows)
		}
	})
}
