package config

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// topKeys declares the keys at the top of queue.toml.
var topKeys = &settings.Section[Config]{
	Keys: []settings.Key[Config]{
		settings.String("store", func(c *Config) *string { return &c.Store }, "",
			"The bucket (or directory) holding the queue, as a URL; --store wins over it."),
		settings.Int("shards", func(c *Config) *int { return &c.Shards }, 0,
			"The queue's shard count: 0 accepts whatever the queue in the bucket has (16 for a new queue); at most 1000.").
			Must(settings.IntRange(0, shards.MaxShards)),
		settings.String("profile", func(c *Config) *string { return &c.Profile }, "default",
			"The operating point of the cost/latency trade-off: \"economy\" gives the keys marked economy their economy value, for fewer requests, slower pickup and slower failover; keys set explicitly win.").
			Must(settings.OneOf("profile", "default", "economy")),
	},
}

// queueKeys declares [queue]: how the queue dispatches, fixed when it is
// created and recorded in its manifest.
var queueKeys = &settings.Section[QueueSection]{
	Name: "queue",
	Keys: []settings.Key[QueueSection]{
		settings.String("dispatch_mode", func(q *QueueSection) *string { return &q.DispatchMode }, string(shards.DispatchShared),
			"How new tasks reach workers: \"shared\" (fleet members list the shards they lease) or \"direct\" (each producer routes a task to a live worker's inbox; docs/direct-dispatch.md). Recorded when the queue is created: a process configured with the other mode refuses to open it.").
			Must(settings.OneOf("dispatch_mode", string(shards.DispatchShared), string(shards.DispatchDirect))),
	},
}

// directKeys declares [queue.direct_dispatch], read by producers under
// dispatch_mode = "direct".
var directKeys = &settings.Section[DirectSection]{
	Name: "queue.direct_dispatch",
	Keys: []settings.Key[DirectSection]{
		settings.Seconds("worker_discovery_cache_ttl_secs", func(d *DirectSection) *time.Duration { return &d.DiscoveryTTL }, worker.DefaultDiscoveryTTL,
			"How long a producer caches its view of the live workers (a LIST of workers/ and a GET per worker lease), in seconds (1..600); a worker that marks itself asleep keeps listing its inbox this long.").
			Must(settings.Within(time.Second, 10*time.Minute)),
		settings.Text("worker_selection", func(d *DirectSection) *direct.Selection { return &d.Selection }, direct.RoundRobin, direct.ParseSelection,
			func(s direct.Selection) string { return string(s) },
			"How a producer picks among the live workers that run a task's type: \"round_robin\", \"hash\" (of the task id) or \"random\"."),
	},
}

// logKeys declares [log].
var logKeys = &settings.Section[LogSection]{
	Name: "log",
	Keys: []settings.Key[LogSection]{
		settings.Text("level", func(l *LogSection) *slog.Level { return &l.Level }, slog.LevelInfo, parseLevel,
			func(l slog.Level) string { return strings.ToLower(l.String()) },
			"debug, info, warn or error."),
		settings.String("format", func(l *LogSection) *string { return &l.Format }, "text",
			"text (key=value lines) or json (one object per line); logs go to stderr.").
			Must(settings.OneOf("format", "text", "json")),
	},
}

// httpKeys declares [http]: the HTTP interface of `worker --http` and
// `monitor --http`.
var httpKeys = &settings.Section[HTTPSection]{
	Name: "http",
	Keys: []settings.Key[HTTPSection]{
		settings.Strings("allowed_hosts", func(h *HTTPSection) *[]string { return &h.AllowedHosts }, nil,
			"Host names a request to --http may name in its Host header, besides localhost, IP addresses, this machine's name and --http's own host (a guard against DNS rebinding): the names a Service or a proxy gives the dashboard, e.g. [\"s3queue-monitor.s3queue.svc\"]."),
	},
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid level %q (want debug, info, warn or error)", s)
}
