package worker

import (
	"fmt"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// configKeys declares the keys of queue.toml's [worker] table, each once:
// the Config field it sets, its default (which New gives a zero field),
// its economy profile value, its check (which New applies) and its doc
// line.
//
// It is read-only: read it (go doc -u) for every key and its default; the
// services and internal/config derive from it, and nothing may change it.
var configKeys = &settings.Section[Config]{
	Name: "worker",
	Keys: []settings.Key[Config]{
		settings.String("id", func(c *Config) *string { return &c.ID }, "",
			"The worker's name in claims, task histories and logs; \"\" picks HOST-PID-RANDOM.").
			Must(checkID),
		settings.Int("concurrency", func(c *Config) *int { return &c.Concurrency }, 4,
			"How many handlers each pool runs at once unless the pool sets max_in_flight (1..10000): the default pool's and each named pool's, so a worker runs up to the sum over its pools.").
			Must(settings.IntRange(1, 10000)),
		settings.Limit("max_in_flight", func(c *Config) *int { return &c.MaxInFlight }, Unbounded,
			"Bounds the handlers running at once in the default pool: \"auto\" is concurrency; 0 or \"unbounded\" sets no bound (every task claimed starts at once). See docs/flow-control.md.").
			Must(checkLimitKey),
		settings.Limit("max_queue_depth", func(c *Config) *int { return &c.MaxQueueDepth }, Unbounded,
			"Bounds the default pool's claimed tasks waiting to start (pending) under the policies that claim ahead (reject, drop-latest, drop-oldest): \"auto\" is a listing's worth, max(max_in_flight, poll_batch) + 1; 0 or \"unbounded\" sets no bound. Under block the worker claims only for a free handler, so nothing is pending and this key is not used.").
			Must(checkLimitKey),
		settings.Text("queue_policy", func(c *Config) *QueuePolicy { return &c.QueuePolicy }, Block, ParsePolicy,
			func(p QueuePolicy) string { return string(p) },
			"What a full default pool does with a task it finds: \"block\" claims only for a free handler and leaves the rest in the bucket; \"reject\" and \"drop-latest\" claim ahead up to max_queue_depth and leave the rest, reported; \"drop-oldest\" claims ahead and releases the oldest pending task for the newest."),
		settings.Text("crash_policy", func(c *Config) *CrashPolicy { return &c.CrashPolicy }, CrashFail, ParseCrashPolicy,
			func(p CrashPolicy) string { return string(p) },
			"What a crashed handler (a Go handler that panics, a command killed by a signal the worker did not send) does to its task: \"fail\" records a failed attempt, retried after the task's retry delay by any worker; \"requeue\" records it and runs the task again at once on this worker, ahead of its pool's pending tasks."),
		settings.Duration("poll_min", func(c *Config) *time.Duration { return &c.PollMin }, 200*time.Millisecond,
			"The shortest wait after a poll that found work.").
			Must(settings.Positive),
		settings.Duration("poll_max", func(c *Config) *time.Duration { return &c.PollMax }, 5*time.Second,
			"The longest wait between polls of an idle worker (at least poll_min).").
			Economy(time.Minute).Must(settings.Positive),
		settings.Float("poll_multiplier", func(c *Config) *float64 { return &c.PollMultiplier }, 2,
			"Growth of the wait per empty poll (1..100).").
			Must(settings.FloatRange(1, 100)),
		settings.Duration("poll_pace", func(c *Config) *time.Duration { return &c.PollPace }, 1800*time.Millisecond,
			"The wait between polls while work flows and each brings poll_batch tasks or fewer: a task waits about poll_pace / 2 for its listing (at least poll_min, at most poll_max).").
			Economy(30 * time.Second).Must(settings.Positive),
		settings.Float("poll_batch", func(c *Config) *float64 { return &c.PollBatch }, 10,
			"Tasks a poll may bring at poll_pace: when work flows faster, the wait grows in proportion (a poll of twice poll_batch every twice poll_pace), up to poll_max. Also the least a listing asks for.").
			Economy(30).Must(settings.FloatRange(0.01, 100000)),
		settings.Duration("scan_lag", func(c *Config) *time.Duration { return &c.ScanLag }, 5*time.Second,
			"How late a task's PUT may land and still be found by the shard scans.").
			Must(settings.Positive),
		settings.Duration("scan_lookback", func(c *Config) *time.Duration { return &c.ScanLookback }, time.Hour,
			"How far back a new worker's first scan looks.").
			Must(settings.Positive),
		settings.Duration("lease_margin", func(c *Config) *time.Duration { return &c.LeaseMargin }, 2*time.Second,
			"A handler whose lease could not be renewed is stopped this long before the lease expires by S3 time; a fleet member stops counting as live this long before its entry expires, for the workers and for submit and requeue alike.").
			Must(settings.Positive),
		settings.Duration("shutdown_grace", func(c *Config) *time.Duration { return &c.ShutdownGrace }, 30*time.Second,
			"How long a worker told to stop waits for running handlers before handing their tasks back.").
			Must(settings.Positive),
		settings.Ints("own_shards", func(c *Config) *[]int { return &c.OwnShards }, nil,
			"Pins the worker to these shards; it takes no part in the fleet. Empty: the worker joins the fleet.").
			Must(checkShardList),
		settings.Bool("dedicated", func(c *Config) *bool { return &c.Dedicated }, false,
			"true: the worker is always a fleet member and never stands by or leaves when idle."),
		settings.Duration("member_ttl", func(c *Config) *time.Duration { return &c.MemberTTL }, 30*time.Second,
			"How long a member's fleet entry lasts without renewal; members renew every third of it. At least 3 × lease_margin.").
			Economy(90 * time.Second).Must(settings.Positive),
		settings.Duration("standby_poll", func(c *Config) *time.Duration { return &c.StandbyPoll }, time.Second,
			"How often the standbys of an awake fleet, taking turns, read the fleet object: once per standby_poll fleet-wide (each of N standbys every N × standby_poll), so a fleet that asks for members gets about one per standby_poll. A worker started less than 30s ago reads every second.").
			Economy(10 * time.Second).Must(settings.Positive),
		settings.Duration("idle_leave", func(c *Config) *time.Duration { return &c.IdleLeave }, time.Minute,
			"A member other than the first leaves the fleet after this long without finding work.").
			Must(settings.Positive),
		settings.Duration("sleep_after", func(c *Config) *time.Duration { return &c.SleepAfter }, 30*time.Second,
			"The last member puts the fleet to sleep after this long without finding work; an elastic one then leaves it, and the standbys' turns watch the doorbell.").
			Must(settings.Positive),
		settings.Duration("bell_poll", func(c *Config) *time.Duration { return &c.BellPoll }, 1500*time.Millisecond,
			"How often a sleeping fleet reads its doorbell: its standbys take turns, once per bell_poll fleet-wide, and the first to read a ring answers it (a dedicated member asleep reads it itself this often). The first task after idle is claimed about bell_poll / 2 after its submit.").
			Economy(30 * time.Second).Must(settings.Positive),
		settings.Duration("sleep_scan", func(c *Config) *time.Duration { return &c.SleepScan }, 10*time.Minute,
			"How often a sleeping fleet still lists shard 0 for work nobody rang for (one standby's turn in sleep_scan / bell_poll; a dedicated member asleep lists its shard this often).").
			Economy(time.Hour).Must(settings.Positive),
		settings.Duration("awake_grace", func(c *Config) *time.Duration { return &c.AwakeGrace }, 5*time.Second,
			"How long a member that has just marked itself asleep keeps scanning (more than 2s).").
			Must(checkAwakeGrace),
		settings.Duration("drain_max", func(c *Config) *time.Duration { return &c.DrainMax }, 10*time.Minute,
			"The longest wait between sweeps of shards that receive no new tasks.").
			Must(settings.Positive),
		settings.Int("max_shards", func(c *Config) *int { return &c.MaxShards }, 256,
			"The automatic reshard's ceiling: when the members keep asking for more members than the queue has shards, for reshard_after, the first member grows the count to min(max_shards, max(2 × shards, members asked for)). At or below the queue's shard count the policy is off, and so it is when shards is set (1..1000).").
			Must(settings.IntRange(1, shards.MaxShards)),
		settings.Duration("reshard_after", func(c *Config) *time.Duration { return &c.ReshardAfter }, time.Minute,
			"How long, by S3 time, the members must keep asking for more members than there are shards before the automatic reshard (see max_shards).").
			Must(settings.Positive),
		settings.Seconds("lease_duration_secs", func(c *Config) *time.Duration { return &c.LeaseDuration }, time.Minute,
			"Direct dispatch only: how long the worker's own lease (workers/ID.lease.json) lasts without renewal, in seconds; producers route new tasks to a worker only while it holds one, and an expired one's inbox is moved to the overflow.").
			Must(settings.Within(3*time.Second, 24*time.Hour)),
		settings.Seconds("lease_renewal_interval_secs", func(c *Config) *time.Duration { return &c.LeaseRenewalInterval }, 20*time.Second,
			"Direct dispatch only: how often the worker renews its lease, in seconds (less than lease_duration_secs); each renewal is one conditional PUT.").
			Must(settings.Within(time.Second, 24*time.Hour)),
		settings.Seconds("overflow_scavenge_interval_secs", func(c *Config) *time.Duration { return &c.OverflowScavengeInterval }, 2*time.Minute,
			"Direct dispatch only: how often the worker moves dead workers' inboxes to the overflow and claims from it, in seconds (a LIST of workers/ and one of overflow/ each time).").
			Must(settings.Within(time.Second, 24*time.Hour)),
		settings.Duration("pause_check_interval", func(c *Config) *time.Duration { return &c.PauseCheckInterval }, pause.DefaultInterval,
			"How often the worker reads the queue's pause object (control/pause.json, one GET each time): a pause or resume takes effect fleet-wide within this long (100ms..1h; see docs/pause.md).").
			Must(settings.Within(100*time.Millisecond, time.Hour)),
		settings.Int("result_inline_max", func(c *Config) *int { return &c.ResultInlineMax }, task.MaxResultBytes,
			"A handler's result up to this many bytes (compact JSON) is stored in the task object; a larger one in an object of its own under results/, written before the commit (one PUT more; 1024..262144).").
			Must(settings.IntRange(1024, task.MaxResultBytes)),
		settings.Int("max_result_bytes", func(c *Config) *int { return &c.MaxResultBytes }, 4<<20,
			"The largest result a handler may return (compact JSON, bytes); a larger one ends the task dead. Above result_inline_max it is stored apart (1024..67108864).").
			Must(settings.IntRange(1024, task.MaxExternalResultBytes)),
		settings.Int("root_members", func(c *Config) *int { return &c.RootMembers }, shards.DefaultRootMembers,
			"How many fleet members renew their entries in fleet.json itself; members that join beyond them renew a lease object of their own under fleet/leases/, so that writes to fleet.json, and their conflicts, stay flat as the fleet grows (1..1000).").
			Must(settings.IntRange(1, 1000)),
	},
	Rules: []settings.Rule[Config]{
		{Keys: []string{"poll_min", "poll_max"}, Check: func(c *Config) error {
			if c.PollMin > c.PollMax {
				return fmt.Errorf("worker.poll_min (%v) is more than worker.poll_max (%v)", c.PollMin, c.PollMax)
			}
			return nil
		}},
		{Keys: []string{"lease_renewal_interval_secs", "lease_duration_secs"}, Check: func(c *Config) error {
			if c.LeaseRenewalInterval+c.LeaseMargin >= c.LeaseDuration {
				return fmt.Errorf("worker.lease_renewal_interval_secs (%v) plus worker.lease_margin (%v) is not less than worker.lease_duration_secs (%v): the lease would lapse between renewals", c.LeaseRenewalInterval, c.LeaseMargin, c.LeaseDuration)
			}
			return nil
		}},
		// A member renews its fleet entry every third of member_ttl and
		// counts as live only until its expiry minus lease_margin.
		{Keys: []string{"member_ttl", "lease_margin"}, Check: func(c *Config) error {
			if c.MemberTTL < 3*c.LeaseMargin {
				return fmt.Errorf("worker.member_ttl (%v) is less than 3 × worker.lease_margin (3 × %v = %v)", c.MemberTTL, c.LeaseMargin, 3*c.LeaseMargin)
			}
			return nil
		}},
	},
}

// poolKeys declares the keys of a [pools.NAME] table of queue.toml, each
// pool's own limits (Pool). Its types key, a list of task types, is read
// apart: the pool's name when left out.
var poolKeys = &settings.Section[Pool]{
	Name: "pools.NAME",
	Keys: []settings.Key[Pool]{
		settings.Limit("max_in_flight", func(p *Pool) *int { return &p.MaxInFlight }, Unbounded,
			"Bounds the pool's running handlers: \"auto\" is worker.concurrency; 0 or \"unbounded\" sets no bound."),
		settings.Limit("max_queue_depth", func(p *Pool) *int { return &p.MaxQueueDepth }, Unbounded,
			"Bounds the pool's tasks found and waiting to start: \"auto\" is max(max_in_flight, poll_batch) + 1; 0 or \"unbounded\" sets no bound."),
		settings.Text("queue_policy", func(p *Pool) *QueuePolicy { return &p.QueuePolicy }, Block, ParsePolicy,
			func(p QueuePolicy) string { return string(p) },
			"What the pool does with a task it finds when full: block, reject, drop-latest or drop-oldest (see worker.queue_policy)."),
	},
}

func checkLimitKey(n int) error {
	if n == 0 {
		return nil
	}
	return checkLimit(n)
}

func checkID(s string) error {
	if len(s) > 128 {
		return fmt.Errorf("worker id is %d bytes, over 128", len(s))
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("worker id %q must be printable ASCII without spaces", s)
		}
	}
	return nil
}

func checkShardList(l []int) error {
	seen := make(map[int]bool)
	for _, s := range l {
		if s < 0 || s >= shards.MaxShards {
			return fmt.Errorf("shard %d out of range 0..%d", s, shards.MaxShards-1)
		}
		if seen[s] {
			return fmt.Errorf("shard %d listed twice", s)
		}
		seen[s] = true
	}
	return nil
}

// checkAwakeGrace checks AwakeGrace against the producers' fleet cache: a
// member that marked itself asleep keeps scanning this long, so that a
// producer still holding an older view of the fleet (one it did not ring
// the doorbell for) cannot leave a task unseen.
func checkAwakeGrace(d time.Duration) error {
	if d <= shards.FleetCacheTTL {
		return fmt.Errorf("duration %v must be more than %v, the producers' fleet cache TTL: a member going to sleep keeps scanning this long, until no producer can still see it awake and skip ringing the doorbell", d, shards.FleetCacheTTL)
	}
	return nil
}

func init() {
	settings.Publish(configKeys)
	settings.Publish(poolKeys)
}
