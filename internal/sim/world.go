package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Options size a run. Zero fields take the defaults.
type Options struct {
	// Chaos is how long producers submit and faults and crashes happen
	// (default 14m of virtual time); Quiet is the fault-free tail after it,
	// in which every due task must be picked up (default 12m).
	Chaos, Quiet time.Duration
	// Retention of finished tasks (default 3m; tasks with an idempotency
	// key are kept task.MinKeyedRetention, 10m), short enough for
	// retention to race requeues and resubmits within a run.
	Retention time.Duration
	// Bound is how long a due task may wait in the quiet tail, or a
	// running one stay under an expired lease, before it is a violation
	// (default 5m).
	Bound time.Duration
	// FlipTies: the server breaks ties between identical requests against
	// their arrival (Server.FlipTies); a seed must run the same either way.
	FlipTies bool
}

func (o *Options) fill() {
	if o.Chaos == 0 {
		o.Chaos = 14 * time.Minute
	}
	if o.Quiet == 0 {
		o.Quiet = 12 * time.Minute
	}
	if o.Retention == 0 {
		o.Retention = 3 * time.Minute
	}
	if o.Bound == 0 {
		o.Bound = 5 * time.Minute
	}
}

// Plan is what a seed chose for a run.
type Plan struct {
	Seed                         uint64
	Provider                     Provider
	Shards, MaxPage              int
	Workers, Monitors, Producers int
	Leader                       bool
	Faults                       Faults
	Crashes                      int
	// Burst: at the start of the quiet tail a producer submits long tasks
	// (8 minutes each), one every 3 seconds, half as many as the fleet has
	// slots: the first member fills up one task at a time, and must see
	// the ones that come after and ask for help, or they wait past the
	// bound.
	Burst bool
	// Racer: a producer requeues finished tasks, and submits again the
	// idempotency keys of finished tasks, at the moment retention deletes
	// them.
	Racer bool
	// Reshards (a third of the seeds): a resharder grows the shard count
	// during the chaos phase, once or twice, while producers, workers and
	// monitors opened before it keep running.
	Reshards []Reshard
	// Surge (a quarter of the seeds): more workers than the queue has
	// shards join during the chaos phase, and some of them leave later.
	Surge Surge
	// RootMembers (two seeds in three: 1, or 2 in a third of those; else
	// 0, the default of 16):
	// the workers' root_members, so that members beyond it renew leases
	// of their own and the first member keeps their entries.
	RootMembers int
	// Deps (half the seeds): producers submit tasks that depend on tasks
	// submitted before.
	Deps bool
	// Slots (half the seeds): producers submit tasks with one of three slot
	// keys, under each admission.
	Slots bool
	// Deadlines (a third of the seeds): producers give some tasks a
	// deadline a few seconds to a couple of minutes after the submit.
	Deadlines bool
	// Queue (half the seeds): the workers' dispatch queue claims ahead
	// under a load-shedding policy, with a small depth, so that pending
	// tasks are dropped, released at shutdown, canceled and renewed while
	// they wait; and a handler that panics is requeued at once on some.
	Queue QueuePlan
	// Pools (a third of the seeds): the task type runs in a pool of its
	// own ("jobs"), which Queue shapes (one handler, under block when
	// Queue sets no policy), and the default pool, which runs no type of
	// the sim's, has room: so every poll of a member whose jobs pool is
	// full reads the tasks the listing brings for another pool's room, and
	// refuses them (left waiting, remembered, not read again while
	// unchanged), as a worker with an io and a compute pool does.
	Pools bool
	// Direct (a third of the seeds): the queue dispatches directly
	// (shards.DispatchDirect): producers route new tasks to the inboxes of
	// live workers, each worker holds a lease of its own (directLease,
	// renewed every directRenewal), and dead workers' inboxes are moved to
	// the overflow. A killed worker is replaced, half the time, by a
	// process that takes its id over once its lease expires (its inbox
	// cursor resumed); a quarter of the workers chosen to die are instead
	// cut off from S3 for 30-90 s while another process starts under
	// their id; a worker that loses its lease is restarted under its id,
	// as a supervisor would.
	Direct bool
	// Pause (a quarter of the seeds): an operator pauses the task type,
	// or the whole queue, for a few minutes of the chaos phase.
	Pause *PausePlan
	// RateLimit (a quarter of the seeds): every worker limits the task
	// type to N starts per a few seconds, fleet-wide.
	RateLimit *worker.RateLimit
	// Unique (a third of the seeds): producers submit with keys that have
	// short uniqueness windows (see UniquePlan).
	Unique *UniquePlan
	// Priority (a third of the seeds): producers submit high, default and
	// low tasks, and a backlog of them into one shard.
	Priority *PriorityPlan
	// Results (a third of the seeds): results stored apart and a result
	// TTL (see ResultsPlan).
	Results *ResultsPlan
	// Schedules (a quarter of the seeds): periodic tasks, scheduled by the
	// monitors (see planSchedules).
	Schedules []schedule.Definition
	// Chains (see planChains): in the quiet tail a producer submits short
	// chains of quick tasks, each depending on the one before, so that
	// every child is released by a worker's pass-on (InvPromptRelease);
	// ChainsAsleep: it waits for the fleet to go to sleep first.
	Chains, ChainsAsleep bool
	// Partitions (half the seeds): processes, or the server for
	// everyone, cut off for seconds to minutes in the chaos phase (see
	// Partition).
	Partitions []Partition
	// Busy (see planBusy): in the quiet tail a producer submits a backlog
	// of short tasks, several times the live workers' slots, and every
	// live worker must be busy soon (InvBusy); BusyAsleep: once the fleet
	// sleeps.
	Busy, BusyAsleep bool
	// FullSweep (a third of the seeds): the monitors' full_sweep,
	// compressed from 6 hours to a few minutes (see planTimers); zero
	// keeps the default.
	FullSweep time.Duration
}

// The direct-dispatch settings of the workers, producers and monitors:
// short, for a run of 26 minutes whose requests are held up to 40 s.
const (
	directLease     = 20 * time.Second // worker lease_duration_secs
	directRenewal   = 5 * time.Second  // lease_renewal_interval_secs
	directScavenge  = 30 * time.Second // overflow_scavenge_interval_secs
	directDiscovery = 10 * time.Second // worker_discovery_cache_ttl_secs
)

// QueuePlan is the workers' dispatch-queue settings; zero is the default
// (block, fail).
type QueuePlan struct {
	Policy   worker.QueuePolicy
	InFlight int // one handler per worker: tasks wait in pending
	Depth    int
	Crash    worker.CrashPolicy
}

// Reshard is one planned `s3queue reshard`.
type Reshard struct {
	At time.Duration // into the chaos phase
	To int           // the new shard count
	// Crash: the resharder dies (kill -9) as soon as the manifest write
	// succeeds, before it raises the fleet's count; members repair it, and
	// the operator runs the command again at the start of the quiet tail.
	Crash bool
}

func (r Reshard) String() string {
	s := fmt.Sprintf("to %d at %v", r.To, r.At.Round(time.Second))
	if r.Crash {
		s += " (crash between the manifest and the fleet write)"
	}
	return s
}

// Surge is a large-fleet join and leave: Join workers start, a second
// apart, at At into the chaos phase; at LeaveAt, Leave of them go (each
// killed or stopped, as the seed decides).
type Surge struct {
	At, LeaveAt time.Duration
	Join, Leave int
}

func (p Plan) String() string {
	s := fmt.Sprintf("seed %d: provider %s, %d shards, pages of %d, %d workers, %d monitors (leader %v), %d producers (burst %v, racer %v), %d crashes, faults %+v",
		p.Seed, p.Provider.Name, p.Shards, p.MaxPage, p.Workers, p.Monitors, p.Leader, p.Producers, p.Burst, p.Racer, p.Crashes, p.Faults)
	if len(p.Reshards) == 0 {
		s += ", no reshard"
	}
	for _, r := range p.Reshards {
		s += ", reshard " + r.String()
	}
	if p.RootMembers > 0 {
		s += fmt.Sprintf(", %d root members", p.RootMembers)
	}
	if p.Deps {
		s += ", dependencies"
	}
	if p.Slots {
		s += ", slots"
	}
	if p.Deadlines {
		s += ", deadlines"
	}
	if p.Queue.Policy != "" {
		s += fmt.Sprintf(", queue %s depth %d crash %s", p.Queue.Policy, p.Queue.Depth, p.Queue.Crash)
	}
	if p.Pools {
		s += ", pools"
	}
	if p.Direct {
		s += ", direct dispatch"
	}
	if p.Pause != nil {
		s += ", " + p.Pause.String()
	}
	if p.RateLimit != nil {
		s += ", rate limit " + p.RateLimit.String()
	}
	if p.Unique != nil {
		s += ", " + p.Unique.String()
	}
	if p.Priority != nil {
		s += ", " + p.Priority.String()
	}
	if p.Results != nil {
		s += ", " + p.Results.String()
	}
	if len(p.Schedules) > 0 {
		s += ", " + schedulesString(p.Schedules)
	}
	if p.Chains {
		s += fmt.Sprintf(", %d chains of %d in the quiet tail", chainCount, chainLen)
		if p.ChainsAsleep {
			s += " once the fleet sleeps"
		}
	}
	if p.Busy {
		s += ", a backlog to keep every worker busy in the quiet tail"
		if p.BusyAsleep {
			s += " once the fleet sleeps"
		}
	}
	if p.FullSweep > 0 {
		s += fmt.Sprintf(", full walks every %v", p.FullSweep)
	}
	for _, pt := range p.Partitions {
		s += ", " + pt.String()
	}
	if p.Surge.Join > 0 {
		s += fmt.Sprintf(", surge of %d workers at %v, %d leave at %v", p.Surge.Join, p.Surge.At.Round(time.Second), p.Surge.Leave, p.Surge.LeaveAt.Round(time.Second))
	}
	return s
}

// finalShards is the shard count the queue has once every planned reshard
// is done.
func (p Plan) finalShards() int {
	if len(p.Reshards) == 0 {
		return p.Shards
	}
	return p.Reshards[len(p.Reshards)-1].To
}

// Result is what a run did and what the checker found.
type Result struct {
	Plan       Plan
	Violations []Violation
	Trace      []string
	Counts     map[string]int
	Tasks      int // tasks acknowledged to producers
	Executions int // handler runs
	Duplicates int // handler runs whose claim was lost (no outcome of its own) before the task ran again
	Releases   int // claimed tasks handed back unfinished (shutdown, dropped from pending)
	// DeadlineEnds counts tasks ended dead by their deadline (unstarted,
	// stopped while running, or a retry due after it).
	DeadlineEnds int
	// TimedOut counts attempts whose handler returned an error after its
	// context ended at the task's timeout.
	TimedOut  int
	Unblocked int // tasks whose dependencies all succeeded, moved from blocked to pending
	// QuietReleases counts the dependents a worker released in the quiet
	// tail (InvPromptRelease), ReleaseWait the longest of their waits for
	// a claim.
	QuietReleases int
	ReleaseWait   time.Duration
	// ResultsApart counts commits that referenced a result stored apart,
	// ResultsExpired results dropped by the result TTL, OrphansCollected
	// result objects never referenced that a monitor deleted (results
	// plans).
	ResultsApart, ResultsExpired, OrphansCollected int
	Reshards                                       int // manifest writes that grew the shard count
	// Direct dispatch: inbox entries written, entries moved to the
	// overflow, worker runs that ended with their lease lost, and takeovers
	// of a worker's lease by a later process of its id.
	Routed, Moved, LeaseLosses, Takeovers int
	// Scheduled counts the schedules' ticks that got a task.
	Scheduled int
	log       []Entry
}

// world is one run: the server, the processes, and what producers were told.
type world struct {
	opts Options
	plan Plan
	srv  *Server
	rng  *rand.Rand // the world's own decisions (who crashes when), one goroutine
	root context.Context

	mu     sync.Mutex
	procs  map[string]*proc
	nextID map[string]int
	acked  map[string]ack // task id -> what the producer was told
	ops    []op
	execs  []execution
	// running counts each process's pool's handlers running, overLimit
	// notes when they were more than its max_in_flight (see bounded).
	running   map[string]int
	overLimit []string
	// flakyStart: the next worker spawned fails this many of its first
	// reads of the pause object (see pause).
	flakyStart int
	cursors    []cursor
	// deadMembers: fleet entries and lease objects of workers not alive at
	// the end of the quiet tail (the checker's InvMembers).
	deadMembers []string
	dedicated   map[string]bool   // workers started dedicated (always members)
	midway      map[string][]byte // the bucket at the end of the chaos phase
	spawned     map[string]int    // process name -> length of the server's log when it started
	quietAt     time.Time
	wg          sync.WaitGroup
	// Direct dispatch: the world's own draws about it, the incarnations
	// started under each worker id, the runs that lost their lease, and
	// the inboxes, overflow and worker leases at the end of the quiet tail.
	drng        *rand.Rand
	incarnation map[string]int
	leaseLosses int
	directEnd   map[string][]byte
	endAt       time.Time
	// scanLog: what each worker process's discovery listed and attempted
	// (checkPriority).
	scanLog map[string][]scanEvent
	// schedAt: when the plan's schedules were written.
	schedAt time.Time
	// chainsAt: when the quiet tail's chains were submitted (Plan.Chains).
	chainsAt time.Time
	// busyAt: when the busy backlog's first submit was sent (Plan.Busy),
	// busyLive the live workers then, busyTasks the backlog's size.
	busyAt    time.Time
	busyLive  []string
	busyTasks int
}

// proc is one running process: a worker, monitor or producer.
type proc struct {
	name   string
	kind   string
	id     string         // a worker's id: its name, or the id it took over (direct dispatch)
	wk     *worker.Worker // a worker, once open (under world.mu)
	h      *Handle
	local  clock.Local // its host's clock, skewed and drifting (hostClock)
	cancel context.CancelFunc
	done   chan struct{}
}

type ack struct {
	key  string // idempotency key
	proc string
}

// op is one producer call and the span of the server's log it covers
// (a producer makes its calls one at a time).
type op struct {
	proc, kind, id, key string
	from, to            int // log indexes
	err                 error
}

type execution struct {
	id      string
	claim   string
	attempt int
	worker  string
	at      time.Time
	dead    bool // the context was already done when the handler started
}

// Run runs one seed. It must be called inside a synctest bubble.
func Run(seed uint64, opts Options) Result {
	opts.fill()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	plan := Plan{
		Seed:      seed,
		Provider:  Providers[rng.IntN(len(Providers))],
		Shards:    1 + rng.IntN(6),
		MaxPage:   3 + rng.IntN(8),
		Workers:   1 + rng.IntN(4),
		Monitors:  1 + rng.IntN(2),
		Producers: 1 + rng.IntN(2),
		Leader:    rng.IntN(2) == 0,
		Crashes:   rng.IntN(5),
		Burst:     rng.IntN(4) == 0,
		Racer:     rng.IntN(2) == 0,
		Faults: Faults{
			Error:     0.05 * rng.Float64(),
			Conflict:  0.02 * rng.Float64(),
			Lost:      0.05 * rng.Float64(),
			Delay:     0.05 * rng.Float64(),
			MaxDelay:  time.Duration(1+rng.IntN(40)) * time.Second,
			Zombie:    rng.Float64(),
			Forbidden: rng.IntN(3) == 0,
		},
	}
	planLayout(&plan, opts)
	planPause(&plan, opts)
	planRateLimit(&plan)
	planUnique(&plan)
	planPriority(&plan, opts)
	planResults(&plan, opts)
	planSchedules(&plan)
	planChains(&plan)
	planPartitions(&plan, opts)
	planBusy(&plan)
	planTimers(&plan)
	w := &world{opts: opts, plan: plan, rng: rng,
		srv:   NewServer(plan.Provider, rand.New(rand.NewPCG(seed, 0x5e4e)), plan.MaxPage),
		procs: make(map[string]*proc), running: make(map[string]int), dedicated: make(map[string]bool), nextID: make(map[string]int), acked: make(map[string]ack), spawned: make(map[string]int),
		incarnation: make(map[string]int), scanLog: make(map[string][]scanEvent)}
	if opts.FlipTies {
		w.srv.FlipTies()
	}
	if plan.Direct {
		w.drng = rand.New(rand.NewPCG(seed, 0xd12ec7+1))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.root = ctx
	w.setup()
	if len(plan.Schedules) > 0 {
		w.writeSchedules()
	}
	if plan.Pause != nil {
		w.srv.WatchReads(pause.Key) // checkPause
	}
	w.srv.Start()
	w.srv.SetFaults(plan.Faults)

	for range plan.Monitors {
		w.startMonitor()
	}
	for range plan.Workers {
		w.startWorker()
	}
	var producers sync.WaitGroup
	for i := range plan.Producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.produce(i)
		}()
	}
	if plan.Racer {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.race()
		}()
	}
	if len(plan.Reshards) > 0 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.reshard()
		}()
	}
	if plan.Pause != nil {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.pause()
		}()
	}
	if plan.Unique != nil {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.uniques()
		}()
	}
	if plan.Priority != nil {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.backlog()
		}()
	}
	if plan.Surge.Join > 0 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.surge()
		}()
	}
	if len(plan.Partitions) > 0 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			w.partitions()
		}()
	}
	w.chaos()
	producers.Wait()
	w.midway = w.srv.Objects("")

	// The quiet tail: no faults, every crashed process replaced.
	w.srv.SetFaults(Faults{})
	w.mu.Lock()
	w.quietAt = time.Now()
	w.mu.Unlock()
	w.restoreFleet()
	w.finishReshard()
	if plan.Burst {
		w.burst()
	}
	if plan.Chains {
		w.chains()
	}
	if plan.Busy {
		w.busy()
	}
	time.Sleep(opts.Quiet)
	w.cursors = w.readCursors()
	w.deadMembers = w.readDeadMembers()
	if plan.Direct {
		w.endAt = time.Now()
		w.directEnd = w.readDirect()
	}

	w.stopAll()
	cancel()
	w.wg.Wait()
	w.srv.Close()

	return w.check()
}

// planLayout draws the seed's layout changes: reshards and a surge of
// workers. It draws from a source of its own, so that a seed that draws
// neither runs exactly as it did before they existed.
func planLayout(plan *Plan, opts Options) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x2e5a4d))
	if rng.IntN(3) == 0 {
		at := 2*time.Minute + time.Duration(rng.Int64N(int64(opts.Chaos)/2))
		n := plan.Shards
		for range 1 + rng.IntN(2) {
			n += 1 + rng.IntN(4)
			plan.Reshards = append(plan.Reshards, Reshard{At: at, To: n, Crash: rng.IntN(2) == 0})
			at += time.Minute + time.Duration(rng.Int64N(int64(3*time.Minute)))
		}
	}
	if rng.IntN(4) == 0 {
		at := time.Minute + time.Duration(rng.Int64N(int64(opts.Chaos)/2))
		join := plan.Shards + 1 + rng.IntN(4)
		plan.Surge = Surge{At: at, LeaveAt: at + time.Minute + time.Duration(rng.Int64N(int64(4*time.Minute))),
			Join: join, Leave: 1 + rng.IntN(join)}
	}
	// Another source again, so that the seeds drawn before leased members
	// existed keep their schedules where this draws the default.
	rng = rand.New(rand.NewPCG(plan.Seed, 0x1ea5ed))
	if rng.IntN(3) != 0 {
		plan.RootMembers = 1 + rng.IntN(3)/2
	}
	// And again for direct dispatch, for dependencies, and for the
	// dispatch queue.
	plan.Direct = rand.New(rand.NewPCG(plan.Seed, 0xd12ec7)).IntN(3) == 0
	plan.Deps = rand.New(rand.NewPCG(plan.Seed, 0xdeb5)).IntN(2) == 0
	plan.Slots = rand.New(rand.NewPCG(plan.Seed, 0x5107)).IntN(2) == 0
	plan.Deadlines = rand.New(rand.NewPCG(plan.Seed, 0xdead1e)).IntN(3) == 0
	rng = rand.New(rand.NewPCG(plan.Seed, 0xd15fa7))
	if rng.IntN(2) == 0 {
		policies := []worker.QueuePolicy{worker.Reject, worker.DropLatest, worker.DropOldest, worker.DropOldest}
		plan.Queue = QueuePlan{Policy: policies[rng.IntN(len(policies))], InFlight: 1, Depth: 1 + rng.IntN(3), Crash: worker.CrashFail}
		if rng.IntN(2) == 0 {
			plan.Queue.Crash = worker.CrashRequeue
		}
	}
	// The jobs pool has two handlers, whatever the queue's plan drew (one):
	// a one-worker fleet's single handler, held 8 minutes of the 12-minute
	// quiet tail by the burst's long task, leaves the chaos's backlog
	// (about 35 tasks) some 4 minutes, short of capacity for the liveness
	// checks whatever the worker does (seeds 501033, 520193). The burst
	// sizes by it.
	if plan.Pools = rand.New(rand.NewPCG(plan.Seed, 0x9001)).IntN(3) == 0; plan.Pools && plan.Queue.InFlight < 2 {
		plan.Queue.InFlight = 2
	}
}

// setup writes the queue's manifest, recording the provider as a real
// queue's creation would (the provider check itself draws random scratch
// keys, which would make the schedule depend on more than the seed), and
// plants an object under tasks/ that the server refuses to serve.
func (w *world) setup() {
	del := s3store.DeleteHonoured
	if w.plan.Provider.IgnoreConditionalDelete {
		del = s3store.DeleteIgnored
	}
	m := map[string]any{"format": shards.FormatVersion, "shards": w.plan.Shards, "created_at": time.Now().UTC(), "conditional_delete": del}
	if w.plan.Direct {
		m["dispatch_mode"] = shards.DispatchDirect
	}
	body, _ := json.Marshal(m)
	w.srv.Put(shards.ManifestKey, body)
	if w.plan.Faults.Forbidden {
		// An object named like a task, due at once, whose GET is refused
		// (403): bad objects are reported and skipped, and never block
		// the rest of their shard (invariant 7).
		id, _ := task.NewID(time.Now(), w.seeded("forbidden"))
		key := task.Key(task.ShardFor(id, w.plan.Shards), id)
		w.srv.Put(key, []byte("{}\n\n"))
		w.srv.SetForeign(key)
	}
}

func (w *world) name(kind string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID[kind]++
	return fmt.Sprintf("%s%d", kind, w.nextID[kind])
}

// seeded returns a random source for process name, from the seed alone.
func (w *world) seeded(name string) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], w.plan.Seed)
	h := fnv.New64a()
	h.Write([]byte(name))
	binary.LittleEndian.PutUint64(key[8:], h.Sum64())
	return rand.NewChaCha8(key)
}

// procRand is a process's own source for the world's choices about it
// (its clock, its settings), from the seed and its name alone.
func (w *world) procRand(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(w.plan.Seed, h.Sum64()))
}

// hostClock is a process's local clock: its host's wall clock, off by skew
// (up to ten minutes either way) from the server's when the process
// started, and drifting by drift (up to 100 ppm either way) since. Its
// timers run on the same drifting oscillator: a timer of d fires once the
// clock has moved d. Every process of the world runs on one (Config.Local,
// and the clock.Authoritative built on it), so a decision any of them
// takes on local time instead of S3 time is off by minutes; invariant 4
// says nothing may be.
type hostClock struct {
	base  time.Time // the server's time when the process started
	skew  time.Duration
	drift float64
}

// localFor draws the local clock of process name from the seed and the
// name alone.
func (w *world) localFor(name string) hostClock {
	rng := w.procRand(name + "/clock")
	skew := time.Duration(rng.Int64N(int64(20*time.Minute))) - 10*time.Minute
	drift := (rng.Float64()*2 - 1) * 100e-6
	return hostClock{base: time.Now(), skew: skew, drift: drift}
}

func (c hostClock) Now() time.Time {
	e := time.Since(c.base)
	return c.base.Add(c.skew + e + time.Duration(float64(e)*c.drift))
}

// NewTimer's channel delivers the server's time at which the timer fired,
// not the local reading: no service reads it.
func (c hostClock) NewTimer(d time.Duration) clock.Timer {
	return hostTimer{time.NewTimer(c.server(d)), c}
}

// server is how long the server's clock must move for this one to move at
// least d: rounded up, and a nanosecond more for Now's rounding, so that a
// timer of 1 ns still lets time pass (a timer of 0 s, rounded down, would
// fire at once, again and again, in a loop that waits for the clock to
// reach an instant).
func (c hostClock) server(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return time.Duration(math.Ceil(float64(d+1) / (1 + c.drift)))
}

type hostTimer struct {
	t *time.Timer
	c hostClock
}

func (t hostTimer) C() <-chan time.Time        { return t.t.C }
func (t hostTimer) Stop() bool                 { return t.t.Stop() }
func (t hostTimer) Reset(d time.Duration) bool { return t.t.Reset(t.c.server(d)) }

// clockFor is an S3 clock for process p, on its own local clock.
func (w *world) clockFor(p *proc) *clock.Authoritative {
	return clock.New(p.h, clock.Config{Local: p.local})
}

var discard = slog.New(slog.DiscardHandler)

// loggerFor is the logger of process name: none, unless S3QUEUE_SIM_LOG
// names it (a comma-separated list of process names, or "all"), to debug
// a replayed seed: its log at debug level goes to stderr, timed by the
// run's virtual clock.
func loggerFor(name string) *slog.Logger {
	want := os.Getenv("S3QUEUE_SIM_LOG")
	if want == "" || (want != "all" && !slices.Contains(strings.Split(want, ","), name)) {
		return discard
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("proc", name)
}

// spawn starts run as a process of kind, named name, and tracks it.
func (w *world) spawn(kind, name string, run func(ctx context.Context, p *proc)) *proc {
	return w.spawnAs(kind, name, name, run)
}

// spawnAs is spawn for a worker whose id is not its name.
func (w *world) spawnAs(kind, name, id string, run func(ctx context.Context, p *proc)) *proc {
	ctx, cancel := context.WithCancel(w.root)
	p := &proc{name: name, kind: kind, id: id, h: w.srv.Handle(name), local: w.localFor(name), cancel: cancel, done: make(chan struct{})}
	at := w.logLen()
	w.mu.Lock()
	if kind == "w" && w.flakyStart > 0 {
		p.h.FailWatchedReads(w.flakyStart)
		w.flakyStart = 0
	}
	w.procs[name] = p
	w.spawned[name] = at
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(p.done)
		run(ctx, p)
		p.h.Stop()
	}()
	return p
}

// retry calls open until it succeeds or ctx ends (opening a queue makes
// requests, which fail under faults).
func retry[T any](ctx context.Context, open func() (T, error)) (T, bool) {
	for {
		v, err := open()
		if err == nil {
			return v, true
		}
		select {
		case <-ctx.Done():
			return v, false
		case <-time.After(time.Second):
		}
	}
}

func (w *world) startWorker() *proc { return w.startWorkerAs("") }

// startWorkerAs starts a worker under id, a later process of a worker that
// died or lost its lease (direct dispatch), or under a new id ("").
func (w *world) startWorkerAs(id string) *proc {
	var name string
	if id == "" {
		name = w.name("w")
		id = name
	} else {
		w.mu.Lock()
		w.incarnation[id]++
		name = fmt.Sprintf("%s.%d", id, w.incarnation[id]+1)
		w.mu.Unlock()
	}
	rng := w.procRand(name)
	concurrency := 1 + rng.IntN(3)
	dedicated := rng.IntN(3) == 0
	if dedicated {
		w.mu.Lock()
		w.dedicated[name] = true
		w.mu.Unlock()
	}
	cfg := worker.Config{ID: id, Concurrency: concurrency, Dedicated: dedicated, RootMembers: w.plan.RootMembers,
		MaxInFlight: w.plan.Queue.InFlight, QueuePolicy: w.plan.Queue.Policy, MaxQueueDepth: w.plan.Queue.Depth, CrashPolicy: w.plan.Queue.Crash,
		Logger: loggerFor(name), ShutdownGrace: 10 * time.Second}
	if l := w.plan.RateLimit; l != nil {
		cfg.RateLimits = map[string]worker.RateLimit{taskType: *l}
	}
	if len(w.plan.Schedules) > 0 {
		cfg.Pools = []worker.Pool{tickPool}
	}
	if q := w.plan.Queue; w.plan.Pools {
		// The queue's plan shapes the jobs pool; the default pool, idle,
		// keeps its defaults.
		cfg.MaxInFlight, cfg.QueuePolicy, cfg.MaxQueueDepth = 0, "", 0
		cfg.Pools = append(cfg.Pools, worker.Pool{Name: "jobs", Types: []string{taskType}, MaxInFlight: q.InFlight, MaxQueueDepth: q.Depth, QueuePolicy: q.Policy})
	}
	if w.plan.Direct {
		cfg.DispatchMode = shards.DispatchDirect
		cfg.LeaseDuration, cfg.LeaseRenewalInterval = directLease, directRenewal
		cfg.OverflowScavengeInterval, cfg.DiscoveryTTL = directScavenge, directDiscovery
	}
	if w.plan.Results != nil {
		cfg.ResultInlineMax = w.plan.Results.InlineMax
	}
	return w.spawnAs("w", name, id, func(ctx context.Context, p *proc) {
		wk, ok := retry(ctx, func() (*worker.Worker, error) {
			cfg := cfg
			cfg.Rand, cfg.Local, cfg.Clock = w.seeded(p.name), p.local, w.clockFor(p)
			cfg.Hooks.OnWindow, cfg.Hooks.OnAttempt = w.scanHooks(p.name)
			return worker.New(ctx, p.h, cfg)
		})
		if !ok {
			return
		}
		limit := w.plan.Queue.InFlight // the jobs pool's, or the default pool's
		if limit == 0 {
			limit = concurrency
		}
		wk.Handle(taskType, w.bounded(p.name+"/"+taskType, limit, w.handler(p.name)))
		if len(w.plan.Schedules) > 0 {
			wk.Handle(tickType, w.bounded(p.name+"/"+tickType, tickPool.MaxInFlight, w.handler(p.name)))
		}
		w.mu.Lock()
		p.wk = wk
		w.mu.Unlock()
		w.mu.Lock()
		started := w.incarnation[id]
		w.mu.Unlock()
		if err := wk.Run(ctx); errors.Is(err, worker.ErrWorkerLeaseLost) && ctx.Err() == nil {
			// Its supervisor starts it again, under the same id, unless
			// another process has been started under it since: the new
			// process takes the lease over once it has expired.
			w.mu.Lock()
			w.leaseLosses++
			again := w.incarnation[id] == started
			w.mu.Unlock()
			if again {
				w.startWorkerAs(p.id)
			}
		}
	})
}

func (w *world) startMonitor() *proc {
	return w.spawn("m", w.name("m"), func(ctx context.Context, p *proc) {
		m, ok := retry(ctx, func() (*monitor.Monitor, error) {
			clk := w.clockFor(p)
			cfg := monitor.Config{ID: p.name, Leader: w.plan.Leader, Retention: w.opts.Retention,
				Rand: w.seeded(p.name), Clock: clk, Local: p.local, Logger: loggerFor(p.name), FullSweep: w.plan.FullSweep}
			if len(w.plan.Schedules) > 0 {
				cfg.Submit = w.scheduleSubmit(p, clk)
			}
			if w.plan.Direct {
				cfg.DispatchMode, cfg.WorkerLease = shards.DispatchDirect, directLease
			}
			if w.plan.Results != nil {
				cfg.ResultTTL = w.plan.Results.TTL
				// Orphaned result objects are collected within the run.
				cfg.OrphanCheck, cfg.OrphanAge = time.Minute, 30*time.Second
			}
			return monitor.New(ctx, p.h, cfg)
		})
		if !ok {
			return
		}
		m.Run(ctx)
	})
}

// producerConfig is the configuration of producer process p.
func (w *world) producerConfig(p *proc) producer.Config {
	cfg := producer.Config{Rand: w.seeded(p.name), Clock: w.clockFor(p), Local: p.local, Logger: loggerFor(p.name)}
	if w.plan.Direct {
		cfg.DispatchMode, cfg.DiscoveryTTL = shards.DispatchDirect, directDiscovery
	}
	return cfg
}

const taskType = "sim"

// bounded counts the handlers of h running at once in one process's pool
// (key: the process and the type, whose pool runs it) and notes it when
// they are more than the pool's max_in_flight (limit; worker.Unbounded:
// none): the handler returns before its pool frees its place, so the count
// never passes the limit but by a defect (blind defect B18: a pool that
// started one more than max_in_flight).
func (w *world) bounded(key string, limit int, h worker.Handler) worker.Handler {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		w.mu.Lock()
		w.running[key]++
		if n := w.running[key]; limit != worker.Unbounded && n > limit {
			w.overLimit = append(w.overLimit, fmt.Sprintf("%s ran %d handlers at once at %s (max_in_flight %d), the last task %s",
				key, n, time.Now().Format("15:04:05.000"), limit, t.ID))
		}
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.running[key]--
			w.mu.Unlock()
		}()
		return h(ctx, t)
	}
}

// limitedSnoozes is how many times a task snoozes, at most, under a rate
// limit (see the handler).
const limitedSnoozes = 3

// handler runs a task as its id and attempt say, so that what a handler
// does never depends on which worker runs it or when.
func (w *world) handler(workerName string) worker.Handler {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		w.mu.Lock()
		claim := ""
		if t.Claim != nil {
			claim = t.Claim.ID
		}
		w.execs = append(w.execs, execution{id: t.ID, claim: claim, attempt: t.Attempt, worker: workerName, at: time.Now(), dead: ctx.Err() != nil})
		w.mu.Unlock()
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s/%d", w.plan.Seed, t.ID, t.Attempt)
		x := h.Sum64()
		d := time.Duration(50+x%8000) * time.Millisecond
		sleep := func(d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
				return nil
			}
		}
		if scheduledTask(t.Input) {
			return nil, sleep(100 * time.Millisecond)
		}
		if bytes.Contains(t.Input, []byte(`"chain"`)) {
			return nil, sleep(time.Duration(100+x%1900) * time.Millisecond)
		}
		if busyTask(t.Input) {
			return nil, sleep(busyTaskMin + time.Duration(x%uint64(busyTaskMin/time.Millisecond))*time.Millisecond)
		}
		if bytes.Contains(t.Input, []byte(`"long"`)) {
			return nil, sleep(8 * time.Minute)
		}
		switch p := (x >> 20) % 100; {
		case p < 65:
			if err := sleep(d); err != nil {
				return nil, err
			}
			if w.plan.Results != nil {
				return w.simResult(workerName, claim, x), nil
			}
			return json.RawMessage(fmt.Sprintf(`{"by":%q}`, workerName)), nil
		case p < 77:
			sleep(d)
			return nil, errors.New("the handler failed")
		case p < 82:
			return nil, worker.Permanent(errors.New("the handler failed for good"))
		case p < 87:
			// The draw is the same for every claim of an attempt, and a
			// snooze gives the attempt back: the task snoozes until
			// task.MaxSnoozes makes one a failed attempt, 51 claims. Under
			// a rate limit each is a start, and two such tasks at 1 per
			// 5 s would take most of the quiet tail's starts (seed 239):
			// there the task snoozes a few times, then succeeds.
			if w.plan.RateLimit != nil && t.Snoozes >= limitedSnoozes {
				if w.plan.Results != nil {
					return w.simResult(workerName, claim, x), nil
				}
				return json.RawMessage(fmt.Sprintf(`{"by":%q}`, workerName)), nil
			}
			return nil, worker.RetryAfter(2*time.Second, errors.New("not now"))
		case p < 90:
			// Most of its timeout, longer than its lease without a
			// renewal: renewals must keep it.
			if err := sleep(t.Timeout.D() - t.Timeout.D()/10); err != nil {
				return nil, err
			}
			return nil, nil
		case p < 93:
			// Past any timeout: its context ends it, and the attempt
			// fails as timed out.
			if err := sleep(45 * time.Second); err != nil {
				return nil, err
			}
			return nil, nil
		case p < 97:
			// Ignores its context, past any shutdown grace: nothing of
			// its worker may outlive Run.
			time.Sleep(25*time.Second + 4*d)
			return nil, nil
		default:
			panic("the handler panicked")
		}
	}
}

// produce submits, cancels, requeues and reads tasks for the chaos phase.
func (w *world) produce(i int) {
	rng := rand.New(rand.NewPCG(w.plan.Seed, uint64(100+i)))
	n := 10 + rng.IntN(30)
	end := time.Now().Add(w.opts.Chaos)
	// Dependencies draw from a source of their own, so that seeds without
	// them run as before they existed.
	var drng, srng, lrng *rand.Rand
	if w.plan.Deadlines {
		lrng = rand.New(rand.NewPCG(w.plan.Seed, uint64(0xdead1e00+i)))
	}
	if w.plan.Deps {
		drng = rand.New(rand.NewPCG(w.plan.Seed, uint64(0xdeb500+i)))
	}
	if w.plan.Slots {
		srng = rand.New(rand.NewPCG(w.plan.Seed, uint64(0x510700+i)))
	}
	var prng *rand.Rand
	if w.plan.Priority != nil {
		prng = rand.New(rand.NewPCG(w.plan.Seed, uint64(0x921000+i)))
	}
	p := w.spawn("p", fmt.Sprintf("p%d", i+1), func(ctx context.Context, p *proc) {
		var prod *producer.Producer
		for j := 0; j < n && time.Now().Before(end) && ctx.Err() == nil; j++ {
			time.Sleep(time.Duration(rng.Int64N(int64(w.opts.Chaos) / int64(n))))
			if prod == nil {
				var err error
				prod, err = producer.New(ctx, p.h, w.producerConfig(p))
				if err != nil {
					prod = nil
					continue
				}
			}
			w.act(ctx, p, prod, rng, drng, srng, prng, lrng, j)
		}
	})
	<-p.done
}

// burst submits, at the start of the quiet tail, one long task every 3
// seconds, half as many as the fleet has slots to run them at once (a
// task that waits in a full member's shard reaches another member through
// the monitor's repair, which routes at random: the slack keeps that
// within the bound). A shard has one member, so the fleet's slots are
// those of the min(workers, shards) smallest live workers. Each claim finds one task, so the first member fills up
// without seeing more waiting; the tasks after that arrive while it is
// full, and it must see them and ask for help.
func (w *world) burst() {
	var each []int
	w.mu.Lock()
	for _, p := range w.procs {
		if p.kind == "w" && p.h.state.Load() == stateAlive {
			n := 1 + w.procRand(p.name).IntN(3)
			if q := w.plan.Queue.InFlight; q > 0 {
				// The dispatch queue's plan runs this many handlers at
				// most, whatever the concurrency: a burst sized by the
				// concurrency would hold every handler for 8 minutes.
				n = min(n, q)
			}
			each = append(each, n)
		}
	}
	w.mu.Unlock()
	sort.Ints(each)
	slots := 0
	for _, n := range each[:min(len(each), w.plan.finalShards())] {
		slots += n
	}
	w.spawn("p", "pburst", func(ctx context.Context, p *proc) {
		prod, ok := retry(ctx, func() (*producer.Producer, error) {
			return producer.New(ctx, p.h, w.producerConfig(p))
		})
		if !ok {
			return
		}
		// A fleet of one slot gets none: the long task would hold its only
		// handler 8 minutes of the quiet tail, short of capacity for the
		// chaos's backlog whatever the worker does (seed 127).
		long := (slots + 1) / 2
		if slots == 1 {
			long = 0
		}
		for k := range long {
			w.submitLong(ctx, p, prod, k)
			time.Sleep(3 * time.Second)
		}
	})
}

// submitLong submits one task of a burst: a long one, all of whose
// attempts run 8 minutes, within their timeout, and succeed.
func (w *world) submitLong(ctx context.Context, p *proc, prod *producer.Producer, k int) {
	o := op{proc: p.name, kind: "submit"}
	o.from = w.logLen()
	o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(fmt.Sprintf(`{"long":%d}`, k)), producer.Options{Timeout: 10 * time.Minute})
	o.to = w.logLen()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, o)
	if o.err == nil {
		w.acked[o.id] = ack{proc: p.name}
	}
}

// act makes one producer call and records what the producer was told.
func (w *world) act(ctx context.Context, p *proc, prod *producer.Producer, rng, drng, srng, prng, lrng *rand.Rand, j int) {
	o := op{proc: p.name}
	o.from = w.logLen()
	defer func() {
		o.to = w.logLen()
		w.mu.Lock()
		w.ops = append(w.ops, o)
		w.mu.Unlock()
	}()
	switch x := rng.IntN(100); {
	case x < 75:
		o.kind = "submit"
		opts := producer.Options{MaxAttempts: 1 + rng.IntN(4), Retry: &task.RetryPolicy{InitialDelay: task.Duration(time.Second), MaxDelay: task.Duration(20 * time.Second), Multiplier: 2}}
		timeouts := []time.Duration{0, 5 * time.Second, 10 * time.Second, 20 * time.Second, 2 * time.Second, 3 * time.Second}
		opts.Timeout = timeouts[rng.IntN(len(timeouts))]
		if rng.IntN(5) == 0 {
			opts.Delay = time.Duration(1+rng.IntN(60)) * time.Second
		}
		input := fmt.Sprintf(`{"n":%d}`, j)
		if rng.IntN(3) == 0 {
			opts.IdempotencyKey = fmt.Sprintf("key-%d", rng.IntN(6))
			input = fmt.Sprintf(`{"key":%q}`, opts.IdempotencyKey)
		}
		o.key = opts.IdempotencyKey
		if drng != nil && drng.IntN(2) == 0 && opts.IdempotencyKey == "" {
			// Depends on up to three tasks submitted before.
			for range 1 + drng.IntN(3) {
				if id := w.someAcked(drng); id != "" && !slices.Contains(opts.DependsOn, id) {
					opts.DependsOn = append(opts.DependsOn, id)
				}
			}
			if drng.IntN(3) == 0 {
				opts.OnDepFailure = task.DepFail
			}
		}
		if srng != nil && srng.IntN(2) == 0 && len(opts.DependsOn) == 0 && opts.IdempotencyKey == "" {
			opts.Slot = fmt.Sprintf("k%d", srng.IntN(3))
			opts.Admission = []producer.Admission{"queue", "queue", "replace", "drop-if-running"}[srng.IntN(4)]
		}
		opts.Priority = priorityOf(prng)
		if lrng != nil && lrng.IntN(2) == 0 {
			// Its deadline may come before it is due, while it waits,
			// runs or retries, or never matter.
			opts.DeadlineIn = opts.Delay + time.Duration(1+lrng.IntN(120))*time.Second
		}
		o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(input), opts)
		if o.err == nil {
			w.mu.Lock()
			w.acked[o.id] = ack{key: opts.IdempotencyKey, proc: p.name}
			w.mu.Unlock()
		}
	case x < 85:
		o.kind = "cancel"
		o.id = w.someAcked(rng)
		if o.id != "" {
			_, o.err = prod.Cancel(ctx, o.id)
		}
	case x < 95:
		o.kind = "requeue"
		o.id = w.someAcked(rng)
		if o.id != "" {
			if t, err := prod.Get(ctx, o.id); err == nil && (t.Status == task.Dead || t.Status == task.Canceled) {
				o.err = prod.Requeue(ctx, o.id)
			}
		}
	default:
		o.kind = "get"
		o.id = w.someAcked(rng)
		if o.id != "" {
			_, o.err = prod.Get(ctx, o.id)
		}
	}
}

func (w *world) logLen() int {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	return len(w.srv.log)
}

func (w *world) someAcked(rng *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.acked) == 0 {
		return ""
	}
	ids := make([]string, 0, len(w.acked))
	for id := range w.acked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids[rng.IntN(len(ids))]
}

// race requeues finished tasks, and submits again the idempotency keys of
// finished ones, at the moment retention deletes them: the requeue, or the
// resubmit, lands among the monitor's requests for that deletion.
func (w *world) race() {
	rng := rand.New(rand.NewPCG(w.plan.Seed, 0x7ace))
	end := time.Now().Add(w.opts.Chaos)
	p := w.spawn("p", "prace", func(ctx context.Context, p *proc) {
		prod, ok := retry(ctx, func() (*producer.Producer, error) {
			return producer.New(ctx, p.h, w.producerConfig(p))
		})
		if !ok {
			return
		}
		// watched: finished tasks it has seen, by when retention is due.
		watched := make(map[string]time.Time)
		for time.Now().Before(end) && ctx.Err() == nil {
			var t *task.Task
			next, nextID := end, ""
			for id, due := range watched {
				if due.Before(next) || due.Equal(next) && id < nextID {
					next, nextID = due, id
				}
			}
			if nextID != "" && time.Until(next) < 3*time.Second {
				delete(watched, nextID)
				time.Sleep(max(0, time.Until(next.Add(-time.Second))))
				var err error
				if t, err = prod.Get(ctx, nextID); err != nil || !t.Status.Terminal() {
					continue
				}
			} else {
				d := min(time.Duration(1+rng.IntN(3))*time.Second, max(0, time.Until(next.Add(-2*time.Second))))
				time.Sleep(d)
				id := w.someAcked(rng)
				if id == "" {
					if d == 0 {
						// The last seconds of the chaos phase, and no task
						// acknowledged yet: let time pass rather than spin.
						time.Sleep(time.Second)
					}
					continue
				}
				if t, err := prod.Get(ctx, id); err == nil && t.Status.Terminal() && (t.IdempotencyKey != "" || t.Status != task.Succeeded) {
					hold := max(w.opts.Retention, t.MinRetention())
					if due := t.UpdatedAt.Add(hold); due.After(time.Now()) {
						watched[id] = due
					}
				}
				continue
			}
			// From just before it is due until well after: each try lands
			// somewhere among the monitor's requests.
			for k := 0; k < 15 && ctx.Err() == nil; k++ {
				if t.IdempotencyKey != "" && (k%2 == 0 || t.Status == task.Succeeded) {
					w.resubmit(ctx, p, prod, t)
				} else if t.Status != task.Succeeded {
					o := op{proc: p.name, kind: "requeue", id: t.ID, from: w.logLen()}
					o.err = prod.Requeue(ctx, t.ID)
					o.to = w.logLen()
					w.record(o)
				}
				time.Sleep(time.Duration(200+rng.IntN(1800)) * time.Millisecond)
			}
		}
	})
	<-p.done
}

// resubmit submits again the task of an idempotency key.
func (w *world) resubmit(ctx context.Context, p *proc, prod *producer.Producer, t *task.Task) {
	o := op{proc: p.name, kind: "submit", key: t.IdempotencyKey, from: w.logLen()}
	opts := producer.Options{IdempotencyKey: t.IdempotencyKey, UniqueFor: t.UniqueFor.D(),
		MaxAttempts: t.MaxAttempts, Timeout: t.Timeout.D(), Retry: &t.Retry}
	if strings.HasPrefix(t.IdempotencyKey, task.UniqueKeyPrefix) {
		opts.IdempotencyKey, opts.Unique = "", true
	}
	o.id, o.err = prod.Submit(ctx, taskType, t.Input, opts)
	o.to = w.logLen()
	w.record(o)
	if o.err == nil {
		w.mu.Lock()
		w.acked[o.id] = ack{key: t.IdempotencyKey, proc: p.name}
		w.mu.Unlock()
	}
}

func (w *world) record(o op) {
	w.mu.Lock()
	w.ops = append(w.ops, o)
	w.mu.Unlock()
}

// chaos crashes or stops workers and monitors at random times during the
// chaos phase, and starts replacements.
func (w *world) chaos() {
	var at []time.Duration
	for range w.plan.Crashes {
		at = append(at, time.Duration(w.rng.Int64N(int64(w.opts.Chaos))))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	start := time.Now()
	for _, d := range at {
		time.Sleep(time.Until(start.Add(d)))
		victim := w.pick()
		if victim == nil {
			continue
		}
		if victim.kind == "w" && w.drng != nil && w.drng.IntN(4) == 0 {
			// Direct dispatch: the worker is cut off from S3 for 30-90 s,
			// and its orchestrator starts another process under its id at
			// once, which takes the lease over once it has expired. The
			// first must have stopped by then.
			victim.h.Cut(time.Now().Add(30*time.Second + time.Duration(w.drng.Int64N(int64(time.Minute)))))
			w.startWorkerAs(victim.id)
			continue
		}
		if w.rng.IntN(3) == 0 {
			victim.cancel() // a clean stop (SIGTERM)
			<-victim.done
		} else {
			victim.h.Crash() // kill -9
			victim.cancel()
		}
		time.Sleep(time.Duration(w.rng.Int64N(int64(time.Minute))))
		if victim.kind == "w" && w.drng != nil && w.drng.IntN(2) == 0 {
			// Direct dispatch: the replacement takes the dead worker's id
			// over (it waits for its lease to expire).
			w.startWorkerAs(victim.id)
		} else if victim.kind == "w" {
			w.startWorker()
		} else {
			w.startMonitor()
		}
	}
	time.Sleep(time.Until(start.Add(w.opts.Chaos)))
}

// pick chooses a live worker or monitor, in name order.
func (w *world) pick() *proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	var live []*proc
	for _, p := range w.procs {
		select {
		case <-p.done:
			continue
		default:
		}
		if (p.kind == "w" || p.kind == "m") && p.h.state.Load() == stateAlive {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].name < live[j].name })
	return live[w.rng.IntN(len(live))]
}

// cursor is where a member's scan of one of its own shards stood at the
// end of the quiet tail.
type cursor struct {
	worker string
	shard  int
	at     time.Time
}

// readCursors reads the scan cursors of every live member's own shards,
// unless the fleet is asleep: then its members scan nothing but at the
// doorbell's ring and each sleep_scan, and a cursor stands where the last
// scan before the sleep left it, behind the keys of tasks that direct
// dispatch delivered through inboxes meanwhile (sim seeds 104, 154, 528).
// Work a sleeping fleet leaves is the liveness invariant's concern.
func (w *world) readCursors() []cursor {
	var f shards.Fleet
	if body, ok := w.srv.Objects(shards.FleetKey)[shards.FleetKey]; ok && json.Unmarshal(body, &f) == nil && f.Asleep {
		return nil
	}
	w.mu.Lock()
	var wks []*proc
	for _, p := range w.procs {
		if p.wk != nil && p.h.state.Load() == stateAlive {
			wks = append(wks, p)
		}
	}
	w.mu.Unlock()
	sort.Slice(wks, func(i, j int) bool { return wks[i].name < wks[j].name })
	var out []cursor
	for _, p := range wks {
		member, a := p.wk.Member()
		if !member {
			continue
		}
		at := p.wk.ScanCursors()
		for _, s := range a.Own {
			if c, ok := at[s]; ok {
				out = append(out, cursor{worker: p.name, shard: s, at: c})
			}
		}
	}
	return out
}

// readDeadMembers lists the fleet entries and lease objects, at the end of
// the quiet tail, of workers that are not alive: every death was at least
// the quiet tail ago, long enough for any keeper or root member to prune
// the entry and delete the lease.
func (w *world) readDeadMembers() []string {
	alive := make(map[string]bool)     // worker ids
	dedicated := make(map[string]bool) // worker ids of live dedicated processes
	w.mu.Lock()
	for _, p := range w.procs {
		if p.kind == "w" && p.h.state.Load() == stateAlive {
			alive[p.id] = true
			// Only a process whose worker opened runs as configured: a
			// later process of a direct worker's id, refused while the
			// earlier one still holds the id's lease, retries opening
			// and never runs. The id's worker is the earlier process,
			// dedicated or not by its own draw.
			if w.dedicated[p.name] && p.wk != nil {
				dedicated[p.id] = true
			}
		}
	}
	w.mu.Unlock()
	var out []string
	objs := w.srv.Objects("")
	var f shards.Fleet
	if body, ok := objs[shards.FleetKey]; ok && json.Unmarshal(body, &f) == nil {
		listed := make(map[string]bool)
		for _, m := range f.Members {
			if !alive[m.ID] {
				out = append(out, fmt.Sprintf("%s lists %s (leased %v, expires %s), which is not alive", shards.FleetKey, m.ID, m.Leased, m.ExpiresAt.Format("15:04:05")))
			}
			listed[m.ID] = m.ExpiresAt.After(time.Now())
		}
		var names []string
		for name := range alive {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if dedicated[name] && !listed[name] {
				out = append(out, fmt.Sprintf("dedicated worker %s is alive but not a live member of %s", name, shards.FleetKey))
			}
		}
	}
	var keys []string
	for k := range objs {
		if strings.HasPrefix(k, shards.LeasePrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		_, id, _ := strings.Cut(strings.TrimPrefix(k, shards.LeasePrefix), "/")
		if !alive[id] {
			out = append(out, fmt.Sprintf("lease object %s of a worker that is not alive", k))
		}
	}
	return out
}

// readDirect returns the inbox and overflow entries and the worker leases
// at the end of the quiet tail (direct dispatch), before the clean stops
// move the live workers' inboxes.
func (w *world) readDirect() map[string][]byte {
	out := w.srv.Objects(direct.InboxPrefix)
	for _, prefix := range []string{direct.OverflowPrefix, direct.WorkersPrefix} {
		for k, v := range w.srv.Objects(prefix) {
			out[k] = v
		}
	}
	return out
}

// restoreFleet makes sure the quiet tail has the planned number of live
// workers and monitors.
func (w *world) restoreFleet() {
	count := func(kind string) int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, p := range w.procs {
			select {
			case <-p.done:
				continue
			default:
			}
			if p.kind == kind && p.h.state.Load() == stateAlive {
				n++
			}
		}
		return n
	}
	for n := count("w"); n < w.plan.Workers; n++ {
		w.startWorker()
	}
	for n := count("m"); n < w.plan.Monitors; n++ {
		w.startMonitor()
	}
}

// stopAll stops every process cleanly, in name order.
func (w *world) stopAll() {
	w.mu.Lock()
	var all []*proc
	for _, p := range w.procs {
		all = append(all, p)
	}
	w.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, p := range all {
		p.cancel()
	}
	for _, p := range all {
		<-p.done
	}
}

// reshard runs the planned reshards, each as its own process (the
// `s3queue reshard` command), which an operator runs again until it
// succeeds, unless it was killed.
func (w *world) reshard() {
	start := time.Now()
	for i, r := range w.plan.Reshards {
		time.Sleep(time.Until(start.Add(r.At)))
		p := w.spawn("r", fmt.Sprintf("r%d", i+1), func(ctx context.Context, p *proc) {
			var st s3store.Store = p.h
			if r.Crash {
				st = crashAfterManifest{p.h}
			}
			for ctx.Err() == nil && !p.h.crashed() {
				// ErrShrink: the workers' automatic reshard grew the
				// queue past r.To meanwhile, which is as good.
				if _, err := shards.Reshard(ctx, st, r.To); err == nil || errors.Is(err, shards.ErrShrink) {
					return
				}
				time.Sleep(time.Second)
			}
		})
		<-p.done
	}
}

// finishReshard runs the last planned reshard again at the start of the
// quiet tail if a resharder was killed, as its operator would: it raises
// the fleet's count if no member has yet.
func (w *world) finishReshard() {
	crashed := false
	for _, r := range w.plan.Reshards {
		crashed = crashed || r.Crash
	}
	if !crashed {
		return
	}
	p := w.spawn("r", "rfinish", func(ctx context.Context, p *proc) {
		for ctx.Err() == nil {
			n := w.plan.finalShards()
			if m, err := shards.ReadManifest(ctx, p.h); err == nil {
				n = max(n, m.Shards) // an automatic reshard may have grown it further
			}
			if _, err := shards.Reshard(ctx, p.h, n); err == nil {
				return
			}
			time.Sleep(time.Second)
		}
	})
	<-p.done
}

// crashAfterManifest is a resharder's store that kills its process the
// moment its manifest write succeeds: the fleet's count is left behind.
type crashAfterManifest struct{ *Handle }

func (c crashAfterManifest) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := c.Handle.Put(ctx, key, body, opts)
	if err == nil && key == shards.ManifestKey {
		c.Handle.Crash()
	}
	return etag, err
}

// surge starts more workers than the queue has shards, a second apart,
// and later makes some of them leave, killed or stopped.
func (w *world) surge() {
	rng := rand.New(rand.NewPCG(w.plan.Seed, 0x5e26e))
	s := w.plan.Surge
	start := time.Now()
	time.Sleep(s.At)
	var joined []*proc
	for range s.Join {
		joined = append(joined, w.startWorker())
		time.Sleep(time.Second)
	}
	time.Sleep(time.Until(start.Add(s.LeaveAt)))
	for _, i := range rng.Perm(len(joined))[:s.Leave] {
		p := joined[i]
		if rng.IntN(2) == 0 {
			p.h.Crash()
			p.cancel()
		} else {
			p.cancel()
			<-p.done
		}
	}
}
