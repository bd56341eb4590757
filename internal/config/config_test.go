package config

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// write stores text as queue.toml in a fresh directory and returns its path.
func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "queue.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// envMap is an environment as os.Environ gives it.
func envMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func TestDefaultsMatchTheServices(t *testing.T) {
	c, err := Load("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	wantWorker := worker.Config{
		Concurrency: 4, QueuePolicy: worker.Block, CrashPolicy: worker.CrashFail, PollMin: 200 * time.Millisecond, PollMax: 5 * time.Second, PollMultiplier: 2, PollPace: 1800 * time.Millisecond, PollBatch: 10,
		ScanLag: 5 * time.Second, ScanLookback: time.Hour, LeaseMargin: 2 * time.Second, ShutdownGrace: 30 * time.Second,
		MemberTTL: 30 * time.Second, StandbyPoll: time.Second, IdleLeave: time.Minute, SleepAfter: 30 * time.Second,
		BellPoll: 1500 * time.Millisecond, SleepScan: 10 * time.Minute, AwakeGrace: 5 * time.Second, DrainMax: 10 * time.Minute,
		MaxShards: 256, ReshardAfter: time.Minute, RootMembers: 16, PauseCheckInterval: 10 * time.Second,
		ResultInlineMax: task.MaxResultBytes, MaxResultBytes: 4 << 20,
		DispatchMode: shards.DispatchShared, DiscoveryTTL: 30 * time.Second,
		LeaseDuration: time.Minute, LeaseRenewalInterval: 20 * time.Second, OverflowScavengeInterval: 2 * time.Minute,
	}
	if got := c.Worker(); !reflect.DeepEqual(got, wantWorker) {
		t.Errorf("Worker() = %+v\nwant %+v", got, wantWorker)
	}
	wantProducer := producer.Config{LeaseMargin: 2 * time.Second, BatchParallelism: 8, QueuePolicy: producer.Block,
		DispatchMode: shards.DispatchShared, DiscoveryTTL: 30 * time.Second, Selection: producer.Selection(direct.RoundRobin)}
	if got := c.Producer(); !reflect.DeepEqual(got, wantProducer) {
		t.Errorf("Producer() = %+v\nwant %+v", got, wantProducer)
	}
	wantMonitor := monitor.Config{DispatchMode: shards.DispatchShared, WorkerLease: time.Minute, Interval: 5 * time.Second, PageSize: 1000, LeaseMargin: 2 * time.Second,
		RepairAfter: time.Minute, Retention: 168 * time.Hour, StaleAfter: 10 * time.Second, SweepMax: 10 * time.Minute, FullSweep: 6 * time.Hour,
		Scheduler: true, ScheduleRefresh: time.Minute}
	if got := c.Monitor(); !reflect.DeepEqual(got, wantMonitor) {
		t.Errorf("Monitor() = %+v\nwant %+v", got, wantMonitor)
	}
	def := task.DefaultRetryPolicy()
	wantSubmit := producer.Options{MaxAttempts: 3, Timeout: 30 * time.Second, Retry: &def}
	if got := c.SubmitOptions(); !reflect.DeepEqual(got, wantSubmit) {
		t.Errorf("SubmitOptions() = %+v\nwant %+v", got, wantSubmit)
	}
	if c.LogSection.Level != slog.LevelInfo || c.LogSection.Format != "text" || c.Store != "" || c.Shards != 0 || len(c.Handlers) != 0 {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

// keyCase sets one key to a non-default value, in the file and through the
// environment, and checks that the value reaches the service config.
type keyCase struct {
	key   string
	toml  string // the value as written in queue.toml
	env   string // the same value as an environment variable
	check func(c Config) bool
}

var keyCases = []keyCase{
	{"store", `"file:///var/lib/q"`, "file:///var/lib/q", func(c Config) bool { return c.Store == "file:///var/lib/q" }},
	{"shards", `8`, "8", func(c Config) bool {
		return c.Shards == 8 && c.Worker().Shards == 8 && c.Monitor().Shards == 8 && c.Producer().Shards == 8
	}},
	{"queue.dispatch_mode", `"direct"`, "direct", func(c Config) bool {
		return c.Worker().DispatchMode == shards.DispatchDirect && c.Producer().DispatchMode == shards.DispatchDirect && c.Monitor().DispatchMode == shards.DispatchDirect
	}},
	{"queue.direct_dispatch.worker_discovery_cache_ttl_secs", `45`, "45", func(c Config) bool {
		// The producers cache by it; a sleeping worker keeps listing that long.
		return c.Producer().DiscoveryTTL == 45*time.Second && c.Worker().DiscoveryTTL == 45*time.Second
	}},
	{"queue.direct_dispatch.worker_selection", `"hash"`, "hash", func(c Config) bool { return c.Producer().Selection == producer.Selection(direct.Hash) }},
	{"worker.lease_duration_secs", `90`, "90", func(c Config) bool {
		// The monitor reads only the leases not rewritten for it.
		return c.Worker().LeaseDuration == 90*time.Second && c.Monitor().WorkerLease == 90*time.Second
	}},
	{"worker.lease_renewal_interval_secs", `15`, "15", func(c Config) bool { return c.Worker().LeaseRenewalInterval == 15*time.Second }},
	{"worker.overflow_scavenge_interval_secs", `300`, "300", func(c Config) bool { return c.Worker().OverflowScavengeInterval == 5*time.Minute }},
	{"worker.id", `"w-7"`, "w-7", func(c Config) bool { return c.Worker().ID == "w-7" }},
	{"worker.concurrency", `7`, "7", func(c Config) bool { return c.Worker().Concurrency == 7 }},
	{"worker.max_in_flight", `6`, "6", func(c Config) bool { return c.Worker().MaxInFlight == 6 }},
	{"worker.max_queue_depth", `"unbounded"`, "0", func(c Config) bool { return c.Worker().MaxQueueDepth == worker.Unbounded }},
	{"worker.queue_policy", `"drop-oldest"`, "drop-oldest", func(c Config) bool { return c.Worker().QueuePolicy == worker.DropOldest }},
	{"worker.crash_policy", `"requeue"`, "requeue", func(c Config) bool { return c.Worker().CrashPolicy == worker.CrashRequeue }},
	{"worker.poll_min", `"250ms"`, "250ms", func(c Config) bool { return c.Worker().PollMin == 250*time.Millisecond }},
	{"worker.poll_max", `"9s"`, "9s", func(c Config) bool { return c.Worker().PollMax == 9*time.Second }},
	{"worker.poll_multiplier", `1.5`, "1.5", func(c Config) bool { return c.Worker().PollMultiplier == 1.5 }},
	{"worker.poll_pace", `"3s"`, "3s", func(c Config) bool { return c.Worker().PollPace == 3*time.Second }},
	{"worker.poll_batch", `60.0`, "60", func(c Config) bool { return c.Worker().PollBatch == 60 }},
	{"profile", `"economy"`, "economy", func(c Config) bool {
		return c.Worker().PollBatch == 30 && c.Monitor().RepairAfter == 3*time.Minute && c.Worker().StandbyPoll == 10*time.Second && c.Monitor().Interval == 30*time.Second
	}},
	{"worker.scan_lag", `"3s"`, "3s", func(c Config) bool { return c.Worker().ScanLag == 3*time.Second }},
	{"worker.scan_lookback", `"2h"`, "2h", func(c Config) bool { return c.Worker().ScanLookback == 2*time.Hour }},
	{"worker.lease_margin", `"750ms"`, "750ms", func(c Config) bool {
		// One setting: the producers judge fleet members by the workers' margin.
		return c.Worker().LeaseMargin == 750*time.Millisecond && c.Producer().LeaseMargin == 750*time.Millisecond
	}},
	{"worker.shutdown_grace", `"1m"`, "1m", func(c Config) bool { return c.Worker().ShutdownGrace == time.Minute }},
	{"worker.own_shards", `[1, 3]`, "1,3", func(c Config) bool { return reflect.DeepEqual(c.Worker().OwnShards, []int{1, 3}) }},
	{"worker.dedicated", `true`, "true", func(c Config) bool { return c.Worker().Dedicated }},
	{"worker.member_ttl", `"45s"`, "45s", func(c Config) bool { return c.Worker().MemberTTL == 45*time.Second }},
	{"worker.standby_poll", `"3s"`, "3s", func(c Config) bool { return c.Worker().StandbyPoll == 3*time.Second }},
	{"worker.idle_leave", `"5m"`, "5m", func(c Config) bool { return c.Worker().IdleLeave == 5*time.Minute }},
	{"worker.sleep_after", `"2m"`, "2m", func(c Config) bool { return c.Worker().SleepAfter == 2*time.Minute }},
	{"worker.bell_poll", `"500ms"`, "500ms", func(c Config) bool { return c.Worker().BellPoll == 500*time.Millisecond }},
	{"worker.sleep_scan", `"5m"`, "5m", func(c Config) bool { return c.Worker().SleepScan == 5*time.Minute }},
	{"worker.awake_grace", `"3s"`, "3s", func(c Config) bool { return c.Worker().AwakeGrace == 3*time.Second }},
	{"worker.drain_max", `"30m"`, "30m", func(c Config) bool { return c.Worker().DrainMax == 30*time.Minute }},
	{"worker.max_shards", "1", "1", func(c Config) bool { return c.Worker().MaxShards == 1 }},
	{"worker.reshard_after", `"5m"`, "5m", func(c Config) bool { return c.Worker().ReshardAfter == 5*time.Minute }},
	{"worker.pause_check_interval", `"2s"`, "2s", func(c Config) bool { return c.Worker().PauseCheckInterval == 2*time.Second }},
	{"worker.root_members", "3", "3", func(c Config) bool { return c.Worker().RootMembers == 3 }},
	{"worker.result_inline_max", "16384", "16384", func(c Config) bool { return c.Worker().ResultInlineMax == 16384 }},
	{"worker.max_result_bytes", "1048576", "1048576", func(c Config) bool { return c.Worker().MaxResultBytes == 1<<20 }},
	{"monitor.result_ttl", `"1h"`, "1h", func(c Config) bool { return c.Monitor().ResultTTL == time.Hour }},
	{"monitor.interval", `"750ms"`, "750ms", func(c Config) bool { return c.Monitor().Interval == 750*time.Millisecond }},
	{"monitor.page_size", `100`, "100", func(c Config) bool { return c.Monitor().PageSize == 100 }},
	{"monitor.shards_per_tick", `2`, "2", func(c Config) bool { return c.Monitor().ShardsPerTick == 2 }},
	{"monitor.lease_margin", `"3s"`, "3s", func(c Config) bool { return c.Monitor().LeaseMargin == 3*time.Second }},
	{"monitor.repair_after", `"30s"`, "30s", func(c Config) bool { return c.Monitor().RepairAfter == 30*time.Second }},
	{"monitor.stale_after", `"3s"`, "3s", func(c Config) bool { return c.Monitor().StaleAfter == 3*time.Second }},
	{"monitor.sweep_max", `"1m"`, "1m", func(c Config) bool { return c.Monitor().SweepMax == time.Minute }},
	{"monitor.full_sweep", `"2h"`, "2h", func(c Config) bool { return c.Monitor().FullSweep == 2*time.Hour }},
	{"monitor.leader", `true`, "true", func(c Config) bool { return c.Monitor().Leader }},
	{"monitor.retention", `"0"`, "0", func(c Config) bool {
		m := c.Monitor()
		return m.Retention == 0 && m.KeepForever
	}},
	{"monitor.scheduler", `false`, "false", func(c Config) bool {
		m := c.Monitor()
		return !m.Scheduler && m.NoScheduler
	}},
	{"monitor.schedule_refresh", `"30s"`, "30s", func(c Config) bool { return c.Monitor().ScheduleRefresh == 30*time.Second }},
	{"producer.batch_parallelism", `3`, "3", func(c Config) bool { return c.Producer().BatchParallelism == 3 }},
	{"producer.max_queue_depth", `-1`, "-1", func(c Config) bool { return c.Producer().MaxQueueDepth == producer.Unbounded }},
	{"producer.queue_policy", `"drop-oldest"`, "drop-oldest", func(c Config) bool { return c.Producer().QueuePolicy == producer.DropOldest }},
	{"submit.max_attempts", `5`, "5", func(c Config) bool { return c.SubmitOptions().MaxAttempts == 5 }},
	{"submit.timeout", `"2m"`, "2m", func(c Config) bool { return c.SubmitOptions().Timeout == 2*time.Minute }},
	{"submit.retry_initial", `"200ms"`, "200ms", func(c Config) bool { return c.SubmitOptions().Retry.InitialDelay.D() == 200*time.Millisecond }},
	{"submit.retry_max", `"1m"`, "1m", func(c Config) bool { return c.SubmitOptions().Retry.MaxDelay.D() == time.Minute }},
	{"submit.retry_multiplier", `3`, "3", func(c Config) bool { return c.SubmitOptions().Retry.Multiplier == 3 }},
	{"submit.retry_jitter", `0.0`, "0", func(c Config) bool { return c.SubmitOptions().Retry.Jitter == 0 }},
	{"log.level", `"debug"`, "debug", func(c Config) bool { return c.LogSection.Level == slog.LevelDebug }},
	{"log.format", `"json"`, "json", func(c Config) bool { return c.LogSection.Format == "json" }},
	{"http.allowed_hosts", `["q.example", "s3queue-monitor.s3queue.svc"]`, "q.example, s3queue-monitor.s3queue.svc", func(c Config) bool {
		return reflect.DeepEqual(c.HTTPSection.AllowedHosts, []string{"q.example", "s3queue-monitor.s3queue.svc"})
	}},
}

// snippet renders key = value as a queue.toml fragment.
func snippet(key, value string) string {
	section, name, ok := strings.Cut(key, ".")
	if !ok {
		return key + " = " + value + "\n"
	}
	return "[" + section + "]\n" + name + " = " + value + "\n"
}

func TestEveryKeyReachesTheServiceConfig(t *testing.T) {
	covered := make(map[string]bool)
	for _, tc := range keyCases {
		covered[tc.key] = true
		if tc.check(Default()) {
			t.Errorf("%s: the test value equals the default, so the test cannot fail", tc.key)
		}
		t.Run(tc.key+"/file", func(t *testing.T) {
			c, err := Load(write(t, snippet(tc.key, tc.toml)), envMap(nil))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%s = %s did not reach the service config: %+v", tc.key, tc.toml, c)
			}
		})
		t.Run(tc.key+"/env", func(t *testing.T) {
			c, err := Load("", envMap(map[string]string{EnvName(tc.key): tc.env}))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%s=%s did not reach the service config: %+v", EnvName(tc.key), tc.env, c)
			}
		})
	}
	for _, k := range Keys() {
		if !covered[k] {
			t.Errorf("key %s has no test proving it reaches the service config", k)
		}
	}
}

func TestEnvOverridesFile(t *testing.T) {
	path := write(t, "store = \"file:///from/file\"\n[worker]\nconcurrency = 7\npoll_max = \"9s\"\n[monitor]\ninterval = \"1s\"\n")
	c, err := Load(path, envMap(map[string]string{
		"S3QUEUE_STORE":              "file:///from/env",
		"S3QUEUE_WORKER_CONCURRENCY": "9",
		"S3QUEUE_MONITOR_INTERVAL":   "2s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "file:///from/env" || c.Worker().Concurrency != 9 || c.Monitor().Interval != 2*time.Second {
		t.Errorf("env did not override the file: %+v", c)
	}
	if c.Worker().PollMax != 9*time.Second {
		t.Errorf("a key without an env override lost its file value: %v", c.Worker().PollMax)
	}
	if c.Source != path {
		t.Errorf("Source = %q, want %q", c.Source, path)
	}
}

func TestEnvNames(t *testing.T) {
	for key, want := range map[string]string{
		"store":                  "S3QUEUE_STORE",
		"worker.concurrency":     "S3QUEUE_WORKER_CONCURRENCY",
		"monitor.interval":       "S3QUEUE_MONITOR_INTERVAL",
		"submit.retry_jitter":    "S3QUEUE_SUBMIT_RETRY_JITTER",
		"worker.poll_multiplier": "S3QUEUE_WORKER_POLL_MULTIPLIER",
	} {
		if got := EnvName(key); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, want)
		}
	}
	if EnvStore != EnvName("store") {
		t.Errorf("EnvStore = %q", EnvStore)
	}
}

func TestUnknownKeysAreErrorsNamingTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"misspelled", "[worker]\npol_min = \"1s\"\n", []string{"queue.toml: unknown key worker.pol_min", "did you mean worker.poll_min?"}},
		{"top level", "stor = \"mem://\"\n", []string{"unknown key stor", "did you mean store?"}},
		{"unknown section", "[wroker.extra]\na = 1\nb = 2\n", []string{"unknown key wroker"}},
		{"key in wrong section", "[monitor]\nconcurrency = 3\n", []string{"unknown key monitor.concurrency"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(write(t, tc.text), envMap(nil))
			if err == nil {
				t.Fatal("unknown key accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Count(err.Error(), "unknown key") != 1 {
				t.Errorf("error %q should report the unknown key once", err)
			}
		})
	}
}

func TestInvalidValuesAreErrorsNamingTheKey(t *testing.T) {
	for _, tc := range []struct {
		text, want string
	}{
		{"[worker]\npoll_min = \"fast\"\n", `queue.toml: worker.poll_min: invalid duration "fast"`},
		{"[worker]\npoll_min = 5\n", `queue.toml: worker.poll_min: invalid duration integer 5`},
		{"[worker]\nconcurrency = -1\n", `queue.toml: worker.concurrency: -1 must not be negative`},
		{"[worker]\nconcurrency = 0\n", `queue.toml: worker.concurrency: 0 out of range 1..10000`},
		{"[worker]\nmax_result_bytes = 1\n", `queue.toml: worker.max_result_bytes: 1 out of range 1024..67108864`},
		{"[worker]\nconcurrency = \"4\"\n", `queue.toml: worker.concurrency: want an integer, got string "4"`},
		{"[worker]\nmax_in_flight = -3\n", `queue.toml: worker.max_in_flight: invalid limit "-3"`},
		{"[worker]\nmax_queue_depth = \"lots\"\n", `queue.toml: worker.max_queue_depth: invalid limit "lots"`},
		{"[worker]\nqueue_policy = \"drop-newest\"\n", `queue.toml: worker.queue_policy: unknown queue policy "drop-newest"`},
		{"[worker]\ncrash_policy = \"retry\"\n", `queue.toml: worker.crash_policy: unknown crash policy "retry"`},
		{"[worker]\npoll_min = \"10s\"\n", `queue.toml: worker.poll_min: worker.poll_min (10s) is more than worker.poll_max (5s)`},
		{"[worker]\npoll_max = \"50ms\"\n", `queue.toml: worker.poll_max: worker.poll_min (200ms) is more than worker.poll_max (50ms)`},
		{"[worker]\npoll_multiplier = 0.5\n", `queue.toml: worker.poll_multiplier: 0.5 out of range 1..100`},
		{"[worker]\nlease_margin = \"0s\"\n", `queue.toml: worker.lease_margin: duration 0s must be positive`},
		{"[worker]\nshutdown_grace = \"-1s\"\n", `queue.toml: worker.shutdown_grace: duration -1s must be positive`},
		{"[worker]\nown_shards = [1, -2]\n", `queue.toml: worker.own_shards: shard -2 out of range`},
		{"[worker]\nown_shards = [1, 1]\n", `queue.toml: worker.own_shards: shard 1 listed twice`},
		{"[worker]\nown_shards = \"1\"\n", `queue.toml: worker.own_shards: want an array of integers`},
		{"[worker]\ndedicated = \"yes\"\n", `queue.toml: worker.dedicated: want true or false, got string "yes"`},
		{"[worker]\nstandby_poll = \"0s\"\n", `queue.toml: worker.standby_poll: duration 0s must be positive`},
		{"[worker]\ndrain_max = \"-1m\"\n", `queue.toml: worker.drain_max: duration -1m0s must be positive`},
		{"[worker]\nmember_ttl = \"5s\"\n", `queue.toml: worker.member_ttl: worker.member_ttl (5s) is less than 3 × worker.lease_margin (3 × 2s = 6s)`},
		{"[worker]\nlease_margin = \"15s\"\n", `queue.toml: worker.lease_margin: worker.member_ttl (30s) is less than 3 × worker.lease_margin (3 × 15s = 45s)`},
		{"[worker]\nawake_grace = \"2s\"\n", `queue.toml: worker.awake_grace: duration 2s must be more than 2s, the producers' fleet cache TTL`},
		{"[worker]\nawake_grace = \"1s\"\n", `queue.toml: worker.awake_grace: duration 1s must be more than 2s, the producers' fleet cache TTL`},
		{"shards = 4\n[worker]\nown_shards = [4]\n", `queue.toml: worker.own_shards: shard 4 out of range 0..3`},
		{"[worker]\nid = \"has space\"\n", `queue.toml: worker.id: worker id "has space" must be printable ASCII`},
		{"shards = -1\n", `queue.toml: shards: -1 must not be negative`},
		{"shards = 5000\n", `queue.toml: shards: 5000 out of range 0..1000`},
		{"[monitor]\npage_size = 0\n", `queue.toml: monitor.page_size: 0 out of range 1..1000`},
		{"[monitor]\nshards_per_tick = -3\n", `queue.toml: monitor.shards_per_tick: -3 must not be negative`},
		{"[monitor]\nretention = \"-1h\"\n", `queue.toml: monitor.retention: duration -1h0m0s must not be negative`},
		{"[monitor]\ninterval = \"0\"\n", `queue.toml: monitor.interval: duration 0s must be positive`},
		{"[producer]\nbatch_parallelism = 0\n", `queue.toml: producer.batch_parallelism: 0 out of range 1..10000`},
		{"[producer]\nmax_queue_depth = -2\n", `queue.toml: producer.max_queue_depth: -2 out of range -1..1000000`},
		{"[producer]\nqueue_policy = \"newest\"\n", `queue.toml: producer.queue_policy: invalid queue policy "newest" (want block, reject, drop-latest or drop-oldest)`},
		{"[queue]\ndispatch_mode = \"inbox\"\n", `queue.toml: queue.dispatch_mode: `},
		{"[queue.direct_dispatch]\nworker_selection = \"least_loaded\"\n", `queue.toml: queue.direct_dispatch.worker_selection: invalid worker selection "least_loaded" (want round_robin, hash or random)`},
		{"[queue.direct_dispatch]\nworker_discovery_cache_ttl_secs = \"30s\"\n", `queue.toml: queue.direct_dispatch.worker_discovery_cache_ttl_secs: want a whole number of seconds, got`},
		{"[queue.direct_dispatch]\nworker_discovery_cache_ttl_secs = 0\n", `queue.toml: queue.direct_dispatch.worker_discovery_cache_ttl_secs: `},
		{"[queue.direct_dispatch]\nttl = 3\n", `queue.toml: unknown key queue.direct_dispatch.ttl`},
		{"[worker]\nlease_duration_secs = 20\n", `queue.toml: worker.lease_duration_secs: worker.lease_renewal_interval_secs (20s) plus worker.lease_margin (2s) is not less than worker.lease_duration_secs (20s)`},
		{"[submit]\nmax_attempts = 0\n", `queue.toml: submit.max_attempts: 0 out of range 1..1000`},
		{"[submit]\ntimeout = \"500ms\"\n", `queue.toml: submit.timeout: duration 500ms out of range 1s..24h0m0s`},
		{"[submit]\nretry_jitter = 1.5\n", `queue.toml: submit.retry_jitter: 1.5 out of range 0..1`},
		{"[submit]\nretry_multiplier = 0.5\n", `queue.toml: submit.retry_multiplier: 0.5 must be at least 1`},
		{"[submit]\nretry_initial = \"10m\"\n", `queue.toml: submit.retry_initial: submit.retry_initial (10m0s) is more than submit.retry_max (5m0s)`},
		{"[log]\nlevel = \"loud\"\n", `queue.toml: log.level: invalid level "loud"`},
		{"[log]\nformat = \"xml\"\n", `queue.toml: log.format: invalid format "xml"`},
		{"[handlers]\n\"bad type!\" = \"cat\"\n", `queue.toml: handlers."bad type!": `},
		{"[handlers]\nresize = 3\n", `queue.toml: handlers.resize: want a quoted command line, got integer 3`},
		{"[handlers]\nresize = \"  \"\n", `queue.toml: handlers.resize: empty command`},
		{"[worker\n", `queue.toml: line 2: expected '.' or ']' to end table name`},
		{"worker = 3\n", `queue.toml: worker: want a table [worker], got integer 3`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			path := write(t, tc.text)
			_, err := Load(path, envMap(nil))
			if err == nil {
				t.Fatalf("%q accepted", tc.text)
			}
			got := strings.ReplaceAll(err.Error(), filepath.Dir(path)+string(filepath.Separator), "")
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("error\n  %s\nwant prefix\n  %s", got, tc.want)
			}
		})
	}
}

func TestInvalidEnvValuesNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"S3QUEUE_WORKER_POLL_MIN", "fast", `S3QUEUE_WORKER_POLL_MIN: invalid duration "fast"`},
		{"S3QUEUE_WORKER_CONCURRENCY", "many", `S3QUEUE_WORKER_CONCURRENCY: invalid integer "many"`},
		{"S3QUEUE_WORKER_CONCURRENCY", "-2", `S3QUEUE_WORKER_CONCURRENCY: -2 must not be negative`},
		{"S3QUEUE_WORKER_OWN_SHARDS", "1,x", `S3QUEUE_WORKER_OWN_SHARDS: invalid integer list "1,x"`},
		{"S3QUEUE_SUBMIT_RETRY_JITTER", "NaN", `S3QUEUE_SUBMIT_RETRY_JITTER: invalid number "NaN"`},
		{"S3QUEUE_PRODUCER_QUEUE_POLICY", "lifo", `S3QUEUE_PRODUCER_QUEUE_POLICY: invalid queue policy "lifo"`},
		{"S3QUEUE_PRODUCER_BATCH_PARALLELISM", "-4", `S3QUEUE_PRODUCER_BATCH_PARALLELISM: -4 must not be negative`},
		{"S3QUEUE_LOG_LEVEL", "loud", `S3QUEUE_LOG_LEVEL: invalid level "loud"`},
		{"S3QUEUE_WORKER_POLL_MIN", "1m", `S3QUEUE_WORKER_POLL_MIN: worker.poll_min (1m0s) is more than worker.poll_max (5s)`},
		{"S3QUEUE_WORKER_DEDICATED", "maybe", `S3QUEUE_WORKER_DEDICATED: invalid boolean "maybe"`},
		{"S3QUEUE_WORKER_MEMBER_TTL", "3s", `S3QUEUE_WORKER_MEMBER_TTL: worker.member_ttl (3s) is less than 3 × worker.lease_margin (3 × 2s = 6s)`},
		{"S3QUEUE_WORKER_AWAKE_GRACE", "2s", `S3QUEUE_WORKER_AWAKE_GRACE: duration 2s must be more than 2s, the producers' fleet cache TTL`},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			_, err := Load("", envMap(map[string]string{tc.name: tc.value}))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestHandlers(t *testing.T) {
	c, err := Load(write(t, "[handlers]\nresize = \"convert - -resize 50% -\"\n\"mail.send\" = \"./send-mail\"\n"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"resize": "convert - -resize 50% -", "mail.send": "./send-mail"}
	if !reflect.DeepEqual(c.Handlers, want) {
		t.Errorf("Handlers = %v, want %v", c.Handlers, want)
	}
}

func TestRateLimits(t *testing.T) {
	c, err := Load(write(t, "[rate_limits]\nweather = \"100/1m\"\n\"mail.send\" = \"5/s\"\n"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]worker.RateLimit{"weather": {N: 100, Interval: time.Minute}, "mail.send": {N: 5, Interval: time.Second}}
	if got := c.Worker().RateLimits; !reflect.DeepEqual(got, want) {
		t.Errorf("RateLimits = %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ text, want string }{
		{"[rate_limits]\nweather = 100\n", `queue.toml: rate_limits.weather: want a quoted limit such as "100/1m", got integer 100`},
		{"[rate_limits]\nweather = \"100\"\n", `queue.toml: rate_limits.weather: rate limit "100": want N/INTERVAL`},
		{"[rate_limits]\nweather = \"0/1m\"\n", `want at least 1 start per interval`},
		{"[rate_limits]\nweather = \"5/100ms\"\n", `the interval must be at least 1s`},
		{"[rate_limits]\nweather = \"x/1m\"\n", `"x" is not a whole number of starts`},
		{"[rate_limits]\nweather = \"5/soon\"\n", `interval "soon": want a duration`},
		{"[rate_limits]\n\"bad type!\" = \"5/s\"\n", `queue.toml: rate_limits."bad type!": `},
		{"rate_limits = 3\n", `queue.toml: rate_limits: want a table [rate_limits]`},
	} {
		_, err := Load(write(t, tc.text), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

func TestPools(t *testing.T) {
	text := "[pools.io]\ntypes = [\"fetch\", \"upload\"]\nmax_in_flight = 32\n" +
		"[pools.resize]\nmax_in_flight = 2\nmax_queue_depth = \"unbounded\"\nqueue_policy = \"drop-oldest\"\n"
	c, err := Load(write(t, text), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []worker.Pool{
		{Name: "io", Types: []string{"fetch", "upload"}, MaxInFlight: 32},
		{Name: "resize", MaxInFlight: 2, MaxQueueDepth: worker.Unbounded, QueuePolicy: worker.DropOldest},
	}
	if got := c.Worker().Pools; !reflect.DeepEqual(got, want) {
		t.Errorf("Pools = %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct{ text, want string }{
		{"[pools.io]\nsize = 3\n", `queue.toml: pools.io.size: unknown key`},
		{"[pools.io]\ntypes = \"fetch\"\n", `queue.toml: pools.io.types: want an array of task types`},
		{"[pools.io]\nmax_in_flight = -1\n", `queue.toml: pools.io.max_in_flight: invalid limit "-1"`},
		{"[pools.io]\nqueue_policy = \"lifo\"\n", `queue.toml: pools.io.queue_policy: unknown queue policy "lifo"`},
		{"[pools.a]\ntypes = [\"x\"]\n[pools.b]\ntypes = [\"x\"]\n", `pools: type "x" is in pools "a" and "b"`},
		{"[pools.default]\n", `pools: pool "default" declared twice`},
		{"pools = 3\n", `queue.toml: pools: want a table [pools]`},
	} {
		_, err := Load(write(t, tc.text), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("error %v should name the missing file", err)
	}
}

func TestNewLoggerHonoursLevelAndFormat(t *testing.T) {
	c, err := Load(write(t, "[log]\nlevel = \"debug\"\nformat = \"json\"\n"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c.NewLogger(&buf).Debug("hello", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "hello" {
		t.Errorf("debug JSON log line expected, got %q (%v)", buf.String(), err)
	}

	buf.Reset()
	Default().NewLogger(&buf).Debug("hidden")
	Default().NewLogger(&buf).Info("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "msg=shown") {
		t.Errorf("default logger should be text at info, got %q", buf.String())
	}

	warn, _ := Load("", envMap(map[string]string{"S3QUEUE_LOG_LEVEL": "warn"}))
	buf.Reset()
	warn.NewLogger(&buf).Info("hidden")
	if buf.Len() != 0 {
		t.Errorf("warn level let an info line through: %q", buf.String())
	}
}

// A copy of the example with the economy profile chosen gets the economy
// profile: the example sets none of the keys the profile changes.
func TestExampleFileTakesTheEconomyProfile(t *testing.T) {
	env := envMap(map[string]string{"S3QUEUE_PROFILE": "economy"})
	got, err := Load(filepath.Join("..", "..", "queue.toml.example"), env)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Load("", env)
	if err != nil {
		t.Fatal(err)
	}
	got.Source, want.Source = "", ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("queue.toml.example with profile economy:\n got %+v\nwant %+v", got, want)
	}
	if want.Worker().PollBatch != 30 {
		t.Fatalf("economy poll_batch %v, want 30", want.Worker().PollBatch)
	}
}

// member_ttl = 3 × lease_margin is the boundary: it loads, and the worker
// accepts it too, so the config is no stricter than the service.
func TestMemberTTLMayEqualThreeLeaseMargins(t *testing.T) {
	c, err := Load(write(t, "[worker]\nlease_margin = \"10s\"\nmember_ttl = \"30s\"\n"), envMap(nil))
	if err != nil {
		t.Fatalf("member_ttl = 3 × lease_margin refused: %v", err)
	}
	if w := c.Worker(); w.MemberTTL != 30*time.Second || w.LeaseMargin != 10*time.Second {
		t.Errorf("Worker() = %+v", w)
	}
	if _, err := worker.New(context.Background(), mem.New(), c.Worker()); err != nil {
		t.Errorf("worker.New refused a config that loaded: %v", err)
	}
	// With both keys set, the error blames the first key the user set.
	_, err = Load(write(t, "[worker]\nlease_margin = \"11s\"\nmember_ttl = \"30s\"\n"), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "worker.member_ttl (30s) is less than 3 × worker.lease_margin (3 × 11s = 33s)") {
		t.Errorf("error %v, want one naming worker.member_ttl and worker.lease_margin", err)
	}
}

func TestDedicatedFalseOverridesFileThroughEnv(t *testing.T) {
	c, err := Load(write(t, "[worker]\ndedicated = true\n"), envMap(map[string]string{"S3QUEUE_WORKER_DEDICATED": "false"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker().Dedicated {
		t.Error("S3QUEUE_WORKER_DEDICATED=false did not override dedicated = true")
	}
}

func TestExplicitKeysWinOverTheProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "queue.toml")
	if err := os.WriteFile(path, []byte("profile = \"economy\"\n[worker]\npoll_batch = 5.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, []string{"S3QUEUE_MONITOR_INTERVAL=7s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker().PollBatch != 5 || c.Monitor().Interval != 7*time.Second || c.Worker().PollMax != time.Minute {
		t.Fatalf("poll_batch %v interval %v poll_max %v: want 5 and 7s set explicitly, 1m from the profile",
			c.Worker().PollBatch, c.Monitor().Interval, c.Worker().PollMax)
	}
}

func TestUnknownEnvironmentVariablesAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    string // "" accepts
	}{
		{"misspelt", []string{"S3QUEUE_WORKER_POLL_MINN=1s"},
			"environment: unknown variable S3QUEUE_WORKER_POLL_MINN (did you mean S3QUEUE_WORKER_POLL_MIN?)"},
		{"top level", []string{"S3QUEUE_STOR=file:///q"}, "unknown variable S3QUEUE_STOR (did you mean S3QUEUE_STORE?)"},
		{"far from any key", []string{"S3QUEUE_COLOUR=blue"}, "environment: unknown variable S3QUEUE_COLOUR"},
		{"handlers have no variables", []string{"S3QUEUE_HANDLERS_RESIZE=cat"}, "unknown variable S3QUEUE_HANDLERS_RESIZE"},
		// A handler the worker command runs may run s3queue submit.
		{"set for handlers", []string{"S3QUEUE_TASK_ID=x", "S3QUEUE_ATTEMPT=1", "S3QUEUE_TASK_TYPE=t"}, ""},
		{"the dashboard's token", []string{"S3QUEUE_DASHBOARD_TOKEN=secret"}, ""},
		{"test suites", []string{"S3QUEUE_TEST_RUN_MAIN=1", "S3QUEUE_SIM_SEEDS=3", "S3QUEUE_BENCH_WINDOW=1m", "S3QUEUE_CHAOS_SOAK=30m", "S3QUEUE_MINIO_IMAGE=m"}, ""},
		{"empty overrides nothing", []string{"S3QUEUE_WORKER_POLL_MINN="}, ""},
		{"other prefixes", []string{"HOME=/root", "S3QUEUEX=1"}, ""},
		{"known", []string{"S3QUEUE_WORKER_POLL_MIN=1s", "PATH=/bin"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("", tc.environ)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) && !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	c, err := Load("", []string{"S3QUEUE_WORKER_POLL_MIN=1s"})
	if err != nil || c.Worker().PollMin != time.Second {
		t.Errorf("Load did not apply S3QUEUE_WORKER_POLL_MIN: %v, %v", c.Worker().PollMin, err)
	}
}

// The economy profile changes exactly the keys declared with an economy
// value, to those values.
func TestEconomyProfile(t *testing.T) {
	def, err := Load("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	eco, err := Load("", envMap(map[string]string{"S3QUEUE_PROFILE": "economy"}))
	if err != nil {
		t.Fatal(err)
	}
	eco.Profile = def.Profile
	want := def
	want.WorkerSection.PollMax, want.WorkerSection.PollBatch, want.WorkerSection.PollPace = time.Minute, 30, 30*time.Second
	want.WorkerSection.BellPoll, want.WorkerSection.MemberTTL = 30*time.Second, 90*time.Second
	want.WorkerSection.StandbyPoll, want.WorkerSection.SleepScan = 10*time.Second, time.Hour
	want.MonitorSection.Interval, want.MonitorSection.FullSweep, want.MonitorSection.RepairAfter = 30*time.Second, 24*time.Hour, 3*time.Minute
	if !reflect.DeepEqual(eco, want) {
		t.Errorf("economy profile:\n got %+v\nwant %+v", eco, want)
	}
}

// Flags beat the environment, which beats the file, which beats the
// defaults (docs/cli.md, "Where settings come from").
func TestOverridesBeatEnvFileAndDefaults(t *testing.T) {
	path := write(t, "[worker]\nconcurrency = 2\npoll_max = \"9s\"\n[log]\nlevel = \"debug\"\n")
	env := envMap(map[string]string{"S3QUEUE_WORKER_CONCURRENCY": "3", "S3QUEUE_LOG_LEVEL": "warn"})
	for _, tc := range []struct {
		name        string
		path        string
		env         []string
		overrides   []Override
		concurrency int
		level       slog.Level
	}{
		{"defaults", "", nil, nil, 4, slog.LevelInfo},
		{"file", path, nil, nil, 2, slog.LevelDebug},
		{"env over file", path, env, nil, 3, slog.LevelWarn},
		{"flag over env", path, env, []Override{{"--concurrency", "worker.concurrency", "5"}, {"--log-level", "log.level", "error"}}, 5, slog.LevelError},
		{"flag over default", "", nil, []Override{{"--concurrency", "worker.concurrency", "6"}}, 6, slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.path, tc.env, tc.overrides...)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Worker().Concurrency; got != tc.concurrency {
				t.Errorf("concurrency %d, want %d", got, tc.concurrency)
			}
			if got := c.LogSection.Level; got != tc.level {
				t.Errorf("log level %v, want %v", got, tc.level)
			}
			if tc.path != "" && c.Worker().PollMax != 9*time.Second {
				t.Errorf("a key no flag sets lost its file value: poll_max %v", c.Worker().PollMax)
			}
		})
	}
}

func TestInvalidOverridesNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		o    Override
		want string
	}{
		{Override{"--concurrency", "worker.concurrency", "0"}, "--concurrency: "},
		{Override{"--concurrency", "worker.concurrency", "many"}, "--concurrency: "},
		{Override{"--log-level", "log.level", "loud"}, `--log-level: invalid level "loud" (want debug, info, warn or error)`},
	} {
		_, err := Load("", nil, tc.o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want it to start with %q", tc.o.Flag, tc.o.Value, err, tc.want)
		}
	}
}

// An override is explicit: the economy profile does not replace it.
func TestOverridesWinOverTheProfile(t *testing.T) {
	c, err := Load(write(t, "profile = \"economy\"\n"), nil, Override{"--poll-max", "worker.poll_max", "7s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker().PollMax != 7*time.Second {
		t.Errorf("poll_max %v, want 7s from the flag", c.Worker().PollMax)
	}
}
