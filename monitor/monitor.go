// Package monitor keeps the queue healthy: it re-dispatches running tasks
// whose lease expired by S3 time (or dead-letters them when no attempts are
// left), repairs pending tasks that lost their way to a worker, reports
// corrupt objects, and deletes finished tasks after their retention.
//
// It works shard by shard in bounded pages with cursors, so one tick costs
// at most a known number of requests. Several monitors may run at once:
// every change is a CAS on the task it read, so the second one to act on a
// task finds it already changed and does nothing.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Config configures a Monitor. Zero (or negative) fields take their
// defaults, and every field is checked, as configKeys declares them, once
// per field: a key's name is its field's in snake_case (page_size for
// PageSize), and queue.toml.example lists every key with its default. The
// comments below say what the fields mean.
type Config struct {
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// DispatchMode must match the queue's manifest ([queue]
	// dispatch_mode): shards.DispatchShared ("" too) or
	// shards.DispatchDirect. Under direct dispatch the monitor also moves
	// the inboxes of dead workers to the overflow every RepairAfter
	// (internal/direct.Recover), reading only the leases not written for
	// WorkerLease (the workers' lease_duration_secs; 0 reads them all).
	DispatchMode shards.DispatchMode
	WorkerLease  time.Duration
	// Interval between ticks in Run.
	Interval time.Duration
	// PageSize is how many keys one tick lists per shard.
	PageSize int
	// ShardsPerTick is how many of the shards due for a sweep one tick
	// visits; 0 visits them all.
	ShardsPerTick int
	// LeaseMargin: a lease is taken over only once S3 time is certainly
	// past its expiry plus this margin.
	LeaseMargin time.Duration
	// RepairAfter: a pending task due this long without being claimed is
	// announced in the ready index again.
	RepairAfter time.Duration
	// Retention: finished tasks (succeeded, dead, canceled) are deleted
	// this long after their last change (a task with an idempotency key is
	// kept at least task.MinKeyedRetention, and its uniqueness window and
	// a minute more: Task.MinRetention).
	Retention time.Duration
	// KeepForever, with Retention 0, keeps finished tasks for ever instead
	// of taking the default retention (the CLI's monitor.retention = "0"
	// sets it). A Retention above 0 applies whatever KeepForever says.
	KeepForever bool
	// ResultTTL, above 0, drops a succeeded task's result (inline, or the
	// object it references) ResultTTL after the task finished: the task is
	// rewritten by CAS without it (task.ExpireResult), then a result
	// object is deleted. A succeeded task's size says whether it holds a
	// result (task.HoldsResultBySize), so only those are read, and while
	// it is on sweeps do not settle past one. 0 keeps results until
	// retention.
	ResultTTL time.Duration
	// OrphanCheck is how often the monitor lists results/ for objects no
	// task references (left by a crash between a result's PUT and its
	// commit), reading the task of each object written more than OrphanAge
	// ago once (default FullSweep and an hour; no queue.toml keys).
	OrphanCheck, OrphanAge time.Duration
	// StaleAfter: a task object is read only once its ETag has stayed the
	// same this long by S3 time (since its last write, or since the monitor
	// first listed it, whichever is earlier). Tasks that finish quickly, and live ones
	// whose workers renew them, are never read by the monitor; finished
	// ones are known from their size (see task.FinishedBySize).
	StaleAfter time.Duration
	// Leader makes monitors elect one of them with a lease
	// (monitor-lease.json): only the holder sweeps, the others stand by and
	// take over when its lease expires by S3 time. Without it, several
	// monitors all sweep, which is safe (every change is a CAS) but pays
	// for each sweep once per monitor.
	Leader bool
	// ID names this monitor in the leader lease (default: host and pid).
	ID string
	// SweepMax caps the back-off of sweeps of shards that held nothing but
	// finished tasks at their last sweep; shards with live work are swept
	// every Interval.
	SweepMax time.Duration
	// FullSweep is how often the monitor walks the finished tasks at the
	// head of each shard: sweeps start at the shard's floor, past the run
	// of keys that held only finished tasks, and a full walk from the first
	// key, one page per tick, does retention there and catches a requeue
	// whose announcement was lost.
	FullSweep time.Duration
	Logger    *slog.Logger
	// Events, if set, is the bus the monitor publishes on what it does to
	// tasks: redispatched, dead (a lease expired with no attempts left),
	// repaired, deleted and corrupt (docs/events.md).
	Events *events.Bus
	// Clock, if set, is shared with other components of this process.
	Clock *clock.Authoritative
	// Local is this machine's monotonic clock: it paces Run's ticks and the
	// leader lease's renewals, ages the cached fleet view, and times Clock
	// when the monitor makes its own (default clock.System()).
	Local clock.Local
	// DeadList is how many of the most recent dead tasks the monitor keeps
	// for State's dead-letter list (the dashboard's): it reads each dead
	// task once, by one GET when a sweep first lists it (and again only if
	// its object changes while it stays dead), at most 20 per tick. 0 (the
	// default) keeps none and reads none.
	DeadList int
	// Scheduler makes the monitor submit the tasks of the queue's
	// schedules (schedules/, docs/scheduling.md) through Submit, one task
	// per tick fleet-wide however many monitors do; with Leader, only the
	// leader does. It is on by default: NoScheduler turns it off (a zero
	// Config has both false, which takes the default). Without Submit
	// nothing is scheduled (the root package's NewMonitor gives one).
	Scheduler, NoScheduler bool
	// ScheduleRefresh is how often the scheduler lists schedules/ to
	// learn of added, changed and removed schedules.
	ScheduleRefresh time.Duration
	// Submit submits a tick's task with its idempotency key (a producer's
	// Submit).
	Submit SubmitFunc
	// Rand is the source of every random draw: jitter (of retries, and of
	// the CAS pauses after a lost race) and shard choice; nil means
	// crypto/rand.Reader. Reads are serialised, so it need not be safe for
	// concurrent use; a read that fails panics.
	Rand io.Reader
}

// TickStats counts what one tick (or a monitor's life) did.
type TickStats struct {
	Listed, Loaded, Redispatched, DeadLettered, Repaired, Deleted, Corrupt int
	// ResultsExpired counts results dropped by ResultTTL, OrphansDeleted
	// result objects that no task references (collectOrphans).
	ResultsExpired, OrphansDeleted int
	SweepsCompleted                int
	// Settled counts parents whose dependents the repair settled after a
	// crash (internal/deps).
	Settled int
	// Recovered counts inbox entries of dead workers moved to the overflow
	// (direct dispatch).
	Recovered int
	// Ticks is how many ticks ended (1 for one tick), whatever they did.
	Ticks int
}

func (s *TickStats) add(o TickStats) {
	s.Ticks += o.Ticks
	s.Listed += o.Listed
	s.Loaded += o.Loaded
	s.Redispatched += o.Redispatched
	s.DeadLettered += o.DeadLettered
	s.Repaired += o.Repaired
	s.Deleted += o.Deleted
	s.ResultsExpired += o.ResultsExpired
	s.OrphansDeleted += o.OrphansDeleted
	s.Corrupt += o.Corrupt
	s.SweepsCompleted += o.SweepsCompleted
	s.Settled += o.Settled
	s.Recovered += o.Recovered
}

// Monitor sweeps the queue. It owns the sweeps (their listing, cursors
// and floors), the leader lease, the fleet view and the config, and hands
// each listed object, or each tick, to its maintenance services: the
// redispatcher (expired leases), pointerRepair (pending tasks and their
// ready pointers), retentionExpiry (retention and result TTL), depRepair
// (dependents and slots a crash left), orphanCollector (unreferenced
// results), inboxRecovery (direct dispatch) and, stepped by Run, the
// scheduler.
type Monitor struct {
	st       s3store.Store
	cfg      Config
	clock    *clock.Authoritative
	local    clock.Local
	manifest shards.Manifest
	log      *slog.Logger
	// rand (over cfg.Rand, shared with fleet) is drawn from in a tick only,
	// under mu, so a seeded run draws in the tick's order.
	rand *rnd.Source

	mu     sync.Mutex
	next   int              // next shard to visit
	sweeps map[int]*sweep   // per shard
	known  map[string]known // key -> what the last GET said, by ETag (live tasks only)
	lease  *lease.Lease     // with Config.Leader
	renewd time.Time        // local time the lease was last written
	fleet  *shards.FleetCache
	learnt int // the fleet's shard count the manifest was last re-read for
	// asleep: at the last read of the fleet object the fleet slept with no
	// member (its standbys watch the doorbell); quiet shards are then swept
	// less often, and the object read less often (activeShards).
	asleep bool
	total  TickStats
	obs    observer // what State reports, gathered by the ticks

	snapMu    sync.Mutex // guards the two below; never held across a request
	snap      State      // made at the end of the last tick
	snapLocal time.Time  // local time snap.At was read

	redispatcher redispatcher
	pointers     pointerRepair
	retention    retentionExpiry
	depRepair    depRepair
	orphans      orphanCollector
	inbox        inboxRecovery // direct dispatch only

	// sched submits the schedules' ticks (nil: no scheduler); Run's
	// goroutine alone steps it.
	sched *scheduler
}

// sweep is the monitor's walk of one shard. Keys sort by time, and the
// oldest tasks are the finished ones, so a shard is a head of finished
// tasks, then live ones and recent finished ones mixed. Sweeps start at the
// floor, the last key of that head as the previous sweep saw it: the
// retained history (days of finished tasks) is not listed every few seconds,
// and a sweep takes one page, not one per thousand retained tasks (a
// history that fits in the room its last page leaves is listed anyway:
// headFits). Only
// Requeue turns a finished task live again; the full walk below the floor
// every FullSweep catches one whose announcement was lost.
type sweep struct {
	mid      bool          // a sweep is in progress
	cursor   string        // its last key listed
	started  time.Time     // S3 time it started
	sawLive  bool          // it saw a live object
	settling bool          // no live or recent key yet
	settled  string        // its last key before the first live or recent one
	lower    *string       // the full walk found a live key after this one, below the floor
	floor    string        // every key up to this one held a finished task
	due      time.Time     // S3 time the next sweep starts
	every    time.Duration // the current back-off

	fullMid    bool
	fullCursor string
	fullDue    time.Time // S3 time the next full walk starts

	obs shardObs // what the sweeps and walks learnt for State
}

// known caches what a task object said at one ETag, so an unchanged object
// is never read twice.
type known struct {
	etag      string
	seen      time.Time // S3 time this ETag was first listed
	loaded    bool      // the fields below come from a GET at this ETag
	status    task.Status
	expires   time.Time // running: claim expiry
	updated   time.Time
	available time.Time
	announced time.Time // pending: S3 time a ready pointer was last written at this ETag
	corrupt   bool
	typ       string // the task's type (to skip a paused one unread)
	// slot: blocked for its slot; slotChecked: at this ETag, its slot was
	// found to know it (deps.CheckWaiting).
	slot, slotChecked bool
}

// New opens the queue in st for a monitor.
func New(ctx context.Context, st s3store.Store, cfg Config) (*Monitor, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	local := cfg.Local
	if local == nil {
		local = clock.System()
	}
	// The clock exists before the first request, so every response syncs it.
	c := cfg.Clock
	if c == nil {
		c = clock.New(st, clock.Config{Local: local})
	}
	m, err := shards.OpenMode(ctx, st, cfg.Shards, cfg.DispatchMode)
	if err != nil {
		return nil, err
	}
	src := rnd.New(cfg.Rand)
	mon := &Monitor{st: st, cfg: cfg, clock: c, local: local, manifest: m, log: cfg.Logger.WithGroup("monitor"), rand: src,
		sweeps: make(map[int]*sweep), known: make(map[string]known), fleet: shards.NewFleetCache(st, cfg.LeaseMargin, local, src),
		lease: lease.New(st, c, LeaseKey, cfg.ID, lease.Config{TTL: 6 * cfg.Interval, Margin: cfg.LeaseMargin})}
	if cfg.Scheduler && !cfg.NoScheduler && cfg.Submit != nil {
		mon.sched = newScheduler(st, c, local, mon.log, cfg)
	}
	mon.depRepair = depRepair{st: st, local: local, log: mon.log, repairAfter: cfg.RepairAfter, sweepMax: cfg.SweepMax,
		known: mon.known, deps: mon.deps, publish: mon.publish}
	mon.orphans = newOrphanCollector(st, local, mon.log, cfg)
	mon.inbox = inboxRecovery{st: st, clock: c, local: local, log: mon.log, events: cfg.Events, origin: cfg.ID,
		every: cfg.RepairAfter, margin: cfg.LeaseMargin, workerLease: cfg.WorkerLease}
	cas := s3store.CAS{Jitter: src.Float64, Sleep: func(ctx context.Context, d time.Duration) error {
		if !clock.Sleep(local, d, ctx.Done()) {
			return ctx.Err()
		}
		return nil
	}}
	mon.redispatcher = redispatcher{st: st, clock: c, local: local, log: mon.log, rand: src, margin: cfg.LeaseMargin, known: mon.known,
		deps: mon.deps, announce: mon.announce, publish: mon.publish}
	mon.pointers = pointerRepair{st: st, log: mon.log, repairAfter: cfg.RepairAfter, known: mon.known,
		counts: func() []int { return mon.manifest.Counts() }, announce: mon.announce,
		pauses: &pause.Watch{St: st, Local: local, Interval: pause.DefaultInterval, Log: mon.log},
		cover:  mon.cover, publish: mon.publish, publishCorrupt: mon.publishCorrupt}
	mon.retention = retentionExpiry{st: st, clock: c, local: local, log: mon.log, cas: cas, retention: cfg.Retention, resultTTL: cfg.ResultTTL,
		deleteHonoured: func() bool { return mon.manifest.DeleteHonoured() }, known: mon.known,
		publish: mon.publish, publishCorrupt: mon.publishCorrupt}
	return mon, nil
}

// Run ticks at once and then every Interval (on Config.Local) until ctx
// ends, and returns nil then. A tick that fails with an error that will not
// heal (wrapping s3store.ErrUnusable: the bucket or root is gone, access is
// denied) ends Run with that error; other errors are logged, and the next
// tick comes at the usual pace. Stats counts the ticks.
func (m *Monitor) Run(ctx context.Context) error {
	// Ticks fall on the multiples of Interval since Run began, as a
	// time.Ticker's do: a tick that overruns is followed at once by the
	// next, and the ones it overran are dropped.
	next := m.local.Now().Add(m.cfg.Interval)
	t := m.local.NewTimer(m.cfg.Interval)
	defer t.Stop()
	// The scheduler wakes at the next tick of any schedule, or its next
	// listing of schedules/, on this goroutine: no polling in between.
	var schedC <-chan time.Time
	var st clock.Timer
	if m.sched != nil {
		st = m.local.NewTimer(time.Hour)
		defer st.Stop()
		schedC = st.C()
	}
	tick := true
	for {
		if tick {
			if _, err := m.tick(ctx); err != nil && ctx.Err() == nil {
				if errors.Is(err, s3store.ErrUnusable) {
					return fmt.Errorf("monitor: %w", err)
				}
				m.log.Warn("tick", "err", err)
			}
		}
		if m.sched != nil {
			wait, err := m.stepScheduler(ctx)
			if errors.Is(err, s3store.ErrUnusable) {
				return fmt.Errorf("monitor: scheduler: %w", err)
			}
			st.Stop()
			st.Reset(wait)
		}
		tick = false
		select {
		case <-ctx.Done():
			return nil
		case <-schedC:
			// Both timers may be ready at once, and a select picks at
			// random: the sweeps' tick goes first whichever won, so a
			// seeded run replays.
			select {
			case <-t.C():
				tick = true
			default:
			}
		case <-t.C():
			tick = true
		}
		if !tick {
			continue
		}
		now := m.local.Now()
		for !next.After(now) {
			next = next.Add(m.cfg.Interval)
		}
		t.Reset(next.Sub(now))
	}
}

// stepScheduler runs the scheduler's due work, if this monitor schedules
// now (with Leader, while it leads), and returns how long until it is due
// again.
func (m *Monitor) stepScheduler(ctx context.Context) (time.Duration, error) {
	if m.cfg.Leader && !m.Leading(ctx) {
		// The leader lease is taken at the sweeps' ticks.
		return m.cfg.Interval, nil
	}
	return m.sched.step(ctx)
}

// LeaseKey is the leader lease of monitors run with Config.Leader.
const LeaseKey = "monitor-lease.json"

// lead reports whether this monitor holds the leader lease, acquiring or
// renewing it as needed (one PUT per two intervals while leading).
func (m *Monitor) lead(ctx context.Context) (bool, error) {
	if m.lease.Valid(ctx) && clock.Since(m.local, m.renewd) < 2*m.cfg.Interval {
		return true, nil
	}
	var err error
	if m.lease.Epoch() > 0 {
		err = m.lease.Renew(ctx)
	}
	if m.lease.Epoch() == 0 || err != nil {
		err = m.lease.Acquire(ctx)
		if err == nil {
			// Leading again after another monitor led: the floors this one
			// kept may lie above tasks made live meanwhile (the other one
			// learnt of them). Sweeps start over from each shard's first
			// key, one walk of the retained history per change of leader.
			m.sweeps = make(map[int]*sweep)
			m.obs.sweepsReset()
		}
	}
	if errors.Is(err, s3store.ErrUnusable) {
		return false, fmt.Errorf("monitor lease: %w", err)
	}
	if err != nil {
		if !errors.Is(err, lease.ErrHeld) {
			m.log.Warn("monitor lease", "err", err)
		}
		return false, nil
	}
	m.renewd = m.local.Now()
	return true, nil
}

// Leading reports whether this monitor holds the leader lease (always true
// without Config.Leader).
func (m *Monitor) Leading(ctx context.Context) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.cfg.Leader || m.lease.Valid(ctx)
}

// Stats returns what the monitor has done so far.
func (m *Monitor) Stats() TickStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// tick sweeps one page of each of the next ShardsPerTick shards that are
// due, and one page of each full walk in progress. A sweep of a shard ends
// when its listing does; the next one starts over after Interval if the
// shard held live work, or after a back-off growing to SweepMax if it held
// only finished tasks.
func (m *Monitor) tick(ctx context.Context) (TickStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := m.sweepDue(ctx)
	st.Ticks = 1
	m.publishState(ctx, &st)
	m.total.add(st)
	return st, err
}

// sweepDue is the work of one tick, under m.mu.
func (m *Monitor) sweepDue(ctx context.Context) (TickStats, error) {
	var st TickStats
	var errs error
	if m.cfg.Leader {
		if ok, err := m.lead(ctx); !ok {
			return st, err
		}
	}
	iv, err := m.clock.Now(ctx)
	if err != nil {
		return st, err
	}
	m.obs.now, m.obs.nowLocal = iv, m.local.Now()
	now := iv.Earliest
	// A tenth of an interval of slack: ticks come every Interval, and a
	// sweep due "now" must not wait for the next one.
	soon := now.Add(m.cfg.Interval / 10)
	active := m.activeShards(ctx, iv)
	perTick := m.cfg.ShardsPerTick
	if perTick <= 0 || perTick > m.manifest.Shards {
		perTick = m.manifest.Shards
	}
	for i, visited := 0, 0; i < m.manifest.Shards && visited < perTick; i++ {
		shard := m.next
		m.next = (m.next + 1) % m.manifest.Shards
		sw := m.sweeps[shard]
		if sw == nil {
			sw = &sweep{fullDue: now.Add(m.cfg.FullSweep)} // the first sweep starts from the first key
			m.sweeps[shard] = sw
		}
		due := sw.due
		if shard < active {
			// New work lands here: however quiet the shard was, sweep it
			// often enough to see a dead worker's leases expire.
			due = minTime(due, sw.started.Add(awakeSweep*m.cfg.Interval))
		}
		quick := sw.mid || !soon.Before(due)
		full := sw.fullMid || (sw.floor != "" && !soon.Before(sw.fullDue))
		if !quick && !full {
			continue
		}
		visited++
		for _, page := range []struct {
			due  bool
			walk func(context.Context, int, *sweep) (TickStats, error)
		}{{quick, m.sweepPage}, {full, m.fullPage}} {
			if !page.due {
				continue
			}
			s, err := page.walk(ctx, shard, sw)
			st.add(s)
			if err != nil {
				errs = errors.Join(errs, err)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := m.depRepair.step(ctx, m.asleep, &st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := m.orphans.step(ctx, iv, &st); err != nil {
		errs = errors.Join(errs, err)
	}
	if m.manifest.Direct() {
		if err := m.inbox.step(ctx, m.manifest.DeleteHonoured(), &st); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	return st, errs
}

// awakeSweep: while the fleet is awake, the shards receiving new tasks are
// swept at least every awakeSweep intervals, whatever their back-off.
const awakeSweep = 3

// activeShards returns how many shards receive new tasks while the fleet
// is awake (shards [0, n) do), or 0 while it sleeps. It reads the fleet
// object at most once per awakeSweep intervals, through the cache the
// repair's announcements read it by, and learns of a reshard from it.
func (m *Monitor) activeShards(ctx context.Context, iv clock.Interval) int {
	every := awakeSweep * m.cfg.Interval
	if m.asleep {
		// A fleet asleep has nothing running and no new task but in
		// shard 0: learning a minute late that it woke costs a sweep of
		// its active shards a minute late, at most.
		every = max(every, asleepFleetRead)
	}
	f, err := m.fleet.GetWithin(ctx, every)
	if err != nil && !errors.Is(err, shards.ErrCorruptFleet) {
		m.log.Warn("read the fleet", "err", err) // the last view stands
	}
	m.learnShards(ctx, f)
	serving := f.Serving(iv, m.cfg.LeaseMargin)
	was := m.asleep
	m.asleep = f.Asleep && len(serving) == 0
	if was && !m.asleep {
		// Awake again: no quiet shard waits past SweepMax any more.
		for _, sw := range m.sweeps {
			if limit := iv.Earliest.Add(m.cfg.SweepMax); sw.due.After(limit) {
				sw.due = limit
			}
		}
	}
	if !f.Asleep && len(serving) > 0 {
		return shards.Active(len(serving), m.routeCount(f))
	}
	return 0
}

// While the fleet sleeps with no member, the monitor reads the fleet
// object every asleepFleetRead, and a shard other than 0 that held
// nothing live is swept at most every asleepSweepMax (its back-off grows
// past SweepMax): nothing runs, and new tasks go to shard 0 (still swept
// every SweepMax at most), so a quiet shard can only hold what an
// announcement failed to reach, which the monitor repairs within that.
// An idle fleet of 16 shards then costs the monitor 21 LISTs an hour
// instead of 96.
const (
	asleepFleetRead = time.Minute
	asleepSweepMax  = time.Hour
)

// learnShards re-reads the queue manifest when fleet f shows more shards
// than the monitor's manifest has: the queue was resharded, and the sweeps
// cover the new shards from the next tick. One GET, once per count the
// fleet shows (a failed read is tried again at the next tick).
func (m *Monitor) learnShards(ctx context.Context, f shards.Fleet) {
	if f.Shards <= m.manifest.Shards || f.Shards == m.learnt {
		return
	}
	nm, err := shards.ReadManifest(ctx, m.st)
	if err != nil {
		m.log.Warn("re-read the queue manifest after a reshard", "fleet_shards", f.Shards, "err", err)
		return
	}
	m.learnt = f.Shards
	if nm.Shards > m.manifest.Shards {
		m.log.Info("the queue was resharded", "shards", nm.Shards, "was", m.manifest.Shards)
		m.manifest = nm
	}
}

// routeCount is the shard count new work is routed by in fleet f: the
// members', never more than the manifest's.
func (m *Monitor) routeCount(f shards.Fleet) int {
	return min(f.ShardCount(m.manifest.Shards), m.manifest.Shards)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// floorLag keeps a shard's floor behind S3 time: keys are times, and a
// task submitted now, or a delayed task canceled before it was due, must
// not hold the floor above the keys of tasks submitted next.
const floorLag = shards.FloorLag

// listPage lists one page of shard after key, and the S3 time just after.
func (m *Monitor) listPage(ctx context.Context, shard int, after string) (s3store.ListPage, clock.Interval, error) {
	page, err := m.st.List(ctx, shards.TasksPrefix(shard), s3store.ListOptions{StartAfter: after, MaxKeys: m.cfg.PageSize})
	if err != nil {
		return page, clock.Interval{}, fmt.Errorf("sweep shard %d: %w", shard, err)
	}
	iv, err := m.clock.Now(ctx)
	return page, iv, err
}

// sweepPage lists the next page of the shard's sweep, from its floor.
func (m *Monitor) sweepPage(ctx context.Context, shard int, sw *sweep) (TickStats, error) {
	var st TickStats
	if !sw.mid {
		from := sw.floor
		if m.headFits(sw) {
			from = "" // the history costs no page more: list it too
		}
		sw.mid, sw.cursor, sw.started = true, from, time.Time{}
		sw.sawLive, sw.settling, sw.settled, sw.lower = false, true, from, nil
		sw.obs.sweepStarted(from)
	}
	page, iv, err := m.listPage(ctx, shard, sw.cursor)
	if err != nil {
		return st, err
	}
	if sw.started.IsZero() {
		sw.started = iv.Earliest
	}
	m.pageListed(sw, page, iv)
	sw.obs.curListed += len(page.Objects)
	// The floor stays floorLag behind S3 time: a task submitted now has an
	// id of now, and must not land below it.
	ceiling := shards.KeyBefore(shard, iv.Earliest.Add(-floorLag))
	for _, o := range page.Objects {
		st.Listed++
		live := m.live(o)
		sw.sawLive = sw.sawLive || live
		if live || o.Key >= ceiling || m.retention.holdsResult(o) {
			sw.settling = false
		}
		if sw.settling {
			sw.settled = o.Key
		}
		deleted := st.Deleted
		if err := m.inspectLogged(ctx, o, iv, &st); err != nil {
			return st, err
		}
		m.observe(shard, sw, o, iv, false, st.Deleted > deleted)
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
	}
	end := "" // the listing ended: the sweep covered every key
	if page.Truncated && len(page.Objects) > 0 {
		last := page.Objects[len(page.Objects)-1].Key
		if !m.overran(shard, sw, last, iv) {
			sw.cursor = last
			return st, nil
		}
		end = last
	}
	sw.mid = false
	sw.floor = sw.settled
	if sw.lower != nil && *sw.lower < sw.floor {
		sw.floor = *sw.lower
	}
	st.SweepsCompleted++
	m.sweepEnded(shard, sw, sw.started, end)
	every := m.cfg.Interval
	if !sw.sawLive {
		ceiling := m.cfg.SweepMax
		if m.asleep && shard != 0 {
			ceiling = max(ceiling, asleepSweepMax)
		}
		every = min(max(4*sw.every, m.cfg.Interval), ceiling)
	}
	sw.every, sw.due = every, sw.started.Add(every)
	return st, nil
}

// headFits reports whether the next sweep of sw can start from the shard's
// first key instead of its floor for no more LIST pages than the last one
// took: the finished history below the floor, as last counted, fits in the
// room its last page left. Such a sweep lists every key of the shard, so
// what State counts and lists as dead follows the bucket within one sweep
// whoever deleted what (a purge, a lifecycle rule, a person at the
// console), and a task requeued below the floor is watched at once. A
// history longer than that is listed by the full walks alone (every
// FullSweep): listing it at every sweep would cost a LIST per thousand
// retained tasks each time.
func (m *Monitor) headFits(sw *sweep) bool {
	ob := &sw.obs
	if sw.floor == "" || !ob.prevDone {
		return true
	}
	head := 0
	for _, n := range ob.below {
		head += n
	}
	above, whole := ob.prevListed, ob.prevListed+head
	if ob.prevStart == "" { // the last sweep listed the history too
		above, whole = max(0, ob.prevListed-head), ob.prevListed
	}
	pages := func(keys int) int { return max(1, (keys+m.cfg.PageSize-1)/m.cfg.PageSize) }
	return pages(whole) <= pages(above)
}

// overran reports whether the sweep of shard in progress, whose cursor
// would move to last, ends there though its listing goes on: it has run
// for longer than RepairAfter and listed every key of a time before it
// started. The keys after are pointers and tasks written since (and tasks
// whose ids lie in the future), and they can be written faster than a
// sweep lists them (one page a tick): the monitor's own repairs write a
// fresh pointer ahead of the cursor for each old one they find. A sweep
// that chased them would never end, and never list again the keys behind
// its cursor: the running task of a dead worker there would wait forever
// for its re-dispatch (seed 390163: a pause left a backlog whose pointers
// the repairs renewed faster than a sweep listed them, for 14 minutes). The
// next sweep starts over from the floor at once (the shard held live keys)
// and lists what this one left.
func (m *Monitor) overran(shard int, sw *sweep, last string, iv clock.Interval) bool {
	return iv.After(sw.started.Add(m.cfg.RepairAfter)) && last >= shards.KeyBefore(shard, sw.started)
}

// fullPage lists the next page of the shard's full walk, from its first
// key up to its floor.
func (m *Monitor) fullPage(ctx context.Context, shard int, sw *sweep) (TickStats, error) {
	var st TickStats
	if !sw.fullMid {
		sw.fullMid, sw.fullCursor = true, ""
		sw.obs.walkStarted()
	}
	page, iv, err := m.listPage(ctx, shard, sw.fullCursor)
	if err != nil {
		return st, err
	}
	prev, done := sw.fullCursor, !page.Truncated || len(page.Objects) == 0
	for _, o := range page.Objects {
		if o.Key > sw.floor {
			done = true // the sweeps cover the rest
			break
		}
		st.Listed++
		if m.live(o) || m.retention.holdsResult(o) {
			// Live below the floor: a requeued task. Lower the floor so
			// the sweeps watch it from now on, at the pace of live work.
			// (Or a result whose TTL the sweeps are to see pass.)
			if sw.floor > prev {
				sw.floor = prev
			}
			sw.every, sw.due = m.cfg.Interval, iv.Earliest
			if sw.mid && (sw.lower == nil || *sw.lower > prev) {
				low := prev
				sw.lower = &low
			}
		}
		prev = o.Key
		deleted := st.Deleted
		if err := m.inspectLogged(ctx, o, iv, &st); err != nil {
			return st, err
		}
		m.observe(shard, sw, o, iv, true, st.Deleted > deleted)
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
	}
	sw.fullCursor = prev
	if done {
		sw.fullMid, sw.fullCursor = false, ""
		sw.fullDue = iv.Earliest.Add(m.cfg.FullSweep)
		m.walkEnded(shard, sw, iv.Earliest)
	}
	return st, nil
}

// live reports whether a listed object may need the monitor: a ready
// pointer, or a task that is not finished (even size) and not known to be
// corrupt.
func (m *Monitor) live(o s3store.ObjectInfo) bool {
	if shards.IsPointer(o.Key) {
		return true
	}
	if task.FinishedBySize(o.Size) {
		return false
	}
	k, ok := m.known[o.Key]
	return !ok || !k.corrupt || k.etag != o.ETag
}

// inspectLogged inspects o and logs what went wrong; only an error that
// will not heal (s3store.ErrUnusable) is returned, to end the tick.
func (m *Monitor) inspectLogged(ctx context.Context, o s3store.ObjectInfo, iv clock.Interval, st *TickStats) error {
	err := m.inspect(ctx, o, iv, st)
	if errors.Is(err, s3store.ErrUnusable) {
		return fmt.Errorf("inspect %s: %w", o.Key, err)
	}
	if err != nil && ctx.Err() == nil {
		m.log.Warn("inspect task", "key", o.Key, "err", err)
	}
	return nil
}

// inspect decides what, if anything, one task object needs.
func (m *Monitor) inspect(ctx context.Context, o s3store.ObjectInfo, iv clock.Interval, st *TickStats) error {
	if shards.IsPointer(o.Key) {
		return m.pointers.inspect(ctx, o, iv, st)
	}
	k, ok := m.known[o.Key]
	if ok && k.corrupt && k.etag == o.ETag {
		return nil
	}
	if task.FinishedBySize(o.Size) {
		return m.retention.inspectFinished(ctx, o, iv, st)
	}
	if !ok || k.etag != o.ETag {
		// New to us, or changed since: wait and see whether it settles.
		// Its ETag has stayed the same since its last write, which a
		// sweep may list long after: one that listed a running task for
		// the first time 7 minutes after its worker's last write (a sweep
		// of a long shard, pages of 3, overran before the task's key and
		// the next one took 3 minutes to reach it) waited for yet another
		// sweep before reading it, and its expired lease was never seen
		// (seed 510504). Such an object is read at once.
		k = known{etag: o.ETag, seen: iv.Earliest, updated: o.LastModified}
		if !o.LastModified.IsZero() {
			k.seen = minTime(k.seen, o.LastModified)
		}
		m.known[o.Key] = k
	}
	switch {
	case !k.loaded && !k.status.Terminal() && iv.After(k.seen.Add(m.cfg.StaleAfter)) && !m.notDueYet(o, iv):
		// Unchanged for StaleAfter and not finished: read what it is.
		v, err := taskio.Load(ctx, m.st, o.Key)
		st.Loaded++
		switch {
		case errors.Is(err, s3store.ErrNotFound):
			delete(m.known, o.Key)
			return nil
		case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
			st.Corrupt++
			m.log.Error("corrupt task object; skipped", "key", o.Key, "err", err)
			m.publishCorrupt(o.Key, err)
			m.known[o.Key] = known{etag: o.ETag, corrupt: true, loaded: true}
			return nil
		case err != nil:
			return err
		}
		k = remember(v)
		m.known[o.Key] = k
	}
	if k.corrupt {
		return nil
	}
	switch {
	case !k.loaded && !k.status.Terminal():
		return nil // not settled yet
	case m.redispatcher.due(k, iv):
		return m.redispatcher.redispatch(ctx, o.Key, iv, st)
	case m.pointers.pendingDue(k, iv):
		return m.pointers.repairPending(ctx, o.Key, k, iv, st)
	case m.depRepair.slotDue(k, iv):
		return m.depRepair.checkSlot(ctx, o.Key, k, st)
	case k.status.Terminal() && m.retention.due(k.updated, iv):
		return m.retention.expireRetention(ctx, o.Key, iv, st)
	}
	return nil
}

// notDueYet reports whether o's size says pending, it was written no
// earlier than its id's time, and that time is less than RepairAfter ago.
// Such a task became available no earlier than its id's time (retries,
// snoozes and expiries only move availability later), so it cannot be due
// for repair yet and reading it can wait: a backlog of tasks waiting longer
// than StaleAfter costs the monitor no GETs. A task whose id lies well
// after its last write (submitted with a delay, or requeued before it was
// due, which makes it available at once) is read as before.
func (m *Monitor) notDueYet(o s3store.ObjectInfo, iv clock.Interval) bool {
	if !task.PendingBySize(o.Size) {
		return false
	}
	_, id, err := task.ParseKey(o.Key)
	if err != nil {
		return false
	}
	at, err := task.IDTime(id)
	return err == nil && !at.After(o.LastModified.Add(time.Minute)) && !iv.After(at.Add(m.cfg.RepairAfter))
}

// cover makes the sweeps of shard cover key, a live task's, from now on:
// if the floor lies at or above it, the floor goes just below it and the
// next sweep is due now; a sweep in progress (which may have started above
// key, or passed it while it was finished) ends with its floor below key
// too. Sweeps never raise a floor past a live key, so the task is watched
// at the pace of live work until it finishes, however far back its key is.
func (m *Monitor) cover(shard int, key string, iv clock.Interval) {
	sw := m.sweeps[shard]
	if sw == nil {
		return // its first sweep starts from the first key
	}
	below := strings.TrimSuffix(key, ".json") // sorts just before key
	if sw.floor >= key {
		sw.floor = below
		sw.every, sw.due = m.cfg.Interval, iv.Earliest
	}
	if sw.mid && (sw.lower == nil || *sw.lower > below) {
		sw.lower = &below
	}
}

func remember(v taskio.Versioned) known {
	t := v.Task
	k := known{etag: v.ETag, loaded: true, status: t.Status, updated: t.UpdatedAt, available: t.AvailableAt, typ: t.Type,
		slot: t.Status == task.Blocked && t.Slot != "" && len(t.Deps) == 0}
	if t.Claim != nil {
		k.expires = t.Claim.ExpiresAt
	}
	return k
}

// deps is the monitor's view of the dependency edges.
func (m *Monitor) deps() deps.Env {
	return deps.Env{Jitter: rnd.Locked(rnd.Keyed(m.cfg.ID + "/deps")),
		Announce: func(ctx context.Context, t *task.Task) error { _, err := m.announce(ctx, t); return err },
		Store:    m.st, Local: m.local, Now: m.clock.Now, Counts: m.manifest.Counts(),
		Ended: func(t *task.Task) {
			m.publish(deps.EventOf(t), t, nil)
		}}
}

// announce writes a ready pointer to t in a shard a member that runs its
// type polls, stamped with the time now, and rings the doorbell in case the
// fleet is asleep. It returns the S3 time it announced at.
func (m *Monitor) announce(ctx context.Context, t *task.Task) (time.Time, error) {
	iv, err := m.clock.Now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	n := m.routeCount(m.fleet.Cached()) // the sweeps' read of the fleet has learnt any reshard
	if err := shards.Announce(ctx, m.st, t, iv.Latest, m.fleet.ShardFor(ctx, t.Type, iv, n)); err != nil {
		return time.Time{}, err
	}
	if _, err := m.fleet.RingIfAsleep(ctx, iv, time.Time{}); err != nil {
		m.log.Warn("ring the doorbell", "task_id", t.ID, "err", err)
	}
	return iv.Latest, nil
}

// errLeaseExpired is the error of the events of a task whose lease the
// monitor found expired.
var errLeaseExpired = errors.New("lease expired")

// publish publishes an event of kind about t on Config.Events.
func (m *Monitor) publish(kind events.Kind, t *task.Task, err error) {
	if m.cfg.Events == nil {
		return
	}
	m.cfg.Events.Publish(events.Event{Time: m.local.Now(), Source: events.SourceMonitor, Origin: m.cfg.ID, Kind: kind,
		TaskID: t.ID, Type: t.Type, Attempt: t.Attempt, Shard: t.Shard, Err: err})
}

// publishCorrupt publishes a corrupt event about the object at key.
func (m *Monitor) publishCorrupt(key string, err error) {
	if m.cfg.Events == nil {
		return
	}
	e := events.Event{Time: m.local.Now(), Source: events.SourceMonitor, Origin: m.cfg.ID, Kind: events.Corrupt, Shard: -1, Key: key, Err: err}
	if shard, id, perr := task.ParseKey(key); perr == nil {
		e.TaskID, e.Shard = id, shard
	}
	m.cfg.Events.Publish(e)
}
