package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/task"
)

// listeningAt waits for the "http listening" line in a command's log and
// returns the address it names.
func listeningAt(t *testing.T, stderr *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`msg="http listening".* addr=(\S+)`)
	var addr string
	waitFor(t, "the http listening line", func() bool {
		m := re.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sumSeries is what sum(name) returns over a scrape: its series, added.
func sumSeries(scrape, name string) float64 {
	var total float64
	for _, l := range strings.Split(scrape, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64); err == nil {
			total += f
		}
	}
	return total
}

// sample returns the value of the series line (name and labels, as the
// text format writes them) in a scrape, or -1.
func sample(scrape, series string) float64 {
	for _, l := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func TestWorkerServesMetricsAndEvents(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[handlers]\necho = \"cat\"\n")
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg, "--http", "127.0.0.1:0")
	base := "http://" + listeningAt(t, stderr)

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	// Subscribed once the headers are in: the task's events follow.
	resp, err := http.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("/events: %d, content type %q", resp.StatusCode, ct)
	}
	id := submit(t, store, cfg, "echo", "--input", `{"n":1}`)
	// Lines arrive as the worker publishes: its fleet events, then the
	// task's, each line one event in the form of --events.
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	timeout := time.After(20 * time.Second)
	for claimed := false; !claimed; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("/events ended before the task's claim")
			}
			var e events.Event
			if err := json.Unmarshal([]byte(line), &e); err != nil || !strings.HasSuffix(line, "}\n") {
				t.Fatalf("/events line %q: %v", line, err)
			}
			if e.Source != events.SourceWorker || e.Kind == "" || e.Time.IsZero() {
				t.Errorf("/events line %s: want a worker's event", line)
			}
			claimed = e.Kind == events.Claimed && e.TaskID == id && e.Type == "echo"
		case <-timeout:
			t.Fatalf("no claimed event for task %s on /events within 20s", id)
		}
	}
	if got := waitTerminal(t, store, id); got.Status != task.Succeeded {
		t.Fatalf("task %s", got.Status)
	}

	// Two more tasks: each attempt ends once in
	// s3queue_task_attempts_total, so its sum is the attempts the
	// worker made, not a count of every event of every task.
	more := []string{submit(t, store, cfg, "echo", "--input", `{"n":2}`), submit(t, store, cfg, "echo", "--input", `{"n":3}`)}
	for _, id := range more {
		if got := waitTerminal(t, store, id); got.Status != task.Succeeded {
			t.Fatalf("task %s", got.Status)
		}
	}

	// The outcomes reach the counters through the bus: wait for them.
	var scrape string
	waitFor(t, "the successes in /metrics", func() bool {
		_, scrape = httpGet(t, base+"/metrics")
		return sample(scrape, `s3queue_task_attempts_total{outcome="succeeded",type="echo"}`) == 3
	})
	if got := sumSeries(scrape, "s3queue_task_attempts_total"); got != 3 {
		t.Errorf("sum(s3queue_task_attempts_total) = %v, want 3: three tasks, one attempt each\n%s", got, scrape)
	}
	for series, want := range map[string]float64{
		`s3queue_events_total{kind="claimed",type="echo"}`:                        3,
		`s3queue_events_total{kind="started",type="echo"}`:                        3,
		`s3queue_events_total{kind="succeeded",type="echo"}`:                      3,
		`s3queue_handler_duration_seconds_count{outcome="succeeded",type="echo"}`: 3,
	} {
		if got := sample(scrape, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for series, min := range map[string]float64{
		// The claims and the commits at least, and the listings.
		`s3queue_s3_requests_total{op="PUT",outcome="ok"}`:    6,
		`s3queue_s3_requests_total{op="LIST",outcome="ok"}`:   1,
		`s3queue_s3_request_duration_seconds_count{op="PUT"}`: 6,
		`s3queue_dispatch_in_flight{pool="default"}`:          0,
		`s3queue_dispatch_wait_seconds_count{pool="default"}`: 3,
		`s3queue_lease_renewals_total{outcome="ok"}`:          0,
		`s3queue_fleet_member`:                                0,
	} {
		if got := sample(scrape, series); got < min {
			t.Errorf("%s = %v, want at least %v", series, got, min)
		}
	}
	// The worker submitted nothing itself ('s3queue submit' did).
	if strings.Contains(scrape, "s3queue_tasks_submitted_total{") {
		t.Errorf("the worker counts submits it never made:\n%s", scrape)
	}
	// A file:// store's requests cost nothing: no spend, as the
	// dashboard shows none.
	if strings.Contains(scrape, "s3queue_s3_spend") {
		t.Errorf("a file:// store's worker exports a spend:\n%s", scrape)
	}
	build := regexp.MustCompile(`(?m)^s3queue_build_info\{goversion="go[^"]+",version="[^"]+"\} 1$`)
	if !build.MatchString(scrape) {
		t.Errorf("no s3queue_build_info in the scrape:\n%s", scrape)
	}

	if code := stop(); code != 0 {
		t.Errorf("worker exit %d; stderr:\n%s", code, stderr)
	}
	// The stream ended with the worker.
	for ended := false; !ended; {
		select {
		case _, ok := <-lines:
			ended = !ok
		case <-time.After(20 * time.Second):
			t.Fatal("/events still open 20s after the worker stopped")
		}
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("/healthz still answers after the worker stopped")
	}
}

func TestWorkerHTTPListenFailure(t *testing.T) {
	store, _ := newStore(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct{ addr, want string }{
		{busy.Addr().String(), "address already in use"},
		{"no-port", "missing port"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			r := cli(t, "", "worker", "--store", store, "--exec", "x=true", "--http", tc.addr)
			wantExit(t, r, exitUsage, "worker: --http "+tc.addr+": ")
			if !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("stderr %q: want one line saying %q", r.stderr, tc.want)
			}
		})
	}
}

// The monitor's /metrics, as a user reads it: s3queue_tasks counts the
// stored tasks by status (summed, the tasks in the queue), the oldest
// pending age exists while a task waits and goes once none does, and a
// file:// store has no spend.
func TestMonitorServesTaskGauges(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[monitor]\ninterval = \"100ms\"\n")
	ids := []string{submit(t, store, cfg, "echo"), submit(t, store, cfg, "echo"), submit(t, store, cfg, "echo")}
	stderr, _ := background(t, "monitor", "--store", store, "--config", cfg, "--metrics-http", "127.0.0.1:0")
	base := "http://" + listening(t, stderr, 1)["/metrics /healthz"]

	var scrape string
	waitFor(t, "the three pending tasks in /metrics", func() bool {
		_, scrape = httpGet(t, base+"/metrics")
		return sumSeries(scrape, "s3queue_tasks") == 3
	})
	if got := sumSeries(scrape, `s3queue_tasks{shard="0",status="pending"}`); got != 3 {
		t.Errorf("pending tasks %v, want 3:\n%s", got, scrape)
	}
	if !strings.Contains(scrape, "s3queue_queue_oldest_pending_seconds{") {
		t.Errorf("no oldest-pending age while three tasks wait:\n%s", scrape)
	}
	for _, gone := range []string{"s3queue_queue_depth", "s3queue_queue_dead_tasks", "s3queue_s3_spend", "s3queue_tasks_total"} {
		if strings.Contains(scrape, gone) {
			t.Errorf("the monitor exports %s", gone)
		}
	}
	if !strings.Contains(scrape, "s3queue_build_info{") {
		t.Errorf("no s3queue_build_info:\n%s", scrape)
	}

	// A worker runs them: the stored tasks are the same three, succeeded,
	// and no task waits, so no shard has an age.
	background(t, "worker", "--store", store, "--config", cfg, "--exec", "echo=cat")
	for _, id := range ids {
		waitTerminal(t, store, id)
	}
	waitFor(t, "the three succeeded tasks in /metrics", func() bool {
		_, scrape = httpGet(t, base+"/metrics")
		return sumSeries(scrape, `s3queue_tasks{shard="0",status="succeeded"}`) == 3
	})
	if got := sumSeries(scrape, "s3queue_tasks"); got != 3 {
		t.Errorf("sum(s3queue_tasks) = %v, want 3 stored tasks:\n%s", got, scrape)
	}
	if strings.Contains(scrape, "s3queue_queue_oldest_pending_seconds{") {
		t.Errorf("an oldest-pending age with no pending task (a sentinel):\n%s", scrape)
	}
}
