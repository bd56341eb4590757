package worker

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/shards"
)

// DefaultDiscoveryTTL is the default of [queue.direct_dispatch]
// worker_discovery_cache_ttl_secs.
const DefaultDiscoveryTTL = 30 * time.Second

// Config configures a Worker. Zero fields take their defaults, and every
// field is checked, as configKeys declares them, once per field: a key's
// name is its field's in snake_case (poll_min for PollMin), and
// queue.toml.example lists every key with its default. The comments below
// say what the fields mean.
type Config struct {
	// ID names the worker in claims and logs; "" picks host-pid-random.
	ID string
	// Concurrency is how many handlers a pool runs at once unless it sets
	// MaxInFlight: the default of the default pool's MaxInFlight and of
	// each named pool's. The worker runs up to the sum over its pools.
	Concurrency int
	// MaxInFlight bounds the default pool's running handlers (0:
	// Concurrency; Unbounded: none). MaxQueueDepth bounds its claimed tasks
	// waiting to start under the policies that claim ahead (0: a listing's
	// worth, max(MaxInFlight, PollBatch) + 1; Unbounded: none; unused
	// under Block), QueuePolicy says what happens to a
	// task found when it is full ("": Block). See dispatch.go and
	// docs/flow-control.md.
	MaxInFlight, MaxQueueDepth int
	QueuePolicy                QueuePolicy
	// CrashPolicy is what a handler that panics does to its task:
	// CrashFail ("" too: a failed attempt, retried after the task's retry
	// delay, by any worker) or CrashRequeue (a failed attempt, run again
	// at once by this worker, ahead of its pool's pending tasks).
	CrashPolicy CrashPolicy
	// Pools run the task types they list with their own handlers and
	// limits; the other types run in the default pool.
	Pools []Pool
	// Hooks observe the dispatch queues.
	Hooks Hooks
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// DispatchMode is the queue's dispatch mode, which must match its
	// manifest ([queue] dispatch_mode): shards.DispatchShared ("" too) or
	// shards.DispatchDirect. Under direct dispatch the worker also holds a
	// lease of its own, workers/{ID}.lease.json, for LeaseDuration,
	// renewed every LeaseRenewalInterval; it lists its inbox, adaptively,
	// and scavenges the overflow (and moves dead workers' inboxes there)
	// every OverflowScavengeInterval. DiscoveryTTL is how long producers
	// cache the worker leases ([queue.direct_dispatch]): a worker that
	// marks itself asleep keeps listing its inbox that long, and AwakeGrace
	// more. See docs/direct-dispatch.md.
	DispatchMode                                                  shards.DispatchMode
	DiscoveryTTL                                                  time.Duration
	LeaseDuration, LeaseRenewalInterval, OverflowScavengeInterval time.Duration
	// OwnShards pins the worker to these shards: it polls them and takes no
	// part in the fleet (nil: share the shards with the fleet).
	OwnShards []int
	// Dedicated workers are always members of the fleet: they never stand
	// by, and never leave when idle. By default workers are elastic: an idle
	// fleet keeps one member, and standbys join when members ask for help.
	Dedicated bool
	// MemberTTL is how long a member's fleet entry lasts without renewal;
	// members renew every third of it. It bounds failover: a dead member's
	// shards move on within MemberTTL + LeaseMargin + a renewal interval.
	MemberTTL time.Duration
	// StandbyPoll is how often the standbys of an awake fleet, taking
	// turns, read the fleet object: once per StandbyPoll fleet-wide, each
	// of N standbys every N × StandbyPoll (standby.go). A dedicated
	// member asleep renews its entry for twice MemberTTL.
	StandbyPoll time.Duration
	// IdleLeave: a member other than the first leaves the fleet after this
	// long without finding work.
	IdleLeave time.Duration
	// SleepAfter: the only member puts the fleet to sleep after this long
	// without finding work, keeps scanning for AwakeGrace (covering
	// producers' cached view), then, elastic, leaves it for the standbys'
	// turns. BellPoll is how often the sleeping fleet reads its doorbell,
	// fleet-wide (the standbys' turns; a dedicated member asleep reads it
	// itself), SleepScan how often it still lists shard 0.
	SleepAfter, BellPoll, SleepScan, AwakeGrace time.Duration
	// DrainMax caps the back-off of sweeps of inactive shards.
	DrainMax time.Duration
	// MaxShards and ReshardAfter shape the automatic reshard: when the
	// members keep asking for more members than the queue has shards (so
	// standbys beyond the shard count cannot help) for ReshardAfter by S3
	// time, the fleet's first member grows the shard count to
	// min(MaxShards, max(2 × shards, the members asked for)). A MaxShards
	// at or below the queue's shard count turns the policy off, and so does
	// a Shards other than 0: processes configured with a shard count refuse
	// a queue that has another.
	MaxShards    int
	ReshardAfter time.Duration
	// RateLimits caps the starts of task types fleet-wide: at most N
	// claims of the type per Interval of S3 time, counted in the bucket
	// (ratelimits/{hash}.json) and shared by every worker that sets a
	// limit for the type. Each worker enforces its own entry: every
	// worker running the type must be given the same limit. A task over
	// the limit is not claimed and not failed: it stays pending, held by
	// the worker until a window opens (docs/scheduling.md#rate-limits).
	// ParseRateLimit reads "N/INTERVAL".
	RateLimits map[string]RateLimit
	// PauseCheckInterval is how often the worker reads the queue's pause
	// object (one GET): it stops claiming paused types, or everything while
	// the whole queue is paused, within this long of a pause, and claims
	// them again within this long of a resume (docs/pause.md).
	PauseCheckInterval time.Duration
	// RootMembers is how many members renew their entries in the fleet
	// object itself; members that join beyond them renew a lease object of
	// their own, so that writes to the fleet object, and their 412s, do not
	// grow with the fleet (docs/shards.md).
	RootMembers int
	// ResultInlineMax: a handler's result up to this many bytes (compact
	// JSON) is stored in the task object (at most task.MaxResultBytes, the
	// default); a larger one is stored apart, in an object of its own under
	// results/ written before the commit (one PUT more), and the task
	// references it (task.ResultRef). MaxResultBytes bounds a result (at
	// most task.MaxExternalResultBytes; default 4 MiB): a larger one ends
	// the task dead.
	ResultInlineMax, MaxResultBytes int
	// PollMin, PollMax and PollMultiplier shape adaptive polling: the
	// interval resets to PollMin when a poll finds work and grows by
	// PollMultiplier per empty poll up to PollMax.
	PollMin, PollMax time.Duration
	PollMultiplier   float64
	// PollPace and PollBatch shape the interval after a poll that found
	// work: PollPace while a listing brings PollBatch tasks or fewer at
	// the recent arrival rate (a task waits about PollPace / 2 for its
	// listing, whatever the rate), and longer in proportion beyond (a
	// listing of twice PollBatch comes every twice PollPace: the LISTs of
	// a busy member grow slower than its tasks), within [PollMin,
	// PollMax]. A listing asks for up to max(free handlers, the pools'
	// capacity, PollBatch) + 1 due tasks; those beyond the free handlers
	// are kept unclaimed (for up to PollMax) and claimed as handlers free
	// up.
	PollPace  time.Duration
	PollBatch float64
	// ScanLag is how late a task may land and still be found by the shard
	// scans: once per ScanLag a scan starts twice this far behind its
	// cursor, the others at it.
	ScanLag time.Duration
	// ScanLookback is how far back a new worker's scans start; older
	// pending tasks reach it through the ready index.
	ScanLookback time.Duration
	// LeaseMargin: the worker stops a handler this long before its lease
	// expires by S3 time if it could not renew.
	LeaseMargin time.Duration
	// ShutdownGrace is how long Run waits for in-flight handlers after its
	// context ends before canceling them and handing their tasks back.
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
	// OnEvent, if set, is called with every event the worker publishes, on
	// the goroutine that publishes it and before Events gets it: it must
	// return quickly, or it holds the worker up. The simulator relies on
	// its being synchronous; observers should prefer Events.
	OnEvent func(Event)
	// Events, if set, is the bus the worker publishes its events on
	// (task outcomes, claims, shard and doorbell changes; docs/events.md).
	// Whether or not it is set, the worker logs each task outcome at info
	// through Logger.
	Events *events.Bus
	// Rand is the source of every random draw: the default worker id,
	// claim ids, jitter (retry delays, standby reads). nil means
	// crypto/rand.Reader. A seeded source makes a run reproducible (the
	// simulator); reads are serialised, so it need not be safe for
	// concurrent use. A read that fails panics.
	Rand io.Reader
	// TracerProvider makes the worker's spans (s3queue.claim,
	// s3queue.run, s3queue.commit; docs/tracing.md), which continue the
	// trace a task carries from its submit; nil is
	// otel.GetTracerProvider(), a no-op unless the program installs one.
	TracerProvider trace.TracerProvider
	// Middleware wraps every handler invocation, the first outermost,
	// inside the run's span (see Middleware).
	Middleware []Middleware
}

// Event is something that happened in the worker: to a task (claimed,
// succeeded, failed, dead, snoozed, canceled, lease_lost, released,
// corrupt, ...) or to its place in the fleet (shard_acquired,
// shard_released, fleet_asleep, fleet_woken). docs/events.md lists the
// kinds and their fields.
type Event = events.Event

// Kind is an Event's kind.
type Kind = events.Kind

// Stats counts what the worker did.
type Stats struct {
	Claimed, Succeeded, Failed, Dead, Snoozed, Canceled, LeaseLost int64
	// Rejected counts outcomes the fence refused (the task had moved on
	// after a lease loss): events "outcome_rejected".
	Rejected int64
	// Released counts tasks handed back unfinished: at shutdown, dropped
	// from pending (DropOldest).
	Released, Corrupt, Panics int64
	// Refused counts tasks the dispatch queue refused (Reject), Dropped
	// those it dropped (DropLatest, DropOldest), each refusal once per
	// task version (refusals.go), Requeued those whose
	// handler crashed and ran again at once (CrashRequeue).
	Refused, Dropped, Requeued int64
	// Renewed counts the task lease renewals written (of running tasks,
	// and of claimed tasks waiting in pending); RenewFailed the renewals
	// that failed for another reason than a lost lease (a request error:
	// the worker tries again before the lease runs out). Lost leases are
	// LeaseLost.
	Renewed, RenewFailed int64
}

// fill sets the defaults; src is the worker's source over c.Rand, from
// which the default id draws.
func (c *Config) fill(src *rnd.Source) error {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), src.Hex(3))
	}
	configKeys.Fill(c)
	if c.DispatchMode == "" {
		c.DispatchMode = shards.DispatchShared
	}
	if c.DiscoveryTTL == 0 {
		c.DiscoveryTTL = DefaultDiscoveryTTL
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = c.Concurrency
	}
	if c.MaxQueueDepth == 0 {
		c.MaxQueueDepth = defaultDepth(c.MaxInFlight, c.PollBatch)
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
	if err := configKeys.Validate(c); err != nil {
		return err
	}
	switch c.DispatchMode {
	case shards.DispatchShared:
	case shards.DispatchDirect:
		if err := direct.CheckWorkerID(c.ID); err != nil {
			return err
		}
		if c.OwnShards != nil {
			return fmt.Errorf("worker.own_shards: a worker pinned to shards takes no part in direct dispatch; remove own_shards or use dispatch_mode = %q", shards.DispatchShared)
		}
	default:
		return fmt.Errorf("dispatch mode %q: want %q or %q", c.DispatchMode, shards.DispatchShared, shards.DispatchDirect)
	}
	c.Pools = append([]Pool(nil), c.Pools...)
	if err := CheckRateLimits(c.RateLimits); err != nil {
		return err
	}
	c.RateLimits = maps.Clone(c.RateLimits)
	return checkPools(c)
}

// CrashPolicy is what a crashed handler does to its task (Config.CrashPolicy,
// [worker] crash_policy): CrashFail or CrashRequeue.
type CrashPolicy string

// Crash policies (Config.CrashPolicy).
const (
	CrashFail    CrashPolicy = "fail"
	CrashRequeue CrashPolicy = "requeue"
)

// ParseCrashPolicy parses a crash policy's name: "fail" or "requeue".
func ParseCrashPolicy(s string) (CrashPolicy, error) {
	p := CrashPolicy(s)
	return p, p.Validate()
}

// Validate reports an error unless p is CrashFail or CrashRequeue.
func (p CrashPolicy) Validate() error {
	if p != CrashFail && p != CrashRequeue {
		return fmt.Errorf("unknown crash policy %q: want fail or requeue", string(p))
	}
	return nil
}
