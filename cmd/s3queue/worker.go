package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/metrics"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

var workerCommand = &command{
	name: "worker", nargs: 0,
	summary: "run tasks as external commands until SIGTERM/SIGINT",
	examples: []string{
		`s3queue worker --exec resize="./resize.sh" --concurrency 8`,
		"s3queue worker --config queue.toml --pool slow=2:report,export --events -",
		`s3queue --log-level debug worker --exec mail.send="python3 send.py" --rate-limit mail.send=5/s`,
	},
	details: "Handlers come from [handlers] in queue.toml and from --exec (which wins for the same type).\n" +
		"Each task runs as /bin/sh -c COMMAND in its own process group: the input on stdin, stdout\n" +
		"becomes the result (JSON, or a JSON string otherwise), and on failure the last 2 KiB of\n" +
		"stderr become the task's error. Exit 0 succeeds; exit 75 (a snooze) runs the task again\n" +
		"without using an attempt, after its retry policy's delay for the snooze's number (1s, 2s,\n" +
		"4s ... up to retry_max; from the 51st snooze on, each uses an attempt); any other status\n" +
		"fails the attempt. The command sees S3QUEUE_TASK_ID, S3QUEUE_ATTEMPT (the same after a\n" +
		"snooze), S3QUEUE_SNOOZES (the snoozes before this run) and S3QUEUE_TASK_TYPE, and the\n" +
		"worker's environment without its credentials (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,\n" +
		"MINIO_ROOT_PASSWORD, ...; docs/security.md), or with --handler-env only the variables it\n" +
		"names. At the task's timeout, or when the task is canceled or its lease lost, the group\n" +
		"gets SIGTERM and 3s\n" +
		"later SIGKILL. On SIGTERM/SIGINT the worker stops claiming and waits shutdown_grace for\n" +
		"running tasks, then stops them and hands them back; a second signal exits at once and\n" +
		"kills the running commands' process groups. A worker that creates the queue checks the\n" +
		"provider first (exit 4 if it is unsupported); later ones trust the queue's manifest.\n" +
		"--events FILE appends the worker's events (claimed, succeeded, failed, shard_acquired, ...)\n" +
		"to FILE as JSON lines (- for stdout); see docs/events.md. --http ADDR serves /events (the\n" +
		"same JSON lines, live; behind the token of --token-file or " + tokenEnv + ",\n" +
		"if one is given), /metrics (Prometheus) and /healthz on ADDR; --metrics-http ADDR serves\n" +
		"the last two apart; see docs/operations.md and docs/security.md.\n" +
		"--rate-limit TYPE=N/INTERVAL starts at most N tasks of TYPE per INTERVAL fleet-wide (every\n" +
		"worker running TYPE must set the same limit); tasks over it wait, pending; see\n" +
		"docs/scheduling.md#rate-limits.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		eventsTo := eventsFlag(fs)
		a.keyFlag(fs, "concurrency", "worker.concurrency", "run `N` handlers at once in each pool that sets no max_in_flight (wins over [worker] concurrency and S3QUEUE_WORKER_CONCURRENCY)")
		httpf := a.defineHTTPFlags(fs, "worker", "/events, and /metrics and /healthz unless --metrics-http,")
		execs := map[string]string{}
		fs.Func("exec", "run `TYPE=COMMAND` for tasks of TYPE (repeatable)", func(v string) error {
			typ, cmd, ok := strings.Cut(v, "=")
			typ = strings.TrimSpace(typ)
			if !ok || strings.TrimSpace(cmd) == "" {
				return fmt.Errorf("want TYPE=COMMAND, got %q", v)
			}
			if err := task.ValidType(typ); err != nil {
				return err
			}
			execs[typ] = cmd
			return nil
		})
		// nil: handlers inherit the environment but its credentials.
		var allowEnv []string
		fs.Func("handler-env", "pass handlers only the variables `NAME,...` of the worker's environment (NAME or PREFIX*,\n"+
			"repeatable: \"PATH,HOME,LANG,LC_*\"); credentials never pass (docs/security.md)", func(v string) error {
			names, err := parseHandlerEnv(v)
			if err != nil {
				return err
			}
			allowEnv = append(allowEnv, names...)
			if allowEnv == nil {
				allowEnv = []string{}
			}
			return nil
		})
		var pools []worker.Pool
		fs.Func("pool", "run tasks of `NAME=N[:TYPE,...]` in a pool of their own with N handlers at most\n"+
			"(N as pools.NAME.max_in_flight: 0 or unbounded for none, auto for --concurrency; types: NAME\n"+
			"alone unless listed; repeatable; wins over [pools.NAME] in queue.toml)", func(v string) error {
			p, err := parsePoolFlag(v)
			if err != nil {
				return err
			}
			pools = append(pools, p)
			return nil
		})
		rateLimits := map[string]worker.RateLimit{}
		fs.Func("rate-limit", "start at most `TYPE=N/INTERVAL` tasks of TYPE per INTERVAL, fleet-wide (\"weather=100/1m\",\n"+
			"\"mail=5/s\"; repeatable; wins over [rate_limits] in queue.toml)", func(v string) error {
			typ, limit, ok := strings.Cut(v, "=")
			typ = strings.TrimSpace(typ)
			if !ok {
				return fmt.Errorf("want TYPE=N/INTERVAL, got %q", v)
			}
			if err := task.ValidType(typ); err != nil {
				return err
			}
			l, err := worker.ParseRateLimit(limit)
			if err != nil {
				return err
			}
			rateLimits[typ] = l
			return nil
		})
		return func(ctx context.Context, _ []string) error {
			handlers := map[string]string{}
			for typ, cmd := range a.cfg.Handlers {
				handlers[typ] = cmd
			}
			for typ, cmd := range execs {
				handlers[typ] = cmd
			}
			if len(handlers) == 0 {
				return usageError("worker: no handlers: pass --exec TYPE=COMMAND or add a [handlers] table to queue.toml")
			}
			// Before any command runs: a handler must not read the
			// credentials from the worker's own environment instead.
			if err := hideEnviron(); err != nil {
				a.log.Warn("worker: cannot hide its environment from handlers", "error", err)
			}
			hl, err := a.listenHTTP("worker", httpf)
			if err != nil {
				return err
			}
			defer hl.close()
			bus, closeEvents, err := a.openBus(*eventsTo, hl.any())
			if err != nil {
				return err
			}
			defer closeEvents()
			st, url, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			wcfg := a.cfg.Worker()
			wcfg.Logger = a.log
			if wcfg.Local, err = a.localClock(); err != nil {
				return err
			}
			wcfg.Pools = mergePools(wcfg.Pools, pools)
			warnIdlePools(a.log, pools, handlers)
			if len(rateLimits) > 0 && wcfg.RateLimits == nil {
				wcfg.RateLimits = map[string]worker.RateLimit{}
			}
			maps.Copy(wcfg.RateLimits, rateLimits)
			if err := worker.CheckPools(wcfg); err != nil {
				return usageError("worker: %v", err)
			}
			var reg *metrics.Registry
			if hl.any() {
				// Every request of the worker is counted and priced
				// for /metrics: the counter wraps the store it uses.
				counter := s3store.NewCounter(st)
				st = counter
				reg = metrics.New(metrics.Config{Version: versionString()})
				reg.CountStore(counter, noSpend(url) == "")
			}
			wcfg.Events = bus
			stopHTTP := func() {}
			if reg != nil {
				reg.Subscribe(bus)
				stopHTTP = a.serve(ctx, hl, reg, bus, nil, nil)
				defer stopHTTP()
			}
			w, err := worker.New(ctx, st, wcfg)
			if err != nil {
				return unsupported(url, err)
			}
			if reg != nil {
				reg.WatchWorker(w)
			}
			env := newHandlerEnv(a.environ(), allowEnv)
			types := make([]string, 0, len(handlers))
			for typ, cmd := range handlers {
				h := execHandler{typ: typ, command: cmd, log: a.log, max: w.MaxResultBytes(), env: &env}
				w.Handle(typ, h.handle)
				types = append(types, typ)
			}
			sort.Strings(types)
			a.log.Info("worker started", "store", url, "worker_id", w.ID(), "types", strings.Join(types, ","),
				"concurrency", wcfg.Concurrency, "pools", describePools(w.QueueStates()), "dispatch", wcfg.DispatchMode,
				"rate_limits", describeRateLimits(wcfg.RateLimits))
			// The line an operator (or a container runtime's log) sees
			// between SIGTERM and "worker stopped": how much is still
			// running and how long the worker will wait for it, which
			// is what a stop timeout must cover (deploy/k8s, deploy/systemd).
			stopDrain := context.AfterFunc(ctx, func() {
				running := 0
				for _, q := range w.QueueStates() {
					running += q.InFlight
				}
				a.log.Info("worker draining: no new claims; waiting for running tasks", "worker_id", w.ID(),
					"running", running, "shutdown_grace", wcfg.ShutdownGrace)
			})
			err = w.Run(ctx)
			stopDrain()
			if errors.Is(err, s3store.ErrUnusable) {
				err = unusable(url, err)
			}
			if cerr := closeEvents(); err == nil {
				err = cerr
			}
			stopHTTP() // after the bus: the /events streams have ended
			s := w.Stats()
			a.log.Info("worker stopped", "worker_id", w.ID(), "claimed", s.Claimed, "succeeded", s.Succeeded,
				"failed", s.Failed, "dead", s.Dead, "snoozed", s.Snoozed, "canceled", s.Canceled,
				"lease_lost", s.LeaseLost, "released", s.Released, "refused", s.Refused, "dropped", s.Dropped,
				"requeued", s.Requeued)
			return err
		}
	},
}

// describeRateLimits lists limits as TYPE=N/INTERVAL, sorted ("none" if
// there are none).
func describeRateLimits(limits map[string]worker.RateLimit) string {
	if len(limits) == 0 {
		return "none"
	}
	var out []string
	for _, typ := range slices.Sorted(maps.Keys(limits)) {
		out = append(out, typ+"="+limits[typ].String())
	}
	return strings.Join(out, " ")
}

// parsePoolFlag parses --pool NAME=N[:TYPE,...]. N is read as queue.toml's
// pools.NAME.max_in_flight is (settings.Of[worker.Pool]()), so it means the same in
// the flag and the file: a positive bound, 0 or "unbounded" for none, or
// "auto" for worker.concurrency.
func parsePoolFlag(v string) (worker.Pool, error) {
	name, rest, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return worker.Pool{}, fmt.Errorf("want NAME=N[:TYPE,...], got %q", v)
	}
	n, types, _ := strings.Cut(rest, ":")
	p := worker.Pool{Name: name}
	bound := settings.Of[worker.Pool]().Bind(&p)
	i := slices.IndexFunc(bound.Keys, func(b settings.Bound) bool { return b.Name == settings.Of[worker.Pool]().Name+".max_in_flight" })
	if err := bound.Keys[i].SetText(n); err != nil {
		return worker.Pool{}, fmt.Errorf("pool %s: %w", name, err)
	}
	if types != "" {
		for _, typ := range strings.Split(types, ",") {
			typ = strings.TrimSpace(typ)
			if err := task.ValidType(typ); err != nil {
				return worker.Pool{}, fmt.Errorf("pool %s: %w", name, err)
			}
			p.Types = append(p.Types, typ)
		}
	}
	return p, nil
}

// warnIdlePools warns about each type of the --pool flags that the worker
// has no handler for: the pool would stay idle, its tasks claimed by no
// worker that lacks the handler (most likely a misspelt type, or an
// --exec left out). The pools of queue.toml are not warned about: a file
// shared by workers of different handlers names types some do not run.
func warnIdlePools(log *slog.Logger, flags []worker.Pool, handlers map[string]string) {
	for _, p := range flags {
		types := p.Types
		if len(types) == 0 {
			types = []string{p.Name}
		}
		for _, typ := range types {
			if _, ok := handlers[typ]; !ok {
				log.Warn(fmt.Sprintf("--pool %s: type %q has no handler (no --exec %s=COMMAND nor [handlers] %s): this worker claims no task of it", p.Name, typ, typ, typ),
					"pool", p.Name, "type", typ)
			}
		}
	}
}

// mergePools applies the --pool flags to the pools of queue.toml: a flag
// naming a pool there sets its handlers (and its types, if it lists any).
func mergePools(file, flags []worker.Pool) []worker.Pool {
	out := append([]worker.Pool(nil), file...)
	for _, f := range flags {
		i := slices.IndexFunc(out, func(p worker.Pool) bool { return p.Name == f.Name })
		if i < 0 {
			out = append(out, f)
			continue
		}
		out[i].MaxInFlight = f.MaxInFlight
		if len(f.Types) > 0 {
			out[i].Types = f.Types
		}
	}
	return out
}

// describePools says, for the start-up line, each pool's handlers and
// policy.
func describePools(states []worker.QueueState) string {
	var b strings.Builder
	for i, s := range states {
		if i > 0 {
			b.WriteString(" ")
		}
		limit := "unbounded"
		if s.MaxInFlight != worker.Unbounded {
			limit = strconv.Itoa(s.MaxInFlight)
		}
		fmt.Fprintf(&b, "%s=%s/%s", s.Pool, limit, s.QueuePolicy)
	}
	return b.String()
}

var monitorCommand = &command{
	name: "monitor", nargs: 0,
	summary: "re-dispatch expired leases, repair lost tasks, apply retention, until SIGTERM/SIGINT",
	examples: []string{
		"s3queue monitor --store s3://my-bucket/queue",
		"s3queue monitor --config queue.toml --events /var/log/s3queue-monitor.jsonl",
	},
	details: "Sweeps every shard each [monitor] interval. Several monitors may run at once. A monitor that\n" +
		"creates the queue checks the provider first (exit 4 if it is unsupported); later ones trust\n" +
		"the queue's manifest. --events FILE appends what it does to tasks (redispatched, dead,\n" +
		"repaired, deleted, corrupt) to FILE as JSON lines (- for stdout); see docs/events.md.\n" +
		"--http ADDR serves the dashboard (docs/dashboard.md): read-only and open unless a token is\n" +
		"given by --token-file FILE or " + tokenEnv + "; with one, its actions and\n" +
		"its reads need it.\n" +
		"Unless [monitor] scheduler = false, it submits the tasks of the queue's schedules, one per tick\n" +
		"fleet-wide; it first writes queue.toml's [[schedule]] tables where the bucket's differ\n" +
		"(docs/scheduling.md).",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		eventsTo := eventsFlag(fs)
		httpf := a.defineHTTPFlags(fs, "monitor", "the dashboard, /events, and /metrics and /healthz unless --metrics-http,")
		return func(ctx context.Context, _ []string) error {
			hl, err := a.listenHTTP("monitor", httpf)
			if err != nil {
				return err
			}
			defer hl.close()
			bus, closeEvents, err := a.openBus(*eventsTo, hl.any())
			if err != nil {
				return err
			}
			defer closeEvents()
			st, url, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			mcfg := a.cfg.Monitor()
			mcfg.Logger = a.log
			if mcfg.Local, err = a.localClock(); err != nil {
				return err
			}
			var reg *metrics.Registry
			if hl.any() {
				// The dashboard and /metrics show the monitor's own
				// requests and their cost, and the dashboard the newest
				// dead tasks.
				counter := s3store.NewCounter(st)
				st = counter
				reg = metrics.New(metrics.Config{Version: versionString()})
				reg.CountStore(counter, noSpend(url) == "")
			}
			if hl.main != nil {
				mcfg.DeadList = deadListSize
			}
			mcfg.Events = bus
			// The scheduler submits through the queue's producer, opened
			// once the monitor has made sure the queue exists.
			var q *s3queue.Queue
			mcfg.Submit = func(ctx context.Context, s monitor.Submission) (string, error) {
				return schedule.SubmitVia(q)(ctx, schedule.Submission(s))
			}
			m, err := monitor.New(ctx, st, mcfg)
			if err != nil {
				return unsupported(url, err)
			}
			if q, err = a.openQueue(ctx, st, url, true); err != nil {
				return err
			}
			if len(a.cfg.Schedules) > 0 {
				wrote, err := q.ApplySchedules(ctx, a.cfg.Schedules)
				if err != nil {
					return cause(err)
				}
				if len(wrote) > 0 {
					a.log.Info("wrote the configured schedules that were missing or differed", "schedules", wrote)
				}
			}
			if reg != nil {
				reg.Subscribe(bus)
				var dash http.Handler
				if hl.main != nil {
					if dash, err = a.monitorDashboard(m, q, hl.token, noSpend(url)); err != nil {
						return err
					}
				}
				stop := a.serve(ctx, hl, reg, bus, func() { reg.SetQueue(metrics.Snapshot(m.State())) }, dash)
				defer stop()
			}
			a.log.Info("monitor started", "store", url, "interval", mcfg.Interval)
			err = m.Run(ctx)
			if errors.Is(err, s3store.ErrUnusable) {
				err = unusable(url, err)
			}
			if cerr := closeEvents(); err == nil {
				err = cerr
			}
			s := m.Stats()
			a.log.Info("monitor stopped", "redispatched", s.Redispatched, "dead_lettered", s.DeadLettered,
				"repaired", s.Repaired, "deleted", s.Deleted, "corrupt", s.Corrupt)
			return err
		}
	},
}

// noSpend says why the requests to the store at url (redacted) cost
// nothing, or "" if they are S3's: the dashboard then shows no spend, and
// /metrics exports no s3queue_s3_spend_dollars_total.
func noSpend(url string) string {
	spec, err := storeurl.Parse(url)
	if err != nil || spec.Scheme == storeurl.SchemeS3 {
		return ""
	}
	return "a " + spec.Scheme + ":// store: its requests cost nothing (the spend shown for an s3:// store is the monitor's requests at S3 Standard prices)"
}

// unusable is the one message a long-running command ends with when its
// store will not heal (exit 5): retrying, or restarting the command, cannot
// help until someone fixes the store.
func unusable(url string, err error) error {
	return fmt.Errorf("store %s is unusable, so the command stopped (fix the store, then start it again): %w", url, err)
}

// unsupported points an unsupported-provider error (met when the command
// creates the queue: shards.Open checks the provider then) at doctor.
func unsupported(url string, err error) error {
	if errors.Is(err, s3store.ErrUnsupportedProvider) {
		return fmt.Errorf("store %s: %w (run 's3queue doctor' for details)", url, err)
	}
	return err
}
