package config

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/shards"
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
