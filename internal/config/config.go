// Package config reads queue.toml, the configuration file of the s3queue
// command, applies S3QUEUE_* environment overrides and hands the result to
// the services.
//
// TOML is parsed here and nowhere else (services take Go structs). Every
// key is declared once, next to the struct it sets: [worker] in
// settings.Of[worker.Config](), [monitor] in settings.Of[monitor.Config](), [producer] in
// settings.Of[producer.Config](), [submit] in settings.Of[producer.Options](), the top-level keys
// and [log] in this package. The
// declaration gives the key's name, type, default, economy profile value,
// check and doc line; file decoding, the environment overrides, the
// profile, validation and the services' own defaults all derive from it,
// so a key cannot be parsed without also being applied. An unknown key,
// an unknown S3QUEUE_* variable or an invalid value is an error naming the
// key and where it came from.
package config

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// Config is a loaded queue.toml with its environment overrides applied.
// Zero Config is not useful; start from Default or Load.
type Config struct {
	// Source is the file the config was read from ("" if none).
	Source string
	// Store is the store URL (key store, env S3QUEUE_STORE).
	Store string
	// Shards is the queue's shard count; 0 accepts whatever the queue has
	// (16 for a new queue).
	Shards int
	// Profile is "default" or "economy": the operating point of the cost
	// and latency trade-off (see docs/performance.md). It sets the defaults
	// of the keys declared with an economy value; keys set explicitly win.
	Profile string

	// QueueSection is [queue], DirectSection [queue.direct_dispatch].
	QueueSection  QueueSection
	DirectSection DirectSection

	// WorkerSection is [worker]. Its Shards is not a key of the section:
	// Worker sets it from Shards.
	WorkerSection worker.Config
	// MonitorSection is [monitor]; Monitor sets its Shards as Worker does.
	MonitorSection monitor.Config
	// ProducerSection is [producer]; Producer sets its Shards and
	// LeaseMargin, which are not keys of the section.
	ProducerSection producer.Config
	// SubmitSection is [submit]: the defaults of `s3queue submit`.
	SubmitSection producer.Options
	LogSection    LogSection
	// HTTPSection is [http].
	HTTPSection HTTPSection
	// Schedules are the [[schedule]] tables, validated, in file order.
	Schedules []schedule.Definition
	// Handlers maps a task type to the shell command the worker command
	// runs for it ([handlers]).
	Handlers map[string]string
}

// QueueSection is [queue].
type QueueSection struct {
	// DispatchMode is "shared" or "direct" (shards.DispatchShared,
	// shards.DispatchDirect).
	DispatchMode string
}

// Mode is DispatchMode as the services take it (checked when loaded).
func (q QueueSection) Mode() shards.DispatchMode { return shards.DispatchMode(q.DispatchMode) }

// DirectSection is [queue.direct_dispatch].
type DirectSection struct {
	DiscoveryTTL time.Duration
	Selection    direct.Selection
}

// LogSection is [log].
type LogSection struct {
	Level  slog.Level
	Format string // "text" or "json"
}

// HTTPSection is [http].
type HTTPSection struct {
	// AllowedHosts are the host names, besides localhost, IP addresses
	// and the listen address's host, that requests may give in Host.
	AllowedHosts []string
}

// tables returns every section bound to c, in file order. [handlers], a
// table of task types, is decoded on its own.
func (c *Config) tables() []settings.Table {
	return []settings.Table{
		topKeys.Bind(c),
		queueKeys.Bind(&c.QueueSection),
		directKeys.Bind(&c.DirectSection),
		settings.Of[worker.Config]().Bind(&c.WorkerSection),
		settings.Of[monitor.Config]().Bind(&c.MonitorSection),
		settings.Of[producer.Config]().Bind(&c.ProducerSection),
		settings.Of[producer.Options]().Bind(&c.SubmitSection),
		logKeys.Bind(&c.LogSection),
		httpKeys.Bind(&c.HTTPSection),
	}
}

// keys returns every key of tables, in file order.
func keys(tables []settings.Table) []settings.Bound {
	var out []settings.Bound
	for _, t := range tables {
		out = append(out, t.Keys...)
	}
	return out
}

// Default returns the configuration used when no file and no environment
// variable says otherwise: every key at its declared default.
func Default() Config {
	c := Config{Handlers: map[string]string{}}
	for _, k := range keys(c.tables()) {
		k.Reset()
	}
	return c
}

// Keys lists every configuration key in file order ("store",
// "worker.poll_min", ...), excluding the [handlers] table whose keys are
// task types.
func Keys() []string {
	var c Config
	var out []string
	for _, k := range keys(c.tables()) {
		out = append(out, k.Name)
	}
	return out
}

// Load reads the TOML file at path (none when path is ""), then applies the
// environment overrides in environ, as os.Environ returns it ("NAME=value"
// strings; a variable that is empty overrides nothing), and validates the
// result. Errors name the file or variable and the key:
//
//	queue.toml: worker.poll_min: invalid duration "fast"
//
// A set S3QUEUE_* variable that names no key is an error, as an unknown key
// in the file is, unless it is one the queue uses otherwise (the variables
// the worker command gives the commands it runs, and those of the test
// suites).
//
// Overrides, the keys set by command-line flags, are applied last: a flag
// beats the environment, which beats the file, which beats the defaults.
// An override counts as set explicitly (the profile leaves it alone), and
// an invalid value is an error naming the flag.
func Load(path string, environ []string, overrides ...Override) (Config, error) {
	vars := make(map[string]string)
	var names []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if _, dup := vars[name]; !dup && strings.HasPrefix(name, EnvPrefix) {
			vars[name] = value
			names = append(names, name)
		}
	}
	return load(path, func(name string) string { return vars[name] }, names, overrides...)
}

// Override is a key set on the command line, such as `s3queue worker
// --concurrency 8` setting worker.concurrency.
type Override struct {
	// Flag is the flag as the user wrote it ("--concurrency"), for errors.
	Flag string
	// Key is the key it sets ("worker.concurrency").
	Key string
	// Value is the flag's text, parsed as the key's environment variable
	// would be.
	Value string
}

// load is Load; names are the S3QUEUE_* variables set.
func load(path string, env func(string) string, names []string, overrides ...Override) (Config, error) {
	c := Default()
	tables := c.tables()
	src := make(map[string]string) // key -> where its value came from
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("read config: %w", err)
		}
		if err := c.decodeFile(path, string(b), tables, src); err != nil {
			return Config{}, err
		}
		c.Source = path
	}
	if env != nil {
		if err := applyEnv(keys(tables), env, names, src); err != nil {
			return Config{}, err
		}
	}
	if err := applyOverrides(keys(tables), overrides, src); err != nil {
		return Config{}, err
	}
	if c.Profile == "economy" {
		// The profile sets its values for the keys not set explicitly.
		for _, k := range keys(tables) {
			if _, explicit := src[k.Name]; !explicit {
				k.ApplyEconomy()
			}
		}
	}
	if err := c.crossCheck(tables, src); err != nil {
		return Config{}, err
	}
	return c, nil
}

// crossCheck validates constraints between keys, naming the key whose value
// breaks it and where that value came from.
func (c *Config) crossCheck(tables []settings.Table, src map[string]string) error {
	// origin prefixes a message about key with where its value came from.
	origin := func(key string) string {
		switch s := src[key]; {
		case strings.HasPrefix(s, EnvPrefix), strings.HasPrefix(s, "--"):
			return s + ": "
		case s != "":
			return s + ": " + key + ": "
		}
		return key + ": "
	}
	for _, t := range tables {
		for _, r := range t.Rules {
			if err := r.Check(); err != nil {
				// Blame the first key the user set.
				blame := r.Keys[0]
				for _, k := range r.Keys {
					if _, ok := src[k]; ok {
						blame = k
						break
					}
				}
				return fmt.Errorf("%s%w", origin(blame), err)
			}
		}
	}
	if err := worker.CheckPools(c.Worker()); err != nil {
		return fmt.Errorf("%s%w", origin("pools"), err)
	}
	if c.Shards > 0 {
		for _, sh := range c.WorkerSection.OwnShards {
			if sh >= c.Shards {
				return fmt.Errorf("%sshard %d out of range 0..%d (shards = %d)", origin("worker.own_shards"), sh, c.Shards-1, c.Shards)
			}
		}
	}
	return nil
}

// Worker returns [worker] as a worker.Config, with the queue's shard
// count. Logger, Clock, OnEvent and Rand are left for the caller.
func (c Config) Worker() worker.Config {
	w := c.WorkerSection
	w.Shards = c.Shards
	w.DispatchMode, w.DiscoveryTTL = c.QueueSection.Mode(), c.DirectSection.DiscoveryTTL
	if len(w.OwnShards) > 0 {
		w.OwnShards = slices.Clone(w.OwnShards)
	} else {
		w.OwnShards = nil
	}
	w.Pools = slices.Clone(w.Pools)
	for i := range w.Pools {
		w.Pools[i].Types = slices.Clone(w.Pools[i].Types)
	}
	w.RateLimits = maps.Clone(w.RateLimits)
	return w
}

// Monitor returns [monitor] as a monitor.Config, with the queue's shard
// count. Logger, Clock and Rand are left for the caller.
func (c Config) Monitor() monitor.Config {
	m := c.MonitorSection
	m.Shards = c.Shards
	m.DispatchMode, m.WorkerLease = c.QueueSection.Mode(), c.WorkerSection.LeaseDuration
	m.KeepForever = m.Retention == 0
	m.NoScheduler = !m.Scheduler
	return m
}

// Producer returns [producer] as a producer.Config, with the queue's shard
// count. Logger and Clock are left for the caller. Its LeaseMargin is
// worker.lease_margin: the producer judges which fleet members are live by
// the workers' margin.
func (c Config) Producer() producer.Config {
	p := c.ProducerSection
	p.Shards, p.LeaseMargin = c.Shards, c.WorkerSection.LeaseMargin
	p.DispatchMode, p.DiscoveryTTL, p.Selection = c.QueueSection.Mode(), c.DirectSection.DiscoveryTTL, producer.Selection(c.DirectSection.Selection)
	return p
}

// SubmitOptions returns the per-task defaults of [submit].
func (c Config) SubmitOptions() producer.Options {
	o := c.SubmitSection
	if o.Retry != nil {
		r := *o.Retry
		o.Retry = &r
	}
	return o
}

// NewLogger returns the slog logger [log] asks for, writing to w.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogSection.Level}
	if c.LogSection.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
