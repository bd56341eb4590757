package worker

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/s3queue/s3queue/clock"
)

// Config configures a Worker. Zero fields take the defaults.
type Config struct {
	// ID names the worker in claims and logs (default host-pid-random).
	ID string
	// Concurrency is how many handlers run at once (default 4).
	Concurrency int
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// OwnShards pins the worker to these shards: it polls them and takes no
	// part in the fleet (nil: share the shards with the fleet).
	OwnShards []int
	// Dedicated workers are always members of the fleet: they never stand
	// by, and never leave when idle. By default workers are elastic: an idle
	// fleet keeps one member, and standbys join when members ask for help.
	Dedicated bool
	// MemberTTL is how long a member's fleet entry lasts without renewal;
	// members renew every third of it (default 30s). It bounds failover:
	// a dead member's shards move on within MemberTTL + LeaseMargin + a
	// renewal interval.
	MemberTTL time.Duration
	// StandbyPoll is how often a standby reads the fleet object (default
	// 25s); five times less often while the fleet is asleep. A sleeping
	// member's entry lasts twice MemberTTL.
	StandbyPoll time.Duration
	// IdleLeave: a member other than the first leaves the fleet after this
	// long without finding work (default 60s).
	IdleLeave time.Duration
	// SleepAfter: the only member goes to sleep at the doorbell after this
	// long without finding work (default 30s); BellPoll is how often it then
	// reads the doorbell (default 2s), SleepScan how often it still scans
	// its shard (default 60s), AwakeGrace how long it keeps scanning after
	// marking itself asleep, covering producers' cached view (default 5s).
	SleepAfter, BellPoll, SleepScan, AwakeGrace time.Duration
	// DrainMax caps the back-off of sweeps of inactive shards (default 10m).
	DrainMax time.Duration
	// PollMin, PollMax and PollMultiplier shape adaptive polling: the
	// interval resets to PollMin when a poll finds work and grows by
	// PollMultiplier per empty poll up to PollMax (defaults 200ms, 5s, 2).
	PollMin, PollMax time.Duration
	PollMultiplier   float64
	// PollBatch shapes the interval after a poll that found work: the time
	// the recent arrival rate takes to bring this many tasks, within
	// [PollMin, PollMax] (default 3). Under heavy load that is PollMin; at a
	// task a second it is about three seconds, one LIST per three tasks. Larger
	// values trade pickup latency for fewer LISTs (the economy profile). A
	// listing asks for up to max(Concurrency, PollBatch) + 1 due tasks;
	// those beyond the free slots are held (for up to PollMax) and claimed
	// as slots free up.
	PollBatch float64
	// ScanLag is how late a task may land and still be found by the shard
	// scans: once per ScanLag a scan starts twice this far behind its
	// cursor, the others at it (default 5s).
	ScanLag time.Duration
	// ScanLookback is how far back a new worker's scans start (default 1h);
	// older pending tasks reach it through the ready index.
	ScanLookback time.Duration
	// LeaseMargin: the worker stops a handler this long before its lease
	// expires by S3 time if it could not renew (default 2s).
	LeaseMargin time.Duration
	// ShutdownGrace is how long Run waits for in-flight handlers after its
	// context ends before canceling them and handing their tasks back
	// (default 30s).
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// Clock, if set, is shared with other components of this process.
	Clock *clock.Authoritative
	// Local is the local monotonic clock that paces the worker: poll
	// intervals, renewals, back-off, shutdown grace (default clock.System()).
	// It never decides whether a task or a lease is due; the authoritative
	// clock does, which the worker creates on Local unless Clock is set.
	// Tests drive time with clock.Manual.
	Local clock.Local
	// OnEvent, if set, is called for every task event (observability).
	OnEvent func(Event)
	// Rand is the source of every random draw: the default worker id,
	// claim ids, jitter (retry delays, standby reads). nil means
	// crypto/rand.Reader. A seeded source makes a run reproducible (the
	// simulator); it need not be safe for concurrent use.
	Rand io.Reader
}

// Event describes something that happened to a task in this worker.
type Event struct {
	// Kind: claimed, succeeded, failed, dead, snoozed, canceled, lease_lost,
	// rejected, released, corrupt (a corrupt object, or one whose reads
	// kept failing, was skipped).
	Kind    string
	TaskID  string
	Type    string
	Attempt int
	Err     error
}

// Stats counts what the worker did.
type Stats struct {
	Claimed, Succeeded, Failed, Dead, Snoozed, Canceled, LeaseLost, Rejected, Released, Corrupt, Panics int64
}

func (c *Config) fill() error {
	c.Rand = &lockedRand{r: randSource(c.Rand)}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(c.Rand, 3))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.PollMin == 0 {
		c.PollMin = 200 * time.Millisecond
	}
	if c.PollMax == 0 {
		c.PollMax = 5 * time.Second
	}
	if c.PollMultiplier == 0 {
		c.PollMultiplier = 2
	}
	if c.PollBatch == 0 {
		c.PollBatch = 3
	}
	if c.ScanLag == 0 {
		c.ScanLag = 5 * time.Second
	}
	if c.ScanLookback == 0 {
		c.ScanLookback = time.Hour
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = 2 * time.Second
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&c.MemberTTL, 30 * time.Second}, {&c.StandbyPoll, 25 * time.Second}, {&c.IdleLeave, time.Minute},
		{&c.SleepAfter, 30 * time.Second}, {&c.BellPoll, 2 * time.Second}, {&c.SleepScan, time.Minute},
		{&c.AwakeGrace, 5 * time.Second}, {&c.DrainMax, 10 * time.Minute},
	}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Local == nil {
		c.Local = clock.System()
	}
	return c.validate()
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("worker: concurrency %d out of range 1..10000", c.Concurrency)
	case c.PollMin <= 0 || c.PollMax < c.PollMin:
		return fmt.Errorf("worker: poll interval min %v must be positive and at most max %v", c.PollMin, c.PollMax)
	case c.PollMultiplier < 1:
		return fmt.Errorf("worker: poll multiplier %v must be at least 1", c.PollMultiplier)
	case c.PollBatch <= 0:
		return fmt.Errorf("worker: poll batch %v must be positive", c.PollBatch)
	case c.ScanLag < 0 || c.ScanLookback < 0 || c.LeaseMargin < 0 || c.ShutdownGrace < 0 || c.StandbyPoll < 0 ||
		c.IdleLeave < 0 || c.SleepAfter < 0 || c.BellPoll < 0 || c.SleepScan < 0 || c.AwakeGrace < 0 || c.DrainMax < 0:
		return fmt.Errorf("worker: durations must not be negative")
	case c.MemberTTL < 3*c.LeaseMargin:
		return fmt.Errorf("worker: member ttl %v must be at least three lease margins (%v)", c.MemberTTL, 3*c.LeaseMargin)
	}
	return nil
}
