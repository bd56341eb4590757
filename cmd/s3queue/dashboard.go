package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/metrics"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/task"
)

// dashboardFlags are the monitor's dashboard flags.
type dashboardFlags struct {
	addr, tokenFile *string
}

// tokenEnv names the environment variable that may hold the dashboard's
// action token (the alternative to --token-file). There is no --token flag:
// a flag's value shows in ps and in shell histories.
const tokenEnv = config.EnvDashboardToken

// deadListSize is how many of the most recent dead tasks a monitor serving
// the dashboard keeps (one GET each, once).
const deadListSize = 500

func defineDashboardFlags(fs *flag.FlagSet) dashboardFlags {
	return dashboardFlags{
		addr: fs.String("http", "", "serve the dashboard, /metrics, /healthz and /events on `ADDR` (host:port, e.g. 127.0.0.1:8080; docs/dashboard.md)"),
		tokenFile: fs.String("token-file", "", "read the dashboard's action token from `FILE` (or set "+tokenEnv+
			"); without a token the dashboard is read-only"),
	}
}

// minTokenBytes is the shortest action token the dashboard accepts: the
// token is all that stands between the network and requeue, cancel and
// purge, and a short one is guessed (the dashboard does not rate-limit).
// 16 bytes of hex or base64 is 64 bits or more of a random token.
const minTokenBytes = 16

// dashboardToken reads the action token: from --token-file, else from
// S3QUEUE_DASHBOARD_TOKEN, else none. A token shorter than minTokenBytes
// is refused. Errors never quote the token, nor say its length.
func (a *app) dashboardToken(f dashboardFlags) (string, error) {
	token, from, err := a.readDashboardToken(f)
	if err != nil || token == "" {
		return token, err
	}
	if len(token) < minTokenBytes {
		return "", usageError("monitor: the dashboard token (%s) is too short: it must be at least %d bytes; make one with `openssl rand -hex 32`", from, minTokenBytes)
	}
	return token, nil
}

// readDashboardToken is dashboardToken's token as given, and where it came
// from (for errors).
func (a *app) readDashboardToken(f dashboardFlags) (token, from string, err error) {
	env := ""
	for _, kv := range a.environ() {
		if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok {
			env = v
		}
	}
	if *f.addr == "" {
		if *f.tokenFile != "" {
			return "", "", usageError("monitor: --token-file needs --http (the token is the dashboard's)")
		}
		return "", "", nil
	}
	if *f.tokenFile == "" {
		return strings.TrimSpace(env), tokenEnv, nil
	}
	b, err := os.ReadFile(*f.tokenFile)
	if err != nil {
		return "", "", usageError("monitor: --token-file: %v", err)
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		return "", "", usageError("monitor: --token-file %s is empty", *f.tokenFile)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", "", usageError("monitor: --token-file %s holds more than one line", *f.tokenFile)
	}
	return token, "--token-file " + *f.tokenFile, nil
}

// monitorMux is the monitor's HTTP interface: processMux's /metrics
// (with the queue-level gauges read from the monitor's state at each
// scrape, no request), /healthz and /events, and the dashboard on every
// other path.
func (a *app) monitorMux(reg *metrics.Registry, bus *events.Bus, m *monitor.Monitor, tasks dashboard.Tasks, token string) (http.Handler, error) {
	d, err := dashboard.New(dashboard.Config{State: m, Tasks: tasks, Token: token, Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	mux := processMux(reg, bus, func() { reg.SetQueue(queueSnapshot(m.State())) })
	mux.Handle("/", d)
	a.log.Info("dashboard", "actions", token != "")
	return mux, nil
}

// queueSnapshot turns the monitor's state into the queue-level gauges.
func queueSnapshot(s monitor.State) metrics.QueueSnapshot {
	var q metrics.QueueSnapshot
	for _, sh := range s.Shards {
		c := sh.Counts
		q.Shards = append(q.Shards, metrics.ShardSnapshot{
			Shard: sh.Shard, Pending: c[task.Pending], Running: c[task.Running], Blocked: c[task.Blocked],
			Succeeded: c[task.Succeeded], Dead: c[task.Dead], Canceled: c[task.Canceled],
			OldestPending: time.Duration(sh.OldestPendingSecs * float64(time.Second)),
		})
		q.Dead += c[task.Dead]
	}
	return q
}
