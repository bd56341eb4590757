package monitor

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/shards"
)

// configKeys declares the keys of queue.toml's [monitor] table, each once:
// the Config field it sets, its default (which New gives a field that is
// zero or negative), its economy profile value, its check (which New
// applies) and its doc line.
//
// It is read-only: read it (go doc -u) for every key and its default; the
// services and internal/config derive from it, and nothing may change it.
var configKeys = &settings.Section[Config]{
	Name:          "monitor",
	NegativeUnset: true,
	Keys: []settings.Key[Config]{
		settings.Duration("interval", func(c *Config) *time.Duration { return &c.Interval }, 5*time.Second,
			"Time between two ticks: shards with live work are swept every tick, quiet shards less and less often (up to sweep_max).").
			Economy(30 * time.Second).Must(settings.Positive),
		settings.Int("page_size", func(c *Config) *int { return &c.PageSize }, 1000,
			"How many task keys one sweep lists per shard and tick (1..1000).").
			Must(settings.IntRange(1, 1000)),
		settings.Int("shards_per_tick", func(c *Config) *int { return &c.ShardsPerTick }, 0,
			"How many of the shards due for a sweep one tick visits; 0: all of them.").
			Must(settings.IntRange(0, shards.MaxShards)),
		settings.Duration("lease_margin", func(c *Config) *time.Duration { return &c.LeaseMargin }, 2*time.Second,
			"A running task's lease is taken over only once S3 time is certainly past its expiry plus this margin.").
			Must(settings.Positive),
		settings.Duration("repair_after", func(c *Config) *time.Duration { return &c.RepairAfter }, time.Minute,
			"A pending task due this long without being claimed is announced to the workers again.").
			// Tasks wait up to a poll_max for the member's listing: the
			// repair must not take that wait for a lost announcement.
			Economy(3 * time.Minute).Must(settings.Positive),
		settings.Duration("stale_after", func(c *Config) *time.Duration { return &c.StaleAfter }, 10*time.Second,
			"A task object is read only once its ETag has stayed the same this long.").
			Must(settings.Positive),
		settings.Duration("sweep_max", func(c *Config) *time.Duration { return &c.SweepMax }, 10*time.Minute,
			"The longest wait between sweeps of a shard that held only finished tasks.").
			Must(settings.Positive),
		settings.Duration("full_sweep", func(c *Config) *time.Duration { return &c.FullSweep }, 6*time.Hour,
			"How often the retained history of finished tasks at the head of each shard, which sweeps start past, is walked in full (retention there, lost requeue announcements).").
			Economy(24 * time.Hour).Must(settings.Positive),
		settings.Bool("leader", func(c *Config) *bool { return &c.Leader }, false,
			"true: several monitors elect one sweeper with a lease; false: every monitor sweeps."),
		settings.Duration("retention", func(c *Config) *time.Duration { return &c.Retention }, 7*24*time.Hour,
			"Finished tasks (succeeded, dead, canceled) are deleted this long after their last change; \"0\" keeps them forever.").
			Must(settings.NotNegative).
			Unset(func(c *Config) bool { return c.Retention == 0 && !c.KeepForever }),
		settings.Duration("result_ttl", func(c *Config) *time.Duration { return &c.ResultTTL }, 0,
			"A succeeded task's result (inline, or its object under results/) is dropped this long after the task finished, the task kept until retention; \"0\" (the default) keeps results until retention. Each drop is one GET and one PUT of the task (and a free DELETE of a result stored apart).").
			Must(settings.NotNegative),
		settings.Bool("scheduler", func(c *Config) *bool { return &c.Scheduler }, true,
			"true: this monitor submits the tasks of the queue's schedules, one per tick fleet-wide (with leader = true, only the leader does); false: it leaves them to other monitors.").
			Unset(func(c *Config) bool { return !c.Scheduler && !c.NoScheduler }),
		settings.Duration("schedule_refresh", func(c *Config) *time.Duration { return &c.ScheduleRefresh }, schedule.DefaultRefresh,
			"How often the scheduler looks for added, changed and removed schedules: one GET of control/schedules.json, which every such change rewrites, and a LIST of schedules/ (with a GET per changed schedule) when it changed, or once an hour whatever it says (1s..24h).").
			Must(settings.Within(time.Second, 24*time.Hour)),
	},
}

// fill gives unset fields their defaults and validates the result.
// ShardsPerTick's 0 (all shards) is read at each tick as the manifest's
// count, which a reshard raises.
func (c *Config) fill() error {
	configKeys.Fill(c)
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if err := configKeys.Validate(c); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

func init() {
	settings.Publish(configKeys)
}
