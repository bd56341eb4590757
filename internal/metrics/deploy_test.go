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
	r := New()
	r.Observe(events.Event{Kind: events.Succeeded, Type: "x", Duration: time.Second})
	r.Observe(events.Event{Kind: events.FleetAsleep})
	c := s3store.NewCounter(mem.New())
	r.CountStore(c)
	if _, err := c.Head(t.Context(), "k"); err == nil {
		t.Fatal("head of a missing key succeeded")
	}
	r.SetQueue(QueueSnapshot{Dead: 1, Shards: []ShardSnapshot{{Shard: 0, Pending: 1}}})
	r.WatchWorker(&fakeWorker{states: []worker.QueueState{{Pool: "default"}},
		wait: map[string]worker.Histogram{"default": {Bounds: []float64{1}, Counts: []uint64{0, 0}}}, assign: shards.Assignment{}})
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		n := f.GetName()
		if !strings.HasPrefix(n, "s3queue_") {
			continue
		}
		names[n] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
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
		for _, n := range []string{"s3queue_tasks_total", "s3queue_handler_duration_seconds_bucket", "s3queue_queue_depth",
			"s3queue_queue_oldest_pending_seconds", "s3queue_queue_dead_tasks", "s3queue_leases_lost_total",
			"s3queue_s3_requests_total", "s3queue_s3_spend_dollars_per_hour"} {
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
		doc := read("../../docs/operations.md")
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
	})
}
