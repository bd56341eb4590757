package producer

import (
	"fmt"
	"time"

	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/task"
)

// configKeys declares the keys of queue.toml's [producer] table, each
// once: the Config field it sets, its default (which New gives a zero
// field), its check (which New applies) and its doc line.
//
// It is read-only: read it (go doc -u) for every key and its default; the
// services and internal/config derive from it, and nothing may change it.
var configKeys = &settings.Section[Config]{
	Name: "producer",
	Keys: []settings.Key[Config]{
		settings.Int("batch_parallelism", func(c *Config) *int { return &c.BatchParallelism }, 8,
			"How many submissions a producer sends at once in a batch (1..10000): SubmitBatch, SubmitEach and a submitter's goroutines.").
			Must(settings.IntRange(1, MaxParallelism)).Unset(func(c *Config) bool { return c.BatchParallelism <= 0 }),
		settings.Int("max_queue_depth", func(c *Config) *int { return &c.MaxQueueDepth }, 0,
			"How many submissions a submitter holds accepted but not yet started (0: twice batch_parallelism; -1: no bound).").
			Must(settings.IntRange(Unbounded, MaxQueueDepthLimit)),
		settings.Text("queue_policy", func(c *Config) *Policy { return &c.QueuePolicy }, Block, ParsePolicy, Policy.String,
			"What a submitter does with a new submission when max_queue_depth submissions already wait to start: block, reject, drop-latest or drop-oldest.").
			Must(Policy.check),
	},
}

// submitKeys declares the keys of queue.toml's [submit] table, the
// per-task defaults of `s3queue submit`, each once: the Options field it
// sets (the retry keys set Options.Retry, allocating it), its default and
// check (those of the task package, which applies them to a zero field)
// and its doc line.
//
// It is read-only: read it (go doc -u) for every key and its default; the
// services and internal/config derive from it, and nothing may change it.
var submitKeys = &settings.Section[Options]{
	Name: "submit",
	Keys: []settings.Key[Options]{
		settings.Int("max_attempts", func(o *Options) *int { return &o.MaxAttempts }, task.DefaultMaxAttempts,
			"Attempts before a failing task is dead (1..1000).").
			Must(settings.IntRange(1, task.MaxAttemptsLimit)),
		settings.Duration("timeout", func(o *Options) *time.Duration { return &o.Timeout }, task.DefaultTimeout,
			"The lease of one attempt (1s..24h): workers renew it while the handler runs, and stop a handler still running after it.").
			Must(settings.Within(task.MinTimeout, task.MaxTimeout)),
		settings.Duration("retry_initial", func(o *Options) *task.Duration { return &retry(o).InitialDelay }, task.DefaultRetryPolicy().InitialDelay,
			"The wait before the first retry.").
			Must(settings.Positive),
		settings.Duration("retry_max", func(o *Options) *task.Duration { return &retry(o).MaxDelay }, task.DefaultRetryPolicy().MaxDelay,
			"The longest wait between two attempts (at least retry_initial).").
			Must(settings.Positive),
		settings.Float("retry_multiplier", func(o *Options) *float64 { return &retry(o).Multiplier }, task.DefaultRetryPolicy().Multiplier,
			"Growth of the wait per failed attempt (at least 1).").
			Must(settings.AtLeast(1)),
		settings.Float("retry_jitter", func(o *Options) *float64 { return &retry(o).Jitter }, task.DefaultRetryPolicy().Jitter,
			"Fraction (0..1) of each wait that is randomly taken away, so tasks that failed together do not retry together.").
			Must(settings.FloatRange(0, 1)),
	},
	Rules: []settings.Rule[Options]{
		{Keys: []string{"retry_initial", "retry_max"}, Check: func(o *Options) error {
			if r := retry(o); r.InitialDelay > r.MaxDelay {
				return fmt.Errorf("submit.retry_initial (%v) is more than submit.retry_max (%v)", r.InitialDelay.D(), r.MaxDelay.D())
			}
			return nil
		}},
	},
}

// retry returns o.Retry, allocating it if nil.
func retry(o *Options) *task.RetryPolicy {
	if o.Retry == nil {
		o.Retry = &task.RetryPolicy{}
	}
	return o.Retry
}

func init() {
	settings.Publish(configKeys)
	settings.Publish(submitKeys)
}
